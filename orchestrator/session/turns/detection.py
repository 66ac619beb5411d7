"""Server VAD turn segmentation: silero speech probabilities -> speech started/stopped events.

The contract names `server_vad` and its fields but not their timing, and says: where it is
silent, behave as the OpenAI Realtime API does. These rules follow OpenAI's API reference.

Rules:
- Input: one speech probability per silero chunk (512 samples at 16 kHz, 32 ms), in order,
  with the chunk's end on the session's input clock (ms of client audio since session start).
  A chunk spans [max(previous end, end - 32), end). Ends must strictly increase.
- Speech starts on the first chunk with probability >= `threshold`. One such chunk is enough:
  OpenAI's server_vad has no minimum speech duration and the contract adds none.
- `audio_start_ms` = start of that chunk - `prefix_padding_ms` ("includes the
  prefix_padding_ms configured in the Session"), never below 0 and never before the end of the
  previous turn or the last `reset` point: that audio is already committed, it cannot open a
  new turn.
- Hysteresis (silero's own `VADIterator` rule, which the model's defaults are tuned for): while
  in speech, a chunk counts as silence only below `threshold - 0.15` (at least 0.01). A chunk at
  or above `threshold` is speech and cancels any silence run. A chunk in between is neutral: it
  starts no silence run, and does not cancel a running one. Without the band, probabilities that
  hover around the threshold at the tail of a word would restart the silence run again and
  again; with a band that cancels silence, steady noise just under the threshold would hold a
  turn open forever.
- A silence run starts at the start of its first chunk (the moment speech ended). Speech stops
  at the first chunk, speech-free since, whose end is >= `silence_duration_ms` after that.
- `audio_end_ms` is, by default, the end of that chunk: OpenAI documents it as "the end of
  audio sent to the model, and thus includes the min_silence_duration_ms configured in the
  Session". `audio_end="speech_end"` reports the start of the silence run instead (the end of
  speech proper); `last_speech_end_ms` holds it in either mode.
- Events alternate started/stopped, times never decrease, and audio_end_ms >= audio_start_ms.
- `reset(at_ms)` (after a commit or clear) drops a turn in progress without an event and moves
  the floor for the next `audio_start_ms` to at_ms.
- Voiced span (pause mode measures overlapping speech with it): `voiced_from_ms` is the start
  of the turn's onset chunk (no prefix padding), `voiced_to_ms` the end of its latest chunk at
  or above `threshold`.
- Candidate pauses (semantic_vad and preemptive responses, `pause_ms` set): once per silence
  run, at the first chunk whose end is >= `pause_ms` after the run's start and before speech
  stops, `VadPaused(speech_end_ms, at_ms)`. A speech chunk that ends a run which had paused
  says `VadResumed(at_ms)` (its start): the user spoke on. No pause event without `pause_ms`.
- The silence that stops speech is `silence_duration_ms`, or the caller's `limit_ms` when
  lower (semantic_vad's fallback to the silence rule while its model is down). `end_turn()`
  stops speech now, as the silence rule would have at the last chunk (semantic_vad's model
  said the turn is over); only during a silence run, else it does nothing.
- Idle timeout (`idle_timeout_ms`): OpenAI arms it when the last response's audio has finished
  playing and fires it when no speech started for that long. `arm_idle(at_ms)` arms it, any
  speech start disarms it, `idle(now_ms)` says once whether it fired. The caller owns the
  clock; the detector only compares numbers.
"""

from __future__ import annotations

from typing import Final, Literal

from orchestrator.protocol.session_config import TurnDetection
from orchestrator.session.inputs import (
    VadEvent,
    VadPaused,
    VadResumed,
    VadSpeechStarted,
    VadSpeechStopped,
)

__all__ = ["CHUNK_MS", "HYSTERESIS", "AudioEnd", "TurnDetector", "silence_threshold"]

CHUNK_MS: Final = 32  # silero's 512-sample window at 16 kHz
HYSTERESIS: Final = 0.15  # silero VADIterator: neg_threshold = threshold - 0.15
_MIN_SILENCE_THRESHOLD: Final = 0.01  # silero's floor, so a low threshold still ends speech

AudioEnd = Literal["after_silence", "speech_end"]


def silence_threshold(threshold: float) -> float:
    """Probability below which a chunk counts as silence while in speech."""
    return max(threshold - HYSTERESIS, _MIN_SILENCE_THRESHOLD)


