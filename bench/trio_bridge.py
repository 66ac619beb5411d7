"""What calling Triton from Trio costs: the sync client alone vs the ways of bridging it.

One 1-row `vad` request (a 32 ms chunk with its state), back to back, four ways:
- (a) the sync `tritonclient.grpc` client called directly (no Trio): the floor;
- (b) `TritonUnary.infer()` from Trio: the same call in a worker thread (trio.to_thread);
- (c) the sync client's `async_infer` from Trio: gRPC's own thread runs the callback, which
  wakes Trio with `trio_token.run_sync_soon` (no worker thread);
- (d) `tritonclient.grpc.aio` under trio-asyncio (only if trio-asyncio is installed).
Methods take turns in rounds so that drift on the machine hits them alike. Medians and p90 of
every call's round trip; then calls per second with 16 concurrent callers.

Run: `python -m bench.trio_bridge --write` (writes "## Trio bridge" in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import trio
import tritonclient.grpc as grpcclient

from bench import cli, report, servers, stats
from orchestrator.triton.trio_bridge import TritonUnary, open_unary

HEADING = "## Trio bridge"
CONCURRENT = 16

try:
    import trio_asyncio
    import tritonclient.grpc.aio as aioclient
except ImportError:  # optional: the (d) column is left out
    trio_asyncio = None


def _inputs(module: Any) -> list[Any]:
    tensors = []
    for name, shape in (("AUDIO", (1, 512)), ("STATE", (1, 2, 128)), ("CONTEXT", (1, 64))):
        tensor = module.InferInput(name, list(shape), "FP32")
        tensor.set_data_from_numpy(np.zeros(shape, np.float32))
        tensors.append(tensor)
    return tensors


def _outputs(module: Any) -> list[Any]:
    return [module.InferRequestedOutput(n) for n in ("SPEECH_PROB", "STATE_OUT", "CONTEXT_OUT")]


def _check(result: Any) -> None:
    # Every way must really get the answer back, not just a response.
    assert result.as_numpy("STATE_OUT").shape == (1, 2, 128)


def sync_direct(url: str, calls: int) -> list[float]:
    times = []
    with grpcclient.InferenceServerClient(url) as client:
        inputs, outputs = _inputs(grpcclient), _outputs(grpcclient)
        for _ in range(calls):
            t0 = time.perf_counter()
            _check(client.infer("vad", inputs, outputs=outputs))
            times.append(time.perf_counter() - t0)
    return times


async def _timed(calls: int, one: Callable[[], Awaitable[None]]) -> list[float]:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await one()
        times.append(time.perf_counter() - t0)
    return times


async def _bridge_one(triton: TritonUnary, inputs: list[Any], outputs: list[Any]) -> None:
    _check(await triton.infer("vad", inputs, outputs))


async def through_bridge(url: str, calls: int) -> list[float]:
    inputs, outputs = _inputs(grpcclient), _outputs(grpcclient)
    async with open_unary(url) as triton:
        return await _timed(calls, lambda: _bridge_one(triton, inputs, outputs))


async def _callback_one(
    client: grpcclient.InferenceServerClient, inputs: list[Any], outputs: list[Any]
) -> None:
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    box: list[Any] = []

    def callback(result: Any = None, error: Any = None) -> None:
        box.append((result, error))
        token.run_sync_soon(done.set)

    client.async_infer("vad", inputs, callback, outputs=outputs)
    await done.wait()
    result, error = box[0]
    if error is not None:
        raise error
    _check(result)


async def through_callback(url: str, calls: int) -> list[float]:
    inputs, outputs = _inputs(grpcclient), _outputs(grpcclient)
    with grpcclient.InferenceServerClient(url) as client:
        return await _timed(calls, lambda: _callback_one(client, inputs, outputs))


async def _aio_one(client: Any, inputs: list[Any], outputs: list[Any]) -> None:
    assert trio_asyncio is not None
    _check(await trio_asyncio.aio_as_trio(client.infer)("vad", inputs, outputs=outputs))


async def through_trio_asyncio(url: str, calls: int) -> list[float]:
    assert trio_asyncio is not None
    inputs, outputs = _inputs(aioclient), _outputs(aioclient)
    async with trio_asyncio.open_loop():
        # The aio client binds to the running asyncio loop: build and close it inside.
        client = await trio_asyncio.aio_as_trio(_aio_client)(url)
        try:
            return await _timed(calls, lambda: _aio_one(client, inputs, outputs))
        finally:
            await trio_asyncio.aio_as_trio(client.close)()


async def _aio_client(url: str) -> Any:
    return aioclient.InferenceServerClient(url)


# --- concurrency: CONCURRENT callers for a fixed time, calls per second --------------------


def sync_concurrent(url: str, seconds: float) -> float:
    stop = time.perf_counter() + seconds
    counts = [0] * CONCURRENT
    # One shared client, as TritonUnary does: unary calls are thread-safe.
    with grpcclient.InferenceServerClient(url) as client:
        inputs, outputs = _inputs(grpcclient), _outputs(grpcclient)

        def worker(i: int) -> None:
            while time.perf_counter() < stop:
                _check(client.infer("vad", inputs, outputs=outputs))
                counts[i] += 1

        t0 = time.perf_counter()
        with ThreadPoolExecutor(CONCURRENT) as pool:
            list(pool.map(worker, range(CONCURRENT)))
        return sum(counts) / (time.perf_counter() - t0)


async def _concurrent(seconds: float, one: Callable[[], Awaitable[None]]) -> float:
    stop = time.perf_counter() + seconds
    count = 0

    async def worker() -> None:
        nonlocal count
        while time.perf_counter() < stop:
            await one()
            count += 1

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(CONCURRENT):
            nursery.start_soon(worker)
    return count / (time.perf_counter() - t0)


async def bridge_concurrent(url: str, seconds: float) -> float:
    inputs, outputs = _inputs(grpcclient), _outputs(grpcclient)
    async with open_unary(url, max_threads=CONCURRENT) as triton:
        return await _concurrent(seconds, lambda: _bridge_one(triton, inputs, outputs))


async def callback_concurrent(url: str, seconds: float) -> float:
    inputs, outputs = _inputs(grpcclient), _outputs(grpcclient)
    with grpcclient.InferenceServerClient(url) as client:
        return await _concurrent(seconds, lambda: _callback_one(client, inputs, outputs))


async def trio_asyncio_concurrent(url: str, seconds: float) -> float:
    assert trio_asyncio is not None
    inputs, outputs = _inputs(aioclient), _outputs(aioclient)
    async with trio_asyncio.open_loop():
        client = await trio_asyncio.aio_as_trio(_aio_client)(url)
        try:
            return await _concurrent(seconds, lambda: _aio_one(client, inputs, outputs))
        finally:
            await trio_asyncio.aio_as_trio(client.close)()


def run(calls: int, rounds: int, seconds: float) -> str:
    ways: dict[str, Callable[[str, int], list[float]]] = {
        "(a) sync client, direct": sync_direct,
        "(b) `TritonUnary.infer()` (worker thread)": lambda u, n: trio.run(through_bridge, u, n),
        "(c) sync `async_infer` + `run_sync_soon`": lambda u, n: trio.run(through_callback, u, n),
    }
    busy: dict[str, Callable[[str, float], float]] = {
        "(a) sync client, direct": sync_concurrent,
        "(b) `TritonUnary.infer()` (worker thread)": lambda u, s: trio.run(bridge_concurrent, u, s),
        "(c) sync `async_infer` + `run_sync_soon`": lambda u, s: trio.run(
            callback_concurrent, u, s
        ),
    }
    if trio_asyncio is not None:
        name = "(d) `grpc.aio` under trio-asyncio"
        ways[name] = lambda u, n: trio.run(through_trio_asyncio, u, n)
        busy[name] = lambda u, s: trio.run(trio_asyncio_concurrent, u, s)
    times: dict[str, list[float]] = {name: [] for name in ways}
    rates: dict[str, list[float]] = {name: [] for name in busy}
    with servers.triton(("vad",)) as server:
        url = server.grpc_url
        for way in ways.values():  # warm-up: lazy init on both sides
            way(url, 50)
        for _ in range(rounds):
            for name, way in ways.items():
                times[name] += way(url, calls)
            for name, concurrent in busy.items():
                rates[name].append(concurrent(url, seconds))
    base = stats.median(times["(a) sync client, direct"])
    base_rate = stats.median(rates["(a) sync client, direct"])
    lines = [
        HEADING,
        "",
        f"Command: `python -m bench.trio_bridge` ({rounds} rounds x {calls} calls per way, "
        f"methods taking turns; {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
        f"trio {trio.__version__}"
        + (f", trio-asyncio {trio_asyncio.__version__}" if trio_asyncio else "")
        + ").",
        "",
        "One 1-row `vad` request (512 samples + state) to a local tritonserver, back to back "
        "from one caller; the round trip as the caller sees it. Then calls per second with "
        f"{CONCURRENT} concurrent callers ({seconds:.0f} s per round, median of rounds).",
        "",
        "The `vad` model's dynamic batcher waits up to 1 ms for company "
        "(max_queue_delay_microseconds), which a lone caller pays every time: the added ms "
        "column is the bridge's own cost.",
        "",
        "| way | median ms | p90 ms | added ms (median) | median vs (a) | calls/s, "
        f"{CONCURRENT} callers | vs (a) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, samples in times.items():
        median = stats.median(samples)
        p90 = stats.p90(samples)
        rate = stats.median(rates[name])
        lines.append(
            f"| {name} | {median * 1e3:.3f} | {p90 * 1e3:.3f} | "
            f"{(median - base) * 1e3:+.3f} | {median / base:.2f}x | "
            f"{rate:.0f} | {rate / base_rate:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calls", type=int, default=500, help="calls per way per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0, help="per concurrent round")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    return cli.Outcome(run(args.calls, args.rounds, args.seconds))


BENCH = cli.Bench("bench.trio_bridge", __doc__, report.DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
