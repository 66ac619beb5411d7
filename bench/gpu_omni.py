"""Qwen3-Omni streams at concurrency 1, 4, 10 and 32, batching on and off: time to first audio,
codec frames/s (per stream and summed), cancel -> last stage stopped.

    python -m bench.gpu_omni --weights real --write       # one GPU (bench/gpu_omni.sh)
    python -m bench.gpu_omni --weights tiny --write       # tiny weights on CPU: the baseline
    python -m bench.gpu_omni --weights tiny --quick       # seconds; what CI runs (direct)

The plan, the serving, the statistics and the table; bench/omni_streams.py runs the streams and
says what each number measures, bench/omni_direct.py chains the stages in this process.

Rules:
- `--mode direct` (the default): the three stage classes built in this process and chained as
  the `qwen3_omni` ensemble chains them (bench/omni_direct.py), no tritonserver, no
  tritonclient, no nvidia-pytriton (nothing of them is imported). `--mode triton`: a real
  tritonserver on model_repository/ with only `qwen3_omni` (its three steps) and `cancel`,
  driven over gRPC with `PipelineStream`, as a client would; or a running one (`--url`,
  `--board` for its cancel board).
- Batching (`ModelSettings.omni_batching`, TURNTAKER_OMNI_BATCHING): both sides in one run by
  default, each on stages built for it (direct) or a server started for it (triton), side by
  side in one table with the ratio batched / unbatched. A given server (`--url`) is one side:
  `--batching on|off` says which.
- Weights: `real` = the Qwen3-Omni-30B-A3B sizes with random values built on the GPU at load
  (real_size.py: no download, no weight files), bf16 on cuda; `tiny` = the tiny checkpoint,
  float32 on CPU; `tiny-random` = the tiny sizes through the random-init loader path.
- Prompt: a user turn of flite speech plus a short text (bench/omni_streams.py).
- N streams start together, several rounds; one stream of a round of N is cancelled once all
  have audio. A time budget per side caps the rounds (every cell gets at least one); the
  table says how many ran.
- The issue's targets (CPU, tiny weights) stand beside the numbers, at 10 streams vs 1: summed
  frames/s >= 5x, time to first audio <= 2x, cancel -> stopped <= 2x; "met" or "missed" per
  side.
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

from bench import cli, report, stats
from bench.omni_streams import MODEL, TEXT, Connect, Results, run_plan
from turntaker_models.cancel_board import CancelBoard
from turntaker_models.omni import loader
from turntaker_models.settings import OMNI_BATCHING_ENV, ModelSettings

Weights = Literal["real", "tiny", "tiny-random"]
Mode = Literal["direct", "triton"]
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
# The targets at TARGET_STREAMS vs 1 stream: (metric, ">=" or "<=", ratio).
TARGET_STREAMS = 10
TARGETS: dict[str, tuple[str, float]] = {
    "summed codec frames/s": (">=", 5.0),
    "time to first audio, ms": ("<=", 2.0),
    "cancel -> last stage stopped, ms": ("<=", 2.0),
}
SIDES = {"both": (True, False), "on": (True,), "off": (False,)}


@dataclass(frozen=True)
class Plan:
    """What one run does; `rounds` per concurrency, the budget caps them (at least one each)."""

    weights: Weights
    concurrency: tuple[int, ...]
    rounds: tuple[int, ...]
    cancel_rounds: int
    max_tokens: int
    cancel_max_tokens: int
    budget_s: float  # per batching side
    threads: int
    mode: Mode = "direct"
    sides: tuple[bool, ...] = (True, False)  # omni_batching of each side, in run order
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
        # CI (tests/bench/test_gpu_omni.py, ~60 s on 2 cores): 1 and 4 streams, both sides.
        return Plan(weights, (1, 4), (1, 1), 1, 2, 64, 20.0, 1, settle_s=0.5)
    if weights == "real":
        # Sized for under 8 minutes on one H200 (an estimate, not yet run on a GPU): two stage
        # builds (one per side) and 2 x 110 s of rounds. bench/gpu_omni.sh runs it.
        return Plan(weights, (1, 4, 10, 32), (4, 3, 2, 1), 2, 8, 200, 110.0, 4)
    # The same streams as the GPU run, more rounds: the CPU baseline of that table.
    return Plan(weights, (1, 4, 10, 32), (12, 6, 4, 2), 4, 8, 200, 300.0, 1)


def _stats(values: Sequence[float], slow_side_low: bool = False) -> tuple[int, float, float]:
    kept = stats.finite(values)
    # For a rate the bad tail is the low one: its "p90" is what 90% of streams beat.
    return len(kept), stats.median(kept), stats.quantile(kept, 0.10 if slow_side_low else 0.90)


def _fmt(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}" if np.isfinite(value) else "-"


def _x(ratio: float) -> str:
    return f"{ratio:.2f}x" if np.isfinite(ratio) else "-"


def _target(name: str, ratios: dict[bool, float]) -> str:
    """The issue's target for `name` and, per side measured, its ratio and met / missed."""
    if name not in TARGETS:
        return ""
    sign, bound = TARGETS[name]
    said = []
    for side, ratio in ratios.items():
        if np.isfinite(ratio):
            met = ratio >= bound if sign == ">=" else ratio <= bound
            said.append(f"{_side(side)} {ratio:.2f}x {'met' if met else 'missed'}")
    return f"{sign} {bound:.0f}x of 1 stream: " + (", ".join(said) or "-")


