"""One VAD task per server: every session's 32 ms chunks go to Triton's `vad` in shared requests.

bench/vad_batching.py measured why: one request carrying every session's chunk costs 1.9x-3.4x
less CPU than one request per session chunk at 16-64 sessions. The `vad` model is stateless on
the server (model_repository/vad/config.pbtxt): each row carries its session's recurrent STATE
and audio CONTEXT in and gets the new ones back, so any sessions' rows can share a request.
Here each session's state lives in a `VadStream`, and the batcher carries it from one row's
answer to the next row.

A row holds K >= 1 consecutive chunks of one session: a client's 100 ms append is 3-4 chunks,
and a session's chunks must go in order, so one round trip per chunk chained 3-4 round trips
per append, and under load (bench/load.py) the input backlog grew; one row per append pays one
round trip for all of them.

Use:

    async with open_vad_batcher(VadBatcherConfig(), url) as batcher:
        stream = batcher.open_stream()          # one per session
        p = await batcher.probability(stream, chunk)   # 512 samples, 16 kHz, float32
        ps = await batcher.probabilities(stream, chunks)   # K such chunks, in order: one row

or `await nursery.start(VadBatcher(config, url).run)` in the server's own nursery. `url` is a
gRPC HOST:PORT, or a callable returning one (asked once per request: an endpoint pool's choice).

Behaviour:
- Batching: the batcher takes the first pending row, then keeps collecting for at most
  `window_s` (or until `max_rows`), and sends one request per K among them (the rows of a
  request share K; the oldest row's K goes first); when more is pending than one request holds,
  the next request follows at once, up to `max_requests_in_flight` at the same time. A lone
  session waits at most `window_s` plus one round trip.
- Bounds: at most `max_pending` rows wait for a request; beyond that `probabilities()` waits
  (backpressure) rather than queueing more. At most `max_requests_in_flight` requests run. A
  call with more than `max_chunks_per_row` chunks sends them as several rows, one after the
  other, so that no request grows without bound.
- One row per session at a time: the next row needs the previous one's state. Two tasks
  calling `probability()` / `probabilities()` on the same stream at once is a bug and raises
  `trio.BusyResourceError`. A call that was cancelled leaves its row either unsent (dropped,
  the state unchanged) or in flight (it still counts and updates the state); the session's next
  call waits for such a row before sending its own. A cancelled call split into several rows
  keeps the state of the rows already answered.
- Failures: when a request fails (server down, timeout, bad answer) every caller in it gets
  `VadUnavailable`, and the batcher goes on with the next request. When the batcher stops,
  callers waiting or arriving get `VadUnavailable` too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import trio
import tritonclient.grpc as grpcclient

from orchestrator.triton.trio_bridge import TritonUnary, open_unary

CHUNK = 512
CONTEXT = 64
STATE_SHAPE = (2, 128)
_OUTPUTS = ("SPEECH_PROB", "STATE_OUT", "CONTEXT_OUT")

Samples = npt.NDArray[np.float32]


class VadUnavailable(RuntimeError):
    """No speech probability for this chunk: Triton failed or the batcher is not running."""


@dataclass(frozen=True)
class VadBatcherConfig:
    model: str = "vad"
    # Rows per request; the model's max_batch_size is 256 (model_repository/vad/config.pbtxt):
    # 200 sessions' rows fit one request.
    max_rows: int = 256
    # Chunks per row (1 s): a huge append goes as several rows rather than one long request.
    max_chunks_per_row: int = 32
    # How long the first pending chunk may wait for others. Sessions tick every 32 ms, and
    # Triton adds its own 1 ms queue delay: 2 ms gathers a tick's chunks at little latency.
    window_s: float = 0.002
    # Rows waiting for a request; beyond this, sessions wait to submit.
    max_pending: int = 256
    max_requests_in_flight: int = 4
    # A VAD round trip takes about a millisecond; a request slower than this is a failure.
    request_timeout_s: float = 1.0

    def __post_init__(self) -> None:
        limits = (self.max_rows, self.max_chunks_per_row, self.max_pending)
        if min(limits) < 1 or self.max_requests_in_flight < 1:
            raise ValueError(
                "max_rows, max_chunks_per_row, max_pending and max_requests_in_flight must be >= 1"
            )
        if self.window_s < 0 or self.request_timeout_s <= 0:
            raise ValueError("window_s must be >= 0 and request_timeout_s > 0")


@dataclass
class VadBatcherStats:
    """Counters since start, for metrics and tests: rows / requests is the mean batch, chunks /
    rows the mean K."""

    requests: int = 0
    rows: int = 0
    chunks: int = 0
    failed_requests: int = 0


class VadStream:
    """One session's recurrent state; made by `VadBatcher.open_stream()`."""

    def __init__(self, batcher: VadBatcher) -> None:
        self._batcher = batcher
        self._state: Samples = np.zeros(STATE_SHAPE, np.float32)
        self._context: Samples = np.zeros(CONTEXT, np.float32)
        self._busy = False
        # The last row handed to the batcher, until it has its answer.
        self._last: _Job | None = None

    def reset(self) -> None:
        """Start over as a fresh session would (zero state and context)."""
        if self._busy:
            raise trio.BusyResourceError("VadStream is in use")
        self._state = np.zeros(STATE_SHAPE, np.float32)
        self._context = np.zeros(CONTEXT, np.float32)


