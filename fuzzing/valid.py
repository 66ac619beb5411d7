"""Valid client events of every type (GA and beta spellings), each with the answer it must get.

Rules:
- `Valid.expect` is what any correct server answers, whatever the session holds: `reply`
  only where the session cannot refuse (a server-made id placed last, a clear, a context
  retrieve); `reply_or_error` where the outcome depends on state (an id that may be gone, a
  response that may run); `silent` for appends (rate-limited appends are tolerated).
- Turn detection is mostly off and `create_response` mostly false: a fuzzer has no business
  making the slow model talk on every turn. `starts_response` marks inputs that may start one,
  so a script can cap them.
- Turn detection, when on, is `server_vad` or `semantic_vad` (every eagerness), either with
  `preemptive_response` on or off: a server that runs the `turn` model accepts both (the
  in-memory runner's core has one; so does a live server with all its models).
- `conversation: "none"` (out-of-band responses) runs like any response, its items in no
  conversation.
- Function calling: a `session.update` or `response.create` that gives `tools` gives a
  `tool_choice` that fits them (a mode, or one of their names), and one that gives only a
  choice gives `auto` or `none`, so whatever the session holds it cannot be refused for it;
  items may be `function_call` (with or without `call_id`) and `function_call_output` (any
  `call_id`: an unknown one is accepted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Final

from hypothesis import strategies as st

from fuzzing.inputs import RATE_LIMITED, Echo, Expect, FuzzInput, Json
from fuzzing.values import (
    AUDIO,
    EVENT_IDS,
    ITEM_REFS,
    PNG,
    RESPONSE_REFS,
    SHORT_ID,
    TEXT,
    b64,
    optional,
    weighted,
)


@dataclass(frozen=True, slots=True)
class Valid:
    event: dict[str, Json]
    expect: Expect
    replies: frozenset[str] = frozenset()
    tolerated: frozenset[str] = frozenset()
    starts_response: bool = False


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
# Mostly off: a fuzzer has no business making the slow model talk on every turn.
_CREATE_RESPONSE: Final = st.sampled_from([False, False, False, True])
# v2's interruption policy: pause mode runs the overlap tracker and its timers.
_INTERRUPTION: Final = st.fixed_dictionaries(
    {},
    optional={
        "mode": st.sampled_from(["immediate", "pause", "pause"]),
        "min_speech_ms": st.integers(0, 10_000),
        "resume_after_ms": st.integers(0, 30_000),
        "backchannels": st.lists(st.sampled_from(["yeah", "i see", "ok", "Uh-huh!"])),
    },
)
_SERVER_VAD: Final = st.fixed_dictionaries(
    {"type": st.just("server_vad")},
    optional={
        "threshold": st.floats(0.0, 1.0),
        "prefix_padding_ms": st.integers(0, 2000) | st.just(2**70),
        "silence_duration_ms": st.integers(0, 5000) | st.just(2**62),
        "create_response": _CREATE_RESPONSE,
        "interrupt_response": st.booleans(),
        "idle_timeout_ms": st.none() | st.integers(0, 10_000) | st.just(2**70),
        "interruption": _INTERRUPTION,
        # v2: a response may start at a candidate pause, held until the commit.
        "preemptive_response": st.booleans(),
    },
)
# The turn model ends turns (the server runs it); the silence knobs are server_vad's only.
_SEMANTIC_VAD: Final = st.fixed_dictionaries(
    {"type": st.just("semantic_vad")},
    optional={
        "eagerness": st.sampled_from(["low", "medium", "high", "auto"]),
        "create_response": _CREATE_RESPONSE,
        "interrupt_response": st.booleans(),
        "interruption": _INTERRUPTION,
        "preemptive_response": st.booleans(),
    },
)
_TURN_DETECTION: Final = st.one_of(st.none(), st.none(), _SERVER_VAD, _SEMANTIC_VAD)
_TRANSCRIPTION: Final = st.none() | optional(
    model=st.sampled_from(["whisper-1", "gpt-4o-transcribe"]),
    language=st.sampled_from(["en", "fr", ""]),
    prompt=TEXT,
)
# Valid schemas of an object's parameters, and the names they go by.
_SCHEMAS: Final = st.sampled_from(
    [
        {"type": "object", "properties": {}},
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
        {"type": "object", "additionalProperties": False},
    ]
)
_TOOL_NAMES: Final = st.sampled_from(["get_weather", "set_alarm", "ping", "a-b_9"])
_TOOL: Final = st.builds(
    lambda name, extra: {"type": "function", "name": name, **extra},
    _TOOL_NAMES,
    optional(description=TEXT, parameters=_SCHEMAS),
)


_TOOLS: Final = st.lists(_TOOL, max_size=3, unique_by=lambda tool: tool["name"])


@st.composite
def _tool_fields(draw: st.DrawFn) -> dict[str, Json]:
    """`tools` with a `tool_choice` that fits them, a choice that fits any tools, or neither."""
    how = draw(st.sampled_from(["none", "none", "tools", "tools", "choice"]))
    if how == "none":
        return {}
    if how == "choice":
        return {"tool_choice": draw(st.sampled_from(["auto", "none"]))}
    tools = draw(_TOOLS)
    choices: list[Json] = ["auto", "none"]
    if tools:
        choices += ["required", *({"type": "function", "name": t["name"]} for t in tools)]
    return {"tools": tools, "tool_choice": draw(st.sampled_from(choices))}


# Strategies drawn from inside others are built once: a new one per draw would be validated
# again (its whole tree) every time.
_TOOL_FIELDS: Final = _tool_fields()


_MODALITIES: Final = st.sampled_from([["audio"], ["text"], ["text", "audio"], ["audio", "text"]])
_VOICE: Final = st.sampled_from(["alloy", "marin", "cedar", "verse"]) | TEXT
_MAX_TOKENS: Final = st.integers(1, 64) | st.just("inf") | st.just(2**70)

_GA_SESSION: Final = optional(
    type=st.just("realtime"),
    instructions=st.text(max_size=200),
    output_modalities=_MODALITIES,
    max_output_tokens=_MAX_TOKENS,
    audio=optional(
        input=optional(
            format=_GA_FORMAT | _BETA_FORMAT,
            turn_detection=_TURN_DETECTION,
            transcription=_TRANSCRIPTION,
        ),
        output=optional(format=_GA_FORMAT | _BETA_FORMAT, voice=_VOICE),
    ),
)
_BETA_SESSION: Final = optional(
    instructions=st.text(max_size=200),
    modalities=_MODALITIES,
    input_audio_format=_BETA_FORMAT,
    output_audio_format=_BETA_FORMAT,
    turn_detection=_TURN_DETECTION,
    input_audio_transcription=_TRANSCRIPTION,
    voice=_VOICE,
    max_response_output_tokens=_MAX_TOKENS,
)


def with_id(event: dict[str, Json], event_id: str | None) -> dict[str, Json]:
    return event if event_id is None else {**event, "event_id": event_id}


_SESSION: Final = st.one_of(_GA_SESSION, _GA_SESSION, _BETA_SESSION)


@st.composite
def _session_update(draw: st.DrawFn) -> Valid:
    session = draw(_SESSION)
    event = {"type": "session.update", "session": {**session, **draw(_TOOL_FIELDS)}}
    return Valid(event, "reply", frozenset({"session.updated"}))


def _append_event(audio: bytes) -> Valid:
    event = {"type": "input_audio_buffer.append", "audio": b64(audio)}
    return Valid(event, "silent", tolerated=RATE_LIMITED)


_COMMIT_EXTRAS: Final = optional(
    create_response=st.sampled_from([False, False, True]), final=st.booleans()
)


@st.composite
def _commit(draw: st.DrawFn) -> Valid:
    extras = draw(_COMMIT_EXTRAS)
    event = {"type": "input_audio_buffer.commit", **extras}
    # `final: false` is acknowledged by silence (the vllm-omni bridge keeps buffering).
    expect: Expect = "any" if extras.get("final") is False else "reply_or_error"
    starts = bool(extras.get("create_response")) and extras.get("final") is not False
    return Valid(event, expect, frozenset({"input_audio_buffer.committed"}), starts_response=starts)


@cache
def _content_part(role: str) -> st.SearchStrategy[dict[str, Json]]:
    text = TEXT.map(lambda t: {"type": "text", "text": t})
    if role == "system":
        return st.one_of(TEXT.map(lambda t: {"type": "input_text", "text": t}), text)
    audio = st.builds(
        lambda a, t: {"type": "audio", "audio": b64(a), **t},
        AUDIO,
        optional(transcript=TEXT),
    )
    if role == "assistant":
        return st.one_of(
            TEXT.map(lambda t: {"type": "output_text", "text": t}),
            st.builds(lambda t: {"type": "output_audio", **t}, optional(transcript=TEXT)),
            text,
            audio,
        )
    return st.one_of(
        TEXT.map(lambda t: {"type": "input_text", "text": t}),
        st.builds(
            lambda a, t: {"type": "input_audio", "audio": b64(a), **t},
            AUDIO,
            optional(transcript=TEXT),
        ),
        st.builds(
            lambda u, d: {"type": "input_image", "image_url": u, **d},
            PNG,
            optional(detail=st.sampled_from(["auto", "low", "high"])),
        ),
        text,
        audio,
    )


_CALL_ITEMS: Final = st.one_of(
    st.builds(
        lambda name, args, extra: {
            "type": "function_call",
            "name": name,
            "arguments": args,
            **extra,
        },
        _TOOL_NAMES,
        st.sampled_from(["{}", '{"city": "Paris"}', ""]),
        optional(call_id=SHORT_ID),
    ),
    st.builds(
        lambda call_id, output: {
            "type": "function_call_output",
            "call_id": call_id,
            "output": output,
        },
        SHORT_ID,
        TEXT,
    ),
)


@st.composite
def _item(draw: st.DrawFn) -> dict[str, Json]:
    if draw(st.integers(0, 5)) == 0:
        call: dict[str, Json] = draw(_CALL_ITEMS)
        return call
    role = draw(st.sampled_from(["user", "user", "system", "assistant"]))
    content = draw(st.lists(_content_part(role), max_size=3))
    return {"type": "message", "role": role, "content": content}


_ITEM: Final = _item()
_ITEM_ID: Final = st.none() | st.none() | ITEM_REFS
_PREVIOUS: Final = st.sampled_from([None, None, "root"]) | ITEM_REFS


@st.composite
def _item_create(draw: st.DrawFn) -> Valid:
    item = draw(_ITEM)
    event: dict[str, Json] = {"type": "conversation.item.create", "item": item}
    item_id = draw(_ITEM_ID)
    if item_id is not None:
        item["id"] = item_id
    previous = draw(_PREVIOUS)
    if previous is not None:
        event["previous_item_id"] = previous
    # Where the session cannot refuse it (a server-made id, placed last or first): must work.
    sure = item_id is None and previous in (None, "root")
    expect: Expect = "reply" if sure else "reply_or_error"
    return Valid(event, expect, frozenset({"conversation.item.added"}))


def _by_item(kind: str, reply: str) -> st.SearchStrategy[Valid]:
    return ITEM_REFS.map(
        lambda ref: Valid({"type": kind, "item_id": ref}, "reply_or_error", frozenset({reply}))
    )


_TRUNCATE: Final = st.builds(
    lambda ref, index, end: Valid(
        {
            "type": "conversation.item.truncate",
            "item_id": ref,
            "content_index": index,
            "audio_end_ms": end,
        },
        "reply_or_error",
        frozenset({"conversation.item.truncated"}),
    ),
    ITEM_REFS,
    st.integers(0, 2),
    st.integers(0, 5000) | st.just(2**70),
)
_RESPONSE_PARAMS: Final = optional(
    output_modalities=_MODALITIES,
    modalities=_MODALITIES,
    instructions=st.text(max_size=100),
    max_output_tokens=st.integers(1, 16) | st.just("inf"),
    max_response_output_tokens=st.integers(1, 16),
    conversation=st.sampled_from(["auto", "auto", "none"]),
    metadata=st.dictionaries(SHORT_ID, TEXT, max_size=3),
)


_MAYBE_PARAMS: Final = st.none() | st.none() | _RESPONSE_PARAMS


@st.composite
def _response_create(draw: st.DrawFn) -> Valid:
    params = draw(_MAYBE_PARAMS)
    if params is not None:
        params = {**params, **draw(_TOOL_FIELDS)}
    event: dict[str, Json] = {"type": "response.create"}
    if params is not None or draw(st.booleans()):
        event["response"] = params
    return Valid(event, "reply_or_error", frozenset({"response.created"}), starts_response=True)


def _by_response(kind: str, expect: Expect, replies: set[str]) -> st.SearchStrategy[Valid]:
    refs = st.none() | st.none() | RESPONSE_REFS
    return refs.map(
        lambda ref: Valid(
            {"type": kind} if ref is None else {"type": kind, "response_id": ref},
            expect,
            frozenset(replies),
        )
    )


_ACK: Final = st.builds(
    lambda ref, played, extra: Valid(
        {"type": "playback.ack", "response_id": ref, "played_ms": played, **extra},
        "reply_or_error",
        frozenset({"playback.acknowledged"}),
    ),
    RESPONSE_REFS,
    st.integers(0, 10_000) | st.just(2**70),
    optional(item_id=ITEM_REFS, committed_ms=st.integers(0, 10_000), truncate=st.booleans()),
)


_CLEARED: Final = "output_audio_buffer.cleared"
_CLEAR: Final = Valid(
    {"type": "input_audio_buffer.clear"}, "reply", frozenset({"input_audio_buffer.cleared"})
)
_CONTEXT: Final = Valid(
    {"type": "conversation.context.retrieve"}, "reply", frozenset({"conversation.context"})
)
VALID: Final[st.SearchStrategy[Valid]] = weighted(
    # First, since Hypothesis draws the first choice most: a cheap one.
    (1, st.just(_CLEAR)),
    (4, AUDIO.map(_append_event)),
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


def to_frame(event: Json, ascii_only: bool) -> str:
    return json.dumps(event, ensure_ascii=ascii_only)


def echo_of(event: Json) -> tuple[Echo, str | None]:
    if not isinstance(event, dict):
        return "none", None
    event_id = event.get("event_id")
    return ("exact", event_id) if isinstance(event_id, str) else ("none", None)


def as_input(kind: str, event: dict[str, Json], valid: Valid, ascii_only: bool) -> FuzzInput:
    echo, event_id = echo_of(event)
    return FuzzInput(
        kind=kind,
        frame=to_frame(event, ascii_only),
        expect=valid.expect,
        replies=valid.replies,
        echo=echo,
        event_id=event_id,
        tolerated=valid.tolerated,
        starts_response=valid.starts_response,
    )


@st.composite
def valid_inputs(draw: st.DrawFn) -> FuzzInput:
    valid = draw(VALID)
    event = with_id(valid.event, draw(EVENT_IDS))
    return as_input(f"valid:{event['type']}", event, valid, draw(st.booleans()))


# Appends of 10 ms to 0.5 s (pcm16 24 kHz): long enough for turn detection to cut chunks from.
# Only for the in-memory runner, whose VAD and ASR are stand-ins; a live server's Whisper would
# transcribe every committed one.
_LONG_AUDIO: Final = st.integers(10, 500).map(lambda ms: bytes(48 * ms))


@st.composite
def long_appends(draw: st.DrawFn) -> FuzzInput:
    valid = _append_event(draw(_LONG_AUDIO))
    event = with_id(valid.event, draw(EVENT_IDS))
    return as_input("valid:input_audio_buffer.append:long", event, valid, True)
