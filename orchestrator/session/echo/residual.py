"""What is left of the echo after the canceller, told from a user who speaks over it.

AEC3 leaves a residual while it learns a room (the first seconds of an answer, longer in a
reverberant one) and when the echo path moves (the client's playout shifts after an
underrun); silero scores some of it as speech, now and then above 0.85 (bench/echo.py's
offline runs: 15-35% of answers through 0.2-0.6 s rooms). A residual is never louder than the
echo it is left of, and over an echo the user must be heard at all, so must be about as loud
as it: the level tells them apart where the probability cannot.

Rules:
1. `InputLevels` keeps the energy of the microphone's audio and of the cleaned audio per
   10 ms frame of the input clock (frames at multiples of `FRAME` samples, an append's
   partial frames added up), for the last `FRAMES` frames. `level(start_ms, end_ms)` is the
   mean power of the frames a VAD chunk covers, in dBFS, (microphone, cleaned); None before
   any of them was heard.
2. `EchoLevel` is the echo's level at the microphone: the `PERCENTILE`th percentile of the
   microphone's level over the last `HISTORY` chunks in which the reference had just played
   and the VAD heard no speech (nothing but the echo, the room and its residual). None until
   `MIN_HISTORY` such chunks: a session's first answer has no estimate for its first
   quarter second.
3. Over the echo, a chunk is speech only if its cleaned level is at least the echo's level
   less `MARGIN_DB` (`loud_enough`). The margin takes in a user who speaks a few dB under the
   echo and what the canceller takes of a user over it (2.8 dB median in double talk, bench
   echo_canceller_choice); a residual is almost always more than that under the echo itself.
4. Bounded: a fixed number of frames and chunks, whatever the session's length.
Pure: numbers in and out; no clock.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from orchestrator.session.echo.processors import Pcm

__all__ = ["EchoLevel", "InputLevels"]

RATE = 24000
FRAME = RATE // 100  # 10 ms
FRAMES = 512  # rule 1: 5 s of input
HISTORY = 94  # rule 2: 3 s of 32 ms chunks
MIN_HISTORY = 8
PERCENTILE = 80.0
MARGIN_DB = 6.0
FULL_SCALE = 32768.0**2
SILENT_DB = -120.0


class InputLevels:
    """Rule 1."""

    def __init__(self) -> None:
        # frame index -> [microphone energy, cleaned energy, samples]
        self._frames: dict[int, list[float]] = {}
        self._order: deque[int] = deque()

    def add(self, start: int, raw: Pcm, clean: Pcm) -> None:
        """`raw` and its cleaned `clean` (the same length) began at input sample `start`."""
        at = 0
        while at < raw.size:
            index = (start + at) // FRAME
            n = min(raw.size - at, (index + 1) * FRAME - (start + at))
            frame = self._frames.get(index)
            if frame is None:
                frame = self._frames[index] = [0.0, 0.0, 0.0]
                self._order.append(index)
                while len(self._order) > FRAMES:
                    del self._frames[self._order.popleft()]
            frame[0] += float(np.sum(raw[at : at + n].astype(np.float64) ** 2))
            frame[1] += float(np.sum(clean[at : at + n].astype(np.float64) ** 2))
            frame[2] += n
            at += n

    def level(self, start_ms: int, end_ms: int) -> tuple[float, float] | None:
        first, last = start_ms * RATE // 1000 // FRAME, (end_ms * RATE // 1000 - 1) // FRAME
        sums = [self._frames[i] for i in range(first, last + 1) if i in self._frames]
        count = sum(f[2] for f in sums)
        if not count:
            return None
        return _db(sum(f[0] for f in sums) / count), _db(sum(f[1] for f in sums) / count)


class EchoLevel:
    """Rules 2 and 3."""

    def __init__(self) -> None:
        self._history: deque[float] = deque(maxlen=HISTORY)
        # The level as of the last `echo_only`: asked once or twice a chunk (rule 8 and the
        # chunk's verdict), it changes only with the history.
        self._level: float | None = None

    def echo_only(self, microphone_db: float) -> None:
        """A chunk in which only the echo (and the room) was heard."""
        self._history.append(microphone_db)
        if len(self._history) >= MIN_HISTORY:
            self._level = _percentile(sorted(self._history), PERCENTILE)

    @property
    def level_db(self) -> float | None:
        return self._level

    def loud_enough(self, cleaned_db: float, margin_db: float = MARGIN_DB) -> bool:
        level = self.level_db
        return level is None or cleaned_db >= level - margin_db


def _percentile(ordered: list[float], percent: float) -> float:
    """numpy's default ("linear") percentile of an ordered list: the same number, without
    numpy's overhead on a list of a hundred (it was most of the echo path's Python time)."""
    at = (len(ordered) - 1) * percent / 100
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def _db(power: float) -> float:
    return SILENT_DB if power <= 0 else max(SILENT_DB, 10 * float(np.log10(power / FULL_SCALE)))
