"""The server events of a session's link to its client, built here, once (the session's own
events are the envelope's: orchestrator/session/envelope.py).

Rules (docs/protocol.md "Session resume"):
1. The session's `session.created` carries its resume token: the core builds the event
   without one (it knows no link), and the token is the link's (link.py rule 4).
2. Events about a connection are outside the sequence (link.py rule 1): they get no
   `server_event_seq` and are not journaled.
3. A resume honoured: `session.resumed` (the new token, where the replay starts) is the first
   event on the resuming connection, before the replay.
4. A resume refused: an `error` `session_resume_failed` whose message says why, naming the
   client's `event_id`; the connection goes on as it was.
5. A connection whose session another resumed: an `error` `session_replaced`, its last event
   before the close (orchestrator/session/ending.py rule 4).

Pure: no I/O.
"""

from __future__ import annotations

import msgspec

from orchestrator.protocol import server as se
from orchestrator.protocol.codec import error_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.session.core import Step
from orchestrator.session.resume.link import Resumed, ResumeFailed

__all__ = ["opened", "replaced", "resume_failed", "resumed"]


def opened(step: Step, token: str) -> Step:
    """The core's opening step, its `session.created` with the link's token (rule 1)."""
    events = tuple(
        msgspec.structs.replace(event, resume_token=token)
        if isinstance(event, se.SessionCreated)
        else event
        for event in step.events
    )
    return Step(events, step.actions, step.notes)


def resumed(session_id: str, verdict: Resumed) -> se.SessionResumed:
    """Rule 3."""
    return se.SessionResumed(
        session_id=session_id,
        resume_token=verdict.token,
        replayed_from_seq=verdict.replayed_from_seq,
    )


def resume_failed(failed: ResumeFailed, event_id: str | None) -> se.ErrorEvent:
    """Rule 4."""
    return _error("session_resume_failed", failed.message, event_id)


def replaced() -> se.ErrorEvent:
    """Rule 5."""
    return _error(
        "session_replaced", "Another connection resumed this session; this one is closed.", None
    )


def _error(code: str, message: str, event_id: str | None) -> se.ErrorEvent:
    return error_event(ProtocolError(code=code, message=message, event_id=event_id))
