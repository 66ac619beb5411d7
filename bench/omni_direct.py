"""Qwen3-Omni's three stages chained in this process as the `qwen3_omni` ensemble chains them,
with no tritonserver: what `python -m bench.gpu_omni --mode direct` measures.

Rules:
1. The chain is model_repository/qwen3_omni/config.pbtxt's: the thinker takes the pipeline
   inputs (REQUEST_ID, CONVERSATION, AUDIO, AUDIO_LENGTHS, PARAMETERS, built as
   orchestrator/triton/pipeline_client.py builds them); each thinker response becomes one
   talker request (T_* -> T_*), each talker response one code2wav request (C_* -> C_*), and
   code2wav's responses (TEXT_DELTA, AUDIO_CHUNK) are the stream's chunks.
2. Each stage's `submit` is called from one thread of its own, in arrival order, as Triton's
   execute() is; a response's tensors are copied on the hop, as Triton copies them.
3. A stream ends once every request it made (the thinker's and each one its responses
   spawned) has ended: close, a final send, or fail. A downstream request counts from the
   moment the upstream response is sent, so the count cannot reach zero early. The first
   failure ends the stream with that error, as an ensemble's does.
4. Cancel writes the board (what every stage checks at each step) and flags the stream, so
   each of its replies' `is_cancelled()` is true (what a direct model call's stream cancel
   reaches); the stages record their stops on the board as under Triton.
5. Imports torch, transformers and the stage code only: never tritonclient, nvidia-pytriton
   or orchestrator (a GPU node may have only torch + transformers + numpy).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.omni_streams import Channel, Chunk, Connect, Request
from turntaker_models.cancel_board import CancelBoard
from turntaker_models.contract import encode
from turntaker_models.settings import ModelSettings

Tensors = dict[str, npt.NDArray[Any]]


@dataclass(frozen=True)
class DirectChunk:
    text: bytes
    audio: npt.NDArray[np.float32]
    received_at: float


class _End:
    """The sentinel after a stream's last chunk."""


class _Flow:
    """One stream's requests across the three stages (rule 3) and its cancel flag (rule 4)."""

    def __init__(self) -> None:
        self.items: queue.SimpleQueue[DirectChunk | _End | BaseException] = queue.SimpleQueue()
        self.cancelled = threading.Event()
        self._lock = threading.Lock()
        self._open = 0
        self._failed = False

    def opened(self) -> None:
        with self._lock:
            self._open += 1

    def ended(self, error: str | None) -> None:
        with self._lock:
            self._open -= 1
            if error is not None and not self._failed:
                self._failed = True
                self.items.put(RuntimeError(error))
            elif self._open == 0 and not self._failed:
                self.items.put(_End())


class _Reply:
    """`wire.Reply` for one request of a stream: a response goes on to `deliver`."""

    def __init__(self, flow: _Flow, deliver: Callable[[Tensors], None]) -> None:
        self._flow = flow
        self._deliver = deliver
        self._done = False
        flow.opened()

    def send(self, outputs: Mapping[str, npt.NDArray[Any]], final: bool = False) -> None:
        if self._done:
            return
        self._deliver({name: np.array(value, copy=True) for name, value in outputs.items()})
        if final:
            self.close()

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._flow.ended(None)

    def fail(self, message: str) -> None:
        if not self._done:
            self._done = True
            self._flow.ended(message)

    def is_cancelled(self) -> bool:
        return self._flow.cancelled.is_set()


class _Hop:
    """One stage's execute() thread (rule 2)."""

    def __init__(self, name: str, stage: Any) -> None:
        self.stage = stage
        self._inbox: queue.SimpleQueue[tuple[Tensors, _Reply] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"direct-{name}", daemon=True)
        self._thread.start()

    def put(self, tensors: Tensors, reply: _Reply) -> None:
        self._inbox.put((tensors, reply))

    def _run(self) -> None:
        while (item := self._inbox.get()) is not None:
            tensors, reply = item
            try:
                self.stage.submit(tensors, reply)
            except Exception as error:  # as the adapter does: never a request left unanswered
                reply.fail(f"request not taken: {type(error).__name__}: {error}")

    def close(self) -> None:
        self._inbox.put(None)
        self._thread.join(timeout=30)


