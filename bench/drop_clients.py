"""The drop soak's clients: sessions driven through cycles, cut at random moments, resumed.

A slot (`run_slot`) runs sessions one after another until the run's cuts are made; a session
lives 3-8 cycles, then closes with 1000. A cycle: now and then a burst of
`input_audio_buffer.append` (then a commit or a clear), then `session.update`
(`max_output_tokens` T, `turn_detection: null`), a user `input_text` item and
`response.create`, read to its `response.done`, and usually a `session.event_ack`.
Its connection is cut with no close frame (SO_LINGER 0, then the socket closed: a reset) at
random moments, each cut taken from the run's budget (`Tally.may_drop`):
- mid_response: after k of the T audio deltas were read;
- mid_append: between two appends of a burst;
- mid_replay: right after `session.resumed`, after 0-2 of the replayed events were read (the
  resume before it waited out the response, so its replay still held the rest of it);
- idle: between cycles, nothing running.
After each cut the client reconnects to `?session_id=`, ignores the provisional
`session.created`, and sends `session.resume` with the last seq it processed; half the
mid-response resumes come back at once (into the running response: replay, then live), the
other half after the response has surely ended (everything after the resume is replay).

The restart soak (bench/drop_soak.py `--restart`) drives sessions that move (`moves=True`,
`run_turns`): text turns one after another, a pause between them, no cut of its own. A
connection the server closes with 4001 (a worker draining for a restart, its session's final
snapshot written) is resumed at once, on a new connection with the last seq processed,
through nginx, where another worker takes the session over: a resume of kind `moved`. One
lost with no close frame (a worker killed) is resumed the same way, as `lost`. Each resume's
time, from the close (or the cut) to `session.resumed`, is kept by kind. A new connection
refused on its way (HTTP 502 or 503 from nginx, a close before `session.resumed`) is tried
again as the page's client does (orchestrator/service/static/reconnect.js): after
`RETRY_FIRST_S`, doubling to `RETRY_MAX_S`, given up once the next try would start past
`RETRY_GIVE_UP_S` (the server's default resume grace). A turn whose connection was
closed before `response.created` came is sent again when, `RESEND_AFTER_MOVE_S` after the
resume (its replay long through), it still has none: the closed connection took the request
with it unread (counted, `resent`). Each turn's events are acknowledged after it
(`session.event_ack`), as a real client's, so that journals and snapshots hold one turn.
After its last turn a session asks for `conversation.context` and checks that it holds every
item id it saw (`conversation.item.added` over all its connections): its conversation kept.

Rules the session itself enforces (the events' own are bench/drop_checks.py's, as `Log.take`
sees every sequenced event in the order it was read):
- every resume is answered `session.resumed` with `replayed_from_seq` = last + 1 and its own
  session id: a `session_resume_failed` is a resume failure, anything else unexpected;
- no unsequenced event once the session is open (only a connection's events are outside the
  sequence, and none is due);
- no hang: every wait for an event, and every send, is bounded by `READ_TIMEOUT_S`, and every
  read loop by `MAX_EVENTS`; a session that cannot go on ends there, its figures still folded.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from bench.drop_checks import Event, Log, Tally, decode_event
from bench.load_clients import session_update
from bench.realtime_wire import append_pcm16
from bench.speech import RATE
from turntaker_models.null import FIRST_CHUNK_MS, INTERVAL_MS

KINDS = ("mid_response", "mid_append", "mid_replay", "idle")

# Every wait for an event is bounded by this (a hang is a failure, not a stuck run).
READ_TIMEOUT_S = 30.0
# And every read loop in count: no wait in this soak needs more events than this.
MAX_EVENTS = 5000
# Tokens per response (one 80 ms audio delta each on `null`): long enough to cut inside.
TOKENS = (4, 12)
LIFETIME = (3, 8)
BURST = (2, 6)
APPEND = append_pcm16(bytes(2 * RATE // 10))  # 100 ms of pcm16 silence at 24 kHz
# Per cycle, the chances of: an append burst, a cut inside it, a cut mid-response, a resume
# that waits the response out, a mid-replay cut after such a resume, an idle cut, and a
# `session.event_ack` after `response.done` (acks keep journals short, as a real client's).
P_BURST = 0.4
P_CUT_BURST = 0.5
P_CUT_RESPONSE = 0.6
P_WAIT_OUT = 0.5
P_CUT_REPLAY = 0.7
P_CUT_IDLE = 0.1
P_ACK = 0.75

# The restart soak: the close a draining worker ends a kept session with (resume it now);
# how many times a session may move, how often a new connection is tried, and how long after
# a resume a turn's request is taken as lost with the closed connection.
MOVED_CODE = 4001
MAX_MOVES = 40
RETRY_FIRST_S = 0.25
RETRY_MAX_S = 4.0
RETRY_GIVE_UP_S = 30.0
RESEND_AFTER_MOVE_S = 3.0
RESENDS = 3
# Tokens per turn of the restart soak, and the pause between two turns.
TURN_TOKENS = (4, 8)
THINK_S = (1.0, 3.0)


class Hang(Exception):
    """A bounded wait ran out: the server never sent what the session waited for."""


class Broken(Exception):
    """The server broke a rule in a way the session cannot go on from."""


@dataclass(frozen=True)
class Timing:
    """The `null` model's pace at this Triton's speed, for waiting a response out."""

    speed: float

    def response_s(self, tokens: int) -> float:
        return (FIRST_CHUNK_MS + tokens * INTERVAL_MS) / self.speed / 1000


def _cut(ws: ClientConnection) -> None:
    """Gone without a close frame: SO_LINGER 0 makes the close a reset, as a dead network."""
    sock = ws.transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass  # already gone
    ws.transport.abort()


async def _connect(url: str) -> ClientConnection:
    # No keepalive pings: a ping would be one more thing on the wire at a cut, and nothing
    # here idles for 20 s.
    return await connect(url, max_size=None, compression=None, open_timeout=10, ping_interval=None)


class DropSession:
    """One session driven through its cycles, cut and resumed; every event goes through
    `Log.take` in the order it was read."""

    def __init__(
        self,
        url: str,
        rng: random.Random,
        tally: Tally,
        timing: Timing,
        *,
        cuts: bool = True,
        moves: bool = False,
    ) -> None:
        self.url = url
        self.cuts = cuts
        # The restart soak's: a 4001 close or a lost connection is resumed, not a failure.
        self.moves = moves
        self.moved = 0
        self.resumed_at = 0.0
        self.rng = rng
        self.tally = tally
        self.timing = timing
        self.ws: ClientConnection | None = None
        self.log = Log(expected_errors=frozenset({"server_restarting"}) if moves else frozenset())
        self.token = ""
        # The items seen when the restart began (the driver marks it).
        self.items_at_restart = 0
        # After a resume: its kind ("running" / "ended") while its events are being counted
        # (up to the next send or cut), and whether it follows a mid-replay cut.
        self._counting: str | None = None
        self._after = 0
        self._after_replay_cut = False

    @property
    def sid(self) -> str:
        return self.log.session_id

    def _socket(self) -> ClientConnection:
        assert self.ws is not None
        return self.ws

    async def open(self) -> None:
        self.ws = await self._connect_retrying(self.url)
        created = await self._recv()
        if created.type != "session.created" or created.server_event_seq != 1:
            raise Broken(f"first event {created.type} seq {created.server_event_seq}")
        assert created.session is not None and created.resume_token is not None
        self.log.session_id = created.session.id
        self.token = created.resume_token
        self.log.take(created)

    async def _connect_retrying(self, url: str) -> ClientConnection:
        """A new connection; a moving session tries again while nginx answers 502/503 (every
        worker it tried was draining or gone) or the connect fails."""
        began = time.monotonic()
        for attempt in range(MAX_EVENTS):
            try:
                return await _connect(url)
            except (InvalidStatus, OSError, TimeoutError):
                if not self.moves or not await self._retry(began, attempt):
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

    async def _recv_raw(self, timeout_s: float) -> Event:
        try:
            raw = await asyncio.wait_for(self._socket().recv(), timeout_s)
        except TimeoutError:
            raise Hang(f"nothing within {timeout_s:g} s after seq {self.log.last_seq}") from None
        return decode_event(raw)

    async def _recv(self, timeout_s: float = READ_TIMEOUT_S) -> Event:
        while True:
            try:
                return await self._recv_raw(timeout_s)
            except ConnectionClosed as closed:
                await self._closed(closed)

    async def _closed(self, closed: ConnectionClosed) -> None:
        """A moving session resumes a connection closed with 4001 (`moved`) or lost with no
        close frame (`lost`); anything else, and any close of another session, goes up."""
        code = closed.rcvd.code if closed.rcvd is not None else None
        if not self.moves or (code is not None and code != MOVED_CODE):
            raise closed
        if self.moved >= MAX_MOVES:
            raise Broken(f"moved {self.moved} times")
        at = time.monotonic()
        self._stop_counting()
        self.ws = None
        self.moved += 1
        await self.resume("moved" if code == MOVED_CODE else "lost", since=at)
        self.resumed_at = time.monotonic()

    async def next_event(self, timeout_s: float) -> Event:
        event = await self._recv(timeout_s)
        if event.server_event_seq is None:
            # Outside the sequence are only a connection's events: none is due here.
            code = event.error.code if event.error is not None else ""
            if code in self.log.expected_errors:
                self.log.expected_error_events += 1
                return event
            if code == "session_resume_failed":
                self.tally.resume_failures += 1
            else:
                self.tally.unexpected += 1
            raise Broken(f"unsequenced {event.type} {code} after seq {self.log.last_seq}")
        if self.log.take(event) and self._counting is not None:
            self._after += 1
        return event

    async def until(self, done: Callable[[], bool], what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_TIMEOUT_S
        for _ in range(MAX_EVENTS):
            if done():
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                await self.next_event(remaining)
            except Hang:
                break
        raise Hang(f"waiting for {what}, last seq {self.log.last_seq}")

    def _stop_counting(self) -> None:
        if self._counting is not None:
            self.tally.after_resume[self._counting] += self._after
            if self._after_replay_cut and self._after:
                # Events still came after the mid-replay cut: it fell inside the replay.
                self.tally.replay_cuts_confirmed += 1
        self._counting, self._after, self._after_replay_cut = None, 0, False

    async def send(self, message: dict[str, object] | str) -> None:
        self._stop_counting()
        text = message if isinstance(message, str) else json.dumps(message)
        await self._send(text)

    async def _send(self, text: str) -> None:
        # Bounded too: a server that stopped reading would hold a send forever.
        while True:
            try:
                await asyncio.wait_for(self._socket().send(text), READ_TIMEOUT_S)
                return
            except TimeoutError:
                raise Hang(f"a send took over {READ_TIMEOUT_S:g} s") from None
            except ConnectionClosed as closed:
                # Not sent: sent again on the resumed connection (a moving session's).
                await self._closed(closed)

    def cut(self, kind: str) -> None:
        self._stop_counting()
        _cut(self._socket())
        self.ws = None
        self.tally.drops[kind] += 1

    async def resume(
        self, kind: str, *, after_replay_cut: bool = False, since: float | None = None
    ) -> None:
        """`since`: the moment the connection was lost, for the resume's time."""
        began = time.monotonic()
        for attempt in range(MAX_EVENTS):
            try:
                answer = await self._resume_once()
                break
            except (ConnectionClosed, InvalidStatus, OSError, TimeoutError):
                # Refused (502/503: every worker nginx tried was draining or gone), or closed
                # before it answered (a worker that began draining): a moving session tries
                # again on another new connection.
                self.ws = None
                if not self.moves or not await self._retry(began, attempt):
                    raise
        else:
            raise AssertionError("unreachable")
        last = self.log.last_seq
        if answer.type != "session.resumed":
            code = answer.error.code if answer.error is not None else ""
            if code == "session_resume_failed":
                self.tally.resume_failures += 1
            else:
                self.tally.unexpected += 1
            message = answer.error.message if answer.error is not None else ""
            raise Broken(f"resume after seq {last}: {answer.type} {code} {message}".strip())
        if answer.session_id != self.sid or answer.replayed_from_seq != last + 1:
            self.tally.unexpected += 1
            raise Broken(f"session.resumed {answer.session_id} from {answer.replayed_from_seq}")
        assert answer.resume_token is not None
        self.token = answer.resume_token
        if since is None:
            self.tally.resumes[kind] += 1
        else:
            self.tally.resumed(kind, time.monotonic() - since)
        self._counting, self._after, self._after_replay_cut = kind, 0, after_replay_cut

    async def _resume_once(self) -> Event:
        """A new connection to `?session_id=`, its provisional `session.created` skipped, and
        `session.resume` sent: the answer."""
        self.ws = await _connect(f"{self.url}?session_id={self.sid}")
        provisional = await self._recv_raw(READ_TIMEOUT_S)
        if provisional.type != "session.created" or (
            provisional.session is not None and provisional.session.id == self.sid
        ):
            raise Broken(f"a resuming connection began with {provisional.type}")
        last = self.log.last_seq
        message = {
            "type": "session.resume",
            "event_id": f"evt_resume_{last}",
            "session_id": self.sid,
            "resume_token": self.token,
            "last_server_event_seq": last,
        }
        try:
            await asyncio.wait_for(self._socket().send(json.dumps(message)), READ_TIMEOUT_S)
        except TimeoutError:
            raise Hang(f"a send took over {READ_TIMEOUT_S:g} s") from None
        return await self._recv_raw(READ_TIMEOUT_S)

    async def _pause(self) -> None:
        # A reconnect a few milliseconds later: the server has usually noticed the reset.
        await asyncio.sleep(self.rng.uniform(0.0, 0.03))

    def _may_cut(self) -> bool:
        return self.cuts and self.tally.may_drop()

    async def cycle(self, *, burst: bool = False) -> None:
        rng = self.rng
        if burst or rng.random() < P_BURST:
            await self._burst()
        tokens = rng.randint(*TOKENS)
        self.log.asked_tokens = tokens
        await self.send(session_update(tokens, server_vad=False))
        await self.send(
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Tell me something."}],
                },
            }
        )
        before = set(self.log.created)
        asked_at = time.monotonic()
        await self.send({"type": "response.create"})
        await self.until(lambda: len(self.log.created) > len(before), "response.created")
        rid = next(r for r in self.log.created if r not in before)
        if rng.random() < P_CUT_RESPONSE and self._may_cut():
            k = rng.randint(1, tokens - 1)
            await self.until(lambda: self.log.deltas[rid] >= k or self.log.done(rid), "deltas")
            self.cut("mid_response")
            if rng.random() < P_WAIT_OUT:
                # Come back once the response has surely ended: all after it is replay.
                wait = asked_at + 1.5 * self.timing.response_s(tokens) + 0.1 - time.monotonic()
                await asyncio.sleep(max(0.0, wait))
                await self.resume("ended")
                if rng.random() < P_CUT_REPLAY and self._may_cut():
                    try:
                        for _ in range(rng.randint(0, 2)):
                            await self.next_event(2.0)
                    except Hang:
                        pass  # a replay shorter than that: the wait for response.done tells
                    self.cut("mid_replay")
                    await self._pause()
                    await self.resume("ended", after_replay_cut=True)
            else:
                await self._pause()
                await self.resume("running")
        await self.until(lambda: self.log.done(rid), f"response.done of {rid}")
        if rng.random() < P_ACK:
            await self.send({"type": "session.event_ack", "server_event_seq": self.log.last_seq})
        if rng.random() < P_CUT_IDLE and self._may_cut():
            self.cut("idle")
            await self._pause()
            await self.resume("ended")

    async def _burst(self) -> None:
        rng = self.rng
        count = rng.randint(*BURST)
        cut_at = rng.randint(1, count - 1) if rng.random() < P_CUT_BURST else None
        for i in range(count):
            if i == cut_at and self._may_cut():
                self.cut("mid_append")
                await self._pause()
                await self.resume("ended")
            await self.send(APPEND)
            await asyncio.sleep(0.002)  # apart on the wire, so the cut falls between two
        # At least one append went after any cut, so a commit never finds the buffer empty.
        if rng.random() < 0.5:
            seen = len(self.log.entries)
            await self.send({"type": "input_audio_buffer.commit"})
            kind = "input_audio_buffer.committed"
        else:
            seen = len(self.log.entries)
            await self.send({"type": "input_audio_buffer.clear"})
            kind = "input_audio_buffer.cleared"
        await self.until(lambda: any(t == kind for _, _, t in self.log.entries[seen:]), kind)

    async def turn(self, tokens: int) -> None:
        """The restart soak's turn: a user `input_text` item and `response.create`, read to
        its `response.done`; sent again when a move took the request (the module's rules)."""
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

    async def close(self) -> None:
        self._stop_counting()
        if self.ws is not None:
            try:
                await asyncio.wait_for(self.ws.close(1000), 10)
            except (TimeoutError, OSError, WebSocketException):
                self.ws.transport.abort()
            self.ws = None


