"""What every Turntaker chart shares: the sync engine, raised errors, typed events, an outbox.

Rules:
1. Pure: events in, effects out; no I/O, no clock.
2. Errors in callbacks raise (``catch_errors_as_events = False``) so a bug is never turned
   into a silent internal event. Only the sync engine is used: no callback is a coroutine.
3. An event the chart knows, with no transition from the current state, is ignored by
   design: that is how late backend output or a second cancel is dropped without a branch in
   the caller. An event the chart does not know is an error (`UnknownEvent`): a misspelt name
   never passes silently.
4. Events are typed: each chart's events are `ChartEvent` classes (statecharts/
   session_events.py, response_events.py) whose `name` is the chart's event and whose fields
   are its arguments; each chart's `feed` takes one of its own. `handle(name, **kwargs)` is
   the same door by name.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar

from statemachine import StateChart

from statecharts.effects import Effect

__all__ = ["Chart", "ChartEvent", "UnknownEvent"]


class UnknownEvent(ValueError):
    """An event name the chart does not have (a misspelling, or the wrong chart's)."""


@dataclass(frozen=True, slots=True)
class ChartEvent:
    """One event of a chart: `name` is its event, the fields its arguments."""

    name: ClassVar[str]

    def arguments(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class Chart(StateChart[Any]):
    """A pure chart: events in, effects out (the rules above)."""

    catch_errors_as_events = False
    allow_event_without_transition = True
    _abstract = True

    def __init__(self, **kwargs: Any) -> None:
        self.outbox: list[Effect] = []
        super().__init__(**kwargs)
        self._event_names = frozenset(str(e.id) for e in self.events)

    def emit(self, effect: Effect) -> None:
        self.outbox.append(effect)

    def drain(self) -> list[Effect]:
        """Hand over and forget the effects produced so far."""
        out, self.outbox = self.outbox, []
        return out

    def handle(self, event: str, **kwargs: Any) -> list[Effect]:
        """Feed one event by name and return the effects it produced, in order."""
        if event not in self._event_names:
            raise UnknownEvent(f"{type(self).__name__} has no event {event!r}")
        self.send(event, **kwargs)
        return self.drain()

    def _feed(self, event: ChartEvent) -> list[Effect]:
        # Each chart's public `feed` narrows the type to its own events.
        return self.handle(event.name, **event.arguments())

    @property
    def event_names(self) -> frozenset[str]:
        return self._event_names

    @property
    def active(self) -> frozenset[str]:
        return frozenset(str(v) for v in self.configuration_values)
