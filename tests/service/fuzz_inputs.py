"""Fuzzing the live server: generated client messages, and what every answer must satisfy.

Shared by `tests/service/test_fuzz_e2e.py` (a few thousand inputs, derandomized) and
`bench/fuzz.py` (the long run). Three parts:

- Hypothesis strategies (`scripts()`): one `Script` is one WebSocket session, a fixed number
  of `FuzzInput`s. Inputs are valid events of every client type, mutated ones (wrong types,
  missing and extra fields, huge strings, bad base64, out-of-range numbers, unknown types and
  ids), raw frames (malformed JSON, non-UTF-8, binary, empty) and out-of-order sequences.
  Every input says what the server must answer (`expect`) and which `event_id` its errors
  must carry (`echo`).
- `EventChecker`: every server event must decode as the contract's server event schema
  (`orchestrator.protocol.server`) and, where the openai SDK knows the type, as the SDK's.
- `FuzzRunner`: sends a script over a real socket. After each input it sends a probe (a
  retrieve of an item that never exists, with a unique `event_id`), whose error marks where
  that input's answers end, so each answer is judged against the input that caused it and a
  hang shows up as a probe that never comes back.

The models behind the server are real and slow, so scripts keep audio short (below the
100 ms that Whisper would transcribe), mostly switch turn detection off and start at most a
couple of responses, all cancelled when the script ends.
"""

from __future__ import annotations

import base64
import json
import logging
import string
import time
import typing
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, TypeVar

import msgspec
import pydantic
from hypothesis import strategies as st
from openai.types.realtime import RealtimeServerEvent
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection, connect

from orchestrator.protocol import server as se

T = TypeVar("T")
Json = Any

__all__ = [
    "EventChecker",
    "Failure",
    "FuzzInput",
    "FuzzRunner",
    "FuzzStats",
    "Script",
    "ServerErrors",
    "capture_server_errors",
    "metric_value",
    "scripts",
]

# What a server must do with one input.
#   reply: no error, and one of `replies` comes back;   error: an `error` event comes back;
#   reply_or_error: one of the two (the outcome depends on session state);
#   silent: no error (an append);   any: only the echo rule holds.
Expect = Literal["reply", "error", "reply_or_error", "silent", "any"]
# Which event_id the input's errors must carry: the one sent; none (none or a non-string was
# sent); the one sent or none (malformed JSON, where the server can only look for it, but must
# not take a nested "event_id" for it); any (raw bytes).
Echo = Literal["exact", "none", "exact_or_none", "any"]

# Stand-ins the runner replaces just before sending, so inputs can name what only the live
# session knows (its id, the items and responses it made) and still be generated up front.
SID: Final = "@@sid@@"
LAST_ITEM: Final = "@@last_item@@"
LAST_RESPONSE: Final = "@@last_response@@"
FRESH: Final = "@@fresh@@"

PROBE_ITEM: Final = "fuzz_probe_never_created"
# Errors that are not the answer to a client message (turn detection losing Triton).
ASYNC_ERROR_CODES: Final = frozenset({"vad_unavailable"})
# Appends past the per-key audio rate are refused; a legitimate answer to a valid append.
RATE_LIMITED: Final = frozenset({"rate_limit_exceeded"})

# Answers only a client message produces (never VAD, a timer or a backend), so seeing one
# after an invalid message means the server half-applied it.
_SYNC_REPLIES: Final[Mapping[str, frozenset[str]]] = {
    "session.update": frozenset({"session.updated"}),
    "input_audio_buffer.clear": frozenset({"input_audio_buffer.cleared"}),
    "conversation.item.retrieve": frozenset({"conversation.item.retrieved"}),
    "conversation.item.delete": frozenset({"conversation.item.deleted"}),
    "conversation.item.truncate": frozenset({"conversation.item.truncated"}),
    "playback.ack": frozenset({"playback.acknowledged"}),
    "conversation.context.retrieve": frozenset({"conversation.context"}),
}


