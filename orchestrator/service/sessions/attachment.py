"""A session's attachment to its client: the connection carrying it now, and its link's
decisions carried out.

Plumbing only: the session's link (orchestrator/session/resume/link.py) decides what a lost
connection, a resume, the grace and an overflowing journal mean; its events are built by
orchestrator/session/resume/link_events.py and its ends by orchestrator/session/ending.py.
Here they are carried out:
- Every server event of the session gets the link's next `server_event_seq`, is journaled,
  then goes into the outbox of the connection carrying the session now, if any (`send`).
- A lost connection detaches the session; the grace is a timer in the session's nursery,
  and a stale one (a resume or another loss came first) does nothing.
- A resume honoured closes the old connection (its queue discarded, `session_replaced` last)
  and attaches the new one with `session.resumed` and the replay, outside the bounds.
- The link ending the session with no connection calls `on_end` with its end (None: the
  client left with 1000) for the actor to stop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.codec import ServerEventEncoder
from orchestrator.service.sessions.connection import CarriedSession, Connection
from orchestrator.session import ending
from orchestrator.session.actions import SessionEnd
from orchestrator.session.resume import link_events
from orchestrator.session.resume.link import Resumed, ResumeFailed, SessionLink
from statecharts.effects import (
    ArmGrace,
    AttachConnection,
    CancelGrace,
    Effect,
    EndUnattended,
    ReplaceConnection,
)

log = logging.getLogger("turntaker.session")


class Attachment:
    def __init__(
        self,
        session: CarriedSession,
        link: SessionLink,
        connection: Connection,
        *,
        grace_s: float,
        slow_client_timeout_s: float,
        on_end: Callable[[SessionEnd | None], None],
        events_named: int = 0,
    ) -> None:
        self.link = link
        self._session = session
        self._grace_s = grace_s
        self._slow_client_timeout_s = slow_client_timeout_s
        self._on_end = on_end
        connection.session = session
        # The connection carrying the session now; None while detached (or ended).
        self.connection: Connection | None = connection
        # Event ids go on from `events_named` (a takeover: snapshot.py rule 6).
        self._encoder = ServerEventEncoder(named=events_named)
        # Set by the actor once its nursery is open: the grace timer runs there.
        self.nursery: trio.Nursery | None = None
        # Bumped by every grace armed or cancelled, so that a stale timer decides nothing.
        self._grace_epoch = 0
        self._grace_scope: trio.CancelScope | None = None

    @property
    def events_named(self) -> int:
        """How many event ids the session has handed out (its snapshots keep it)."""
        return self._encoder.named

    async def send(self, event: se.ServerEvent) -> bool:
        """Sequenced, journaled, then into the connection's bounded outbox if there is one;
        False when the connection still carrying the session left it full for the
        slow-client time."""
        seq = self.link.next_seq()
        text = self._encoder.encode(event, seq).decode()
        self._carry_out(self.link.record(seq, text))
        connection = self.connection
        if connection is not None and not await connection.outbox.put(
            text, self._slow_client_timeout_s, seq
        ):
            # Lost or replaced while this event waited: it is journaled, and replayed on resume.
            return connection is not self.connection
        return True

    def lost(self, connection: Connection, *, clean: bool) -> None:
        """The client's side of `connection` is gone (`clean`: with a 1000 close)."""
        if connection is not self.connection:
            return  # replaced, or the session ended: no longer this session's to lose
        self.connection = None
        self._carry_out(self.link.lost(clean=clean))

    def delivered(self, connection: Connection, seq: int) -> None:
        if connection is self.connection:
            self.link.delivered(seq)

    def take_over(
        self, connection: Connection, request: ce.SessionResume, identity: str
    ) -> ResumeFailed | None:
        """A resume of this session from `connection` (its first event): judged by the link;
        when honoured, `connection` carries this session from here on."""
        verdict = self.link.resume(request.resume_token, identity, request.last_server_event_seq)
        if isinstance(verdict, ResumeFailed):
            return verdict
        old = self.connection
        for effect in verdict.effects:
            if isinstance(effect, ReplaceConnection) and old is not None:
                farewell = self._encode(link_events.replaced())
                old.close(ending.replaced(), discard=True, last=(0, farewell))
            elif isinstance(effect, AttachConnection):
                connection.session = self._session
                self.connection = connection
                resumed = self._encode(link_events.resumed(self.link.session_id, verdict))
                connection.outbox.put_replay(
                    [(0, resumed), *((e.seq, e.text) for e in verdict.replay)]
                )
            else:
                self._carry_out([effect])
        return None

    def attach_taken_over(self, verdict: Resumed) -> None:
        """A session taken over from another process's snapshot (link.py rule 6): its
        connection hears `session.resumed` and the replay first, outside the bounds."""
        connection = self.connection
        assert connection is not None
        resumed = self._encode(link_events.resumed(self.link.session_id, verdict))
        connection.outbox.put_replay([(0, resumed), *((e.seq, e.text) for e in verdict.replay)])

    async def say_resume_failed(
        self, connection: Connection, failed: ResumeFailed, event_id: str | None
    ) -> None:
        """`session_resume_failed` on `connection`, outside the sequence; it goes on as is."""
        text = self._encode(link_events.resume_failed(failed, event_id))
        await connection.outbox.put(text, self._slow_client_timeout_s)

    def detach(self) -> None:
        """The session is gone without a word (a provisional one, discarded)."""
        self.connection = None
        self.link.finished()

    def finish(self, end: SessionEnd | None) -> None:
        """The session ended: its connection, if it still has one, closes with `end`."""
        self.link.finished()
        if self.connection is not None:
            self.connection.close(end)

    def _encode(self, event: se.ServerEvent) -> str:
        """An event about the connection: outside the sequence (no seq), not journaled."""
        return self._encoder.encode(event).decode()

    def _carry_out(self, effects: list[Effect]) -> None:
        """The link's effects that need no connection: the grace, and an end without one."""
        for effect in effects:
            if isinstance(effect, ArmGrace):
                self._grace_epoch += 1
                assert self.nursery is not None
                self.nursery.start_soon(self._grace_timer, self._grace_epoch)
            elif isinstance(effect, CancelGrace):
                self._grace_epoch += 1
                if self._grace_scope is not None:
                    self._grace_scope.cancel()
            elif isinstance(effect, EndUnattended):
                if effect.cause != "client_left":
                    log.info("session %s ended unattended: %s", self.link.session_id, effect.cause)
                self._on_end(ending.unattended(effect.cause))

    async def _grace_timer(self, epoch: int) -> None:
        with trio.CancelScope() as scope:
            self._grace_scope = scope
            await trio.sleep(self._grace_s)
            if epoch == self._grace_epoch:
                self._carry_out(self.link.expired())
