"""How a session ends: the one place that gives each cause its close code and reason.

The value is `SessionEnd` (orchestrator/session/actions.py: the core returns it as an action,
the service carries it out); every one is built here, from the table of codes below and one
function per cause for its reason text. The I/O layer chooses nothing: it asks here and
closes the socket with what it gets.

Rules (docs/protocol.md "Close codes"; the reasons are on the wire and stay as they are):
1. Every end the server decides carries a close code and a reason text; `cause` names it
   (the `session_ends` metrics label).
2. The server drains: 1001 "server is shutting down", after the session's terminal events.
   When the session's state is kept where another worker can take it up (a shared store:
   `DrainRequested.kept`), our own 4001 "server restarting; resume the session" instead: the
   session is not over, and the client is to resume it at once (docs/protocol.md "Close
   codes"; the page and the soak's clients do). 4001 is in the range RFC 6455 leaves to
   applications; a client that knows nothing of it sees an abnormal close, as with 1001.
3. `max_session_s` passes: 1000 "session expired after N minutes" (the limit in OpenAI's
   words, as in the `session_expired` error before it).
4. Another connection resumed the session: the old connection is closed with 1000 "session
   replaced by a resume" (the session goes on, on the new one).
5. The client stopped reading for `slow_client_timeout_s`: 1008 "client is not reading: N events
   queued (X MiB)".
6. Ended with no connection (the grace passed, or the journal overflowed in it): 1000, the
   cause as the reason. A client that left with its own 1000 close ends the session with no
   end of the server's (None): the close code was the client's.
7. A server bug: 1011 "internal error; the session was closed".
8. Flush: what is queued goes out before the close, except where nobody would take it (rules
   5 and 6): then the connection is cut.
9. A connection that arrives while the server drains gets no session: 1013 "server is
   shutting down" (try again later: the openai SDK retries it, and another instance may be up).
   Behind a balancer (a route id set) it is refused before the upgrade instead, HTTP 503, so
   that the balancer tries another worker at once (orchestrator/service/app.py).
10. A connection whose carrying failed (a server bug outside any session's task): 1011
   "internal error; the connection was closed".
Refusals at the handshake (keys, quotas) take their codes from the access rules
(orchestrator/service/access.py), which decide them.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

from orchestrator.session.actions import SessionEnd, SessionEndCause
from orchestrator.session.envelope import duration_words
from orchestrator.session.inputs import CloseRequested
from statecharts.effects import UnattendedEnd

__all__ = [
    "CLOSE_CODES",
    "closing",
    "connection_failed",
    "drained",
    "internal_error",
    "not_reading",
    "refused_draining",
    "replaced",
    "unattended",
]

# Each cause's close code and whether what is queued is flushed first (rules 2-8).
CLOSE_CODES: Final[dict[SessionEndCause, tuple[int, bool]]] = {
    "server_shutting_down": (1001, True),
    "server_restarting": (4001, True),
    "session_expired": (1000, True),
    "session_replaced": (1000, True),
    "client_not_reading": (1008, False),
    "grace_expired": (1000, False),
    "journal_overflow": (1000, False),
    "internal_error": (1011, True),
    "refused_draining": (1013, True),
    "connection_failed": (1011, True),
}


def _end(cause: SessionEndCause, reason: str) -> SessionEnd:
    code, flush = CLOSE_CODES[cause]
    return SessionEnd(code, reason, cause, flush)


def closing(request: CloseRequested) -> SessionEnd:
    """The service ends the session (rules 2 and 3)."""
    if request.reason == "server_shutting_down":
        return _end("server_shutting_down", "server is shutting down")
    return _end("session_expired", f"session expired after {duration_words(request.max_session_s)}")


def drained(kept: bool) -> SessionEnd:
    """The drain ends the session (rule 2): to be resumed elsewhere if `kept`."""
    if kept:
        return _end("server_restarting", "server restarting; resume the session")
    return _end("server_shutting_down", "server is shutting down")


def replaced() -> SessionEnd:
    """The end of a connection whose session another connection resumed (rule 4)."""
    return _end("session_replaced", "session replaced by a resume")


def not_reading(queued_events: int, queued_bytes: int) -> SessionEnd:
    """The client left its outbox full for the slow-client time (rule 5)."""
    return _end(
        "client_not_reading",
        f"client is not reading: {queued_events} events queued ({queued_bytes / 2**20:.1f} MiB)",
    )


def unattended(cause: UnattendedEnd) -> SessionEnd | None:
    """The session's link ended it with no connection (rule 6)."""
    if cause == "client_left":
        return None
    return _end(cause, cause)


def internal_error() -> SessionEnd:
    """A bug in the session's task (rule 7)."""
    return _end("internal_error", "internal error; the session was closed")


def refused_draining() -> SessionEnd:
    """A connection that arrives while the server drains (rule 9)."""
    return _end("refused_draining", "server is shutting down")


def connection_failed() -> SessionEnd:
    """A connection whose carrying failed (rule 10)."""
    return _end("connection_failed", "internal error; the connection was closed")
