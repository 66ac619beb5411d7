"""Echo cancellation and noise suppression of one session's input audio (issue 26): WebRTC's
AEC3 and noise suppressor, through pywebrtc-audio, on pcm16 chunks of any length.

Rules:
1. One `EchoCanceller` (or, with echo cancellation off, one `NoiseSuppressor`) per session,
   used by one task: WebRTC's processors keep per-stream state and are not thread-safe.
2. `EchoCanceller.process(near, far)`: `near` is the microphone's pcm16 at `rate` (24 kHz by
   default, the server's input rate), `far` the far-end reference aligned with it sample for
   sample (the same length, zeros where nothing plays; None is all zeros). It returns the
   cleaned near-end, int16, of the same length. AEC3's own delay estimator finds the acoustic
   and client-side delay between the two (the bench measured 40-400 ms).
3. WebRTC takes 10 ms frames. Samples that do not fill a frame wait for the next call, and
   the output is the processed stream delayed by exactly one frame more than the processors'
   own delay (`framing_delay`: 240 samples at 24 kHz, 10 ms); it starts with one frame of
   zeros. So any split of the same samples into chunks gives the same output. The processors'
   own delay, measured (bench/echo_canceller_choice.py): the canceller 9.1 ms at 24 kHz
   (WebRTC's resampler to 32 kHz and its band split), the suppressor about 8 ms (its analysis
   window, the band split and our 2x filters).
4. The canceller is pywebrtc-audio's `AudioProcessor` at the session's rate: WebRTC resamples
   to its 32 kHz processing rate inside (9 ms), where a soxr round trip to the 16 or 48 kHz
   that its `EchoCanceller` class takes cost 66-73 ms more for ERLE within 2 dB of it
   (bench/echo_canceller_choice.py).
5. The suppressor is pywebrtc-audio's `NoiseSuppressor` at twice 24 kHz (48 kHz), through
   our own streaming half-band FIR (63 taps, flat to 10 kHz, 1.3 ms both ways):
   `AudioProcessor`'s suppressor runs its analysis before the band split, so above a 16 kHz
   processing rate it ignores its level (about 7 dB at every level, measured), and a soxr
   round trip costs tens of ms (rule 4). OpenAI's `noise_reduction` types map to WebRTC's
   levels (`NOISE_LEVELS`): `near_field` (a headset: little noise, speech close) -> 1,
   "moderate" (12 dB off stationary noise, measured); `far_field` (a laptop or room
   microphone: more noise, speech farther) -> 2, "high" (18 dB). Level 3, "very high", is
   left out: 2.6 dB more on stationary noise, and what it costs weak far-field speech in
   real noise is not measured yet. The suppressor runs after the canceller, as in WebRTC's
   own pipeline; changing it keeps the canceller's adaptation.
6. It only processes samples: no protocol, no settings, no clock. `reset` forgets what the
   processors learnt (a new conversation) and keeps the stream's framing and delay.
7. AEC3 never sees digital silence: both its inputs get +-1 LSB of dither (-96 dBFS, far
   under any microphone's own noise). On digital zeros (the reference between answers, a
   muted or synthetic microphone) AEC3's filter states decay into subnormal floats, and it
   then spends 13 ms of CPU on each 100 ms (measured: 78 ms per second of audio with the
   reference silent half the time, 9 ms with the dither; bench.load's echo row). The dither
   is a fixed table indexed by the sample's place in the stream, so any split of the same
   samples into chunks still gives the same output (rule 3); what comes out of digital
   silence is at most a few LSB, not comfort noise.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import pywebrtc_audio

from orchestrator.protocol.session_config import NoiseReductionType

__all__ = ["NOISE_LEVELS", "EchoCanceller", "NoiseReduction", "NoiseSuppressor"]

Int16Array = npt.NDArray[np.int16]
# OpenAI's two kinds, defined once in the protocol's session settings.
NoiseReduction = NoiseReductionType

# Rule 5: WebRTC's NS levels 0-3 target 6, 12, 18 and 21 dB of suppression.
NOISE_LEVELS: Final[dict[NoiseReduction, int]] = {"near_field": 1, "far_field": 2}
DEFAULT_RATE: Final = 24000
_NS_RATES: Final = (16000, 32000, 48000)  # what pywebrtc-audio's NoiseSuppressor takes


def _half_band(taps: int = 63, beta: float = 7.0) -> npt.NDArray[np.float64]:
    # Windowed sinc cut at a quarter of the doubled rate: ~70 dB of stopband (Kaiser 7), odd
    # length so its delay is a whole number of samples ((taps - 1) / 2 at the doubled rate).
    n = np.arange(taps) - (taps - 1) / 2
    h = 0.5 * np.sinc(n / 2) * np.kaiser(taps, beta)
    return np.asarray(h / h.sum(), np.float64)


_H: Final = _half_band()


class _Fir:
    """A streaming FIR: any split of the input gives the same output (it keeps its history)."""

    def __init__(self, h: npt.NDArray[np.float64]) -> None:
        self._h = h
        self._history = np.zeros(len(h) - 1)

    def __call__(self, x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        padded = np.concatenate([self._history, x])
        self._history = padded[len(padded) - len(self._history) :]
        return np.convolve(padded, self._h, mode="valid")


_DITHER_PERIOD: Final = 48_017  # samples (2 s at 24 kHz, prime: no frame-aligned pattern)


def _dither_table(seed: int) -> npt.NDArray[np.int32]:
    # Triangular dither of +-1 LSB (the difference of two uniform 0/1 draws): zero mean, and
    # enough to keep AEC3's filters off subnormals (rule 7).
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 2, _DITHER_PERIOD) - rng.integers(0, 2, _DITHER_PERIOD)).astype(
        np.int32
    )


class _Dither:
    """Rule 7: one input's dither, by the sample's place in the stream (so chunk-independent)."""

    def __init__(self, seed: int) -> None:
        table = _dither_table(seed)
        self._table = np.concatenate([table, table])  # any run of a period's length is a slice
        self._at = 0

    def __call__(self, frames: Int16Array) -> Int16Array:
        out = np.empty(len(frames), np.int16)
        done = 0
        while done < len(frames):  # once, unless a call holds more than a period (2 s)
            n = min(len(frames) - done, _DITHER_PERIOD)
            summed = frames[done : done + n] + self._table[self._at : self._at + n]
            np.clip(summed, -32768, 32767, out=summed)
            out[done : done + n] = summed
            self._at = (self._at + n) % _DITHER_PERIOD
            done += n
        return out


def _samples(audio: Int16Array, name: str) -> Int16Array:
    array = np.asarray(audio)
    if array.dtype != np.int16 or array.ndim != 1:
        raise ValueError(f"{name} must be a 1-d int16 array, not {array.dtype} {array.shape}")
    return array


class _Frames:
    """Rule 3: whole 10 ms frames to the processors, the rest carried, output one frame late."""

    def __init__(self, rate: int) -> None:
        if rate % 100 or not 8000 <= rate <= 48000:
            raise ValueError(f"rate must be a multiple of 100 from 8000 to 48000, not {rate}")
        self.size = rate // 100
        self._near = np.zeros(0, np.int16)
        self._far = np.zeros(0, np.int16)
        # The one frame of delay: what a chunk shorter than a frame returns before any of it
        # has been through the processors. Fixed, so the output never depends on the chunking.
        self._out = np.zeros(self.size, np.int16)

    def take(self, near: Int16Array, far: Int16Array) -> tuple[Int16Array, Int16Array]:
        """The whole frames now available (near, far), possibly none; the rest is kept."""
        near_all = np.concatenate([self._near, near])
        far_all = np.concatenate([self._far, far])
        whole = len(near_all) // self.size * self.size
        self._near, self._far = near_all[whole:], far_all[whole:]
        return near_all[:whole], far_all[:whole]

    def give(self, processed: Int16Array, count: int) -> Int16Array:
        """`count` samples of output: the delayed frame first, then what was just processed."""
        out_all: Int16Array = np.concatenate([self._out, processed])
        self._out = out_all[count:]
        return out_all[:count]


class _Suppressor:
    """WebRTC's noise suppressor on whole frames at `rate`, at twice the rate where its own
    rates need it (rule 5); no framing of its own."""

    def __init__(self, rate: int, level: int) -> None:
        self._twice = rate not in _NS_RATES
        inner = 2 * rate if self._twice else rate
        if inner not in _NS_RATES:
            raise ValueError(f"noise suppression takes 8, 16, 24, 32 or 48 kHz, not {rate} Hz")
        self._ns = pywebrtc_audio.NoiseSuppressor(inner, 1, level)
        self._up, self._down = _Fir(2 * _H), _Fir(_H)

    def __call__(self, frames: Int16Array) -> Int16Array:
        if not self._twice:
            return self._ns.process(frames)
        # Zero-stuffed and filtered (x2 for the stuffed zeros' lost energy) up, filtered and
        # decimated down; whole frames in, so every chunk at the doubled rate has even length
        # and the decimation keeps the same phase throughout.
        stuffed = np.zeros(2 * len(frames))
        stuffed[::2] = frames
        up = np.asarray(self._up(stuffed) / 32768, np.float32)
        clean = self._down(self._ns.process(up).astype(np.float64))[::2]
        return np.asarray(np.clip(np.round(clean * 32768), -32768, 32767), np.int16)

    def reset(self) -> None:
        self._ns.reset()


class EchoCanceller:
    """One session's echo canceller (rules 1-4), with the noise suppressor after it (rule 5)."""

    def __init__(
        self, rate: int = DEFAULT_RATE, noise_reduction: NoiseReduction | None = None
    ) -> None:
        self._frames = _Frames(rate)
        self._rate = rate
        # stream_delay_ms=0: the reference is already placed on the input timeline by the
        # playout clock; what is left (the room, the client's buffers) is AEC3's to estimate.
        self._aec = pywebrtc_audio.AudioProcessor(sample_rate=rate, echo_cancellation=True)
        # Rule 7: two tables, so the dither of the microphone and of the reference are unrelated
        # (correlated dither would be an "echo" at zero delay, if a -96 dBFS one).
        self._near_dither, self._far_dither = _Dither(1), _Dither(2)
        self._noise_reduction = noise_reduction
        self._ns = (
            None if noise_reduction is None else _Suppressor(rate, NOISE_LEVELS[noise_reduction])
        )

    @property
    def framing_delay(self) -> int:
        """Samples of delay the framing adds (rule 3): one 10 ms frame."""
        return self._frames.size

    @property
    def noise_reduction(self) -> NoiseReduction | None:
        return self._noise_reduction

    @noise_reduction.setter
    def noise_reduction(self, kind: NoiseReduction | None) -> None:
        # A new suppressor only: the canceller's adaptation survives a session.update.
        if kind != self._noise_reduction:
            self._noise_reduction = kind
            self._ns = None if kind is None else _Suppressor(self._rate, NOISE_LEVELS[kind])

    def process(self, near: Int16Array, far: Int16Array | None = None) -> Int16Array:
        """The cleaned `near`, as long as it, one frame late (rules 2-3)."""
        near = _samples(near, "near")
        far = np.zeros_like(near) if far is None else _samples(far, "far")
        if len(far) != len(near):
            raise ValueError(f"far has {len(far)} samples, near {len(near)}: they must align")
        near_frames, far_frames = self._frames.take(near, far)
        processed = near_frames
        if len(near_frames):
            # One call for all the whole frames: the library loops over them without the GIL.
            processed = self._aec.process(
                self._near_dither(near_frames), self._far_dither(far_frames)
            )
            if self._ns is not None:
                processed = self._ns(processed)
        return self._frames.give(processed, len(near))

    def reset(self) -> None:
        """Forget the echo path and the noise estimate (rule 6); framing and delay stay."""
        self._aec.reset()
        if self._ns is not None:
            self._ns.reset()


class NoiseSuppressor:
    """One session's noise suppressor alone (rule 5), for a session without echo cancellation:
    the same framing and the same one-frame delay as `EchoCanceller` (rule 3)."""

    def __init__(self, noise_reduction: NoiseReduction, rate: int = DEFAULT_RATE) -> None:
        self._frames = _Frames(rate)
        self.noise_reduction: Final = noise_reduction
        self._ns = _Suppressor(rate, NOISE_LEVELS[noise_reduction])

    @property
    def framing_delay(self) -> int:
        return self._frames.size

    def process(self, near: Int16Array) -> Int16Array:
        """`near` with its stationary noise lowered, as long as it, one frame late."""
        near = _samples(near, "near")
        frames, _ = self._frames.take(near, near)
        processed = self._ns(frames) if len(frames) else frames
        return self._frames.give(processed, len(near))

    def reset(self) -> None:
        self._ns.reset()
