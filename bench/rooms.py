"""Echo paths: what a loudspeaker's sound becomes by the time a microphone in the room hears it.

Rules:
1. A room is an impulse response computed by pyroomacoustics' image-source method (MIT): a
   shoebox room whose size is drawn from `seed` (3.5-7 x 3-5 x 2.7 m), walls absorbing what
   gives `rt60_s` by Sabine's formula, the loudspeaker at a seeded place 1 m high and the
   microphone `distance_m` from it: 0.1 m is a laptop's or a phone's own speaker, 0.5 m a
   kiosk or a robot, 1.5 m a speaker across a desk. The distance sets how much of the echo is
   the direct sound and how much the room's reverberation, which is what makes an echo hard
   to cancel.
2. The response starts at its direct path, after `delay_ms`: the playout and capture latency
   the client adds (the time of flight is inside the response).
3. `level_db` scales the echo against the near talker's speech level (`SPEECH_RMS`): the
   response is normalised to unit energy, so speech through it keeps about its RMS at 0 dB;
   0 dB is an echo as loud as the user, -20 dB a quiet one.
4. `EchoPath` filters a stream chunk by chunk with the filter's state carried over, so the
   echo of a stream cut into any chunks is the echo of the whole.
5. Deterministic and computed once per room and rate (the same room every run).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt
import pyroomacoustics as pra
from scipy.signal import lfilter

Audio = npt.NDArray[np.float32]

# The near talker's level the corpora speak at (float, full scale 1.0): flite's speech RMS.
SPEECH_RMS = 0.1
# Image sources up to this order: past it the reflections of a 0.6 s room are > 40 dB down
# and computing them costs seconds per room.
MAX_ORDER = 24
HEIGHT_M = 2.7


@dataclass(frozen=True)
class Room:
    delay_ms: float = 120.0
    rt60_s: float = 0.3
    level_db: float = -6.0
    seed: int = 0
    distance_m: float = 0.5

    def impulse_response(self, rate: int) -> Audio:
        """Rules 1-3: the response, unit energy times the echo's gain, after the delay."""
        return _response(self, rate)

    @property
    def gain(self) -> float:
        """Rule 3: the echo's gain for speech at the corpora's level."""
        return float(10 ** (self.level_db / 20))


@cache
def _response(room: Room, rate: int) -> Audio:
    rng = np.random.default_rng(room.seed)
    size = np.array([rng.uniform(3.5, 7.0), rng.uniform(3.0, 5.0), HEIGHT_M])
    absorption, order = pra.inverse_sabine(room.rt60_s, size)
    shoebox = pra.ShoeBox(
        size, fs=rate, materials=pra.Material(absorption), max_order=min(order, MAX_ORDER)
    )
    speaker = np.array([rng.uniform(1.0, size[0] - 1.0), rng.uniform(1.0, size[1] - 1.0), 1.0])
    angle = rng.uniform(0.0, 2 * np.pi)
    mic = speaker + room.distance_m * np.array([np.cos(angle), np.sin(angle), 0.0])
    shoebox.add_source(speaker)
    shoebox.add_microphone(np.clip(mic, 0.2, size - 0.2))
    shoebox.compute_rir()
    response = np.asarray(shoebox.rir[0][0], np.float64)
    # Rule 2: from the direct path on (pyroomacoustics puts its fractional-delay filter's
    # half length, 40 samples, before it).
    response = response[max(0, int(np.argmax(np.abs(response))) - 40) :]
    response /= np.sqrt(np.sum(response**2))
    delay = round(room.delay_ms * rate / 1000)
    out = np.zeros(delay + response.size, np.float32)
    out[delay:] = response * room.gain
    return out


class EchoPath:
    """Rule 4: a room applied to a stream."""

    def __init__(self, room: Room, rate: int) -> None:
        self.taps = room.impulse_response(rate)
        self._state = np.zeros(self.taps.size - 1, np.float64)

    def __call__(self, played: Audio) -> Audio:
        out, self._state = lfilter(self.taps, [1.0], played.astype(np.float64), zi=self._state)
        return np.asarray(out, np.float32)
