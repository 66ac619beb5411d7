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

The restart soak's sessions (bench/restart_clients.py `RestartSession`) are these sessions,
run through text turns with no cut of their own, that move when the server closes them: its
rules are said there.

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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


async def connect_to(url: str) -> ClientConnection:
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
        expected_errors: frozenset[str] = frozenset(),
    ) -> None:
        self.url = url
        self.cuts = cuts
        self.rng = rng
        self.tally = tally
        self.timing = timing
        self.ws: ClientConnection | None = None
        self.log = Log(expected_errors=expected_errors)
        self.token = ""
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
        self.ws = await self._new_connection(self.url)
        created = await self._recv()
        if created.type != "session.created" or created.server_event_seq != 1:
            raise Broken(f"first event {created.type} seq {created.server_event_seq}")
        assert created.session is not None and created.resume_token is not None
        self.log.session_id = created.session.id
        self.token = created.resume_token
        self.log.take(created)

    async def _new_connection(self, url: str) -> ClientConnection:
        """A new connection (a moving session tries again: bench/restart_clients.py)."""
        return await connect_to(url)

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
        """A connection closed under a read or a send: the end of the session (a moving one
        resumes it: bench/restart_clients.py)."""
        raise closed

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
        answer = await self._resume_answer()
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

    async def _resume_answer(self) -> Event:
        """The answer to a resume on a new connection (a moving session tries again:
        bench/restart_clients.py)."""
        try:
            return await self._resume_once()
        except (ConnectionClosed, InvalidStatus, OSError, TimeoutError):
            self.ws = None
            raise

    async def _resume_once(self) -> Event:
        """A new connection to `?session_id=`, its provisional `session.created` skipped, and
        `session.resume` sent: the answer."""
        self.ws = await connect_to(f"{self.url}?session_id={self.sid}")
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
            with faults_counted(session):
                await session.open()
                for _ in range(rng.randint(*LIFETIME)):
                    if tally.stop():
                        break
                    await session.cycle()
        finally:
            await session.close()
            tally.fold(session.log)


@contextmanager
def faults_counted(session: DropSession) -> Iterator[None]:
    """A session's run ended by a fault: counted on its tally and said, not raised."""
    tally = session.tally
    try:
        yield
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
