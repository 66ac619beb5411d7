"""The PlaybackChart's events, typed (statecharts/playback.py says what each one does).

Rules:
1. One class per event of the chart; `name` is the chart's event, the fields its arguments.
   tests/statecharts/test_chart_events.py checks that the classes and the chart's events are
   the same set.
2. The playback ledger (orchestrator/session/history/playback.py) sends these, never a name;
   it computes every comparison a guard takes (`acked_all`, `clock_done`, `raises`) from its
   numbers, on one clock: the caller's `now_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from statecharts.base import ChartEvent

__all__ = [
    "Ack",
    "Acknowledge",
    "Clear",
    "ClockPlayed",
    "Finish",
    "GraceOver",
    "PlaybackEvent",
    "Truncate",
]


@dataclass(frozen=True, slots=True)
class PlaybackEvent(ChartEvent):
    """Any of the PlaybackChart's events."""


@dataclass(frozen=True, slots=True)
class Finish(PlaybackEvent):
    """Generation ended: `acked_all`, the client's cursor covers all audio generated;
    `clock_done`, the playout clock does."""

    name: ClassVar[str] = "finish"
    acked_all: bool = False
    clock_done: bool = False


@dataclass(frozen=True, slots=True)
class Ack(PlaybackEvent):
    """A `playback.ack`: the client's cursor after it (`cursor_ms`, monotonic, at most the
    audio generated); `truncate`, the ACK cuts; `raises`, the cursor is past an estimated
    cut."""

    name: ClassVar[str] = "ack"
    cursor_ms: int
    acked_all: bool = False
    truncate: bool = False
    raises: bool = False


@dataclass(frozen=True, slots=True)
class Truncate(PlaybackEvent):
    """The client's `conversation.item.truncate` at `audio_end_ms`."""

    name: ClassVar[str] = "truncate"
    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class Clear(PlaybackEvent):
    """The server's clear of the reply (a barge-in, a clear, a cancel, a failure): the
    playout clock's estimate and the client's cursor, for the chart to pick from."""

    name: ClassVar[str] = "clear"
    estimate_ms: int
    cursor_ms: int


@dataclass(frozen=True, slots=True)
class ClockPlayed(PlaybackEvent):
    """The playout clock has played all the audio of the complete reply."""

    name: ClassVar[str] = "clock_played"


@dataclass(frozen=True, slots=True)
class GraceOver(PlaybackEvent):
    """The grace after the server's clear passed (the ledger's deadline, the caller's ms)."""

    name: ClassVar[str] = "grace_over"


@dataclass(frozen=True, slots=True)
class Acknowledge(PlaybackEvent):
    """The session's first `playback.ack`: history by acknowledgement from now on;
    `this_reply`, that ACK names this reply."""

    name: ClassVar[str] = "acknowledge"
    this_reply: bool = False
