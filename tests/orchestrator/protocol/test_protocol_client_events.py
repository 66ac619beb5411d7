"""Every client event of docs/protocol.md parses into its typed struct (GA and beta spellings)."""

from __future__ import annotations

import pytest

from orchestrator.protocol.client import (
    CLIENT_EVENT_TYPES,
    ConversationContextRetrieve,
    ConversationItemCreate,
    ConversationItemDelete,
    ConversationItemRetrieve,
    ConversationItemTruncate,
    InputAudioBufferAppend,
    InputAudioBufferClear,
    InputAudioBufferCommit,
    OutputAudioBufferClear,
    PlaybackAck,
    ResponseCancel,
    ResponseCreate,
    ResponseParams,
    SessionUpdate,
)
from orchestrator.protocol.codec import decode_client_event
from orchestrator.protocol.items import (
    InputAudio,
    InputImage,
    InputText,
    MessageItem,
    OutputAudio,
    OutputText,
)
from orchestrator.protocol.session_config import PCM16, PCMU
from tests.orchestrator.protocol.protocol_helpers import PCM_20MS, PNG_URL, b64, parse, reject


def test_contract_client_event_names_are_all_known() -> None:
    assert CLIENT_EVENT_TYPES == {
        "session.update",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "conversation.item.create",
        "conversation.item.retrieve",
        "conversation.item.delete",
        "conversation.item.truncate",
        "response.create",
        "response.cancel",
        "output_audio_buffer.clear",
        "playback.ack",
        "conversation.context.retrieve",
        # v2, session resume
        "session.resume",
        "session.event_ack",
    }


def test_append_decodes_base64_audio_to_bytes_at_parse_time() -> None:
    ev = parse({"type": "input_audio_buffer.append", "event_id": "e1", "audio": b64(PCM_20MS)})
    assert ev == InputAudioBufferAppend(event_id="e1", audio=PCM_20MS)


def test_append_accepts_bytes_and_str_input_alike() -> None:
    raw = '{"type":"input_audio_buffer.append","audio":"' + b64(PCM_20MS) + '"}'
    assert decode_client_event(raw) == decode_client_event(raw.encode())


def test_event_id_is_optional_on_every_client_event() -> None:
    assert parse({"type": "input_audio_buffer.clear"}) == InputAudioBufferClear(event_id=None)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({}, InputAudioBufferCommit()),
        ({"create_response": True}, InputAudioBufferCommit(create_response=True)),
        ({"final": False}, InputAudioBufferCommit(final=False)),
        (
            {"final": True, "create_response": False},
            InputAudioBufferCommit(final=True, create_response=False),
        ),
    ],
)
def test_commit_carries_vllm_omni_create_response_and_final(
    payload: dict[str, object], expected: InputAudioBufferCommit
) -> None:
    assert parse({"type": "input_audio_buffer.commit", **payload}) == expected


def test_item_retrieve_delete_truncate_parse() -> None:
    assert parse({"type": "conversation.item.retrieve", "item_id": "a"}) == (
        ConversationItemRetrieve(item_id="a")
    )
    assert parse({"type": "conversation.item.delete", "item_id": "a"}) == (
        ConversationItemDelete(item_id="a")
    )
    assert parse(
        {
            "type": "conversation.item.truncate",
            "event_id": "t",
            "item_id": "a",
            "content_index": 0,
            "audio_end_ms": 1500,
        }
    ) == ConversationItemTruncate(event_id="t", item_id="a", content_index=0, audio_end_ms=1500)


def test_response_cancel_and_output_audio_buffer_clear_take_optional_response_id() -> None:
    assert parse({"type": "response.cancel"}) == ResponseCancel()
    assert parse({"type": "response.cancel", "response_id": "r"}) == ResponseCancel(response_id="r")
    assert parse({"type": "output_audio_buffer.clear"}) == OutputAudioBufferClear()
    assert parse({"type": "output_audio_buffer.clear", "response_id": "r"}) == (
        OutputAudioBufferClear(response_id="r")
    )


