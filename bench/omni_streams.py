"""N concurrent qwen3_omni streams: time to first audio, codec frames/s, cancel -> last stage
stopped.

The measuring side of bench/gpu_omni.py (which plans the rounds, serves the model and writes the
table). A stream is a `Channel`: over gRPC with `PipelineStream` as a client would
(`triton_connect`), or the three stages chained in this process (bench/omni_direct.py); the
rounds are the same for both.

Rules:
- Prompt: a user turn of flite speech (16 kHz; a synthetic signal of the same length when flite
  is not installed, said in the table) plus a short text, so the audio encoder runs.
- N streams start together (a barrier), several rounds. Time to first audio: request sent ->
  first AUDIO_CHUNK received. Codec frames/s per stream: samples after the first chunk / 1920
  over the time from the first to the last chunk (12.5 frames/s is real time). Cancel: in a
  round of N streams, once every stream has audio, one is cancelled (board write + stream
  cancel); from the board's cancel time to the last stop record of thinker/talker/code2wav.
  Summed codec frames/s: a round's streams' frames/s added up (what the stages deliver at once).
- A time budget caps the rounds (every cell gets at least one).
- Nothing here imports tritonclient: direct mode runs where only torch is installed.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from bench import speech
from turntaker_models.cancel_board import CancelBoard
from turntaker_models.contract import (
    INPUT_SAMPLE_RATE,
    OUTPUT_SAMPLE_RATE,
    AudioPart,
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
)

MODEL = "qwen3_omni"
FRAME_SAMPLES = 1920  # one codec frame: 80 ms at 24 kHz
SPOKEN = "Hello! I would like to know what the weather will be like tomorrow in Paris."
TEXT = "Please answer in one short sentence."


@dataclass(frozen=True)
class Request:
    """One stream's request: `PipelineRequest`'s fields, without importing tritonclient."""

    request_id: str
    conversation: Conversation
    audio: Sequence[npt.NDArray[np.float32]] = ()
    parameters: GenerationParameters = field(default_factory=GenerationParameters)


class Chunk(Protocol):
    """What the rounds read of a response (`PipelineChunk` has it)."""

    @property
    def audio(self) -> npt.NDArray[np.float32]: ...
    @property
    def received_at(self) -> float: ...


class Channel(Protocol):
    """One stream: start a request, read its chunks until the last, cancel it."""

    def start(self, request: Request) -> None: ...

    def chunks(self, timeout_s: float = 60.0) -> Iterator[Chunk]: ...

    def cancel(self) -> int:
        """Board write (and stream cancel); the board's cancel time, monotonic ns."""
        ...


Connect = Callable[[], AbstractContextManager[Channel]]


def triton_connect(url: str) -> Connect:
    """Channels over gRPC to a tritonserver's `qwen3_omni` (imports tritonclient only here)."""
    from orchestrator.triton.pipeline_client import PipelineRequest, PipelineStream

    class _Triton:
        def __init__(self, stream: PipelineStream) -> None:
            self.stream = stream

        def start(self, request: Request) -> None:
            self.stream.start(
                PipelineRequest(
                    request.request_id, request.conversation, request.audio, request.parameters
                )
            )

        def chunks(self, timeout_s: float = 60.0) -> Iterator[Chunk]:
            return self.stream.chunks(timeout_s)

        def cancel(self) -> int:
            return self.stream.cancel()

    @contextmanager
    def connect() -> Iterator[Channel]:
        with PipelineStream(url, MODEL) as stream:
            yield _Triton(stream)

    return connect


class RoundPlan(Protocol):
    """What `run_plan` reads of a plan (`bench.gpu_omni.Plan`): read-only, as a frozen one is."""

    @property
    def concurrency(self) -> tuple[int, ...]: ...
    @property
    def rounds(self) -> tuple[int, ...]: ...
    @property
    def cancel_rounds(self) -> int: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def cancel_max_tokens(self) -> int: ...
    @property
    def budget_s(self) -> float: ...
    @property
    def settle_s(self) -> float: ...


@dataclass
class Stream:
    """One stream of a round: when its request went out, and each audio chunk's size and time."""

    sent_at: float
    first_audio_s: float = float("nan")
    samples: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)

    def frames_per_s(self) -> float:
        if len(self.times) < 2 or self.times[-1] <= self.times[0]:
            return float("nan")
        return sum(self.samples[1:]) / FRAME_SAMPLES / (self.times[-1] - self.times[0])


@dataclass
class Results:
    """Every round's numbers, per concurrency; `audio_s` is each stream's audio length."""

    ttfa_ms: dict[int, list[float]] = field(default_factory=dict)
    fps: dict[int, list[float]] = field(default_factory=dict)
    summed_fps: dict[int, list[float]] = field(default_factory=dict)
    cancel_ms: dict[int, list[float]] = field(default_factory=dict)
    stages_stopped: dict[int, list[int]] = field(default_factory=dict)
    audio_s: list[float] = field(default_factory=list)


def prompt_audio(seconds_hint: float = 4.0) -> tuple[speech.Audio, str]:
    """16 kHz speech for the user turn, and how it was made (for the table)."""
    if shutil.which("flite"):
        audio = speech.flite(SPOKEN, rate=INPUT_SAMPLE_RATE)
        return audio, f'flite speech of "{SPOKEN}" ({audio.shape[0] / INPUT_SAMPLE_RATE:.1f} s)'
    # Random weights do not listen: only the length matters to the audio encoder's cost.
    t = np.arange(int(seconds_hint * INPUT_SAMPLE_RATE)) / INPUT_SAMPLE_RATE
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t)
    audio = (0.1 * envelope * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    return audio, f"a synthetic {seconds_hint:.1f} s voiced signal (flite is not installed)"


def _request(audio: speech.Audio, max_tokens: int) -> Request:
    turn = Message("user", [AudioPart(0), TextPart(TEXT)])
    return Request(
        request_id=f"gpu-omni-{uuid.uuid4().hex}",
        conversation=Conversation([turn]),
        audio=[audio],
        parameters=GenerationParameters(max_tokens=max_tokens),
    )


def _together(n: int, work: Callable[[int, threading.Barrier], object]) -> list[object]:
    barrier = threading.Barrier(n, timeout=600)

    def guarded(i: int) -> object:
        try:
            return work(i, barrier)
        except BaseException:
            barrier.abort()  # the others stop waiting for a stream that failed
            raise

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(guarded, range(n)))


