"""The session actor: one Trio task per session that owns its `SessionCore` and mailbox.

Plumbing only: it decides nothing. Every happening (a client message, a VAD answer, a backend
chunk, a transcript, a timer, the end of its lifetime) is one mail in a bounded mailbox, fed
to the core in arrival order with the session's clock. The actor carries out the `Step` that
comes back: actions first, then the server events into the bounded outbox, then its
`SessionEnd`. It reads nothing of the core but `input_format` and `prepare_input`, and looks
at server events only to count metrics. The VAD feeder, timers and backend jobs
(backend_jobs.py) run in the session's nursery: closing the session cancels them all. No wait
cycle: the actor never waits on the VAD (vad_feeder.py's credits hold the reader back instead).

An append's DSP with echo cancellation or noise reduction on (`prepare_input`: WebRTC's
processors, about 10 ms of CPU per second of audio) runs on a worker thread of the process's
one `dsp_limiter` pool (services.py), not on the event loop, which 50 such sessions would
otherwise hold for half a second every second (the DSP releases the GIL, so it runs in
parallel with the loop); the core's step for that append follows on the loop. Only the DSP
goes to the thread: the core's Python there would wait for the GIL behind the loop at every
hand-over (core_echo.py rule 12). The actor awaits the DSP, so appends stay in input order and
nothing else reaches the core between the two; a cancel waits for the DSP to end, and the step
follows it with no checkpoint between (the core is never left mid-append).

Every server event gets the session's next `server_event_seq` and is journaled by the
session's link (orchestrator/session/resume/link.py) before it goes to the connection the
session has now, if any: attachment.py carries the link's decisions out (the grace timer, the
takeover's `session_replaced`, the replay).

How a session ends (`end`: the close code and reason, each chosen by
orchestrator/session/ending.py): the client leaves with a 1000 close
(`connection_lost(clean=True)` cancels the actor at once); its connection is lost otherwise
and no resume comes within `disconnect_grace_s`, or its journal overflows meanwhile; the
client stops reading (an event that cannot be queued for `slow_client_timeout_s`: 1008, the
bound that keeps a slow client from growing the server's memory); `max_session_s` passes or
the server drains (`shut_down()`): a `DrainRequested` mailed behind what is queued, so every
event decided before it still goes out, and the core's `SessionEnd` (1000 at expiry; at a
drain 4001, or 1001 without a shared store, once the answer it generates has finished: core
rule 11) after its terminal `response.done` and `error`; a bug (1011). A session drained with
a shared store has its last snapshot written before its connection is closed: the client that
hears 4001 resumes at once elsewhere, and must find it there. A provisional session whose connection
resumed another is `discard`ed.
"""

from __future__ import annotations

from dataclasses import dataclass

import trio

from orchestrator.protocol import client as ce
from orchestrator.protocol.codec import decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.service.config import ServiceConfig
from orchestrator.service.sessions.attachment import Attachment
from orchestrator.service.sessions.backend_jobs import BackendJobs, pipeline_request_id
from orchestrator.service.sessions.checkpoints import Checkpoints
from orchestrator.service.sessions.connection import Connection
from orchestrator.service.sessions.services import AppendBudget, SessionServices
from orchestrator.service.sessions.session_metrics import SessionMetrics
from orchestrator.service.sessions.timers import Timers
from orchestrator.service.sessions.vad_feeder import VadFeeder
from orchestrator.session import ending
from orchestrator.session.actions import (
    ArmTimer,
    CancelBackend,
    CancelTimer,
    Checkpoint,
    DetectSpeech,
    PredictTurn,
    SessionEnd,
    StartBackend,
    Transcribe,
)
from orchestrator.session.core import CoreConfig, CoreInput, SessionCore, Step
from orchestrator.session.inputs import CloseRequested, DrainRequested, SpeechProbabilities
from orchestrator.session.resume import link_events
from orchestrator.session.resume import snapshot as snap
from orchestrator.session.resume.link import Resumed, ResumeFailed, SessionLink
from orchestrator.session.resume.snapshot import SessionSnapshot

__all__ = ["SessionActor", "SessionEnd", "TakenOver", "pipeline_request_id"]

# The ends of a drain (ending.py rule 2): the session's state is kept for another worker.
_DRAINED = ("server_restarting", "server_shutting_down")


@dataclass(frozen=True)
class TakenOver:
    """A session this process takes over from another's snapshot (host.py): the snapshot,
    the link judged by it (link.py rule 6), what its client is told, and the lease's token."""

    snapshot: SessionSnapshot
    link: SessionLink
    resumed: Resumed
    fence: int


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


