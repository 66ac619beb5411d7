"""Turn taking in the session core: the user's audio, its turns, and the timers around them.

Part of `SessionCore` (orchestrator/session/core_state.py says how the core is assembled). Rules
(docs/protocol.md), each decided by a pure module or a chart, routed here:
- Turn detection: appends are decoded and cut here (`DetectSpeech`); the probabilities come
  back as an input and the `TurnDetector` decides; every commit or clear resets it, so a turn
  in progress never outlives the buffer that held it. A VAD outage is told once per outage.
- Semantic end of turn ("Semantic end of turn and preemptive responses"): at each candidate
  pause the turn so far is sent to the `turn` model (`PredictTurn`); its answer goes to the
  pure `EndOfTurn`, which says whether the turn ends now (the detector is told: `end_turn`)
  and, in an outage, puts the silence rule back (one error per outage; a broken answer, NaN,
  counts as none). Each turn's end is noted with its cause (`TurnEnded`, metrics only).
- Preemptive responses: the session chart starts (`StartPreemptive`), drops and adopts them;
  the `Preemption` here holds a started stream's output until its turn is committed, and an
  adopted one becomes the turn's response after `committed`, its held output replayed in
  order. The cascade's preemption hears the turn's transcript, asked at the pause.
- The idle timer (`idle_timeout_ms`) is the detector's: armed when a completed reply's audio
  will have finished playing, disarmed by speech or a new response, asked for with `ArmTimer`;
  `timeout_triggered` names the item that the following commit creates.
- Pause mode ("Interruption policy"): the `OverlapTracker` measures the speech over a paused
  reply, asks for its partial transcripts (`Transcribe` with purpose `overlap` and a token;
  never shown to the client) and arms its timers; every fact it has is handed to the session
  chart, which decides. The decision's event carries what was measured and heard.
"""

from __future__ import annotations

import math
from dataclasses import replace as dc_replace

import numpy as np

from orchestrator.protocol import server as se
from orchestrator.protocol.session_config import (
    SemanticVad,
    TurnDetection,
)
from orchestrator.session.actions import (
    CancelBackend,
    PredictTurn,
    StartBackend,
    Transcribe,
)
from orchestrator.session.audio import decode_input
from orchestrator.session.core_state import CoreState
from orchestrator.session.core_types import (
    PreemptNoted,
    TurnEnded,
)
from orchestrator.session.history import conversation as conv
from orchestrator.session.input_buffer import BufferFull
from orchestrator.session.inputs import (
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    TurnPrediction,
    VadEvent,
    VadPaused,
    VadResumed,
    VadSpeechStarted,
)
from orchestrator.session.turns.end_of_turn import EndCause
from orchestrator.session.turns.overlap import MAX_PARTIAL_MS, OverlapStep
from orchestrator.session.turns.preemption import Preemption
from statecharts import effects as fx

__all__ = ["TURN_WINDOW_MS", "TurnTaking"]

TURN_WINDOW_MS = 8000  # what Smart Turn hears: the turn's last 8 s