def test_response_create_ga_params() -> None:
    ev = parse(
        {
            "type": "response.create",
            "response": {
                "output_modalities": ["text"],
                "instructions": "short",
                "max_output_tokens": 64,
                "conversation": "none",
                "metadata": {"topic": "x"},
            },
        }
    )
    assert ev == ResponseCreate(
        response=ResponseParams(
            output_modalities=("text",),
            instructions="short",
            max_output_tokens=64,
            conversation="none",
            metadata={"topic": "x"},
        )
    )


def test_response_create_without_params_and_with_beta_spellings() -> None:
    assert parse({"type": "response.create"}) == ResponseCreate(response=None)
    ev = parse(
        {
            "type": "response.create",
            "response": {"modalities": ["text", "audio"], "max_response_output_tokens": "inf"},
        }
    )
    assert ev == ResponseCreate(
        response=ResponseParams(output_modalities=("audio",), max_output_tokens="inf")
    )


def test_playback_ack_extension_parses() -> None:
    ev = parse(
        {
            "type": "playback.ack",
            "event_id": "p",
            "response_id": "r",
            "item_id": "i",
            "played_ms": 1200,
            "committed_ms": 1000,
            "truncate": True,
        }
    )
    assert ev == PlaybackAck(
        event_id="p",
        response_id="r",
        item_id="i",
        played_ms=1200,
        committed_ms=1000,
        truncate=True,
    )
    assert parse({"type": "playback.ack", "response_id": "r", "played_ms": 0}) == PlaybackAck(
        response_id="r", played_ms=0
    )


def test_playback_ack_input_ms_is_kept_exact_and_a_negative_one_refused() -> None:
    """playback.ack extension: `input_ms` places the cursor on the input timeline (the echo's
    reference); samples / 24 keep their fraction."""
    ev = parse({"type": "playback.ack", "response_id": "r", "played_ms": 5, "input_ms": 20.5})
    assert isinstance(ev, PlaybackAck) and ev.input_ms == 20.5
    with pytest.raises(Exception, match="input_ms"):
        parse({"type": "playback.ack", "response_id": "r", "played_ms": 5, "input_ms": -1})


@pytest.mark.parametrize(
    ("played", "committed", "want"),
    [
        (1234.9, 1000.5, (1234, 1000)),
        (1234.0, None, (1234, None)),
        (0.999, 0.0, (0, 0)),
        (-0.0, None, (0, None)),  # JSON's -0 is zero, not a negative cursor
        (41.666666666666664, 20.833333333333332, (41, 20)),  # 1000 and 500 samples / 24
    ],
)
def test_playback_ack_fractional_ms_are_floored_at_the_edge(
    played: float, committed: float | None, want: tuple[int, int | None]
) -> None:
    """playback.ack extension: a client counting samples sends `samples / 24`; the server
    floors (never rounds up: a cursor must not claim unplayed audio) and the core sees ints."""
    obj: dict[str, object] = {"type": "playback.ack", "response_id": "r", "played_ms": played}
    if committed is not None:
        obj["committed_ms"] = committed
    ev = parse(obj)
    assert isinstance(ev, PlaybackAck)
    assert (ev.played_ms, ev.committed_ms) == want
    assert type(ev.played_ms) is int
    assert ev.committed_ms is None or type(ev.committed_ms) is int


def test_playback_ack_whole_ms_stay_exact_ints() -> None:
    """playback.ack extension: integers are not routed through float (no rounding of big ones)."""
    big = 2**53 + 1
    ev = parse({"type": "playback.ack", "response_id": "r", "played_ms": big, "committed_ms": 7})
    assert isinstance(ev, PlaybackAck)
    assert (ev.played_ms, ev.committed_ms) == (big, 7)


def test_playback_ack_exponent_notation_is_a_number_too() -> None:
    """playback.ack extension: `1.5e3` is JSON for 1500.0 ms."""
    raw = '{"type": "playback.ack", "response_id": "r", "played_ms": 1.5e3}'
    ev = decode_client_event(raw)
    assert isinstance(ev, PlaybackAck) and ev.played_ms == 1500


def test_conversation_context_retrieve_extension_parses() -> None:
    assert parse({"type": "conversation.context.retrieve", "event_id": "c"}) == (
        ConversationContextRetrieve(event_id="c")
    )


def test_session_update_parses_to_a_session_patch() -> None:
    ev = parse({"type": "session.update", "session": {"instructions": "hi"}})
    assert isinstance(ev, SessionUpdate)
    assert ev.session.instructions == "hi"