def ttfa_round(connect: Connect, n: int, audio: speech.Audio, max_tokens: int) -> list[Stream]:
    def one(_: int, barrier: threading.Barrier) -> Stream:
        request = _request(audio, max_tokens)
        with connect() as stream:
            barrier.wait()
            result = Stream(sent_at=time.monotonic())
            stream.start(request)
            for chunk in stream.chunks(timeout_s=600):
                if chunk.audio.size:
                    if not result.times:
                        result.first_audio_s = chunk.received_at - result.sent_at
                    result.times.append(chunk.received_at)
                    result.samples.append(int(chunk.audio.size))
        return result

    return [s for s in _together(n, one) if isinstance(s, Stream)]


def _wait_stops(board: CancelBoard, request_id: str, timeout_s: float = 5.0) -> list[int]:
    """Stop times (ns) of the request's stages: all three, or none new for 0.5 s."""
    deadline = time.monotonic() + timeout_s
    seen: list[int] = []
    settled = time.monotonic()
    while time.monotonic() < deadline:
        stops = [s.t_ns for s in board.stops(request_id)]
        if len(stops) != len(seen):
            seen, settled = stops, time.monotonic()
        if len(seen) >= 3 or (seen and time.monotonic() - settled > 0.5):
            break
        time.sleep(0.01)
    return seen


def cancel_round(
    connect: Connect, board: CancelBoard, n: int, audio: speech.Audio, max_tokens: int
) -> tuple[float, int]:
    """ms from cancelling one of n streaming requests to its last stage's stop, stages stopped."""
    measured = threading.Event()
    outcome: list[tuple[float, int]] = []

    def one(i: int, barrier: threading.Barrier) -> None:
        request = _request(audio, max_tokens)
        with connect() as stream:
            barrier.wait()
            stream.start(request)
            for chunk in stream.chunks(timeout_s=600):
                if chunk.audio.size:
                    break
            barrier.wait()  # every stream is speaking now
            if i == 0:
                try:
                    cancelled_at = stream.cancel()
                    stops = _wait_stops(board, request.request_id)
                    worst = (max(stops) - cancelled_at) / 1e6 if stops else float("nan")
                    outcome.append((worst, len(stops)))
                finally:
                    measured.set()
            else:
                measured.wait(timeout=30)
                stream.cancel()
                _wait_stops(board, request.request_id, timeout_s=2.0)

    _together(n, one)
    return outcome[0] if outcome else (float("nan"), 0)


def run_plan(
    plan: RoundPlan, connect: Connect, board: CancelBoard, log: Callable[[str], None]
) -> tuple[Results, dict[str, float], str]:
    """Warm-up, then round-robin over the concurrencies until the rounds or the budget end."""
    audio, described = prompt_audio()
    results = Results()
    phases: dict[str, float] = {}
    began = time.monotonic()
    ttfa_round(connect, 1, audio, plan.max_tokens)  # first calls on new shapes are slow
    phases["warm-up"] = time.monotonic() - began
    log(f"warm-up {phases['warm-up']:.1f} s")
    deadline = time.monotonic() + plan.budget_s
    spent = {"streams": 0.0, "cancel": 0.0}
    # The last duration of each kind of round: a round that would end past the deadline is
    # skipped (after the first of its kind, so every cell has a number).
    last: dict[tuple[str, int], float] = {}

    def fits(kind: str, n: int) -> bool:
        key = (kind, n)
        return key not in last or time.monotonic() + last[key] <= deadline

    for r in range(max(*plan.rounds, plan.cancel_rounds)):
        for n, rounds in zip(plan.concurrency, plan.rounds, strict=True):
            if r < rounds and fits("streams", n):
                t = time.monotonic()
                streams = ttfa_round(connect, n, audio, plan.max_tokens)
                results.ttfa_ms.setdefault(n, []).extend(1000 * s.first_audio_s for s in streams)
                rates = [s.frames_per_s() for s in streams]
                results.fps.setdefault(n, []).extend(rates)
                # nan when a stream had a single chunk: no rate, so no sum either.
                results.summed_fps.setdefault(n, []).append(sum(rates))
                results.audio_s.extend(sum(s.samples) / OUTPUT_SAMPLE_RATE for s in streams)
                last["streams", n] = time.monotonic() - t
                spent["streams"] += last["streams", n]
                log(f"round {r + 1}: {n} streams, {last['streams', n]:.1f} s")
            if r < plan.cancel_rounds and fits("cancel", n):
                t = time.monotonic()
                worst, stopped = cancel_round(connect, board, n, audio, plan.cancel_max_tokens)
                results.cancel_ms.setdefault(n, []).append(worst)
                results.stages_stopped.setdefault(n, []).append(stopped)
                spent["cancel"] += time.monotonic() - t
                time.sleep(plan.settle_s)
                last["cancel", n] = time.monotonic() - t
                log(f"round {r + 1}: cancel among {n} streams, {worst:.1f} ms")
    phases["streams (TTFA, frames/s)"] = spent["streams"]
    phases["cancel"] = spent["cancel"]
    return results, phases, described
