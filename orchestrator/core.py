"""SessionCore: the sans-IO realtime session (h11 style: typed inputs in, events and actions out).

It owns one session's SessionChart, one ResponseChart per live response, the conversation,
the input buffer, the turn detector, the playback ledger and the response fence. The I/O layer
feeds it typed inputs (client events parsed at the edge, VAD probabilities, backend output,
transcripts, timer expiries, a close request) through `handle`, each with the caller's clock
(`now_ms`), and carries out what comes back: a `Step` of server events to send and actions to
perform (`StartBackend`, `CancelBackend`, `DetectSpeech`, `Transcribe`, `ArmTimer`,
`CancelTimer`, `EndSession`), kept apart. No clock, no socket, no task lives here, so every
interleaving can be driven in memory by a test. The I/O layer reads nothing else of it but
`input_format` (to parse appends at the edge).

Rules (docs/protocol.md) enforced here by routing chart effects (the charts decide; this module
acts):
- Rule 2: backend output passes the fence (only the open response's number) and then the
  response's chart (only while generating).
- Rule 3: one active response at a time (`conversation_already_has_active_response`); a cancel
  with nothing live is the session chart's rejection (`response_not_active`).
- Rule 5/6: the conversation keeps only what was heard; pruning runs at every new user input.
- Rule 7: every client error becomes an `error` event naming the client's `event_id`.
- One routing point keeps the charts in step: a response chart's `ResponseFinished` /
  `ResponseSettled` go to the session chart, and nothing else moves its output region.
- Turn detection: appends are decoded and cut here (`DetectSpeech`); the probabilities come
  back as an input and the `TurnDetector` decides; every commit or clear resets it, so a turn
  in progress never outlives the buffer that held it. A VAD outage is told once per outage.
- The idle timer (`idle_timeout_ms`) is the detector's: armed when a completed reply's audio
  will have finished playing, disarmed by speech or a new response, asked for with `ArmTimer`;
  `timeout_triggered` names the item that the following commit creates.
- Transcription: each committed turn is transcribed once (`Transcribe`) when the session asks
  for input transcripts or the pipeline hears through them (the cascade); there, a response's
  `StartBackend` waits, bounded by `transcript_wait_ms`, for its turns' transcripts.
- Pause mode (docs/protocol.md "Interruption policy"): the `OverlapTracker` measures the
  speech over a paused reply, asks for its partial transcripts (`Transcribe` with purpose
  `overlap` and a token; never shown to the client) and arms its timers; every fact it has is
  handed to the session chart, which decides. The decision's event carries what was measured
  and heard; a resumed overlap's audio is dropped from the buffer without an event.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import Literal

import numpy as np

from orchestrator import conversation as conv
from orchestrator.actions import (
    Action,
    ArmTimer,
    CancelBackend,
    CancelTimer,
    EndSession,
    InferenceRequest,
    StartBackend,
    Transcribe,
)
from orchestrator.audio import OutputAudio, decode_input
from orchestrator.core_types import CoreConfig, CoreErrorCode, CoreInput, Step
from orchestrator.envelope import Envelope, duration_words
from orchestrator.fencing import ResponseFence
from orchestrator.input_buffer import BufferFull
from orchestrator.inputs import (
    BackendAudio,
    BackendDone,
    BackendEvent,
    BackendFailed,
    BackendText,
    CloseRequested,
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    VadDown,
    VadEvent,
    VadSpeechStarted,
    VadSpeechStopped,
)
from orchestrator.overlap import MAX_PARTIAL_MS, OverlapStep, OverlapTracker
from orchestrator.playback import PlaybackItemMismatch, PlaybackItemNotFound, PlaybackLedger
from orchestrator.protocol import client as ce
from orchestrator.protocol import items as wire
from orchestrator.protocol import server as se
from orchestrator.protocol.errors import ProtocolError
from orchestrator.protocol.session_config import AudioFormat, Interruption, SessionConfig
from orchestrator.transcript_wait import TranscriptWait
from orchestrator.user_input import UserInput
from statecharts import effects as fx
from statecharts.response import ResponseChart
from statecharts.session import SessionChart

__all__ = ["CoreConfig", "CoreErrorCode", "CoreInput", "SessionCore", "Step"]

PCM16_24K_BYTES_PER_MS = 48


@dataclass(slots=True)
class _Live:
    """A response the session still tracks: generating, or generated and not yet heard."""

    chart: ResponseChart
    seq: int
    item_id: str
    audio: bool
    request: InferenceRequest
    text_parts: list[str] = field(default_factory=list)
    audio_ms: int = 0
    output_tokens: int = 0
    encoder: OutputAudio | None = None
    # Text came without the audio it accompanies (the pipeline cannot align it): heard only
    # with the whole reply, dropped from a cut (docs/protocol.md rule 5).
    unaligned_text: bool = False


class SessionCore:
    def __init__(self, session_id: str, config: CoreConfig | None = None) -> None:
        self.config = config or CoreConfig()
        self.session_id = session_id
        self.settings = SessionConfig()
        self.chart = SessionChart()
        self.conversation = conv.Conversation(self.config.limits)
        self.ledger = PlaybackLedger(self.config.playback_entries)
        self.fence = ResponseFence()
        self.env = Envelope(session_id)
        self.live: OrderedDict[str, _Live] = OrderedDict()
        self.input = UserInput(self.config.max_input_buffer_bytes, self.settings.turn_detection)
        self._ids = 0
        self._pending_item_id: str | None = None
        self._events: list[se.ServerEvent] = []
        self._actions: list[Action] = []
        self._event_id: str | None = None
        self._now_ms = 0
        self._timer_tokens = 0
        self._wait = TranscriptWait(self.config.transcript_wait_ms)
        self.overlap = OverlapTracker(
            Interruption(), transcribe=self.config.transcriber, grace_ms=self.config.grace_ms
        )

    # The I/O layer's interface --------------------------------------------------------
    @property
    def input_format(self) -> AudioFormat:
        """The format appends are decoded from at the edge."""
        return self.settings.input_format

    def open(self, now_ms: int | None = None) -> Step:
        self._clock(now_ms)
        self._events.append(self.env.session_created(self.settings, self.config.model))
        return self._flush()

    def handle(self, event: CoreInput, now_ms: int | None = None) -> Step:
        """One input, with the caller's clock (ms, monotonic) when it has one."""
        self._clock(now_ms)
        if isinstance(event, ProtocolError):
            return self.reject(event)
        if isinstance(event, SpeechProbabilities):
            self._speech_probabilities(event)
        elif isinstance(event, VadDown):
            self._vad_unavailable(event.reason)
        elif isinstance(event, VadSpeechStarted | VadSpeechStopped):
            return self.vad(event)
        elif isinstance(event, BackendText | BackendAudio | BackendDone | BackendFailed):
            return self.backend(event)
        elif isinstance(event, TranscriptReady):
            self._transcript(event)
        elif isinstance(event, TimerFired):
            self._timer(event)
        elif isinstance(event, CloseRequested):
            self._close(event)
        else:
            return self.client(event)
        return self._flush()

    def client(self, event: ce.ClientEvent) -> Step:
        self._event_id = event.event_id
        try:
            self._client(event)
        finally:
            self._event_id = None
        return self._flush()

    def reject(self, err: ProtocolError) -> Step:
        """A client message that failed to parse: an error event, nothing else changes."""
        self._events.append(self.env.error(err.code, err.message, err.param, err.event_id))
        return self._flush()

    def vad(self, event: VadEvent) -> Step:
        """A turn-detection decision (the detector's own output; tests may feed it directly)."""
        self._vad_event(event)
        return self._flush()

    def backend(self, event: BackendEvent) -> Step:
        live = self.live.get(event.response_id)
        if live is None or live.seq != event.seq or not self.fence.admits(event.seq):
            return Step()  # rule 2: late output of a closed response is dropped here
        rid = event.response_id
        if isinstance(event, BackendAudio | BackendText):
            for effect in live.chart.forward(event):  # the `output` event's fast path
                self._response_effect(live, effect)
        elif isinstance(event, BackendDone):
            live.output_tokens = event.output_tokens
            if not live.audio or live.audio_ms == 0 or live.unaligned_text:
                self.ledger.set_transcript(rid, "".join(live.text_parts))
            heard = self.ledger.finish(rid)
            pending = heard is None and self.ledger.pending_audio(rid)
            self._run_response(rid, "complete", audio_pending=pending)
        elif isinstance(event, BackendFailed):
            self._run_response(rid, "fail", reason=event.reason)
        return self._flush()

    @property
    def buffered_ms(self) -> int:
        return self.input.buffered_ms

    # Client events --------------------------------------------------------------------
    def _client(self, event: ce.ClientEvent) -> None:
        if isinstance(event, ce.SessionUpdate):
            self._update(event)
        elif isinstance(event, ce.InputAudioBufferAppend):
            self._append(event.audio)
        elif isinstance(event, ce.InputAudioBufferCommit):
            self._run_session(
                "commit",
                buffered_ms=self.buffered_ms,
                final=event.final,
                create_response=event.create_response,
            )
        elif isinstance(event, ce.InputAudioBufferClear):
            self.input.clear()
            self._run_session("clear_input")
            self._events.append(self.env.input_cleared())
        elif isinstance(event, ce.ConversationItemCreate):
            self._create_item(event)
        elif isinstance(event, ce.ConversationItemRetrieve):
            if event.item_id not in self.conversation:
                self._item_not_found(event.item_id)
                return
            self._events.append(self.env.item_retrieved(self.conversation.get(event.item_id)))
        elif isinstance(event, ce.ConversationItemDelete):
            if event.item_id not in self.conversation:
                self._item_not_found(event.item_id)
                return
            self.conversation.delete(event.item_id)
            self._events.append(self.env.item_deleted(event.item_id))
        elif isinstance(event, ce.ConversationItemTruncate):
            self._truncate(event.item_id, event.content_index, event.audio_end_ms)
        elif isinstance(event, ce.ResponseCreate):
            self._create_response(event.response)
        elif isinstance(event, ce.ResponseCancel):
            rid = event.response_id
            self._run_session("cancel", response_id=rid, target_live=rid in self.live)
        elif isinstance(event, ce.OutputAudioBufferClear):
            self._run_session("clear", response_id=event.response_id)
        elif isinstance(event, ce.PlaybackAck):
            self._ack(event)
        elif isinstance(event, ce.ConversationContextRetrieve):
            self._events.append(self.env.context(self.conversation.prompt_view()))

    def _update(self, event: ce.SessionUpdate) -> None:
        self.settings = self.settings.apply(event.session)
        vad = self.settings.turn_detection
        policy = vad.policy if vad is not None else Interruption()
        self.chart.configure(
            turn_detection="server_vad" if vad is not None else "manual",
            create_response=vad.create_response if vad is not None else False,
            interrupt_response=vad.interrupt_response if vad is not None else False,
            interruption=policy.mode,
            min_speech_ms=policy.min_speech_ms,
        )
        self.overlap.policy = policy
        self._act(self.input.configure(vad))
        self._events.append(self.env.session_updated(self.settings, self.config.model))

    def _append(self, audio: bytes) -> None:
        try:
            self._act(self.input.append(audio, self.settings.input_format))
        except BufferFull:
            self._error("input_audio_buffer_full", "The input audio buffer is full.")

    # Turn detection and timers --------------------------------------------------------
    def _speech_probabilities(self, answer: SpeechProbabilities) -> None:
        for event in self.input.hear(answer):
            self._vad_event(event)
        if self.overlap.is_open and self.input.speaking:
            self._overlap(self.overlap.voiced(self.input.voiced_to_ms, self._now_ms))

    def _vad_unavailable(self, reason: str) -> None:
        # Turn detection pauses (the chunks count as neither speech nor silence); the client
        # hears of it once per outage, and the session goes on.
        if self.input.vad_down():
            self._error(
                "vad_unavailable",
                f"Turn detection is paused: {reason}. Audio is still buffered; commit manually "
                "or wait for it to recover.",
                event_id=None,
            )

    def _vad_event(self, event: VadEvent) -> None:
        if isinstance(event, VadSpeechStarted):
            self._act(self.input.disarm_idle())
            self._run_session("speech_started", audio_start_ms=event.audio_start_ms)
            if self.chart.is_paused:
                self._overlap(self.overlap.onset(event.audio_start_ms, self.input.voiced_from_ms))
            return
        if self.overlap.is_open:
            self._overlap(self.overlap.voiced(self.input.voiced_to_ms, self._now_ms))
        self._run_session(
            "speech_stopped",
            audio_end_ms=event.audio_end_ms,
            buffered_ms=self.buffered_ms,
            **self._overlap_facts(),
        )
        if self.chart.is_paused:
            step = self.overlap.stopped(self.input.voiced_to_ms, event.audio_end_ms, self._now_ms)
            self._overlap(step)

    def _arm_idle(self, audio_ms: int) -> None:
        """OpenAI's idle_timeout_ms: from when the completed reply's audio will have finished
        playing (now plus its duration), ended early by any speech or new response."""
        self._act(self.input.disarm_idle())
        self._timer_tokens += 1
        self._act(self.input.arm_idle(self._now_ms + audio_ms, self._timer_tokens))

    def _timer(self, fired: TimerFired) -> None:
        if fired.kind == "idle":
            if self.input.idle_fired(fired.token, self._now_ms):
                self._idle_timeout()
        elif fired.kind == "overlap_grace":
            self._overlap(self.overlap.grace_over(fired.token))
        elif fired.kind == "overlap_resume":
            if self.overlap.resume_due(fired.token):
                self._run_session("resume_timer", **self._overlap_facts())
        else:
            # Waited long enough: start with the transcripts known.
            self._release(self._wait.expired(fired.token))

    def _idle_timeout(self) -> None:
        # The id the following commit creates (now, or the next turn's if the buffer is empty).
        item_id = self._pending_item_id or self._new_id("item")
        self._pending_item_id = item_id
        now = self.input.clock_ms
        start = min(self.input.idle_from_input_ms, now)
        self._events.append(
            se.InputAudioBufferTimeoutTriggered(
                audio_start_ms=start, audio_end_ms=now, item_id=item_id
            )
        )
        # As OpenAI does: commit what the buffer holds (if anything), then answer.
        if self.buffered_ms > 0:
            self._run_session("commit", buffered_ms=self.buffered_ms, create_response=False)
        self._create_response(None)

    # Transcripts ----------------------------------------------------------------------
    def _wants_transcript(self) -> bool:
        return self.config.transcriber and (
            self.settings.transcription is not None or self.config.transcripts_for_pipeline
        )

    def _transcribe(self, item: conv.Item) -> None:
        parts = [p for p in item.content if isinstance(p, conv.InputAudio)]
        audio = [decode_input(p.audio, p.format) for p in parts]
        if not audio:
            return  # no audio to hear (the chart commits only a buffer that holds some)
        self._wait.asked(item.id, self.conversation.__contains__)
        self._actions.append(Transcribe(item.id, np.concatenate(audio)))

    def _transcript(self, ready: TranscriptReady) -> None:
        if ready.purpose == "overlap":
            self._overlap(self.overlap.transcribed(ready.token, ready.transcript))
            return
        if ready.transcript is not None:
            self.conversation.set_transcript(ready.item_id, ready.transcript)
        self._release(self._wait.answered(ready.item_id))
        if self.settings.transcription is not None:
            self._events.append(self.env.transcription(ready))

    def _start_backend(self, start: StartBackend) -> None:
        # The cascade hears through ASR: wait for the turn's transcript (it is being made
        # already) rather than have the pipeline transcribe the same audio again.
        token = self._timer_tokens + 1
        if self.config.transcripts_for_pipeline and self._wait.hold(start, token):
            self._timer_tokens = token
            deadline = self._now_ms + self._wait.wait_ms
            self._actions.append(ArmTimer("transcripts", deadline, token))
            return
        self._actions.append(dc_replace(start, transcripts=self._known_transcripts(start)))

    def _release(self, start: StartBackend | None) -> None:
        if start is None:
            return
        self._actions.append(CancelTimer("transcripts"))
        self._actions.append(dc_replace(start, transcripts=self._known_transcripts(start)))

    def _known_transcripts(self, start: StartBackend) -> dict[str, str]:
        known: dict[str, str] = {}
        for item in start.request.items:
            if item.id not in self.conversation:
                continue
            for part in self.conversation.get(item.id).content:
                if isinstance(part, conv.InputAudio) and part.transcript is not None:
                    known[item.id] = part.transcript
        return known

    # Pause mode -----------------------------------------------------------------------
    def _overlap(self, step: OverlapStep) -> None:
        if step.ask is not None:
            audio = self.input.audio_since(self.overlap.audio_from_ms, MAX_PARTIAL_MS)
            item_id = self._pending_item_id or ""
            self._actions.append(Transcribe(item_id, audio, "overlap", step.ask))
        self._actions.extend(step.timers)
        if step.judge:
            self._run_session("overlap_heard", **self._overlap_facts())

    def _overlap_facts(self) -> dict[str, object]:
        facts = self.overlap.facts()
        return {"speech_ms": facts.speech_ms, "heard": facts.heard, "waited": facts.waited}

    def _overlap_decided(self, effect: fx.OverlapDecided) -> None:
        facts = self.overlap.facts()
        self._events.append(
            se.OverlapDecision(
                response_id=effect.response_id,
                decision=effect.decision,
                reason=effect.reason,
                speech_ms=facts.speech_ms,
                transcript=facts.transcript,
            )
        )
        self._actions.extend(self.overlap.close())

    # Session end ----------------------------------------------------------------------
    def _close(self, request: CloseRequested) -> None:
        """The generating response gets its terminal (cancelled) and the client the reason."""
        self._run_session("close")
        self._events.append(self.env.closing(request))
        if request.reason == "server_shutting_down":
            self._actions.append(EndSession(1001, "server is shutting down", request.reason))
        else:
            limit = duration_words(request.max_session_s)
            self._actions.append(EndSession(1000, f"session expired after {limit}", request.reason))

    # Items ----------------------------------------------------------------------------
    def _create_item(self, event: ce.ConversationItemCreate) -> None:
        item_id = event.item.id or self._new_id("item")
        if item_id == conv.ROOT:
            self._error(
                "invalid_value",
                "Item id 'root' is reserved: as previous_item_id it means the start.",
                "item.id",
            )
            return
        if item_id == self._pending_item_id:
            # speech_started (or timeout_triggered) already promised this id to the next turn.
            self._error("item_already_exists", f"Item '{item_id}' already exists.", "item.id")
            return
        fmt = self.settings.input_format
        content = tuple(_content_from_wire(part, fmt) for part in event.item.content)
        item = conv.Item(item_id, event.item.role, content)
        previous = event.previous_item_id
        try:
            self.conversation.add(item, previous)
        except conv.ItemNotFound as err:
            self._item_not_found(err.item_id, param="previous_item_id")
            return
        except conv.DuplicateItemId:
            self._error("item_already_exists", f"Item '{item_id}' already exists.", "item.id")
            return
        self._announce_item(item)
        if item.role == "user":
            self.conversation.prune()

    def _announce_item(self, item: conv.Item) -> None:
        items = self.conversation.items
        index = next(i for i, it in enumerate(items) if it.id == item.id)
        previous = items[index - 1].id if index > 0 else None
        self._events.append(self.env.item_added(item, previous))
        self._events.append(self.env.item_done(item, previous))

    def _truncate(self, item_id: str, content_index: int, audio_end_ms: int) -> None:
        if item_id not in self.conversation:
            self._item_not_found(item_id)
            return
        item = self.conversation.get(item_id)
        rid = item.response_id
        if item.role != "assistant" or rid is None or rid not in self.ledger:
            self._error(
                "invalid_value", "Only assistant audio replies can be truncated.", "item_id"
            )
            return
        generated = self.ledger.generated_ms(rid)
        if audio_end_ms > generated:
            self._error(
                "invalid_value",
                f"audio_end_ms {audio_end_ms} is beyond the item's {generated} ms of audio.",
                "audio_end_ms",
            )
            return
        live = self.live.get(rid)
        if live is not None and live.chart.is_live:
            self._run_response(rid, "truncate", audio_end_ms=audio_end_ms)
        else:
            self.ledger.cut(rid, audio_end_ms)
            self._write_history(rid)
        self._run_session("truncate", response_id=rid)  # ends a pause of it (pause mode)
        self._events.append(self.env.item_truncated(item_id, content_index, audio_end_ms))

    def _ack(self, event: ce.PlaybackAck) -> None:
        try:
            result = self.ledger.ack(
                event.response_id, event.played_ms, event.item_id, bool(event.truncate)
            )
        except PlaybackItemNotFound:
            self._error(
                "playback_item_not_found",
                f"Response '{event.response_id}' has no playback to acknowledge.",
                "response_id",
            )
            return
        except PlaybackItemMismatch:
            self._error(
                "playback_item_mismatch",
                f"Item '{event.item_id}' is not the audio item of '{event.response_id}'.",
                "item_id",
            )
            return
        rid = event.response_id
        if result.heard is not None:
            live = self.live.get(rid)
            if live is not None and live.chart.is_live and event.truncate:
                self._run_response(rid, "truncate", audio_end_ms=result.played_ms)
                self._run_session("truncate", response_id=rid)
            elif live is not None and live.chart.is_live:
                self._run_response(rid, "played", audio_end_ms=result.played_ms)
            else:
                self._write_history(rid)
        self._events.append(self.env.acknowledged(result))

    # Responses ------------------------------------------------------------------------
    def _create_response(self, params: ce.ResponseParams | None) -> None:
        if self.chart.is_generating:
            self._error(
                "conversation_already_has_active_response",
                "Conversation already has an active response in progress.",
            )
            return
        if params is not None and params.conversation == "none":
            self._error(
                "unsupported_conversation",
                "Out-of-band responses (conversation: none) are not supported.",
                "response.conversation",
            )
            return
        settings = self.settings
        modalities = (params.output_modalities if params else None) or settings.output_modalities
        instructions = (
            params.instructions
            if params and params.instructions is not None
            else (settings.instructions)
        )
        max_tokens = (params.max_output_tokens if params else None) or settings.max_output_tokens
        self._act(self.input.disarm_idle())
        self.conversation.prune()
        request = InferenceRequest(
            instructions=instructions,
            items=self.conversation.prompt_view().items,
            output_modalities=modalities,
            max_output_tokens=None if max_tokens == "inf" else int(max_tokens),
            voice=settings.voice,
            metadata=dict(params.metadata or {}) if params else {},
        )
        rid = self._new_id("resp")
        item_id = self._new_id("item")
        seq = self.fence.issue()
        chart = ResponseChart(rid, seq, request)
        live = _Live(chart, seq, item_id, "audio" in modalities, request)
        if live.audio and settings.output_format.type != "audio/pcm":
            live.encoder = OutputAudio(settings.output_format)
        self.live[rid] = live
        for evicted in self.ledger.open(rid, item_id):
            self._forget(evicted)
        previous = self._last_item_id()
        self.conversation.open_reply(item_id, rid)
        self._events.extend(self.env.response_started(rid, item_id, previous, modalities, request))
        self._run_session("response_started", response_id=rid)
        self._run_response(rid, "start")

    def _forget(self, rid: str) -> None:
        live = self.live.pop(rid, None)
        if live is not None and live.chart.is_generating:
            # An unsettled reply evicted from the ledger: it stays an empty boundary.
            self._cancel_backend(CancelBackend(rid, live.seq))

    # Effects: the one routing point ---------------------------------------------------
    def _run_session(self, event: str, **kwargs: object) -> None:
        for effect in self.chart.handle(event, **kwargs):
            self._session_effect(effect)

    def _session_effect(self, effect: fx.Effect) -> None:
        if isinstance(effect, fx.AnnounceSpeechStarted):
            # The id is taken only once the chart has started a turn: it names the item that
            # the matching commit will create (one promised by timeout_triggered is kept).
            self._pending_item_id = self._pending_item_id or self._new_id("item")
            self._events.append(
                self.env.speech_started(effect.audio_start_ms, self._pending_item_id)
            )
        elif isinstance(effect, fx.AnnounceSpeechStopped):
            item_id = self._pending_item_id or self._new_id("item")
            self._pending_item_id = item_id
            self._events.append(self.env.speech_stopped(effect.audio_end_ms, item_id))
        elif isinstance(effect, fx.CommitInput):
            self._commit_input()
        elif isinstance(effect, fx.CreateResponse):
            self._create_response(None)
        elif isinstance(effect, fx.InterruptResponses):
            event = "barge_in" if effect.reason == "turn_detected" else "cancel"
            for rid in list(self.live):
                self._run_response(rid, event, reason=effect.reason)
        elif isinstance(effect, fx.InterruptResponse):
            if effect.response_id in self.live:
                self._run_response(effect.response_id, "cancel", reason=effect.reason)
            else:
                self._events.append(self.env.cleared(effect.response_id))
        elif isinstance(effect, fx.AnswerClear):
            self._events.append(self.env.cleared(effect.response_id or ""))
        elif isinstance(effect, fx.PauseOutput):
            self._events.append(se.OutputAudioBufferPaused(response_id=effect.response_id))
        elif isinstance(effect, fx.ResumeOutput):
            self._events.append(se.OutputAudioBufferResumed(response_id=effect.response_id))
        elif isinstance(effect, fx.OverlapDecided):
            self._overlap_decided(effect)
        elif isinstance(effect, fx.DropInput):
            self.input.clear()  # the overlap never becomes a turn (its promised id neither)
            self._pending_item_id = None
        elif isinstance(effect, fx.Reject):
            self._error(effect.code, effect.message)

    def _commit_input(self) -> None:
        item_id = self._pending_item_id or self._new_id("item")
        self._pending_item_id = None
        item = conv.Item(item_id, "user", self.input.take())
        previous = self._last_item_id()
        self.conversation.add(item)
        self._events.append(self.env.input_committed(item_id, previous))
        self._announce_item(item)
        self.conversation.prune()
        if self._wants_transcript():
            self._transcribe(item)

    def _run_response(self, rid: str, event: str, **kwargs: object) -> None:
        live = self.live.get(rid)
        if live is None:
            return
        for effect in live.chart.handle(event, **kwargs):
            self._response_effect(live, effect)
        if live.chart.is_terminal:
            self.live.pop(rid, None)

    def _response_effect(self, live: _Live, effect: fx.Effect) -> None:
        rid = live.chart.response_id
        if isinstance(effect, fx.StartBackend):
            self._start_backend(effect)
        elif isinstance(effect, fx.CancelBackend):
            self._cancel_backend(effect)
        elif isinstance(effect, fx.ForwardOutput):
            self._forward(live, effect.chunk)
        elif isinstance(effect, fx.SendCleared):
            self._events.append(self.env.cleared(rid))
        elif isinstance(effect, fx.SendResponseDone):
            self.fence.close(live.seq)
            self._events.extend(
                self.env.response_finished(
                    rid,
                    live.item_id,
                    effect.status,
                    effect.reason,
                    transcript="".join(live.text_parts),
                    audio=live.audio,
                    output_tokens=live.output_tokens,
                )
            )
            live.encoder = None
            if effect.status == "completed":
                self._arm_idle(self.ledger.generated_ms(rid) if rid in self.ledger else 0)
        elif isinstance(effect, fx.CommitHistory):
            if effect.mode == "cut":
                if effect.audio_end_ms is not None:
                    self.ledger.cut(rid, effect.audio_end_ms)
                else:
                    self.ledger.clear(rid)
            self._write_history(rid)
        elif isinstance(effect, fx.ResponseFinished):
            self._run_session(
                "response_finished", response_id=rid, audio_pending=effect.audio_pending
            )
        elif isinstance(effect, fx.ResponseSettled):
            self._run_session("response_settled", response_id=rid)

    def _cancel_backend(self, cancel: CancelBackend) -> None:
        self.fence.close(cancel.seq)
        if self._wait.drop(cancel.response_id):
            # Never started: nothing to cancel but the wait.
            self._actions.append(CancelTimer("transcripts"))
            return
        self._actions.append(cancel)

    def _forward(self, live: _Live, chunk: object) -> None:
        rid = live.chart.response_id
        if isinstance(chunk, BackendAudio):
            ms = len(chunk.audio) // PCM16_24K_BYTES_PER_MS
            live.audio_ms += ms
            self.ledger.append(rid, ms, chunk.text)
            if chunk.text:
                live.text_parts.append(chunk.text)
            # The ledger counts pcm16 ms; only the bytes the client gets change (G.711 at 8 kHz,
            # one streaming encoder per response).
            audio = chunk.audio if live.encoder is None else live.encoder.push_pcm16(chunk.audio)
            self._events.extend(self.env.audio_delta(rid, live.item_id, audio, chunk.text))
        elif isinstance(chunk, BackendText):
            live.text_parts.append(chunk.text)
            live.unaligned_text = live.unaligned_text or live.audio
            self._events.append(
                self.env.text_delta(rid, live.item_id, chunk.text, audio=live.audio)
            )

    def _write_history(self, rid: str) -> None:
        heard = self.ledger.heard(rid)
        item_id = self.ledger.item_id(rid)
        if heard is None or item_id not in self.conversation:
            return
        if self.conversation.get(item_id).response_id != rid:
            return  # the reply slot was deleted and its id reused by the client's own item
        live = self.live.get(rid)
        is_audio = live.audio if live is not None else heard.audio_ms > 0
        content: tuple[conv.Content, ...]
        if is_audio and heard.audio_ms > 0:
            content = (conv.OutputAudio(heard.transcript or None, heard.audio_ms),)
        elif not is_audio and heard.full and heard.transcript:
            content = (conv.OutputText(heard.transcript),)
        else:
            content = ()  # nothing heard: the empty boundary stays
        self.conversation.fill_reply(item_id, content)

    # Helpers --------------------------------------------------------------------------
    def _act(self, action: Action | None) -> None:
        if action is not None:
            self._actions.append(action)

    def _clock(self, now_ms: int | None) -> None:
        if now_ms is not None:
            self._now_ms = max(self._now_ms, now_ms)

    def _last_item_id(self) -> str | None:
        items = self.conversation.items
        return items[-1].id if items else None

    def _new_id(self, prefix: str) -> str:
        # Clients may pick any item id, ours included (they are easy to predict): skip taken ones.
        while True:
            self._ids += 1
            candidate = f"{prefix}_{self.session_id}_{self._ids}"
            if candidate not in self.conversation:
                return candidate

    def _error(
        self,
        code: CoreErrorCode,
        message: str,
        param: str | None = None,
        *,
        event_id: str | Literal["client"] | None = "client",
        error_type: str = "invalid_request_error",
    ) -> None:
        # By default the error names the client event being handled (rule 7).
        eid = self._event_id if event_id == "client" else event_id
        self._events.append(self.env.error(code, message, param, eid))

    def _item_not_found(self, item_id: str, param: str = "item_id") -> None:
        self._error("item_not_found", f"Item with id '{item_id}' not found.", param)

    def _flush(self) -> Step:
        step = Step(tuple(self._events), tuple(self._actions))
        self._events, self._actions = [], []
        return step


def _content_from_wire(part: wire.ContentPart, fmt: AudioFormat) -> conv.Content:
    if isinstance(part, wire.InputText):
        return conv.InputText(part.text)
    if isinstance(part, wire.InputAudio):
        # A client item's audio is in the session's input format at the time it was sent.
        return conv.InputAudio(part.audio or b"", part.transcript, fmt)
    if isinstance(part, wire.InputImage):
        return conv.InputImage(part.image_url)
    if isinstance(part, wire.OutputText):
        return conv.OutputText(part.text)
    return conv.OutputAudio(part.transcript, 0)
