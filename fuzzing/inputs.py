"""What the fuzzer sends: one `FuzzInput` per client message, one `Script` per session.

Rules:
- Every input says what the server must answer (`expect`, `replies`, `forbid`, `tolerated`)
  and which `event_id` its errors must carry (`echo`); the checks judge against nothing else.
- Inputs are generated up front, so what only the live session knows (its id, the items and
  responses it made) is written as a placeholder (`SID`, `LAST_ITEM`, `LAST_RESPONSE`,
  `FRESH`) that a runner replaces just before sending (`substitute`).
- A script's `seed` drives what a runner decides itself (the in-memory runner's backend and
  turn detection); the live server ignores it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

Json = Any

# What a server must do with one input.
#   reply: no error, and one of `replies` comes back;   error: an `error` event comes back;
#   reply_or_error: one of the two (the outcome depends on session state);
#   silent: no error (an append);   any: only the echo rule holds.
Expect = Literal["reply", "error", "reply_or_error", "silent", "any"]
# Which event_id the input's errors must carry: the one sent; none (none or a non-string was
# sent); the one sent or none (malformed JSON, where the server can only look for it, but must
# not take a nested "event_id" for it); any (raw bytes).
Echo = Literal["exact", "none", "exact_or_none", "any"]

SID: Final = "@@sid@@"
LAST_ITEM: Final = "@@last_item@@"
LAST_RESPONSE: Final = "@@last_response@@"
FRESH: Final = "@@fresh@@"

# Errors that are not the answer to a client message (turn detection losing Triton).
ASYNC_ERROR_CODES: Final = frozenset({"vad_unavailable", "turn_model_unavailable"})
# Appends past the per-key audio rate are refused; a legitimate answer to a valid append.
RATE_LIMITED: Final = frozenset({"rate_limit_exceeded"})

# Answers only a client message produces (never VAD, a timer or a backend), so seeing one
# after an invalid message means the server half-applied it.
SYNC_REPLIES: Final[Mapping[str, frozenset[str]]] = {
    "session.update": frozenset({"session.updated"}),
    "input_audio_buffer.clear": frozenset({"input_audio_buffer.cleared"}),
    "conversation.item.retrieve": frozenset({"conversation.item.retrieved"}),
    "conversation.item.delete": frozenset({"conversation.item.deleted"}),
    "conversation.item.truncate": frozenset({"conversation.item.truncated"}),
    "playback.ack": frozenset({"playback.acknowledged"}),
    "conversation.context.retrieve": frozenset({"conversation.context"}),
}


def short(value: str | bytes, limit: int = 300) -> str:
    """A repr short enough for a failure report (megabyte inputs stay readable)."""
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
        return f"FuzzInput({self.kind}, {short(self.frame)}, expect={self.expect})"


@dataclass(frozen=True, slots=True)
class Script:
    """One session's inputs, in order, and the seed of what a runner decides itself."""

    inputs: tuple[FuzzInput, ...]
    seed: int = 0

    def __repr__(self) -> str:
        lines = ",\n".join(f"  {i}: {inp!r}" for i, inp in enumerate(self.inputs))
        return f"Script(seed={self.seed},\n{lines}\n)"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        # Hypothesis prints examples with this hook when there is one: keep them short.
        printer.text(repr(self))


@dataclass(slots=True)
class Known:
    """What the session has told the client so far: the values placeholders stand for."""

    session_id: str = "no_session"
    last_item: str = "no_item_yet"
    last_response: str = "no_response_yet"


def substitute(frame: str | bytes, step: int, known: Known) -> str | bytes:
    """The frame with its placeholders replaced by what the session has made."""
    # Placeholders stand inside JSON strings, and an id the session made may be any string the
    # client chose (control characters included): inserted JSON-escaped, so the frame stays
    # what the strategy meant (valid JSON stays valid).
    values = {
        token: json.dumps(value)[1:-1]
        for token, value in {
            SID: known.session_id,
            LAST_ITEM: known.last_item,
            LAST_RESPONSE: known.last_response,
            FRESH: f"fz_{step}",
        }.items()
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
