"""Time to first text and first audio chunk of each pipeline, and cancel to last stage stopped.

For `cascade` (asr -> llm -> tts) and `qwen3_omni` (thinker -> talker -> code2wav, tiny random
weights on CPU unless --omni-weights is given), the same spoken question (flite) is sent
through `PipelineStream` against a real tritonserver, `--runs` times each; then as many runs
are cancelled on their first audio chunk, and the cancel board's stop records give the time
from the cancel to the last stage stopping.

Run: `python -m bench.pipeline_ttfa --write` (writes "## Pipeline latency" in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soxr
from scipy.io import wavfile

from bench import cli, report, servers, stats
from orchestrator.triton import TritonServer
from orchestrator.triton.pipeline_client import PipelineRequest, PipelineStream
from turntaker_models.contract import (
    AudioPart,
    Conversation,
    GenerationParameters,
    Message,
    TextPart,
)

HEADING = "## Pipeline latency"
QUESTION = "What is the capital of France?"
STORY = "Tell me a long story about a dragon and a knight."


@dataclass(frozen=True)
class Run:
    first_text_ms: float
    first_audio_ms: float
    total_ms: float


def _spoken(text: str) -> npt.NDArray[np.float32]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "q.wav"
        subprocess.run(["flite", "-t", text, "-o", str(path)], check=True)
        rate, data = wavfile.read(path)
    audio = data.astype(np.float32) / 32768.0
    return np.asarray(soxr.resample(audio, rate, 16000), np.float32)


def _request(question: npt.NDArray[np.float32], max_tokens: int) -> PipelineRequest:
    return PipelineRequest(
        request_id=f"bench-{uuid.uuid4().hex}",
        conversation=Conversation(messages=[Message(role="user", content=[AudioPart(0)])]),
        audio=[question],
        parameters=GenerationParameters(max_tokens=max_tokens),
    )


def one_run(url: str, model: str, request: PipelineRequest) -> Run:
    first_text = first_audio = float("nan")
    with PipelineStream(url, model) as stream:
        began = time.monotonic()
        stream.start(request)
        for chunk in stream.chunks(timeout_s=120):
            if chunk.text and first_text != first_text:
                first_text = chunk.received_at - began
            if chunk.audio.size and first_audio != first_audio:
                first_audio = chunk.received_at - began
        total = time.monotonic() - began
    return Run(first_text * 1000, first_audio * 1000, total * 1000)


def _story(max_tokens: int) -> PipelineRequest:
    # A long answer, so every stage is still busy when the first audio arrives.
    return PipelineRequest(
        request_id=f"bench-{uuid.uuid4().hex}",
        conversation=Conversation(messages=[Message(role="user", content=[TextPart(STORY)])]),
        parameters=GenerationParameters(max_tokens=max_tokens),
    )


def cancel_run(server: TritonServer, model: str, request: PipelineRequest) -> float:
    """Cancel on the first audio chunk; ms from the cancel to the last stage's stop record."""
    with PipelineStream(server.grpc_url, model) as stream:
        stream.start(request)
        for chunk in stream.chunks(timeout_s=120):
            if chunk.audio.size:
                break
        cancelled_at = stream.cancel()
    with server.board() as board:
        deadline = time.monotonic() + 5
        stops = board.stops(request.request_id)
        while time.monotonic() < deadline:
            time.sleep(0.1)
            newer = board.stops(request.request_id)
            if len(newer) == len(stops) and stops:
                break
            stops = newer
    if not stops:
        return float("nan")
    return (max(s.t_ns for s in stops) - cancelled_at) / 1e6


def run(runs: int, max_tokens: int, omni_weights: Path | None, command: str) -> str:
    question = _spoken(QUESTION)
    rows = []
    models = ("cascade", "qwen3_omni", "cancel")
    with servers.triton(models, omni_weights=omni_weights) as server:
        startup = server.startup_s or 0.0
        for model in ("cascade", "qwen3_omni"):
            one_run(server.grpc_url, model, _request(question, max_tokens))  # warm-up
            timed = [
                one_run(server.grpc_url, model, _request(question, max_tokens)) for _ in range(runs)
            ]
            stops = [cancel_run(server, model, _story(200)) for _ in range(runs)]
            rows.append((model, timed, stops))
    weights = str(omni_weights) if omni_weights else "tiny random weights (CPU)"
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({os.cpu_count()} cores, CPU; "
        f"Python {sys.version.split()[0]}; qwen3_omni on {weights}; max_tokens {max_tokens}; "
        f"server start-up with these models {startup:.1f} s).",
        "",
        f'The question is flite speech of "{QUESTION}" (16 kHz). Times from sending the '
        "request to the client receiving the chunk. Cancel to stop: a text request for a long "
        f'story ("{STORY}", max_tokens 200) is cancelled (board write + stream cancel) on its '
        "first audio chunk; from the cancel model's board write to the last stage's stop "
        "record (CLOCK_MONOTONIC, same machine).",
        "",
        "| pipeline | runs | first text ms (median) | first audio ms (median) | whole answer ms "
        "(median) | cancel -> last stage stopped ms (median, max) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for model, timed, stops in rows:
        finite = [s for s in stops if s == s]
        lines.append(
            f"| `{model}` | {runs} | {stats.median(r.first_text_ms for r in timed):.0f} | "
            f"{stats.median(r.first_audio_ms for r in timed):.0f} | "
            f"{stats.median(r.total_ms for r in timed):.0f} | "
            f"{stats.median(stops):.1f}, {max(finite) if finite else float('nan'):.1f} |"
        )
    return "\n".join(lines) + "\n"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--omni-weights", type=Path)


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    return cli.Outcome(run(args.runs, args.max_tokens, args.omni_weights, command))


BENCH = cli.Bench("bench.pipeline_ttfa", __doc__, report.DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
