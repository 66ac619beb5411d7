"""Batched `vad` in Triton vs one silero-vad instance per session in-process, at 1/16/64 sessions.

Peer servers run one silero model per session in the server process and call it once per
32 ms chunk. Turntaker sends every session's chunk to Triton, whose dynamic batcher runs the
chunks of many sessions in one ONNX call. Both sides use the same ONNX file and one thread.

Figures per session count, medians of the repeats:
- frames per CPU second: chunks processed / CPU seconds of every process involved (for Triton:
  the client, tritonserver and its stub processes), i.e. frames per second per busy core;
- frames per wall second with every session sending as fast as it can;
- for Triton, the mean batch the server formed (inference count / execution count).
A session needs 31.25 frames per second to keep up with real time.

Run: `python -m bench.vad_batching --write` (writes "## VAD batching" in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from bench import cli, report, servers, stats
from orchestrator.triton import TritonServer

HEADING = "## VAD batching"
CHUNK = 512
CONTEXT = 64
Audio = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Figures:
    frames: int
    wall_s: float
    cpu_s: float
    mean_batch: float = 1.0

    @property
    def per_cpu_s(self) -> float:
        return self.frames / self.cpu_s

    @property
    def per_wall_s(self) -> float:
        return self.frames / self.wall_s


def _onnx_path() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("silero_vad")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "silero_vad.onnx"


def _audio(chunks: int, seed: int) -> Audio:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(chunks * CHUNK) * 0.05).astype(np.float32)


def in_process(sessions: int, chunks: int) -> Figures:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    models = [
        ort.InferenceSession(str(_onnx_path()), options, providers=["CPUExecutionProvider"])
        for _ in range(sessions)
    ]
    audio = [_audio(chunks, s) for s in range(sessions)]
    state = [np.zeros((2, 1, 128), np.float32) for _ in range(sessions)]
    context = [np.zeros((1, CONTEXT), np.float32) for _ in range(sessions)]
    sr = np.array(16000, np.int64)
    cpu0, t0 = time.process_time(), time.perf_counter()
    for step in range(chunks):
        for s, model in enumerate(models):
            chunk = audio[s][None, step * CHUNK : (step + 1) * CHUNK]
            x = np.concatenate([context[s], chunk], axis=1)
            _, state[s] = model.run(None, {"input": x, "state": state[s], "sr": sr})
            context[s] = x[:, -CONTEXT:]
    return Figures(sessions * chunks, time.perf_counter() - t0, time.process_time() - cpu0)


def group_cpu_s(pgid: int) -> float:
    """User+system CPU seconds of every live process in the server's process group."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state ppid pgrp ... utime (11) stime (12), 0-based from state.
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _vad_counts(client: grpcclient.InferenceServerClient) -> tuple[int, int]:
    model = client.get_inference_statistics("vad", as_json=True)["model_stats"][0]
    return int(model.get("inference_count", 0)), int(model.get("execution_count", 0))


async def _session(client: aioclient.InferenceServerClient, audio: Audio) -> None:
    state = np.zeros((1, 2, 128), np.float32)
    context = np.zeros((1, CONTEXT), np.float32)
    outputs = [aioclient.InferRequestedOutput(n) for n in ("STATE_OUT", "CONTEXT_OUT")]
    for start in range(0, audio.shape[0], CHUNK):
        tensors = []
        for name, value in (
            ("AUDIO", audio[None, start : start + CHUNK]),
            ("STATE", state),
            ("CONTEXT", context),
        ):
            tensor = aioclient.InferInput(name, list(value.shape), "FP32")
            tensor.set_data_from_numpy(np.ascontiguousarray(value))
            tensors.append(tensor)
        result = await client.infer("vad", tensors, outputs=outputs)
        state = result.as_numpy("STATE_OUT")
        context = result.as_numpy("CONTEXT_OUT")


async def _triton_run(url: str, sessions: int, chunks: int) -> None:
    client = aioclient.InferenceServerClient(url)
    try:
        await asyncio.gather(*(_session(client, _audio(chunks, s)) for s in range(sessions)))
    finally:
        await client.close()


