"""The long protocol fuzz of the live server: `python -m bench.fuzz --inputs 50000`.

Starts its own tritonserver (the models the pipeline needs) and realtime server, then sends
`--inputs` generated client messages over real WebSockets, in sessions of `--length`, with the
generators and invariants of tests/service/test_fuzz_e2e.py (tests/service/fuzz_inputs.py):
every answer checked against the message that caused it, every server event against the
contract's schema and the openai SDK's, no 1011 or dropped socket, no hang, no server error
logged; afterwards `/healthz` ok and no session left active.

Unlike the test it keeps going after a failure and reports them all, each with the message that
broke it and its session. The seed is random unless `--seed` is given, and printed first:
`--seed S` regenerates the same inputs. Exit status 1 on any broken invariant.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import cast

from hypothesis import HealthCheck, Phase, given, seed, settings

from bench import report
from orchestrator.service.config import Pipeline, ServiceConfig
from orchestrator.service.serve import BackgroundServer, needed_models
from orchestrator.triton import TritonConfig, TritonServer
from tests.service.fuzz_inputs import (
    FuzzRunner,
    Script,
    capture_server_errors,
    healthz,
    metric_value,
    scripts,
    wait_for_metric,
)

REPO = Path(__file__).resolve().parent.parent / "model_repository"


@contextmanager
def _server(pipeline: str, triton_url: str | None) -> Iterator[BackgroundServer]:
    service = ServiceConfig(port=report.free_port(), pipeline=cast(Pipeline, pipeline))
    if triton_url is not None:
        with BackgroundServer(replace(service, triton_urls=(triton_url,))) as server:
            yield server
        return
    log = Path(tempfile.mkdtemp(prefix="fuzz-")) / "tritonserver.log"
    triton_config = TritonConfig(
        model_repository=REPO,
        http_port=report.free_port(),
        grpc_port=report.free_port(),
        metrics_port=report.free_port(),
        models=needed_models(service),
        log_file=log,
    )
    print(f"bench.fuzz: starting tritonserver ({', '.join(triton_config.models)}); log {log}")
    with TritonServer(triton_config) as triton:
        with BackgroundServer(replace(service, triton_urls=(triton.grpc_url,))) as server:
            yield server


def _server_closes(http_url: str) -> dict[str, float]:
    """The server's own count of closed sockets by code ("client": the client closed first)."""
    codes = ("client", "1000", "1001", "1005", "1007", "1008", "1009", "1011", "1013")
    found: dict[str, float] = {}
    for code in codes:
        value = metric_value(http_url, "turntaker_session_closes_total", {"code": code})
        if value:
            found[code] = value
    return found


def fuzz(server: BackgroundServer, inputs: int, chosen_seed: int, length: int) -> int:
    http = server.http_url
    runner = FuzzRunner(server.url)
    active_before = metric_value(http, "turntaker_sessions_active")
    closes_before = _server_closes(http)
    sessions = math.ceil(inputs / length)
    began = time.monotonic()
    step = max(1, sessions // 20)

    with capture_server_errors() as logs:

        @settings(
            max_examples=sessions,
            database=None,
            deadline=None,
            # No shrinking: a long run reports every failure as found, and goes on.
            phases=(Phase.generate,),
            suppress_health_check=list(HealthCheck),
        )
        @given(scripts(length))
        def one_session(script: Script) -> None:
            runner.run(script)
            done = runner.stats.sessions
            if done % step == 0:
                elapsed = time.monotonic() - began
                print(
                    f"  {runner.stats.inputs:7d} inputs, {done} sessions, {elapsed:6.1f} s, "
                    f"{len(runner.stats.failures)} failures",
                    file=sys.stderr,
                    flush=True,
                )

        seed(chosen_seed)(one_session)
        one_session()
        elapsed = time.monotonic() - began
        stats = runner.stats
        problems = [f"server logged: {line}" for line in logs.records]

    health = healthz(http)
    if health != {"status": "ok"}:
        problems.append(f"/healthz after the run: {health}")
    active = wait_for_metric(http, "turntaker_sessions_active", active_before or 0.0)
    if active != active_before:
        problems.append(f"{active} sessions still active after the run ({active_before} before)")
    closes = _server_closes(http)
    if closes.get("1011", 0.0) != closes_before.get("1011", 0.0):
        problems.append(f"the server closed sessions with 1011: {closes}")

    print(
        f"\nbench.fuzz: seed {chosen_seed}; {elapsed:.1f} s, {stats.inputs / elapsed:.0f} inputs/s"
    )
    print(stats.summary())
    counted = {code: int(n - closes_before.get(code, 0.0)) for code, n in closes.items()}
    print(f"the server's count of closes by code: {counted}")
    for failure in stats.failures[:20]:
        print("\n" + failure.report())
    if len(stats.failures) > 20:
        print(f"\n... and {len(stats.failures) - 20} more failures")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if stats.inputs < inputs:
        problems.append(f"only {stats.inputs} of {inputs} inputs were sent")
    broken = bool(stats.failures or problems)
    print(f"\nbench.fuzz: {'FAILED' if broken else 'ok'} (seed {chosen_seed})")
    return 1 if broken else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--inputs", type=int, default=50_000, help="messages to send")
    parser.add_argument("--seed", type=int, help="random seed (default: a random one)")
    parser.add_argument("--length", type=int, default=16, help="messages per session")
    parser.add_argument("--pipeline", default="cascade", choices=["cascade", "qwen3_omni"])
    parser.add_argument("--triton-url", help="gRPC HOST:PORT of a running Triton to use")
    args = parser.parse_args(argv)
    chosen_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"bench.fuzz: {args.inputs} inputs, seed {chosen_seed}", flush=True)
    with _server(args.pipeline, args.triton_url) as server:
        return fuzz(server, args.inputs, chosen_seed, args.length)


if __name__ == "__main__":
    raise SystemExit(main())
