"""The session actor: one Trio task per session that owns its `SessionCore` and mailbox.

Plumbing only. Every happening (a client message, a VAD answer, a backend chunk, a transcript,
a timer, the end of its lifetime) is one mail in a bounded mailbox, fed to the core in arrival
order with the session's clock. The actor carries out the `Step` that comes back: actions
first, then the server events into the bounded outbox, then `EndSession`. It reads nothing of
the core but `input_format`, and looks at server events only to count metrics. The VAD feeder,
timers, transcriptions and response actors run in the session's nursery: closing the session
cancels them all. No wait cycle: the actor never waits on the VAD (vad_feeder.py's credits
hold the reader back instead).

Every server event gets the session's next `server_event_seq` and is journaled by the session's
link (orchestrator/session/resume/link.py) before it goes to the connection the session has now, if
any. The link decides what a lost connection, a resume and the grace mean; the actor carries
its effects out: the grace timer, the takeover's `session_replaced`, the replay.

How a session ends (`end` tells the I/O layer the close code and reason): the client leaves
with a 1000 close (`connection_lost(clean=True)` cancels the actor at once); its connection is
lost otherwise and no resume comes within `disconnect_grace_s`, or its journal overflows
meanwhile; the client stops reading (an event that cannot be queued for
`slow_client_timeout_s`: 1008, the bound that keeps a slow client from growing the server's
memory); `max_session_s` passes or the server drains (`shut_down()`): a `CloseRequested`
mailed behind what is queued, so every event decided before it still goes out, and the core's
`EndSession` (1000 or 1001) after its terminal `response.done` and `error`. A provisional
session whose connection resumed another is `discard`ed.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec
import trio

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event, error_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.service.backends.requests import DecodedAudio
from orchestrator.service.backends.response_actor import ResponseActor
from orchestrator.service.config import ServiceConfig
from orchestrator.service.sessions.connection import Connection, SessionEnd
from orchestrator.service.sessions.services import AppendBudget, SessionServices
from orchestrator.service.sessions.session_metrics import SessionMetrics
from orchestrator.service.sessions.timers import Timers
from orchestrator.service.sessions.vad_feeder import VadFeeder
from orchestrator.session.actions import (
    ArmTimer,
    CancelBackend,
    CancelTimer,
    DetectSpeech,
    EndSession,
    PredictTurn,
    StartBackend,
    Transcribe,
)
from orchestrator.session.core import CoreConfig, CoreInput, SessionCore, Step
from orchestrator.session.inputs import (
    CloseReason,
    CloseRequested,
    SpeechProbabilities,
    TranscriptReady,
    TurnPrediction,
)
from orchestrator.session.resume.link import ResumeFailed, SessionLink
from statecharts.effects import (
    ArmGrace,
    AttachConnection,
    CancelGrace,
    Effect,
    EndUnattended,
    ReplaceConnection,
)

log = logging.getLogger("turntaker.session")

__all__ = ["SessionActor", "SessionEnd", "pipeline_request_id"]


@dataclass(frozen=True)
class _Client:
    event: ce.ClientEvent | ProtocolError
    # The reader took a VAD credit for this append; the actor or the feeder gives it back.
    credit: bool = False


@dataclass(frozen=True)
class _Input:
    event: CoreInput
    # trio.current_time() when it was mailed; barge-in latency is measured from a VAD answer's.
    at: float


_Mail = _Client | _Input


class _NotReading(Exception):
    """The outbox stayed full for `slow_client_timeout_s`."""


class _Texts:
    """A connection's outgoing texts, for a reader in memory (tests): each taken is sent."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def __aiter__(self) -> _Texts:
        return self

    async def __anext__(self) -> str:
        item = await self._connection.outbox.__anext__()
        self._connection.sent(item)
        return item[1]