@dataclass(eq=False)
class _Job:
    """One row: K consecutive chunks of one stream, shape (K, CHUNK)."""

    stream: VadStream
    chunks: Samples
    done: trio.Event = field(default_factory=trio.Event)
    probabilities: list[float] = field(default_factory=list)
    error: str | None = None
    cause: BaseException | None = None
    # The caller gave up before the job was sent: skip it.
    abandoned: bool = False

    def fail(self, error: str, cause: BaseException | None = None) -> None:
        if not self.done.is_set():
            self.error, self.cause = error, cause
            self.done.set()


def _tensor(name: str, value: Samples) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(value.shape), "FP32")
    tensor.set_data_from_numpy(value)
    return tensor


class VadBatcher:
    """Batches the VAD chunks of every session of one server; run `run()` once."""

    def __init__(self, config: VadBatcherConfig, url: str | Callable[[], str]) -> None:
        self.config = config
        self._url = url
        self.stats = VadBatcherStats()
        self._send, self._receive = trio.open_memory_channel[_Job](config.max_pending)
        self._ran = False

    def open_stream(self) -> VadStream:
        return VadStream(self)

    async def probability(self, stream: VadStream, chunk: npt.ArrayLike) -> float:
        """Speech probability of one 512-sample 16 kHz chunk, continuing `stream`'s state."""
        (p,) = await self.probabilities(stream, [chunk])
        return p

    async def probabilities(
        self, stream: VadStream, chunks: Sequence[npt.ArrayLike]
    ) -> list[float]:
        """Speech probabilities of K consecutive 512-sample 16 kHz chunks of `stream`, in order,
        continuing its state: one row (or a few, past `max_chunks_per_row`), one round trip."""
        rows = [np.asarray(chunk, np.float32).reshape(-1) for chunk in chunks]
        for row in rows:
            if row.shape != (CHUNK,):
                raise ValueError(f"a VAD chunk is {CHUNK} samples, got {row.shape[0]}")
        if stream._batcher is not self:
            raise ValueError("the VadStream belongs to another batcher")
        if stream._busy:
            raise trio.BusyResourceError("another task is using this VadStream")
        if not rows:
            return []
        # A copy (np.stack): the caller may reuse its buffers while the row waits for a request.
        samples = np.stack(rows)
        step = self.config.max_chunks_per_row
        stream._busy = True
        try:
            out: list[float] = []
            for start in range(0, len(samples), step):
                out += await self._row(stream, samples[start : start + step])
            return out
        finally:
            stream._busy = False

    async def _row(self, stream: VadStream, chunks: Samples) -> list[float]:
        if stream._last is not None:
            # A cancelled call's row may still be in flight: its state comes first.
            await stream._last.done.wait()
        job = _Job(stream, chunks)
        try:
            await self._send.send(job)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise VadUnavailable("the VAD batcher is not running") from None
        stream._last = job
        try:
            await job.done.wait()
        except BaseException:
            job.abandoned = True
            raise
        if job.error is not None:
            # A fresh exception per caller: one shared instance would share tracebacks.
            raise VadUnavailable(job.error) from job.cause
        return job.probabilities

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The batching loop; runs until cancelled. Callers get VadUnavailable afterwards."""
        if self._ran:
            raise RuntimeError("a VadBatcher runs once")
        self._ran = True
        config = self.config
        # Jobs taken off the channel and not yet handed to a request task: failed on the way out.
        batch: list[_Job] = []
        try:
            # Clients close after the nursery: no request is using them any more by then.
            async with AsyncExitStack() as clients, trio.open_nursery() as nursery:
                # One client per URL seen (an endpoint pool has a few), opened on first use.
                unary: dict[str, TritonUnary] = {}
                requests = trio.Semaphore(config.max_requests_in_flight)
                task_status.started()
                while True:
                    await self._collect(batch)
                    try:
                        url = self._url() if callable(self._url) else self._url
                    except Exception as error:  # e.g. no endpoint ready right now
                        for job in batch:
                            job.fail(f"no Triton endpoint for {config.model}: {error}", error)
                        batch = []
                        continue
                    if url not in unary:
                        unary[url] = await clients.enter_async_context(
                            open_unary(
                                url,
                                max_threads=config.max_requests_in_flight,
                                timeout_s=config.request_timeout_s,
                            )
                        )
                    # Waiting here lets the channel fill, which then holds the sessions back.
                    await requests.acquire()
                    # What queued meanwhile rides along, up to a full request.
                    self._top_up(batch)
                    # One K per request: the oldest row's. Rows of other K stay in `batch` and
                    # go next, without a second window (they have waited theirs).
                    k = len(batch[0].chunks)
                    rows = [job for job in batch if len(job.chunks) == k]
                    batch = [job for job in batch if len(job.chunks) != k]
                    nursery.start_soon(self._request, unary[url], url, rows, requests)
        finally:
            for job in batch:
                job.fail("the VAD batcher stopped")
            while True:
                try:
                    self._receive.receive_nowait().fail("the VAD batcher stopped")
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            # Senders waiting now, and later ones, get BrokenResourceError -> VadUnavailable.
            self._receive.close()

    async def _collect(self, batch: list[_Job]) -> None:
        if batch:
            # Rows left over from the last collection: only top up, they have waited already.
            deadline = trio.current_time()
        else:
            batch.append(await self._receive.receive())
            deadline = trio.current_time() + self.config.window_s
        while True:
            self._top_up(batch)
            if len(batch) >= self.config.max_rows:
                return
            with trio.move_on_at(deadline) as window:
                batch.append(await self._receive.receive())
            if window.cancelled_caught:
                return

    def _top_up(self, batch: list[_Job]) -> None:
        while len(batch) < self.config.max_rows:
            try:
                batch.append(self._receive.receive_nowait())
            except trio.WouldBlock:
                return

    async def _request(
        self, triton: TritonUnary, url: str, batch: list[_Job], requests: trio.Semaphore
    ) -> None:
        try:
            live = [job for job in batch if not job.abandoned]
            if not live:
                return
            # Each stream's state is read here, at send time: its previous row is done.
            # K chunks back to back make one row of K * 512 samples.
            audio = np.stack([job.chunks.reshape(-1) for job in live])
            state = np.stack([job.stream._state for job in live])
            context = np.stack([job.stream._context for job in live])
            inputs = [_tensor("AUDIO", audio), _tensor("STATE", state), _tensor("CONTEXT", context)]
            outputs = [grpcclient.InferRequestedOutput(name) for name in _OUTPUTS]
            n, k = len(live), len(live[0].chunks)
            self.stats.requests += 1
            self.stats.rows += n
            self.stats.chunks += n * k
            try:
                result = await triton.infer(self.config.model, inputs, outputs)
                probs = np.asarray(result.as_numpy("SPEECH_PROB"), np.float32)
                states = np.asarray(result.as_numpy("STATE_OUT"), np.float32)
                contexts = np.asarray(result.as_numpy("CONTEXT_OUT"), np.float32)
                shapes = (probs.shape, states.shape, contexts.shape)
                if shapes != ((n, k), (n, *STATE_SHAPE), (n, CONTEXT)):
                    raise ValueError(f"unexpected shapes {shapes}")
            except Exception as error:
                # Whatever went wrong, it went wrong for this request only: the loop goes on.
                self.stats.failed_requests += 1
                message = f"{self.config.model} at {url}: {error}"
                for job in live:
                    job.fail(message, error)
                return
            for i, job in enumerate(live):
                # Copies: a row view would keep the whole batch's arrays alive.
                job.stream._state = states[i].copy()
                job.stream._context = contexts[i].copy()
                job.probabilities = [float(p) for p in probs[i]]
                job.done.set()
        finally:
            for job in batch:
                # Skipped (abandoned) jobs, or a request cancelled on shutdown.
                job.fail("the VAD batcher stopped")
            requests.release()


@asynccontextmanager
async def open_vad_batcher(
    config: VadBatcherConfig, url: str | Callable[[], str]
) -> AsyncIterator[VadBatcher]:
    """A running `VadBatcher` for the body of the `async with`; stopped on exit."""
    batcher = VadBatcher(config, url)
    async with trio.open_nursery() as nursery:
        await nursery.start(batcher.run)
        try:
            yield batcher
        finally:
            nursery.cancel_scope.cancel()
