"""Double talk: is there more in the microphone than the answer's own echo?

The echo is the reference (what the client played) filtered by the room; the user's voice is
not. So the microphone's power in each band, frame by frame, is predicted from the reference's
recent power in the same band through a short non-negative filter learnt per session (the
room's delay, gain and reverberation as power sees them); a band where the microphone holds
clearly more than that prediction holds someone else. Power, not samples: a power envelope
survives what a sample-exact canceller cannot follow (a reverberant tail longer than AEC3's
filter, a playout that shifts by a tick), and it is learnt within a second of echo, where AEC3
can take seconds and, in a far, reverberant room, leaves a residual that silero scores as
speech (bench/echo_offline.py: that residual is most of the false barge-ins left).

Rules:
1. Per 10 ms frame of the input clock (echo/frames.py: at multiples of `FRAME` samples, an
   append's partial frame carried to the next) the microphone's and the reference's power in
   each of `BANDS` (Hz). The reference is the one the canceller is handed (far_end.py), so
   frame n of both is the same instant on the input clock.
2. The predicted echo in band b at frame n is sum over k < `TAPS` of h[b, k] R[b, n - k]: frames
   up to 640 ms back, which holds the client's playout and capture delay (the bench's rooms:
   40-400 ms, plus jitter) and the early reverberation. h starts at zero (nothing learnt: rule
   7's bound stands for it) and learns by normalised LMS from every frame where the reference
   had sound, except a frame whose microphone is `FREEZE` times the filter's prediction or more
   once the band is trained, rule 7's bound before (double talk: the user's voice must not be
   learnt as echo). h stays >= 0. A band is trained after `TRAINED` frames in which its
   reference had `SOUND` and its microphone was `HEARD` over its own floor (the echo had
   arrived: a room's delay passes before it does) and its filter fits the echo (rule 8); the
   user is judged against the learnt filter from then on, rule 7's bound before.
3. `excess_db(start_ms, end_ms)`: over a VAD chunk's frames, the most any band's microphone
   power exceeds its predicted echo, in dB (power summed over the frames first). None before
   any of those frames was heard.
4. Bounded: `FRAMES` frames kept (a ring: frame i in row i % FRAMES), a fixed filter per
   band, whatever the session's length.
5. A trained band's prediction is also at least its echo gain times its loudest reference
   power in the window, where the echo gain is the most the microphone held over that
   loudest reference in the frames that trained the band (rule 2's), when that gain is at
   most `QUIET_ROOM` (-7 dB: the room returns the answer well under its own level). In a
   far, reverberant room the learnt filter can settle on the wrong delay and too low a gain
   (the power envelopes of speech are alike from one lag to the next), then stops learning
   the echo it under-predicts (rule 2's freeze), and the next loud syllable is 10-20 dB over
   it; that bound does not depend on the filter's delays, and a user in a room this quiet is
   about as loud as the answer itself, far over it. In a louder room the same bound would
   hide a user as loud as the echo, so it is left out there. Measured in memory
   (bench/echo_offline.py --seeds 13 --kinds echo,interruption: 104 echo answers per level,
   both voices): false barge-ins at -20/-10/-6/-3/0 dB 3/6/1/1/2 -> 0/1/0/1/2, interruptions
   missed 8/513 -> 9/518, 0.5 s into the answer 5/174 missed either way, onset -> interrupt
   median 245 -> 248 ms (the same replay, offline, with the gate at -8 / -10 / -13 dB:
   false barge-ins 0/1/1/1/2, 0/2/1/1/2, 0/5/1/1/2; with the bound in every room, its gain
   capped at -15 dB, 0/1/0/1/2 but 7 of 174 missed 0.5 s in).
6. Rules 2 and 5 run frame by frame (NLMS is sequential: each frame's prediction is the
   filter learnt up to it), compiled (numba, `_frames`): in Python and numpy a frame's few
   dozen small array operations cost 30-60 us, 3-6 ms of the event loop per second of each
   session's input with echo on; compiled, about 1 us, so it stays on the loop (core_echo
   rule 12 says why not on the DSP thread) and keeps the GIL (releasing it for a microsecond
   would cost the loop a wait for it back). The first call compiles it (about a second,
   cached on disk after); `compile_now` does it ahead, at a server's start.
7. Until a band is trained its prediction is a bound, not the filter: at least the loudest
   reference power in the window (an echo as loud as the answer at its loudest) until the band has
   heard `GAIN_FRAMES` frames of echo, then `GAIN_MARGIN` times the echo gain heard so far
   (rule 5's: the most its microphone held over that loudest reference) times it, never
   more than the loudest. The echo's first syllables, and a band the answer has just begun
   to fill, are not taken for the user; and a user who speaks before the band has learnt the
   room (half a second into a first answer: most of bench.echo_offline's interruptions 0.5 s
   in) is over the bound in a quiet room, so rule 2's freeze keeps their voice out of the
   filter. With the loudest reference as the bound until trained, and no freeze before it,
   the filter learnt such a user as echo while training (their first 640 ms 0-3 dB over it
   in a -20 dB room) and then held them back. Measured (bench.echo_offline --seeds 13, both
   voices, -20 to 0 dB): onset -> interrupt median 197 -> 175 ms (0.5 s into the answer, on
   its replay: 526 -> 448 ms), false barge-ins 0/0/0/1/1 -> 0/1/0/1/1 of 104, interruptions
   missed 2 -> 3 of 519; the filter starting at zero without this bound and freeze: 175 ms,
   but 3 of 104 at -3 and at 0 dB.
8. A band's 30th frame of echo trains it only while its filter fits the echo it learns from:
   `misfit`, the most the microphone held over the filter's own prediction in those frames,
   falling 1 dB a frame of echo, must be under `MISFIT` (3 dB); until then the band keeps
   rule 7's bound. A filter learning from zero has not caught up with a loud, dry room after
   30 frames of an answer whose syllables vary in loudness, and once trained it would judge
   the next loud syllable against a prediction 6-9 dB short (bench.echo_offline,
   omni/echo/0dB-400ms-rt0.2-0.1m, 0.8 s into the answer); rule 2's freeze then keeps it
   from learning that syllable. The misfit's memory starts at the band's first frames of
   echo, when the filter predicts nothing (the microphone about 100 dB over it), so in
   practice a band trains after about a second of echo, not 300 ms, and rule 7's bound judges
   the user until then (tests/orchestrator/session/test_core_echo.py trains on two seconds).
   Measured with core_echo's `RELAX_DB` at 7 dB (bench.echo_offline --seeds 13 --kinds
   echo,interruption, 104 echo answers per level, both voices; against the filter that
   started at an echo as loud as the answer, with 9 dB): false barge-ins at -20/-10/-6/-3/0
   dB 0/0/0/1/1 -> 0/1/0/1/0, interruptions missed 2/518 -> 3/519, onset -> interrupt median
   197 -> 163 ms (the echo-free one: 91), 0.5 s into the answer 174 -> 173 of 174 (the one
   lost, a flite voice at 0 dB, was heard by neither: the canceller left nothing of it, and
   the old filter's cut came 0.4 s after the question had ended, on the echo). The page
   (bench.echo_page --runs 25, quiet runs): echo-alone answers cut 0/50 -> 0/50 and 1/50 (two
   runs; the one at -10 dB), interruptions missed 2/50 -> 1/50 in each, onset -> page cut
   median 194 -> 138 and 184 ms at -10 dB, 260 -> 244 and 219 ms at 0 dB.
Pure: arrays in, numbers out; no clock.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from numba import njit

from orchestrator.session.echo.frames import FRAME, Frames
from orchestrator.session.echo.processors import Pcm

__all__ = ["DoubleTalk"]

Powers = npt.NDArray[np.float64]

RATE = 24000
BANDS = ((100, 400), (400, 800), (800, 1600), (1600, 3200), (3200, 6400), (6400, 11000))
TAPS = 64  # rule 2: 640 ms
STEP = 0.5  # rule 2: the NLMS step
TRAINED = 30  # rule 2: frames in which a band's reference had sound (`SOUND`)
# Rule 7: frames of echo a band hears before its gain bounds it, and that bound's margin (6 dB).
GAIN_FRAMES = 15
GAIN_MARGIN = 4.0
# Rule 8: a band trains only while its filter has predicted its recent echo within 3 dB; the
# misfit's memory falls 1 dB a frame of echo.
MISFIT = 2.0
MISFIT_DECAY = 0.8
SOUND = 1e-6  # a band's power (float audio, full scale 1): -60 dBFS
HEARD = 10.0  # rule 2: 10 dB over the microphone's floor in that band
FLOOR_RISE = 1.002  # the floor follows the minimum, rising 0.9 dB/s
FREEZE = 4.0  # rule 2: 6 dB over the prediction
FRAMES = 512  # rule 4: 5 s
QUIET_ROOM = 0.2  # rule 5: -7 dB
QUIET = 1e-14  # a reference band's squared power (float audio, full scale 1) that plays nothing
# Added to both sides of rule 3's ratio: a band's power under about -90 dBFS (the room's own
# noise in a band the answer leaves empty) is no one's voice.
FLOOR = 1e-9

_FREQS = np.fft.rfftfreq(FRAME, 1 / RATE)
_MASKS = np.stack([(_FREQS >= lo) & (_FREQS < hi) for lo, hi in BANDS]).astype(np.float64)
_WINDOW = np.hanning(FRAME)


def _band_powers(frames: Powers) -> Powers:
    """Rule 1: each row of `frames` (one 10 ms frame) as its power per band."""
    spectrum = np.abs(np.fft.rfft(frames * _WINDOW, axis=1)) ** 2 / FRAME
    return np.ascontiguousarray(spectrum @ _MASKS.T, np.float64)


@njit(cache=True)  # type: ignore[untyped-decorator]
def _frames(
    mic: Powers,
    ref: Powers,
    h: Powers,
    far: Powers,
    learnt: Powers,
    floor: Powers,
    gain: Powers,
    misfit: Powers,
    predicted: Powers,
) -> None:
    """Rules 2 and 5 for frames `mic[n]`, `ref[n]` (bands each), in order: each frame's
    predicted echo into `predicted[n]`; the filter `h`, the reference's recent powers `far`
    (newest first), the training counts, floors, gains and misfits updated in place."""
    count, bands = mic.shape
    taps = far.shape[1]
    for n in range(count):
        every_band_trained = True
        for b in range(bands):
            if learnt[b] < TRAINED:
                every_band_trained = False
        for b in range(bands):
            recent = far[b]
            for k in range(taps - 1, 0, -1):
                recent[k] = recent[k - 1]
            recent[0] = ref[n, b]
            heard = mic[n, b]
            echo = 0.0
            energy = 0.0
            loudest = 0.0
            for k in range(taps):
                echo += h[b, k] * recent[k]
                energy += recent[k] * recent[k]
                loudest = max(loudest, recent[k])
            floor[b] = min(floor[b] * FLOOR_RISE, heard)
            trained = learnt[b] >= TRAINED
            expected = echo
            if not trained:  # rule 7: a bound until the band is trained
                if learnt[b] >= GAIN_FRAMES:
                    expected = min(1.0, GAIN_MARGIN * gain[b]) * loudest
                else:
                    expected = max(expected, loudest)
            elif gain[b] <= QUIET_ROOM:  # rule 5
                expected = max(expected, gain[b] * loudest)
            predicted[n, b] = expected
            # Rule 2: learn, except from double talk: over the filter once trained, over rule
            # 7's bound before (a user who speaks while the band learns the room).
            if energy <= QUIET or heard >= FREEZE * (echo if trained else expected):
                continue
            if not every_band_trained and ref[n, b] > SOUND and heard > HEARD * floor[b]:
                if trained:
                    learnt[b] += 1.0  # the echo is heard in this frame
                else:
                    # Rule 8: the filter's own fit to the echo it learns from.
                    misfit[b] = max(misfit[b] * MISFIT_DECAY, heard / (echo + QUIET))
                    if learnt[b] + 1.0 < TRAINED or misfit[b] < MISFIT:
                        learnt[b] += 1.0
                    # Rule 5: the echo's gain over the loudest reference.
                    gain[b] = max(gain[b], heard / (loudest + QUIET))
            step = STEP * ((heard - echo) / (energy + QUIET))
            for k in range(taps):
                h[b, k] = max(0.0, h[b, k] + step * recent[k])


def compile_now() -> None:
    """Rule 6: compile (or load from the cache) `_frames` now, not at a session's first
    frame."""
    DoubleTalk().add(0, np.zeros(FRAME, np.int16), np.zeros(FRAME, np.int16))


class DoubleTalk:
    def __init__(self) -> None:
        bands = len(BANDS)
        self._h = np.zeros((bands, TAPS))  # rule 2, newest tap first
        self._far = np.zeros((bands, TAPS))  # the reference's recent powers, newest first
        self._learnt = np.zeros(bands)
        self._floor = np.full(bands, np.inf)  # the microphone's noise floor per band
        # Rule 5: the most each band's microphone held over its loudest reference while training.
        self._gain = np.zeros(bands)
        # Rule 8: how far under the echo each band's filter has lately predicted it.
        self._misfit = np.zeros(bands)
        self._frames = Frames()  # rule 1
        # Rules 3-4: frame i's microphone and predicted echo in row i % FRAMES, and the frame
        # each row holds (-1: none yet).
        self._mic = np.zeros((FRAMES, bands))
        self._predicted = np.zeros((FRAMES, bands))
        self._held = np.full(FRAMES, -1, np.int64)

    @property
    def trained(self) -> bool:
        """Rule 2: every band has heard `TRAINED` frames of echo."""
        return bool((self._learnt >= TRAINED).all())

    @property
    def frames_held(self) -> int:
        """Rule 4: how many frames' powers are kept."""
        return int(np.count_nonzero(self._held >= 0))

    def add(self, start: int, near: Pcm, far: Pcm) -> None:
        """`near` (the microphone) and `far` (its reference), the same length, began at input
        sample `start` (rule 1)."""
        framed = self._frames.add(start, near, far)
        whole = framed.near.shape[0]
        for first in range(0, whole, FRAMES):  # at most FRAMES at once: the ring's rows
            count = min(FRAMES, whole - first)
            # Both sides in one transform: rows [0, count) the microphone's, then the reference's.
            both = np.concatenate(
                [framed.near[first : first + count], framed.far[first : first + count]]
            )
            powers = _band_powers(both)
            mic, ref = powers[:count], powers[count:]
            predicted = np.empty_like(mic)
            _frames(
                mic,
                ref,
                self._h,
                self._far,
                self._learnt,
                self._floor,
                self._gain,
                self._misfit,
                predicted,
            )
            at = framed.first + first
            rows = np.arange(at, at + count) % FRAMES
            self._held[rows] = np.arange(at, at + count)
            self._mic[rows] = mic
            self._predicted[rows] = predicted

    def excess_db(self, start_ms: int, end_ms: int) -> float | None:
        """Rule 3."""
        first, last = start_ms * RATE // 1000 // FRAME, (end_ms * RATE // 1000 - 1) // FRAME
        frames = np.arange(first, last + 1)
        rows = frames % FRAMES
        rows = rows[self._held[rows] == frames]
        if not rows.size:
            return None
        mic = self._mic[rows].sum(axis=0)
        predicted = self._predicted[rows].sum(axis=0)
        ratio = (mic + FLOOR) / (predicted + FLOOR)
        return float(10 * np.log10(ratio.max()))