class Pipeline:
    """The three stages, built from `settings`, and their hops."""

    def __init__(self, settings: ModelSettings, max_streams: int) -> None:
        # Imported here: building them loads torch and the weights.
        from turntaker_models.omni.audio_stages import Code2WavStage, TalkerStage
        from turntaker_models.omni.stages import ThinkerStage
        from turntaker_models.omni.streams import StreamLimits

        # The thinker's own default is 16 streams; a round of `max_streams` must all fit.
        limits = StreamLimits(max_streams=max_streams)
        self.stages: list[Any] = []
        try:
            self.stages.append(ThinkerStage(settings, limits))
            self.stages.append(TalkerStage(settings, limits))
            self.stages.append(Code2WavStage(settings, limits=limits))
        except BaseException:
            self.close()
            raise
        thinker, talker, code2wav = self.stages
        self.hops: tuple[_Hop, ...] = (
            _Hop("thinker", thinker),
            _Hop("talker", talker),
            _Hop("code2wav", code2wav),
        )

    def start(self, request: Request, flow: _Flow) -> None:
        thinker, talker, code2wav = self.hops

        def to_client(outputs: Tensors) -> None:
            text = outputs.get("TEXT_DELTA")
            raw = text.reshape(-1)[0] if text is not None and text.size else b""
            audio = np.asarray(outputs.get("AUDIO_CHUNK", np.zeros(0)), np.float32).reshape(-1)
            flow.items.put(DirectChunk(bytes(raw), audio, time.monotonic()))

        def to_code2wav(outputs: Tensors) -> None:
            code2wav.put(outputs, _Reply(flow, to_client))

        def to_talker(outputs: Tensors) -> None:
            talker.put(outputs, _Reply(flow, to_code2wav))

        thinker.put(inputs(request), _Reply(flow, to_talker))

    def close(self) -> None:
        for hop in getattr(self, "hops", ()):
            hop.close()
        for stage in self.stages:
            stage.close()
        # A channel may outlive the block (a caller's variable): it must not keep the weights.
        self.stages, self.hops = [], ()


def inputs(request: Request) -> Tensors:
    """The thinker's inputs, as `pipeline_client.pipeline_inputs` sends them (rule 1)."""
    segments = [np.asarray(a, dtype=np.float32).reshape(-1) for a in request.audio]
    audio = np.concatenate(segments) if segments else np.zeros(0, np.float32)
    return {
        "REQUEST_ID": np.array([request.request_id.encode()], dtype=np.object_),
        "CONVERSATION": np.array([encode(request.conversation)], dtype=np.object_),
        "AUDIO": audio,
        "AUDIO_LENGTHS": np.array([s.shape[0] for s in segments], dtype=np.int32),
        "PARAMETERS": np.array([encode(request.parameters)], dtype=np.object_),
    }


class DirectChannel:
    """One stream through a `Pipeline` (omni_streams.Channel)."""

    def __init__(self, pipeline: Pipeline, board: CancelBoard) -> None:
        self.pipeline = pipeline
        self.board = board
        self.flow = _Flow()
        self.request_id: str | None = None

    def start(self, request: Request) -> None:
        self.request_id = request.request_id
        self.pipeline.start(request, self.flow)

    def chunks(self, timeout_s: float = 60.0) -> Iterator[Chunk]:
        while True:
            try:
                item = self.flow.items.get(timeout=timeout_s)
            except queue.Empty:
                raise TimeoutError(f"direct qwen3_omni: nothing for {timeout_s} s") from None
            if isinstance(item, BaseException):
                raise item
            if isinstance(item, _End):
                return
            yield item

    def cancel(self) -> int:
        if self.request_id is None:
            return 0
        at = self.board.cancel(self.request_id)
        self.flow.cancelled.set()
        return at


@contextmanager
def direct(
    settings: ModelSettings, board_path: Path, max_streams: int
) -> Iterator[tuple[Connect, CancelBoard]]:
    """The stages built in this process on `board_path` for the block: a `Connect` and the
    board it cancels on."""
    settings = replace(settings, board_path=board_path)
    with CancelBoard.open(board_path) as board:
        pipeline = Pipeline(settings, max_streams)
        try:

            @contextmanager
            def connect() -> Iterator[Channel]:
                yield DirectChannel(pipeline, board)

            yield connect, board
        finally:
            pipeline.close()
            _free_device()


def _free_device() -> None:
    """The other batching side builds its own stages next: give this side's memory back."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
