"""The `null` pipeline model: the pipeline contract with no compute, for benchmarks.

It answers like `cascade` or `qwen3_omni` (a TEXT_DELTA and an AUDIO_CHUNK per response, the
final flag last, the cancel board honoured) but only waits, so a benchmark run against it
measures the orchestrator's own cost. Rules:
- Paced like Qwen3-Omni: the first chunk `first_chunk_ms` after the request, then one chunk of
  `chunk_ms` audio every `interval_ms`; `speed` divides both delays (never the chunk size).
- Cheap per stream: `submit` (Triton's execute()) only registers a stream; ONE scheduler thread
  takes streams off a heap of due times and sends their responses, so hundreds of streams cost
  one thread and one heap entry each. The audio is one tone computed at start-up and sent again
  and again; the only per-chunk work is the text and the send.
- Bounded: at most `max_streams` streams at once; one more is refused at once with an error.
- Cancellable within one chunk: before every chunk the stream and the cancel board are asked;
  a cancelled stream ends with the final flag, records its stop as stage `null` on the board and
  is forgotten.
- Every stream ends exactly once: the final flag after its last chunk or at its cancel, or one
  error response (which carries the final flag itself).
- A voice instead of the tone (`Voice`, settings `null_audio`): a 24 kHz mono 16-bit WAV read
  once at start-up and cut into chunks; each response plays it from its start, one chunk per
  response chunk, and ends with it (the response's max_tokens still bounds it), or, looped,
  repeats it (zero-padded to whole chunks, so the seam is a short pause) until max_tokens.
  So a benchmark's answers can be a voice, at no more cost than the tone. A file of another
  format or rate is refused at load, with its name: no resampling in a model meant to cost
  nothing.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
import wave
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from turntaker_models.cancel_board import CancelBoard
from turntaker_models.contract import OUTPUT_SAMPLE_RATE, ContractError, decode_parameters
from turntaker_models.settings import check_null_speed
from turntaker_models.triton_adapter import (
    NO_AUDIO,
    ModelContext,
    PipelineSink,
    Reply,
    first_bytes,
)

Audio = npt.NDArray[np.float32]
STAGE = "null"

# Qwen3-Omni's reported first-packet latency (audio), in milliseconds.
FIRST_CHUNK_MS = 234.0
# One Qwen3-Omni codec frame: 12.5 Hz.
CHUNK_MS = 80.0
# Real time after the first chunk: one chunk's worth of audio per chunk's worth of time.
INTERVAL_MS = 80.0
MAX_STREAMS = 4096
# A chunk longer than this is a typo in the config, not a benchmark.
MAX_CHUNK_MS = 10_000.0
# Quiet (-26 dBFS) so that a benchmark that does play it does not blast anyone.
TONE_HZ = 440.0
TONE_AMPLITUDE = 0.05


def _number(parameters: Mapping[str, str], key: str, default: float) -> float:
    raw = parameters.get(key, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"null: parameter {key} must be a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"null: parameter {key} must be finite, got {raw!r}")
    return value


def max_streams_from_config(parameters: Mapping[str, str]) -> int:
    """MAX_STREAMS from the string parameters of config.pbtxt (default `MAX_STREAMS`)."""
    value = _number(parameters, "MAX_STREAMS", MAX_STREAMS)
    if value < 1 or value != int(value):
        raise ValueError(f"null: parameter MAX_STREAMS must be a whole number >= 1, got {value}")
    return int(value)


@dataclass(frozen=True)
class Pacing:
    """When chunks go out, and how long each is. Delays in ms before `speed` divides them."""

    first_chunk_ms: float = FIRST_CHUNK_MS
    chunk_ms: float = CHUNK_MS
    interval_ms: float = INTERVAL_MS
    speed: float = 1.0

    def __post_init__(self) -> None:
        check_null_speed(self.speed)
        if not all(math.isfinite(ms) and ms >= 0 for ms in (self.first_chunk_ms, self.interval_ms)):
            raise ValueError("null: FIRST_CHUNK_MS and INTERVAL_MS must be finite and >= 0")
        if not 0 < self.chunk_ms <= MAX_CHUNK_MS or self.chunk_samples < 1:
            raise ValueError(
                f"null: CHUNK_MS must give at least one sample and at most {MAX_CHUNK_MS:.0f} ms,"
                f" got {self.chunk_ms}"
            )

    @classmethod
    def from_config(cls, parameters: Mapping[str, str], speed: float = 1.0) -> Pacing:
        """From the string parameters of config.pbtxt; a missing or empty one keeps its default."""
        return cls(
            first_chunk_ms=_number(parameters, "FIRST_CHUNK_MS", FIRST_CHUNK_MS),
            chunk_ms=_number(parameters, "CHUNK_MS", CHUNK_MS),
            interval_ms=_number(parameters, "INTERVAL_MS", INTERVAL_MS),
            speed=speed,
        )

    @property
    def first_delay_s(self) -> float:
        return self.first_chunk_ms / 1000.0 / self.speed

    @property
    def interval_s(self) -> float:
        return self.interval_ms / 1000.0 / self.speed

    @property
    def chunk_samples(self) -> int:
        return round(self.chunk_ms * OUTPUT_SAMPLE_RATE / 1000.0)


def tone(samples: int, hz: float = TONE_HZ, amplitude: float = TONE_AMPLITUDE) -> Audio:
    """One chunk of a sine at ~`hz`, 24 kHz, read-only.

    The frequency is rounded to a whole number of cycles per chunk, so that the same chunk sent
    back to back is one continuous tone, without a click at every seam.
    """
    cycles = max(1, round(hz * samples / OUTPUT_SAMPLE_RATE))
    phase = 2.0 * np.pi * cycles * np.arange(samples) / samples
    audio: Audio = (amplitude * np.sin(phase)).astype(np.float32)
    audio.setflags(write=False)
    return audio


@dataclass(frozen=True)
class Voice:
    """A recording cut into response chunks (the rules' "voice instead of the tone")."""

    chunks: tuple[Audio, ...]
    loop: bool = False

    @classmethod
    def from_audio(cls, audio: Audio, chunk_samples: int, loop: bool = False) -> Voice:
        """`audio` (float32, 24 kHz) in chunks of `chunk_samples`; the last one padded with zeros
        when looped (a whole number of chunks), kept short when not (the answer ends with it)."""
        if chunk_samples < 1 or audio.size == 0:
            raise ValueError("null: a voice needs at least one sample and one sample per chunk")
        if loop:
            audio = np.concatenate([audio, np.zeros(-audio.size % chunk_samples, np.float32)])
        chunks = []
        for start in range(0, audio.size, chunk_samples):
            chunk = np.ascontiguousarray(audio[start : start + chunk_samples], np.float32)
            chunk.setflags(write=False)
            chunks.append(chunk)
        return cls(tuple(chunks), loop)

    @classmethod
    def from_wav(cls, path: Path, chunk_samples: int, loop: bool = False) -> Voice:
        """A 24 kHz mono 16-bit WAV file; anything else is a ValueError naming the file."""
        try:
            with wave.open(str(path)) as wav:
                shape = (wav.getframerate(), wav.getnchannels(), wav.getsampwidth())
                pcm = np.frombuffer(wav.readframes(wav.getnframes()), "<i2")
        except (OSError, EOFError, wave.Error) as error:
            raise ValueError(f"null: cannot read the voice {path}: {error}") from error
        if shape != (OUTPUT_SAMPLE_RATE, 1, 2):
            raise ValueError(
                f"null: the voice {path} must be {OUTPUT_SAMPLE_RATE} Hz mono 16-bit PCM, got "
                f"{shape[0]} Hz, {shape[1]} channel(s), {8 * shape[2]}-bit"
            )
        if pcm.size == 0:
            raise ValueError(f"null: the voice {path} has no samples")
        return cls.from_audio(pcm.astype(np.float32) / 32768.0, chunk_samples, loop)

    def chunk(self, index: int) -> Audio:
        return self.chunks[index % len(self.chunks)]

    def chunks_for(self, max_tokens: int) -> int:
        """How many chunks a response of `max_tokens` plays."""
        return max_tokens if self.loop else min(max_tokens, len(self.chunks))


def token_text(index: int) -> bytes:
    """The text of chunk `index`: one short word, so that transcripts exist and can be checked."""
    return f"tok{index} ".encode()


class Sink(Protocol):
    """Where one request's responses go (a Triton response sender in the model).

    A request ends with exactly one of `final()` or `error()` (which carries the final flag).
    """

    def chunk(self, text: bytes, audio: Audio) -> None: ...

    def error(self, message: str) -> None: ...

    def final(self) -> None: ...

    def cancelled(self) -> bool: ...


@dataclass(slots=True)
class _Stream:
    request_id: str
    sink: Sink
    total: int
    audio: bool
    due: float
    sent: int = 0


class NullStreams:
    """Every stream of one model instance, paced by one scheduler thread (`start()`).

    Without `start()` nothing runs by itself: tests call `run_due(now)` with their own clock.
    """

    def __init__(
        self,
        board: CancelBoard,
        pacing: Pacing,
        max_streams: int = MAX_STREAMS,
        clock: Callable[[], float] = time.monotonic,
        voice: Voice | None = None,
    ) -> None:
        if max_streams < 1:
            raise ValueError(f"null: MAX_STREAMS must be at least 1, got {max_streams}")
        self.board = board
        self.pacing = pacing
        self.max_streams = max_streams
        self.audio = tone(pacing.chunk_samples)
        self.voice = voice
        self._clock = clock
        self._wake = threading.Condition()
        # (due time, arrival number, stream): the number keeps equal due times in arrival
        # order and means streams themselves are never compared.
        self._heap: list[tuple[float, int, _Stream]] = []
        self._numbers = itertools.count()
        self._active = 0
        self._closed = False
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> int:
        """Streams registered and not yet ended."""
        with self._wake:
            return self._active

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("null: scheduler already started")
        self._thread = threading.Thread(target=self._loop, name="null-scheduler", daemon=True)
        self._thread.start()

    def submit(self, request_id: str, parameters: bytes, sink: Sink) -> None:
        """Register one request; a bad or unwelcome one gets its error response here and now."""
        if not request_id:
            sink.error("null: REQUEST_ID must be a non-empty id")
            return
        try:
            params = decode_parameters(parameters)
        except ContractError as error:
            sink.error(f"null: {error}")
            return
        now = self._clock()
        with self._wake:
            if self._closed:
                refusal = "null: the model is unloading"
            elif self._active >= self.max_streams:
                refusal = f"null: busy, {self.max_streams} streams already running; try later"
            else:
                refusal = ""
                stream = _Stream(
                    request_id=request_id,
                    sink=sink,
                    # The contract already refuses max_tokens < 1; kept safe on its own.
                    total=self._chunks(max(1, params.max_tokens), params.audio),
                    audio=params.audio,
                    due=now + self.pacing.first_delay_s,
                )
                self._active += 1
                heapq.heappush(self._heap, (stream.due, next(self._numbers), stream))
                self._wake.notify()
        if refusal:
            # Outside the lock: a send is a round trip to the server.
            sink.error(refusal)

    def _chunks(self, max_tokens: int, audio: bool) -> int:
        # A voice played once ends the response with it; text only keeps max_tokens.
        return self.voice.chunks_for(max_tokens) if self.voice is not None and audio else max_tokens

    def next_due(self) -> float | None:
        with self._wake:
            return self._heap[0][0] if self._heap else None

    def run_due(self, now: float | None = None) -> None:
        """Send the chunk of every stream due at `now` (default: the clock's now), in due order."""
        now = self._clock() if now is None else now
        due: list[_Stream] = []
        with self._wake:
            while self._heap and self._heap[0][0] <= now:
                due.append(heapq.heappop(self._heap)[2])
        # Sends happen outside the lock, so that execute() never waits for them.
        for stream in due:
            try:
                self._advance(stream, now)
            except Exception:
                # A sink that fails on everything must not kill the thread every stream needs.
                self._end(stream)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop the scheduler; streams still running get their final flag (best effort)."""
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._wake:
            left = [entry[2] for entry in self._heap]
            self._heap.clear()
        for stream in left:
            self._end(stream)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._closed:
                    if not self._heap:
                        self._wake.wait()
                        continue
                    wait_s = self._heap[0][0] - self._clock()
                    if wait_s <= 0:
                        break
                    self._wake.wait(wait_s)
                if self._closed:
                    return
            self.run_due()

    def _cancelled(self, stream: _Stream) -> bool:
        # The board first: no round trip to the server (~12 µs) and it reaches ensemble steps.
        if self.board.cancelled(stream.request_id):
            return True
        try:
            return stream.sink.cancelled()
        except Exception:
            # The sender is unusable: the stream is as good as cancelled.
            return True

    def _advance(self, stream: _Stream, now: float) -> None:
        if self._cancelled(stream):
            self._stop(stream)
            return
        if not stream.audio:
            audio = NO_AUDIO
        elif self.voice is not None:
            audio = self.voice.chunk(stream.sent)
        else:
            audio = self.audio
        try:
            stream.sink.chunk(token_text(stream.sent), audio)
        except Exception:
            # A send racing a stream cancel may fail: that is a cancel, not a bug.
            if self._cancelled(stream):
                self._stop(stream)
            else:
                self._end(stream)
            return
        stream.sent += 1
        if stream.sent >= stream.total:
            self._end(stream)
            return
        # From the last due time, so the pace does not drift by the scheduler's own delay; from
        # now once it has fallen a whole interval behind, so a late stream does not burst.
        stream.due = max(stream.due + self.pacing.interval_s, now)
        with self._wake:
            heapq.heappush(self._heap, (stream.due, next(self._numbers), stream))

    def _stop(self, stream: _Stream) -> None:
        self.board.record_stop(stream.request_id, STAGE)
        self._end(stream)

    def _end(self, stream: _Stream) -> None:
        with self._wake:
            self._active -= 1
        try:
            stream.sink.final()
        except Exception:
            # The client is gone (a cancelled stream): nobody is left to tell.
            pass


class ReplySink(PipelineSink):
    """One request's Reply (turntaker_models.triton_adapter) seen as a `Sink`."""

    def chunk(self, text: bytes, audio: Audio) -> None:
        self.send(text, audio)


class NullService:
    """The `null` model behind the Triton adapter: reads only REQUEST_ID and PARAMETERS."""

    INPUTS = ("REQUEST_ID", "PARAMETERS")

    def __init__(self, streams: NullStreams) -> None:
        self.streams = streams

    def submit(self, tensors: dict[str, npt.NDArray[Any]], reply: Reply) -> None:
        self.streams.submit(
            # Lenient decoding: an undecodable id still keys the board consistently.
            first_bytes(tensors.get("REQUEST_ID")).decode(errors="replace"),
            first_bytes(tensors.get("PARAMETERS")),
            ReplySink(reply),
        )

    def close(self) -> None:
        self.streams.close()
        self.streams.board.close()


def make_service(context: ModelContext) -> NullService:
    """The `null` service from its config parameters and the settings' speed; started."""
    pacing = Pacing.from_config(context.parameters, speed=context.settings.null_speed)
    max_streams = max_streams_from_config(context.parameters)
    settings = context.settings
    voice = None
    if settings.null_audio is not None:
        voice = Voice.from_wav(settings.null_audio, pacing.chunk_samples, settings.null_audio_loop)
    board = CancelBoard.open(settings.board_path)
    streams = NullStreams(board, pacing, max_streams, voice=voice)
    streams.start()
    sound = "a tone"
    if voice is not None:
        seconds = sum(c.size for c in voice.chunks) / OUTPUT_SAMPLE_RATE
        sound = f"{settings.null_audio} ({seconds:.2f} s, {'looped' if voice.loop else 'once'})"
    context.log.log_info(
        f"null: first chunk after {pacing.first_delay_s * 1e3:.3f} ms, then "
        f"{pacing.chunk_samples} samples every {pacing.interval_s * 1e3:.3f} ms "
        f"(speed {pacing.speed:g}), at most {max_streams} streams, playing {sound}"
    )
    return NullService(streams)
