"""A blocking client for one pipeline stream (`cascade` or `qwen3_omni`) and its cancel path.

Used by the tests and benchmarks, and by the orchestrator through a thread bridge. One
`PipelineStream` owns one gRPC stream (the sync client carries one stream per connection).
Cancelling does both halves of the cancel contract: the stream cancel (reaches a model called
directly) and the board write through the `cancel` model (reaches every step of an ensemble).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from turntaker_models.contract import (
    Conversation,
    EndReason,
    GenerationParameters,
    ToolCallDelta,
    decode_end_reason,
    decode_tool_call,
    encode,
)

Audio = npt.NDArray[np.float32]


@dataclass(frozen=True)
class PipelineRequest:
    request_id: str
    conversation: Conversation
    # 16 kHz mono segments, referenced by index from the conversation's audio parts.
    audio: Sequence[Audio] = ()
    parameters: GenerationParameters = field(default_factory=GenerationParameters)


@dataclass(frozen=True)
class PipelineChunk:
    text: str
    audio: Audio
    final: bool
    # time.monotonic() when the client received it.
    received_at: float
    # The next piece of the model's function call, if this response carries one.
    tool_call: ToolCallDelta | None = None
    # The pipeline's `END_REASON`, if this response carries one: its own limit cut the answer
    # short (the stream's end reason; contract.py).
    end_reason: EndReason | None = None


class PipelineError(RuntimeError):
    """The server answered the stream with an error."""


def _bytes_input(name: str, values: Sequence[bytes]) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, [len(values)], "BYTES")
    tensor.set_data_from_numpy(np.array(values, dtype=np.object_))
    return tensor


def pipeline_inputs(request: PipelineRequest) -> list[grpcclient.InferInput]:
    segments = [np.asarray(a, dtype=np.float32).reshape(-1) for a in request.audio]
    audio = np.concatenate(segments) if segments else np.zeros(0, np.float32)
    lengths = np.array([s.shape[0] for s in segments], dtype=np.int32)
    audio_in = grpcclient.InferInput("AUDIO", [audio.shape[0]], "FP32")
    audio_in.set_data_from_numpy(audio)
    lengths_in = grpcclient.InferInput("AUDIO_LENGTHS", [lengths.shape[0]], "INT32")
    lengths_in.set_data_from_numpy(lengths)
    return [
        _bytes_input("REQUEST_ID", [request.request_id.encode()]),
        _bytes_input("CONVERSATION", [encode(request.conversation)]),
        audio_in,
        lengths_in,
        _bytes_input("PARAMETERS", [encode(request.parameters)]),
    ]


def cancel_on_board(client: grpcclient.InferenceServerClient, request_ids: Sequence[str]) -> int:
    """Write ids on the cancel board through the `cancel` model; returns its monotonic ns."""
    result = client.infer("cancel", [_bytes_input("REQUEST_ID", [i.encode() for i in request_ids])])
    times = result.as_numpy("CANCELLED_AT_NS")
    return int(times.max()) if times is not None and times.size else 0


def chunk_from_result(result: Any, received_at: float) -> PipelineChunk:
    response = result.get_response()
    names = {o.name for o in response.outputs}
    text = ""
    if "TEXT_DELTA" in names:
        raw = result.as_numpy("TEXT_DELTA")
        text = "".join(v.decode() if isinstance(v, bytes) else str(v) for v in raw.reshape(-1))
    audio = np.zeros(0, np.float32)
    if "AUDIO_CHUNK" in names:
        audio = np.asarray(result.as_numpy("AUDIO_CHUNK"), np.float32).reshape(-1)
    tool_call = None
    if "TOOL_CALL" in names:
        raw = result.as_numpy("TOOL_CALL").reshape(-1)
        if raw.size:
            value = raw[0]
            tool_call = decode_tool_call(value if isinstance(value, bytes) else str(value).encode())
    end_reason = None
    if "END_REASON" in names:
        raw = result.as_numpy("END_REASON").reshape(-1)
        if raw.size:
            value = raw[0]
            end_reason = decode_end_reason(
                value if isinstance(value, bytes) else str(value).encode()
            )
    final_param = response.parameters.get("triton_final_response")
    final = bool(final_param.bool_param) if final_param is not None else False
    return PipelineChunk(
        text=text,
        audio=audio,
        final=final,
        received_at=received_at,
        tool_call=tool_call,
        end_reason=end_reason,
    )


def stop_stream(client: grpcclient.InferenceServerClient, *, cancel_requests: bool) -> None:
    """`client.stop_stream()`, without leaking a thread per cancelled stream.

    tritonclient (2.73) ends a cancelled stream without ending its request queue: gRPC's
    request-iterator thread then waits on that queue forever, holding the call and its
    buffers. bench/soak.py found it: one thread and ~30 kB more per barge-in. The sentinel
    `None` is what tritonclient itself queues to end a stream that was not cancelled.
    """
    stream = getattr(client, "_stream", None)
    client.stop_stream(cancel_requests=cancel_requests)
    queue = getattr(stream, "_request_queue", None)
    if cancel_requests and queue is not None:
        queue.put(None)


class PipelineStream:
    """One streamed generation on `model`; a context manager that closes the stream."""

    def __init__(self, url: str, model: str, max_pending: int = 4096) -> None:
        self.model = model
        self._client = grpcclient.InferenceServerClient(url)
        # Bounded: a consumer that stops reading makes the reader thread block, not grow.
        self._items: queue.Queue[PipelineChunk | BaseException] = queue.Queue(max_pending)
        self._request_id: str | None = None
        self._open = False
        # Set by the reader thread once the final response (or an error, which ends the
        # request) arrived: the request is over, and close() must not cancel it.
        self._ended = False

    def start(self, request: PipelineRequest) -> None:
        if self._request_id is not None:
            raise RuntimeError("one request per PipelineStream")
        self._request_id = request.request_id

        def callback(result: Any = None, error: Any = None) -> None:
            now = time.monotonic()
            if error is not None:
                self._ended = True
                self._items.put(PipelineError(str(error)))
            else:
                chunk = chunk_from_result(result, now)
                self._ended = self._ended or chunk.final
                self._items.put(chunk)

        self._client.start_stream(callback=callback)
        self._open = True
        self._client.async_stream_infer(
            self.model,
            pipeline_inputs(request),
            request_id=request.request_id,
            enable_empty_final_response=True,
        )

    def chunks(self, timeout_s: float = 60.0) -> Iterator[PipelineChunk]:
        """Chunks as they arrive, ending after the final one; raises on error or silence."""
        while True:
            try:
                item = self._items.get(timeout=timeout_s)
            except queue.Empty:
                raise TimeoutError(f"{self.model}: nothing for {timeout_s} s") from None
            if isinstance(item, BaseException):
                raise item
            yield item
            if item.final:
                return

    def cancel(self) -> int:
        """Cancel the generation everywhere; returns the board's cancel time (monotonic ns)."""
        if self._request_id is None:
            return 0
        at = cancel_on_board(self._client, [self._request_id])
        self.close()
        return at

    def close(self) -> None:
        """Stop the stream; cancels the request only if its final response has not come.

        Cancelling a request that already ended leaves the model referenced in tritonserver
        2.51 (about one time in three), so it never unloads and the server's SIGTERM hangs.
        """
        if self._open:
            self._open = False
            try:
                stop_stream(self._client, cancel_requests=not self._ended)
            except InferenceServerException:
                pass

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
        self._client.close()
