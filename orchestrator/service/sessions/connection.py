"""A client connection's side of a session: the session it carries, its outbox, its end.

Plumbing between the socket pumps (service/app.py) and a session actor. Rules:
- A connection carries one session at a time (`session`). A successful `session.resume`
  moves it to the resumed session, and the provisional session it opened is discarded
  (host.py); the decision is the resumed session's link's (orchestrator/session/resume/link.py).
- Every `session.resume` goes to the connection's resume handler (the host), with whether it
  is the connection's first client event: the handler alone judges it (`not_first` too). The
  rest goes to the session.
- The server is done with a connection when it is `close`d: its session ended (the code and
  reason of `end`, chosen by orchestrator/session/ending.py), or another connection took its
  session over. The client is done with it when the socket is gone (`peer_gone`, with the
  client's close code): only then is the session told, and only if this is still its
  connection.
- `finished` is set by either; the I/O layer then flushes and closes the socket.

It knows its session only as `CarriedSession` (below), so it imports no actor.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from orchestrator.protocol import client as ce
from orchestrator.protocol.errors import ProtocolError
from orchestrator.service.config import ServiceConfig
from orchestrator.service.sessions.outbox import Item, Outbox
from orchestrator.session.actions import SessionEnd
from orchestrator.session.resume.link import ResumeFailed, SessionLink

# RFC 6455: the one close code that ends a session at once (docs/protocol.md).
NORMAL_CLOSURE = 1000


class CarriedSession(Protocol):
    """What a connection (and the host, for a resume) needs of the session it carries."""

    @property
    def session_id(self) -> str: ...

    @property
    def link(self) -> SessionLink: ...

    def decode(self, data: str | bytes) -> ce.ClientEvent | ce.LinkEvent | ProtocolError: ...

    async def deliver(self, event: ce.ClientEvent | ce.LinkEvent | ProtocolError) -> None: ...

    def delivered(self, connection: Connection, seq: int) -> None: ...

    def connection_lost(self, connection: Connection, *, clean: bool) -> None: ...

    async def say_resume_failed(
        self, connection: Connection, failed: ResumeFailed, event_id: str | None
    ) -> None: ...

    def discard(self) -> None: ...


# Judges a connection's resume (host.py): the request, and whether it is the connection's
# first client event; None when honoured.
ResumeHandler = Callable[["Connection", ce.SessionResume, bool], Awaitable[ResumeFailed | None]]


class Connection:
    @classmethod
    def bounded(cls, config: ServiceConfig, resume: ResumeHandler) -> Connection:
        """A connection whose outbox has the configured bounds (`send_queue`, `_bytes`)."""
        return cls(Outbox(config.send_queue, config.send_queue_bytes), resume)

    def __init__(self, outbox: Outbox, resume: ResumeHandler) -> None:
        self.outbox = outbox
        self.session: CarriedSession | None = None
        self.first = True
        self.end: SessionEnd | None = None
        # The client's close code, once the socket is gone from its side.
        self.peer_code: int | None = None
        self.finished = trio.Event()
        self._resume = resume

    async def receive(self, data: str | bytes) -> None:
        """One WebSocket message from the client: a resume here, the rest to the session."""
        session = self.session
        if session is None or self.finished.is_set():
            return
        event = session.decode(data)
        first, self.first = self.first, False
        if isinstance(event, ce.SessionResume):
            failed = await self._resume(self, event, first)
            if failed is not None and self.session is not None:
                await self.session.say_resume_failed(self, failed, event.event_id)
            return
        await session.deliver(event)

    def sent(self, item: Item) -> None:
        """The socket took `item`: the session's link learns what its client was sent."""
        if item[0] and self.session is not None:
            self.session.delivered(self, item[0])

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
        if self.session is not None:
            self.session.connection_lost(self, clean=code == NORMAL_CLOSURE)
