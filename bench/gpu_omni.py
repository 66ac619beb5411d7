"""Qwen3-Omni streams at concurrency 1, 4 and 10: time to first audio, codec frames/s, cancel.

    python -m bench.gpu_omni --weights real --write       # one GPU (bench/gpu_omni.sh)
    python -m bench.gpu_omni --weights tiny --write       # tiny weights on CPU: the baseline
    python -m bench.gpu_omni --weights tiny --quick       # seconds; what CI runs

The plan, the server, the statistics and the table; bench/omni_streams.py runs the streams and
says what each number measures.

Rules:
- A real tritonserver on model_repository/ with only `qwen3_omni` (its three steps) and
  `cancel`, driven over gRPC with `PipelineStream`, as a client would; or a running one
  (`--url`, `--board` for its cancel board).
- Weights: `real` = the Qwen3-Omni-30B-A3B sizes with random values built on the GPU at load
  (real_size.py: no download, no weight files), bf16 on cuda; `tiny` = the tiny checkpoint,
  float32 on CPU; `tiny-random` = the tiny sizes through the random-init loader path.
- Prompt: a user turn of flite speech plus a short text (bench/omni_streams.py).
- N streams start together, several rounds; one stream of a round of N is cancelled once all
  have audio. A time budget caps the rounds (every cell gets at least one); the table says
  how many ran.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np

from bench import cli, report, servers, stats
from bench.omni_streams import MODEL, TEXT, Results, run_plan
from turntaker_models.cancel_board import CancelBoard
from turntaker_models.omni import loader

Weights = Literal["real", "tiny", "tiny-random"]
HEADINGS: dict[str, str] = {
    "real": "## Qwen3-Omni streams (real-size random weights, GPU)",
    "tiny": "## Qwen3-Omni streams (tiny weights, CPU)",
    "tiny-random": "## Qwen3-Omni streams (tiny random-init weights, CPU)",
}
REAL_TIME_FPS = 12.5  # codec frames per second of 24 kHz audio (80 ms each): real time
# Anchors: vllm-omni's async-chunk serving of the real model on one H800, and the Qwen3-Omni
# technical report's theoretical first packet (cold start, one stream).
VLLM_OMNI_TTFA_MS = {1: 523.0, 4: 786.0, 10: 1629.0}
REPORT_FIRST_PACKET_MS = 234.0


@dataclass(frozen=True)
class Plan:
    """What one run does; `rounds` per concurrency, the budget caps them (at least one each)."""

    weights: Weights
    concurrency: tuple[int, ...]
    rounds: tuple[int, ...]
    cancel_rounds: int
    max_tokens: int
    cancel_max_tokens: int
    budget_s: float
    threads: int
    # Pause after a cancel round: the cancelled requests' queued messages still close in the
    # stages; let them, or they weigh on the next round (and a server stopped then waits).
    settle_s: float = 2.0
    # Real widths with this many layers per stack (real weights only): a smoke run on a CPU.
    layers: int | None = None


def heading(plan: Plan) -> str:
    if plan.layers is not None:
        return f"## Qwen3-Omni streams (real widths, {plan.layers} layers per stack: smoke run)"
    return HEADINGS[plan.weights]


def plan_for(weights: Weights, quick: bool) -> Plan:
    if quick:
        return Plan(weights, (1, 4, 10), (1, 1, 1), 1, 2, 64, 60.0, 1, settle_s=0.5)
    if weights == "real":
        # Sized for under 8 minutes on one H200 with building and start-up (an estimate: 240 s
        # of rounds; not yet run on a GPU). bench/gpu_omni.sh runs it.
        return Plan(weights, (1, 4, 10), (8, 4, 3), 3, 8, 200, 240.0, 4)
    # The same streams as the GPU run, more rounds: the CPU baseline of that table.
    return Plan(weights, (1, 4, 10), (20, 10, 6), 6, 8, 200, 600.0, 1)


def _stats(values: Sequence[float], slow_side_low: bool = False) -> tuple[int, float, float, float]:
    kept = stats.finite(values)
    # For a rate the bad tail is the low one: its "p90" is what 90% of streams beat.
    q90, q99 = (0.10, 0.01) if slow_side_low else (0.90, 0.99)
    return len(kept), stats.median(kept), stats.quantile(kept, q90), stats.quantile(kept, q99)


def _fmt(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}" if np.isfinite(value) else "nan"


def table(plan: Plan, results: Results) -> list[str]:
    lines = [
        "| metric | streams | n | median | p90 | p99 | median vs 1 stream | anchor |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    base = min(plan.concurrency)
    rows: list[tuple[str, dict[int, list[float]], int, bool]] = [
        ("time to first audio, ms", results.ttfa_ms, 0, False),
        ("codec frames/s per stream", results.fps, 1, True),
        (
            "real-time factor (frames/s / 12.5)",
            {n: [v / REAL_TIME_FPS for v in vs] for n, vs in results.fps.items()},
            2,
            True,
        ),
        ("cancel -> last stage stopped, ms", results.cancel_ms, 1, False),
    ]
    for name, values, digits, low in rows:
        first = _stats(values.get(base, []), low)[1]
        for n in plan.concurrency:
            count, median, p90, p99 = _stats(values.get(n, []), low)
            anchor = ""
            if name.startswith("time to first audio") and n in VLLM_OMNI_TTFA_MS:
                ms = VLLM_OMNI_TTFA_MS[n]
                anchor = (
                    f"vllm-omni async-chunk {ms:,.0f} ms ({ms / VLLM_OMNI_TTFA_MS[1]:.2f}x), H800"
                )
                if n == 1:
                    anchor += f"; Qwen3-Omni report {REPORT_FIRST_PACKET_MS:.0f} ms (theoretical)"
            elif name.startswith("real-time") and n == base:
                anchor = "1.00 = real time"
            ratio = stats.ratio(median, first)
            lines.append(
                f"| {name} | {n} | {count} | {_fmt(median, digits)} | {_fmt(p90, digits)} | "
                f"{_fmt(p99, digits)} | {_fmt(ratio, 2)}x | {anchor} |"
            )
    return lines


def device_description(weights: Weights) -> str:
    if weights == "real":
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            return f"{props.name} ({props.total_memory / 2**30:.0f} GiB), {os.cpu_count()} cores"
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"CPU only, {os.cpu_count()} cores ({model})"


def section(
    plan: Plan,
    results: Results,
    phases: dict[str, float],
    command: str,
    device: str,
    prompt: str,
    load: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> str:
    base = min(plan.concurrency)
    top = max(plan.concurrency)
    t1 = _stats(results.ttfa_ms.get(base, []))[1]
    tn = _stats(results.ttfa_ms.get(top, []))[1]
    stopped = [s for ss in results.stages_stopped.values() for s in ss]
    timing = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())
    lines = [
        heading(plan),
        "",
        f"Command: `{command}` ({device}; Python {sys.version.split()[0]}; "
        f"load average {load[0][0]:.2f} before, {load[1][0]:.2f} after).",
        "",
        f'Prompt: one user turn, {prompt} then "{TEXT}"; max_tokens {plan.max_tokens} '
        f"(the talker speaks at most 5 codec frames per text token + 25; audio per stream: "
        f"median {_stats(results.audio_s)[1]:.2f} s). Greedy decoding. "
        f"Streams of a round start together; the first round after a warm-up stream. "
        f"Cancel: {plan.cancel_max_tokens}-token answers, one stream of the round cancelled "
        f"once all speak; stages that recorded a stop per cancel: {sorted(set(stopped))}. "
        f"Phases: {timing}.",
        "",
        "The stages run each stream's forwards on their own (one thread per stream, no "
        "batching across streams): N streams share each stage's device one forward at a "
        f"time. Time to first audio at {top} streams is {tn / t1:.2f}x that at {base} "
        "(vllm-omni, which batches: 3.11x at 10). For frames/s and the real-time factor, "
        "p90/p99 are the slow side (what 90% / 99% of streams beat).",
        "",
        *table(plan, results),
    ]
    return "\n".join(lines) + "\n"


@contextmanager
def served(
    plan: Plan, url: str | None, board_path: Path | None, log: Callable[[str], None]
) -> Iterator[tuple[str, CancelBoard, dict[str, float]]]:
    """A gRPC url and cancel board: the given server's, or a server started for this run."""
    phases: dict[str, float] = {}
    with ExitStack() as stack:
        if url is not None:
            if board_path is None:
                raise SystemExit("--url needs --board (the server's TURNTAKER_CANCEL_BOARD)")
            yield url, stack.enter_context(CancelBoard.open(board_path)), phases
            return
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-omni-")))
        began = time.monotonic()
        weights = _weights_folder(plan, tmp)
        phases["weights folder"] = time.monotonic() - began
        log(f"weights folder {phases['weights folder']:.1f} s: {weights or 'tiny (cache)'}")
        server = stack.enter_context(
            servers.triton(
                (MODEL, "cancel"),
                omni_weights=weights,
                model_threads=plan.threads,
                startup_timeout_s=420.0 if plan.weights == "real" else 180.0,
                log_dir=tmp,
            )
        )
        phases["server start (stages built)"] = server.startup_s or 0.0
        log(f"server start {phases['server start (stages built)']:.1f} s")
        yield server.grpc_url, stack.enter_context(server.board()), phases


