"""The long protocol fuzz: `python -m bench.fuzz --inputs 50000` (`make fuzz`).

Two runs of `--inputs` generated client messages each, in sessions of `--length`, with the
generators and invariants of the `fuzzing` package (those of CI's
tests/orchestrator/session/test_core_fuzz.py and tests/e2e/test_fuzz_e2e.py):
- in memory (`fuzzing.in_memory`): each message decoded at the edge and fed to a
  `SessionCore` whose backend, VAD, transcriber and timers are seeded stand-ins;
- over real WebSockets to a live server (`fuzzing.live`): it starts its own tritonserver (the
  models the pipeline needs) and realtime server, or uses `--triton-url`. Every answer is
  checked against the message that caused it, every server event against the contract's
  schema and the openai SDK's; no 1011 or dropped socket, no hang, no server error logged;
  afterwards `/healthz` ok and no session left active.
`--runner memory` or `--runner live` runs one of them only.

Unlike the tests it keeps going after a failure and reports them all, each with the message
that broke it and its session. The seed is random unless `--seed` is given, and printed first:
`--seed S` regenerates the same inputs. Exit status 1 on any broken invariant.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time

from bench import cli, servers
from fuzzing.campaign import campaign
from fuzzing.in_memory import MemoryRunner
from fuzzing.live import LiveRunner
from fuzzing.results import FuzzStats
from fuzzing.scripts import live_scripts, memory_scripts
from fuzzing.server_health import capture_server_errors, healthz, metric_value, wait_for_metric
from orchestrator.service.serve import BackgroundServer


def _server_closes(http_url: str) -> dict[str, float]:
    """The server's own count of closed sockets by code ("client": the client closed first)."""
    codes = ("client", "1000", "1001", "1005", "1007", "1008", "1009", "1011", "1013")
    found: dict[str, float] = {}
    for code in codes:
        value = metric_value(http_url, "turntaker_session_closes_total", {"code": code})
        if value:
            found[code] = value
    return found


class _Progress:
    """Prints a line every twentieth of the run, to stderr."""

    def __init__(self, stats: FuzzStats, sessions: int) -> None:
        self.stats = stats
        self.every = max(1, sessions // 20)
        self.began = time.monotonic()

    def __call__(self) -> None:
        done = self.stats.sessions
        if done % self.every == 0:
            elapsed = time.monotonic() - self.began
            print(
                f"  {self.stats.inputs:7d} inputs, {done} sessions, {elapsed:6.1f} s, "
                f"{len(self.stats.failures)} failures",
                file=sys.stderr,
                flush=True,
            )


def _report(stats: FuzzStats, elapsed: float, problems: list[str], inputs: int) -> bool:
    """Prints the run's summary and failures; True when something broke."""
    print(f"\nbench.fuzz ({stats.runner}): {elapsed:.1f} s, {stats.inputs / elapsed:.0f} inputs/s")
    print(stats.summary())
    for failure in stats.failures[:20]:
        print("\n" + failure.report())
    if len(stats.failures) > 20:
        print(f"\n... and {len(stats.failures) - 20} more failures")
    if stats.inputs < inputs:
        problems.append(f"only {stats.inputs} of {inputs} inputs were sent")
    for problem in problems:
        print(f"PROBLEM: {problem}")
    return bool(stats.failures or problems)


def fuzz_in_memory(inputs: int, chosen_seed: int, length: int) -> bool:
    runner = MemoryRunner()
    # A non-UTF-8 text frame (about one session in 20 ends with one) never reaches a core.
    sessions = math.ceil(inputs / (length - 1))
    began = time.monotonic()
    progress = _Progress(runner.stats, sessions)
    campaign(
        runner,
        memory_scripts(length),
        sessions,
        seed=chosen_seed,
        strict=False,
        check=progress,
    )
    return _report(runner.stats, time.monotonic() - began, [], inputs)


def fuzz_live(server: BackgroundServer, inputs: int, chosen_seed: int, length: int) -> bool:
    http = server.http_url
    runner = LiveRunner(server.url)
    active_before = metric_value(http, "turntaker_sessions_active")
    closes_before = _server_closes(http)
    sessions = math.ceil(inputs / length)
    began = time.monotonic()

    with capture_server_errors() as logs:
        campaign(
            runner,
            live_scripts(length),
            sessions,
            seed=chosen_seed,
            strict=False,
            check=_Progress(runner.stats, sessions),
        )
        elapsed = time.monotonic() - began
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
    counted = {code: int(n - closes_before.get(code, 0.0)) for code, n in closes.items()}
    broken = _report(runner.stats, elapsed, problems, inputs)
    print(f"the server's count of closes by code: {counted}")
    return broken


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--inputs", type=int, default=50_000, help="messages to send, per runner")
    parser.add_argument("--seed", type=int, help="random seed (default: a random one)")
    parser.add_argument("--length", type=int, default=16, help="messages per session")
    parser.add_argument("--runner", default="both", choices=["both", "memory", "live"])
    parser.add_argument("--pipeline", default="cascade", choices=["cascade", "qwen3_omni"])
    parser.add_argument("--triton-url", help="gRPC HOST:PORT of a running Triton to use")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    chosen_seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"bench.fuzz: {args.inputs} inputs per runner ({args.runner}), seed {chosen_seed}")
    broken = False
    if args.runner in ("both", "memory"):
        broken |= fuzz_in_memory(args.inputs, chosen_seed, args.length)
    if args.runner in ("both", "live"):
        with servers.realtime(args.pipeline, args.triton_url, announce="bench.fuzz") as server:
            broken |= fuzz_live(server, args.inputs, chosen_seed, args.length)
    print(f"\nbench.fuzz: {'FAILED' if broken else 'ok'} (seed {chosen_seed})")
    # Its report is the exit status and the failures printed: no section of a document.
    return cli.Outcome("", failed=broken)


BENCH = cli.Bench("bench.fuzz", __doc__, None, _arguments, _run, local=("--triton-url",))


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