class SessionActor:
    def __init__(
        self,
        session_id: str,
        config: ServiceConfig,
        services: SessionServices,
        connection: Connection,
        *,
        append_budget: AppendBudget | None = None,
        identity: str = "anonymous",
        taken: TakenOver | None = None,
    ) -> None:
        self.session_id = session_id
        self._append_budget = append_budget
        self.config = config
        self.services = services
        core_config = CoreConfig(
            model=config.model,
            transcriber=services.transcriber is not None,
            transcripts_for_pipeline=services.transcripts_for_pipeline,
            transcript_wait_ms=int(services.transcript_wait_s * 1000),
            turn_model=services.turn is not None,
            processors=services.processors,
        )
        self._taken = taken
        events_named = 0
        if taken is None:
            self.core = SessionCore(session_id, core_config)
            link = SessionLink(session_id, identity, config.resume_journal_bytes)
        else:
            state = snap.core_state(taken.snapshot)
            self.core = SessionCore.restore(session_id, state, core_config)
            link = taken.link
            events_named = snap.events_named(taken.snapshot, taken.resumed.replayed_from_seq - 1)
        self._mail_send, self._mail_recv = trio.open_memory_channel[_Mail](config.session_mailbox)
        self._attachment = Attachment(
            self,
            link,
            connection,
            grace_s=config.disconnect_grace_s,
            slow_client_timeout_s=config.slow_client_timeout_s,
            on_end=self._ended_unattended,
            events_named=events_named,
        )
        self._checkpoints: Checkpoints | None = None
        if services.store is not None and services.snapshots is not None:
            self._checkpoints = Checkpoints(
                session_id,
                services.store,
                services.snapshots,
                owner=config.instance_id,
                ttl_s=config.snapshot_ttl_s,
                max_bytes=config.snapshot_max_bytes,
                max_image_bytes=config.snapshot_image_bytes,
                max_journal_bytes=config.snapshot_journal_bytes,
                state=lambda: (self.core, self.link, self._attachment.events_named),
                on_lost=self.taken_elsewhere,
                version=taken.snapshot.version if taken is not None else 0,
                fence=taken.fence if taken is not None else None,
            )
        self._vad = VadFeeder(services.vad, config.vad_backlog_chunks, self._post)
        self._timers = Timers(self._post)
        self._jobs = BackendJobs(config, services, self._post)
        self._metrics = SessionMetrics(services.metrics)
        self._nursery: trio.Nursery | None = None
        # Cancelled when the session ends without its client (a 1000 close, the grace, an
        # overflow, a discard): the actor stops wherever it is.
        self._serving = trio.CancelScope()
        self._shutdown = trio.Event()
        self.end: SessionEnd | None = None

    # The I/O layer's side -------------------------------------------------------------
    @property
    def link(self) -> SessionLink:
        return self._attachment.link

    @property
    def input_backlog(self) -> int:
        """Appends waiting for turn detection (bounded by `vad_backlog_chunks`)."""
        return self._vad.backlog

    @property
    def connection(self) -> Connection | None:
        """The connection carrying the session now; None while detached (or ended)."""
        return self._attachment.connection

    def decode(self, data: str | bytes) -> ce.ClientEvent | ce.LinkEvent | ProtocolError:
        """One WebSocket message from the client, parsed here, once, at the edge."""
        # The reader runs while an append's step may be on a DSP thread (`_step`): safe, as
        # `input_format` changes only at a session.update, whose step never leaves the loop.
        return decode_client_event(
            data, max_bytes=self.config.max_message_bytes, input_audio_format=self.core.input_format
        )

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

    def connection_lost(self, connection: Connection, *, clean: bool) -> None:
        """The client's side of `connection` is gone (`clean`: with a 1000 close)."""
        self._attachment.lost(connection, clean=clean)

    def delivered(self, connection: Connection, seq: int) -> None:
        self._attachment.delivered(connection, seq)

    def take_over(
        self, connection: Connection, request: ce.SessionResume, identity: str
    ) -> ResumeFailed | None:
        """A resume of this session from `connection` (its first event): judged by the link;
        when honoured, `connection` carries this session from here on."""
        failed = self._attachment.take_over(connection, request, identity)
        if failed is None and self._checkpoints is not None:
            self._checkpoints.checkpoint()  # a new token: the snapshot keeps its digest
        return failed

    def discard(self) -> None:
        """A provisional session whose connection resumed another: gone without a word."""
        self._attachment.detach()
        self._serving.cancel()

    async def say_resume_failed(
        self, connection: Connection, failed: ResumeFailed, event_id: str | None
    ) -> None:
        """`session_resume_failed` on `connection`, outside the sequence; it goes on as is."""
        await self._attachment.say_resume_failed(connection, failed, event_id)

    def taken_elsewhere(self) -> None:
        """Another worker holds this session's lease now (its snapshot writes are fenced): it
        ends here, its connection closed as one replaced by a resume."""
        if self.end is None:
            self.end = ending.replaced()
        self._serving.cancel()

    def shut_down(self) -> None:
        """The server is draining: end this session (1001) once what it has queued is done."""
        self._shutdown.set()

    # The actor ------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            await self._run()
        except Exception:
            # A bug, not the client's doing: the client is told with 1011.
            self.end = ending.internal_error()
            raise
        finally:
            # checkpoints.py rule 4: a drained session is kept for another worker, and its
            # last snapshot is in the store before its client is told to resume elsewhere.
            drained = self.end is not None and self.end.cause in _DRAINED
            if self._checkpoints is not None and drained:
                with trio.CancelScope(shield=True):
                    await self._checkpoints.end(keep=True)
            self._attachment.finish(self.end)
            if self._checkpoints is not None and not drained:
                with trio.CancelScope(shield=True):
                    await self._checkpoints.end(keep=False)

    async def _run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = self._attachment.nursery = nursery
            nursery.start_soon(self._vad.run)
            nursery.start_soon(self._lifetime)
            if self._checkpoints is not None:
                nursery.start_soon(self._checkpoints.run)
            with self._serving:
                await self._serve()
            if self.end is not None:
                self.services.metrics.session_ends.labels(self.end.cause).inc()
            # Leaving cancels every response actor (their streams are cancelled on the way
            # out), the timers and the VAD feeder.
            self._jobs.cancel_all()
            nursery.cancel_scope.cancel()

    async def _serve(self) -> None:
        if self._taken is None:
            opened = self.core.open(self._timers.now_ms())
            await self._carry_out(link_events.opened(opened, self.link.token))
        else:
            # Taken over (link.py rule 6): resumed and replayed, then the responses the lost
            # worker was generating end (core rule 10).
            self._attachment.attach_taken_over(self._taken.resumed)
            lost = self.core.end_lost(self._taken.snapshot.live, self._timers.now_ms())
            await self._carry_out(lost)
            if self._checkpoints is not None:
                self._checkpoints.checkpoint()  # the new token's digest, the new lease
        async for mail in self._mail_recv:
            step = await self._step(mail)
            if isinstance(mail, _Input) and isinstance(mail.event, SpeechProbabilities):
                self._metrics.vad_step(step, mail.at)
            await self._carry_out(step, credit=isinstance(mail, _Client) and mail.credit)
            if self.end is not None:
                return

    async def _step(self, mail: _Mail) -> Step:
        """The core's step for `mail`; an append's DSP first, on a worker thread (module
        docstring)."""
        now_ms = self._timers.now_ms()
        dsp = self.core.prepare_input(mail.event) if isinstance(mail, _Client) else None
        if dsp is not None:
            # Not abandoned on cancel: the thread ends before the step does, and the step
            # follows with no checkpoint between (the core is never left mid-append).
            await trio.to_thread.run_sync(dsp.run, limiter=self.services.dsp_limiter)
        return self.core.handle(mail.event, now_ms)

    async def _lifetime(self) -> None:
        """Mails the session's end at `max_session_s`, or the drain when the server drains."""
        with trio.move_on_after(self.config.max_session_s):
            await self._shutdown.wait()
        if self._shutdown.is_set():
            answer_ms = round(self.config.drain_answer_bound_s * 1000)
            kept = self._checkpoints is not None and self.config.store_shared
            await self._post(DrainRequested(answer_ms, kept))
        else:
            await self._post(CloseRequested("session_expired", self.config.max_session_s))

    async def _post(self, event: CoreInput) -> None:
        await self._mail_send.send(_Input(event, trio.current_time()))

    def _ended_unattended(self, end: SessionEnd | None) -> None:
        """The link ended the session with no connection (None: the client left with 1000)."""
        if end is not None:
            self.end = end
        self._serving.cancel()

    async def _carry_out(self, step: Step, *, credit: bool = False) -> None:
        nursery = self._nursery
        assert nursery is not None
        end: SessionEnd | None = None
        for action in step.actions:
            if isinstance(action, DetectSpeech):
                # Holds this append's credit until the feeder has the answer.
                self._vad.submit(action, credit=credit)
                credit = False
            elif isinstance(action, StartBackend):
                self._jobs.start_response(nursery, action)
            elif isinstance(action, CancelBackend):
                self._jobs.cancel_response(action.response_id)
            elif isinstance(action, Transcribe):
                nursery.start_soon(self._jobs.transcribe, action)
            elif isinstance(action, PredictTurn):
                nursery.start_soon(self._jobs.predict_turn, action)
            elif isinstance(action, ArmTimer):
                self._timers.arm(nursery, action)
            elif isinstance(action, CancelTimer):
                self._timers.cancel(action.kind)
            elif isinstance(action, SessionEnd):
                end = action
        if credit:
            self._vad.release()  # the append asked nothing of the VAD (or was refused)
        self._metrics.noted(step)
        for event in step.events:
            self._metrics.sent(event)
            if not await self._attachment.send(event):
                # The client stopped reading: what is queued will never be taken.
                connection = self._attachment.connection
                assert connection is not None
                outbox = connection.outbox
                self.end = ending.not_reading(outbox.messages, outbox.bytes)
                self._serving.cancel()
                return
        checkpoint = any(isinstance(action, Checkpoint) for action in step.actions)
        if checkpoint and self._checkpoints is not None:
            self._checkpoints.checkpoint()  # after the events: its journal holds them
        if end is not None:
            self.end = end