def _weights_folder(plan: Plan, tmp: Path) -> Path | None:
    from turntaker_models.omni import real_size
    from turntaker_models.omni.tiny import make_tiny_omni
    from turntaker_models.settings import ModelSettings

    if plan.weights == "tiny":
        return None
    if plan.weights == "real":
        import torch

        if not torch.cuda.is_available() and plan.layers is None:
            raise SystemExit("--weights real needs a CUDA GPU (30B parameters in bf16)")
        # The stage processes inherit these: bf16 (the real model's dtype) on the GPU, or on
        # the CPU for a shallow smoke run.
        os.environ[loader.DEVICE_ENV] = "cuda" if torch.cuda.is_available() else "cpu"
        os.environ[loader.DTYPE_ENV] = "bfloat16"
    tiny = make_tiny_omni(ModelSettings.from_env().cache_dir / loader.TINY_DIR_NAME)
    sizes: Literal["real", "tiny"] = "real" if plan.weights == "real" else "tiny"
    return real_size.make_random_init_omni(
        tmp / f"{sizes}-random", tiny, seed=0, sizes=sizes, layers=plan.layers
    )


def run(
    plan: Plan,
    command: str,
    url: str | None = None,
    board_path: Path | None = None,
    log: Callable[[str], None] = print,
) -> str:
    """Measure and return the markdown section."""
    began = time.monotonic()
    load_before = os.getloadavg()
    with served(plan, url, board_path, log) as (grpc_url, board, phases):
        results, measured, prompt = run_plan(plan, grpc_url, board, log)
        load_after = os.getloadavg()
        stopping = time.monotonic()
    phases.update(measured)
    if url is None:
        phases["server stop"] = time.monotonic() - stopping
    phases["total"] = time.monotonic() - began
    device = device_description(plan.weights)
    return section(plan, results, phases, command, device, prompt, (load_before, load_after))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", choices=("real", "tiny", "tiny-random"), default="tiny")
    parser.add_argument("--quick", action="store_true", help="1 round each, 2-token answers (CI)")
    parser.add_argument("--url", help="a running server's gRPC HOST:PORT instead of starting one")
    parser.add_argument("--board", type=Path, help="that server's cancel board file")
    parser.add_argument("--budget-s", type=float, help="cap on the measuring rounds' time")
    parser.add_argument(
        "--layers", type=int, help="real weights: real widths, N layers per stack (CPU smoke)"
    )


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    plan = plan_for(args.weights, args.quick)
    if args.budget_s is not None:
        plan = replace(plan, budget_s=args.budget_s)
    if args.layers is not None:
        if args.weights != "real" or args.write:
            raise cli.Usage("--layers is a smoke run of --weights real; it writes nothing")
        plan = replace(plan, layers=args.layers)
    return cli.Outcome(run(plan, command, args.url, args.board, log=_progress))


def _progress(message: str) -> None:
    print(message, file=sys.stderr)


BENCH = cli.Bench(
    "bench.gpu_omni", __doc__, report.DOC, _arguments, _run, local=("--url", "--board")
)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