def _side(batching: bool) -> str:
    return "batched" if batching else "unbatched"


def table(plan: Plan, results: dict[bool, Results]) -> list[str]:
    lines = [
        "| metric | streams | n batched / unbatched | batched median | batched p90 "
        "| unbatched median | unbatched p90 | batched / unbatched | vs 1 stream: batched "
        "| vs 1 stream: unbatched | target (10 vs 1 stream) | anchor |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    base = min(plan.concurrency)
    empty = Results()
    rows: list[tuple[str, Callable[[Results], dict[int, list[float]]], int, bool]] = [
        ("time to first audio, ms", lambda r: r.ttfa_ms, 0, False),
        ("codec frames/s per stream", lambda r: r.fps, 1, True),
        ("summed codec frames/s", lambda r: r.summed_fps, 1, True),
        ("cancel -> last stage stopped, ms", lambda r: r.cancel_ms, 1, False),
    ]
    for name, pick, digits, low in rows:
        for n in plan.concurrency:
            cells: dict[bool, tuple[int, float, float]] = {}
            versus: dict[bool, float] = {}
            for side in (True, False):
                values = pick(results.get(side, empty))
                cells[side] = _stats(values.get(n, []), low)
                versus[side] = stats.ratio(cells[side][1], _stats(values.get(base, []), low)[1])
            on, off = cells[True], cells[False]
            anchor = ""
            if name.startswith("time to first audio") and n in VLLM_OMNI_TTFA_MS:
                ms = VLLM_OMNI_TTFA_MS[n]
                anchor = (
                    f"vllm-omni async-chunk {ms:,.0f} ms ({ms / VLLM_OMNI_TTFA_MS[1]:.2f}x), H800"
                )
                if n == 1:
                    anchor += f"; Qwen3-Omni report {REPORT_FIRST_PACKET_MS:.0f} ms (theoretical)"
            elif name == "codec frames/s per stream" and n == base:
                anchor = f"{REAL_TIME_FPS} = real time"
            measured = {side: versus[side] for side in plan.sides}
            target = _target(name, measured) if n == TARGET_STREAMS else ""
            lines.append(
                f"| {name} | {n} | {on[0]} / {off[0]} | {_fmt(on[1], digits)} | "
                f"{_fmt(on[2], digits)} | {_fmt(off[1], digits)} | {_fmt(off[2], digits)} | "
                f"{_x(stats.ratio(on[1], off[1]))} | {_x(versus[True])} | "
                f"{_x(versus[False])} | {target} | {anchor} |"
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
    results: dict[bool, Results],
    phases: dict[str, float],
    command: str,
    device: str,
    prompt: str,
    load: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> str:
    stopped = sorted({s for r in results.values() for ss in r.stages_stopped.values() for s in ss})
    audio = [a for r in results.values() for a in r.audio_s]
    timing = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())
    served = (
        "the three stages chained in one process as the ensemble chains them (no tritonserver)"
        if plan.mode == "direct"
        else "tritonserver's qwen3_omni ensemble over gRPC"
    )
    lines = [
        heading(plan),
        "",
        f"Command: `{command}` ({device}; Python {sys.version.split()[0]}; "
        f"load average {load[0][0]:.2f} before, {load[1][0]:.2f} after).",
        "",
        f"Served: {served}; batching on and off are separate stage builds "
        f"({OMNI_BATCHING_ENV}=1 / 0), measured one after the other. "
        f'Prompt: one user turn, {prompt} then "{TEXT}"; max_tokens {plan.max_tokens} '
        f"(the talker speaks at most 5 codec frames per text token + 25; audio per stream: "
        f"median {stats.median(audio):.2f} s). Greedy decoding. "
        f"Streams of a round start together; the first round after a warm-up stream. "
        f"Summed codec frames/s: a round's streams' frames/s added up. "
        f"Cancel: {plan.cancel_max_tokens}-token answers, one stream of the round cancelled "
        f"once all speak; stages that recorded a stop per cancel: {stopped}. "
        f"Phases: {timing}.",
        "",
        "Unbatched, N streams share each stage's device one forward at a time; batched, "
        "each stage steps every ready stream in one forward. The targets (the issue's, for "
        "tiny weights on CPU) compare 10 streams with 1, per side. vllm-omni, which batches: "
        "3.11x time to first audio at 10. For frames/s, p90 is the slow side (what 90% of "
        "streams, or rounds, beat); '-': not measured.",
        "",
        *table(plan, results),
    ]
    return "\n".join(lines) + "\n"


@contextmanager
def served(
    plan: Plan,
    batching: bool,
    weights: Path | None,
    url: str | None,
    board_path: Path | None,
    log: Callable[[str], None],
) -> Iterator[tuple[Connect, CancelBoard, dict[str, float]]]:
    """Streams and a cancel board for one batching side: a given server's, a server started
    for it, or the stages built in this process."""
    from bench.omni_streams import triton_connect

    phases: dict[str, float] = {}
    side = _side(batching)
    with ExitStack() as stack:
        if url is not None:
            if board_path is None:
                raise SystemExit("--url needs --board (the server's TURNTAKER_CANCEL_BOARD)")
            yield triton_connect(url), stack.enter_context(CancelBoard.open(board_path)), phases
            return
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-omni-")))
        began = time.monotonic()
        if plan.mode == "direct":
            from bench.omni_direct import direct

            settings = replace(
                ModelSettings.from_env(),
                omni_weights=weights,
                threads=plan.threads,
                omni_batching=batching,
                omni_max_streams=max(32, *plan.concurrency),
            )
            top = settings.omni_max_streams
            connect, board = stack.enter_context(direct(settings, tmp / "board", top))
            phases[f"{side}: stages built"] = time.monotonic() - began
            log(f"{side}: stages built in {phases[f'{side}: stages built']:.1f} s")
            yield connect, board, phases
            return
        from bench import servers

        server = stack.enter_context(
            servers.triton(
                (MODEL, "cancel"),
                omni_batching=batching,
                omni_max_streams=max(32, *plan.concurrency),
                omni_weights=weights,
                model_threads=plan.threads,
                startup_timeout_s=420.0 if plan.weights == "real" else 180.0,
                log_dir=tmp,
            )
        )
        phases[f"{side}: server start"] = server.startup_s or 0.0
        log(f"{side}: server start {phases[f'{side}: server start']:.1f} s")
        yield triton_connect(server.grpc_url), stack.enter_context(server.board()), phases


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
    """Measure each batching side and return the markdown section."""
    began = time.monotonic()
    load_before = os.getloadavg()
    results: dict[bool, Results] = {}
    phases: dict[str, float] = {}
    prompt = ""
    with tempfile.TemporaryDirectory(prefix="gpu-omni-weights-") as tmp:
        weights = None
        if url is None:
            weights = _weights_folder(plan, Path(tmp))
            phases["weights folder"] = time.monotonic() - began
            log(f"weights folder {phases['weights folder']:.1f} s: {weights or 'tiny (cache)'}")
        for batching in plan.sides:
            with served(plan, batching, weights, url, board_path, log) as (connect, board, made):
                log(f"{_side(batching)}: measuring")
                results[batching], measured, prompt = run_plan(plan, connect, board, log)
                stopping = time.monotonic()
            phases.update(made)
            phases.update({f"{_side(batching)}: {k}": v for k, v in measured.items()})
            phases[f"{_side(batching)}: stop"] = time.monotonic() - stopping
    load_after = os.getloadavg()
    phases["total"] = time.monotonic() - began
    device = device_description(plan.weights)
    return section(plan, results, phases, command, device, prompt, (load_before, load_after))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", choices=("real", "tiny", "tiny-random"), default="tiny")
    parser.add_argument(
        "--mode",
        choices=("direct", "triton"),
        default="direct",
        help="direct: the stages in this process (no tritonserver); triton: over gRPC",
    )
    parser.add_argument(
        "--batching",
        choices=tuple(SIDES),
        default="both",
        help="the sides measured; a given server (--url) is one: on or off",
    )
    parser.add_argument("--quick", action="store_true", help="1 round each, 2-token answers (CI)")
    parser.add_argument("--url", help="a running server's gRPC HOST:PORT instead of starting one")
    parser.add_argument("--board", type=Path, help="that server's cancel board file")
    parser.add_argument("--budget-s", type=float, help="cap on each side's measuring rounds")
    parser.add_argument(
        "--layers", type=int, help="real weights: real widths, N layers per stack (CPU smoke)"
    )


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    plan = replace(plan_for(args.weights, args.quick), mode=args.mode, sides=SIDES[args.batching])
    if args.url is not None and (args.mode != "triton" or args.batching == "both"):
        raise cli.Usage("--url is a running server: --mode triton and --batching on or off")
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
