"""The realtime server as the load benchmark runs it: its own process, measured from inside.

`python -m bench.load_server --port P --triton-url HOST:PORT [--vad triton|inprocess]`
runs `serve()` (the production code path) with a sample sink on its latency metrics, and
answers commands on stdin, one JSON line each on stdout:
- `reset`: forget the samples and start counting CPU time and wall time afresh;
- `stats`: every sample since the reset (barge-in reaction, time to first audio, event-loop
  lag, summed input backlog every 50 ms), CPU seconds and wall seconds since the reset, RSS;
- `verdicts`: the echo verdicts (orchestrator/session/echo/verdict.py: what the echo rules
  made of each VAD chunk heard over an answer's echo) since the last `verdicts` or reset, the
  newest `VERDICTS` of them, and forgets them (bench/echo_page.py traces a cut with them).
Its own process, so CPU and memory are the orchestrator's alone, not the load generator's.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict, deque
from dataclasses import asdict, dataclass, field
from typing import Any

import trio

from bench.inprocess_vad import InProcessVad
from orchestrator.service.config import ServiceConfig
from orchestrator.service.metrics import Metrics
from orchestrator.service.serve import serve
from orchestrator.service.sessions.services import VadService
from orchestrator.session.echo.verdict import EchoVerdict

VERDICTS = 4096  # about two minutes of one session's chunks over an echo


def rss_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@dataclass
class Recorder:
    samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    cpu0: float = field(default_factory=time.process_time)
    wall0: float = field(default_factory=time.monotonic)
    snapshot: Any = None
    verdicts: deque[EchoVerdict] = field(default_factory=lambda: deque(maxlen=VERDICTS))

    def sink(self, name: str, seconds: float) -> None:
        self.samples[name].append(seconds)

    def verdict(self, verdict: EchoVerdict) -> None:
        self.verdicts.append(verdict)

    def taken(self) -> list[dict[str, Any]]:
        """The verdicts kept, as JSON objects, forgotten here."""
        taken = [asdict(v) for v in self.verdicts]
        self.verdicts.clear()
        return taken

    def reset(self) -> None:
        self.samples.clear()
        self.verdicts.clear()
        self.cpu0 = time.process_time()
        self.wall0 = time.monotonic()

    def stats(self, metrics: Metrics) -> dict[str, object]:
        active = metrics.registry.get_sample_value("turntaker_sessions_active") or 0.0
        return {
            "samples": dict(self.samples),
            "cpu_s": time.process_time() - self.cpu0,
            "wall_s": time.monotonic() - self.wall0,
            "rss": rss_bytes(),
            "fds": open_fds(),
            "threads": len(os.listdir("/proc/self/task")),
            "sessions": int(active),
        }


async def _sample_backlog(metrics: Metrics, recorder: Recorder) -> None:
    while True:
        await trio.sleep(0.05)
        value = metrics.registry.get_sample_value("turntaker_input_backlog_chunks") or 0.0
        recorder.sink("input_backlog", value)


async def _commands(metrics: Metrics, recorder: Recorder, cancel: trio.CancelScope) -> None:
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    buffered = b""
    while True:
        data = await stdin.receive_some()
        if not data:
            cancel.cancel()
            return
        buffered += data
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            command = line.decode().strip()
            if command == "reset":
                recorder.reset()
                print(json.dumps({"ok": True}), flush=True)
            elif command == "stats":
                print(json.dumps(recorder.stats(metrics)), flush=True)
            elif command == "verdicts":
                print(json.dumps({"verdicts": recorder.taken()}), flush=True)
            elif command == "trace":
                # Where memory grew since the last `trace` (run with PYTHONTRACEMALLOC=25).
                import tracemalloc

                snapshot = tracemalloc.take_snapshot()
                top = []
                if recorder.snapshot is not None:
                    diff = snapshot.compare_to(recorder.snapshot, "traceback")
                    for stat in diff[:12]:
                        top.append(f"{stat.size_diff / 1024:.0f} KiB {stat.count_diff:+d}: "
                                   + " <- ".join(str(f) for f in stat.traceback[-6:]))  # fmt: skip
                recorder.snapshot = snapshot
                print(json.dumps({"top": top}), flush=True)
            elif command == "quit":
                cancel.cancel()
                return


async def main(config: ServiceConfig, vad_kind: str) -> None:
    recorder = Recorder()
    metrics = Metrics(sample_sink=recorder.sink, verdict_sink=recorder.verdict)
    vad: VadService | None = InProcessVad() if vad_kind == "inprocess" else None
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                lambda task_status: serve(config, metrics=metrics, vad=vad, task_status=task_status)
            )
            nursery.start_soon(_sample_backlog, metrics, recorder)
            nursery.start_soon(_commands, metrics, recorder, scope)
            print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--triton-url", required=True)
    parser.add_argument("--pipeline", default="null")
    parser.add_argument("--vad", choices=["triton", "inprocess"], default="triton")
    parser.add_argument("--cprofile", help="write cProfile stats of the Trio thread here")
    args = parser.parse_args(argv)
    config = ServiceConfig(
        port=args.port,
        triton_urls=(args.triton_url,),
        pipeline=args.pipeline,
        # Every load session is one local client: no per-key limits in the way.
        max_sessions_per_key=0,
        append_bytes_per_s_per_key=0,
    )
    if args.cprofile:
        import cProfile

        with cProfile.Profile() as profile:
            trio.run(main, config, args.vad)
        profile.dump_stats(args.cprofile)
    else:
        trio.run(main, config, args.vad)
    return 0


if __name__ == "__main__":
    raise SystemExit(cli())
