"""SessionLink: a session's link to its client: event sequence, journal, resume token.

Rules (docs/protocol.md "Session resume"):
1. Sequence: every server event of the session gets the next `server_event_seq` (1 for
   `session.created`), with no gap and no reuse, across every connection that carries it.
   Events about the connection (`session.resumed`, `session_resume_failed`,
   `session_replaced`) are outside it.
2. Journal: every sequenced event is journaled (orchestrator/session/resume/journal.py), bounded in
   bytes. While the session is detached, the events its last connection never took must stay:
   needing room they would lose is an overflow, and the session ends.
3. Connection: attached, detached (the grace) or ended, as the ConnectionChart decides; the
   link feeds it and hands its effects to the session actor, which carries them out.
4. Token: at least 128 random bits from `secrets` (here 256), compared in constant time,
   replaced on every successful resume (the old one is void at once), bound to the API key
   identity that opened the session. Never in a repr, a log line or a metric.
5. A resume is honoured only for a session that has not ended, with its current token, from
   the same identity, whose journal still holds every event after the client's
   `last_server_event_seq`. Otherwise it fails with a reason; an unknown session and a wrong
   token read the same, so a guess learns nothing. A successful one replays exactly the
   events after that seq, in order, with their original seq and event id.
6. A takeover (a resume of a session this process does not hold, from the snapshot another
   one left: snapshot.py) is judged as rule 5 against the snapshot: the token by its digest,
   the identity, the journal. A client that saw events past the snapshot (the worker went on
   before it was lost) gets no replay, and the sequence goes on after its last seq: no seq
   is reused, and the events between are no one's to replay (what they were about, a live
   response, is ended by the session that takes over).

Pure: no clocks, no I/O; the token source is injected for tests.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Literal

from orchestrator.session.resume.journal import EventJournal, JournalEntry
from orchestrator.session.resume.snapshot import SessionSnapshot, token_matches
from statecharts import connection_events as cev
from statecharts.connection import ConnectionChart
from statecharts.effects import Effect

ResumeFailure = Literal["unknown", "ended", "other_key", "not_journaled", "not_first"]

# Rule 5: "unknown" covers both an unknown session id and a wrong token.
RESUME_MESSAGES: Final[dict[ResumeFailure, str]] = {
    "unknown": "No session matches this session_id and resume_token: it is unknown here, or "
    "the token is wrong (each resume replaces it).",
    "ended": "The session has ended.",
    "other_key": "The session was opened with another API key.",
    "not_journaled": "The events after last_server_event_seq are no longer journaled.",
    "not_first": "session.resume must be the first client event of a connection.",
}

TOKEN_BYTES: Final = 32  # 256 bits; the contract asks for at least 128


def new_resume_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


@dataclass(frozen=True, slots=True)
class Resumed:
    """A resume was honoured: the new token, the replay, and the chart's effects."""

    token: str = field(repr=False)
    replayed_from_seq: int
    replay: list[JournalEntry] = field(repr=False)
    effects: list[Effect]


@dataclass(frozen=True, slots=True)
class ResumeFailed:
    reason: ResumeFailure
    message: str


def resume_failed(reason: ResumeFailure, detail: str = "") -> ResumeFailed:
    message = RESUME_MESSAGES[reason]
    return ResumeFailed(reason, f"{message} {detail}".strip())


def refuse_unknown(token: str) -> ResumeFailed:
    """A resume naming no session here: the same answer, after the same comparison, as a
    wrong token (rule 5)."""
    hmac.compare_digest(token.encode(), new_resume_token().encode())
    return resume_failed("unknown")


