"""The session actor: one Trio task per session that owns its `SessionCore` and mailbox.

Everything that happens to a session (a client message, a VAD decision, a chunk from a
response's Triton stream, a transcript) arrives as one typed message in a bounded mailbox and
is fed to the core in arrival order; the core's charts decide and the actor carries out what
they return: server events go to the bounded outbox, `StartBackend` starts a response actor,
`CancelBackend` cancels one. Structured concurrency: the VAD feeder and every response actor
run in the session's nursery, so closing the session cancels its responses, their Triton
streams and its timers, and nothing outlives it.

How a session ends (`SessionActor.end` tells the I/O layer the close code and reason):
- The client leaves: `client_gone()` cancels the actor at once; nobody is left to tell.
- The client stops reading: an event that cannot be queued for `slow_client_timeout_s` (the
  outbox is bounded in messages) ends the session with 1008 "client is not reading"; the
  bound is what keeps a slow client from growing the server's memory.
- `max_session_s` passes, or the server drains (`shut_down()`): a closing mail is queued
  behind what the session already has, so every event decided before it still goes out; the
  generating response is cancelled through the core (its terminal `response.done`), an `error`
  event says why (`session_expired`, `server_shutting_down`), then 1000 or 1001.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import numpy as np
import numpy.typing as npt
import trio

from orchestrator import conversation as conv
from orchestrator.audio import InputAudio, OutputAudio, VadFrames, decode_input
from orchestrator.core import CoreConfig, Output, SessionCore
from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.codec import ServerEventEncoder, decode_client_event
from orchestrator.protocol.errors import ProtocolError
from orchestrator.service.config import ServiceConfig
from orchestrator.service.metrics import Metrics
from orchestrator.service.response_actor import ResponseActor, ResponseServices
from orchestrator.signals import BackendEvent, CancelBackend, StartBackend, VadEvent
from orchestrator.turn_detection import TurnDetector
from orchestrator.vad_batcher import VadUnavailable

Audio = npt.NDArray[np.float32]
# Charged with each append's decoded audio bytes; False: over the key's rate, drop the append.
AppendBudget = Callable[[int], bool]


class Transcriber(Protocol):
    async def transcribe(self, audio16k: Audio) -> str: ...


class VadService(Protocol):
    """Speech probability of each 512-sample 16 kHz chunk, with per-session state in a stream
    (the batched Triton `VadBatcher`; benchmarks also plug in one silero per session)."""

    def open_stream(self) -> Any: ...

    async def probability(self, stream: Any, chunk: npt.ArrayLike) -> float: ...

    # K consecutive chunks in order, in one go: one round trip per append, not per chunk.
    async def probabilities(self, stream: Any, chunks: Sequence[npt.ArrayLike]) -> list[float]: ...


@dataclass(frozen=True)
class SessionServices:
    metrics: Metrics
    vad: VadService
    responses: ResponseServices
    transcriber: Transcriber | None
    # The cascade hears through ASR: give it the orchestrator's transcripts, not audio again.
    transcripts_for_pipeline: bool = False
    transcript_wait_s: float = 30.0


@dataclass(frozen=True)
class _Client:
    event: ce.ClientEvent | ProtocolError


@dataclass(frozen=True)
class _Vad:
    event: VadEvent
    # trio.current_time() when the detector decided; barge-in latency is measured from here.
    decided_at: float


@dataclass(frozen=True)
class _Backend:
    event: BackendEvent


@dataclass(frozen=True)
class _Transcript:
    item_id: str
    transcript: str | None
    error: str | None
    seconds: float


@dataclass(frozen=True)
class _IdleTimeout:
    # Which arming fired: a newer arming or a disarm makes an older timer's mail stale.
    arming: int


@dataclass(frozen=True)
class _VadDown:
    reason: str


@dataclass(frozen=True)
class SessionEnd:
    """Why the server ended a session: the WebSocket close code and reason to send."""

    code: int
    reason: str
    # The metrics label.
    cause: str
    # False when the client stopped reading: what is still queued would never be taken, so
    # the connection is cut instead of flushed.
    flush: bool = True


@dataclass(frozen=True)
class _Close:
    """Queued behind the session's other mail: the session ends after what came before."""

    end: SessionEnd
    error_type: str
    error_code: str
    message: str


_Mail = _Client | _Vad | _VadDown | _IdleTimeout | _Backend | _Transcript | _Close


class _NotReading(Exception):
    """The outbox stayed full for `slow_client_timeout_s`."""


