"""Turn taking in the session core: the user's audio, its turns, and the timers around them.

`Turns` is the session core's turn-taking part (orchestrator/session/core.py owns it). It owns
the input buffer and detector (`UserInput`), the semantic end of turn, the overlap tracker,
the preemptive response held and the item id promised to the turn being spoken; nobody else
writes them. It never runs a chart: what the session chart is to hear comes back from each
method as the chart's own typed events (statecharts/session_events.py), and a response to
start as `Respond`, which the core carries out in order, each before the part goes on (the
methods are generators: a chart's commit takes the buffer the next VAD event is measured
against). Rules (docs/protocol.md), each decided by a
pure module or a chart:
1. Turn detection: appends are decoded and cut here (`DetectSpeech`); the probabilities come
   back as an input and the `TurnDetector` decides; every commit or clear resets it, so a turn
   in progress never outlives the buffer that held it. A VAD outage is told once per outage.
2. Semantic end of turn ("Semantic end of turn and preemptive responses"): at each candidate
   pause the turn so far is sent to the `turn` model (`PredictTurn`); its answer goes to the
   pure `EndOfTurn`, which says whether the turn ends now (the detector is told: `end_turn`)
   and, in an outage, puts the silence rule back (one error per outage; a broken answer, NaN,
   counts as none). Each turn's end is noted with its cause (`TurnEnded`, metrics only).
3. Preemptive responses: the session chart starts (`StartPreemptive`), drops and adopts them;
   the `Preemption` here holds a started stream's output until its turn is committed, and an
   adopted one becomes the turn's response after `committed`, its held output replayed in
   order. The cascade's preemption hears the turn's transcript, asked at the pause.
4. The idle timer (`idle_timeout_ms`) is the detector's: armed when a completed reply's audio
   will have finished playing, disarmed by speech or a new response, asked for with `ArmTimer`;
   `timeout_triggered` names the item that the following commit creates.
5. Pause mode ("Interruption policy"): the `OverlapTracker` measures the speech over a paused
   reply, asks for its partial transcripts (`Transcribe` with purpose `overlap` and a token;
   never shown to the client) and arms its timers; every fact it has is handed to the session
   chart, which decides. The decision's event carries what was measured and heard.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace

import numpy as np

from orchestrator.protocol import server as se
from orchestrator.protocol.session_config import (
    Interruption,
    SemanticVad,
    SessionConfig,
    TurnDetection,
)
from orchestrator.session.actions import PredictTurn, StartBackend, Transcribe
from orchestrator.session.audio import VAD_RATE, decode_input
from orchestrator.session.core_history import PreemptedTranscript
from orchestrator.session.core_outbox import Ids, Outbox
from orchestrator.session.core_types import CoreConfig, PreemptNoted, TurnEnded
from orchestrator.session.history import conversation as conv
from orchestrator.session.input_buffer import BufferFull
from orchestrator.session.inputs import (
    BackendEvent,
    BackendFailed,
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    TurnPrediction,
    VadEvent,
    VadPaused,
    VadResumed,
    VadSpeechStarted,
)
from orchestrator.session.turns.end_of_turn import EndCause, EndOfTurn
from orchestrator.session.turns.overlap import MAX_PARTIAL_MS, OverlapStep, OverlapTracker
from orchestrator.session.turns.preemption import Preemption
from orchestrator.session.turns.turn_words import WORDS_WINDOW_MS
from orchestrator.session.turns.user_input import UserInput
from statecharts import effects as fx
from statecharts import session_events as ev

__all__ = ["PreemptHeard", "Respond", "TurnAsk", "Turns"]

SMART_TURN_WINDOW_MS = 8000  # what Smart Turn hears: the turn's last 8 s


@dataclass(frozen=True, slots=True)
class Respond:
    """Start a response for the turn (the idle timeout answers as OpenAI's does)."""


TurnAsk = ev.SessionEvent | Respond


@dataclass(frozen=True, slots=True)
class PreemptHeard:
    """What a `preempt` transcript means: chart events, whether the held stream starts now
    (with the transcripts known), and a committed turn's transcript to take as such."""

    asks: list[TurnAsk] = field(default_factory=list)
    start: bool = False
    turn: TranscriptReady | None = None


class Turns:
    def __init__(
        self,
        config: CoreConfig,
        outbox: Outbox,
        ids: Ids,
        settings: Callable[[], SessionConfig],
    ) -> None:
        self._config = config
        self._out = outbox
        self._ids = ids
        self._settings = settings
        self.input = UserInput(config.max_input_buffer_bytes, settings().turn_detection)
        self.overlap = OverlapTracker(
            Interruption(),
            transcribe=config.transcriber,
            grace_ms=config.grace_ms,
        )
        self.end_of_turn = EndOfTurn(threshold=0.5)
        self.preemption: Preemption | None = None
        self._preempt_tokens = 0
        # An adopted preemptive response's transcript still to come: the committed turn's.
        self._adopted_transcript_token: int | None = None
        # The item id promised to the turn being spoken (speech_started, timeout_triggered):
        # the next commit creates it, and a client may not take it.
        self._promised: str | None = None
        self._now_ms = 0

    def clock(self, now_ms: int) -> None:
        self._now_ms = now_ms

    # The promised item id ---------------------------------------------------------------
    @property
    def promised_item_id(self) -> str | None:
        return self._promised

    def promise_item_id(self) -> str:
        """The id the turn's commit will create: the one promised already, or a new one."""
        if self._promised is None:
            self._promised = self._ids.new("item")
        return self._promised

    def take_turn(self) -> tuple[str, tuple[conv.InputAudio, ...]]:
        """The input buffer committed: its item id (the promise kept) and its audio."""
        item_id = self.promise_item_id()
        self._promised = None
        return item_id, self.input.take()

    def clear_input(self) -> None:
        """`input_audio_buffer.clear`: the buffer is emptied (the promise stands)."""
        self.input.clear()

    def drop_input(self) -> None:
        """A resumed overlap never becomes a turn (its promised id neither)."""
        self.input.clear()
        self._promised = None

    # Settings -----------------------------------------------------------------------------
    @property
    def _semantic(self) -> bool:
        return isinstance(self._settings().turn_detection, SemanticVad)

    def configure(self, vad: TurnDetection | None) -> None:
        self.overlap.policy = vad.policy if vad is not None else Interruption()
        self._out.act(self.input.configure(vad, self._pause_ms(vad)))
        if isinstance(vad, SemanticVad):
            waits = vad.waits
            self.end_of_turn.threshold = waits.threshold
            self.end_of_turn.unsure_ms = waits.unsure_wait_ms
            self.end_of_turn.sure_ms = waits.sure_wait_ms
        self._limit_silence()

    def _pause_ms(self, vad: TurnDetection | None) -> int | None:
        """Candidate pauses are cut only for someone who listens to them."""
        if vad is not None and (isinstance(vad, SemanticVad) or vad.preemptive):
            return self._config.candidate_pause_ms
        return None

    # The user's audio and the VAD ----------------------------------------------------------
    def append(self, audio: bytes) -> None:
        try:
            self._out.act(self.input.append(audio, self._settings().input_format))
        except BufferFull:
            self._out.error("input_audio_buffer_full", "The input audio buffer is full.")

    def speech_probabilities(self, answer: SpeechProbabilities) -> Iterator[TurnAsk]:
        for event in self.input.hear(answer):
            yield from self.vad_event(event)
        if self.overlap.is_open and self.input.speaking:
            yield from self._overlap(self.overlap.voiced(self.input.voiced_to_ms, self._now_ms))

    def vad_unavailable(self, reason: str) -> None:
        # Turn detection pauses (the chunks count as neither speech nor silence); the client
        # hears of it once per outage, and the session goes on.
        if self.input.vad_down():
            self._out.error(
                "vad_unavailable",
                f"Turn detection is paused: {reason}. Audio is still buffered; commit manually "
                "or wait for it to recover.",
                event_id=None,
            )

    def vad_event(self, event: VadEvent, cause: EndCause | None = None) -> Iterator[TurnAsk]:
        if isinstance(event, VadPaused):
            if self._semantic:
                words = self._config.transcriber
                token = self.end_of_turn.ask(with_words=words)
                # The pause's deadline: the turn ends at the unsure wait unless an answer
                # moves it (end_of_turn.py rule 2).
                self._limit_silence()
                # All the turn's audio buffered when asked (the VAD trails the client by some
                # tens of ms): measured better than cutting it at the VAD's chunk (premature
                # ends 50% vs 54%, complete turns late 46% vs 58%; docs/benchmarks.md).
                audio = self.input.audio_since(0, SMART_TURN_WINDOW_MS)
                self._out.act(PredictTurn(token, audio))
                if words:
                    item_id = self._promised or ""
                    # turn_words rule 3: the words of the same audio's last 3 s.
                    latest = audio[-WORDS_WINDOW_MS * VAD_RATE // 1000 :]
                    self._out.act(Transcribe(item_id, latest, "end_of_turn", token))
            yield ev.TurnPaused()
            return
        if isinstance(event, VadResumed):
            self.end_of_turn.resumed()
            self._limit_silence()
            yield ev.SpeechResumed()
            return
        if isinstance(event, VadSpeechStarted):
            self._out.act(self.input.disarm_idle())
            # In pause mode the chart says whether this speech is an overlap
            # (`OverlapSpeechStarted`), and the core hands it back to `overlap_started`.
            yield ev.SpeechStarted(event.audio_start_ms)
            return
        if self.overlap.is_open:
            yield from self._overlap(self.overlap.voiced(self.input.voiced_to_ms, self._now_ms))
        if cause is None:
            cause = self.end_of_turn.cause_of_silence_stop() if self._semantic else "silence"
        self.end_of_turn.resumed()  # an answer still in flight is about a turn that ended
        self._limit_silence()
        self._out.note(TurnEnded(cause))
        facts = self.overlap.facts()
        yield ev.SpeechStopped(
            event.audio_end_ms, self.input.buffered_ms, facts.speech_ms, facts.heard, facts.waited
        )

    def overlap_started(self, audio_start_ms: int) -> Iterator[TurnAsk]:
        """The chart heard speech over a paused reply (`OverlapSpeechStarted`)."""
        return self._overlap(self.overlap.onset(audio_start_ms, self.input.voiced_from_ms))

    def overlap_stopped(self, audio_end_ms: int) -> Iterator[TurnAsk]:
        """The chart holds the overlap's speech, undecided (`OverlapSpeechStopped`)."""
        step = self.overlap.stopped(self.input.voiced_to_ms, audio_end_ms, self._now_ms)
        return self._overlap(step)

    # Semantic end of turn -----------------------------------------------------------------
    def turn_predicted(self, answer: TurnPrediction) -> Iterator[TurnAsk]:
        if not self._semantic:
            return  # semantic_vad was switched off while the model was asked
        if answer.probability is None or not math.isfinite(answer.probability):
            # A broken answer (NaN) is no answer: the outage's rule, not a new decision.
            if self.end_of_turn.failed(answer.token):
                self._out.error(
                    "turn_model_unavailable",
                    f"Semantic end of turn is paused: {answer.error or 'no answer'}. Turns end "
                    f"after {self.end_of_turn.fallback_ms} ms of silence until it recovers.",
                    event_id=None,
                )
            self._limit_silence()
            if self.end_of_turn.fallback_due(self.input.silence_ms):
                yield from self._end_turn("fallback")
            return
        silence = self.input.silence_ms
        verdict = self.end_of_turn.answered(answer.token, answer.probability, silence)
        self._limit_silence()
        if verdict.end and verdict.cause is not None:
            yield from self._end_turn(verdict.cause)

    def turn_heard(self, ready: TranscriptReady) -> Iterator[TurnAsk]:
        if not self._semantic:
            return
        verdict = self.end_of_turn.heard(ready.token, ready.transcript, self.input.silence_ms)
        self._limit_silence()
        if verdict.end and verdict.cause is not None:
            yield from self._end_turn(verdict.cause)

    def _limit_silence(self) -> None:
        """The detector's silence limit is semantic_vad's (end_of_turn.py rules 2-4), none for
        server_vad: set after every change to either."""
        self.input.limit_silence(self.end_of_turn.silence_limit_ms if self._semantic else None)

    def _end_turn(self, cause: EndCause) -> Iterator[TurnAsk]:
        stopped = self.input.end_turn()
        if stopped is not None:
            yield from self.vad_event(stopped, cause)

    # Timers ------------------------------------------------------------------------------
    def arm_idle(self, played_at_ms: int) -> None:
        """OpenAI's idle_timeout_ms: from when the completed reply's audio will have finished
        playing (`played_at_ms`, the playout clock's estimate: audio streamed at real time
        has mostly played by the time it is all generated), ended early by any speech or new
        response."""
        self._out.act(self.input.disarm_idle())
        self._out.act(self.input.arm_idle(played_at_ms, self._ids.token()))

    def disarm_idle(self) -> None:
        self._out.act(self.input.disarm_idle())

    def timer(self, fired: TimerFired) -> Iterator[TurnAsk]:
        """The idle and overlap timers (the core routes the others)."""
        if fired.kind == "idle":
            if self.input.idle_fired(fired.token, self._now_ms):
                yield from self._idle_timeout()
        elif fired.kind == "overlap_grace":
            yield from self._overlap(self.overlap.grace_over(fired.token))
        elif fired.kind == "overlap_resume" and self.overlap.resume_due(fired.token):
            facts = self.overlap.facts()
            yield ev.ResumeTimer(facts.speech_ms, facts.heard, facts.waited)

    def _idle_timeout(self) -> Iterator[TurnAsk]:
        # The id the following commit creates (now, or the next turn's if the buffer is empty).
        item_id = self.promise_item_id()
        now = self.input.clock_ms
        start = min(self.input.idle_from_input_ms, now)
        self._out.send(
            se.InputAudioBufferTimeoutTriggered(
                audio_start_ms=start, audio_end_ms=now, item_id=item_id
            )
        )
        # As OpenAI does: commit what the buffer holds (if anything), then answer.
        if self.input.buffered_ms > 0:
            yield ev.Commit(self.input.buffered_ms, create_response=False)
        yield Respond()

    # Preemptive responses -----------------------------------------------------------------
    def preempt(self, start: StartBackend, item_id: str) -> bool:
        """Hold the preemptive response `start` (its turn to become `item_id`); True when its
        stream is to start now (`start_preempted`), False while the cascade's transcript of
        the turn so far is asked first."""
        held = Preemption(
            start, item_id, self._config.preempt_max_events, self._config.preempt_max_bytes
        )
        self.preemption = held
        self._out.note(PreemptNoted("started"))
        if self._config.transcripts_for_pipeline and self._config.transcriber:
            # The cascade hears the turn through its transcript: that first.
            self._preempt_tokens += 1
            held.transcript_token = self._preempt_tokens
            parts = self.input.peek()
            audio = [decode_input(p.audio, p.format) for p in parts]
            samples = np.concatenate(audio) if audio else np.zeros(0, np.float32)
            self._out.act(Transcribe(item_id, samples, "preempt", held.transcript_token))
            return False
        return True

    def start_preempted(self, known: dict[str, str]) -> None:
        """Start the held stream with the transcripts `known` (and the turn's own, if heard)."""
        held = self.preemption
        if held is None:
            return
        held.started = True
        if held.transcript is not None:
            known[held.item_id] = held.transcript
        self._out.act(dc_replace(held.start, transcripts=known))

    def hold(self, event: BackendEvent) -> list[TurnAsk] | None:
        """Backend output of the preemptive response is held until its turn is committed
        (None: the output is not the preemptive response's)."""
        held = self.preemption
        if held is None or (event.response_id, event.seq) != (held.response_id, held.seq):
            return None
        if isinstance(event, BackendFailed):
            return [ev.PreemptFailed("failed")]
        if not held.hold(event):
            return [ev.PreemptFailed("overflow")]
        return []

    def preempt_transcript(self, ready: TranscriptReady) -> PreemptHeard:
        """A `preempt` transcript: what the chart hears, whether the held stream starts now,
        and the committed turn's transcript when its response was adopted before it came."""
        held = self.preemption
        if held is not None and ready.token == held.transcript_token:
            if ready.transcript is None:
                return PreemptHeard(asks=[ev.PreemptFailed("failed")])
            if not held.started:
                held.transcript = ready.transcript
                return PreemptHeard(start=True)
            return PreemptHeard()
        if ready.token == self._adopted_transcript_token:
            # Adopted before it came: it is the committed turn's transcript.
            self._adopted_transcript_token = None
            return PreemptHeard(turn=dc_replace(ready, purpose="turn", token=0))
        return PreemptHeard()

    def preempted_transcript(self, item_id: str) -> PreemptedTranscript | None:
        """The committed turn `item_id` was transcribed for its preemptive response (about to
        be adopted): its transcript, or None when no preemption asked for one."""
        held = self.preemption
        if held is None or held.item_id != item_id or held.transcript_token is None:
            return None
        if held.transcript is None:
            self._adopted_transcript_token = held.transcript_token
        return PreemptedTranscript(held.transcript)

    def take_preemption(self) -> Preemption | None:
        held, self.preemption = self.preemption, None
        return held

    # Pause mode ----------------------------------------------------------------------------
    def _overlap(self, step: OverlapStep) -> Iterator[TurnAsk]:
        if step.ask is not None:
            audio = self.input.audio_since(self.overlap.audio_from_ms, MAX_PARTIAL_MS)
            item_id = self._promised or ""
            self._out.act(Transcribe(item_id, audio, "overlap", step.ask))
        self._out.act_all(step.timers)
        if step.judge:
            facts = self.overlap.facts()
            yield ev.OverlapHeard(facts.speech_ms, facts.heard, facts.waited)

    def overlap_transcribed(self, ready: TranscriptReady) -> Iterator[TurnAsk]:
        return self._overlap(self.overlap.transcribed(ready.token, ready.transcript))

    def overlap_decided(self, effect: fx.OverlapDecided) -> None:
        facts = self.overlap.facts()
        self._out.send(
            se.OverlapDecision(
                response_id=effect.response_id,
                decision=effect.decision,
                reason=effect.reason,
                speech_ms=facts.speech_ms,
                transcript=facts.transcript,
            )
        )
        self._out.act_all(self.overlap.close())
