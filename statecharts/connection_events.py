"""The ConnectionChart's events, typed (statecharts/connection.py says what each one does).

Rules:
1. One class per event of the chart; `name` is the chart's event (none takes arguments).
   tests/statecharts/test_chart_events.py checks that the classes and the chart's events are
   the same set.
2. The link (orchestrator/session/resume/link.py) sends these, never a name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from statecharts.base import ChartEvent

__all__ = ["ConnectionEvent", "Drop", "Expire", "Finish", "Leave", "Overflow", "Resume"]


@dataclass(frozen=True, slots=True)
class ConnectionEvent(ChartEvent):
    """Any of the ConnectionChart's events."""


@dataclass(frozen=True, slots=True)
class Drop(ConnectionEvent):
    """The attached connection was lost without a clean close: the grace starts."""

    name: ClassVar[str] = "drop"


@dataclass(frozen=True, slots=True)
class Leave(ConnectionEvent):
    """The attached connection closed with 1000: the session ends at once."""

    name: ClassVar[str] = "leave"


@dataclass(frozen=True, slots=True)
class Resume(ConnectionEvent):
    """An honoured resume: a detached session comes back, an attached one is taken over."""

    name: ClassVar[str] = "resume"


@dataclass(frozen=True, slots=True)
class Expire(ConnectionEvent):
    """A detached session's grace passed."""

    name: ClassVar[str] = "expire"


@dataclass(frozen=True, slots=True)
class Overflow(ConnectionEvent):
    """A detached session's journal overflowed."""

    name: ClassVar[str] = "overflow"


@dataclass(frozen=True, slots=True)
class Finish(ConnectionEvent):
    """The session ended on its own (expiry, a drain, a client that stopped reading)."""

    name: ClassVar[str] = "finish"