class _Outbox:
    """Encoded server events on their way to the socket, bounded in messages and in bytes
    (one message always fits): all that a client that stops reading can hold of the server's
    memory. Bytes count too because messages differ by orders of magnitude: a retrieve of a
    large item answers with the whole item."""

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self._send, self._recv = trio.open_memory_channel[str](max_messages)
        self._max_bytes = max_bytes
        self.bytes = 0
        # Set (and replaced) each time the reader takes a message.
        self._taken = trio.Event()

    @property
    def messages(self) -> int:
        return self._send.statistics().current_buffer_used

    def _fits(self, size: int) -> bool:
        return self.bytes == 0 or self.bytes + size <= self._max_bytes

    async def put(self, text: str, timeout_s: float) -> bool:
        """Queues `text`; False if there was no room for it within `timeout_s`."""
        size = len(text)
        if self._fits(size):
            try:
                # The common case, without a cancel scope per event.
                self._send.send_nowait(text)
            except trio.WouldBlock:
                pass
            else:
                self.bytes += size
                return True
        with trio.move_on_after(timeout_s):
            while not self._fits(size):
                await self._taken.wait()
            # Counted before the send: the reader may take it before this task runs again.
            self.bytes += size
            try:
                await self._send.send(text)
            except BaseException:
                self.bytes -= size  # not sent (trio's guarantee on a cancelled send)
                raise
            return True
        return False

    def close(self) -> None:
        self._send.close()

    def __aiter__(self) -> _Outbox:
        return self

    async def __anext__(self) -> str:
        try:
            text = await self._recv.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None
        self.bytes -= len(text)
        self._taken.set()
        self._taken = trio.Event()
        return text