async def run_slot(url: str, rng: random.Random, tally: Tally, timing: Timing) -> None:
    """Sessions one after another until the drops are made (bounded in count too)."""
    for _ in range(tally.target + 1):
        if tally.stop():
            return
        session = DropSession(url, rng, tally, timing)
        try:
            await session.open()
            for _ in range(rng.randint(*LIFETIME)):
                if tally.stop():
                    break
                await session.cycle()
        except Hang as error:
            tally.hangs += 1
            tally.fail(f"{session.sid}: hang: {error}")
        except Broken as error:
            tally.fail(f"{session.sid}: {error}")
        except (OSError, WebSocketException) as error:
            tally.unexpected += 1
            tally.fail(f"{session.sid}: connection failed: {error!r}")
        except msgspec.DecodeError as error:  # an event not shaped as the contract says
            tally.unexpected += 1
            tally.fail(f"{session.sid}: undecodable event: {error}")
        finally:
            await session.close()
            tally.fold(session.log)


@dataclass
class Phases:
    """The restart soak's clock, set by its driver: `drop` (the baseline's one plain cut
    per session, each at its next pause), `finish` (the last turn, then the check)."""

    drop: asyncio.Event
    finish: asyncio.Event

    @classmethod
    def new(cls) -> Phases:
        return cls(asyncio.Event(), asyncio.Event())


