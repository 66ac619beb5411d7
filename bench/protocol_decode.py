"""Cost of parsing one 20 ms audio append at the edge, against a json+base64 baseline.

Run: `python -m bench.protocol_decode` (from the repo root). Prints a markdown table; with
`--write`, writes it to docs/benchmarks.md under "## Protocol decode", replacing only that
section (bench/cli.py).
"""

from __future__ import annotations

import argparse
import base64
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from bench import cli, report, stats
from orchestrator.protocol.client import InputAudioBufferAppend
from orchestrator.protocol.codec import decode_client_event

HEADING = "## Protocol decode"
COMMAND = "python -m bench.protocol_decode"
DOC = report.DOC

# 20 ms of 24 kHz mono pcm16 = 480 samples = 960 bytes; what a browser client sends.
AUDIO = bytes(range(256)) * 3 + bytes(192)
MESSAGE = json.dumps(
    {
        "type": "input_audio_buffer.append",
        "event_id": "event_123",
        "audio": base64.b64encode(AUDIO).decode("ascii"),
    }
)


def _ours() -> object:
    return decode_client_event(MESSAGE)


def _baseline() -> object:
    # What a hand-rolled handler does: generic parse, then decode the audio field. It does
    # no validation at all, so it is a lower bound for "parse plus base64", not a rival.
    obj = json.loads(MESSAGE)
    return base64.b64decode(obj["audio"])


def _median_us(fn: Callable[[], object], *, n: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter_ns() - start) / n / 1000)
    return stats.median(samples)


def run(n: int, repeats: int) -> str:
    got = decode_client_event(MESSAGE)
    assert isinstance(got, InputAudioBufferAppend) and got.audio == AUDIO
    assert _baseline() == AUDIO
    for fn in (_ours, _baseline):  # warm caches and the decoder before timing
        _median_us(fn, n=1000, repeats=1)
    # Interleave the two so drift in machine load hits both alike.
    ours_runs, base_runs = [], []
    for _ in range(repeats):
        ours_runs.append(_median_us(_ours, n=n, repeats=1))
        base_runs.append(_median_us(_baseline, n=n, repeats=1))
    ours, base = stats.median(ours_runs), stats.median(base_runs)
    return "\n".join(
        [
            HEADING,
            "",
            f"Command: `{COMMAND}` ({repeats} runs x {n} events, median of run means; "
            f"Python {platform.python_version()}, msgspec {msgspec.__version__}, "
            f"{platform.machine()}).",
            "",
            "One `input_audio_buffer.append` carrying 20 ms of 24 kHz pcm16 (960 bytes of "
            f"audio, {len(MESSAGE)} bytes of JSON).",
            "",
            "| decoder | µs per event (median) | time vs baseline |",
            "|---|---:|---:|",
            f"| `decode_client_event` (typed, validated) | {ours:.2f} | {ours / base:.2f}x |",
            f"| `json.loads` + `base64.b64decode` (baseline) | {base:.2f} | 1.00x |",
            "",
        ]
    )


def write_section(section: str, doc: Path = DOC) -> None:
    report.write_section(HEADING, section, doc)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", type=int, default=20_000, help="events per run")
    parser.add_argument("--repeats", type=int, default=15, help="runs per decoder")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    return cli.Outcome(run(args.n, args.repeats))


BENCH = cli.Bench("bench.protocol_decode", __doc__, DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
