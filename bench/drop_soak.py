"""Drop soak: hundreds of connections cut under running sessions, each resumed, nothing lost.

What it measures: whether session resume (docs/protocol.md "Session resume") holds under
load. A real tritonserver (`null`, `vad`, `cancel`, `turn`; `null` at `--speed`) and the
realtime server in its own process (bench/load_server.py, default ServiceConfig: a 30 s
grace, an 8 MiB journal). `--sessions` concurrent slots, each running sessions one after
another, each session cut with no close frame (a TCP reset) at random moments, `--drops`
cuts in all: mid-response, mid-append, mid-replay and idle, each resumed on a new connection
with the last seq it processed (bench/drop_clients.py: the cycles, the cuts, the resumes).

Rules, checked per session over every connection it had, on the log of sequenced events it
processed (bench/drop_checks.py counts them; bench/drop_clients.py enforces the last two):
- `server_event_seq` contiguous from 1: a seq past the next one is a loss (counted by the seqs
  skipped), one at or below the last is a duplicate;
- `event_id`s unique;
- every `response.created` gets exactly one `response.done` (waited for: none may be missing
  when the session closes), completed, with T audio deltas and `output_tokens` T;
- every resume answered `session.resumed` with `replayed_from_seq` = last + 1: a
  `session_resume_failed` is a failure (each comes well within the grace);
- no other `error`, no hang (each wait is bounded: `READ_TIMEOUT_S`).
And on the server (this module): its RSS and open descriptors are read before (after one
warm-up session with no cut, so that what the server opens once and keeps is counted from the
start), at each tenth of the drops and after (every session closed with 1000, then a settle):
RSS may drift at most 5% from the first warm checkpoint (a fifth of the drops in, once
sessions have been replaced) to the last, judged on runs of at least `MEMORY_MIN_DROPS`;
descriptors end at most a few above the start (bench/soak.py's limits). At the end
`/metrics` must show no session active or in its grace, no journal bytes and no Triton
stream, and the server's resume counter must match the client's. Exit status 1 on any failure.

Run: `python -m bench.drop_soak --write` (`make soak`; writes "## Drop soak" in
docs/reliability.md).

Restart mode (`--restart`, issue 36: conversations outlive their worker): a rolling restart
under running sessions, bench/restart_soak.py (its rules, its run and its report; this
module's `--restart`, `--workers`, `--sessions`, `--speed`, `--seed`, `--triton-url`,
`--warm-s` and `--after-s` go to it). Run: `python -m bench.drop_soak --restart --workers 4
--sessions 50 --write` (writes "## Rolling restart (issue 36)" in docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field

from bench import cli, machine_load, report, servers
from bench.drop_checks import Tally
from bench.drop_clients import KINDS, Timing, run_slot, warm_up
from bench.load import MODELS
from bench.servers import RealtimeProcess, Sample
from bench.soak import FD_SLACK, RSS_DRIFT_LIMIT, leaks

HEADING = "## Drop soak"
DOC = report.RELIABILITY
# The restart mode's document (bench/restart_soak.py's DOC).
RESTART_DOC = report.DOC

# The first checkpoint that counts for RSS drift: by then sessions have been replaced.
WARM_SHARE = 0.2
# RSS is judged only on runs this long: the server's memory grows for the first few hundred
# drops (caches, allocator arenas) and is flat after that (5,000 drops: +2% from 1,000 on).
MEMORY_MIN_DROPS = 1000


@dataclass
class Checkpoint:
    drops: int
    rss: int
    fds: int
    open_sessions: float
    in_grace: float
    journal_bytes: float


@dataclass
class DropSoak:
    tally: Tally
    points: list[Checkpoint] = field(default_factory=list)
    end: dict[str, float] = field(default_factory=dict)
    resumes_by_outcome: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def warm(self) -> list[Checkpoint]:
        running = self.points[1:-1]
        floor = self.tally.target * WARM_SHARE
        return [p for p in running if p.drops >= floor] or running

    @property
    def rss_drift(self) -> float:
        warm = self.warm
        return (warm[-1].rss - warm[0].rss) / warm[0].rss if warm else 0.0

    @property
    def fd_growth(self) -> int:
        return self.points[-1].fds - self.points[0].fds

    @property
    def memory_judged(self) -> bool:
        return self.tally.target >= MEMORY_MIN_DROPS

    def failures(self) -> list[str]:
        found = self.tally.failed()
        if self.memory_judged and self.rss_drift > RSS_DRIFT_LIMIT:
            found.append(f"RSS grew {self.rss_drift * 100:.1f}% over the warm checkpoints")
        found += leaks(self.fd_growth, self.end)
        resumed = self.resumes_by_outcome.get("resumed", 0.0)
        if resumed != sum(self.tally.resumes.values()):
            found.append(
                f"the server counted {resumed:g} resumes, the clients {self.tally.resumes}"
            )
        refused = {k: v for k, v in self.resumes_by_outcome.items() if k != "resumed" and v}
        if refused:
            found.append(f"resumes refused by the server: {refused}")
        return found


def _point(soak: DropSoak, server: RealtimeProcess) -> Checkpoint:
    counters = server.ask("stats")
    samples = server.samples()
    point = Checkpoint(
        soak.tally.dropped,
        int(counters["rss"]),
        int(counters["fds"]),
        server.total("turntaker_sessions_active", samples),
        server.total("turntaker_sessions_in_grace", samples),
        server.total("turntaker_resume_journal_bytes", samples),
    )
    soak.points.append(point)
    print(
        f"[drop soak] {point.drops} drops: rss {point.rss / 2**20:.1f} MiB, fds {point.fds}, "
        f"sessions {point.open_sessions:g}, in grace {point.in_grace:g}",
        flush=True,
    )
    return point


async def _drive(
    url: str,
    sessions: int,
    seed: int,
    tally: Tally,
    timing: Timing,
    sample: Callable[[], object],
) -> None:
    rngs = [random.Random(seed * 1000 + n) for n in range(sessions)]
    slots = [asyncio.create_task(run_slot(url, rngs[n], tally, timing)) for n in range(sessions)]
    marks = [tally.target * i // 10 for i in range(1, 11)]
    # A checkpoint at each tenth of the drops, taken while the sessions go on (in a thread:
    # the server's stats pipe blocks). Bounded by the run's deadline.
    while marks and not all(s.done() for s in slots) and time.monotonic() < tally.deadline + 60:
        if tally.dropped >= marks[0]:
            marks.pop(0)
            await asyncio.to_thread(sample)
        else:
            await asyncio.sleep(0.05)
    await asyncio.gather(*slots)


def run(
    drops: int,
    sessions: int,
    speed: float,
    seed: int,
    triton_url: str | None,
    max_seconds: float,
) -> DropSoak:
    soak = DropSoak(Tally(drops, time.monotonic() + max_seconds))
    with ExitStack() as stack:
        grpc_url = stack.enter_context(servers.triton_url(triton_url, MODELS, null_speed=speed))
        server = RealtimeProcess(grpc_url, instrumented=servers.instrumented())
        stack.callback(server.close)
        asyncio.run(warm_up(server.url, soak.tally, Timing(speed)))
        time.sleep(1.0)  # as after the run: the warm-up session's tasks finish closing
        _point(soak, server)
        began = time.monotonic()
        asyncio.run(
            _drive(
                server.url,
                sessions,
                seed,
                soak.tally,
                Timing(speed),
                lambda: _point(soak, server),
            )
        )
        soak.seconds = time.monotonic() - began
        time.sleep(1.0)  # let the last sessions' tasks finish closing
        _point(soak, server)
        samples: list[Sample] = server.samples()
        for name in (
            "turntaker_sessions_active",
            "turntaker_sessions_in_grace",
            "turntaker_resume_journal_bytes",
            "turntaker_triton_streams",
        ):
            soak.end[name] = server.total(name, samples)
        soak.resumes_by_outcome = {
            labels.get("outcome", ""): value
            for name, labels, value in samples
            if name == "turntaker_session_resumes_total"
        }
    return soak


def render(soak: DropSoak, command: str, speed: float) -> str:
    t = soak.tally
    failures = soak.failures()
    drops = ", ".join(f"{kind} {t.drops[kind]}" for kind in KINDS)
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({machine_load.machine()}; `null` at {speed:g}x speed; "
        f"{soak.seconds:.0f} s of sessions).",
        "",
        "Sessions on a real server and Triton, each cut with no close frame (a TCP reset) at "
        "random moments and resumed on a new connection with its last seq: mid-response (after "
        "k of T audio deltas), mid-append (between two appends), mid-replay (right after "
        "`session.resumed`, 0-2 replayed events read) and idle. Each session checks the "
        "sequenced events it read over all its connections (bench/drop_soak.py says the rules).",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| drops | {t.dropped} ({drops}) |",
        f"| sessions / responses | {t.sessions} (up to {_most_open(soak):g} open at a "
        f"checkpoint) / {t.responses} |",
        f"| sequenced events checked | {t.events} |",
        f"| resumes at once after a mid-response cut | {t.resumes['running']} "
        f"({t.after_resume['running']} events after them: replay, then live) |",
        f"| resumes with nothing running | {t.resumes['ended']} "
        f"({t.after_resume['ended']} events replayed) |",
        f"| mid-replay cuts with replay left to send | {t.replay_cuts_confirmed} of "
        f"{t.drops['mid_replay']} |",
        f"| resume failures | {t.resume_failures} |",
        f"| losses (seqs skipped) | {t.losses} |",
        f"| duplicates (seq or event_id) | {t.duplicates + t.repeated_ids} |",
        f"| terminals missing / extra | {t.missing_terminals} / {t.extra_terminals} |",
        f"| responses of the wrong length / not completed | {t.wrong_length} / "
        f"{sum(v for k, v in t.statuses.items() if k != 'completed')} |",
        f"| other errors, hangs | {t.unexpected}, {t.hangs} |",
        "",
        "| drops | server RSS MiB | open fds | sessions open | in grace | journal KiB |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    labels = ["start"] + [""] * (len(soak.points) - 2) + ["end"]
    for label, p in zip(labels, soak.points, strict=True):
        lines.append(
            f"| {p.drops}{' (' + label + ')' if label else ''} | {p.rss / 2**20:.1f} | {p.fds} | "
            f"{p.open_sessions:g} | {p.in_grace:g} | {p.journal_bytes / 1024:.0f} |"
        )
    first, last = soak.points[0], soak.points[-1]
    lines += [
        "",
        f"- RSS over the warm checkpoints (from {WARM_SHARE * 100:.0f}% of the drops): "
        f"{soak.rss_drift * 100:+.2f}% (limit {RSS_DRIFT_LIMIT * 100:.0f}%"
        + ("" if soak.memory_judged else f", not judged under {MEMORY_MIN_DROPS} drops")
        + "); start to end "
        f"{first.rss / 2**20:.1f} -> {last.rss / 2**20:.1f} MiB.",
        f"- Open file descriptors, start to end: {first.fds} -> {last.fds} "
        f"({soak.fd_growth:+d}, limit +{FD_SLACK}).",
        "- After every session closed with 1000: "
        + ", ".join(f"`{k}` = {v:g}" for k, v in soak.end.items())
        + "; `turntaker_session_resumes_total`: "
        + (", ".join(f"{k} {v:g}" for k, v in sorted(soak.resumes_by_outcome.items())) or "none")
        + ".",
        f"- Verdict: {'held' if not failures else 'FAILED: ' + '; '.join(failures)}.",
    ]
    return "\n".join(lines) + "\n"


def _most_open(soak: DropSoak) -> float:
    return max((p.open_sessions for p in soak.points), default=0.0)


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--restart",
        action="store_true",
        help="the restart mode: a rolling restart under sessions (bench/restart_soak.py; writes "
        f"into {RESTART_DOC.name}, not {DOC.name})",
    )
    parser.add_argument("--workers", type=int, default=4, help="--restart: the workers")
    parser.add_argument("--drops", type=int, default=2000)
    parser.add_argument(
        "--sessions", type=int, default=None, help="concurrent sessions (default 24, --restart 50)"
    )
    parser.add_argument(
        "--speed", type=float, default=None, help="the `null` model's speed (10, --restart 1)"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--triton-url", help="an already running Triton (host:grpc-port) whose `null` is at --speed"
    )
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--warm-s", type=float, default=10.0, help="--restart: turns before it")
    parser.add_argument("--after-s", type=float, default=20.0, help="--restart: turns after it")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"[drop soak] seed {seed}", flush=True)
    quoted = f"{command} --seed {seed}" if args.seed is None else command
    if args.restart:
        from bench import restart_soak

        if getattr(args, "doc", None) == DOC:
            args.doc = RESTART_DOC  # the section's document (cli rule 2's default is DOC)
        return restart_soak.outcome(args, seed, quoted)
    args.sessions = args.sessions if args.sessions is not None else 24
    args.speed = args.speed if args.speed is not None else 10.0
    soak = run(args.drops, args.sessions, args.speed, seed, args.triton_url, args.max_seconds)
    section = render(soak, quoted, args.speed)
    for text in soak.tally.failures:
        print(f"[drop soak] {text}", file=sys.stderr)
    return cli.Outcome(section, failed=bool(soak.failures()))


BENCH = cli.Bench("bench.drop_soak", __doc__, DOC, _arguments, _run, local=("--triton-url",))


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
