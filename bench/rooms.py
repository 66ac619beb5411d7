"""Echo paths: what a loudspeaker's sound becomes by the time a microphone in the room hears it.

Rules:
1. A room is an impulse response: a direct path after `delay_ms` (the playout and capture
   latency plus the time of flight), then a reverberant tail of exponentially decaying noise
   whose energy falls by 60 dB in `rt60_s`, seeded (the same room every run).
2. `level_db` scales the echo against the near talker's speech level (`SPEECH_RMS`): 0 dB is
   an echo as loud as the user, -20 dB a quiet one.
3. `EchoPath` filters a stream chunk by chunk with the filter's state carried over, so the
   echo of a stream cut into any chunks is the echo of the whole.
No room-acoustics package: a synthetic response of this shape is what echo cancellers are
tested with (the tail's decay, not the room's geometry, is what makes an echo hard).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.signal import lfilter

Audio = npt.NDArray[np.float32]

# The near talker's level the corpora speak at (float, full scale 1.0): flite's speech RMS.
SPEECH_RMS = 0.1


@dataclass(frozen=True)
class Room:
    delay_ms: float = 120.0
    rt60_s: float = 0.3
    level_db: float = -6.0
    seed: int = 0

    def impulse_response(self, rate: int) -> Audio:
        """Rule 1, normalised so that speech through it keeps about its RMS at 0 dB."""
        rng = np.random.default_rng(self.seed)
        delay = round(self.delay_ms * rate / 1000)
        tail = int(self.rt60_s * rate)
        t = np.arange(tail) / rate
        decay = np.exp(-6.9 * t / self.rt60_s)  # 60 dB down at rt60
        response = rng.standard_normal(tail) * decay * 0.3
        response[0] = 1.0  # the direct path
        response /= np.sqrt(np.sum(response**2))
        out = np.zeros(delay + tail, np.float32)
        out[delay:] = response
        return out

    @property
    def gain(self) -> float:
        """Rule 2: the echo's gain for speech at the corpora's level."""
        return float(10 ** (self.level_db / 20))


class EchoPath:
    """Rule 3: a room applied to a stream."""

    def __init__(self, room: Room, rate: int) -> None:
        self.taps = room.impulse_response(rate) * room.gain
        self._state = np.zeros(self.taps.size - 1, np.float64)

    def __call__(self, played: Audio) -> Audio:
        out, self._state = lfilter(self.taps, [1.0], played.astype(np.float64), zi=self._state)
        return np.asarray(out, np.float32)
