"""SessionCore: the sans-IO realtime session (h11 style: typed inputs in, events and actions out).

It owns one session's SessionChart, one ResponseChart per live response, the conversation,
the input buffer, the turn detector, the playback ledger and the response fence. The I/O layer
feeds it typed inputs (client events parsed at the edge, VAD probabilities, backend output,
transcripts, timer expiries, a close request) through `handle`, each with the caller's clock
(`now_ms`), and carries out what comes back: a `Step` of server events to send and actions to
perform (`StartBackend`, `CancelBackend`, `DetectSpeech`, `Transcribe`, `PredictTurn`,
`ArmTimer`, `CancelTimer`, `SessionEnd`), kept apart, and notes for metrics. No clock, no
socket, no task lives here, so every interleaving can be driven in memory by a test. The I/O
layer reads nothing else of it but `input_format` (to parse appends at the edge).

Rules (docs/protocol.md) enforced here by routing chart effects (the charts decide; this module
acts):
- Rule 2: backend output passes the fence (only the open response's number) and then the
  response's chart (only while generating).
- Rule 3: one active response at a time (`conversation_already_has_active_response`); a cancel
  with nothing live is the session chart's rejection (`response_cancel_not_active`).
- Rule 5/6: the conversation keeps only what was heard; pruning runs at every new user input.
- Rule 7: every client error becomes an `error` event naming the client's `event_id`.
- One routing point keeps the charts in step: a response chart's `ResponseFinished` /
  `ResponseSettled` go to the session chart, and nothing else moves its output region.
- Anything that changes what a preemptive response was given (an item, a setting, the
  client's own response) is a `context_changed` for the session chart.
- The parts: turn taking (VAD, semantic end of turn, preemptive responses, pause mode, the
  idle timer) in orchestrator/session/core_turns.py; items, history and transcripts in
  orchestrator/session/core_items.py; function calling (tools, a response's call, its output items)
  in orchestrator/session/core_tools.py; the shared state in orchestrator/session/core_state.py.
  Responses and
  the routing of every chart effect are here.
"""

from __future__ import annotations

from orchestrator.protocol import client as ce
from orchestrator.protocol import server as se
from orchestrator.protocol.errors import ProtocolError
from orchestrator.protocol.session_config import (
    AudioFormat,
    Interruption,
    RetentionRatio,
    SemanticVad,
)
from orchestrator.session import ending
from orchestrator.session.actions import (
    CancelBackend,
    CancelTimer,
    InferenceRequest,
)
from orchestrator.session.audio import OutputAudio
from orchestrator.session.core_items import ItemHandling
from orchestrator.session.core_state import LiveResponse
from orchestrator.session.core_tools import ToolCalls
from orchestrator.session.core_turns import TurnTaking
from orchestrator.session.core_types import (
    CoreConfig,
    CoreErrorCode,
    CoreInput,
    Step,
)
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendEvent,
    BackendFailed,
    BackendText,
    BackendToolCall,
    CloseRequested,
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    TurnPrediction,
    VadDown,
    VadEvent,
    VadPaused,
    VadResumed,
    VadSpeechStarted,
    VadSpeechStopped,
)
from orchestrator.session.turns.preemption import Preemption
from statecharts import effects as fx
from statecharts.response import ResponseChart

__all__ = ["CoreConfig", "CoreErrorCode", "CoreInput", "SessionCore", "Step"]

PCM16_24K_BYTES_PER_MS = 48
TURN_WINDOW_MS = 8000  # what Smart Turn hears: the turn's last 8 s
# Client events that change what a preemptive response was given.
_CONTEXT_EVENTS = (
    ce.SessionUpdate,
    ce.ConversationItemCreate,
    ce.ConversationItemDelete,
    ce.ConversationItemTruncate,
    ce.ResponseCreate,
)


