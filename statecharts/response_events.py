"""The ResponseChart's events, typed (statecharts/response.py says what each one does).

Rules:
1. One class per event of the chart; `name` is the chart's event, the fields its arguments.
   tests/statecharts/test_chart_events.py checks that the classes and the chart's events are
   the same set.
2. `Output` is the hot path's event: the core uses `ResponseChart.forward`, which decides
   exactly as `Output` does without the engine's dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from statecharts.base import ChartEvent
from statecharts.vocabulary import IncompleteReason

__all__ = [
    "Adopt",
    "BargeIn",
    "Cancel",
    "Complete",
    "Fail",
    "Output",
    "Played",
    "ResponseEvent",
    "Start",
    "Truncate",
]


@dataclass(frozen=True, slots=True)
class ResponseEvent(ChartEvent):
    """Any of the ResponseChart's events."""


@dataclass(frozen=True, slots=True)
class Start(ResponseEvent):
    name: ClassVar[str] = "start"


@dataclass(frozen=True, slots=True)
class Adopt(ResponseEvent):
    """A preemptive response adopted at its turn's commit: its stream runs already."""

    name: ClassVar[str] = "adopt"


@dataclass(frozen=True, slots=True)
class Output(ResponseEvent):
    name: ClassVar[str] = "output"
    chunk: object


@dataclass(frozen=True, slots=True)
class Complete(ResponseEvent):
    """The backend stream ended on its own; `reason`: the pipeline's own limit cut the reply
    short (the response ends `incomplete`), None: it ended where the model ended it."""

    name: ClassVar[str] = "complete"
    audio_pending: bool = False
    reason: IncompleteReason | None = None


@dataclass(frozen=True, slots=True)
class Played(ResponseEvent):
    """The reply was heard in full (`audio_end_ms`: where an ACK said it ended)."""

    name: ClassVar[str] = "played"
    audio_end_ms: int | None = None


@dataclass(frozen=True, slots=True)
class BargeIn(ResponseEvent):
    name: ClassVar[str] = "barge_in"
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Cancel(ResponseEvent):
    name: ClassVar[str] = "cancel"
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Truncate(ResponseEvent):
    name: ClassVar[str] = "truncate"
    audio_end_ms: int


@dataclass(frozen=True, slots=True)
class Fail(ResponseEvent):
    name: ClassVar[str] = "fail"
    reason: str = "backend_error"