class SessionLink:
    def __init__(
        self,
        session_id: str,
        identity: str,
        journal_bytes: int,
        new_token: Callable[[], str] = new_resume_token,
    ) -> None:
        self.session_id = session_id
        self.identity = identity
        self.journal = EventJournal(journal_bytes)
        self.chart = ConnectionChart()
        self._new_token = new_token
        self._token = new_token()
        self._seq = 0
        # The last event the current (or last) connection's socket took.
        self._delivered = 0

    @classmethod
    def taken_over(
        cls,
        snapshot: SessionSnapshot,
        token: str,
        identity: str,
        last_seq: int,
        journal_bytes: int,
        new_token: Callable[[], str] = new_resume_token,
    ) -> tuple[SessionLink, Resumed] | ResumeFailed:
        """Rule 6: the link of a session taken over from `snapshot`, attached to the resuming
        client, and what it is told; or why not."""
        if not token_matches(snapshot, token):
            return resume_failed("unknown")
        if identity != snapshot.identity:
            return resume_failed("other_key")
        entries = [JournalEntry(e.seq, e.text) for e in snapshot.journal]
        journal = EventJournal.restored(journal_bytes, entries, snapshot.last_seq)
        journal.skip_to(last_seq)
        replay = journal.after(last_seq)
        if replay is None:
            held = f"{journal.first_seq}..{journal.last_seq}"
            return resume_failed("not_journaled", f"(asked after {last_seq}; journaled: {held})")
        link = cls(snapshot.session_id, identity, journal_bytes, new_token)
        link.journal = journal
        link._seq = journal.last_seq
        link._delivered = last_seq
        return link, Resumed(link.token, last_seq + 1, replay, [])

    def __repr__(self) -> str:  # rule 4: no token
        return f"SessionLink({self.session_id!r}, seq={self._seq}, {sorted(self.chart.active)})"

    @property
    def token(self) -> str:
        return self._token

    @property
    def attached(self) -> bool:
        return self._state() == "attached"

    @property
    def detached(self) -> bool:
        return self._state() == "detached"

    @property
    def ended(self) -> bool:
        return self._state() == "ended"

    def _state(self) -> str:
        # The chart has one region: its one active state. Read raw, not through `active` (a
        # new frozenset per call), since `record` asks for every event the session sends.
        return str(next(iter(self.chart.configuration_values)))

    @property
    def last_seq(self) -> int:
        return self._seq

    # Rule 1 and 2 -------------------------------------------------------------------------
    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def record(self, seq: int, text: str) -> list[Effect]:
        """Journals event `seq`; an overflow while detached ends the session (rule 2)."""
        state = self._state()
        if state == "ended":
            return []  # its last events, on the way out: nobody can resume to read them
        protect = self._delivered if state == "detached" else None
        if self.journal.append(seq, text, protect_after=protect):
            return []
        return self.chart.feed(cev.Overflow())

    def delivered(self, seq: int) -> None:
        self._delivered = max(self._delivered, seq)

    def acked(self, seq: int) -> None:
        # Never past what was sent: an ack from the future would drop events not yet taken.
        self.journal.ack(min(seq, self._delivered))

    # Rule 3 ------------------------------------------------------------------------------
    def lost(self, *, clean: bool) -> list[Effect]:
        """The attached connection is gone: with a 1000 close (`clean`) or not."""
        return self.chart.feed(cev.Leave() if clean else cev.Drop())

    def expired(self) -> list[Effect]:
        return self.chart.feed(cev.Expire())

    def finished(self) -> None:
        self.chart.feed(cev.Finish())

    # Rule 4 and 5 ------------------------------------------------------------------------
    def resume(self, token: str, identity: str, last_seq: int) -> Resumed | ResumeFailed:
        if not hmac.compare_digest(token.encode(), self._token.encode()):
            return resume_failed("unknown")
        if self.ended:
            return resume_failed("ended")
        if identity != self.identity:
            return resume_failed("other_key")
        replay = self.journal.after(last_seq)
        if replay is None:
            held = f"{self.journal.first_seq}..{self.journal.last_seq}"
            if last_seq > self.journal.last_seq:
                detail = f"(asked after {last_seq}; the last event is {self.journal.last_seq})"
            else:
                detail = f"(asked after {last_seq}; journaled: {held})"
            return resume_failed("not_journaled", detail)
        effects = self.chart.feed(cev.Resume())
        self._token = self._new_token()
        self._delivered = last_seq
        return Resumed(self._token, last_seq + 1, replay, effects)