class TurnDetector:
    __slots__ = (
        "_audio_end",
        "_config",
        "_floor_ms",
        "_idle_from",
        "_in_speech",
        "_last_end",
        "_last_speech_end",
        "_limit_ms",
        "_pause_ms",
        "_paused",
        "_silence_from",
        "_speech_start",
        "_voiced_from",
        "_voiced_to",
    )

    def __init__(
        self,
        config: TurnDetection,
        *,
        audio_end: AudioEnd = "after_silence",
        pause_ms: int | None = None,
    ) -> None:
        self._config = config
        self._pause_ms = pause_ms
        self._limit_ms: int | None = None
        self._paused = False
        self._audio_end: AudioEnd = audio_end
        self._in_speech = False
        self._speech_start: int | None = None
        self._silence_from: int | None = None
        self._last_speech_end: int | None = None
        self._last_end: int | None = None
        self._floor_ms = 0
        self._idle_from: int | None = None
        self._voiced_from = 0
        self._voiced_to = 0

    @property
    def config(self) -> TurnDetection:
        return self._config

    def update(self, config: TurnDetection, *, pause_ms: int | None = None) -> None:
        """New settings from `session.update`; the clock and a turn in progress carry on."""
        self._config = config
        self._pause_ms = pause_ms

    @property
    def limit_ms(self) -> int | None:
        return self._limit_ms

    @limit_ms.setter
    def limit_ms(self, value: int | None) -> None:
        self._limit_ms = value

    @property
    def silence_ms(self) -> int:
        """How long the current silence run has lasted (0 outside one)."""
        if not self._in_speech or self._silence_from is None or self._last_end is None:
            return 0
        return self._last_end - self._silence_from

    def _stop_after_ms(self) -> int:
        limit = self._config.silence_duration_ms
        return limit if self._limit_ms is None else min(limit, self._limit_ms)

    @property
    def in_speech(self) -> bool:
        return self._in_speech

    @property
    def speech_start_ms(self) -> int | None:
        """`audio_start_ms` of the turn in progress, None between turns."""
        return self._speech_start

    @property
    def last_speech_end_ms(self) -> int | None:
        """Where the speech of the last stopped turn ended (its silence run's start)."""
        return self._last_speech_end

    @property
    def voiced_from_ms(self) -> int:
        """Start of the current (or last) turn's onset chunk, prefix padding not included."""
        return self._voiced_from

    @property
    def voiced_to_ms(self) -> int:
        """End of the current (or last) turn's latest speech chunk."""
        return self._voiced_to

    @property
    def last_chunk_end_ms(self) -> int | None:
        return self._last_end

    def feed(self, prob: float, chunk_end_ms: int) -> list[VadEvent]:
        if self._last_end is not None and chunk_end_ms <= self._last_end:
            raise ValueError(
                f"chunk_end_ms {chunk_end_ms} does not follow the previous {self._last_end}"
            )
        start = max(chunk_end_ms - CHUNK_MS, 0)
        if self._last_end is not None:
            start = max(start, self._last_end)
        self._last_end = chunk_end_ms
        cfg = self._config

        # A NaN (a broken VAD reply) fails both comparisons below: it is neutral, like the band.
        if prob >= cfg.threshold:
            self._silence_from = None
            self._voiced_to = chunk_end_ms
            if self._in_speech:
                if self._paused:
                    self._paused = False
                    return [VadResumed(at_ms=start)]
                return []
            self._voiced_from = start
            self._in_speech = True
            self._idle_from = None
            self._speech_start = max(start - cfg.prefix_padding_ms, self._floor_ms)
            return [VadSpeechStarted(audio_start_ms=self._speech_start)]

        if not self._in_speech:
            return []
        if self._silence_from is None and prob < silence_threshold(cfg.threshold):
            self._silence_from = start
        speech_end = self._silence_from
        if speech_end is None:
            return []
        if chunk_end_ms - speech_end < self._stop_after_ms():
            pause = self._pause_ms
            if pause is not None and not self._paused and chunk_end_ms - speech_end >= pause:
                self._paused = True
                return [VadPaused(speech_end_ms=speech_end, at_ms=chunk_end_ms)]
            return []
        return [self._stop(chunk_end_ms)]

    def end_turn(self) -> VadSpeechStopped | None:
        """Stop speech at the last chunk fed, as the silence rule would: the caller decided
        the turn is over during this silence run. Nothing outside a silence run."""
        if not self._in_speech or self._silence_from is None or self._last_end is None:
            return None
        return self._stop(self._last_end)

    def _stop(self, chunk_end_ms: int) -> VadSpeechStopped:
        speech_end = self._silence_from
        assert speech_end is not None
        self._in_speech = False
        self._paused = False
        self._speech_start = None
        self._silence_from = None
        self._last_speech_end = speech_end
        # The turn is committed up to the point of decision; the next one starts after it.
        self._floor_ms = chunk_end_ms
        end = chunk_end_ms if self._audio_end == "after_silence" else speech_end
        return VadSpeechStopped(audio_end_ms=end)

    def reset(self, at_ms: int | None = None) -> None:
        """Forget a turn in progress (no event); the next turn starts at or after `at_ms`.

        `at_ms` is where the buffer was committed or cleared on the input clock, which can be
        ahead of the last chunk fed (the VAD trails the client by a chunk and the resampler's
        delay); by default the last chunk's end.
        """
        self._in_speech = False
        self._paused = False
        self._speech_start = None
        self._silence_from = None
        point = at_ms if at_ms is not None else self._last_end
        if point is not None:
            self._floor_ms = max(self._floor_ms, point)

    def arm_idle(self, at_ms: int) -> None:
        """Start the idle timer (the last response's audio finished playing at `at_ms`).

        Ignored while the user is speaking: the turn in progress is the answer.
        """
        if not self._in_speech:
            self._idle_from = at_ms

    def disarm_idle(self) -> None:
        self._idle_from = None

    @property
    def idle_armed_ms(self) -> int | None:
        return self._idle_from

    @property
    def idle_deadline_ms(self) -> int | None:
        """When `idle` will fire if nothing changes, so the caller knows how long to sleep."""
        timeout = self._config.idle_timeout_ms
        if timeout is None or self._idle_from is None:
            return None
        return self._idle_from + timeout

    def idle(self, now_ms: int) -> bool:
        """True exactly once per arming, when `idle_timeout_ms` has passed without speech."""
        deadline = self.idle_deadline_ms
        if deadline is None or now_ms < deadline:
            return False
        self._idle_from = None
        return True
