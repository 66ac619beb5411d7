"""What a session actor is given to work with: the VAD, the transcriber, the turn model, the
response services, the metrics and the input DSP with its threads (one typed object, passed
down from `serve`, shared by every session of the process)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import trio

from orchestrator.service.backends.response_actor import ResponseServices
from orchestrator.service.metrics import Metrics
from orchestrator.service.store.base import SessionStore
from orchestrator.service.store.writer import SnapshotWriter
from orchestrator.session.echo.processors import Processors
from orchestrator.session.echo.webrtc import WebRtcProcessors

Audio = npt.NDArray[np.float32]
# An append's DSP (AEC3: about 1 ms of CPU per 100 ms append, without the GIL) waits for the
# GIL twice, before and after, and while the event loop is busy each wait lasts up to a switch
# interval (5 ms): 1.1 ms a job alone, 9.6 ms beside a busy thread. With one thread per core
# the threads spent most of their time waiting, and appends queued behind them while the loop
# itself had time (bench.load --echo on, two cores: 2 threads, real time up to 25 sessions,
# backlog p99 13.9 chunks at 30 with loop lag p99 9 ms; 8 threads, 30 real time).
DSP_THREADS_PER_CORE = 4
# Charged with each append's decoded audio bytes; False: over the key's rate, drop the append.
AppendBudget = Callable[[int], bool]


class Transcriber(Protocol):
    async def transcribe(self, audio16k: Audio, partial: bool = False) -> str: ...


class TurnPredictor(Protocol):
    """The probability that the user's turn is complete (semantic_vad's `turn` model)."""

    async def predict(self, audio16k: Audio) -> float: ...


class VadService(Protocol):
    """Speech probability of each 512-sample 16 kHz chunk, with per-session state in a stream
    (the batched Triton `VadBatcher`; benchmarks also plug in one silero per session)."""

    def open_stream(self) -> Any: ...

    async def probability(self, stream: Any, chunk: npt.ArrayLike) -> float: ...

    # K consecutive chunks in order, in one go: one round trip per append, not per chunk.
    async def probabilities(self, stream: Any, chunks: Sequence[npt.ArrayLike]) -> list[float]: ...


@dataclass(frozen=True)
class SessionServices:
    metrics: Metrics
    vad: VadService
    responses: ResponseServices
    transcriber: Transcriber | None
    # semantic_vad is offered only with a turn model.
    turn: TurnPredictor | None = None
    # The cascade hears through ASR: give it the orchestrator's transcripts, not audio again.
    transcripts_for_pipeline: bool = False
    transcript_wait_s: float = 30.0
    # Echo cancellation and noise reduction (the core's `CoreConfig.processors`): WebRTC's,
    # built when a session first asks for either.
    processors: Callable[[], Processors] = WebRtcProcessors
    # The threads their steps run on (actor.py), one pool for all sessions: `DSP_THREADS_PER_CORE`
    # per core.
    dsp_limiter: trio.CapacityLimiter = field(
        default_factory=lambda: trio.CapacityLimiter(DSP_THREADS_PER_CORE * (os.cpu_count() or 1))
    )
    # The session store and its writer (orchestrator/service/store/): each session's snapshots
    # (checkpoints.py). None: sessions keep no snapshot (tests of the actor alone).
    store: SessionStore | None = None
    snapshots: SnapshotWriter | None = None
