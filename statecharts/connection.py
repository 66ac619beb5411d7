"""ConnectionChart: a session's hold on its client connection, across drops and resumes.

Rules it guarantees (docs/protocol.md "Session resume"):

- A session starts `attached` to the connection that opened it.
- A connection lost without a client close frame of code 1000 (`drop`: a network drop, an
  abnormal closure, a 1009) does not end the session: it is `detached` and its grace starts
  (`ArmGrace`). A close with 1000 (`leave`) ends it at once (`EndUnattended`). Only the
  attached connection's loss counts: the link never feeds a replaced connection's.
- Only a resume brings a detached session back (`resume`: `CancelGrace`, then
  `AttachConnection`); a resume while attached takes the session over from the connection
  still open, which is told and closed first (`ReplaceConnection`, then `AttachConnection`).
  Whether a resume may be honoured at all (token, key, journal) is the link's check
  (orchestrator/session/resume/link.py); the chart only ever resumes a session that has not ended.
- A detached session ends when its grace passes (`expire`) or its journal overflows
  (`overflow`), as if its client had left (`EndUnattended`). Both are ignored while attached:
  a resume that came first wins, and a late timer decides nothing.
- `ended` is final: nothing resumes a session that ended, whoever ended it (`finish`: the
  session's own end, such as expiry, a drain or a client that stopped reading).
- Its events are typed (statecharts/connection_events.py): `feed` takes one of them.
"""

from __future__ import annotations

from statemachine import State

from statecharts.base import Chart
from statecharts.connection_events import ConnectionEvent
from statecharts.effects import (
    ArmGrace,
    AttachConnection,
    CancelGrace,
    Effect,
    EndUnattended,
    ReplaceConnection,
)


class ConnectionChart(Chart):
    attached = State(initial=True)
    detached = State()
    ended = State(final=True)

    drop = attached.to(detached, on="_on_drop")
    leave = attached.to(ended, on="_on_leave")
    resume = attached.to(attached, on="_on_takeover") | detached.to(attached, on="_on_resume")
    expire = detached.to(ended, on="_on_expire")
    overflow = detached.to(ended, on="_on_overflow")
    finish = attached.to(ended) | detached.to(ended)

    def _on_drop(self) -> None:
        self.emit(ArmGrace())

    def _on_leave(self) -> None:
        self.emit(EndUnattended("client_left"))

    def _on_takeover(self) -> None:
        self.emit(ReplaceConnection())
        self.emit(AttachConnection())

    def _on_resume(self) -> None:
        self.emit(CancelGrace())
        self.emit(AttachConnection())

    def _on_expire(self) -> None:
        self.emit(EndUnattended("grace_expired"))

    def _on_overflow(self) -> None:
        self.emit(EndUnattended("journal_overflow"))

    def feed(self, event: ConnectionEvent) -> list[Effect]:
        """Feed one of this chart's typed events (statecharts/connection_events.py)."""
        return self._feed(event)
