"""Server events encode to the OpenAI GA JSON shape; event ids are per session."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event, error_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.protocol.items import InputAudio, InputText, MessageItem, OutputAudio, OutputText
from orchestrator.protocol.response import (
    Response,
    ResponseAudio,
    ResponseAudioOutput,
    StatusDetails,
    StatusError,
    Usage,
)
from orchestrator.protocol.server import (
    SERVER_EVENT_TYPES,
    ConversationContext,
    ConversationItemAdded,
    ConversationItemDeleted,
    ConversationItemDone,
    ConversationItemInputAudioTranscriptionCompleted,
    ConversationItemInputAudioTranscriptionDelta,
    ConversationItemInputAudioTranscriptionFailed,
    ConversationItemRetrieved,
    ConversationItemTruncated,
    InputAudioBufferCleared,
    InputAudioBufferCommitted,
    InputAudioBufferSpeechStarted,
    InputAudioBufferSpeechStopped,
    InputAudioBufferTimeoutTriggered,
    OutputAudioBufferCleared,
    OutputAudioBufferPaused,
    OutputAudioBufferResumed,
    OverlapDecision,
    PlaybackAcknowledged,
    RateLimit,
    RateLimitsUpdated,
    ResponseContentPartAdded,
    ResponseContentPartDone,
    ResponseCreated,
    ResponseDone,
    ResponseOutputAudioDelta,
    ResponseOutputAudioDone,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
    ResponseOutputTextDelta,
    ResponseOutputTextDone,
    ResponsePartText,
    ServerEvent,
    SessionCreated,
    SessionUpdated,
    TranscriptionError,
    TranscriptionUsageDuration,
    response_part,
)
from orchestrator.protocol.session_config import PCM16, SessionConfig

IDS = {"response_id": "resp_1", "item_id": "item_a", "output_index": 0, "content_index": 0}


def _wire(event: ServerEvent, enc: ServerEventEncoder | None = None) -> dict[str, Any]:
    raw = (enc or ServerEventEncoder()).encode(event)
    out: dict[str, Any] = json.loads(raw)
    return out


def test_contract_server_event_names_are_all_present() -> None:
    assert SERVER_EVENT_TYPES == {
        "session.created",
        "session.updated",
        "conversation.item.added",
        "conversation.item.done",
        "conversation.item.retrieved",
        "conversation.item.deleted",
        "conversation.item.truncated",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "input_audio_buffer.cleared",
        "input_audio_buffer.timeout_triggered",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.input_audio_transcription.failed",
        "response.created",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.delta",
        "response.output_audio_transcript.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.done",
        "rate_limits.updated",
        "output_audio_buffer.cleared",
        "error",
        "playback.acknowledged",
        "conversation.context",
        # v2, interruption policy (pause mode)
        "output_audio_buffer.paused",
        "output_audio_buffer.resumed",
        "overlap.decision",
        # v2, session resume
        "session.resumed",
    }


def test_every_server_event_gets_a_session_unique_event_id() -> None:
    enc = ServerEventEncoder()
    ids = [_wire(InputAudioBufferCleared(), enc)["event_id"] for _ in range(3)]
    assert ids == ["event_1", "event_2", "event_3"]
    # A second session counts on its own: no global counter.
    assert _wire(InputAudioBufferCleared(), ServerEventEncoder())["event_id"] == "event_1"


def test_an_event_id_already_set_is_kept() -> None:
    enc = ServerEventEncoder()
    assert _wire(InputAudioBufferCleared(event_id="mine"), enc)["event_id"] == "mine"
    assert _wire(InputAudioBufferCleared(), enc)["event_id"] == "event_1"


def test_output_audio_delta_bytes_are_base64_on_the_wire() -> None:
    pcm = bytes(range(256)) * 4
    assert _wire(ResponseOutputAudioDelta(delta=pcm, **IDS)) == {
        "type": "response.output_audio.delta",
        "event_id": "event_1",
        **IDS,
        "delta": base64.b64encode(pcm).decode(),
    }


def test_rule7_error_event_carries_the_client_event_id() -> None:
    err = decode_client_event('{"type": "bogus", "event_id": "evt_42"}')
    assert isinstance(err, ProtocolError)
    assert _wire(error_event(err)) == {
        "type": "error",
        "event_id": "event_1",
        "error": {
            "type": "invalid_request_error",
            "code": "invalid_value",
            "message": err.message,
            "param": "type",
            "event_id": "evt_42",
        },
    }


def test_response_object_matches_realtime_response_shape() -> None:
    item = MessageItem(
        id="item_a",
        status="incomplete",
        role="assistant",
        content=(OutputAudio(transcript="Hel"),),
    )
    resp = Response(
        id="resp_1",
        status="cancelled",
        status_details=StatusDetails(type="cancelled", reason="turn_detected"),
        output=(item,),
        conversation_id="conv_1",
        audio=ResponseAudio(output=ResponseAudioOutput(format=PCM16, voice="alloy")),
        usage=Usage(total_tokens=3, input_tokens=2, output_tokens=1),
    )
    assert _wire(ResponseDone(response=resp))["response"] == {
        "id": "resp_1",
        "object": "realtime.response",
        "status": "cancelled",
        "status_details": {"type": "cancelled", "reason": "turn_detected", "error": None},
        "output": [
            {
                "type": "message",
                "id": "item_a",
                "object": "realtime.item",
                "status": "incomplete",
                "role": "assistant",
                "content": [{"type": "output_audio", "transcript": "Hel"}],
            }
        ],
        "conversation_id": "conv_1",
        "output_modalities": ["audio"],
        "max_output_tokens": "inf",
        "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "alloy"}},
        "usage": {
            "total_tokens": 3,
            "input_tokens": 2,
            "output_tokens": 1,
            "input_token_details": {
                "text_tokens": 0,
                "audio_tokens": 0,
                "image_tokens": 0,
                "cached_tokens": 0,
                "cached_tokens_details": {"text_tokens": 0, "audio_tokens": 0, "image_tokens": 0},
            },
            "output_token_details": {"text_tokens": 0, "audio_tokens": 0},
        },
        "metadata": None,
    }


def test_rule8_failed_response_reports_the_reason() -> None:
    resp = Response(
        id="resp_2",
        status="failed",
        status_details=StatusDetails(
            type="failed",
            error=StatusError(type="server_error", code="backend_error", message="boom"),
        ),
    )
    assert _wire(ResponseDone(response=resp))["response"]["status_details"] == {
        "type": "failed",
        "reason": None,
        "error": {"type": "server_error", "code": "backend_error", "message": "boom"},
    }


def test_item_echo_drops_audio_bytes_but_keeps_transcripts() -> None:
    item = MessageItem(
        id="item_u",
        status="completed",
        role="user",
        content=(InputAudio(audio=b"\0\0", transcript="hi"), InputText(text="t")),
    )
    assert _wire(ConversationItemAdded(previous_item_id="item_0", item=item.without_audio())) == {
        "type": "conversation.item.added",
        "event_id": "event_1",
        "previous_item_id": "item_0",
        "item": {
            "type": "message",
            "id": "item_u",
            "object": "realtime.item",
            "status": "completed",
            "role": "user",
            "content": [
                {"type": "input_audio", "transcript": "hi"},
                {"type": "input_text", "text": "t"},
            ],
        },
    }


def test_audio_parts_carry_transcript_null_until_transcribed() -> None:
    """OpenAI's shape, `{"type": "input_audio", "transcript": null}`: the JS Agents SDK's item
    schema requires the key, and its ZodError is uncaught in a node app."""
    user = MessageItem(id="u", status="completed", role="user", content=(InputAudio(),))
    reply = MessageItem(id="a", status="incomplete", role="assistant", content=(OutputAudio(),))
    assert _wire(ConversationItemAdded(item=user))["item"]["content"] == [
        {"type": "input_audio", "transcript": None}
    ]
    assert _wire(ConversationItemAdded(item=reply))["item"]["content"] == [
        {"type": "output_audio", "transcript": None}
    ]
    # A client's audio, once stripped, is left out, not null.
    sent = MessageItem(role="user", content=(InputAudio(audio=b"\0\0"),)).without_audio()
    assert sent.content == (InputAudio(),)


def test_content_part_events_use_short_part_names() -> None:
    part = response_part(OutputAudio(audio=b"\0\0", transcript=""))
    assert _wire(ResponseContentPartAdded(part=part, **IDS))["part"] == {
        "type": "audio",
        "audio": "AAA=",
        "transcript": "",
    }
    done = ResponseContentPartDone(part=response_part(OutputText(text="hi")), **IDS)
    assert _wire(done)["part"] == {"type": "text", "text": "hi"}
    assert response_part(OutputText(text="x")) == ResponsePartText(text="x")


ITEM = MessageItem(id="i", status="completed", role="system", content=(InputText(text="x"),))
ITEM_JSON = {
    "type": "message",
    "id": "i",
    "object": "realtime.item",
    "status": "completed",
    "role": "system",
    "content": [{"type": "input_text", "text": "x"}],
}


@pytest.mark.parametrize(
    ("event", "fields"),
    [
        (ConversationItemDone(item=ITEM), {"previous_item_id": None, "item": ITEM_JSON}),
        (ConversationItemRetrieved(item=ITEM), {"item": ITEM_JSON}),
        (ConversationItemDeleted(item_id="i"), {"item_id": "i"}),
        (
            ConversationItemTruncated(item_id="i", content_index=0, audio_end_ms=1200),
            {"item_id": "i", "content_index": 0, "audio_end_ms": 1200},
        ),
        (
            InputAudioBufferSpeechStarted(audio_start_ms=100, item_id="i"),
            {"audio_start_ms": 100, "item_id": "i"},
        ),
        (
            InputAudioBufferSpeechStopped(audio_end_ms=900, item_id="i"),
            {"audio_end_ms": 900, "item_id": "i"},
        ),
        (
            InputAudioBufferCommitted(item_id="i"),
            {"previous_item_id": None, "item_id": "i"},
        ),
        (InputAudioBufferCleared(), {}),
        (
            InputAudioBufferTimeoutTriggered(audio_start_ms=1, audio_end_ms=2, item_id="i"),
            {"audio_start_ms": 1, "audio_end_ms": 2, "item_id": "i"},
        ),
        (
            ConversationItemInputAudioTranscriptionDelta(item_id="i", delta="he"),
            {"item_id": "i", "content_index": 0, "delta": "he"},
        ),
        (
            ConversationItemInputAudioTranscriptionCompleted(
                item_id="i", transcript="hello", usage=TranscriptionUsageDuration(seconds=1.5)
            ),
            {
                "item_id": "i",
                "content_index": 0,
                "transcript": "hello",
                "usage": {"type": "duration", "seconds": 1.5},
            },
        ),
        (
            ConversationItemInputAudioTranscriptionFailed(
                item_id="i", error=TranscriptionError(type="server_error", message="m")
            ),
            {
                "item_id": "i",
                "content_index": 0,
                # No nulls: the JS Agents SDK's schema takes these keys as strings or absent.
                "error": {"type": "server_error", "message": "m"},
            },
        ),
        (
            ResponseOutputItemAdded(response_id="r", output_index=0, item=ITEM),
            {"response_id": "r", "output_index": 0, "item": ITEM_JSON},
        ),
        (
            ResponseOutputItemDone(response_id="r", output_index=0, item=ITEM),
            {"response_id": "r", "output_index": 0, "item": ITEM_JSON},
        ),
        (ResponseOutputAudioDone(**IDS), IDS),
        (ResponseOutputAudioTranscriptDelta(delta="he", **IDS), {**IDS, "delta": "he"}),
        (
            ResponseOutputAudioTranscriptDone(transcript="hello", **IDS),
            {**IDS, "transcript": "hello"},
        ),
        (ResponseOutputTextDelta(delta="he", **IDS), {**IDS, "delta": "he"}),
        (ResponseOutputTextDone(text="hello", **IDS), {**IDS, "text": "hello"}),
        (
            RateLimitsUpdated(
                rate_limits=(RateLimit(name="requests", limit=10, remaining=9, reset_seconds=1.5),)
            ),
            {
                "rate_limits": [
                    {"name": "requests", "limit": 10, "remaining": 9, "reset_seconds": 1.5}
                ]
            },
        ),
        (OutputAudioBufferCleared(response_id="r"), {"response_id": "r"}),
        (
            PlaybackAcknowledged(
                response_id="r",
                item_id="i",
                played_ms=800,
                committed_ms=800,
                history_committed=True,
            ),
            {
                "response_id": "r",
                "item_id": "i",
                "played_ms": 800,
                "committed_ms": 800,
                "history_committed": True,
            },
        ),
        (
            ConversationContext(items=(ITEM,), audio_inputs=1, images=0, bytes=4096),
            {"items": [ITEM_JSON], "audio_inputs": 1, "images": 0, "bytes": 4096},
        ),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, dict) else "",
)
def test_server_event_wire_shape(event: ServerEvent, fields: dict[str, Any]) -> None:
    tag = type(event).__struct_config__.tag
    assert _wire(event) == {"type": tag, "event_id": "event_1", **fields}


def test_session_and_response_lifecycle_events_wrap_their_objects() -> None:
    obj = SessionConfig().to_session_object(session_id="sess_1", model="m")
    for cls in (SessionCreated, SessionUpdated):
        out = _wire(cls(session=obj))
        assert out["session"]["id"] == "sess_1"
        assert out["session"]["type"] == "realtime"
    created = _wire(ResponseCreated(response=Response(id="resp_9")))
    assert created["response"]["status"] == "in_progress"
    assert created["response"]["object"] == "realtime.response"


def test_interruption_policy_events_have_the_contract_fields() -> None:
    assert _wire(OutputAudioBufferPaused(response_id="resp_1")) == {
        "type": "output_audio_buffer.paused",
        "event_id": "event_1",
        "response_id": "resp_1",
    }
    assert _wire(OutputAudioBufferResumed(response_id="resp_1"))["type"] == (
        "output_audio_buffer.resumed"
    )
    decision = _wire(
        OverlapDecision(
            response_id="resp_1",
            decision="resume",
            reason="backchannel",
            speech_ms=420,
            transcript="Yeah.",
        )
    )
    assert decision == {
        "type": "overlap.decision",
        "event_id": "event_1",
        "response_id": "resp_1",
        "decision": "resume",
        "reason": "backchannel",
        "speech_ms": 420,
        "transcript": "Yeah.",
    }
    # Made without a transcript: the field is there, null.
    untranscribed = OverlapDecision(
        response_id="r", decision="interrupt", reason="speech", speech_ms=400
    )
    assert _wire(untranscribed)["transcript"] is None
