"""Calling Triton from Trio through the sync `tritonclient.grpc` client and worker threads.

Two shapes of call:
- unary: `TritonUnary.infer()` runs `client.infer` in a worker thread. One client per URL is
  enough: tritonclient documents its sync gRPC client as thread-safe except for the stream
  methods (`start_stream`, `stop_stream`, `async_stream_infer`), and a gRPC channel multiplexes
  concurrent calls, so the pool is one client, and a `trio.CapacityLimiter` bounds how many
  threads may sit in it at once.
- streamed: `open_stream()` / `open_pipeline_stream()` own one client and its one stream (the
  sync client carries a single stream). The client's reader thread hands each response to Trio
  with `trio_token.run_sync_soon` + `send_nowait`: it never waits on Trio, so `stop_stream`,
  which joins that thread, cannot deadlock (see shared/TRITON_NOTES.md, "Calling it from Trio").
  `stop_stream` itself always runs in a worker thread: it blocks until the reader thread ends.

Errors on a stream are raised from `TritonStream.receive()` (and from `async for`), in the order
they arrived; a stream ends (`trio.EndOfChannel`, or the end of `async for`) after the final
response, after `cancel()`, or once it failed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Self

import trio
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from orchestrator.triton.pipeline_client import (
    PipelineChunk,
    PipelineError,
    PipelineRequest,
    cancel_on_board,
    chunk_from_result,
    pipeline_inputs,
    stop_stream,
)

# What a stream's cleanup may take before the Trio side walks away from the worker thread. The
# thread still finishes on its own; only the waiting stops.
CLOSE_TIMEOUT_S = 5.0
# The board write is one small unary call (~1 ms); a server that takes longer is in trouble,
# and a cancel must not hang on it.
BOARD_TIMEOUT_S = 2.0


class TritonUnary:
    """Unary calls to one server from Trio: one shared sync client, bounded worker threads.

    Use `open_unary(url)`; `infer()` may be called from any number of tasks at once.
    """

    def __init__(
        self,
        client: grpcclient.InferenceServerClient,
        limiter: trio.CapacityLimiter,
        timeout_s: float | None,
    ) -> None:
        self._client = client
        self._limiter = limiter
        self._timeout_s = timeout_s

    async def infer(
        self,
        model: str,
        inputs: Sequence[grpcclient.InferInput],
        outputs: Sequence[grpcclient.InferRequestedOutput] | None = None,
    ) -> grpcclient.InferResult:
        """One inference; raises `InferenceServerException` as the sync client does.

        On cancellation the Trio side returns at once and the thread finishes its call alone
        (its result is dropped): a cancelled session should not wait for a model. The limiter
        token stays taken until that thread really ends, so abandoned calls still count towards
        the bound, and `client_timeout` keeps their life short.
        """
        client, timeout = self._client, self._timeout_s

        def call() -> grpcclient.InferResult:
            return client.infer(
                model,
                list(inputs),
                outputs=None if outputs is None else list(outputs),
                client_timeout=timeout,
            )

        return await trio.to_thread.run_sync(call, abandon_on_cancel=True, limiter=self._limiter)


@asynccontextmanager
async def open_unary(
    url: str, max_threads: int = 8, timeout_s: float | None = 10.0
) -> AsyncIterator[TritonUnary]:
    """A `TritonUnary` for `url`; the client is closed on exit, also under cancellation."""
    # Building the client only sets up a lazy channel: no I/O, fine on the Trio thread.
    client = grpcclient.InferenceServerClient(url)
    try:
        yield TritonUnary(client, trio.CapacityLimiter(max_threads), timeout_s)
    finally:
        # Closing a channel cancels calls still on it (abandoned ones): they fail in their
        # threads, where nobody listens any more.
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
            await trio.to_thread.run_sync(client.close, abandon_on_cancel=True)


_Item = PipelineChunk | PipelineError


class _TimedInfer:
    """A client whose `infer` has a deadline: `cancel_on_board` takes a client, not a timeout."""

    def __init__(self, client: grpcclient.InferenceServerClient, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s

    def infer(self, model: str, inputs: list[grpcclient.InferInput]) -> grpcclient.InferResult:
        return self._client.infer(model, inputs, client_timeout=self._timeout_s)


def _board_write(client: grpcclient.InferenceServerClient, request_id: str) -> int:
    return cancel_on_board(_TimedInfer(client, BOARD_TIMEOUT_S), [request_id])


class TritonStream:
    """The Trio side of one streamed request on its own client; made by `open_stream()`."""

    def __init__(self, url: str, model: str, request_id: str, max_pending: int) -> None:
        self.model = model
        self.request_id = request_id
        self._client = grpcclient.InferenceServerClient(url)
        self._token = trio.lowlevel.current_trio_token()
        # Bounded: the reader thread can neither block nor queue without limit, so a consumer
        # that falls behind ends the stream instead (see _deliver).
        self._send, self._receive = trio.open_memory_channel[_Item](max_pending)
        self._overflowed = False
        # Once True, late callbacks are dropped: the consumer asked for no more.
        self._stopping = False
        # The send side is closed: the stream ended, failed, overflowed or was stopped.
        self._finished = False
        # The final response came: the request is over, leaving needs no cancel.
        self._final_seen = False
        # Set by the reader thread on the final response or an error (either ends the
        # request), even after a stop: a request that ended must not get a stream cancel,
        # which can leave the model referenced in tritonserver 2.51.
        self._ended = False
        self._started = False
        self._closed = False
        # The stream methods of the sync client are not thread-safe; cancel() and aclose()
        # may run in two worker threads at once. Taken only in worker threads, never by the
        # reader thread, so stop_stream's join cannot wait on it.
        self._lock = threading.Lock()
        self._client_closed = False

    # --- the reader thread's side: never blocks, never raises ----------------------------

    def _callback(self, result: Any = None, error: Any = None) -> None:
        # Runs on tritonclient's reader thread, called with keyword arguments.
        item: _Item
        try:
            if error is not None:
                self._ended = True
                item = PipelineError(f"{self.model}: {error}")
            else:
                item = chunk_from_result(result, time.monotonic())
                self._ended = self._ended or item.final
        except Exception as failure:  # a malformed response must not kill the reader thread
            item = PipelineError(f"{self.model}: unreadable response: {failure!r}")
        try:
            self._token.run_sync_soon(self._deliver, item)
        except trio.RunFinishedError:
            # Trio is gone (a stream left open past the run): nobody is left to tell.
            pass

    # --- the Trio thread's side ------------------------------------------------------------

    def _deliver(self, item: _Item) -> None:
        if self._stopping or self._finished:
            return
        try:
            self._send.send_nowait(item)
        except trio.WouldBlock:
            # Never grow past the bound: the request is still running, so aclose() will
            # cancel it, and receive() reports the overflow.
            self._overflowed = True
            self._finish()
            return
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return
        if isinstance(item, PipelineError):
            self._finish()
        elif item.final:
            self._final_seen = True
            self._finish()

    def _finish(self) -> None:
        self._finished = True
        self._send.close()

    def _start_blocking(self, inputs: list[grpcclient.InferInput]) -> None:
        with self._lock:
            self._client.start_stream(callback=self._callback)
            self._started = True
            self._client.async_stream_infer(
                self.model,
                inputs,
                request_id=self.request_id,
                enable_empty_final_response=True,
            )

    async def receive(self) -> PipelineChunk:
        """The next chunk; `trio.EndOfChannel` once the stream ended, `PipelineError` if it failed.

        A consumer that let `max_pending` chunks pile up gets "consumer too slow" at once, not
        after draining what was buffered: the stream is broken from that point anyway.
        """
        if self._overflowed:
            raise PipelineError(f"{self.model}: consumer too slow, stream ended")
        item = await self._receive.receive()
        if isinstance(item, PipelineError):
            raise item
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> PipelineChunk:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    async def cancel(self) -> int:
        """Cancel the request everywhere; returns the board's cancel time (monotonic ns).

        Board first (the `cancel` model reaches every step of an ensemble, which a stream
        cancel does not), then `stop_stream(cancel_requests=True)` (reaches a model called
        directly). Both in one worker thread that is not abandoned: the cancel completes even
        if the caller is cancelled meanwhile (the board write has BOARD_TIMEOUT_S). Afterwards
        receive() drains what had arrived and then ends. Raises `PipelineError` if the board
        write failed; the stream is stopped either way.
        """
        self._stopping = True
        try:
            return await trio.to_thread.run_sync(self._cancel_blocking)
        finally:
            self._finish()

    def _cancel_blocking(self) -> int:
        with self._lock:
            if self._client_closed:
                return 0  # aclose() got there first: it already cancelled everything
            try:
                try:
                    return _board_write(self._client, self.request_id)
                except InferenceServerException as error:
                    raise PipelineError(f"cancel board write failed: {error}") from error
            finally:
                self._stop_blocking()

    def _stop_blocking(self) -> None:
        if self._started:
            try:
                stop_stream(self._client, cancel_requests=not self._ended)
            except InferenceServerException:
                pass

    def _close_blocking(self, board: bool) -> None:
        with self._lock:
            try:
                if board:
                    try:
                        _board_write(self._client, self.request_id)
                    except InferenceServerException:
                        pass  # best effort on the way out; the stream cancel still follows
                self._stop_blocking()
            finally:
                self._client_closed = True
                self._client.close()

    async def aclose(self) -> None:
        """Stop the stream and close the client; shielded, bounded by CLOSE_TIMEOUT_S.

        Leaving a request before its final response (early exit, error, overflow) also writes
        the board: an ensemble's steps would otherwise keep generating for nobody.
        """
        if self._closed:
            return
        self._closed = True
        board = self._started and not self._final_seen and not self._stopping
        self._stopping = True
        self._finish()
        self._receive.close()
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
            # Abandonable: if the server hangs, the timeout can fire; the thread ends later
            # and its callbacks land in a closed stream, where they are dropped.
            await trio.to_thread.run_sync(self._close_blocking, board, abandon_on_cancel=True)


@asynccontextmanager
async def open_stream(
    url: str,
    model: str,
    inputs: Sequence[grpcclient.InferInput],
    request_id: str,
    max_pending: int = 1024,
) -> AsyncIterator[TritonStream]:
    """One streamed request to a decoupled `model`, on its own client and stream.

    `request_id` is both Triton's request id and the cancel-board key, so the model's
    REQUEST_ID input must carry the same id.
    """
    stream = TritonStream(url, model, request_id, max_pending)
    try:
        # Not abandonable: the cleanup below must not race a start still in its thread.
        await trio.to_thread.run_sync(stream._start_blocking, list(inputs))
        yield stream
    finally:
        await stream.aclose()


@asynccontextmanager
async def open_pipeline_stream(
    url: str, model: str, request: PipelineRequest, max_pending: int = 1024
) -> AsyncIterator[TritonStream]:
    """One generation on a pipeline model (`cascade`, `qwen3_omni`) following the contract."""
    async with open_stream(
        url, model, pipeline_inputs(request), request.request_id, max_pending
    ) as stream:
        yield stream
