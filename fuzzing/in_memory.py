"""The in-memory runner: scripts fed straight to a `SessionCore`, as h11's tests pair objects.

Each client message is decoded with `decode_client_event` exactly as the session actor's
`receive()` does (the same size limit, the session's current input format) and handed to the
core; every server event that comes back is encoded with the actor's `ServerEventEncoder` and
checked as JSON text, as a client would see it (`fuzzing.checks`). The I/O the core asks for
(backend streams, VAD, transcription, the turn model, timers) is played by
`fuzzing.stand_ins`, seeded by the script, and its answers interleave with the client's
messages.

Rules (besides `fuzzing.checks`):
- The answer to a message is exactly what the core returns for it: nothing else can mix in,
  so no probe is needed to tell answers apart; a probe still follows every input and must
  get its one `item_retrieve_invalid_item_id` (the session keeps working).
- The core never raises (on a live server that is a 1011) and never ends the session
  (`SessionEnd`) because of a client message.
- At the end, the stand-ins deliver what is still due (in half the sessions), then either
  the session is asked to close (`CloseRequested`: expiry or a server drain) and must send
  the reason's error, end every running response and ask for the close code; or every
  response still running is cancelled and must end (rule 3, its late output dropped), as
  must one that an answer still due starts meanwhile (a turn the VAD or the turn model
  ends), and the session must still take a plain `session.update`.
- A non-UTF-8 text frame never reaches a session (the WebSocket layer fails the connection):
  only the socket runner judges it.

`core_output` is the one place that knows the shape of what the core returns.
"""

from __future__ import annotations

import json
import random
import traceback
from collections.abc import Callable, Sequence
from typing import Final

from fuzzing.checks import EventChecker, SessionLog, is_error_named, judge
from fuzzing.inputs import FuzzInput, Json, Script, substitute
from fuzzing.live import PROBE_ITEM
from fuzzing.results import Failure, FuzzStats
from fuzzing.stand_ins import StandIns
from orchestrator.protocol import server as se
from orchestrator.protocol.client import SessionEventAck, SessionResume
from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event
from orchestrator.service.config import ServiceConfig
from orchestrator.session.actions import Action, SessionEnd
from orchestrator.session.core import CoreConfig, CoreInput, SessionCore, Step
from orchestrator.session.inputs import CloseReason, CloseRequested

MAX_MESSAGE_BYTES: Final = ServiceConfig().max_message_bytes
_CLOSE_REASONS: Final[tuple[CloseReason, ...]] = ("server_shutting_down", "session_expired")
_CLOSE_CODES: Final[dict[CloseReason, int]] = {
    "server_shutting_down": 1001,
    "session_expired": 1000,
}

_Fail = Callable[[str, str, int | None], None]


def core_output(step: Step) -> tuple[Sequence[se.ServerEvent], Sequence[Action]]:
    """What one core input produced: its server events, in order, and its actions."""
    return step.events, step.actions


class _Broken(Exception):
    """The core raised; the session cannot be judged further."""


class _Session:
    """One core, its stand-in I/O and the log of what a client would have seen."""

    def __init__(self, session_id: str, script: Script, log: SessionLog, stats: FuzzStats) -> None:
        self.rng = random.Random(script.seed)
        transcriber = self.rng.random() < 0.5
        config = CoreConfig(
            transcriber=transcriber,
            transcripts_for_pipeline=transcriber and self.rng.random() < 0.5,
            # A `turn` model stands in (`StandIns`): semantic_vad is offered, as on a live
            # server with all its models.
            turn_model=True,
        )
        self.core = SessionCore(session_id, config)
        self.io = StandIns(self.rng)
        self.encoder = ServerEventEncoder()
        self.log = log
        self.stats = stats
        self.actions: list[Action] = []

    def open(self) -> list[dict[str, Json]]:
        return self._take(lambda: self.core.open(self.io.now_ms))

    def feed(self, given: CoreInput) -> list[dict[str, Json]]:
        """One input to the core; its server events as a client sees them."""
        return self._take(lambda: self.core.handle(given, self.io.now_ms))

    def message(self, frame: str | bytes) -> list[dict[str, Json]]:
        """One client message, parsed at the edge as the session actor's `receive()` does."""
        event = decode_client_event(
            frame, max_bytes=MAX_MESSAGE_BYTES, input_audio_format=self.core.input_format
        )
        if isinstance(event, (SessionResume, SessionEventAck)):
            return []  # the session's link answers these (session_link.py), not the core
        return self.feed(event)

    def gap(self) -> None:
        for answer in self.io.gap():
            self.stats.fed[type(answer).__name__] += 1
            self.feed(answer)

    def drain(self) -> None:
        for answer in self.io.drain():
            self.stats.fed[type(answer).__name__] += 1
            self.feed(answer)

    def _take(self, call: Callable[[], Step]) -> list[dict[str, Json]]:
        try:
            events, actions = core_output(call())
        except Exception as error:
            where = "".join(traceback.format_exception(error, limit=-3))
            raise _Broken(f"{type(error).__name__}: {error}\n{where}") from error
        self.actions = list(actions)
        self.io.carry_out(actions)
        return [self.log.see(self.encoder.encode(event).decode()) for event in events]


