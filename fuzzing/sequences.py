"""Out-of-order sequences: messages each valid alone, sent in an order that makes some wrong.

Rules:
- Each of the 16 scenarios (an item's life and every use after it is gone, ids the server is
  about to hand out taken first, two responses at once, a reply slot deleted under a running
  response, audio framed for one format and committed under another, the non-final commit
  bridge, one event_id on many messages, ...) states, message by message, what the session
  must answer given what came before in the scenario.
- Where something outside the scenario may have changed the state (server VAD committing
  the buffer first, an earlier response still running) the answer is `reply_or_error`.
- `FRESH` names an id unique to the scenario (the runner makes `fz_<step>` of it).
"""

from __future__ import annotations

import json
from typing import Final

from hypothesis import strategies as st

from fuzzing.inputs import (
    FRESH,
    LAST_ITEM,
    LAST_RESPONSE,
    RATE_LIMITED,
    SID,
    SYNC_REPLIES,
    Expect,
    FuzzInput,
    Json,
)
from fuzzing.valid import echo_of
from fuzzing.values import TEXT, b64


def _ev(kind: str, expect: Expect, replies: set[str] | None = None, **fields: Json) -> FuzzInput:
    event = {"type": kind, **fields}
    echo, event_id = echo_of(event)
    return FuzzInput(
        f"sequence:{kind}",
        json.dumps(event),
        expect,
        replies=frozenset(replies or ()),
        echo=echo,
        event_id=event_id,
        starts_response=kind == "response.create",
        tolerated=RATE_LIMITED if kind == "input_audio_buffer.append" else frozenset(),
        forbid=SYNC_REPLIES.get(kind, frozenset()) if expect == "error" else frozenset(),
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
    text = draw(TEXT)
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
            _ev("input_audio_buffer.append", "silent", audio=b64(odd)),
            _ev(
                "conversation.item.create",
                "reply",
                _ADDED,
                item={
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_audio", "audio": b64(odd)}],
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
            _ev("input_audio_buffer.append", "silent", audio=b64(bytes(64))),
            _ev("input_audio_buffer.commit", "silent", final=False, event_id=eid),
            _ev("input_audio_buffer.append", "silent", audio=b64(bytes(64))),
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
                json.dumps({"type": "input_audio_buffer.append", "audio": b64(bytes(size))}),
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