def _ticks(client: grpcclient.InferenceServerClient, sessions: int, chunks: int) -> None:
    """One request per 32 ms tick carrying the chunk of every session (what the orchestrator's
    VAD batcher sends), states carried per row."""
    audio = np.stack([_audio(chunks, s) for s in range(sessions)])
    state = np.zeros((sessions, 2, 128), np.float32)
    context = np.zeros((sessions, CONTEXT), np.float32)
    outputs = [grpcclient.InferRequestedOutput(n) for n in ("STATE_OUT", "CONTEXT_OUT")]
    for step in range(chunks):
        tensors = []
        for name, value in (
            ("AUDIO", audio[:, step * CHUNK : (step + 1) * CHUNK]),
            ("STATE", state),
            ("CONTEXT", context),
        ):
            tensor = grpcclient.InferInput(name, list(value.shape), "FP32")
            tensor.set_data_from_numpy(np.ascontiguousarray(value))
            tensors.append(tensor)
        result = client.infer("vad", tensors, outputs=outputs)
        state = result.as_numpy("STATE_OUT")
        context = result.as_numpy("CONTEXT_OUT")


def through_triton(
    server: TritonServer, sessions: int, chunks: int, *, tick_batches: bool = False
) -> Figures:
    assert server.pid is not None
    sync = grpcclient.InferenceServerClient(server.grpc_url)
    inferences0, executions0 = _vad_counts(sync)
    server0, cpu0, t0 = group_cpu_s(server.pid), time.process_time(), time.perf_counter()
    if tick_batches:
        _ticks(sync, sessions, chunks)
    else:
        asyncio.run(_triton_run(server.grpc_url, sessions, chunks))
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0 + group_cpu_s(server.pid) - server0
    inferences1, executions1 = _vad_counts(sync)
    batch = (inferences1 - inferences0) / max(1, executions1 - executions0)
    return Figures(sessions * chunks, wall, cpu, batch)


def _median(figures: list[Figures]) -> Figures:
    return Figures(
        frames=figures[0].frames,
        wall_s=stats.median(f.wall_s for f in figures),
        cpu_s=stats.median(f.cpu_s for f in figures),
        mean_batch=stats.median(f.mean_batch for f in figures),
    )


def run(session_counts: list[int], frames: int, repeats: int) -> str:
    rows = []
    with servers.triton(("vad",)) as server:
        # Warm-up: first calls pay for lazy initialisation on both sides.
        through_triton(server, 4, 20)
        in_process(1, 20)
        for n in session_counts:
            chunks = max(20, frames // n)
            ours = _median([through_triton(server, n, chunks) for _ in range(repeats)])
            ticked = _median(
                [through_triton(server, n, chunks, tick_batches=True) for _ in range(repeats)]
            )
            peer = _median([in_process(n, chunks) for _ in range(repeats)])
            rows.append((n, chunks, ours, ticked, peer))
    lines = [
        HEADING,
        "",
        f"Command: `python -m bench.vad_batching` ({repeats} runs per cell, medians; "
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, onnxruntime {ort.__version__}).",
        "",
        "Same silero-vad ONNX file and one ONNX thread on both sides; every session sends its "
        "32 ms chunks back to back. CPU seconds count every process involved (for Triton: "
        "client, tritonserver and stub). Real time needs 31.25 frames/s per session.",
        "",
        "Three ways: (a) Triton, one gRPC request per session chunk, batched by Triton's "
        "dynamic batcher; (b) Triton, one request per 32 ms tick carrying every session's "
        "chunk (the orchestrator's VAD batcher); (c) one silero instance per session in the "
        "server process, as peer servers do. Figures are frames per CPU second (per busy core).",
        "",
        "| sessions | frames | (a) Triton per-chunk requests | (b) Triton tick batches | "
        "(c) in-process per session | (a)/(c) | (b)/(c) | (a) mean batch | "
        "(b) frames/s wall | (c) frames/s wall |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, chunks, ours, ticked, peer in rows:
        lines.append(
            f"| {n} | {n * chunks} | {ours.per_cpu_s:.0f} | {ticked.per_cpu_s:.0f} | "
            f"{peer.per_cpu_s:.0f} | {ours.per_cpu_s / peer.per_cpu_s:.2f}x | "
            f"{ticked.per_cpu_s / peer.per_cpu_s:.2f}x | {ours.mean_batch:.1f} | "
            f"{ticked.per_wall_s:.0f} | {peer.per_wall_s:.0f} |"
        )
    return "\n".join(lines) + "\n"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", default="1,16,64", help="comma-separated session counts")
    parser.add_argument("--frames", type=int, default=3200, help="frames per cell")
    parser.add_argument("--repeats", type=int, default=3)


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    counts = [int(n) for n in args.sessions.split(",")]
    return cli.Outcome(run(counts, args.frames, args.repeats))


BENCH = cli.Bench("bench.vad_batching", __doc__, report.DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
