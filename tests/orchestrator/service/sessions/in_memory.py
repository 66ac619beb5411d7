"""A session actor driven in memory: a client without a socket, for tests.

What app.py's socket pumps do for a real client, over the session's first connection: the
client's messages go to `Connection.receive`, the outbox's texts come out (each one taken is
`sent`, so the session's link learns what its client got), and the client leaves with a 1000
close. There is no host: a `session.resume` finds no other session here.
"""

from __future__ import annotations

from typing import Any

from orchestrator.protocol import client as ce
from orchestrator.service.config import ServiceConfig
from orchestrator.service.sessions.actor import SessionActor
from orchestrator.service.sessions.connection import Connection
from orchestrator.service.sessions.services import SessionServices
from orchestrator.session.resume.link import ResumeFailed, refuse_unknown


def _no_host(connection: Connection, request: ce.SessionResume, first: bool) -> ResumeFailed:
    return refuse_unknown(request.resume_token)


class InMemoryClient:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def __aiter__(self) -> InMemoryClient:
        return self

    async def __anext__(self) -> str:
        """The next text the server sent this client."""
        item = await self.connection.outbox.__anext__()
        self.connection.sent(item)
        return item[1]

    async def send(self, data: str | bytes) -> None:
        """One message from the client."""
        await self.connection.receive(data)

    def leave(self) -> None:
        """The client closes its connection with 1000 (which ends the session at once)."""
        self.connection.peer_gone(1000)


def in_memory_session(
    session_id: str, config: ServiceConfig, services: SessionServices, **options: Any
) -> tuple[SessionActor, InMemoryClient]:
    """A session actor (not yet running) and its client; `options` go to `SessionActor`."""
    connection = Connection.bounded(config, _no_host)
    return SessionActor(session_id, config, services, connection, **options), InMemoryClient(
        connection
    )
