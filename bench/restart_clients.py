"""The restart soak's clients: sessions running text turns through a rolling restart, moved.

The restart soak (bench/restart_soak.py) drives sessions that move (`RestartSession`, the drop
soak's `DropSession` with moves; `run_turns`): text turns one after another, a pause between
them, no cut of their own. A connection the server closes with 4001 (a worker draining for a
restart, its session's final snapshot written) is resumed at once, on a new connection with
the last seq processed, through nginx, where another worker takes the session over: a resume
of kind `moved`. One lost with no close frame (a worker killed) is resumed the same way, as
`lost`. Each resume's time, from the close (or the cut) to `session.resumed`, is kept by kind.
A new connection refused on its way (HTTP 502 or 503 from nginx, a close before
`session.resumed`) is tried again as the page's client does
(orchestrator/service/static/reconnect.js): after `RETRY_FIRST_S`, doubling to `RETRY_MAX_S`,
given up once the next try would start past `RETRY_GIVE_UP_S` (the server's default resume
grace). A turn whose connection was closed before `response.created` came is sent again when,
`RESEND_AFTER_MOVE_S` after the resume (its replay long through), it still has none: the
closed connection took the request with it unread (counted, `resent`). Each turn's events are
acknowledged after it (`session.event_ack`), as a real client's, so that journals and
snapshots hold one turn. After its last turn a session asks for `conversation.context` and
checks that it holds every item id it saw (`conversation.item.added` over all its
connections): its conversation kept.

Rules the session itself enforces: those of bench/drop_clients.py (every resume answered
`session.resumed` from last + 1, no unsequenced event, no hang), the drain's
`server_restarting` `error` expected (counted apart, bench/drop_checks.py), and at most
`MAX_MOVES` moves per session.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus

from bench.drop_checks import Event, Tally
from bench.drop_clients import (
    MAX_EVENTS,
    READ_TIMEOUT_S,
    Broken,
    DropSession,
    Hang,
    Timing,
    connect_to,
    faults_counted,
)
from bench.load_clients import session_update

# The close a draining worker ends a kept session with (resume it now); how many times a
# session may move, how often a new connection is tried, and how long after a resume a turn's
# request is taken as lost with the closed connection.
MOVED_CODE = 4001
MAX_MOVES = 40
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 4.0
RETRY_GIVE_UP_S = 30.0
RESEND_AFTER_MOVE_S = 3.0
RESENDS = 3
# Tokens per turn, and the pause between two turns.
TURN_TOKENS = (4, 8)
THINK_S = (1.0, 3.0)


class RestartSession(DropSession):
    """A session that moves (the module's rules): a 4001 close or a lost connection is
    resumed, not a failure; no cut of its own but the baseline's one."""

    def __init__(self, url: str, rng: random.Random, tally: Tally, timing: Timing) -> None:
        super().__init__(url, rng, tally, timing, expected_errors=frozenset({"server_restarting"}))
        self.moved = 0
        self.resumed_at = 0.0
        # The items seen when the restart began (the driver marks it).
        self.items_at_restart = 0

    async def _new_connection(self, url: str) -> ClientConnection:
        """A new connection, tried again while nginx answers 502/503 (every worker it tried
        was draining or gone) or the connect fails."""
        began = time.monotonic()
        for attempt in range(MAX_EVENTS):
            try:
                return await connect_to(url)
            except (InvalidStatus, OSError, TimeoutError):
                if not await self._retry(began, attempt):
                    raise
        raise AssertionError("unreachable")

    async def _retry(self, began: float, attempt: int) -> bool:
        """Waits out the backoff before try `attempt + 1`; False: given up (the rules)."""
        delay = min(RETRY_FIRST_S * 2**attempt, RETRY_MAX_S)
        if time.monotonic() + delay - began > RETRY_GIVE_UP_S:
            return False
        self.tally.connect_retries += 1
        await asyncio.sleep(delay)
        return True

    async def _closed(self, closed: ConnectionClosed) -> None:
        """Resumes a connection closed with 4001 (`moved`) or lost with no close frame
        (`lost`); any other close goes up."""
        code = closed.rcvd.code if closed.rcvd is not None else None
        if code is not None and code != MOVED_CODE:
            raise closed
        if self.moved >= MAX_MOVES:
            raise Broken(f"moved {self.moved} times")
        at = time.monotonic()
        self._stop_counting()
        self.ws = None
        self.moved += 1
        await self.resume("moved" if code == MOVED_CODE else "lost", since=at)
        self.resumed_at = time.monotonic()

    async def _resume_answer(self) -> Event:
        began = time.monotonic()
        for attempt in range(MAX_EVENTS):
            try:
                return await self._resume_once()
            except (ConnectionClosed, InvalidStatus, OSError, TimeoutError):
                # Refused (502/503: every worker nginx tried was draining or gone), or closed
                # before it answered (a worker that began draining): tried again on another
                # new connection.
                self.ws = None
                if not await self._retry(began, attempt):
                    raise
        raise AssertionError("unreachable")

    async def turn(self, tokens: int) -> None:
        """A turn: a user `input_text` item and `response.create`, read to its
        `response.done`; sent again when a move took the request (the module's rules)."""
        item: dict[str, object] = {
            "type": "conversation.item.create",
            "item": {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "Tell me something."}],
            },
        }
        for _ in range(RESENDS + 1):
            before = set(self.log.created)
            moved = self.moved
            self.log.asked_tokens = tokens
            await self.send(item)
            asked_at = time.monotonic()
            await self.send({"type": "response.create"})
            rid = await self._created(before, moved)
            if rid is not None:
                break
            self.tally.resent += 1
        else:
            raise Broken(f"no response.created for {RESENDS + 1} requests, each after a move")
        await self.until(lambda: self.log.done(rid), f"response.done of {rid}")
        now = time.monotonic()
        self.tally.turns.append((now, now - asked_at))

    async def _created(self, before: set[str], moved: int) -> str | None:
        """The id of the response created after `before`; None when the session moved since
        the request and, `RESEND_AFTER_MOVE_S` after it resumed, none came."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        for _ in range(MAX_EVENTS):
            new = [r for r in self.log.created if r not in before]
            if new:
                return new[0]
            now = time.monotonic()
            if self.moved != moved and now - self.resumed_at > RESEND_AFTER_MOVE_S:
                return None
            if now >= deadline:
                break
            try:
                await self.next_event(min(deadline - now, 0.25))
            except Hang:
                pass  # a quarter second with nothing: look again
        raise Hang(f"waiting for response.created, last seq {self.log.last_seq}")

    async def context_kept(self) -> bool:
        """`conversation.context.retrieve`: whether it holds every item this session saw."""
        self.log.context_ids = None
        await self.send({"type": "conversation.context.retrieve"})
        await self.until(lambda: self.log.context_ids is not None, "conversation.context")
        held: set[str] = set(self.log.context_ids or ())
        missing = [i for i in self.log.item_ids if i not in held]
        self.tally.items_checked += len(self.log.item_ids)
        self.tally.items_before_restart += self.items_at_restart
        if missing:
            self.tally.fail(
                f"{self.sid}: conversation.context lacks {len(missing)} of its "
                f"{len(self.log.item_ids)} items ({missing[:4]}; "
                f"{self.items_at_restart} seen before the restart)"
            )
        return not missing


@dataclass
class Phases:
    """The restart soak's clock, set by its driver: `drop` (the baseline's one plain cut
    per session, each at its next pause), `finish` (the last turn, then the check)."""

    drop: asyncio.Event
    finish: asyncio.Event

    @classmethod
    def new(cls) -> Phases:
        return cls(asyncio.Event(), asyncio.Event())


async def run_turns(session: RestartSession, phases: Phases) -> None:
    """One restart-soak session: turns until `finish`, one more, then its conversation
    checked; the baseline's cut taken at the first pause after `drop`."""
    rng, tally = session.rng, session.tally
    tokens = rng.randint(*TURN_TOKENS)
    kept = False
    dropped = False
    try:
        with faults_counted(session):
            await session.open()
            await session.send(session_update(tokens, server_vad=False))
            while not phases.finish.is_set():
                await session.turn(tokens)
                # Acked, as a real client does: the journal (and the snapshot) holds one turn.
                await session.send(
                    {"type": "session.event_ack", "server_event_seq": session.log.last_seq}
                )
                if phases.drop.is_set() and not dropped:
                    dropped = True
                    at = time.monotonic()
                    session.cut("idle")
                    await session.resume("dropped", since=at)
                try:
                    await asyncio.wait_for(phases.finish.wait(), rng.uniform(*THINK_S))
                except TimeoutError:
                    pass
            await session.turn(tokens)  # the turn after the restart
            kept = await session.context_kept()
    finally:
        if kept:
            tally.kept += 1
        else:
            tally.not_kept += 1
        await session.close()
        tally.fold(session.log)