class TurnTaking(CoreState):
    def _pause_ms(self, vad: TurnDetection | None) -> int | None:
        """Candidate pauses are cut only for someone who listens to them."""
        if vad is not None and (isinstance(vad, SemanticVad) or vad.preemptive):
            return self.config.candidate_pause_ms
        return None

    @property
    def _semantic(self) -> bool:
        return isinstance(self.settings.turn_detection, SemanticVad)

    def _append(self, audio: bytes) -> None:
        try:
            self._act(self.input.append(audio, self.settings.input_format))
        except BufferFull:
            self._error("input_audio_buffer_full", "The input audio buffer is full.")

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

    def _vad_event(self, event: VadEvent, cause: EndCause | None = None) -> None:
        if isinstance(event, VadPaused):
            if self._semantic:
                words = self.config.transcriber
                token = self.end_of_turn.ask(with_words=words)
                # All the turn's audio buffered when asked (the VAD trails the client by some
                # tens of ms): measured better than cutting it at the VAD's chunk (premature
                # ends 50% vs 54%, complete turns late 46% vs 58%; docs/benchmarks.md).
                audio = self.input.audio_since(0, TURN_WINDOW_MS)
                self._actions.append(PredictTurn(token, audio))
                if words:
                    item_id = self._pending_item_id or ""
                    self._actions.append(Transcribe(item_id, audio, "end_of_turn", token))
            self._run_session("turn_paused")
            return
        if isinstance(event, VadResumed):
            self.end_of_turn.resumed()
            self._run_session("speech_resumed")
            return
        if isinstance(event, VadSpeechStarted):
            self._act(self.input.disarm_idle())
            self._run_session("speech_started", audio_start_ms=event.audio_start_ms)
            if self.chart.is_paused:
                self._overlap(self.overlap.onset(event.audio_start_ms, self.input.voiced_from_ms))
            return
        if self.overlap.is_open:
            self._overlap(self.overlap.voiced(self.input.voiced_to_ms, self._now_ms))
        self.end_of_turn.resumed()  # an answer still in flight is about a turn that ended
        if cause is None:
            cause = self.end_of_turn.cause_of_silence_stop() if self._semantic else "silence"
        self._notes.append(TurnEnded(cause))
        self._run_session(
            "speech_stopped",
            audio_end_ms=event.audio_end_ms,
            buffered_ms=self.buffered_ms,
            **self._overlap_facts(),
        )
        if self.chart.is_paused:
            step = self.overlap.stopped(self.input.voiced_to_ms, event.audio_end_ms, self._now_ms)
            self._overlap(step)

    def _turn_predicted(self, answer: TurnPrediction) -> None:
        if not self._semantic:
            return  # semantic_vad was switched off while the model was asked
        if answer.probability is None or not math.isfinite(answer.probability):
            # A broken answer (NaN) is no answer: the outage's rule, not a new decision.
            if self.end_of_turn.failed(answer.token):
                self._error(
                    "turn_model_unavailable",
                    f"Semantic end of turn is paused: {answer.error or 'no answer'}. Turns end "
                    f"after {self.end_of_turn.fallback_ms} ms of silence until it recovers.",
                    event_id=None,
                )
            self.input.limit_silence(self.end_of_turn.silence_limit_ms)
            if self.end_of_turn.fallback_due(self.input.silence_ms):
                self._end_turn("fallback")
            return
        verdict = self.end_of_turn.answered(answer.token, answer.probability)
        self.input.limit_silence(self.end_of_turn.silence_limit_ms)
        if verdict.end and verdict.cause is not None:
            self._end_turn(verdict.cause)

    def _turn_heard(self, ready: TranscriptReady) -> None:
        if not self._semantic:
            return
        verdict = self.end_of_turn.heard(ready.token, ready.transcript)
        if verdict.end and verdict.cause is not None:
            self._end_turn(verdict.cause)

    def _end_turn(self, cause: EndCause) -> None:
        stopped = self.input.end_turn()
        if stopped is not None:
            self._vad_event(stopped, cause)

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
        elif fired.kind == "playout":
            self._played_out(fired.token)
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

    def _preempt(self) -> None:
        item_id = self._pending_item_id or self._new_id("item")
        self._pending_item_id = item_id  # the turn's commit creates this item
        parts = self.input.peek()
        turn = conv.Item(item_id, "user", parts)
        request = self._request(None, (*self.conversation.prompt_view().items, turn))
        start = StartBackend(self._new_id("resp"), self.fence.issue(), request)
        held = Preemption(
            start, item_id, self.config.preempt_max_events, self.config.preempt_max_bytes
        )
        self._preemption = held
        self._notes.append(PreemptNoted("started"))
        if self.config.transcripts_for_pipeline and self.config.transcriber:
            # The cascade hears the turn through its transcript: that first.
            self._preempt_tokens += 1
            held.transcript_token = self._preempt_tokens
            audio = [decode_input(p.audio, p.format) for p in parts]
            samples = np.concatenate(audio) if audio else np.zeros(0, np.float32)
            self._actions.append(Transcribe(item_id, samples, "preempt", held.transcript_token))
            return
        self._start_preempted(held)

    def _start_preempted(self, held: Preemption) -> None:
        held.started = True
        transcripts = self._known_transcripts(held.start)
        if held.transcript is not None:
            transcripts[held.item_id] = held.transcript
        self._actions.append(dc_replace(held.start, transcripts=transcripts))

    def _preempt_transcript(self, ready: TranscriptReady) -> None:
        held = self._preemption
        if held is not None and ready.token == held.transcript_token:
            if ready.transcript is None:
                self._run_session("preempt_failed", reason="failed")
            elif not held.started:
                held.transcript = ready.transcript
                self._start_preempted(held)
        elif ready.token == self._adopted_transcript_token:
            # Adopted before it came: it is the committed turn's transcript.
            self._adopted_transcript_token = None
            self._transcript(dc_replace(ready, purpose="turn", token=0))

    def _adopt(self) -> None:
        held, self._preemption = self._preemption, None
        if held is None:
            self._create_response(None)
            return
        self._create_response(None, adopted=held)
        if held.response_id not in self.live:
            # Refused (its tool choice fits no tool in force): it never becomes a response.
            self._discard(held, "not_answered")
            return
        self._notes.append(PreemptNoted("used"))
        for event in held.take_held():
            self._backend(event)

    def _drop_preemption(self, reason: fx.PreemptDropReason) -> None:
        held, self._preemption = self._preemption, None
        if held is not None:
            self._discard(held, reason)

    def _discard(self, held: Preemption, reason: fx.PreemptDropReason) -> None:
        self._notes.append(PreemptNoted("dropped", reason))
        self.fence.close(held.seq)
        if held.started:
            self._actions.append(CancelBackend(held.response_id, held.seq))

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