async def run_turns(session: DropSession, phases: Phases) -> None:
    """One restart-soak session (its `moves` on): turns until `finish`, one more, then its
    conversation checked; the baseline's cut taken at the first pause after `drop`."""
    rng, tally = session.rng, session.tally
    tokens = rng.randint(*TURN_TOKENS)
    kept = False
    dropped = False
    try:
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
    except Hang as error:
        tally.hangs += 1
        tally.fail(f"{session.sid}: hang: {error}")
    except Broken as error:
        tally.fail(f"{session.sid}: {error}")
    except (OSError, WebSocketException) as error:
        tally.unexpected += 1
        tally.fail(f"{session.sid}: connection failed: {error!r}")
    except msgspec.DecodeError as error:
        tally.unexpected += 1
        tally.fail(f"{session.sid}: undecodable event: {error}")
    finally:
        if kept:
            tally.kept += 1
        else:
            tally.not_kept += 1
        await session.close()
        tally.fold(session.log)


async def warm_up(url: str, tally: Tally, timing: Timing) -> None:
    """One session through every step, no cut: what the server opens once, on first use, and
    keeps (its long-lived Triton channel: 5 descriptors) is then in the start checkpoint."""
    session = DropSession(url, random.Random(0), tally, timing, cuts=False)
    try:
        await session.open()
        await session.cycle(burst=True)
    finally:
        await session.close()
        tally.fold(session.log)
