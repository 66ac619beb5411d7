"""SessionHost: this process's open sessions, apart from the connections that carry them.

Rules (docs/protocol.md "Session resume"):
- A session outlives its connection: it runs in the host's nursery, not in a connection's
  handler, so a lost socket leaves it running for its grace. Its lease (the API key's session
  slot), its registry entry and its metrics go with the session's end, not the socket's.
- Every `session.resume` is judged here, once: one that is not its connection's first client
  event fails with `not_first`; the rest are looked up by session id and judged by that
  session's link; an id unknown here reads the same as a wrong token (resume/link.py's
  `refuse_unknown`). A resume
  honoured moves the connection to the resumed session and discards the provisional session
  the connection had opened: nothing of it is ever heard of again.
- When a session ends while a connection carries it, that connection is closed with the
  session's end (code and reason); the I/O layer flushes and closes the socket.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from orchestrator.protocol import client as ce
from orchestrator.service.config import ServiceConfig
from orchestrator.service.metrics import Metrics
from orchestrator.service.sessions.actor import SessionActor, TakenOver
from orchestrator.service.sessions.connection import Connection
from orchestrator.service.sessions.services import AppendBudget, SessionServices
from orchestrator.service.store.base import StoreError
from orchestrator.service.store.writer import WriteReport, WriteResult
from orchestrator.session.resume import snapshot as snap
from orchestrator.session.resume.link import (
    ResumeFailed,
    SessionLink,
    refuse_unknown,
    resume_failed,
)

log = logging.getLogger("turntaker.session")


def _nothing() -> None:
    pass


class SessionHost:
    def __init__(
        self,
        config: ServiceConfig,
        services: SessionServices,
        metrics: Metrics,
        nursery: trio.Nursery,
    ) -> None:
        self.config = config
        self.services = services
        self.metrics = metrics
        self._nursery = nursery
        # The open sessions, by id: resumes, gauges over all of them, draining on shutdown.
        self.sessions: dict[str, SessionActor] = {}
        # Each session's release of its API key's slot, called at its end (a takeover moves
        # the provisional session's to the session it takes over).
        self._releases: dict[str, Callable[[], None]] = {}
        # Set once no session is open (for a drain to wait on); replaced when one opens.
        self.empty = trio.Event()
        self.empty.set()
        metrics.sessions_in_grace.set_function(
            lambda: float(sum(1 for s in self.sessions.values() if s.link.detached))
        )
        metrics.resume_journal_bytes.set_function(
            lambda: float(sum(s.link.journal.bytes for s in self.sessions.values()))
        )

    def new_connection(self) -> Connection:
        return Connection.bounded(self.config, self.resume)

    def open(
        self,
        session_id: str,
        connection: Connection,
        *,
        identity: str,
        release: Callable[[], None],
        append_budget: AppendBudget | None = None,
    ) -> SessionActor:
        """Starts a session carried by `connection`; `release` frees its lease at its end."""
        actor = SessionActor(
            session_id,
            self.config,
            self.services,
            connection,
            append_budget=append_budget,
            identity=identity,
        )
        self._start(actor, release)
        return actor

    def _start(self, actor: SessionActor, release: Callable[[], None]) -> None:
        self.sessions[actor.session_id] = actor
        self._releases[actor.session_id] = release
        self.empty = trio.Event()
        self.metrics.sessions_total.inc()
        self.metrics.sessions_active.inc()
        self._nursery.start_soon(self._run, actor)

    async def _run(self, actor: SessionActor) -> None:
        try:
            await actor.run()
            if actor.end is not None:
                log.info(
                    "session %s ended: %s (%d)", actor.session_id, actor.end.reason, actor.end.code
                )
        except Exception:
            # A bug, not the client's doing: its client got 1011 (SessionActor.run); the
            # other sessions go on.
            log.exception("session %s failed", actor.session_id)
        finally:
            self._releases.pop(actor.session_id, _nothing)()
            self.metrics.sessions_active.dec()
            self.sessions.pop(actor.session_id, None)
            if not self.sessions:
                self.empty.set()

    async def resume(
        self, connection: Connection, request: ce.SessionResume, first: bool
    ) -> ResumeFailed | None:
        """A connection asks to resume `request.session_id` (`first`: as its first event): a
        session here, or one another process left in the session store (a takeover)."""
        provisional = connection.session
        assert provisional is not None
        target = self.sessions.get(request.session_id)
        if not first:
            failed: ResumeFailed | None = resume_failed("not_first")
        elif target is provisional:
            failed = refuse_unknown(request.resume_token)
        elif target is None:
            failed = await self._take_over(connection, request)
        else:
            failed = target.take_over(connection, request, identity=provisional.link.identity)
        self.metrics.resumes.labels(failed.reason if failed is not None else "resumed").inc()
        if failed is not None:
            log.info("resume of %s refused: %s", request.session_id, failed.reason)
            return failed
        log.info("session %s resumed", request.session_id)
        assert provisional is not None  # (mypy forgets the narrowing across the await)
        provisional.discard()
        return None

    async def _take_over(
        self, connection: Connection, request: ce.SessionResume
    ) -> ResumeFailed | None:
        """A session this process does not hold, from its snapshot (link.py rule 6): judged,
        its lease taken (the process that held it can write no more: its next snapshot is
        fenced and it ends there), then run here on `connection`. Anything the store cannot
        give reads as an unknown session, as it did before there was a store."""
        provisional = connection.session
        assert provisional is not None
        sid = request.session_id
        store = self.services.store
        if store is None:
            return refuse_unknown(request.resume_token)
        try:
            stored = await store.get(sid)
        except StoreError as error:
            log.warning("takeover of %s: the store failed: %s", sid, error)
            return refuse_unknown(request.resume_token)
        if stored is None:
            return refuse_unknown(request.resume_token)
        try:
            snapshot = snap.decode(stored.data)
        except snap.SnapshotUnreadable as error:
            log.error("takeover of %s: %s", sid, error)
            return refuse_unknown(request.resume_token)
        verdict = SessionLink.taken_over(
            snapshot,
            request.resume_token,
            provisional.link.identity,
            request.last_server_event_seq,
            self.config.resume_journal_bytes,
        )
        if isinstance(verdict, ResumeFailed):
            return verdict
        try:
            fence = await store.acquire(sid, self.config.instance_id, self.config.snapshot_ttl_s)
        except StoreError as error:
            log.warning("takeover of %s: no lease: %s", sid, error)
            return refuse_unknown(request.resume_token)
        if sid in self.sessions or connection.session is not provisional:
            # Another resume of it won while the store answered: that one goes on.
            return refuse_unknown(request.resume_token)
        link, resumed = verdict
        actor = SessionActor(
            sid,
            self.config,
            self.services,
            connection,
            identity=link.identity,
            taken=TakenOver(snapshot, link, resumed, fence),
        )
        # The provisional session's slot (the API key's) is this one's now.
        release = self._releases.pop(provisional.session_id, _nothing)
        self._releases[provisional.session_id] = _nothing
        self._start(actor, release)
        log.info("session %s taken over (snapshot %d)", sid, snapshot.version)
        return None

    def snapshot_written(self, report: WriteReport) -> None:
        """The snapshot writer's word on a session's snapshot: `fenced` means another worker
        took the session over (its lease is theirs), so it ends here."""
        actor = self.sessions.get(report.session_id)
        if report.result is WriteResult.FENCED and actor is not None:
            log.info("session %s was taken over by another worker", report.session_id)
            actor.taken_elsewhere()

    def shut_down_all(self) -> None:
        for actor in list(self.sessions.values()):
            actor.shut_down()