class SessionCore(TurnTaking, ItemHandling, ToolCalls):
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
        elif isinstance(event, VadSpeechStarted | VadSpeechStopped | VadPaused | VadResumed):
            return self.vad(event)
        elif isinstance(event, TurnPrediction):
            self._turn_predicted(event)
        elif isinstance(
            event, BackendText | BackendAudio | BackendToolCall | BackendDone | BackendFailed
        ):
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
        self._backend(event)
        return self._flush()

    def _backend(self, event: BackendEvent) -> None:
        held = self._preemption
        if held is not None and (event.response_id, event.seq) == (held.response_id, held.seq):
            # Not a response yet: held until its turn is committed, or dropped.
            if isinstance(event, BackendFailed):
                self._run_session("preempt_failed", reason="failed")
            elif not held.hold(event):
                self._run_session("preempt_failed", reason="overflow")
            return
        live = self.live.get(event.response_id)
        if live is None or live.seq != event.seq or not self.fence.admits(event.seq):
            return  # rule 2: late output of a closed response is dropped here
        rid = event.response_id
        if isinstance(event, BackendAudio | BackendText | BackendToolCall):
            for effect in live.chart.forward(event):  # the `output` event's fast path
                self._response_effect(live, effect)
        elif isinstance(event, BackendDone):
            live.output_tokens = event.output_tokens
            if not live.audio or live.audio_ms == 0 or live.unaligned_text:
                self.ledger.set_transcript(rid, "".join(live.text_parts))
            if self.ledger.finish(rid, self._now_ms) is not None:
                self._write_history(rid)  # the `generated` basis: heard once generated
            pending = self.ledger.pending_audio(rid, self._now_ms)
            self._run_response(rid, "complete", audio_pending=pending)
            if pending:
                self._arm_playout(rid)
        elif isinstance(event, BackendFailed):
            self._run_response(rid, "fail", reason=event.reason)

    # Client events --------------------------------------------------------------------
    def _client(self, event: ce.ClientEvent) -> None:
        if isinstance(event, _CONTEXT_EVENTS):
            self._run_session("context_changed")  # a preemptive response heard another context
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
                self._item_not_found(event.item_id, "retrieve")
                return
            streaming = self._live_call_item(event.item_id)
            item = self.conversation.get(event.item_id)
            self._events.append(self.env.item_retrieved(item, streaming))
        elif isinstance(event, ce.ConversationItemDelete):
            if event.item_id not in self.conversation:
                self._item_not_found(event.item_id, "delete")
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
        if isinstance(event.session.turn_detection, SemanticVad) and not self.config.turn_model:
            self._error(
                "unsupported_turn_detection",
                "semantic_vad needs the `turn` model, which this server does not run; use "
                "'server_vad' or null.",
                "session.audio.input.turn_detection.type",
            )
            return
        # A tool choice is checked against the tools when a response starts (core_tools.py).
        self.settings = self.settings.apply(event.session)
        truncation = self.settings.truncation
        self.conversation.retention = (
            truncation.retention_ratio if isinstance(truncation, RetentionRatio) else None
        )
        vad = self.settings.turn_detection
        policy = vad.policy if vad is not None else Interruption()
        self.chart.configure(
            turn_detection="manual" if vad is None else vad.type,
            create_response=vad.create_response if vad is not None else False,
            interrupt_response=vad.interrupt_response if vad is not None else False,
            interruption=policy.mode,
            min_speech_ms=policy.min_speech_ms,
            preemptive=vad is not None and vad.preemptive,
        )
        self.overlap.policy = policy
        self._act(self.input.configure(vad, self._pause_ms(vad)))
        if isinstance(vad, SemanticVad):
            self.end_of_turn.threshold = vad.completion_threshold
            self.input.limit_silence(self.end_of_turn.silence_limit_ms)
        else:
            self.input.limit_silence(None)
        self._events.append(self.env.session_updated(self.settings, self.config.model))

    # Session end ----------------------------------------------------------------------
    def _close(self, request: CloseRequested) -> None:
        """The generating response gets its terminal (cancelled) and the client the reason."""
        self._run_session("close")
        self._events.append(self.env.closing(request))
        self._actions.append(ending.closing(request))

    # Responses ------------------------------------------------------------------------
    def _create_response(
        self, params: ce.ResponseParams | None, adopted: Preemption | None = None
    ) -> None:
        if self.chart.is_generating:
            self._error(
                "conversation_already_has_active_response",
                # OpenAI's words (clients match "already has an active response").
                "Conversation already has an active response in progress: "
                f"{self.chart.latest_response_id}. Wait until the response is finished before "
                "creating a new one.",
            )
            return
        if self._refuse_response_tools(params):
            return
        self.conversation.prune()
        if adopted is not None:
            request, rid, seq = adopted.start.request, adopted.response_id, adopted.seq
        else:
            prompt = self._response_input(params)
            if prompt is None:
                return  # an item it references is unknown: told, nothing started
            request = self._request(params, prompt)
            rid, seq = self._new_id("resp"), self.fence.issue()
        self._act(self.input.disarm_idle())
        # Out of band (`conversation: "none"`): nothing of it enters the conversation.
        in_conversation = params is None or params.conversation != "none"
        modalities = request.output_modalities
        item_id = self._new_id("item")
        chart = ResponseChart(rid, seq, request)
        message = not request.call_only  # a call alone: no message item at all
        live = LiveResponse(
            chart, seq, item_id, "audio" in modalities, request, message, in_conversation
        )
        if live.audio and self.settings.output_format.type != "audio/pcm":
            live.encoder = OutputAudio(self.settings.output_format)
        self.live[rid] = live
        for evicted in self.ledger.open(rid, item_id):
            self._forget(evicted)
        previous = self._last_item_id()
        if message and in_conversation:
            self.conversation.open_reply(item_id, rid)
        announced = item_id if message else None
        started = self.env.response_started(
            rid, announced, previous, modalities, request, in_conversation=in_conversation
        )
        self._events.extend(self._output_events(live, started))
        self._run_session("response_started", response_id=rid)
        if adopted is None:
            self._run_response(rid, "start")
            return
        self._run_response(rid, "adopt")
        if not adopted.started:
            self._start_backend(adopted.start)  # the cascade: still waiting for the transcript

    def _request(
        self, params: ce.ResponseParams | None, items: tuple[conv.Item, ...]
    ) -> InferenceRequest:
        settings = self.settings
        modalities = (params.output_modalities if params else None) or settings.output_modalities
        instructions = (
            params.instructions
            if params and params.instructions is not None
            else (settings.instructions)
        )
        max_tokens = (params.max_output_tokens if params else None) or settings.max_output_tokens
        tools, choice = self._tools_for(params)
        return InferenceRequest(
            instructions=instructions,
            items=items,
            output_modalities=modalities,
            max_output_tokens=None if max_tokens == "inf" else int(max_tokens),
            voice=settings.voice,
            metadata=dict(params.metadata or {}) if params else {},
            tools=tools,
            tool_choice=choice,
        )

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
            self.ledger.pause(effect.response_id, self._now_ms)
            self._events.append(se.OutputAudioBufferPaused(response_id=effect.response_id))
        elif isinstance(effect, fx.ResumeOutput):
            self.ledger.resume(effect.response_id, self._now_ms)
            if effect.response_id in self.live:
                self._arm_playout(effect.response_id)
            self._events.append(se.OutputAudioBufferResumed(response_id=effect.response_id))
        elif isinstance(effect, fx.HearByAcknowledgement):
            for rid in self.ledger.acknowledge(effect.response_id):
                self._write_history(rid)  # back to the empty boundary until rule 5 settles it
        elif isinstance(effect, fx.OverlapDecided):
            self._overlap_decided(effect)
        elif isinstance(effect, fx.DropInput):
            self.input.clear()  # the overlap never becomes a turn (its promised id neither)
            self._pending_item_id = None
        elif isinstance(effect, fx.StartPreemptive):
            self._preempt()
        elif isinstance(effect, fx.AdoptPreemptive):
            self._adopt()
        elif isinstance(effect, fx.DropPreemptive):
            self._drop_preemption(effect.reason)
        elif isinstance(effect, fx.Reject):
            self._error(effect.code, effect.message)

    def _run_response(self, rid: str, event: str, **kwargs: object) -> None:
        live = self.live.get(rid)
        if live is None:
            return
        for effect in live.chart.handle(event, **kwargs):
            self._response_effect(live, effect)
        if live.chart.is_terminal:
            self.live.pop(rid, None)

    def _response_effect(self, live: LiveResponse, effect: fx.Effect) -> None:
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
            self._end_output(live, effect.status, effect.reason)
            live.encoder = None
            if effect.status == "completed" and live.call is None:
                self._arm_idle(self.ledger.generated_ms(rid) if rid in self.ledger else 0)
        elif isinstance(effect, fx.CommitCall):
            self._commit_call(live)
        elif isinstance(effect, fx.CommitHistory):
            if effect.mode == "cut":
                if effect.audio_end_ms is not None:
                    self.ledger.cut(rid, effect.audio_end_ms)
                else:
                    self.ledger.clear(rid, self._now_ms)
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

    def _forward(self, live: LiveResponse, chunk: object) -> None:
        rid = live.chart.response_id
        if isinstance(chunk, BackendToolCall):
            self._forward_call(live, chunk)
        elif not self._speaks(live):
            return  # after its call started, or a call alone: nothing is spoken
        elif isinstance(chunk, BackendAudio):
            ms = len(chunk.audio) // PCM16_24K_BYTES_PER_MS
            live.audio_ms += ms
            self.ledger.append(rid, ms, chunk.text, self._now_ms)
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
