"""Wire audio <-> model audio: G.711 and pcm16 codecs, streaming resampling, duration math.

Rules:
- Input (`InputAudio`, one per session): client bytes of the session's input format become
  float32 mono at 16 kHz (the VAD's rate) through one streaming resampler, so chunk boundaries
  leave no trace: any split of the same bytes gives the same samples as one append.
- Appends may have any length. pcm16 keeps a dangling odd byte for the next append; G.711 has
  one byte a sample and never dangles.
- Time is the client's: `InputAudio.samples` counts input samples, and `duration_ms` derives
  from that count alone. Output sample n of the 16 kHz stream lies at input time n / 16 ms
  (soxr compensates its filter delay), which is how a VAD chunk end maps to the input clock.
- Output (`OutputAudio`, one per response): model audio (24 kHz float32, or the pcm16 bytes of
  `BackendAudio`) becomes the session's output format. pcm16 -> pcm16 at the same rate is
  bit-exact; G.711 goes through a streaming 24 -> 8 kHz resampler, drained by `flush`.
- G.711 follows ITU-T G.191 (the reference `g711.c`): negative values are quantised on their
  one's complement, so the quantiser is symmetric about -0.5. The tables are numpy arrays built
  once and made read-only: no module-level mutable state.
- No I/O, clocks or threads; `audioop` is not used (deprecated, removed in Python 3.13).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt
import soxr

from orchestrator.protocol.session_config import AudioFormat

__all__ = [
    "MODEL_RATE",
    "VAD_CHUNK",
    "VAD_RATE",
    "Float32Array",
    "InputAudio",
    "OutputAudio",
    "VadFrames",
    "alaw_decode",
    "alaw_encode",
    "bytes_to_ms",
    "decode",
    "decode_input",
    "float_to_pcm16",
    "ms_to_bytes",
    "pcm16_duration_ms",
    "pcm16_to_float",
    "sample_width",
    "to_pcm16",
    "ulaw_decode",
    "ulaw_encode",
]

Float32Array = npt.NDArray[np.float32]
Int16Array = npt.NDArray[np.int16]

MODEL_RATE: Final = 24000  # what the speech model speaks and the conversation stores
VAD_RATE: Final = 16000  # silero-vad's rate
VAD_CHUNK: Final = 512  # silero-vad's window at 16 kHz: 32 ms


def _readonly(a: npt.NDArray[Any]) -> npt.NDArray[Any]:
    a.flags.writeable = False
    return a


def _bit_length(v: npt.NDArray[np.int32], limit: int) -> npt.NDArray[np.int32]:
    """int.bit_length() for 0 <= v < 2**limit, vectorised."""
    powers = np.array([1 << k for k in range(limit)], dtype=np.int32)
    return np.searchsorted(powers, v, side="right").astype(np.int32)


def _ulaw_tables() -> tuple[Int16Array, npt.NDArray[np.uint8]]:
    code = np.arange(256, dtype=np.int32)
    inv = ~code & 0xFF
    exponent = (inv >> 4) & 0x7
    step = 4 << (exponent + 1)
    magnitude = (0x80 << exponent) + step * (inv & 0xF) + step // 2 - 4 * 33
    decode = np.where(code < 0x80, -magnitude, magnitude).astype(np.int16)

    x = np.arange(-32768, 32768, dtype=np.int32)
    absno = np.minimum(np.where(x < 0, ~x, x) >> 2, 0x1FFF - 33) + 33
    segno = 1 + _bit_length(absno >> 6, 7)
    low = 0xF - ((absno >> segno) & 0xF)
    enc = ((8 - segno) << 4) | low | np.where(x >= 0, 0x80, 0)
    # Index by the int16 value's uint16 bit pattern: entry 0 is pcm 0, entry 0x8000 is -32768.
    encode = np.roll(enc, -32768).astype(np.uint8)
    return decode, encode


def _alaw_tables() -> tuple[Int16Array, npt.NDArray[np.uint8]]:
    code = np.arange(256, dtype=np.int32)
    ix = (code ^ 0x55) & 0x7F
    exponent = ix >> 4
    mantissa = (ix & 0xF) + np.where(exponent > 0, 16, 0)
    magnitude = ((mantissa << 4) + 8) << np.maximum(exponent - 1, 0)
    decode = np.where(code > 0x7F, magnitude, -magnitude).astype(np.int16)

    x = np.arange(-32768, 32768, dtype=np.int32)
    v = np.where(x < 0, ~x, x) >> 4  # 0..2047
    seg = np.maximum(_bit_length(v, 11) - 4, 0)  # 0 for v <= 15, else 1..7
    folded = np.where(seg > 0, (seg << 4) + (v >> np.maximum(seg - 1, 0)) - 16, v)
    enc = (folded | np.where(x >= 0, 0x80, 0)) ^ 0x55
    encode = np.roll(enc, -32768).astype(np.uint8)
    return decode, encode


_ULAW_DECODE, _ULAW_ENCODE = (_readonly(t) for t in _ulaw_tables())
_ALAW_DECODE, _ALAW_ENCODE = (_readonly(t) for t in _alaw_tables())


def ulaw_decode(data: bytes) -> Int16Array:
    codes = np.frombuffer(data, dtype=np.uint8)
    return _ULAW_DECODE[codes]


def alaw_decode(data: bytes) -> Int16Array:
    codes = np.frombuffer(data, dtype=np.uint8)
    return _ALAW_DECODE[codes]


def ulaw_encode(pcm: Int16Array) -> bytes:
    return bytes(_ULAW_ENCODE[np.asarray(pcm, dtype=np.int16).view(np.uint16)].tobytes())


def alaw_encode(pcm: Int16Array) -> bytes:
    return bytes(_ALAW_ENCODE[np.asarray(pcm, dtype=np.int16).view(np.uint16)].tobytes())


def pcm16_to_float(pcm: Int16Array) -> Float32Array:
    return np.asarray(pcm, dtype=np.float32) / np.float32(32768.0)


def float_to_pcm16(samples: npt.ArrayLike) -> Int16Array:
    """Round to nearest and saturate; NaN becomes silence rather than an arbitrary int."""
    x = np.nan_to_num(np.asarray(samples, dtype=np.float32), nan=0.0)
    pcm: Int16Array = np.clip(np.rint(x * np.float32(32768.0)), -32768, 32767).astype(np.int16)
    return pcm


def sample_width(fmt: AudioFormat) -> int:
    return 2 if fmt.type == "audio/pcm" else 1


def decode(fmt: AudioFormat, data: bytes) -> Int16Array:
    """Whole samples of `fmt` -> int16 pcm at `fmt.rate` (a pcm16 odd trailing byte is an error)."""
    if fmt.type == "audio/pcmu":
        return ulaw_decode(data)
    if fmt.type == "audio/pcma":
        return alaw_decode(data)
    if len(data) % 2:
        raise ValueError("pcm16 audio must have an even number of bytes")
    pcm: Int16Array = np.frombuffer(data, dtype="<i2").astype(np.int16)
    return pcm


def _encode(fmt: AudioFormat, pcm: Int16Array) -> bytes:
    if fmt.type == "audio/pcmu":
        return ulaw_encode(pcm)
    if fmt.type == "audio/pcma":
        return alaw_encode(pcm)
    return np.asarray(pcm, dtype="<i2").tobytes()


def bytes_to_ms(fmt: AudioFormat, nbytes: int) -> int:
    """Whole milliseconds in `nbytes` of `fmt` (floor; a dangling pcm16 byte counts nothing)."""
    return (nbytes // sample_width(fmt)) * 1000 // fmt.rate


def ms_to_bytes(fmt: AudioFormat, ms: int) -> int:
    """Byte offset of `ms` in a stream of `fmt`, on a sample boundary (floor)."""
    return (ms * fmt.rate // 1000) * sample_width(fmt)


def pcm16_duration_ms(nbytes: int, rate: int = MODEL_RATE) -> int:
    return (nbytes // 2) * 1000 // rate


def decode_input(data: bytes, fmt: AudioFormat, rate: int = VAD_RATE) -> Float32Array:
    """One-shot: a whole buffer of `fmt` (a committed turn) -> float32 mono at `rate`.

    A committed buffer is complete, so the one-shot resampler (no streaming state, no tail) is
    the right tool; a dangling pcm16 byte at the end is dropped.
    """
    usable = data[: len(data) - len(data) % sample_width(fmt)]
    x = pcm16_to_float(decode(fmt, usable))
    if fmt.rate != rate and len(x):
        x = np.asarray(soxr.resample(x, fmt.rate, rate, quality="HQ"), dtype=np.float32)
    return x


def to_pcm16(fmt: AudioFormat, data: bytes, rate: int = MODEL_RATE) -> bytes:
    """One-shot: a whole buffer of `fmt` -> pcm16 little-endian at `rate` (bit-exact if equal)."""
    if fmt.type == "audio/pcm" and fmt.rate == rate:
        return data[: len(data) - len(data) % 2]
    return float_to_pcm16(decode_input(data, fmt, rate)).astype("<i2").tobytes()


def _quality(in_rate: int, out_rate: int) -> str:
    # soxr HQ delays 8 -> 16 kHz by ~66 ms, MQ by ~26 ms; MQ's 16-bit precision is beyond what
    # 8-bit G.711 carries, and VAD latency is barge-in latency. Other directions stay HQ
    # (~21 ms at 24 <-> 16 and 24 -> 8 kHz).
    return "MQ" if in_rate < out_rate else "HQ"


class _Stream:
    """A float32 mono streaming resampler, or a pass-through at equal rates."""

    __slots__ = ("_flushed", "_rs")

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self._rs: Any = None
        if in_rate != out_rate:
            quality = _quality(in_rate, out_rate)
            self._rs = soxr.ResampleStream(in_rate, out_rate, 1, dtype="float32", quality=quality)
        self._flushed = False

    def push(self, x: Float32Array) -> Float32Array:
        if self._flushed:
            raise RuntimeError("stream already flushed")
        if self._rs is None or len(x) == 0:
            return x
        return np.asarray(self._rs.resample_chunk(x), dtype=np.float32)

    def flush(self) -> Float32Array:
        if self._flushed:
            return np.zeros(0, dtype=np.float32)
        self._flushed = True
        if self._rs is None:
            return np.zeros(0, dtype=np.float32)
        tail = self._rs.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        return np.asarray(tail, dtype=np.float32)


class InputAudio:
    """One session's input: client bytes -> float32 16 kHz, on the client's sample clock.

    A format change is a new `InputAudio`; the caller keeps the session's clock running by
    adding the old one's `duration_ms` (formats change between turns, not inside one).
    """

    __slots__ = ("_carry", "_fmt", "_out_rate", "_out_samples", "_samples", "_stream")

    def __init__(self, fmt: AudioFormat, *, rate: int = VAD_RATE) -> None:
        self._fmt = fmt
        self._out_rate = rate
        self._stream = _Stream(fmt.rate, rate)
        self._carry = b""
        self._samples = 0
        self._out_samples = 0

    @property
    def format(self) -> AudioFormat:
        return self._fmt

    @property
    def samples(self) -> int:
        """Input samples taken so far (a dangling pcm16 byte is not a sample yet)."""
        return self._samples

    @property
    def duration_ms(self) -> int:
        """Whole milliseconds of input so far, on the client's clock."""
        return self._samples * 1000 // self._fmt.rate

    @property
    def output_samples(self) -> int:
        """Samples returned so far; they trail `samples` by the resampler's delay (~20-30 ms)."""
        return self._out_samples

    @property
    def output_ms(self) -> float:
        """Input-clock time of the end of the samples returned so far.

        This, not `duration_ms`, is where the last returned sample lies: the resampler holds
        back its delay's worth of input until more arrives or `flush`.
        """
        return self._out_samples * 1000 / self._out_rate

    def push(self, raw: bytes) -> Float32Array:
        data = self._carry + raw if self._carry else raw
        width = sample_width(self._fmt)
        whole = len(data) - len(data) % width
        self._carry = bytes(data[whole:])
        pcm = decode(self._fmt, data[:whole])
        self._samples += len(pcm)
        out = self._stream.push(pcm16_to_float(pcm))
        self._out_samples += len(out)
        return out

    def flush(self) -> Float32Array:
        """End of input: the resampler's tail. The stream takes no more pushes after this."""
        out = self._stream.flush()
        self._out_samples += len(out)
        return out


