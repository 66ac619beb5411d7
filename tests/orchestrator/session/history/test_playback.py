"""Rule 5 (history follows what was heard): the playback ledger, alone and with the history."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.session.history.conversation import (
    Conversation,
    InputAudio,
    Item,
    OutputAudio,
    context_json,
)
from orchestrator.session.history.playback import (
    AckResult,
    Heard,
    PlaybackItemMismatch,
    PlaybackItemNotFound,
    PlaybackLedger,
    Segment,
)


def generated(ledger: PlaybackLedger, rid: str, chunks: list[tuple[int, str]]) -> None:
    ledger.open(rid, f"item_{rid}")
    for audio_ms, text in chunks:
        ledger.append(rid, audio_ms, text)


ALIGNED = [(400, "Hello "), (300, "there, "), (500, "friend.")]  # 1200 ms


def test_rule5_full_ack_commits_only_after_generation_finished() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", ALIGNED)

    early = ledger.ack("r1", 1200)
    assert (early.history_committed, early.committed_ms, early.heard) == (False, 0, None)
    assert ledger.finish("r1") == Heard(1200, "Hello there, friend.", True)

    late = ledger.ack("r1", 1200)
    assert late.history_committed and late.committed_ms == 1200 and late.heard is None


def test_rule5_full_ack_after_finish_commits_whole_reply() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", ALIGNED)
    assert ledger.finish("r1") is None

    partial = ledger.ack("r1", 600, item_id="item_r1")
    full = ledger.ack("r1", 1200, item_id="item_r1")

    assert partial == AckResult("r1", "item_r1", 600, 0, False, None)
    heard = Heard(1200, "Hello there, friend.", True)
    assert full == AckResult("r1", "item_r1", 1200, 1200, True, heard)
    assert ledger.fully_played("r1") and ledger.is_settled("r1")


def test_rule5_text_only_reply_is_heard_at_finish() -> None:
    ledger = PlaybackLedger()
    ledger.open("r1", "item_r1")
    ledger.set_transcript("r1", "Just text.")

    assert ledger.finish("r1") == Heard(0, "Just text.", True)
    assert ledger.finish("r1") is None  # committed once


def test_rule5_cut_keeps_only_text_aligned_with_heard_audio() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", ALIGNED)
    ledger.finish("r1")

    assert ledger.cut("r1", 800) == Heard(800, "Hello there, ", False)


def test_rule5_cut_drops_text_when_not_aligned_with_audio() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", [(400, ""), (800, "")])
    ledger.set_transcript("r1", "Hello there, friend.")
    ledger.finish("r1")

    assert ledger.cut("r1", 700) == Heard(700, "", False)


def test_rule5_cut_past_the_end_of_finished_audio_is_full() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", [(400, ""), (800, "")])
    ledger.set_transcript("r1", "Hello there, friend.")
    ledger.finish("r1")

    assert ledger.cut("r1", 5000) == Heard(1200, "Hello there, friend.", True)


def test_rule5_truncate_never_undone_by_later_ack() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", ALIGNED)
    ledger.ack("r1", 500)
    cut = ledger.ack("r1", 700, truncate=True)
    ledger.finish("r1")

    later = ledger.ack("r1", 1200)
    assert cut.heard == Heard(700, "Hello there, ", False)
    assert (later.history_committed, later.committed_ms, later.heard) == (True, 700, None)
    assert ledger.cut("r1", 1200) == cut.heard  # nor by another truncate
    assert ledger.append("r1", 100, "late") == Segment(1200, 1200, "")  # nor by late audio
    assert ledger.heard("r1") == cut.heard and not ledger.fully_played("r1")


def test_rule5_clear_cuts_at_played_cursor_and_releases_pending_audio() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", ALIGNED)
    ledger.finish("r1")
    ledger.ack("r1", 450)
    assert ledger.pending_audio("r1")

    assert ledger.clear("r1", now_ms=0) == Heard(450, "Hello ", False)
    assert not ledger.pending_audio("r1")
    assert ledger.ack("r1", 1200, now_ms=ledger.ack_grace_ms).committed_ms == 450


def test_rule5_clear_before_anything_played_leaves_empty_reply() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", ALIGNED)

    assert ledger.clear("r1") == Heard(0, "", False)


def test_rule5_backwards_cursor_ignored_and_overshoot_clamped() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", ALIGNED)

    assert ledger.ack("r1", 900).played_ms == 900
    assert ledger.ack("r1", 300).played_ms == 900
    assert ledger.ack("r1", 99_999).played_ms == 1200
    assert ledger.played_ms("r1") == 1200 and ledger.generated_ms("r1") == 1200


def test_rule5_ack_errors_name_the_response() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", ALIGNED)

    with pytest.raises(PlaybackItemNotFound) as missing:
        ledger.ack("nope", 10)
    with pytest.raises(PlaybackItemMismatch) as mismatch:
        ledger.ack("r1", 10, item_id="someone_else")

    assert missing.value.response_id == "nope"
    assert (mismatch.value.response_id, mismatch.value.item_id) == ("r1", "someone_else")
    assert ledger.played_ms("r1") == 0  # a rejected ACK changes nothing


def test_rule5_truncate_by_item_id() -> None:
    ledger = PlaybackLedger()
    generated(ledger, "r1", ALIGNED)

    assert ledger.cut_by_item("item_r1", 400) == Heard(400, "Hello ", False)
    assert ledger.cut_by_item("client_made_item", 400) is None


def test_rule5_late_full_ack_fills_slot_in_place() -> None:
    conv = Conversation()
    ledger = PlaybackLedger()
    conv.add(Item("u1", "user", (InputAudio(b"\x00" * 480),)))
    conv.open_reply("a1", "r1")
    generated(ledger, "r1", [(600, "Sure, "), (600, "here it is.")])
    ledger.finish("r1")
    # The user speaks again before the client reports playback.
    conv.add(Item("u2", "user", (InputAudio(b"\x00" * 480),)))
    conv.open_reply("a2", "r2")
    boundary = context_json(conv.prompt_view())["items"][1]
    assert boundary == {"id": "a1", "type": "message", "role": "assistant", "content": []}

    result = ledger.ack("r1", 1200, item_id="item_r1")
    assert result.heard is not None
    conv.fill_reply("a1", (OutputAudio(result.heard.transcript, result.heard.audio_ms),))

    view = conv.prompt_view()
    assert [item.id for item in view.items] == ["u1", "a1", "u2", "a2"]
    assert view.items[1].content == (OutputAudio("Sure, here it is.", 1200),)
    assert view.items[3].is_empty_boundary


def test_rule5_ledger_memory_bounded_over_2000_responses() -> None:
    # 2,000 is 30 times the bound; each reply has its own chart (~1 ms), so more adds only time.
    ledger = PlaybackLedger(max_entries=64)
    evicted: list[str] = []
    for n in range(2_000):
        rid = f"r{n}"
        evicted += ledger.open(rid, f"item{n}")
        for _ in range(5):
            ledger.append(rid, 20)
        ledger.finish(rid)
        if n % 2:
            ledger.ack(rid, 100)
        else:
            ledger.clear(rid)

    assert len(ledger) == 64
    assert len(evicted) == 2_000 - 64
    assert "r1999" in ledger and "r0" not in ledger


def test_rule5_settled_entries_evicted_before_pending_ones() -> None:
    ledger = PlaybackLedger(max_entries=3)
    generated(ledger, "pending", [(100, "")])
    generated(ledger, "heard", [(100, "")])
    ledger.finish("heard")
    ledger.ack("heard", 100)
    generated(ledger, "other", [(100, "")])

    assert ledger.open("new", "item_new") == ("heard",)
    assert ledger.open("newer", "item_newer") == ("pending",)  # all unsettled: oldest goes
    assert "other" in ledger and len(ledger) == 3


@st.composite
def ledger_ops(draw: st.DrawFn) -> list[tuple[str, int]]:
    kinds = st.sampled_from(["append", "ack", "finish", "cut", "clear", "truncate"])
    return draw(st.lists(st.tuples(kinds, st.integers(0, 2000)), max_size=40))


@settings(max_examples=300, deadline=None)
@given(ledger_ops())
def test_rule5_property_cursor_monotonic_and_cut_final(ops: list[tuple[str, int]]) -> None:
    # A cut is final, but for the amendment: the server's clear is provisional until the
    # client's first ACK or truncate within the grace (each op here 300 ms after the last).
    ledger = PlaybackLedger()
    ledger.open("r", "item")
    finished = False
    played = 0
    cut: Heard | None = None
    grace_until: int | None = None
    now = 0
    for kind, value in ops:
        now += 300
        speaks = kind in ("ack", "cut", "truncate")
        amends = speaks and grace_until is not None and now < grace_until
        if speaks:
            grace_until = None
        if kind == "append" and not finished:
            ledger.append("r", value, "w ")
        elif kind == "ack":
            result = ledger.ack("r", value, now_ms=now)
            assert result.played_ms >= played
            played = result.played_ms
        elif kind == "finish":
            finished = True
            ledger.finish("r")
        elif kind == "cut":
            heard = ledger.cut("r", value, now_ms=now)
            cut = cut or heard
        elif kind == "clear":
            heard = ledger.clear("r", now_ms=now)
            if cut is None:
                cut, grace_until = heard, now + ledger.ack_grace_ms
        elif kind == "truncate":
            ledger.ack("r", value, truncate=True, now_ms=now)
            cut = cut or ledger.heard("r")
        if amends:
            cut = ledger.heard("r")  # the client's word set the provisional cut
        assert ledger.played_ms("r") <= ledger.generated_ms("r")
        if cut is not None:
            assert ledger.heard("r") == cut
            assert cut.audio_ms <= ledger.generated_ms("r")
        heard_now = ledger.heard("r")
        if heard_now is not None and heard_now.full:
            assert heard_now.audio_ms == ledger.generated_ms("r") and finished


def test_generated_basis_full_at_finish_then_an_estimated_cut_a_truncate_replaces() -> None:
    ledger = PlaybackLedger(basis="generated")
    ledger.open("r1", "item_r1")
    for audio_ms, text in ALIGNED:
        ledger.append("r1", audio_ms, text, now_ms=0)
    assert ledger.finish("r1", now_ms=0) == Heard(1200, "Hello there, friend.", True)
    assert ledger.pending_audio("r1", now_ms=1199) and not ledger.pending_audio("r1", 1200)
    assert ledger.clear("r1", now_ms=750) == Heard(750, "Hello there, ", False)
    assert ledger.cut("r1", 450) == Heard(450, "Hello ", False)  # the client's word
    assert ledger.clear("r1", now_ms=1000) == Heard(450, "Hello ", False)  # and final


def test_generated_basis_acknowledge_withdraws_only_what_is_still_playing() -> None:
    ledger = PlaybackLedger(basis="generated")
    for rid, at in (("r1", 0), ("r2", 5000), ("r3", 9000)):
        ledger.open(rid, f"item_{rid}")
        ledger.append(rid, 1000, "Hi.", now_ms=at)
        ledger.finish(rid, now_ms=at)
    assert ledger.played_out("r1", now_ms=2000)
    ledger.clear("r2", now_ms=5500)
    assert ledger.acknowledge("r2") == ("r3",)
    assert ledger.heard("r1") == Heard(1000, "Hi.", True)
    assert ledger.heard("r2") == Heard(500, "", False)
    assert ledger.heard("r3") is None
    assert ledger.acknowledge("r1") == ()


def test_generated_basis_acknowledge_withdraws_the_acknowledged_reply_even_played_out() -> None:
    ledger = PlaybackLedger(basis="generated")
    ledger.open("r1", "item_r1")
    ledger.append("r1", 1000, "Hi.", now_ms=0)
    ledger.finish("r1", now_ms=0)
    assert ledger.played_out("r1", now_ms=1000)
    assert ledger.acknowledge("r1") == ("r1",)  # the client's own word on it decides
    assert ledger.ack("r1", 400).history_committed is False


def test_rule5_a_backwards_truncate_ack_cuts_at_the_cursor_not_below_it() -> None:
    # Was: an ACK with `truncate` cut at its raw played_ms, so one that came out of order
    # shortened history below what an earlier ACK said was played.
    ledger = PlaybackLedger()
    generated(ledger, "r1", ALIGNED)
    ledger.ack("r1", 1000)
    result = ledger.ack("r1", 200, truncate=True)
    assert result.played_ms == 1000 and result.committed_ms == 1000


def test_rule5_a_second_clear_does_not_move_an_estimated_cut_past_the_first() -> None:
    # statecharts/playback.py rule 5: the first clear emptied the client's buffer; the playout
    # clock runs on, but nothing after that clear was heard. A later clear (the client's own
    # after a barge-in, a cancel of the same reply) once re-estimated the cut at the later
    # clock, putting words the user never heard in the history.
    ledger = PlaybackLedger(basis="generated")
    ledger.open("r1", "item_r1")
    for audio_ms, text in ALIGNED:
        ledger.append("r1", audio_ms, text, now_ms=0)
    first = ledger.clear("r1", now_ms=450)
    assert first == Heard(450, "Hello ", False)
    assert ledger.clear("r1", now_ms=1100) == first
    assert ledger.heard("r1") == first
