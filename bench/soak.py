"""Soak: 10,000 interruptions in one session, then 1,000 session open/close cycles.

A real tritonserver (`null` at 1000x speed, `vad`, `cancel`) and the realtime server in its own
process (bench/load_server.py). Memory (RSS) and open file descriptors of the server are read
before, during and after; so are the server's open sessions and Triton streams (from
`/metrics`), which must be back to zero at the end. Exit status 1 when anything leaked:
descriptors more than a few above the start, sessions or streams left open, or RSS growth
over the interruptions (from the first checkpoint, when caches are warm) above 5%.

Run: `python -m bench.soak --write` (`make soak`; writes "## Soak" in docs/reliability.md).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from bench import cli, report, servers
from bench.load import MODELS, QUESTION
from bench.load_clients import Script, interruptions, open_close
from bench.speech import flite_from_onset as flite_speech

HEADING = "## Soak"
DOC = report.RELIABILITY
RSS_DRIFT_LIMIT = 0.05
FD_SLACK = 4


@dataclass
class Checkpoint:
    phase: str
    count: int
    rss: int
    fds: int


@dataclass
class Soak:
    points: list[Checkpoint] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    open_after: dict[str, float] = field(default_factory=dict)

    def point(self, phase: str, count: int, stats: dict[str, object]) -> None:
        rss, fds = int(str(stats["rss"])), int(str(stats["fds"]))
        self.points.append(Checkpoint(phase, count, rss, fds))
        print(f"[soak] {phase} {count}: rss {rss / 2**20:.1f} MiB, fds {fds}", flush=True)

    @property
    def interruption_drift(self) -> float:
        marks = [p for p in self.points if p.phase == "interruptions"]
        return (marks[-1].rss - marks[0].rss) / marks[0].rss

    @property
    def fd_growth(self) -> int:
        return self.points[-1].fds - self.points[0].fds

    @property
    def rss_growth(self) -> float:
        return (self.points[-1].rss - self.points[0].rss) / self.points[0].rss

    def failures(self) -> list[str]:
        found = []
        if self.interruption_drift > RSS_DRIFT_LIMIT:
            found.append(f"RSS grew {self.interruption_drift * 100:.1f}% over the interruptions")
        return found + leaks(self.fd_growth, self.open_after)


def leaks(fd_growth: int, left_open: Mapping[str, float]) -> list[str]:
    """What a server still holds after every session closed: descriptors beyond the slack,
    and any gauge (sessions, streams, ...) not back to zero. Shared by bench/drop_soak.py."""
    found = []
    if fd_growth > FD_SLACK:
        found.append(f"{fd_growth} file descriptors more than at the start")
    found += [
        f"{name} = {value:g} after every session closed"
        for name, value in left_open.items()
        if value
    ]
    return found


def run(count: int, sessions: int) -> Soak:
    script = Script.from_audio(flite_speech(QUESTION))
    soak = Soak()
    with servers.triton(MODELS, null_speed=1000.0) as server_triton:
        server = servers.RealtimeProcess(
            server_triton.grpc_url, instrumented=servers.instrumented()
        )
        try:
            time.sleep(0.5)
            soak.point("start", 0, server.ask("stats"))

            async def on_interruptions(n: int) -> None:
                soak.point("interruptions", n, await asyncio.to_thread(server.ask, "stats"))

            async def on_sessions(n: int) -> None:
                soak.point("open/close", n, await asyncio.to_thread(server.ask, "stats"))

            began = time.monotonic()
            if count:
                every = max(1, count // 10)
                soak.statuses = asyncio.run(
                    interruptions(server.url, script, count, on_interruptions, every)
                )
            soak.seconds["interruptions"] = time.monotonic() - began
            began = time.monotonic()
            if sessions:
                asyncio.run(open_close(server.url, sessions, on_sessions, max(1, sessions // 10)))
            soak.seconds["open/close"] = time.monotonic() - began
            time.sleep(1.0)  # let the last session's tasks finish closing
            soak.point("end", count + sessions, server.ask("stats"))
            for name in ("turntaker_sessions_active", "turntaker_triton_streams"):
                soak.open_after[name] = server.total(name)
        finally:
            server.close()
    return soak


def render(soak: Soak, command: str) -> str:
    lines = [
        HEADING,
        "",
        f"Command: `{command}` (2 cores, Python {sys.version.split()[0]}; `null` at 1000x speed).",
        "",
        "One session: a short user turn, `response.create`, and at the first audio delta a "
        "partial `playback.ack` and `output_audio_buffer.clear`, each ending in `cleared` and "
        f"one `response.done` (statuses {soak.statuses}; "
        f"{soak.seconds.get('interruptions', 0):.0f} s). Then sessions opened, configured and "
        f"closed one after another ({soak.seconds.get('open/close', 0):.0f} s).",
        "",
        "| phase | count | server RSS MiB | open fds |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {p.phase} | {p.count} | {p.rss / 2**20:.1f} | {p.fds} |" for p in soak.points]
    failures = soak.failures()
    lines += [
        "",
        f"- RSS over the interruptions (first checkpoint to last): "
        f"{soak.interruption_drift * 100:+.2f}% (limit {RSS_DRIFT_LIMIT * 100:.0f}%); start to "
        f"end {soak.rss_growth * 100:+.2f}%.",
        f"- Open file descriptors, start to end: {soak.fd_growth:+d}.",
        "- After the last close: "
        + ", ".join(f"`{k}` = {v:g}" for k, v in soak.open_after.items())
        + ".",
        f"- Verdict: {'held' if not failures else 'FAILED: ' + '; '.join(failures)}.",
    ]
    return "\n".join(lines) + "\n"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--interruptions", type=int, default=10000)
    parser.add_argument("--sessions", type=int, default=1000)


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    soak = run(args.interruptions, args.sessions)
    return cli.Outcome(render(soak, command), failed=bool(soak.failures()))


BENCH = cli.Bench("bench.soak", __doc__, DOC, _arguments, _run)


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
