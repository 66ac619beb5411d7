"""The input audio buffer and the session's input clock (docs/protocol.md, input audio).

Rules:
- Audio is kept in the format it arrived in: a switch of `audio.input.format` starts a new
  run, and `take()` returns one `InputAudio` part per run, each tagged with its format. An
  earlier pcmu turn is never decoded as pcm after a switch (nor the other way round).
- Bounded: `append` refuses audio that would take the buffer past `max_bytes`
  (`BufferFull`); the buffer is unchanged then.
- The input clock is milliseconds of client audio since the session started, across format
  switches and whether or not turn detection is on (`clock_ms`).
- For turn detection, `append(..., detect=True)` decodes the audio to 16 kHz (one streaming
  decoder per format run) and cuts it into silero's 512-sample chunks whose ends lie on the
  input clock; a run started while detection was off starts its chunks at the clock, so chunk
  ends strictly increase over the whole session.
- Pure: no clock of its own, no I/O; numbers and bytes in, chunks out.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.protocol.session_config import AudioFormat
from orchestrator.session.audio import InputAudio as InputDecoder
from orchestrator.session.audio import VadFrames, bytes_to_ms, sample_width
from orchestrator.session.history import conversation as conv
from orchestrator.session.inputs import Samples


class BufferFull(Exception):
    """The append would exceed the buffer's byte limit."""


@dataclass(slots=True)
class _Run:
    format: AudioFormat
    data: bytearray


@dataclass(frozen=True, slots=True, eq=False)
class Chunks:
    """16 kHz chunks of 512 samples and their ends on the input clock."""

    chunks: tuple[Samples, ...]
    end_ms: tuple[int, ...]


class InputBuffer:
    __slots__ = ("_base_ms", "_decoder", "_frames", "_max_bytes", "_run_samples", "_runs", "_size")

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._runs: list[_Run] = []
        self._size = 0
        # The clock: the ms of earlier format runs, plus this run's whole samples (counted in
        # samples so that a run's time stays exact however it was cut into appends).
        self._base_ms = 0.0
        self._run_samples: tuple[AudioFormat, int] | None = None
        self._decoder: InputDecoder | None = None
        self._frames: VadFrames | None = None

    @property
    def nbytes(self) -> int:
        return self._size

    @property
    def buffered_ms(self) -> int:
        return sum(bytes_to_ms(r.format, len(r.data)) for r in self._runs)

    @property
    def clock_ms(self) -> int:
        ms = self._base_ms
        if self._run_samples is not None:
            fmt, samples = self._run_samples
            ms += samples * 1000 / fmt.rate
        return int(ms)

    def append(self, raw: bytes, fmt: AudioFormat, *, detect: bool) -> Chunks | None:
        if self._size + len(raw) > self._max_bytes:
            raise BufferFull
        before_ms = self.clock_ms
        if self._runs and self._runs[-1].format == fmt:
            self._runs[-1].data += raw
        else:
            self._runs.append(_Run(fmt, bytearray(raw)))
        self._size += len(raw)
        self._tick(fmt, raw)
        if not detect:
            self._decoder = self._frames = None
            return None
        if self._decoder is None or self._decoder.format != fmt or self._frames is None:
            # A new run of the decoder; its chunks start where the clock stood before this audio.
            self._decoder = InputDecoder(fmt)
            self._frames = VadFrames(start_ms=before_ms)
        cut = self._frames.push(self._decoder.push(raw))
        if not cut:
            return None
        return Chunks(tuple(c for c, _ in cut), tuple(end for _, end in cut))

    def _tick(self, fmt: AudioFormat, raw: bytes) -> None:
        whole = len(raw) // sample_width(fmt)
        run = self._run_samples
        if run is None or run[0] != fmt:
            if run is not None:
                self._base_ms += run[1] * 1000 / run[0].rate
            run = (fmt, 0)
        self._run_samples = (fmt, run[1] + whole)

    def tail(self, ms: int) -> conv.InputAudio | None:
        """The last `ms` of the latest format run (whole samples), the buffer unchanged."""
        if not self._runs or ms <= 0:
            return None
        run = self._runs[-1]
        width = sample_width(run.format)
        wanted = ms * run.format.rate // 1000 * width
        start = max(len(run.data) - wanted, 0)
        start -= start % width
        return conv.InputAudio(bytes(run.data[start:]), None, run.format)

    def parts(self) -> tuple[conv.InputAudio, ...]:
        """The buffered audio as one tagged part per format run, the buffer unchanged."""
        return tuple(conv.InputAudio(bytes(r.data), None, r.format) for r in self._runs)

    def take(self) -> tuple[conv.InputAudio, ...]:
        """The buffered audio as one tagged part per format run; the buffer is empty after."""
        parts = self.parts()
        self.clear()
        return parts

    def clear(self) -> None:
        self._runs.clear()
        self._size = 0