class SessionActor:
    def __init__(
        self,
        session_id: str,
        config: ServiceConfig,
        services: SessionServices,
        *,
        append_budget: AppendBudget | None = None,
    ) -> None:
        self.session_id = session_id
        self._append_budget = append_budget
        self.config = config
        self.services = services
        self.core = SessionCore(session_id, CoreConfig(model=config.model))
        self._mail_send, self._mail_recv = trio.open_memory_channel[_Mail](config.session_mailbox)
        self._outbox = _Outbox(config.send_queue, config.send_queue_bytes)
        self._vad_send, self._vad_recv = trio.open_memory_channel[Audio](config.vad_backlog_chunks)
        self._encoder = ServerEventEncoder()
        self._input_audio: InputAudio | None = None
        self._responses: dict[str, ResponseActor] = {}
        self._first_audio_pending: dict[str, float] = {}
        self._out_audio: dict[str, OutputAudio] = {}
        self._idle_arming = 0
        self._idle_scope: trio.CancelScope | None = None
        # Committed turns being (or already) transcribed, by item id: set when done.
        self._transcribed: dict[str, trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        # Cancelled by client_gone(): the actor stops wherever it is, even blocked on a full
        # outbox that nobody drains any more.
        self._serving = trio.CancelScope()
        self._shutdown = trio.Event()
        self.end: SessionEnd | None = None

    # The I/O layer's side -------------------------------------------------------------
    @property
    def input_backlog(self) -> int:
        """Input chunks waiting for turn detection (bounded by `vad_backlog_chunks`)."""
        return self._vad_send.statistics().current_buffer_used

    @property
    def outgoing(self) -> AsyncIterator[str]:
        return self._outbox

    async def receive(self, data: str | bytes) -> None:
        """One WebSocket message from the client (parsed here, once, at the edge)."""
        fmt = self.core.settings.input_format
        event = decode_client_event(
            data, max_bytes=self.config.max_message_bytes, input_audio_format=fmt
        )
        budget = self._append_budget
        if isinstance(event, ce.InputAudioBufferAppend) and budget and not budget(len(event.audio)):
            # Told, not closed (contract rule 7): the session goes on; only this audio is lost.
            event = ProtocolError(
                code="rate_limit_exceeded",
                message="Input audio is arriving faster than this API key's limit; this append "
                "was dropped. Send audio at most a little faster than real time.",
                param="audio",
                event_id=event.event_id,
            )
        await self._mail_send.send(_Client(event))

    async def client_gone(self) -> None:
        self._serving.cancel()

    def shut_down(self) -> None:
        """The server is draining: end this session (1001) once what it has queued is done."""
        self._shutdown.set()

    # The actor ------------------------------------------------------------------------
    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._vad_feeder)
                nursery.start_soon(self._lifetime)
                with self._serving:
                    try:
                        await self._serve()
                    except _NotReading:
                        outbox = self._outbox
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
                # out) and the VAD feeder.
                for actor in list(self._responses.values()):
                    actor.cancel()
                nursery.cancel_scope.cancel()
        finally:
            self._outbox.close()

    async def _serve(self) -> None:
        await self._emit(self.core.open())
        async for mail in self._mail_recv:
            if isinstance(mail, _Close):
                await self._close(mail)
                return
            await self._handle(mail)

    async def _lifetime(self) -> None:
        """Queues the session's end at `max_session_s`, or when the server drains."""
        with trio.move_on_after(self.config.max_session_s):
            await self._shutdown.wait()
        if self._shutdown.is_set():
            mail = _Close(
                SessionEnd(1001, "server is shutting down", "server_shutting_down"),
                "server_error",
                "server_shutting_down",
                "The server is shutting down; this session is closing. Reconnect to continue "
                "(conversation state is not carried over).",
            )
        else:
            limit = _duration(self.config.max_session_s)
            mail = _Close(
                SessionEnd(1000, f"session expired after {limit}", "session_expired"),
                "invalid_request_error",
                "session_expired",
                f"Your session hit the maximum duration of {limit}.",
            )
        await self._mail_send.send(mail)

    async def _close(self, mail: _Close) -> None:
        """The generating response gets its terminal (cancelled) and the client the reason."""
        for rid in [r for r, live in self.core.live.items() if live.chart.is_generating]:
            await self._emit(self.core.client(ce.ResponseCancel(response_id=rid)))
        error = se.ErrorInfo(type=mail.error_type, code=mail.error_code, message=mail.message)
        await self._emit([se.ErrorEvent(error=error)])
        self.end = mail.end

    async def _handle(self, mail: _Mail) -> None:
        if isinstance(mail, _Client):
            await self._client(mail.event)
        elif isinstance(mail, _Vad):
            outputs = self.core.vad(mail.event)
            if any(isinstance(o, se.OutputAudioBufferCleared) for o in outputs):
                latency = trio.current_time() - mail.decided_at
                self.services.metrics.observe("barge_in_latency", latency)
                self.services.metrics.interruptions.inc()
            await self._emit(outputs)
        elif isinstance(mail, _Backend):
            await self._emit(self.core.backend(mail.event))
        elif isinstance(mail, _Transcript):
            await self._transcript(mail)
        elif isinstance(mail, _IdleTimeout):
            if mail.arming == self._idle_arming:
                await self._idle_timeout()
        elif isinstance(mail, _VadDown):
            await self._emit(
                [
                    self.core.env.error(
                        "vad_unavailable",
                        f"Turn detection is paused: {mail.reason}. Audio is still buffered; "
                        "commit manually or wait for it to recover.",
                        None,
                        None,
                    )
                ]
            )

    async def _client(self, event: ce.ClientEvent | ProtocolError) -> None:
        if isinstance(event, ProtocolError):
            await self._emit(self.core.reject(event))
            return
        outputs = self.core.client(event)
        await self._emit(outputs)
        if isinstance(event, ce.InputAudioBufferAppend) and not _has_error(outputs):
            await self._feed_vad(event.audio)

    async def _feed_vad(self, raw: bytes) -> None:
        settings = self.core.settings
        if settings.turn_detection is None:
            return
        if self._input_audio is None or self._input_audio.format != settings.input_format:
            # A new format needs a new decoder; the VAD clock (VadFrames) runs on regardless.
            self._input_audio = InputAudio(settings.input_format)
        samples = self._input_audio.push(raw)
        if samples.size:
            # Bounded: when the VAD falls behind, the session stops reading the client.
            await self._vad_send.send(samples)

    async def _vad_feeder(self) -> None:
        """Cuts 16 kHz audio into 512-sample chunks, asks the batched VAD, runs turn detection.

        Chunk end times come from the samples themselves (VadFrames), so they sit on the
        input clock exactly, whatever the resampler holds back.
        """
        stream = self.services.vad.open_stream()
        frames = VadFrames()
        detector: TurnDetector | None = None
        vad_down = False
        async for samples in self._vad_recv:
            vad = self.core.settings.turn_detection
            # Always pushed, even with VAD off: the chunk clock runs on.
            chunks = frames.push(samples)
            if vad is None or not chunks:
                continue
            if detector is None:
                detector = TurnDetector(vad)
            elif detector.config != vad:
                detector.update(vad)
            try:
                # An append's chunks are consecutive: one VAD row, one round trip for all.
                probabilities = await self.services.vad.probabilities(
                    stream, [chunk for chunk, _ in chunks]
                )
            except VadUnavailable as error:
                # Turn detection pauses (the chunks count as neither speech nor silence);
                # the client hears of it once per outage, and the session goes on.
                if not vad_down:
                    vad_down = True
                    await self._mail_send.send(_VadDown(str(error)))
                continue
            vad_down = False
            for probability, (_, end_ms) in zip(probabilities, chunks, strict=True):
                for event in detector.feed(probability, end_ms):
                    await self._mail_send.send(_Vad(event, trio.current_time()))

    async def _emit(self, outputs: Sequence[Output]) -> None:
        for output in outputs:
            if isinstance(output, StartBackend):
                self._start_response(output)
            elif isinstance(output, CancelBackend):
                actor = self._responses.get(output.response_id)
                if actor is not None:
                    actor.cancel()
            else:
                self._observe(output)
                output = self._encode_output_audio(output)
                await self._queue_out(self._encoder.encode(output).decode())
                if isinstance(output, se.InputAudioBufferCommitted):
                    self._maybe_transcribe(output.item_id)

    async def _queue_out(self, text: str) -> None:
        """Into the bounded outbox; `_NotReading` when it stays full for the slow-client time."""
        if not await self._outbox.put(text, self.config.slow_client_timeout_s):
            raise _NotReading

    def _observe(self, event: se.ServerEvent) -> None:
        metrics = self.services.metrics
        if isinstance(event, se.ResponseOutputAudioDelta):
            began = self._first_audio_pending.pop(event.response_id, None)
            if began is not None:
                metrics.observe("time_to_first_audio", trio.current_time() - began)
        elif isinstance(event, se.ResponseDone):
            metrics.responses.labels(event.response.status).inc()
            self._first_audio_pending.pop(event.response.id, None)
            if event.response.status == "completed":
                # The core's ledger already counts the reply's audio: when it ends playing.
                rid = event.response.id
                ledger = self.core.ledger
                self._arm_idle(ledger.generated_ms(rid) if rid in ledger else 0)
        elif isinstance(event, se.InputAudioBufferSpeechStarted | se.ResponseCreated):
            self._disarm_idle()

    def _encode_output_audio(self, event: se.ServerEvent) -> se.ServerEvent:
        """pcm16 24 kHz from the core, in the session's output format on the wire.

        The core and its playback ledger count pcm16 milliseconds; only the bytes the client
        gets change, through one streaming encoder per response (G.711 at 8 kHz).
        """
        fmt = self.core.settings.output_format
        if isinstance(event, se.ResponseDone):
            self._out_audio.pop(event.response.id, None)
            return event
        if not isinstance(event, se.ResponseOutputAudioDelta) or fmt.type == "audio/pcm":
            return event
        encoder = self._out_audio.get(event.response_id)
        if encoder is None or encoder.format != fmt:
            encoder = self._out_audio[event.response_id] = OutputAudio(fmt)
        return msgspec.structs.replace(event, delta=encoder.push_pcm16(event.delta))

    def _arm_idle(self, audio_ms: int) -> None:
        """OpenAI's idle_timeout_ms: counted from when the reply's audio has finished playing
        (done now, plus its duration), ended early by any speech or new response."""
        vad = self.core.settings.turn_detection
        self._disarm_idle()
        if vad is None or vad.idle_timeout_ms is None or self._nursery is None:
            return
        arming = self._idle_arming
        scope = self._idle_scope = trio.CancelScope()
        delay = (audio_ms + vad.idle_timeout_ms) / 1000.0

        async def timer() -> None:
            with scope:
                await trio.sleep(delay)
                await self._mail_send.send(_IdleTimeout(arming))

        self._nursery.start_soon(timer)

    def _disarm_idle(self) -> None:
        self._idle_arming += 1
        if self._idle_scope is not None:
            self._idle_scope.cancel()
            self._idle_scope = None

    async def _idle_timeout(self) -> None:
        self._disarm_idle()
        now_ms = self._input_audio.duration_ms if self._input_audio is not None else 0
        item_id = f"item_{self.session_id}_idle{self._idle_arming}"
        await self._emit(
            [
                se.InputAudioBufferTimeoutTriggered(
                    audio_start_ms=now_ms, audio_end_ms=now_ms, item_id=item_id
                )
            ]
        )
        # As OpenAI does: commit what the buffer holds (if anything), then answer.
        if self.core.buffered_ms > 0:
            await self._emit(self.core.client(ce.InputAudioBufferCommit(create_response=False)))
        await self._emit(self.core.client(ce.ResponseCreate()))

    def _start_response(self, action: StartBackend) -> None:
        assert self._nursery is not None
        # The board key must be unique across every orchestrator sharing a Triton.
        request_id = pipeline_request_id(self.config, action.response_id)
        fmt = self.core.settings.input_format
        actor = ResponseActor(
            action,
            request_id,
            self.services.responses,
            decode_audio=lambda raw: decode_input(raw, fmt),
            post=self._post_backend,
            transcripts=self._transcripts if self.services.transcripts_for_pipeline else None,
        )
        self._responses[action.response_id] = actor
        self._first_audio_pending[action.response_id] = trio.current_time()

        async def run() -> None:
            try:
                await actor.run()
            finally:
                self._responses.pop(action.response_id, None)

        self._nursery.start_soon(run)

    async def _post_backend(self, event: BackendEvent) -> None:
        await self._mail_send.send(_Backend(event))

    def _maybe_transcribe(self, item_id: str) -> None:
        """Transcribe a committed turn once: for the client when the session asks for input
        transcription, and for the cascade, which hears through ASR (later turns reuse it)."""
        transcriber = self.services.transcriber
        settings = self.core.settings
        wanted = settings.transcription is not None or self.services.transcripts_for_pipeline
        if transcriber is None or not wanted or self._nursery is None:
            return
        if item_id not in self.core.conversation or item_id in self._transcribed:
            return
        item = self.core.conversation.get(item_id)
        raw = b"".join(p.audio for p in item.content if isinstance(p, conv.InputAudio))
        audio = decode_input(raw, settings.input_format)
        done = trio.Event()
        self._transcribed[item_id] = done
        self._forget_transcripts()

        async def run() -> None:
            try:
                text = await transcriber.transcribe(audio)
            except Exception as error:  # the model's message reaches the client as-is
                mail = _Transcript(item_id, None, str(error), audio.shape[0] / 16000)
            else:
                mail = _Transcript(item_id, text, None, audio.shape[0] / 16000)
            await self._mail_send.send(mail)

        self._nursery.start_soon(run)

    def _forget_transcripts(self) -> None:
        # Bounded: only items still in the conversation keep an entry.
        for item_id in [i for i in self._transcribed if i not in self.core.conversation]:
            self._transcribed.pop(item_id).set()

    async def _transcripts(self, item_ids: list[str]) -> dict[str, str]:
        """Transcripts of these items' audio, waiting (bounded) for those still in progress."""
        with trio.move_on_after(self.services.transcript_wait_s):
            for item_id in item_ids:
                done = self._transcribed.get(item_id)
                if done is not None:
                    await done.wait()
        known: dict[str, str] = {}
        for item_id in item_ids:
            if item_id in self.core.conversation:
                for part in self.core.conversation.get(item_id).content:
                    if isinstance(part, conv.InputAudio) and part.transcript is not None:
                        known[item_id] = part.transcript
        return known

    async def _transcript(self, mail: _Transcript) -> None:
        if mail.transcript is not None:
            self.core.conversation.set_transcript(mail.item_id, mail.transcript)
        done = self._transcribed.get(mail.item_id)
        if done is not None:
            done.set()
        if self.core.settings.transcription is None:
            return
        event: se.ServerEvent
        if mail.transcript is not None:
            event = se.ConversationItemInputAudioTranscriptionCompleted(
                item_id=mail.item_id,
                transcript=mail.transcript,
                usage=se.TranscriptionUsageDuration(seconds=round(mail.seconds, 3)),
            )
        else:
            event = se.ConversationItemInputAudioTranscriptionFailed(
                item_id=mail.item_id,
                error=se.TranscriptionError(
                    type="transcription_error", code="transcription_failed", message=mail.error
                ),
            )
        await self._queue_out(self._encoder.encode(event).decode())


def _duration(seconds: float) -> str:
    """OpenAI's wording for its 60-minute limit; short test limits in seconds."""
    minutes = seconds / 60
    if minutes >= 1 and minutes == int(minutes):
        return f"{int(minutes)} minute" + ("s" if minutes != 1 else "")
    return f"{seconds:g} seconds"


def pipeline_request_id(config: ServiceConfig, response_id: str) -> str:
    return f"{config.instance_id}:{response_id}"


def _has_error(outputs: Sequence[Output]) -> bool:
    return any(isinstance(o, se.ErrorEvent) for o in outputs)