class MemoryRunner:
    """Runs scripts against a `SessionCore` in memory; every broken invariant is a `Failure`."""

    def __init__(self) -> None:
        self.stats = FuzzStats(runner="in memory")
        self.checker = EventChecker()
        self._probes = 0

    def run(self, script: Script) -> list[Failure]:
        failures: list[Failure] = []
        seen: list[str] = []

        def fail(invariant: str, detail: str, index: int | None) -> None:
            failures.append(Failure(invariant, detail, script, index, list(seen)))

        self.stats.sessions += 1
        log = SessionLog(self.checker, self.stats)
        session = _Session(f"sess_mem{self.stats.sessions}", script, log, self.stats)
        index: int | None = None
        try:
            first = session.open()
            if [e.get("type") for e in first] != ["session.created"]:
                fail("handshake", f"opening sent {[e.get('type') for e in first]}", None)
            for index, inp in enumerate(script.inputs):
                seen.clear()
                if inp.text_bytes:
                    self.stats.transport_only += 1
                    continue
                self._send(session, inp, index, seen, fail)
                session.gap()
                if session.io.ended is not None:
                    ended = session.io.ended
                    detail = f"the core ended the session: {ended.code} {ended.reason!r}"
                    fail("connection kept on bad input", detail, index)
                    break
            else:
                index = None
                self._finish(session, seen, fail)
        except _Broken as broken:
            fail("the core never raises (a 1011 on a live server)", str(broken), index)
        for problem in log.problems + session.io.problems:
            fail("server events", problem, index)
        self.stats.failures.extend(failures)
        return failures

    def _send(
        self, session: _Session, inp: FuzzInput, index: int, seen: list[str], fail: _Fail
    ) -> None:
        frame = substitute(inp.frame, inp.step, session.log.known)
        self.stats.inputs += 1
        self.stats.by_kind[inp.kind] += 1
        events = session.message(frame)
        seen.extend(str(e.get("type")) for e in events)
        problem = judge(inp, events)
        if problem is not None:
            fail("answer", problem, index)
        self._probes += 1
        probe = f"probe-{self._probes}"
        retrieve = {"type": "conversation.item.retrieve", "item_id": PROBE_ITEM, "event_id": probe}
        answer = session.message(json.dumps(retrieve))
        if len(answer) != 1 or not is_error_named(answer[0], probe):
            types = [e.get("type") for e in answer]
            fail("session keeps working", f"probe answered with {types}", index)
        elif answer[0].get("error", {}).get("code") != "item_retrieve_invalid_item_id":
            fail("session keeps working", f"probe answered with {answer[0]}", index)

    def _finish(self, session: _Session, seen: list[str], fail: _Fail) -> None:
        """Deliver what is due (sometimes), cancel what still runs, then update or close."""
        seen.clear()
        if session.rng.random() < 0.5:
            session.drain()
        if session.rng.random() < 0.25:
            self._close(session, seen, fail)
            return
        cancelled: set[str] = set()
        for _ in range(4):
            # An answer still due (a VAD's, the turn model's) may end a turn meanwhile, and its
            # response starts: that one is cancelled next round.
            fresh = [rid for rid in session.log.running if rid not in cancelled]
            if not fresh:
                break
            for rid in fresh:
                cancel = {"type": "response.cancel", "response_id": rid, "event_id": "drain"}
                seen.extend(str(e.get("type")) for e in session.message(json.dumps(cancel)))
                cancelled.add(rid)
            session.drain()  # late output of what was cancelled: the fence must drop it
            if any(rid in cancelled for rid in session.log.running):
                break
        running = session.log.running
        if running:
            fail("one terminal per response (rule 3)", f"no response.done for {running}", None)
            return
        final = {
            "type": "session.update",
            "session": {"instructions": "still there?"},
            "event_id": "final",
        }
        events = session.message(json.dumps(final))
        seen.extend(str(e.get("type")) for e in events)
        if [e.get("type") for e in events] != ["session.updated"]:
            fail("session keeps working", f"the closing session.update got {seen}", None)

    def _close(self, session: _Session, seen: list[str], fail: _Fail) -> None:
        reason = session.rng.choice(_CLOSE_REASONS)
        events = session.feed(CloseRequested(reason))
        seen.extend(str(e.get("type")) for e in events)
        codes = [e.get("error", {}).get("code") for e in events if e.get("type") == "error"]
        if codes != [reason]:
            fail("closing tells the client why", f"{reason} closed with errors {codes}", None)
        ends = [a for a in session.actions if isinstance(a, SessionEnd)]
        if [e.code for e in ends] != [_CLOSE_CODES[reason]]:
            fail("closing ends the session", f"{reason} asked for {ends}", None)
        if session.log.running:
            running = session.log.running
            fail("a closing session ends its responses", f"{running} still running", None)