def test_unknown_extra_fields_are_ignored_like_openai() -> None:
    ev = parse(
        {
            "type": "conversation.item.delete",
            "item_id": "a",
            "client_extra": {"nested": [1, 2, 3]},
        }
    )
    assert ev == ConversationItemDelete(item_id="a")


# --- conversation.item.create -----------------------------------------------------------


def test_user_item_with_text_audio_and_image() -> None:
    ev = parse(
        {
            "type": "conversation.item.create",
            "event_id": "c1",
            "previous_item_id": "root",
            "item": {
                "type": "message",
                "id": "u1",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {"type": "input_audio", "audio": b64(PCM_20MS), "transcript": "hey"},
                    {"type": "input_image", "image_url": PNG_URL},
                ],
            },
        }
    )
    assert ev == ConversationItemCreate(
        event_id="c1",
        previous_item_id="root",
        item=MessageItem(
            id="u1",
            role="user",
            content=(
                InputText(text="look"),
                InputAudio(audio=PCM_20MS, transcript="hey"),
                InputImage(image_url=PNG_URL),
            ),
        ),
    )


def test_assistant_item_with_output_text_and_audio() -> None:
    ev = parse(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "hello"},
                    {"type": "output_audio", "transcript": "hello"},
                ],
            },
        }
    )
    assert isinstance(ev, ConversationItemCreate)
    assert ev.item.content == (OutputText(text="hello"), OutputAudio(transcript="hello"))


@pytest.mark.parametrize(
    ("role", "beta", "expected"),
    [
        ("user", {"type": "text", "text": "x"}, InputText(text="x")),
        ("system", {"type": "text", "text": "x"}, InputText(text="x")),
        ("assistant", {"type": "text", "text": "x"}, OutputText(text="x")),
        ("assistant", {"type": "audio", "transcript": "x"}, OutputAudio(transcript="x")),
        ("user", {"type": "audio", "audio": b64(b"\0\0")}, InputAudio(audio=b"\0\0")),
    ],
)
def test_beta_content_spellings_are_normalized_by_role(
    role: str, beta: dict[str, str], expected: object
) -> None:
    ev = parse(
        {
            "type": "conversation.item.create",
            "item": {"type": "message", "role": role, "content": [beta]},
        }
    )
    assert isinstance(ev, ConversationItemCreate)
    assert ev.item.content == (expected,)


def test_item_without_type_defaults_to_message() -> None:
    ev = parse(
        {
            "type": "conversation.item.create",
            "item": {"role": "user", "content": [{"type": "input_text", "text": "x"}]},
        }
    )
    assert isinstance(ev, ConversationItemCreate)
    assert ev.item.role == "user"


@pytest.mark.parametrize(
    ("role", "part"),
    [
        ("user", {"type": "output_text", "text": "x"}),
        ("system", {"type": "input_audio", "audio": ""}),
        ("assistant", {"type": "input_text", "text": "x"}),
    ],
)
def test_content_type_not_allowed_for_role_is_invalid_value(
    role: str, part: dict[str, str]
) -> None:
    err = reject(
        {
            "type": "conversation.item.create",
            "event_id": "c",
            "item": {"type": "message", "role": role, "content": [part]},
        }
    )
    assert (err.code, err.param, err.event_id) == ("invalid_value", "item.content[0].type", "c")


def test_odd_length_item_audio_is_fine_for_g711_sessions() -> None:
    ev = parse(
        {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_audio", "audio": b64(b"\x7f\x7f\x7f")}],
            },
        },
        input_audio_format=PCMU,
    )
    assert isinstance(ev, ConversationItemCreate)


def test_odd_length_append_is_fine_for_g711_sessions() -> None:
    ev = parse(
        {"type": "input_audio_buffer.append", "audio": b64(b"\xff")}, input_audio_format=PCMU
    )
    assert ev == InputAudioBufferAppend(audio=b"\xff")
    # ...and the default is the session default, pcm16.
    assert reject({"type": "input_audio_buffer.append", "audio": b64(b"\xff")}).code == (
        "invalid_audio_length"
    )
    assert PCM16.type == "audio/pcm"
