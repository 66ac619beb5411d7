"""What every Turntaker chart shares: the sync engine, raised errors, and an outbox."""

from __future__ import annotations

from typing import Any

from statemachine import StateChart

from statecharts.effects import Effect


class Chart(StateChart[Any]):
    """A pure chart: events in, effects out.

    Errors in callbacks raise (``catch_errors_as_events = False``) so a bug is never turned
    into a silent internal event. Only the sync engine is used: no callback is a coroutine.
    An event with no transition from the current state is ignored by design: that is how
    late backend output or a second cancel is dropped without a branch in the caller.
    """

    catch_errors_as_events = False
    allow_event_without_transition = True
    _abstract = True

    def __init__(self, **kwargs: Any) -> None:
        self.outbox: list[Effect] = []
        super().__init__(**kwargs)

    def emit(self, effect: Effect) -> None:
        self.outbox.append(effect)

    def drain(self) -> list[Effect]:
        """Hand over and forget the effects produced so far."""
        out, self.outbox = self.outbox, []
        return out

    def handle(self, event: str, **kwargs: Any) -> list[Effect]:
        """Feed one event and return the effects it produced, in order."""
        self.send(event, **kwargs)
        return self.drain()

    @property
    def active(self) -> frozenset[str]:
        return frozenset(str(v) for v in self.configuration_values)
