"""Mutated client events: a valid event broken in one way, and the error it must get.

Rules:
- A mutation that makes the event invalid expects an `error` naming the `event_id` sent (or
  none, when no string was sent), and forbids the answer the valid event would have got
  (`SYNC_REPLIES`): a refused message must change nothing.
- Unknown extra fields are ignored, as OpenAI does: the event keeps its meaning and answer;
  a nested `"event_id"` decoy must not be taken for the event's own.
- Huge strings where an id goes keep the event valid in form; only its outcome may change.
- A beta field is read only when its GA twin is absent, so a bad beta value drops the twin.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from hypothesis import strategies as st

from fuzzing.inputs import SYNC_REPLIES, FuzzInput, Json
from fuzzing.valid import VALID, as_input, echo_of, to_frame, with_id
from fuzzing.values import BAD_B64, EVENT_IDS, HUGE_TEXT, SMALL_JSON, TEXT, UNKNOWN_KEYS

_WRONG_TYPES: Final = st.sampled_from([0, -1, 1.5, True, [], ["x"], {}, {"a": 1}, "x"])
_WRONG_ID_TYPES: Final = _WRONG_TYPES.filter(lambda v: not isinstance(v, str))
# Values no field of each kind accepts ({} is a valid, empty session patch; 0 a valid index).
_WRONG_FOR: Final[Mapping[str, tuple[Json, ...]]] = {
    "session": (0, -1, 1.5, True, [], ["x"], "x", None),
    "item": (0, 1.5, True, [], {}, "x", None),
    "audio": (0, 1.5, True, [], {}, None, "x"),
    "item_id": (0, -1, 1.5, True, [], {}, None),
    "response_id": (0, 1.5, False, [], {"id": "x"}, None),
    "content_index": ("x", "10", 1.5, True, [], {}, None, -1),
    "audio_end_ms": ("x", 2.0, False, [1], {}, None, -5),
    "played_ms": ("10", 1.0, True, [], {}, None, -1),
}
# Top-level fields whose type is fixed (None is valid for the others).
_REQUIRED: Final[Mapping[str, tuple[str, ...]]] = {
    "session.update": ("session",),
    "input_audio_buffer.append": ("audio",),
    "conversation.item.create": ("item",),
    "conversation.item.retrieve": ("item_id",),
    "conversation.item.delete": ("item_id",),
    "conversation.item.truncate": ("item_id", "content_index", "audio_end_ms"),
    "playback.ack": ("response_id", "played_ms"),
}
_NUMBERS: Final[Mapping[str, tuple[str, ...]]] = {
    "conversation.item.truncate": ("content_index", "audio_end_ms"),
    "playback.ack": ("played_ms", "committed_ms"),
}
# (path, value) pairs that no server may accept, whatever else the event holds.
_BAD_SESSION: Final[tuple[tuple[tuple[str, ...], Json], ...]] = (
    (("type",), "transcription"),
    (("type",), 5),
    (("instructions",), 5),
    (("instructions",), ["a"]),
    (("output_modalities",), "audio"),
    (("output_modalities",), ["video"]),
    (("output_modalities",), []),
    (("output_modalities",), ["audio", "audio", "text"]),
    (("modalities",), ["text", "video"]),
    (("max_output_tokens",), 0),
    (("max_output_tokens",), -3),
    (("max_output_tokens",), 4.5),
    (("max_output_tokens",), "infinite"),
    (("max_response_output_tokens",), 0),
    (("voice",), 7),
    (("audio",), []),
    (("audio", "input"), "pcm16"),
    (("audio", "input", "format"), {"type": "audio/flac"}),
    (("audio", "input", "format"), {"type": "audio/pcm", "rate": 16000}),
    (("audio", "input", "format"), {"type": "audio/pcmu", "rate": 24000}),
    (("audio", "input", "format"), {"rate": 24000}),
    (("audio", "input", "format"), "opus"),
    (("audio", "input", "format"), 16),
    (("audio", "output", "format"), "mp3"),
    (("audio", "output", "format"), {"type": "audio/wav"}),
    (("audio", "input", "turn_detection"), "server_vad"),
    # semantic_vad is valid (the server runs the `turn` model); a bad eagerness or a silence
    # knob of server_vad's is not.
    (("audio", "input", "turn_detection"), {"type": "semantic_vad", "eagerness": "eager"}),
    (("audio", "input", "turn_detection"), {"type": "semantic_vad", "silence_duration_ms": 500}),
    (("audio", "input", "turn_detection"), {"type": ""}),
    (("audio", "input", "turn_detection", "threshold"), 1.5),
    (("audio", "input", "turn_detection", "threshold"), -0.1),
    (("audio", "input", "turn_detection", "threshold"), 1e308),
    (("audio", "input", "turn_detection", "silence_duration_ms"), -1),
    (("audio", "input", "turn_detection", "prefix_padding_ms"), "300"),
    (("audio", "input", "turn_detection", "idle_timeout_ms"), -5),
    (("audio", "input", "turn_detection", "create_response"), "yes"),
    (("audio", "input", "turn_detection", "interrupt_response"), 1),
    (("audio", "input", "turn_detection", "interruption", "mode"), "later"),
    (("audio", "input", "turn_detection", "interruption", "min_speech_ms"), -1),
    (("audio", "input", "turn_detection", "interruption", "resume_after_ms"), 10**9),
    (("audio", "input", "turn_detection", "interruption", "backchannels"), "yeah"),
    (("audio", "input", "transcription"), "whisper-1"),
    (("audio", "input", "transcription", "model"), 1),
    (("input_audio_format",), "opus"),
    (("output_audio_format",), "g722"),
    (("turn_detection",), {"type": "none"}),
    (("turn_detection", "threshold"), 2),
    (("input_audio_transcription",), []),
    # Function tools: checked at the edge, whatever the session holds.
    (("tools",), "get_weather"),
    (("tools",), [{"type": "function", "name": "get weather"}]),
    (("tools",), [{"type": "function", "name": ""}]),
    (("tools",), [{"type": "function"}]),
    (("tools",), [{"type": "mcp", "server_label": "x"}]),
    (("tools",), [{"name": "f"}, {"name": "f"}]),
    (("tools",), [{"name": "f", "parameters": {"type": "string"}}]),
    (("tools",), [{"name": "f", "parameters": {"type": 5}}]),
    (("tools",), [{"name": "f", "parameters": []}]),
    (("tools",), [{"name": f"f{i}"} for i in range(129)]),
    (("tool_choice",), "sometimes"),
    (("tool_choice",), {"type": "function"}),
    (("tool_choice",), {"type": "mcp", "server_label": "x"}),
    (("tool_choice",), 3),
)
# A beta field is read only when its GA twin is absent; drop the twin so the bad value counts.
_GA_TWIN: Final[Mapping[str, tuple[str, ...]]] = {
    "modalities": ("output_modalities",),
    "input_audio_format": ("audio", "input", "format"),
    "output_audio_format": ("audio", "output", "format"),
    "turn_detection": ("audio", "input", "turn_detection"),
    "max_response_output_tokens": ("max_output_tokens",),
}
_BAD_ITEMS: Final[tuple[Json, ...]] = (
    {"type": "message", "role": "robot", "content": []},
    {"type": "message", "content": []},
    {"type": "message", "role": "user", "content": "hi"},
    {"type": "message", "role": "user", "content": [{"type": "input_video"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": 5}]},
    {"type": "message", "role": "user", "content": [{"type": "output_text", "text": "x"}]},
    {"type": "message", "role": "system", "content": [{"type": "input_audio", "audio": ""}]},
    {"type": "message", "role": "assistant", "content": [{"type": "input_text", "text": "x"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_audio"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": "!!"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": 5}]},
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_image", "image_url": "https://example.com/a.png"}],
    },
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_image", "image_url": "data:image/png;base64,"}],
    },
    {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_image", "image_url": "data:image/png;base64,@@@"}],
    },
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "ultra"}
        ],
    },
    {"type": "message", "role": "user", "content": [None]},
    {"type": "message", "role": "user", "id": 5, "content": []},
    {"type": "function_call", "name": "f"},
    {"type": "function_call", "arguments": "{}"},
    {"type": "function_call", "name": 5, "arguments": "{}"},
    {"type": "function_call_output", "output": "x"},
    {"type": "function_call_output", "call_id": "c"},
    {"type": "function_call_output", "call_id": "c", "output": {"a": 1}},
    {"type": "mcp_call", "name": "f"},
    {"role": "user", "content": [], "type": 3},
)
_BAD_RESPONSE_PARAMS: Final[tuple[Json, ...]] = (
    {"output_modalities": ["video"]},
    {"output_modalities": "audio"},
    {"modalities": ["audio", "text", "video"]},
    {"max_output_tokens": 0},
    {"max_output_tokens": "inf2"},
    {"max_response_output_tokens": -1},
    {"conversation": "maybe"},
    {"input": [{"type": "item_reference"}]},
    {"input": [{"type": "message", "role": "user"}]},
    {"input": {"type": "item_reference", "id": "x"}},
    {"instructions": 5},
    {"metadata": {"a": 1}},
    {"metadata": "x"},
    {"tools": [{"name": "bad name"}]},
    {"tools": [{"name": "f", "parameters": {"type": "array"}}]},
    {"tools": {"name": "f"}},
    {"tool_choice": "sometimes"},
    {"tool_choice": {"type": "function"}},
    "now",
    5,
    [],
)


def _set_path(obj: dict[str, Json], path: tuple[str, ...], value: Json) -> None:
    for key in path[:-1]:
        child = obj.get(key)
        if not isinstance(child, dict):
            child = obj[key] = {}
        obj = child
    obj[path[-1]] = value


def _drop_path(obj: dict[str, Json], path: tuple[str, ...]) -> None:
    for key in path[:-1]:
        child = obj.get(key)
        if not isinstance(child, dict):
            return
        obj = child
    obj.pop(path[-1], None)


def _copy(event: dict[str, Json]) -> dict[str, Json]:
    copied: dict[str, Json] = json.loads(json.dumps(event))
    return copied


def error_input(kind: str, event: Json, ascii_only: bool, base_type: str = "") -> FuzzInput:
    echo, event_id = echo_of(event)
    return FuzzInput(
        kind=kind,
        frame=to_frame(event, ascii_only),
        expect="error",
        echo=echo,
        event_id=event_id,
        forbid=SYNC_REPLIES.get(base_type, frozenset()),
    )


_ANY_EVENT_MUTATIONS: Final = (
    "extra_fields",
    "bad_base64",
    "huge_field",
    "unknown_type",
    "missing_type",
    "bad_event_id",
)
_BAD_VALUE_TYPES: Final = frozenset(
    {"session.update", "conversation.item.create", "response.create", "input_audio_buffer.commit"}
)


def _mutations(kind: str) -> tuple[str, ...]:
    """The mutations that make sense for an event type."""
    extra: tuple[str, ...] = ("missing_field", "wrong_type") if kind in _REQUIRED else ()
    if kind in _BAD_VALUE_TYPES:
        extra += ("bad_value", "bad_value")
    if kind in _NUMBERS:
        extra += ("bad_number",)
    return extra + _ANY_EVENT_MUTATIONS


@st.composite
def mutated_inputs(draw: st.DrawFn) -> FuzzInput:
    valid = draw(VALID)
    event = with_id(_copy(valid.event), draw(EVENT_IDS))
    kind: str = event["type"]
    how = draw(st.sampled_from(_mutations(kind)))
    ascii_only = draw(st.booleans())
    name = f"mutated:{how}"

    if how == "extra_fields":
        # Unknown fields are ignored, as OpenAI does: the event keeps its meaning.
        for key, value in draw(
            st.dictionaries(UNKNOWN_KEYS, SMALL_JSON | HUGE_TEXT, min_size=1, max_size=3)
        ).items():
            event.setdefault(key, value)
        nested = [
            v
            for k, v in event.items()
            if k in ("session", "item", "response") and isinstance(v, dict)
        ]
        if nested:
            nested[0].setdefault(
                draw(st.sampled_from(["foo", "include", "tracing", "speed", "status"])),
                draw(SMALL_JSON),
            )
            # An unparseable event is named by sniffing "event_id"; a nested one must not fool it.
            nested[0].setdefault("event_id", "nested_decoy")
        return as_input(name, event, valid, ascii_only)
    if how == "missing_field" and kind in _REQUIRED:
        del event[draw(st.sampled_from(_REQUIRED[kind]))]
        return error_input(name, event, ascii_only, kind)
    if how == "wrong_type" and kind in _REQUIRED:
        key = draw(st.sampled_from(_REQUIRED[kind]))
        event[key] = draw(st.sampled_from(_WRONG_FOR[key]))
        return error_input(name, event, ascii_only, kind)
    if how == "bad_value" and kind == "session.update":
        path, value = draw(st.sampled_from(_BAD_SESSION))
        session = event["session"]
        twin = _GA_TWIN.get(path[0])
        if twin is not None:
            _drop_path(session, twin)
        _set_path(session, path, value)
        return error_input(name, event, ascii_only, kind)
    if how == "bad_value" and kind == "conversation.item.create":
        event["item"] = draw(st.sampled_from(_BAD_ITEMS))
        return error_input(name, event, ascii_only, kind)
    if how == "bad_value" and kind == "response.create":
        event["response"] = draw(st.sampled_from(_BAD_RESPONSE_PARAMS))
        return error_input(name, event, ascii_only, kind)
    if how == "bad_value" and kind == "input_audio_buffer.commit":
        event[draw(st.sampled_from(["create_response", "final"]))] = draw(
            st.sampled_from([1, "yes", [], {}])
        )
        return error_input(name, event, ascii_only, kind)
    if how == "bad_base64":
        bad = draw(BAD_B64)
        if kind == "conversation.item.create" and draw(st.booleans()):
            event["item"] = {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_audio", "audio": bad}],
            }
            return error_input(name, event, ascii_only, kind)
        event = with_id({"type": "input_audio_buffer.append", "audio": bad}, event.get("event_id"))
        return error_input(name, event, ascii_only)
    if how == "huge_field":
        huge = draw(HUGE_TEXT)
        if "item_id" in event:
            event["item_id"] = huge
            return as_input(name, event, valid, ascii_only)
        if "response_id" in event:
            event["response_id"] = huge
            return as_input(name, event, valid, ascii_only)
        event["event_id"] = huge
        return as_input(name, event, valid, ascii_only)
    if how == "bad_number" and kind in _NUMBERS:
        number = draw(st.sampled_from([-1, -(2**70), 1.0, 2.5, 1e308, -0.0, "10"]))
        event[draw(st.sampled_from(_NUMBERS[kind]))] = number
        return error_input(name, event, ascii_only, kind)
    if how == "missing_type":
        del event["type"]
        return error_input(name, event, ascii_only)
    if how == "bad_event_id":
        event["event_id"] = draw(_WRONG_ID_TYPES)
        return error_input(name, event, ascii_only, kind)
    # unknown_type, and the fallback for mutations that do not apply to this event type.
    event["type"] = draw(
        st.one_of(
            st.sampled_from(
                [
                    "session.updated",
                    "response.audio.delta",
                    "Session.Update",
                    "session.update ",
                    "",
                    "conversation.item.created",
                    "input_audio_buffer.commit.final",
                    "transcription_session.update",
                ]
            ),
            TEXT.filter(lambda t: t not in SYNC_REPLIES and "." not in t),
            HUGE_TEXT,
            _WRONG_TYPES.filter(lambda v: not isinstance(v, str)),
        )
    )
    return error_input("mutated:unknown_type", event, ascii_only, kind)