def _short(value: str | bytes, limit: int = 300) -> str:
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}...{text[-limit // 4 :]} ({len(value)} {type(value).__name__})"


@dataclass(frozen=True, slots=True)
class FuzzInput:
    """One WebSocket message and the answer it must get."""

    kind: str
    frame: str | bytes  # str: a text frame; bytes: a binary frame (or text, see text_bytes)
    expect: Expect
    replies: frozenset[str] = frozenset()
    echo: Echo = "any"
    event_id: str | None = None
    # Error codes that may stand in for the expected outcome (a valid append over the limit).
    tolerated: frozenset[str] = frozenset()
    # Answers that must not come back (an invalid session.update must not update).
    forbid: frozenset[str] = frozenset()
    starts_response: bool = False
    # Send `frame` (bytes) as a text frame, unchecked: not UTF-8, which RFC 6455 says fails the
    # connection. The server must end it (1007, or dropping TCP as the RFC allows), never 1011.
    text_bytes: bool = False
    step: int = 0  # the scenario this input belongs to within its script (for FRESH ids)

    def __repr__(self) -> str:
        return f"FuzzInput({self.kind}, {_short(self.frame)}, expect={self.expect})"


@dataclass(frozen=True, slots=True)
class Script:
    """One session's inputs, in order."""

    inputs: tuple[FuzzInput, ...]

    def __repr__(self) -> str:
        lines = ",\n".join(f"  {i}: {inp!r}" for i, inp in enumerate(self.inputs))
        return f"Script(\n{lines}\n)"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis prints examples with this hook when there is one: keep them short.
        printer.text(repr(self))


# --- primitives ---------------------------------------------------------------------------

_ASCII_UNITS: Final = st.text(string.ascii_letters + string.digits + " _-", min_size=1, max_size=4)


def _one_in(n: int) -> st.SearchStrategy[bool]:
    # Hypothesis starts from, and leans towards, the ends of a range; its middle comes up
    # about once in n draws.
    return st.integers(0, n - 1).map(lambda i: i == n // 2)


def _repeat(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def _huge(max_size: int) -> st.SearchStrategy[str]:
    """Long strings from two small draws (Hypothesis could not draw a megabyte itself)."""
    return st.builds(
        _repeat,
        st.one_of(_ASCII_UNITS, _ASCII_UNITS, st.sampled_from(["é", "€", "😀", '"', "\\"])),
        st.integers(16 * 1024, max_size),
    )


_HUGE_TEXT: Final = _huge(1024 * 1024)
_TEXT: Final = st.text(max_size=40)
_SHORT_ID: Final = st.text(string.ascii_letters + string.digits + "_-", min_size=1, max_size=24)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _even(data: bytes) -> bytes:
    return data[: len(data) - len(data) % 2]


# Whole 16-bit samples, at most 320 bytes: under every input format this stays well below the
# 100 ms that would make Whisper transcribe a committed turn.
_AUDIO: Final = st.one_of(
    st.binary(max_size=320).map(_even),
    st.integers(0, 160).map(lambda n: bytes(2 * n)),
)
_BAD_B64: Final = st.one_of(
    st.sampled_from(["!!!!", "AAA", "A", "A===", "AA=A", "YW Jj", "YWJj\n", "AAAA====", "%%", "é"]),
    st.builds(
        lambda n, bad: "A" * (4 * n) + bad,
        st.integers(1, 256 * 1024),
        st.sampled_from(["!", "A", "AA", "="]),
    ),
)
_PNG: Final = st.binary(min_size=1, max_size=64).map(lambda b: "data:image/png;base64," + _b64(b))

_EVENT_IDS: Final = st.one_of(
    st.none(),
    st.none(),
    st.integers(0, 10**6).map(lambda n: f"evt_{n}"),
    st.integers(0, 10**6).map(lambda n: f"evt_{n}"),
    _TEXT,
    _huge(64 * 1024),
)
# Items the session may or may not hold: its latest, a fresh one, the reserved "root", the id
# the server would give its next items (a client can predict them), or any string.
_ITEM_REFS: Final = st.one_of(
    st.sampled_from([LAST_ITEM, LAST_ITEM, FRESH, "root", "item_0", ""]),
    st.integers(1, 40).map(lambda n: f"item_{SID}_{n}"),
    _SHORT_ID,
    _TEXT,
)
_RESPONSE_REFS: Final = st.one_of(
    st.sampled_from([LAST_RESPONSE, LAST_RESPONSE, "resp_0", ""]),
    st.integers(1, 40).map(lambda n: f"resp_{SID}_{n}"),
    _SHORT_ID,
)
_SMALL_JSON: Final = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=8,
)
_UNKNOWN_KEYS: Final = st.one_of(
    st.sampled_from(
        ["foo", "extra", "timestamp", "client", "object", "tools", "__proto__", "", "évènement"]
    ),
    _SHORT_ID.map(lambda s: "x_" + s),
)


# --- valid events -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Valid:
    event: dict[str, Json]
    expect: Expect
    replies: frozenset[str] = frozenset()
    tolerated: frozenset[str] = frozenset()
    starts_response: bool = False


def _optional(**fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional=fields)


_GA_FORMAT: Final = st.sampled_from(
    [
        {"type": "audio/pcm", "rate": 24000},
        {"type": "audio/pcm"},
        {"type": "audio/pcmu"},
        {"type": "audio/pcma"},
        {"type": "audio/pcmu", "rate": 8000},
    ]
)
_BETA_FORMAT: Final = st.sampled_from(
    ["pcm16", "g711_ulaw", "g711_alaw", "audio/pcm", "audio/pcmu", "audio/pcma"]
)
_SERVER_VAD: Final = st.fixed_dictionaries(
    {"type": st.just("server_vad")},
    optional={
        "threshold": st.floats(0.0, 1.0),
        "prefix_padding_ms": st.integers(0, 2000) | st.just(2**70),
        "silence_duration_ms": st.integers(0, 5000) | st.just(2**62),
        # Mostly off: a fuzzer has no business making the slow model talk on every turn.
        "create_response": st.sampled_from([False, False, False, True]),
        "interrupt_response": st.booleans(),
        "idle_timeout_ms": st.none() | st.integers(0, 10_000) | st.just(2**70),
    },
)
_TURN_DETECTION: Final = st.one_of(st.none(), st.none(), _SERVER_VAD)
_TRANSCRIPTION: Final = st.none() | _optional(
    model=st.sampled_from(["whisper-1", "gpt-4o-transcribe"]),
    language=st.sampled_from(["en", "fr", ""]),
    prompt=_TEXT,
)
_MODALITIES: Final = st.sampled_from([["audio"], ["text"], ["text", "audio"], ["audio", "text"]])
_VOICE: Final = st.sampled_from(["alloy", "marin", "cedar", "verse"]) | _TEXT
_MAX_TOKENS: Final = st.integers(1, 64) | st.just("inf") | st.just(2**70)

_GA_SESSION: Final = _optional(
    type=st.just("realtime"),
    instructions=st.text(max_size=200),
    output_modalities=_MODALITIES,
    max_output_tokens=_MAX_TOKENS,
    audio=_optional(
        input=_optional(
            format=_GA_FORMAT | _BETA_FORMAT,
            turn_detection=_TURN_DETECTION,
            transcription=_TRANSCRIPTION,
        ),
        output=_optional(format=_GA_FORMAT | _BETA_FORMAT, voice=_VOICE),
    ),
)
_BETA_SESSION: Final = _optional(
    instructions=st.text(max_size=200),
    modalities=_MODALITIES,
    input_audio_format=_BETA_FORMAT,
    output_audio_format=_BETA_FORMAT,
    turn_detection=_TURN_DETECTION,
    input_audio_transcription=_TRANSCRIPTION,
    voice=_VOICE,
    max_response_output_tokens=_MAX_TOKENS,
)


def _with_id(event: dict[str, Json], event_id: str | None) -> dict[str, Json]:
    return event if event_id is None else {**event, "event_id": event_id}


@st.composite
def _session_update(draw: st.DrawFn) -> _Valid:
    session = draw(st.one_of(_GA_SESSION, _GA_SESSION, _BETA_SESSION))
    event = {"type": "session.update", "session": session}
    return _Valid(event, "reply", frozenset({"session.updated"}))


def _append_event(audio: bytes) -> _Valid:
    event = {"type": "input_audio_buffer.append", "audio": _b64(audio)}
    return _Valid(event, "silent", tolerated=RATE_LIMITED)


@st.composite
def _commit(draw: st.DrawFn) -> _Valid:
    extras = draw(
        _optional(create_response=st.sampled_from([False, False, True]), final=st.booleans())
    )
    event = {"type": "input_audio_buffer.commit", **extras}
    # `final: false` is acknowledged by silence (the vllm-omni bridge keeps buffering).
    expect: Expect = "any" if extras.get("final") is False else "reply_or_error"
    starts = bool(extras.get("create_response")) and extras.get("final") is not False
    return _Valid(
        event, expect, frozenset({"input_audio_buffer.committed"}), starts_response=starts
    )


def _content_part(role: str) -> st.SearchStrategy[dict[str, Json]]:
    text = _TEXT.map(lambda t: {"type": "text", "text": t})
    if role == "system":
        return st.one_of(_TEXT.map(lambda t: {"type": "input_text", "text": t}), text)
    audio = st.builds(
        lambda a, t: {"type": "audio", "audio": _b64(a), **t},
        _AUDIO,
        _optional(transcript=_TEXT),
    )
    if role == "assistant":
        return st.one_of(
            _TEXT.map(lambda t: {"type": "output_text", "text": t}),
            st.builds(lambda t: {"type": "output_audio", **t}, _optional(transcript=_TEXT)),
            text,
            audio,
        )
    return st.one_of(
        _TEXT.map(lambda t: {"type": "input_text", "text": t}),
        st.builds(
            lambda a, t: {"type": "input_audio", "audio": _b64(a), **t},
            _AUDIO,
            _optional(transcript=_TEXT),
        ),
        st.builds(
            lambda u, d: {"type": "input_image", "image_url": u, **d},
            _PNG,
            _optional(detail=st.sampled_from(["auto", "low", "high"])),
        ),
        text,
        audio,
    )


@st.composite
def _item(draw: st.DrawFn) -> dict[str, Json]:
    role = draw(st.sampled_from(["user", "user", "system", "assistant"]))
    content = draw(st.lists(_content_part(role), max_size=3))
    return {"type": "message", "role": role, "content": content}


@st.composite
def _item_create(draw: st.DrawFn) -> _Valid:
    item = draw(_item())
    event: dict[str, Json] = {"type": "conversation.item.create", "item": item}
    item_id = draw(st.none() | st.none() | _ITEM_REFS)
    if item_id is not None:
        item["id"] = item_id
    previous = draw(st.sampled_from([None, None, "root"]) | _ITEM_REFS)
    if previous is not None:
        event["previous_item_id"] = previous
    # Where the session cannot refuse it (a server-made id, placed last or first): must work.
    sure = item_id is None and previous in (None, "root")
    expect: Expect = "reply" if sure else "reply_or_error"
    return _Valid(event, expect, frozenset({"conversation.item.added"}))


def _by_item(kind: str, reply: str) -> st.SearchStrategy[_Valid]:
    return _ITEM_REFS.map(
        lambda ref: _Valid({"type": kind, "item_id": ref}, "reply_or_error", frozenset({reply}))
    )


_TRUNCATE: Final = st.builds(
    lambda ref, index, end: _Valid(
        {
            "type": "conversation.item.truncate",
            "item_id": ref,
            "content_index": index,
            "audio_end_ms": end,
        },
        "reply_or_error",
        frozenset({"conversation.item.truncated"}),
    ),
    _ITEM_REFS,
    st.integers(0, 2),
    st.integers(0, 5000) | st.just(2**70),
)
_RESPONSE_PARAMS: Final = _optional(
    output_modalities=_MODALITIES,
    modalities=_MODALITIES,
    instructions=st.text(max_size=100),
    max_output_tokens=st.integers(1, 16) | st.just("inf"),
    max_response_output_tokens=st.integers(1, 16),
    conversation=st.sampled_from(["auto", "auto", "none"]),
    metadata=st.dictionaries(_SHORT_ID, _TEXT, max_size=3),
)


@st.composite
def _response_create(draw: st.DrawFn) -> _Valid:
    params = draw(st.none() | st.none() | _RESPONSE_PARAMS)
    event: dict[str, Json] = {"type": "response.create"}
    if params is not None or draw(st.booleans()):
        event["response"] = params
    if params is not None and params.get("conversation") == "none":
        # Out-of-band responses are refused with `unsupported_conversation`.
        return _Valid(event, "error")
    return _Valid(event, "reply_or_error", frozenset({"response.created"}), starts_response=True)


def _by_response(kind: str, expect: Expect, replies: set[str]) -> st.SearchStrategy[_Valid]:
    refs = st.none() | st.none() | _RESPONSE_REFS
    return refs.map(
        lambda ref: _Valid(
            {"type": kind} if ref is None else {"type": kind, "response_id": ref},
            expect,
            frozenset(replies),
        )
    )


_ACK: Final = st.builds(
    lambda ref, played, extra: _Valid(
        {"type": "playback.ack", "response_id": ref, "played_ms": played, **extra},
        "reply_or_error",
        frozenset({"playback.acknowledged"}),
    ),
    _RESPONSE_REFS,
    st.integers(0, 10_000) | st.just(2**70),
    _optional(item_id=_ITEM_REFS, committed_ms=st.integers(0, 10_000), truncate=st.booleans()),
)


_CLEARED: Final = "output_audio_buffer.cleared"


def _weighted(*choices: tuple[int, st.SearchStrategy[T]]) -> st.SearchStrategy[T]:
    """Branches in proportion to their weights (one_of leans hard on its first branch)."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(table).flatmap(lambda strategy: strategy)


_CLEAR: Final = _Valid(
    {"type": "input_audio_buffer.clear"}, "reply", frozenset({"input_audio_buffer.cleared"})
)
_CONTEXT: Final = _Valid(
    {"type": "conversation.context.retrieve"}, "reply", frozenset({"conversation.context"})
)
_VALID: Final[st.SearchStrategy[_Valid]] = _weighted(
    # First, since Hypothesis draws the first choice most: a cheap one.
    (1, st.just(_CLEAR)),
    (4, _AUDIO.map(_append_event)),
    (3, _session_update()),
    (2, _commit()),
    (3, _item_create()),
    (1, _by_item("conversation.item.retrieve", "conversation.item.retrieved")),
    (1, _by_item("conversation.item.delete", "conversation.item.deleted")),
    (1, _TRUNCATE),
    (1, _response_create()),
    (1, _by_response("response.cancel", "reply_or_error", {"response.done", _CLEARED})),
    # Always answered: with nothing playing, the client's buffer is simply empty now.
    (1, _by_response("output_audio_buffer.clear", "reply", {_CLEARED, "response.done"})),
    (1, _ACK),
    (1, st.just(_CONTEXT)),
)


def _frame(event: Json, ascii_only: bool) -> str:
    return json.dumps(event, ensure_ascii=ascii_only)


def _echo_of(event: Json) -> tuple[Echo, str | None]:
    if not isinstance(event, dict):
        return "none", None
    event_id = event.get("event_id")
    return ("exact", event_id) if isinstance(event_id, str) else ("none", None)


def _input(kind: str, event: dict[str, Json], valid: _Valid, ascii_only: bool) -> FuzzInput:
    echo, event_id = _echo_of(event)
    return FuzzInput(
        kind=kind,
        frame=_frame(event, ascii_only),
        expect=valid.expect,
        replies=valid.replies,
        echo=echo,
        event_id=event_id,
        tolerated=valid.tolerated,
        starts_response=valid.starts_response,
    )


@st.composite
def valid_inputs(draw: st.DrawFn) -> FuzzInput:
    valid = draw(_VALID)
    event = _with_id(valid.event, draw(_EVENT_IDS))
    return _input(f"valid:{event['type']}", event, valid, draw(st.booleans()))


# --- mutations ----------------------------------------------------------------------------

_WRONG_TYPES: Final = st.sampled_from([0, -1, 1.5, True, [], ["x"], {}, {"a": 1}, "x"])
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
    (("audio", "input", "turn_detection"), {"type": "semantic_vad"}),
    (("audio", "input", "turn_detection"), {"type": ""}),
    (("audio", "input", "turn_detection", "threshold"), 1.5),
    (("audio", "input", "turn_detection", "threshold"), -0.1),
    (("audio", "input", "turn_detection", "threshold"), 1e308),
    (("audio", "input", "turn_detection", "silence_duration_ms"), -1),
    (("audio", "input", "turn_detection", "prefix_padding_ms"), "300"),
    (("audio", "input", "turn_detection", "idle_timeout_ms"), -5),
    (("audio", "input", "turn_detection", "create_response"), "yes"),
    (("audio", "input", "turn_detection", "interrupt_response"), 1),
    (("audio", "input", "transcription"), "whisper-1"),
    (("audio", "input", "transcription", "model"), 1),
    (("input_audio_format",), "opus"),
    (("output_audio_format",), "g722"),
    (("turn_detection",), {"type": "none"}),
    (("turn_detection", "threshold"), 2),
    (("input_audio_transcription",), []),
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
    {"type": "function_call", "name": "f", "arguments": "{}"},
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
    {"conversation": "none"},
    {"instructions": 5},
    {"metadata": {"a": 1}},
    {"metadata": "x"},
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


def _error_input(kind: str, event: Json, ascii_only: bool, base_type: str = "") -> FuzzInput:
    echo, event_id = _echo_of(event)
    return FuzzInput(
        kind=kind,
        frame=_frame(event, ascii_only),
        expect="error",
        echo=echo,
        event_id=event_id,
        forbid=_SYNC_REPLIES.get(base_type, frozenset()),
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
    valid = draw(_VALID)
    event = _with_id(_copy(valid.event), draw(_EVENT_IDS))
    kind: str = event["type"]
    how = draw(st.sampled_from(_mutations(kind)))
    ascii_only = draw(st.booleans())
    name = f"mutated:{how}"

    if how == "extra_fields":
        # Unknown fields are ignored, as OpenAI does: the event keeps its meaning.
        for key, value in draw(
            st.dictionaries(_UNKNOWN_KEYS, _SMALL_JSON | _HUGE_TEXT, min_size=1, max_size=3)
        ).items():
            event.setdefault(key, value)
        nested = [
            v
            for k, v in event.items()
            if k in ("session", "item", "response") and isinstance(v, dict)
        ]
        if nested:
            nested[0].setdefault(
                draw(st.sampled_from(["foo", "tools", "tracing", "speed", "status"])),
                draw(_SMALL_JSON),
            )
            # An unparseable event is named by sniffing "event_id"; a nested one must not fool it.
            nested[0].setdefault("event_id", "nested_decoy")
        return _input(name, event, valid, ascii_only)
    if how == "missing_field" and kind in _REQUIRED:
        del event[draw(st.sampled_from(_REQUIRED[kind]))]
        return _error_input(name, event, ascii_only, kind)
    if how == "wrong_type" and kind in _REQUIRED:
        key = draw(st.sampled_from(_REQUIRED[kind]))
        event[key] = draw(st.sampled_from(_WRONG_FOR[key]))
        return _error_input(name, event, ascii_only, kind)
    if how == "bad_value" and kind == "session.update":
        path, value = draw(st.sampled_from(_BAD_SESSION))
        session = event["session"]
        twin = _GA_TWIN.get(path[0])
        if twin is not None:
            _drop_path(session, twin)
        _set_path(session, path, value)
        return _error_input(name, event, ascii_only, kind)
    if how == "bad_value" and kind == "conversation.item.create":
        event["item"] = draw(st.sampled_from(_BAD_ITEMS))
        return _error_input(name, event, ascii_only, kind)
    if how == "bad_value" and kind == "response.create":
        event["response"] = draw(st.sampled_from(_BAD_RESPONSE_PARAMS))
        return _error_input(name, event, ascii_only, kind)
    if how == "bad_value" and kind == "input_audio_buffer.commit":
        event[draw(st.sampled_from(["create_response", "final"]))] = draw(
            st.sampled_from([1, "yes", [], {}])
        )
        return _error_input(name, event, ascii_only, kind)
    if how == "bad_base64":
        bad = draw(_BAD_B64)
        if kind == "conversation.item.create" and draw(st.booleans()):
            event["item"] = {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_audio", "audio": bad}],
            }
            return _error_input(name, event, ascii_only, kind)
        event = _with_id({"type": "input_audio_buffer.append", "audio": bad}, event.get("event_id"))
        return _error_input(name, event, ascii_only)
    if how == "huge_field":
        huge = draw(_HUGE_TEXT)
        if "item_id" in event:
            event["item_id"] = huge
            return _input(name, event, valid, ascii_only)
        if "response_id" in event:
            event["response_id"] = huge
            return _input(name, event, valid, ascii_only)
        event["event_id"] = huge
        return _input(name, event, valid, ascii_only)
    if how == "bad_number" and kind in _NUMBERS:
        number = draw(st.sampled_from([-1, -(2**70), 1.0, 2.5, 1e308, -0.0, "10"]))
        event[draw(st.sampled_from(_NUMBERS[kind]))] = number
        return _error_input(name, event, ascii_only, kind)
    if how == "missing_type":
        del event["type"]
        return _error_input(name, event, ascii_only)
    if how == "bad_event_id":
        event["event_id"] = draw(_WRONG_TYPES.filter(lambda v: not isinstance(v, str)))
        return _error_input(name, event, ascii_only, kind)
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
            _TEXT.filter(lambda t: t not in _SYNC_REPLIES and "." not in t),
            _HUGE_TEXT,
            _WRONG_TYPES.filter(lambda v: not isinstance(v, str)),
        )
    )
    return _error_input("mutated:unknown_type", event, ascii_only, kind)


# --- raw frames ---------------------------------------------------------------------------

_NOT_JSON: Final = (
    "{'type': 'session.update'}",
    '{"type": "input_audio_buffer.clear",}',
    '{"type": NaN}',
    '{"type": Infinity}',
    '{"type": "input_audio_buffer.clear"} // comment',
    '/* c */ {"type": "input_audio_buffer.clear"}',
    '{"type": "input_audio_buffer.clear" "event_id": "x"}',
    '{type: "input_audio_buffer.clear"}',
    '{"type": "input_audio_buffer.clear", "event_id": "\\ud800"}',
    '{"type": "conversation.item.retrieve", "item_id": "\\udfff", "event_id": "lone"}',
    '{"type": "input_audio_buffer.clear", "event_id": "\\x41"}',
    "{",
    "}",
    '"',
    "[",
    "nul",
    "{}}",
)


@st.composite
def raw_inputs(draw: st.DrawFn) -> FuzzInput:
    how = draw(
        st.sampled_from(
            [
                "text",
                "binary",
                "truncated",
                "trailing_garbage",
                "not_object",
                "not_json",
                "binary_event",
                "binary_not_utf8",
                "empty",
                "deep",
                "huge_garbage",
                "whitespace",
                "duplicate_keys",
                "bom",
            ]
        )
    )
    name = f"raw:{how}"
    if how == "text":
        # Valid JSON objects are other kinds' business; anything else here is an error.
        return FuzzInput(
            name,
            draw(st.text(max_size=300).filter(lambda t: not t.lstrip().startswith("{"))),
            "error",
        )
    if how == "binary":
        return FuzzInput(
            name,
            draw(st.binary(max_size=300).filter(lambda b: not b.lstrip().startswith(b"{"))),
            "error",
        )
    if how == "not_object":
        value = draw(_SMALL_JSON.filter(lambda v: not isinstance(v, dict)))
        return FuzzInput(name, json.dumps(value), "error", echo="none")
    if how == "not_json":
        return FuzzInput(name, draw(st.sampled_from(_NOT_JSON)), "error")
    if how == "empty":
        empties: list[str | bytes] = ["", " ", "\n", "\t\r\n ", b""]
        return FuzzInput(name, draw(st.sampled_from(empties)), "error")
    if how == "huge_garbage":
        unit = draw(st.sampled_from(["A", "{", "[", '"', "\\", "{]", "é"]))
        return FuzzInput(name, _repeat(unit, draw(st.integers(64 * 1024, 1024 * 1024))), "error")

    valid = draw(_VALID)
    event = _with_id(valid.event, draw(_EVENT_IDS))
    frame = _frame(event, True)
    # Unparseable, so the server can only look for the event_id in the text; a nested one
    # placed before the real one must not fool it.
    event_id = _echo_of(event)[1]
    decoyed = _frame({"metadata": {"event_id": "nested_decoy"}, **event}, True)
    if how == "truncated":
        cut = draw(st.integers(0, len(decoyed) - 1))
        return FuzzInput(name, decoyed[:cut], "error", echo="exact_or_none", event_id=event_id)
    if how == "trailing_garbage":
        tail = draw(st.sampled_from(["}", "]", ",", "x", " {}", "\x00", "//c", "{", " 1", '"']))
        return FuzzInput(name, decoyed + tail, "error", echo="exact_or_none", event_id=event_id)
    if how == "binary_not_utf8":
        bad = draw(
            st.sampled_from(
                [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf8\x88\x80\x80\x80"]
            )
        )
        data = decoyed.encode()
        at = len(data) - 1  # a last field, in an unknown key the parser would otherwise skip
        data = data[:at] + b', "junk": "' + bad + b'"' + data[at:]
        return FuzzInput(name, data, "error", echo="exact_or_none", event_id=event_id)
    if how == "deep":
        depth = draw(st.sampled_from([10, 100, 1000, 10_000, 100_000]))
        opening, closing = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        deep = opening * depth + "1" + closing * depth
        # Past some depth a parser must refuse; before it, the event is just an event.
        return FuzzInput(
            name, frame[:-1] + ', "deep": ' + deep + "}", "any", echo="any", event_id=event_id
        )
    if how == "duplicate_keys":
        return FuzzInput(name, frame[:-1] + ', "type": "input_audio_buffer.clear"}', "any")
    if how == "bom":
        return FuzzInput(name, "\ufeff" + frame, "any")
    like = _input(name, event, valid, True)
    if how == "binary_event":
        # Binary frames carry JSON just as well (the contract says nothing against them).
        return replace(like, frame=frame.encode())
    # Whitespace around JSON is still JSON.
    pad = draw(st.sampled_from([" ", "\n", "\r\n\t "]))
    return replace(like, frame=pad + frame + pad)


def bad_utf8_text_frame() -> FuzzInput:
    return FuzzInput(
        "raw:text_frame_not_utf8",
        b'{"type": "input_audio_buffer.clear", "event_id": "\xff\xfe"}',
        "any",
        text_bytes=True,
    )


# --- out-of-order sequences ---------------------------------------------------------------


def _ev(kind: str, expect: Expect, replies: set[str] | None = None, **fields: Json) -> FuzzInput:
    event = {"type": kind, **fields}
    echo, event_id = _echo_of(event)
    return FuzzInput(
        f"sequence:{kind}",
        json.dumps(event),
        expect,
        replies=frozenset(replies or ()),
        echo=echo,
        event_id=event_id,
        starts_response=kind == "response.create",
        tolerated=RATE_LIMITED if kind == "input_audio_buffer.append" else frozenset(),
        forbid=_SYNC_REPLIES.get(kind, frozenset()) if expect == "error" else frozenset(),
    )


def _user_text(text: str, **item: Json) -> dict[str, Json]:
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
        **item,
    }


_ADDED: Final = {"conversation.item.added"}
_RESP: Final = {"response.created"}
_CANCELLED: Final = {"response.done", "output_audio_buffer.cleared"}


@st.composite
def sequences(draw: st.DrawFn) -> list[FuzzInput]:
    """Messages that are each valid, sent in an order that makes some of them wrong."""
    n = draw(st.integers(0, 10**6))
    eid = f"seq_{n}"
    text = draw(_TEXT)
    which = draw(st.integers(0, 15))
    if which == 0:  # truncate, retrieve, delete of an item that never existed
        return [
            _ev(
                "conversation.item.truncate",
                "error",
                item_id=FRESH,
                content_index=0,
                audio_end_ms=0,
                event_id=eid,
            ),
            _ev("conversation.item.retrieve", "error", item_id=FRESH),
            _ev("conversation.item.delete", "error", item_id=FRESH, event_id=eid + "b"),
        ]
    if which == 1:  # cancel and clear with no response running
        return [
            _ev("response.cancel", "reply_or_error", _CANCELLED, event_id=eid),
            _ev("output_audio_buffer.clear", "reply", {"output_audio_buffer.cleared"}),
        ]
    if which == 2:  # commit with nothing buffered
        return [
            _ev("input_audio_buffer.clear", "reply", {"input_audio_buffer.cleared"}),
            _ev("input_audio_buffer.commit", "error", event_id=eid),
        ]
    if which == 3:  # an item's life, then every use of it after it is gone
        return [
            _ev("conversation.item.create", "reply", _ADDED, item=_user_text(text, id=FRESH)),
            _ev(
                "conversation.item.retrieve",
                "reply",
                {"conversation.item.retrieved"},
                item_id=FRESH,
            ),
            _ev("conversation.item.create", "error", item=_user_text(text, id=FRESH), event_id=eid),
            _ev("conversation.item.delete", "reply", {"conversation.item.deleted"}, item_id=FRESH),
            _ev("conversation.item.retrieve", "error", item_id=FRESH, event_id=eid + "r"),
            _ev("conversation.item.delete", "error", item_id=FRESH),
            _ev("conversation.item.create", "error", item=_user_text(text), previous_item_id=FRESH),
        ]
    if which == 4:  # the reserved id, and an item placed first
        return [
            _ev(
                "conversation.item.create",
                "reply_or_error",
                _ADDED,
                item=_user_text(text, id="root"),
                event_id=eid,
            ),
            _ev(
                "conversation.item.create",
                "reply",
                _ADDED,
                item=_user_text(text),
                previous_item_id="root",
            ),
        ]
    if which == 5:  # ids the server is about to hand out, taken first by the client
        k = draw(st.integers(1, 12))
        return [
            _ev(
                "conversation.item.create",
                "reply_or_error",
                _ADDED,
                item=_user_text(text, id=f"item_{SID}_{k + i}"),
            )
            for i in range(3)
        ] + [
            _ev(
                "response.create",
                "reply_or_error",
                _RESP,
                response={"output_modalities": ["text"], "max_output_tokens": 2},
            )
        ]
    if which == 6:  # two responses at once, then cancel twice
        return [
            _ev("conversation.item.create", "reply", _ADDED, item=_user_text(text)),
            _ev("response.create", "reply_or_error", _RESP, response={"max_output_tokens": 4}),
            _ev("response.create", "reply_or_error", _RESP, event_id=eid),
            _ev("response.cancel", "reply_or_error", _CANCELLED),
            _ev("response.cancel", "reply_or_error", _CANCELLED, event_id=eid + "c"),
        ]
    if which == 7:  # the reply slot deleted under a running response, its id then reused
        return [
            _ev("conversation.item.create", "reply", _ADDED, item=_user_text(text)),
            _ev(
                "response.create",
                "reply_or_error",
                _RESP,
                response={"output_modalities": ["text"], "max_output_tokens": 2},
            ),
            _ev(
                "conversation.item.delete",
                "reply_or_error",
                {"conversation.item.deleted"},
                item_id=LAST_ITEM,
            ),
            _ev(
                "conversation.item.create",
                "reply_or_error",
                _ADDED,
                item=_user_text(text, id=LAST_ITEM),
            ),
            _ev(
                "conversation.item.truncate",
                "reply_or_error",
                {"conversation.item.truncated"},
                item_id=LAST_ITEM,
                content_index=0,
                audio_end_ms=0,
            ),
            _ev("response.cancel", "reply_or_error", _CANCELLED, event_id=eid),
        ]
    if which == 8:  # truncate, ack and clear a reply while it is being made
        return [
            _ev("conversation.item.create", "reply", _ADDED, item=_user_text(text)),
            _ev("response.create", "reply_or_error", _RESP, response={"max_output_tokens": 3}),
            _ev(
                "conversation.item.truncate",
                "reply_or_error",
                {"conversation.item.truncated"},
                item_id=LAST_ITEM,
                content_index=0,
                audio_end_ms=draw(st.integers(0, 100)),
            ),
            _ev(
                "playback.ack",
                "reply_or_error",
                {"playback.acknowledged"},
                response_id=LAST_RESPONSE,
                played_ms=draw(st.integers(0, 10**4)),
                truncate=draw(st.booleans()),
            ),
            _ev(
                "output_audio_buffer.clear",
                "reply",
                {"output_audio_buffer.cleared", "response.done"},
                response_id=LAST_RESPONSE,
            ),
            _ev(
                "playback.ack",
                "reply_or_error",
                {"playback.acknowledged"},
                response_id=LAST_RESPONSE,
                played_ms=10**6,
                item_id=LAST_ITEM,
            ),
        ]
    if which == 9:  # audio framed for one format, committed under another
        # Odd (fine in G.711), and over 2 ms once read as pcm16, so the commit has audio.
        odd = draw(st.binary(min_size=97, max_size=161).map(lambda b: b if len(b) % 2 else b[:-1]))
        return [
            _ev(
                "session.update",
                "reply",
                {"session.updated"},
                session={"input_audio_format": "g711_ulaw"},
            ),
            _ev("input_audio_buffer.append", "silent", audio=_b64(odd)),
            _ev(
                "conversation.item.create",
                "reply",
                _ADDED,
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_audio", "audio": _b64(odd)}],
                },
            ),
            _ev(
                "session.update",
                "reply",
                {"session.updated"},
                session={"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}},
            ),
            _ev(
                "input_audio_buffer.commit",
                "reply_or_error",  # server VAD, if on, may have committed the buffer first
                {"input_audio_buffer.committed"},
                event_id=eid,
            ),
            _ev(
                "response.create",
                "reply_or_error",
                _RESP,
                response={"output_modalities": ["text"], "max_output_tokens": 1},
            ),
        ]
    if which == 10:  # the commit bridge: a non-final commit, then the real one
        return [
            _ev("input_audio_buffer.append", "silent", audio=_b64(bytes(64))),
            _ev("input_audio_buffer.commit", "silent", final=False, event_id=eid),
            _ev("input_audio_buffer.append", "silent", audio=_b64(bytes(64))),
            _ev(
                "input_audio_buffer.commit",
                "reply_or_error",  # server VAD, if on, may have committed the buffer first
                {"input_audio_buffer.committed"},
                final=True,
            ),
        ]
    if which == 11:  # a large (silent, 0.5-5 s) append, then cleared before anyone hears it
        size = draw(st.integers(24_000, 256 * 1024)) // 2 * 2
        return [
            FuzzInput(
                "sequence:large_append",
                json.dumps({"type": "input_audio_buffer.append", "audio": _b64(bytes(size))}),
                "silent",
                tolerated=RATE_LIMITED,
            ),
            _ev("input_audio_buffer.clear", "reply", {"input_audio_buffer.cleared"}, event_id=eid),
        ]
    if which == 12:  # acks for responses that never were
        return [
            _ev("playback.ack", "error", response_id=FRESH, played_ms=0, event_id=eid),
            _ev(
                "playback.ack",
                "reply_or_error",
                {"playback.acknowledged"},
                response_id=LAST_RESPONSE,
                played_ms=5,
                item_id=FRESH,
            ),
        ]
    if which == 13:  # the format changes while a response runs
        return [
            _ev("conversation.item.create", "reply", _ADDED, item=_user_text(text)),
            _ev("response.create", "reply_or_error", _RESP, response={"max_output_tokens": 4}),
            _ev(
                "session.update",
                "reply",
                {"session.updated"},
                session={
                    "audio": {"output": {"format": {"type": "audio/pcmu"}}},
                    "output_modalities": ["text"],
                },
            ),
            _ev("conversation.context.retrieve", "reply", {"conversation.context"}),
        ]
    if which == 14:  # the same event_id on many messages, good and bad
        return [
            _ev("input_audio_buffer.clear", "reply", {"input_audio_buffer.cleared"}, event_id=eid),
            _ev("conversation.item.retrieve", "error", item_id=FRESH, event_id=eid),
            _ev("input_audio_buffer.commit", "error", event_id=eid),
        ]
    # delete everything the session made, then ask for the context
    return [
        _ev("conversation.item.create", "reply", _ADDED, item=_user_text(text)),
        _ev(
            "conversation.item.delete",
            "reply_or_error",
            {"conversation.item.deleted"},
            item_id=LAST_ITEM,
        ),
        _ev(
            "conversation.item.delete",
            "reply_or_error",
            {"conversation.item.deleted"},
            item_id=LAST_ITEM,
        ),
        _ev("conversation.context.retrieve", "reply", {"conversation.context"}, event_id=eid),
    ]


# --- scripts ------------------------------------------------------------------------------


@st.composite
def _setup(draw: st.DrawFn) -> FuzzInput:
    """The first message: turn detection off (mostly) and small replies."""
    session: dict[str, Json] = {"type": "realtime"}
    if draw(_one_in(7)):
        vad = {"type": "server_vad", "create_response": draw(st.sampled_from([False, False, True]))}
        session["audio"] = {"input": {"turn_detection": vad}}
    else:
        session["audio"] = {"input": {"turn_detection": None}}
    session["max_output_tokens"] = draw(st.integers(1, 8))
    session["output_modalities"] = draw(st.sampled_from([["text"], ["audio"]]))
    event = {"type": "session.update", "session": session, "event_id": "setup"}
    return FuzzInput(
        "setup:session.update",
        json.dumps(event),
        "reply",
        frozenset({"session.updated"}),
        "exact",
        "setup",
    )


def _step() -> st.SearchStrategy[list[FuzzInput]]:
    one = st.one_of(
        valid_inputs(),
        valid_inputs(),
        valid_inputs(),
        valid_inputs(),
        mutated_inputs(),
        mutated_inputs(),
        mutated_inputs(),
        raw_inputs(),
        raw_inputs(),
    )
    return st.one_of(
        one.map(lambda i: [i]), one.map(lambda i: [i]), one.map(lambda i: [i]), sequences()
    )


def _harmless(inp: FuzzInput) -> FuzzInput:
    frame = json.dumps({"type": "conversation.context.retrieve", "event_id": "instead_of_response"})
    return FuzzInput(
        "valid:conversation.context.retrieve",
        frame,
        "reply",
        frozenset({"conversation.context"}),
        "exact",
        "instead_of_response",
        step=inp.step,
    )


def scripts(length: int = 16, max_responses: int = 2) -> st.SearchStrategy[Script]:
    """Sessions of exactly `length` inputs, starting at most `max_responses` responses."""

    @st.composite
    def build(draw: st.DrawFn) -> Script:
        # Drawn first: Hypothesis varies its early choices the most.
        ends_badly = draw(_one_in(20))
        inputs = [draw(_setup())]
        steps = draw(st.lists(_step(), min_size=length - 1, max_size=length - 1))
        for index, step in enumerate(steps, start=1):
            inputs.extend(replace(inp, step=index) for inp in step)
        inputs = inputs[:length]
        started = 0
        for i, inp in enumerate(inputs):
            if inp.starts_response:
                started += 1
                if started > max_responses:
                    inputs[i] = _harmless(inp)
        if ends_badly:
            # The connection cannot outlive this one, so it can only come last.
            inputs[-1] = replace(bad_utf8_text_frame(), step=length)
        return Script(tuple(inputs))

    return build()


# --- checking server events ---------------------------------------------------------------


class EventChecker:
    """Every server event against the contract's schema and, where it knows it, the SDK's."""

    def __init__(self) -> None:
        self._ours = msgspec.json.Decoder(se.ServerEvent)
        self._sdk: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(RealtimeServerEvent)
        self._sdk_types = _sdk_event_types()

    def check(self, raw: str) -> tuple[dict[str, Json], str | None]:
        """The event as JSON, and what is wrong with it (None: nothing)."""
        try:
            event: dict[str, Json] = json.loads(raw)
        except ValueError as error:
            return {}, f"server sent invalid JSON: {error}"
        if not isinstance(event, dict):
            return {}, "server sent a non-object"
        try:
            self._ours.decode(raw)
        except msgspec.ValidationError as error:
            return event, f"not a contract server event: {error}"
        if not isinstance(event.get("event_id"), str) or not event["event_id"]:
            return event, "server event without event_id"
        if event.get("type") in self._sdk_types:
            try:
                self._sdk.validate_python(event)
            except pydantic.ValidationError as error:
                return event, f"the openai SDK rejects it: {error}"
        return event, None


def _sdk_event_types() -> frozenset[str]:
    # Annotated[Union[...], PropertyInfo(discriminator="type")]
    union = typing.get_args(RealtimeServerEvent)[0]
    names: set[str] = set()
    for model in typing.get_args(union):
        fields = getattr(model, "model_fields", {})
        annotation = fields["type"].annotation if "type" in fields else None
        names.update(getattr(annotation, "__args__", ()))
    return frozenset(names)


# --- running scripts ----------------------------------------------------------------------


@dataclass
class Failure:
    invariant: str
    detail: str
    script: Script
    index: int | None = None  # which input of the script; None: the session as a whole
    seen: list[str] = field(default_factory=list)

    def report(self) -> str:
        lines = [f"INVARIANT BROKEN: {self.invariant}: {self.detail}"]
        if self.index is not None:
            inp = self.script.inputs[self.index]
            lines.append(f"input {self.index} ({inp.kind}, expect {inp.expect}, echo {inp.echo}):")
            lines.append(f"  {_short(inp.frame, 4000)}")
        lines.append("server events answering it: " + ", ".join(self.seen[-20:]))
        lines.append(f"the session: {self.script!r}")
        return "\n".join(lines)


@dataclass
class FuzzStats:
    inputs: int = 0
    sessions: int = 0
    server_events: int = 0
    responses: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    errors_by_code: Counter[str] = field(default_factory=Counter)
    closes: Counter[str] = field(default_factory=Counter)
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        lines = [
            f"inputs sent: {self.inputs} in {self.sessions} sessions; "
            f"{self.server_events} server events; {self.responses} responses started",
            "inputs by kind:",
            *(f"  {n:7d}  {k}" for k, n in sorted(self.by_kind.items())),
            "errors by code:",
            *(f"  {n:7d}  {k}" for k, n in sorted(self.errors_by_code.items())),
            "socket closes by code:",
            *(f"  {n:7d}  {k}" for k, n in sorted(self.closes.items())),
            f"invariant failures: {len(self.failures)}",
        ]
        return "\n".join(lines)


class _Closed(Exception):
    """The server ended the socket: its close code, or None when it sent no close frame."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(code, reason)
        self.code = code
        self.reason = reason

    @classmethod
    def of(cls, closed: ConnectionClosed) -> _Closed:
        if closed.rcvd is None:
            return cls(None, "")
        return cls(closed.rcvd.code, closed.rcvd.reason)


class _Broken(Exception):
    """An invariant broke; the session cannot be judged further."""


class _Session:
    """One live socket: reads, checks and remembers every server event."""

    def __init__(
        self, ws: ClientConnection, checker: EventChecker, stats: FuzzStats, timeout_s: float
    ) -> None:
        self.ws = ws
        self.checker = checker
        self.stats = stats
        self.timeout_s = timeout_s
        self.session_id = "no_session"
        self.last_item = "no_item_yet"
        self.last_response = "no_response_yet"
        self.created: list[str] = []
        self.done: Counter[str] = Counter()
        self.event_ids: set[str] = set()
        self.problems: list[str] = []

    def send(self, frame: str | bytes, *, text: bool | None = None) -> None:
        try:
            self.ws.send(frame, text=text)
        except ConnectionClosed as closed:
            raise _Closed.of(closed) from None

    def recv(self, timeout_s: float) -> dict[str, Json]:
        try:
            raw = self.ws.recv(timeout=timeout_s)
        except ConnectionClosed as closed:
            raise _Closed.of(closed) from None
        if not isinstance(raw, str):
            self.problems.append("server sent a binary frame")
            raw = raw.decode("utf-8", "replace")
        self.stats.server_events += 1
        event, problem = self.checker.check(raw)
        if problem is not None:
            self.problems.append(f"{problem}: {_short(raw, 600)}")
        self._track(event)
        return event

    def _track(self, event: dict[str, Json]) -> None:
        kind = event.get("type")
        event_id = event.get("event_id")
        if isinstance(event_id, str):
            if event_id in self.event_ids:
                self.problems.append(f"event_id {event_id!r} sent twice")
            self.event_ids.add(event_id)
        if kind == "session.created":
            self.session_id = str(event.get("session", {}).get("id", self.session_id))
        elif kind in ("conversation.item.added", "response.output_item.added"):
            item_id = event.get("item", {}).get("id")
            if isinstance(item_id, str):
                self.last_item = item_id
        elif kind == "response.created":
            rid = str(event.get("response", {}).get("id"))
            self.created.append(rid)
            self.last_response = rid
            self.stats.responses += 1
        elif kind == "response.done":
            rid = str(event.get("response", {}).get("id"))
            self.done[rid] += 1
            if rid not in self.created:
                self.problems.append(f"response.done for {rid}, which was never created")
            elif self.done[rid] > 1:
                self.problems.append(f"response {rid} got {self.done[rid]} response.done (rule 3)")
        elif kind == "error":
            code = str(event.get("error", {}).get("code"))
            self.stats.errors_by_code[code] += 1
            # Events arrive in the order the server decided, so what this client has seen is
            # exactly what the server knew when it refused.
            running = [r for r in self.created if not self.done[r]]
            if code == "conversation_already_has_active_response" and not running:
                self.problems.append(f"{code}, but every response it started is done")
            if code == "response_not_active" and running:
                self.problems.append(f"{code}, but {running} has not ended")
        elif isinstance(kind, str) and kind.startswith("response.") and kind.endswith(".delta"):
            of = event.get("response_id")
            if isinstance(of, str) and self.done[of]:
                self.problems.append(f"{kind} of {of} after its response.done (rule 2)")

    def substitute(self, frame: str | bytes, step: int) -> str | bytes:
        values = {
            SID: self.session_id,
            LAST_ITEM: self.last_item,
            LAST_RESPONSE: self.last_response,
            FRESH: f"fz_{step}",
        }
        if isinstance(frame, str):
            if "@@" in frame:
                for token, value in values.items():
                    frame = frame.replace(token, value)
            return frame
        if b"@@" in frame:
            for token, value in values.items():
                frame = frame.replace(token.encode(), value.encode())
        return frame

    def until(self, match: Any, what: str) -> list[dict[str, Json]]:
        """Events up to and including the first that `match`es; _Broken on a hang."""
        got: list[dict[str, Json]] = []
        deadline = time.monotonic() + self.timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Broken(f"no {what} within {self.timeout_s:.0f} s (a hang)")
            try:
                event = self.recv(left)
            except TimeoutError:
                continue
            got.append(event)
            if match(event):
                return got


def _is_error_named(event: dict[str, Json], event_id: str) -> bool:
    return event.get("type") == "error" and event.get("error", {}).get("event_id") == event_id


def _judge(inp: FuzzInput, events: list[dict[str, Json]]) -> str | None:
    """What is wrong with `events` as the answer to `inp` (None: nothing)."""
    errors = [
        e["error"]
        for e in events
        if e.get("type") == "error" and e.get("error", {}).get("code") not in ASYNC_ERROR_CODES
    ]
    types = {str(e.get("type")) for e in events}
    for error in errors:
        if (
            error.get("type") != "invalid_request_error"
            or not error.get("code")
            or not error.get("message")
        ):
            return f"malformed error {error}"
        if inp.echo == "exact" and error.get("event_id") != inp.event_id:
            sent = _short(inp.event_id or "")
            return f"error does not name the event_id sent ({sent}): {_short(str(error))}"
        if inp.echo == "exact_or_none" and error.get("event_id") not in (inp.event_id, None):
            sent = _short(inp.event_id or "")
            return f"error names another event_id than the one sent ({sent}): {_short(str(error))}"
        if inp.echo == "none" and error.get("event_id") is not None:
            return f"error names an event_id that was never sent: {_short(str(error))}"
    codes = {str(e.get("code")) for e in errors}
    if errors and codes <= inp.tolerated:
        return None
    if inp.expect == "error":
        if not errors:
            return "no error event for an invalid message"
        if types & inp.forbid:
            return f"rejected, yet also applied: {sorted(types & inp.forbid)}"
    elif inp.expect == "reply":
        if errors:
            return f"a valid message was refused: {sorted(codes)} {_short(str(errors[0]))}"
        if not types & inp.replies:
            return f"no {sorted(inp.replies)} for a valid message"
    elif inp.expect == "reply_or_error":
        if not errors and not types & inp.replies:
            return f"neither an error nor {sorted(inp.replies)}"
    elif inp.expect == "silent" and errors:
        return f"a valid message was refused: {sorted(codes)} {_short(str(errors[0]))}"
    return None


_Fail = Callable[[str, str, int | None], None]


class FuzzRunner:
    """Runs scripts against a live server; every broken invariant becomes a `Failure`."""

    def __init__(self, url: str, *, timeout_s: float = 30.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.stats = FuzzStats()
        self.checker = EventChecker()
        self._probes = 0

    def run(self, script: Script) -> list[Failure]:
        failures: list[Failure] = []
        seen: list[str] = []

        def fail(invariant: str, detail: str, index: int | None) -> None:
            failures.append(Failure(invariant, detail, script, index, list(seen)))

        self.stats.sessions += 1
        index: int | None = None
        try:
            with connect(
                self.url, max_size=None, open_timeout=10, close_timeout=5, compression=None
            ) as ws:
                session = _Session(ws, self.checker, self.stats, self.timeout_s)
                first = session.recv(self.timeout_s)
                if first.get("type") != "session.created":
                    fail(
                        "handshake",
                        f"first event is {first.get('type')}, not session.created",
                        None,
                    )
                for index, inp in enumerate(script.inputs):
                    seen.clear()
                    if not self._send(session, inp, index, seen, fail):
                        break
                else:
                    index = None
                    self._finish(session, seen, fail)
                for problem in session.problems:
                    fail("server events", problem, index)
        except _Closed as closed:
            self.stats.closes[str(closed.code)] += 1
            detail = f"the server closed the socket: code {closed.code} {closed.reason!r}"
            fail("connection kept on bad input", detail, index)
        except _Broken as broken:
            fail("no hang", str(broken), index)
        except (OSError, TimeoutError, WebSocketException) as error:
            fail("connection", f"{type(error).__name__}: {error}", index)
        self.stats.failures.extend(failures)
        return failures

    def _send(
        self, session: _Session, inp: FuzzInput, index: int, seen: list[str], fail: _Fail
    ) -> bool:
        """Send one input and judge its answer; False when the socket is gone (as it must be)."""
        frame = session.substitute(inp.frame, inp.step)
        self.stats.inputs += 1
        self.stats.by_kind[inp.kind] += 1
        session.send(frame, text=True if inp.text_bytes else None)
        if inp.text_bytes:
            # RFC 6455 8.1: invalid UTF-8 in a text frame fails the connection, with 1007 or
            # by just closing TCP (the RFC allows both); 1011 would be a server bug.
            try:
                session.until(lambda e: False, "close after a non-UTF-8 text frame")
            except _Closed as closed:
                self.stats.closes[str(closed.code)] += 1
                if closed.code not in (1007, None):
                    fail("close code", f"a non-UTF-8 text frame got close {closed.code}", index)
                return False
            return False  # until() raised _Broken otherwise
        self._probes += 1
        probe = f"probe-{self._probes}"
        session.send(
            json.dumps(
                {"type": "conversation.item.retrieve", "item_id": PROBE_ITEM, "event_id": probe}
            )
        )
        events = session.until(lambda e: _is_error_named(e, probe), f"answer to probe {probe}")
        seen.extend(str(e.get("type")) for e in events)
        problem = _judge(inp, events[:-1])
        if problem is not None:
            fail("answer", problem, index)
        if events[-1].get("error", {}).get("code") != "item_not_found":
            fail("session keeps working", f"probe answered with {events[-1]}", index)
        return True

    def _finish(self, session: _Session, seen: list[str], fail: _Fail) -> None:
        """Cancel what still runs (every response must end exactly once), then check the
        session still takes a plain `session.update`."""
        seen.clear()
        deadline = time.monotonic() + self.timeout_s
        cancelled: set[str] = set()
        while True:
            open_ = [r for r in session.created if not session.done[r]]
            if not open_:
                break
            for rid in open_:
                if rid not in cancelled:
                    cancelled.add(rid)
                    cancel = {"type": "response.cancel", "response_id": rid, "event_id": "drain"}
                    session.send(json.dumps(cancel))
            left = deadline - time.monotonic()
            if left <= 0:
                fail("one terminal per response (rule 3)", f"no response.done for {open_}", None)
                return
            try:
                seen.append(str(session.recv(left).get("type")))
            except TimeoutError:
                continue
        session.send(
            json.dumps(
                {
                    "type": "session.update",
                    "session": {"instructions": "still there?"},
                    "event_id": "final",
                }
            )
        )
        events = session.until(
            lambda e: e.get("type") == "session.updated" or _is_error_named(e, "final"),
            "session.updated",
        )
        seen.extend(str(e.get("type")) for e in events)
        if events[-1].get("type") != "session.updated":
            fail("session keeps working", f"the closing session.update got {events[-1]}", None)
        session.ws.close()
        self.stats.closes[str(session.ws.close_code)] += 1
        if session.ws.close_code not in (1000, None):
            fail("clean close", f"closing the session got code {session.ws.close_code}", None)


# --- the server's side --------------------------------------------------------------------


class ServerErrors(logging.Handler):
    """Log records at ERROR or above from the server running in this process."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += " (" + "; ".join(_leaves(record.exc_info[1])) + ")"
        self.records.append(f"{record.name}: {text}")


def _leaves(error: BaseException) -> list[str]:
    """The exceptions inside (nested) exception groups, each with where it was raised."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    where = ""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is not None:
        where = f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
    return [f"{type(error).__name__}: {error}{where}"]


@contextmanager
def capture_server_errors() -> Iterator[ServerErrors]:
    handler = ServerErrors()
    loggers = [logging.getLogger(), logging.getLogger("hypercorn.error")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


def metric_value(http_url: str, name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """One sample of the server's /metrics (None when absent)."""
    with urllib.request.urlopen(f"{http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in (labels or {}).items())
    prefix = f"{name}{{{want}}} " if want else f"{name} "
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return None


def healthz(http_url: str) -> Json:
    with urllib.request.urlopen(f"{http_url}/healthz", timeout=10) as response:
        return json.loads(response.read())


def wait_for_metric(http_url: str, name: str, want: float, timeout_s: float = 10.0) -> float | None:
    """Poll until the metric equals `want` (sessions close a moment after their sockets)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = metric_value(http_url, name)
        if value == want or time.monotonic() > deadline:
            return value
        time.sleep(0.1)
