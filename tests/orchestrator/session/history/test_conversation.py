"""Rule 6 (turns and pruning) and the `conversation.context` view."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.session.history.conversation import (
    Content,
    Conversation,
    DuplicateItemId,
    HistoryLimits,
    InputAudio,
    InputImage,
    InputText,
    Item,
    ItemNotFound,
    OutputAudio,
    OutputText,
    Role,
    Turn,
    context_json,
)

SECOND = b"\x00\x01" * 24_000  # one second of pcm16 24 kHz mono


def user_audio(item_id: str, audio: bytes = SECOND) -> Item:
    return Item(item_id, "user", (InputAudio(audio),))


def user_text(item_id: str, text: str) -> Item:
    return Item(item_id, "user", (InputText(text),))


def user_image(item_id: str, url: str = "data:image/png;base64,AAAA") -> Item:
    return Item(item_id, "user", (InputImage(url),))


def reply(item_id: str, text: str = "ok") -> Item:
    return Item(item_id, "assistant", (OutputAudio(text, 500),), response_id=f"resp_{item_id}")


def ids(items: tuple[Item, ...]) -> list[str]:
    return [item.id for item in items]


def audio_session(conv: Conversation, turns: int) -> None:
    for n in range(turns):
        conv.add(user_audio(f"u{n}"))
        conv.add(reply(f"a{n}"))


# --- items and identity -------------------------------------------------------------------


def test_rule6_removal_by_id_not_equal_content() -> None:
    conv = Conversation()
    first = conv.add(user_text("u1", "same words"))
    conv.add(reply("a1"))
    second = conv.add(user_text("u2", "same words"))
    assert first.content == second.content

    conv.delete("u2")

    assert ids(conv.items) == ["u1", "a1"]
    assert conv.get("u1") is first
    assert "u2" not in conv


def test_rule6_pruning_removes_by_id_when_contents_are_equal() -> None:
    conv = Conversation(HistoryLimits(max_audio_inputs=1))
    conv.add(user_audio("old"))
    conv.add(reply("a_old", "same"))
    conv.add(user_audio("new"))  # same audio bytes as the evicted turn

    assert conv.prune() == ("old", "a_old")
    assert ids(conv.items) == ["new"]


def test_add_inserts_after_previous_item_or_first_with_root() -> None:
    conv = Conversation()
    conv.add(user_text("b", "b"))
    conv.add(user_text("a", "a"), previous_item_id="root")
    conv.add(user_text("c", "c"), previous_item_id="a")

    assert ids(conv.items) == ["a", "c", "b"]
    assert len(conv) == 3


def test_unknown_and_duplicate_ids_are_reported_with_the_id() -> None:
    conv = Conversation()
    conv.add(user_text("u1", "hi"))

    with pytest.raises(DuplicateItemId) as dup:
        conv.add(user_text("u1", "again"))
    with pytest.raises(ItemNotFound) as missing_prev:
        conv.add(user_text("u2", "x"), previous_item_id="nope")
    with pytest.raises(ItemNotFound) as missing_delete:
        conv.delete("ghost")

    assert dup.value.item_id == "u1"
    assert missing_prev.value.item_id == "nope"
    assert missing_delete.value.item_id == "ghost"
    assert ids(conv.items) == ["u1"]  # nothing lost by the failed calls


# --- turns and reply slots ----------------------------------------------------------------


def test_rule6_turn_is_user_run_plus_reply_and_leading_assistant_stands_alone() -> None:
    conv = Conversation()
    conv.add(reply("greeting"))
    conv.add(user_image("img"))
    conv.add(user_audio("u1"))
    conv.add(reply("a1"))
    conv.add(Item("sys", "system", (InputText("be brief"),)))
    conv.add(user_text("u2", "and now?"))

    assert [ids(t.items) for t in conv.turns()] == [
        ["greeting"],
        ["img", "u1", "a1"],
        ["sys", "u2"],
    ]


def test_rule5_empty_boundary_keeps_two_user_turns_apart() -> None:
    conv = Conversation()
    conv.add(user_audio("u1"))
    slot = conv.open_reply("a1", "resp_1")
    conv.add(user_audio("u2"))

    assert slot.is_empty_boundary and slot.response_id == "resp_1"
    assert [ids(t.items) for t in conv.turns()] == [["u1", "a1"], ["u2"]]
    payload = context_json(conv.prompt_view())
    boundary = {"id": "a1", "type": "message", "role": "assistant", "content": []}
    assert payload["items"][1] == boundary


def test_rule5_fill_reply_keeps_slot_position_after_newer_turns() -> None:
    conv = Conversation()
    conv.add(user_audio("u1"))
    conv.open_reply("a1", "resp_1")
    conv.add(user_audio("u2"))
    conv.open_reply("a2", "resp_2")

    filled = conv.fill_reply("a1", (OutputAudio("hello there", 1200),))

    assert ids(conv.items) == ["u1", "a1", "u2", "a2"]
    assert conv.get("a1") == filled and not filled.is_empty_boundary
    assert filled.response_id == "resp_1"
    with pytest.raises(ItemNotFound):
        conv.fill_reply("gone", (OutputText("x"),))


# --- pruning ------------------------------------------------------------------------------


def test_rule6_max_audio_inputs_counts_the_current_one() -> None:
    conv = Conversation()  # default: 4 audio inputs
    audio_session(conv, 5)
    conv.add(user_audio("u5"))

    view = conv.prompt_view()

    assert view.audio_inputs == 4
    assert ids(view.items) == ["u2", "a2", "u3", "a3", "u4", "a4", "u5"]


def test_rule6_evicting_turn_audio_removes_its_images_and_reply() -> None:
    conv = Conversation(HistoryLimits(max_audio_inputs=2))
    conv.add(user_image("img0"))
    conv.add(user_text("t0", "look at this"))
    conv.add(user_audio("u0"))
    conv.add(reply("a0"))
    conv.add(user_audio("u1"))
    conv.add(reply("a1"))
    conv.add(user_audio("u2"))

    view = conv.prompt_view()

    assert ids(view.items) == ["u1", "a1", "u2"]
    assert view.images == 0
    assert conv.prune() == ("img0", "t0", "u0", "a0")


def test_rule6_image_limit_evicts_whole_oldest_turns() -> None:
    conv = Conversation(HistoryLimits(max_images=2))
    for n in range(3):
        conv.add(user_image(f"img{n}"))
        conv.add(user_text(f"q{n}", "what is this?"))
        conv.add(reply(f"a{n}"))
    conv.add(user_text("now", "thanks"))

    view = conv.prompt_view()

    assert view.images == 2
    assert ids(view.items)[0] == "img1"
    assert ids(view.items)[-1] == "now"


def test_rule6_byte_limit_evicts_oldest_turns_until_it_holds() -> None:
    conv = Conversation(HistoryLimits(max_audio_inputs=100, max_history_bytes=3 * len(SECOND)))
    audio_session(conv, 5)
    conv.add(user_audio("u5"))

    view = conv.prompt_view()

    assert view.bytes <= 3 * len(SECOND)
    assert ids(view.items) == ["u4", "a4", "u5"]


def test_rule6_current_input_always_last() -> None:
    # The current input alone is over every limit and a reply to it is in progress: it is kept,
    # its reply slot stays after it, and everything older goes.
    limits = HistoryLimits(max_audio_inputs=1, max_history_bytes=10, max_images=0)
    conv = Conversation(limits)
    audio_session(conv, 3)
    conv.add(user_image("img"))
    conv.add(user_audio("current"))
    conv.open_reply("slot", "resp_now")

    view = conv.prompt_view()

    assert ids(view.items) == ["img", "current", "slot"]
    user_items = [item for item in view.items if item.role == "user"]
    assert user_items[-1].id == "current"
    assert conv.prune() == ("u0", "a0", "u1", "a1", "u2", "a2")
    assert ids(conv.items) == ["img", "current", "slot"]


def test_rule6_prompt_view_is_pure_and_prune_matches_it() -> None:
    conv = Conversation(HistoryLimits(max_audio_inputs=2))
    audio_session(conv, 4)
    conv.add(user_audio("u4"))
    before = conv.items

    view = conv.prompt_view()

    assert conv.items == before
    assert conv.prompt_view() == view
    conv.prune()
    assert conv.items == view.items
    assert conv.prompt_view() == view
    assert conv.prune() == ()


def test_rule6_long_session_stays_bounded() -> None:
    conv = Conversation()
    for n in range(3000):
        conv.add(user_audio(f"u{n}", b"\x00" * 960))
        conv.open_reply(f"a{n}", f"resp_{n}")
        conv.prune()

    assert len(conv) == 8  # four turns of user audio + reply slot
    assert ids(conv.items)[-2:] == ["u2999", "a2999"]


# --- conversation.context payload ---------------------------------------------------------


def test_context_payload_lists_items_in_order_without_audio_bytes() -> None:
    conv = Conversation()
    conv.add(Item("u1", "user", (InputAudio(SECOND, "hello"), InputImage("data:image/png;x"))))
    conv.add(Item("a1", "assistant", (OutputAudio("hi!", 700),), response_id="r1"))
    conv.add(Item("a2", "assistant", (OutputText("typed"),)))
    conv.add(user_text("u2", "héllo"))

    payload = context_json(conv.prompt_view())

    assert payload == {
        "items": [
            {
                "id": "u1",
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_audio", "transcript": "hello", "audio_bytes": len(SECOND)},
                    {"type": "input_image", "image_url": "data:image/png;x"},
                ],
            },
            {
                "id": "a1",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_audio", "transcript": "hi!", "audio_ms": 700}],
            },
            {
                "id": "a2",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "typed"}],
            },
            {
                "id": "u2",
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "héllo"}],
            },
        ],
        "audio_inputs": 1,
        "images": 1,
        "bytes": len(SECOND) + len("data:image/png;x") + 3 + 5 + len("héllo".encode()),
    }
    assert len(json.dumps(payload)) < 1000  # the audio itself never travels


# --- property: pruning invariants ---------------------------------------------------------

contents: st.SearchStrategy[Content] = st.one_of(
    st.builds(InputText, st.text(max_size=30)),
    st.builds(InputAudio, st.binary(max_size=60)),
    st.builds(InputImage, st.text(min_size=1, max_size=20)),
)
reply_contents: st.SearchStrategy[Content] = st.one_of(
    st.builds(OutputText, st.text(max_size=30)),
    st.builds(OutputAudio, st.one_of(st.none(), st.text(max_size=30)), st.integers(0, 5000)),
)
roles: st.SearchStrategy[Role] = st.sampled_from(["user", "user", "system", "assistant"])


@st.composite
def conversations(draw: st.DrawFn) -> Conversation:
    limits = HistoryLimits(
        max_audio_inputs=draw(st.integers(1, 4)),
        max_history_bytes=draw(st.integers(1, 300)),
        max_images=draw(st.integers(0, 4)),
    )
    conv = Conversation(limits)
    for n in range(draw(st.integers(0, 30))):
        role = draw(roles)
        parts = reply_contents if role == "assistant" else contents
        conv.add(Item(f"i{n}", role, tuple(draw(st.lists(parts, max_size=3)))))
    return conv


def over_limits(turns: tuple[Turn, ...], limits: HistoryLimits) -> bool:
    return (
        sum(t.has_audio_input for t in turns) > limits.max_audio_inputs
        or sum(t.images for t in turns) > limits.max_images
        or sum(t.size_bytes for t in turns) > limits.max_history_bytes
    )


@settings(max_examples=300, deadline=None)
@given(conversations())
def test_rule6_property_pruning_keeps_whole_turns_and_current_input(conv: Conversation) -> None:
    turns = conv.turns()
    before = conv.items
    view = conv.prompt_view()

    # Whole turns only, oldest first: the view is a tail of the turn list.
    tails = [tuple(item for t in turns[k:] for item in t.items) for k in range(len(turns) + 1)]
    assert view.items in tails
    evicted = tails.index(view.items)
    kept_turns = turns[evicted:]

    # The current user input is present and no user input follows it.
    user_ids = [item.id for item in before if item.role == "user"]
    if user_ids:
        assert user_ids[-1] == [item.id for item in view.items if item.role == "user"][-1]
    if turns:
        assert view.items, "the newest turn is never evicted"

    # Limits hold unless only protected turns remain; eviction stops as soon as they hold.
    current = max((k for k, t in enumerate(turns) if t.has_user_input), default=len(turns) - 1)
    if evicted < current:
        assert not over_limits(kept_turns, conv.limits)
    if evicted > 0:
        assert over_limits(turns[evicted - 1 :], conv.limits)

    assert view.audio_inputs == sum(t.has_audio_input for t in kept_turns)
    assert view.images == sum(t.images for t in kept_turns)
    assert view.bytes == sum(t.size_bytes for t in kept_turns)

    # prompt_view is pure; prune applies exactly the same eviction.
    assert conv.items == before
    removed = conv.prune()
    assert removed == tuple(ids(before)[: len(before) - len(view.items)])
    assert conv.items == view.items
    assert conv.prompt_view() == view


# --- truncation (OpenAI's session.truncation) ----------------------------------------------


def test_rule6_retention_ratio_cuts_to_that_fraction_of_the_limits_at_once() -> None:
    auto = Conversation(HistoryLimits(max_audio_inputs=4))
    ratio = Conversation(HistoryLimits(max_audio_inputs=4))
    ratio.retention = 0.5
    for conv in (auto, ratio):
        audio_session(conv, 4)
        assert conv.prune() == ()  # within the limits: nothing cut either way
        conv.add(user_audio("u4"))
    assert list(auto.prune()) == ["u0", "a0"]  # "auto": just under the limit
    assert list(ratio.prune()) == ["u0", "a0", "u1", "a1", "u2", "a2"]  # down to 2 of 4
    ratio.add(reply("a4"))
    ratio.add(user_audio("u5"))
    assert ratio.prune() == ()  # 3 of 4: under the limit, so no cut until it is over again
