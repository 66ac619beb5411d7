"""The session's input side: the input buffer, the turn detector and the idle timer.

Pure (caller owns the clock: numbers in, decisions out); `SessionCore` routes what it says to
the session chart. Rules:
- Turn detection runs on the VAD's probabilities for the chunks this side cut from appends
  (`append` returns the `DetectSpeech` to ask for); `hear` turns an answer into speech
  started/stopped events. A chunk that ends at or before the last commit or clear opens no
  turn: that audio went with an earlier turn, though the VAD's answer came after it.
- Every commit or clear resets the detector (`reset`): a turn in progress never outlives the
  buffer that held it.
- With turn detection off (`configure(None)`) nothing is cut and late answers are ignored;
  switched on again, audio from before does not start a turn.
- Candidate pauses (`VadPaused` / `VadResumed`) are cut only when someone listens to them:
  semantic_vad (its model judges each) or a preemptive response (one starts at each); the
  caller says which by `pause_ms`.
- A VAD outage is told once per outage (`vad_down` is True for its first report only); any
  answer ends the outage.
- The idle timer is the detector's (OpenAI's `idle_timeout_ms`): armed for when a completed
  reply's audio will have finished playing, ignored while the user speaks, disarmed by speech
  and by a new response; each arming has a token, so a stale expiry is recognised.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from orchestrator.protocol.session_config import AudioFormat, TurnDetection
from orchestrator.session.actions import ArmTimer, CancelTimer, DetectSpeech
from orchestrator.session.audio import decode_input
from orchestrator.session.history import conversation as conv
from orchestrator.session.input_buffer import InputBuffer
from orchestrator.session.inputs import Samples, SpeechProbabilities, VadEvent, VadSpeechStopped
from orchestrator.session.turns.detection import TurnDetector


class UserInput:
    __slots__ = (
        "_buffer",
        "_committed_to_ms",
        "_idle_from_input_ms",
        "_idle_token",
        "_vad_down",
        "detector",
    )

    def __init__(self, max_bytes: int, vad: TurnDetection | None) -> None:
        self._buffer = InputBuffer(max_bytes)
        self.detector: TurnDetector | None = TurnDetector(vad) if vad is not None else None
        self._committed_to_ms = 0
        self._vad_down = False
        self._idle_token: int | None = None
        self._idle_from_input_ms = 0

    # The buffer -----------------------------------------------------------------------
    @property
    def buffered_ms(self) -> int:
        return self._buffer.buffered_ms

    @property
    def clock_ms(self) -> int:
        return self._buffer.clock_ms

    def append(self, audio: bytes, fmt: AudioFormat) -> DetectSpeech | None:
        """Raises `BufferFull` (the buffer unchanged) when the audio does not fit."""
        chunks = self._buffer.append(audio, fmt, detect=self.detector is not None)
        if chunks is None:
            return None
        return DetectSpeech(chunks.chunks, chunks.end_ms)

    def audio_since(self, from_ms: int, max_ms: int) -> Samples:
        """16 kHz samples of the buffered audio from `from_ms` on the input clock (at most the
        latest `max_ms`), the buffer unchanged: what pause mode transcribes of an overlap."""
        part = self._buffer.tail(min(max(self.clock_ms - from_ms, 0), max_ms))
        if part is None:
            return np.zeros(0, np.float32)
        return decode_input(part.audio, part.format)

    @property
    def speaking(self) -> bool:
        return self.detector is not None and self.detector.in_speech

    @property
    def voiced_from_ms(self) -> int:
        return self.detector.voiced_from_ms if self.detector is not None else 0

    @property
    def voiced_to_ms(self) -> int:
        return self.detector.voiced_to_ms if self.detector is not None else 0

    def peek(self) -> tuple[conv.InputAudio, ...]:
        """The buffered audio, the buffer unchanged (what a preemptive response hears)."""
        return self._buffer.parts()

    def take(self) -> tuple[conv.InputAudio, ...]:
        parts = self._buffer.take()
        self.reset()
        return parts

    def clear(self) -> None:
        self._buffer.clear()
        self.reset()

    # Turn detection -------------------------------------------------------------------
    def configure(
        self, vad: TurnDetection | None, pause_ms: int | None = None
    ) -> CancelTimer | None:
        """A `session.update`; turning detection off disarms the idle timer."""
        if vad is None:
            cancel = self.disarm_idle()
            self.detector = None
            return cancel
        if self.detector is None:
            self.detector = TurnDetector(vad, pause_ms=pause_ms)
            # Audio before detection was on is not a turn's start.
            self.detector.reset(self.clock_ms)
        else:
            self.detector.update(vad, pause_ms=pause_ms)
        return None

    @property
    def silence_ms(self) -> int:
        return self.detector.silence_ms if self.detector is not None else 0

    def end_turn(self) -> VadSpeechStopped | None:
        """semantic_vad's model ended the turn during a silence run (see TurnDetector)."""
        return self.detector.end_turn() if self.detector is not None else None

    def limit_silence(self, limit_ms: int | None) -> None:
        """semantic_vad's fallback: the silence rule at `limit_ms` (None: the longest wait)."""
        if self.detector is not None:
            self.detector.limit_ms = limit_ms

    def hear(self, answer: SpeechProbabilities) -> Iterator[VadEvent]:
        """The answer's events, lazily: the caller acts on each (a commit moves the point
        before which audio opens no turn) before the next chunk is heard."""
        self._vad_down = False
        for probability, end_ms in zip(answer.probabilities, answer.chunk_end_ms, strict=True):
            detector = self.detector
            if detector is None:
                return  # detection was turned off while these chunks were in flight
            last = detector.last_chunk_end_ms
            if (last is not None and end_ms <= last) or end_ms <= self._committed_to_ms:
                continue  # from before detection was (re)configured, or already committed
            yield from detector.feed(probability, end_ms)

    def vad_down(self) -> bool:
        """True when this is the outage's first report: the one to tell the client."""
        first = not self._vad_down
        self._vad_down = True
        return first

    def reset(self) -> None:
        """After a commit or clear: a turn in progress ends with the buffer that held it."""
        self._committed_to_ms = self.clock_ms
        if self.detector is not None:
            self.detector.reset(self._committed_to_ms)

    # The idle timer -------------------------------------------------------------------
    @property
    def idle_from_input_ms(self) -> int:
        """Where the input clock stood when the idle timer was armed."""
        return self._idle_from_input_ms

    def arm_idle(self, played_at_ms: int, token: int) -> ArmTimer | None:
        """Arm for `played_at_ms` (the reply's audio will have finished playing then)."""
        detector = self.detector
        if detector is None or detector.config.idle_timeout_ms is None:
            return None
        detector.arm_idle(played_at_ms)
        deadline = detector.idle_deadline_ms
        if deadline is None:
            return None  # the user is speaking: that turn is the answer
        self._idle_token = token
        self._idle_from_input_ms = self.clock_ms
        return ArmTimer("idle", deadline, token)

    def disarm_idle(self) -> CancelTimer | None:
        if self._idle_token is None:
            return None
        self._idle_token = None
        if self.detector is not None:
            self.detector.disarm_idle()
        return CancelTimer("idle")

    def idle_fired(self, token: int, now_ms: int) -> bool:
        """True exactly once per arming, when its expiry is current and due."""
        if token != self._idle_token or self.detector is None:
            return False  # stale: a newer arming or a disarm came first
        if not self.detector.idle(now_ms):
            return False
        self._idle_token = None
        return True