class SessionActor:
    def __init__(
        self,
        session_id: str,
        config: ServiceConfig,
        services: SessionServices,
        *,
        append_budget: AppendBudget | None = None,
        identity: str = "anonymous",
        connection: Connection | None = None,
    ) -> None:
        self.session_id = session_id
        self._append_budget = append_budget
        self.config = config
        self.services = services
        self.core = SessionCore(
            session_id,
            CoreConfig(
                model=config.model,
                transcriber=services.transcriber is not None,
                transcripts_for_pipeline=services.transcripts_for_pipeline,
                transcript_wait_ms=int(services.transcript_wait_s * 1000),
                turn_model=services.turn is not None,
            ),
        )
        self._mail_send, self._mail_recv = trio.open_memory_channel[_Mail](config.session_mailbox)
        self.link = SessionLink(session_id, identity, config.resume_journal_bytes)
        if connection is None:
            connection = Connection.bounded(config)
        connection.actor = self
        self._first_connection = connection
        # The connection carrying the session now; None while detached (or ended).
        self._conn: Connection | None = connection
        # Bumped by every grace armed or cancelled, so that a stale timer decides nothing.
        self._grace_epoch = 0
        self._grace_scope: trio.CancelScope | None = None
        self._vad = VadFeeder(services.vad, config.vad_backlog_chunks, self._post)
        self._timers = Timers(self._post)
        self._encoder = ServerEventEncoder()
        self._responses: dict[str, ResponseActor] = {}
        # Each turn's audio decoded to 16 kHz once, not for every response (requests.py).
        self._decoded = DecodedAudio()
        self._metrics = SessionMetrics(services.metrics)
        self._nursery: trio.Nursery | None = None
        # Cancelled when the session ends without its client (a 1000 close, the grace, an
        # overflow, a discard): the actor stops wherever it is.
        self._serving = trio.CancelScope()
        self._shutdown = trio.Event()
        self.end: SessionEnd | None = None

    # The I/O layer's side -------------------------------------------------------------
    @property
    def input_backlog(self) -> int:
        """Appends waiting for turn detection (bounded by `vad_backlog_chunks`)."""
        return self._vad.backlog

    @property
    def outgoing(self) -> AsyncIterator[str]:
        """The first connection's texts (an in-memory reader: the I/O layer pumps its own)."""
        return _Texts(self._first_connection)

    @property
    def connection(self) -> Connection | None:
        return self._conn

    def decode(self, data: str | bytes) -> ce.ClientEvent | ce.LinkEvent | ProtocolError:
        """One WebSocket message from the client, parsed here, once, at the edge."""
        return decode_client_event(
            data, max_bytes=self.config.max_message_bytes, input_audio_format=self.core.input_format
        )

    async def receive(self, data: str | bytes) -> None:
        """One message from the client of the first connection (in-memory use)."""
        await self._first_connection.receive(data)

    async def deliver(self, event: ce.ClientEvent | ce.LinkEvent | ProtocolError) -> None:
        """A client event for the session (a resume was handled by the connection)."""
        if isinstance(event, ce.SessionEventAck):
            self.link.acked(event.server_event_seq)
            return
        if isinstance(event, ce.SessionResume):
            return  # Connection.receive answers it; nothing of it is the session's
        budget = self._append_budget
        if isinstance(event, ce.InputAudioBufferAppend) and budget and not budget(len(event.audio)):
            # Told, not closed (docs/protocol.md rule 7): the session goes on, only this audio lost.
            event = ProtocolError(
                code="rate_limit_exceeded",
                message="Input audio is arriving faster than this API key's limit; this append "
                "was dropped. Send audio at most a little faster than real time.",
                param="audio",
                event_id=event.event_id,
            )
        credit = isinstance(event, ce.InputAudioBufferAppend)
        if credit:
            # Bounded: when the VAD falls behind, the session stops reading the client here.
            await self._vad.acquire()
        try:
            await self._mail_send.send(_Client(event, credit))
        except BaseException:
            if credit:
                self._vad.release()
            raise

    async def client_gone(self) -> None:
        """The first connection's client closed it with 1000 (in-memory use)."""
        self._first_connection.peer_gone(1000)

    def connection_lost(self, connection: Connection, *, clean: bool) -> None:
        """The client's side of `connection` is gone (`clean`: with a 1000 close)."""
        if connection is not self._conn:
            return  # replaced, or the session ended: no longer this session's to lose
        self._conn = None
        self._carry_out_link(self.link.lost(clean=clean))

    def delivered(self, connection: Connection, seq: int) -> None:
        if connection is self._conn:
            self.link.delivered(seq)

    def take_over(
        self, connection: Connection, request: ce.SessionResume, identity: str
    ) -> ResumeFailed | None:
        """A resume of this session from `connection` (its first event): judged by the link;
        when honoured, `connection` carries this session from here on."""
        verdict = self.link.resume(request.resume_token, identity, request.last_server_event_seq)
        if isinstance(verdict, ResumeFailed):
            return verdict
        old = self._conn
        for effect in verdict.effects:
            if isinstance(effect, ReplaceConnection) and old is not None:
                replaced = self._encode(
                    self._connection_error(
                        "session_replaced",
                        "Another connection resumed this session; this one is closed.",
                        None,
                    )
                )
                old.close(
                    SessionEnd(1000, "session replaced by a resume", "session_replaced"),
                    discard=True,
                    last=(0, replaced),
                )
            elif isinstance(effect, AttachConnection):
                connection.actor = self
                self._conn = connection
                resumed = se.SessionResumed(
                    session_id=self.session_id,
                    resume_token=verdict.token,
                    replayed_from_seq=verdict.replayed_from_seq,
                )
                connection.outbox.put_replay(
                    [(0, self._encode(resumed)), *((e.seq, e.text) for e in verdict.replay)]
                )
            else:
                self._carry_out_link([effect])
        return None

    def discard(self) -> None:
        """A provisional session whose connection resumed another: gone without a word."""
        self._conn = None
        self.link.finished()
        self._serving.cancel()

    async def say_resume_failed(
        self, connection: Connection, failed: ResumeFailed, event_id: str | None
    ) -> None:
        """`session_resume_failed` on `connection`, outside the sequence; it goes on as is."""
        text = self._encode(
            self._connection_error("session_resume_failed", failed.message, event_id)
        )
        await connection.outbox.put(text, self.config.slow_client_timeout_s)

    def shut_down(self) -> None:
        """The server is draining: end this session (1001) once what it has queued is done."""
        self._shutdown.set()

    # The actor ------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            await self._run()
        except Exception:
            # A bug, not the client's doing: the client is told with 1011.
            self.end = SessionEnd(1011, "internal error; the session was closed", "internal_error")
            raise
        finally:
            self.link.finished()
            if self._conn is not None:
                self._conn.close(self.end)

    async def _run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._vad.run)
            nursery.start_soon(self._lifetime)
            with self._serving:
                try:
                    await self._serve()
                except _NotReading:
                    assert self._conn is not None
                    outbox = self._conn.outbox
                    self.end = SessionEnd(
                        1008,
                        f"client is not reading: {outbox.messages} events queued "
                        f"({outbox.bytes / 2**20:.1f} MiB)",
                        "client_not_reading",
                        flush=False,
                    )
            if self.end is not None:
                self.services.metrics.session_ends.labels(self.end.cause).inc()
            # Leaving cancels every response actor (their streams are cancelled on the way
            # out), the timers and the VAD feeder.
            for actor in list(self._responses.values()):
                actor.cancel()
            nursery.cancel_scope.cancel()

    async def _serve(self) -> None:
        await self._carry_out(self.core.open(self._timers.now_ms()))
        async for mail in self._mail_recv:
            step = self.core.handle(mail.event, self._timers.now_ms())
            if isinstance(mail, _Input) and isinstance(mail.event, SpeechProbabilities):
                self._metrics.vad_step(step, mail.at)
            await self._carry_out(step, credit=isinstance(mail, _Client) and mail.credit)
            if self.end is not None:
                return

    async def _lifetime(self) -> None:
        """Mails the session's end at `max_session_s`, or when the server drains."""
        with trio.move_on_after(self.config.max_session_s):
            await self._shutdown.wait()
        reason: CloseReason = (
            "server_shutting_down" if self._shutdown.is_set() else "session_expired"
        )
        await self._post(CloseRequested(reason, self.config.max_session_s))

    async def _post(self, event: CoreInput) -> None:
        await self._mail_send.send(_Input(event, trio.current_time()))

    async def _carry_out(self, step: Step, *, credit: bool = False) -> None:
        end: EndSession | None = None
        for action in step.actions:
            if isinstance(action, DetectSpeech):
                # Holds this append's credit until the feeder has the answer.
                self._vad.submit(action, credit=credit)
                credit = False
            elif isinstance(action, StartBackend):
                self._start_response(action)
            elif isinstance(action, CancelBackend):
                actor = self._responses.get(action.response_id)
                if actor is not None:
                    actor.cancel()
            elif isinstance(action, Transcribe):
                assert self._nursery is not None
                self._nursery.start_soon(self._transcribe, action)
            elif isinstance(action, PredictTurn):
                assert self._nursery is not None
                self._nursery.start_soon(self._predict_turn, action)
            elif isinstance(action, ArmTimer):
                assert self._nursery is not None
                self._timers.arm(self._nursery, action)
            elif isinstance(action, CancelTimer):
                self._timers.cancel(action.kind)
            elif isinstance(action, EndSession):
                end = action
        if credit:
            self._vad.release()  # the append asked nothing of the VAD (or was refused)
        self._metrics.noted(step)
        for event in step.events:
            self._metrics.sent(event)
            await self._send(event)
        if end is not None:
            self.end = SessionEnd(end.code, end.reason, end.cause)

    async def _transcribe(self, job: Transcribe) -> None:
        transcriber = self.services.transcriber
        assert transcriber is not None  # the core asks only when told there is one
        seconds = job.audio16k.shape[0] / 16000
        try:
            # An overlap's partial must be back within the decision's grace, and a pause's
            # words with its end-of-turn verdict: the fast decode.
            fast = job.purpose in ("overlap", "end_of_turn")
            text = await transcriber.transcribe(job.audio16k, partial=fast)
        except Exception as error:  # the model's message reaches the client as-is
            answer = TranscriptReady(job.item_id, None, str(error), seconds, job.purpose, job.token)
        else:
            answer = TranscriptReady(job.item_id, text, None, seconds, job.purpose, job.token)
        await self._post(answer)

    async def _predict_turn(self, job: PredictTurn) -> None:
        turn = self.services.turn
        assert turn is not None  # the core offers semantic_vad only when told there is one
        try:
            probability = await turn.predict(job.audio16k)
        except Exception as error:  # an outage: the core falls back to the silence rule
            answer = TurnPrediction(job.token, None, str(error) or type(error).__name__)
        else:
            answer = TurnPrediction(job.token, probability)
        await self._post(answer)

    async def _send(self, event: se.ServerEvent) -> None:
        """Sequenced, journaled, then into the connection's bounded outbox if there is one;
        `_NotReading` when it stays full for the slow-client time."""
        if isinstance(event, se.SessionCreated):
            event = msgspec.structs.replace(event, resume_token=self.link.token)
        seq = self.link.next_seq()
        text = self._encoder.encode(event, seq).decode()
        self._carry_out_link(self.link.record(seq, text))
        connection = self._conn
        if connection is not None and not await connection.outbox.put(
            text, self.config.slow_client_timeout_s, seq
        ):
            if connection is self._conn:
                raise _NotReading
            # Lost or replaced while this event waited: it is journaled, and replayed on resume.

    def _encode(self, event: se.ServerEvent) -> str:
        """An event about the connection: outside the sequence (no seq), not journaled."""
        return self._encoder.encode(event).decode()

    @staticmethod
    def _connection_error(code: str, message: str, event_id: str | None) -> se.ErrorEvent:
        return error_event(ProtocolError(code=code, message=message, event_id=event_id))

    def _carry_out_link(self, effects: list[Effect]) -> None:
        """The link's effects that need no connection: the grace, and an end without one."""
        for effect in effects:
            if isinstance(effect, ArmGrace):
                self._grace_epoch += 1
                assert self._nursery is not None
                self._nursery.start_soon(self._grace_timer, self._grace_epoch)
            elif isinstance(effect, CancelGrace):
                self._grace_epoch += 1
                if self._grace_scope is not None:
                    self._grace_scope.cancel()
            elif isinstance(effect, EndUnattended):
                if effect.cause != "client_left":
                    log.info("session %s ended unattended: %s", self.session_id, effect.cause)
                    self.end = SessionEnd(1000, effect.cause, effect.cause, flush=False)
                self._serving.cancel()

    async def _grace_timer(self, epoch: int) -> None:
        with trio.CancelScope() as scope:
            self._grace_scope = scope
            await trio.sleep(self.config.disconnect_grace_s)
            if epoch == self._grace_epoch:
                self._carry_out_link(self.link.expired())

    def _start_response(self, action: StartBackend) -> None:
        assert self._nursery is not None
        # The board key must be unique across every orchestrator sharing a Triton.
        request_id = pipeline_request_id(self.config, action.response_id)
        actor = ResponseActor(
            action,
            request_id,
            self.services.responses,
            post=self._post,
            audio_with_transcript=not self.services.transcripts_for_pipeline,
            decoded=self._decoded,
        )
        self._responses[action.response_id] = actor

        async def run() -> None:
            try:
                await actor.run()
            finally:
                self._responses.pop(action.response_id, None)

        self._nursery.start_soon(run)


def pipeline_request_id(config: ServiceConfig, response_id: str) -> str:
    return f"{config.instance_id}:{response_id}"
