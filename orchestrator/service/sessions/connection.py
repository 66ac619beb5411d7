"""A client connection's side of a session: the session it carries, its outbox, its end.

Plumbing between the socket pumps (service/app.py) and a session actor. Rules:
- A connection carries one session at a time (`actor`). A successful `session.resume` moves
  it to the resumed session, and the provisional session it opened is discarded
  (host.py); the decision is the resumed session's link's
  (orchestrator/session/resume/link.py).
- Only a connection's first client event may be `session.resume`; a later one fails with
  `not_first`, and the connection goes on as it was.
- The server is done with a connection when it is `close`d: its session ended (the code and
  reason of `end`), or another connection took its session over (`session_replaced`, then
  1000). The client is done with it when the socket is gone (`peer_gone`, with the client's
  close code): only then is the session told, and only if this is still its connection.
- `finished` is set by either; the I/O layer then flushes and closes the socket.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from orchestrator.protocol import client as ce
from orchestrator.service.config import ServiceConfig
from orchestrator.service.sessions.outbox import Item, Outbox
from orchestrator.session.resume.link import ResumeFailed, resume_failed

if TYPE_CHECKING:
    from orchestrator.service.sessions.actor import SessionActor

# Hands a connection's resume to whoever knows every session (session_host.py), with whether
# it is the connection's first client event.
ResumeHandler = Callable[["Connection", ce.SessionResume, bool], ResumeFailed | None]

# RFC 6455: the one close code that ends a session at once (docs/protocol.md).
NORMAL_CLOSURE = 1000


@dataclass(frozen=True)
class SessionEnd:
    """Why the server ended a session or a connection: the WebSocket close code and reason."""

    code: int
    reason: str
    # The metrics label.
    cause: str
    # False when the client stopped reading: what is still queued would never be taken, so
    # the connection is cut instead of flushed.
    flush: bool = True


class Connection:
    @classmethod
    def bounded(cls, config: ServiceConfig, resume: ResumeHandler | None = None) -> Connection:
        """A connection whose outbox has the configured bounds (`send_queue`, `_bytes`)."""
        return cls(Outbox(config.send_queue, config.send_queue_bytes), resume)

    def __init__(self, outbox: Outbox, resume: ResumeHandler | None = None) -> None:
        self.outbox = outbox
        self.actor: SessionActor | None = None
        self.first = True
        self.end: SessionEnd | None = None
        # The client's close code, once the socket is gone from its side.
        self.peer_code: int | None = None
        self.finished = trio.Event()
        self._resume = resume

    async def receive(self, data: str | bytes) -> None:
        """One WebSocket message from the client: a resume here, the rest to the session."""
        actor = self.actor
        if actor is None or self.finished.is_set():
            return
        event = actor.decode(data)
        first, self.first = self.first, False
        if isinstance(event, ce.SessionResume):
            if self._resume is None:
                failed: ResumeFailed | None = resume_failed("not_first")
            else:
                failed = self._resume(self, event, first)
            if failed is not None and self.actor is not None:
                await self.actor.say_resume_failed(self, failed, event.event_id)
            return
        await actor.deliver(event)

    def sent(self, item: Item) -> None:
        """The socket took `item`: the session's link learns what its client was sent."""
        if item[0] and self.actor is not None:
            self.actor.delivered(self, item[0])

    def close(
        self, end: SessionEnd | None, *, discard: bool = False, last: Item | None = None
    ) -> None:
        if self.finished.is_set():
            return
        self.end = end
        self.outbox.close(discard=discard, last=last)
        self.finished.set()

    def peer_gone(self, code: int) -> None:
        """The client's side closed (`code`: its close frame's, 1006 for none)."""
        if self.peer_code is not None:
            return
        self.peer_code = code
        # Nothing more reaches this client: a write waiting for room gives up at once.
        self.outbox.close(discard=True)
        self.finished.set()
        if self.actor is not None:
            self.actor.connection_lost(self, clean=code == NORMAL_CLOSURE)