class VadFrames:
    """Cuts a 16 kHz stream into silero's 512-sample chunks, each with its end on the input clock.

    `start_ms` is the input-clock time of the stream's first sample (0 for a session's first
    `InputAudio`; the old clock's `duration_ms` after a format change).
    """

    __slots__ = ("_buf", "_chunk", "_emitted", "_rate", "_start_ms")

    def __init__(self, *, start_ms: int = 0, chunk: int = VAD_CHUNK, rate: int = VAD_RATE) -> None:
        self._buf = np.zeros(0, dtype=np.float32)
        self._chunk = chunk
        self._rate = rate
        self._start_ms = start_ms
        self._emitted = 0

    def push(self, samples: Float32Array) -> list[tuple[Float32Array, int]]:
        buf = np.concatenate((self._buf, np.asarray(samples, dtype=np.float32)))
        out: list[tuple[Float32Array, int]] = []
        n = len(buf) // self._chunk
        for i in range(n):
            self._emitted += 1
            end_ms = self._start_ms + self._emitted * self._chunk * 1000 // self._rate
            out.append((buf[i * self._chunk : (i + 1) * self._chunk].copy(), end_ms))
        self._buf = buf[n * self._chunk :].copy()
        return out


class OutputAudio:
    """One response's audio: model audio (24 kHz) -> the session's output format bytes."""

    __slots__ = ("_bytes_out", "_carry", "_fmt", "_rate", "_samples", "_stream")

    def __init__(self, fmt: AudioFormat, *, rate: int = MODEL_RATE) -> None:
        self._fmt = fmt
        self._rate = rate
        self._stream = _Stream(rate, fmt.rate)
        self._carry = b""
        self._samples = 0
        self._bytes_out = 0

    @property
    def format(self) -> AudioFormat:
        return self._fmt

    @property
    def samples(self) -> int:
        """Model samples taken so far."""
        return self._samples

    @property
    def duration_ms(self) -> int:
        """Whole milliseconds of model audio taken so far (the model's clock)."""
        return self._samples * 1000 // self._rate

    @property
    def bytes_out(self) -> int:
        return self._bytes_out

    def push(self, samples: npt.ArrayLike) -> bytes:
        """Float samples in [-1, 1] at the model rate -> wire bytes (maybe fewer, never later)."""
        x = np.asarray(samples, dtype=np.float32).reshape(-1)
        self._samples += len(x)
        return self._emit(self._stream.push(x))

    def push_pcm16(self, data: bytes) -> bytes:
        """pcm16 little-endian at the model rate (a `BackendAudio` chunk) -> wire bytes."""
        data = self._carry + data if self._carry else data
        whole = len(data) - len(data) % 2
        self._carry = bytes(data[whole:])
        if self._fmt.type == "audio/pcm" and self._fmt.rate == self._rate:
            # Same format: hand the model's bytes through untouched (no float round trip).
            self._samples += whole // 2
            self._bytes_out += whole
            return bytes(data[:whole])
        pcm = np.frombuffer(data[:whole], dtype="<i2")
        self._samples += len(pcm)
        return self._emit(self._stream.push(pcm16_to_float(pcm)))

    def flush(self) -> bytes:
        """End of the response: the resampler's tail (a dangling pcm16 byte is dropped)."""
        self._carry = b""
        return self._emit(self._stream.flush())

    def _emit(self, x: Float32Array) -> bytes:
        out = _encode(self._fmt, float_to_pcm16(x))
        self._bytes_out += len(out)
        return out
