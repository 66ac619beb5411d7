"""Rolling restart soak (issue 36): conversations outlive their worker.

What it measures: a rolling restart under running sessions. A real tritonserver (`null` at
`--speed`, default 1), a Debian `redis-server` on loopback (bench/snapshot_cost.py's
`RedisServer`) and `turntaker serve --workers N --session-store redis://...` as a subprocess
(nginx in front, bench/servers.py `Cluster`). `--sessions` concurrent sessions through nginx,
each running text turns (T of 4-8 tokens) with a pause of 1-3 s between them
(bench/restart_clients.py `run_turns`); after `--warm-s`, SIGHUP to the supervisor: each
worker in turn drains (a kept session's final snapshot, then `error` `server_restarting` and
close 4001) and is started again. Each client resumes a 4001 at once through nginx, where
another worker takes its session over (a resume `moved`), and keeps running turns through the
restart and `--after-s` after its end; then each session does one more turn and asks for
`conversation.context`.

Rules, judged on every session over all its connections:
- the events' rules of the drop soak (bench/drop_checks.py): no seq skipped, none repeated,
  no event id repeated, one `response.done` per `response.created`; an answer a drain cut or
  a takeover ended (not `completed`) is reported, not a fault;
- every resume answered `session.resumed` with `replayed_from_seq` = last + 1, no other
  `error` than the drain's `server_restarting`, no hang (every wait bounded);
- conversation kept: the last `conversation.context` holds every item id the session saw
  (`conversation.item.added`), those from before the restart among them;
- the restart ends (`turntaker serve: rolling restart done`) within `RESTART_S_PER_WORKER`
  per worker, not aborted.
Measured: each move's resume time (from the close to `session.resumed`), the restart's time
(from SIGHUP to its done line; each worker's, as the supervisor printed it), each turn's time
(from `response.create` to `response.done`) during the restart and outside it, and over the
`--after-s` window (every worker new by then), from the workers' `/metrics` and
/proc/<pid>/stat: snapshot writes and bytes per turn and the workers' CPU per turn. A
checkpoint's own CPU (build + encode, as `Checkpoints._write` does:
`snapshot.take` and `snapshot.encode`, bench/snapshot_cost.py) is timed on each session's
snapshot read back from Redis at the window's end. The baseline column is the same soak on
the `memory` store with no restart: at the moment the restart would begin each session cuts
its connection once (a reset, between two turns) and resumes on the worker holding it, its
resume time taken from the cut; the window lasts as long as the restart did. The machine's
load around the whole run (bench/machine_load.py). Exit status 1 when a conversation was not
kept or an event lost or repeated (or any rule above broken).

Run: `python -m bench.drop_soak --restart --workers 4 --sessions 50 --write` (the drop soak's
restart mode, which runs this module; `python -m bench.restart_soak --workers 4 --sessions 50`
is the same run), writes "## Rolling restart (issue 36)" in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import re
import sys
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field

import trio
from prometheus_client.parser import text_string_to_metric_families

from bench import cli, machine_load, report, servers, stats
from bench.drop_checks import Tally
from bench.drop_clients import Timing
from bench.load import MODELS
from bench.restart_clients import Phases, RestartSession, run_turns
from bench.servers import Cluster, cluster
from bench.snapshot_cost import RedisServer, redis_server
from orchestrator.service.config import ServiceConfig
from orchestrator.service.store.redis_store import RedisStore
from orchestrator.session.resume import snapshot as snap
from orchestrator.session.resume.journal import JournalEntry

HEADING = "## Rolling restart (issue 36)"
DOC = report.DOC

# The restart's bound per worker: its drain (15 s at most by default, and the supervisor's 5 s
# margin), a new process's start on a busy machine, the supervisor's settle before the next.
RESTART_S_PER_WORKER = 90.0
# Snapshots read back per session for the checkpoint's CPU, and builds + encodes timed on each.
SNAPSHOT_REPEATS = 20
# Defaults of `--sessions` and `--speed`.
SESSIONS = 50
SPEED = 1.0
_RESTARTED = re.compile(r"turntaker serve: worker (\w+) restarted: pid \d+ -> \d+ in ([\d.]+) s")
_DONE = re.compile(r"turntaker serve: rolling restart done in ([\d.]+) s")
_ABORTED = re.compile(r"turntaker serve: ROLLING RESTART ABORTED: (.*)")


@dataclass(frozen=True)
class Reading:
    """The workers' counters at one moment, summed over them."""

    at: float
    writes: dict[str, float]  # turntaker_snapshot_writes_total by result
    snapshot_bytes: float  # turntaker_snapshot_bytes_sum
    snapshots: float  # turntaker_snapshot_bytes_count
    cpu_s: float  # the workers' CPU (utime + stime) so far


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def read_workers(running: Cluster) -> Reading:
    """Every worker's /metrics (straight to its port, not through nginx) and CPU, now."""
    writes: dict[str, float] = {}
    size = count = cpu = 0.0
    for pid, port in running.workers().values():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "turntaker_snapshot_writes_total":
                    result = sample.labels.get("result", "")
                    writes[result] = writes.get(result, 0.0) + sample.value
                elif sample.name == "turntaker_snapshot_bytes_sum":
                    size += sample.value
                elif sample.name == "turntaker_snapshot_bytes_count":
                    count += sample.value
        cpu += _cpu_s(pid)
    return Reading(time.monotonic(), writes, size, count, cpu)


def checkpoint_cpu(store_url: str, session_ids: list[str], repeats: int) -> list[float]:
    """Each session's snapshot read back from the store, then built again from its state and
    encoded (`snapshot.take` + `snapshot.encode`, as `Checkpoints._write` does) `repeats`
    times: this thread's CPU seconds per build + encode, one value per snapshot."""

    async def read() -> list[bytes]:
        store = await RedisStore.connect(store_url)
        try:
            found = [await store.get(sid) for sid in session_ids]
        finally:
            await store.close()
        return [f.data for f in found if f is not None]

    config = ServiceConfig()
    spent: list[float] = []
    for data in trio.run(read):
        stored = snap.decode(data)
        journal = [JournalEntry(e.seq, e.text) for e in stored.journal]
        began = time.thread_time()
        for n in range(repeats):
            taken = snap.take(
                snap.core_state(stored),
                session_id=stored.session_id,
                version=stored.version + n + 1,
                identity=stored.identity,
                token="bench",
                last_seq=stored.last_seq,
                journal=journal,
                max_image_bytes=config.snapshot_image_bytes,
                max_journal_bytes=config.snapshot_journal_bytes,
            )
            snap.encode(taken, config.snapshot_max_bytes)
        spent.append((time.thread_time() - began) / repeats)
    return spent


@dataclass
class RestartRun:
    """One run of the restart soak: with the restart (a shared store) or the baseline."""

    restart: bool
    workers: int
    tally: Tally
    began: float = 0.0  # the restart's SIGHUP (the baseline: its cuts)
    ended: float = 0.0  # the restart's done line (the baseline: as long after)
    printed_s: float = math.nan  # the supervisor's own figure for the restart
    per_worker_s: dict[str, float] = field(default_factory=dict)
    aborted: str = ""
    window: tuple[Reading, Reading] | None = None
    checkpoint_cpu_s: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def restart_s(self) -> float:
        return self.ended - self.began

    def turn_s(self, start: float, end: float) -> list[float]:
        return [took for at, took in self.tally.turns if start <= at <= end]

    @property
    def window_turns(self) -> int:
        if self.window is None:
            return 0
        return len(self.turn_s(self.window[0].at, self.window[1].at))

    def failures(self) -> list[str]:
        found = self.tally.failed(answers_may_end_early=True)
        if self.aborted:
            found.append(f"the rolling restart aborted: {self.aborted}")
        if self.restart and self.tally.resumes["lost"]:
            found.append(f"{self.tally.resumes['lost']} connections lost with no close frame")
        if self.restart and not self.tally.resumes["moved"]:
            found.append("no session moved: the restart closed none with 4001")
        return found


async def soak_cluster(
    running: Cluster,
    sessions: int,
    seed: int,
    *,
    restart: bool,
    warm_s: float,
    after_s: float,
    hold_s: float = 20.0,
    store_url: str | None = None,
    speed: float = 1.0,
) -> RestartRun:
    """The restart soak on a running cluster (the module's rules): `restart`, a SIGHUP after
    `warm_s`, else the baseline's cut per session and `hold_s` of turns in its place; then
    `after_s` of turns measured, and each session's last turn and check."""
    run = RestartRun(restart, running.count, Tally(0, math.inf))
    phases = Phases.new()
    timing = Timing(speed)
    clients = [
        RestartSession(running.url, random.Random(seed * 1000 + n), run.tally, timing)
        for n in range(sessions)
    ]
    tasks = [asyncio.create_task(run_turns(c, phases)) for c in clients]
    began = time.monotonic()
    try:
        await _wait_or_done(tasks, warm_s)
        for client in clients:
            client.items_at_restart = len(client.log.item_ids)
        if restart:
            run.began = running.hup()
            done = asyncio.to_thread(_restart_end, running, run)
            await done
        else:
            run.began = time.monotonic()
            phases.drop.set()
            await _wait_or_done(tasks, hold_s)
            run.ended = time.monotonic()
        first = await asyncio.to_thread(read_workers, running)
        await _wait_or_done(tasks, after_s)
        last = await asyncio.to_thread(read_workers, running)
        run.window = (first, last)
        if store_url is not None:
            ids = [c.sid for c in clients if c.sid]
            run.checkpoint_cpu_s = await asyncio.to_thread(
                checkpoint_cpu, store_url, ids, SNAPSHOT_REPEATS
            )
    finally:
        phases.finish.set()
        await asyncio.gather(*tasks)
        run.seconds = time.monotonic() - began
    return run


async def _wait_or_done(tasks: list[asyncio.Task[None]], seconds: float) -> None:
    """`seconds` of the sessions' turns (over sooner when every session has ended)."""
    await asyncio.wait(tasks, timeout=seconds)


def _restart_end(running: Cluster, run: RestartRun) -> None:
    """Waits for the restart's done or aborted line (bounded), and takes its figures."""
    bound = RESTART_S_PER_WORKER * running.count
    pattern = re.compile(f"{_DONE.pattern}|{_ABORTED.pattern}")
    try:
        at, found = running.wait_line(pattern, bound, since=run.began)
    except RuntimeError:
        run.ended = time.monotonic()
        run.aborted = f"no done line within {bound:g} s (or the supervisor exited)"
        return
    run.ended = at
    if found.group(2) is not None:
        run.aborted = found.group(2)
    else:
        run.printed_s = float(found.group(1))
    for when, line in list(running.lines):
        if when >= run.began and (match := _RESTARTED.search(line)):
            run.per_worker_s[match.group(1)] = float(match.group(2))


@dataclass
class RestartSoak:
    restarted: RestartRun
    baseline: RestartRun
    command_speed: float
    redis_note: str
    load: machine_load.Load | None = None

    def failures(self) -> list[str]:
        return [f"restart: {f}" for f in self.restarted.failures()] + [
            f"baseline: {f}" for f in self.baseline.failures()
        ]


def run_restart(
    workers: int,
    sessions: int,
    speed: float,
    seed: int,
    triton_url: str | None,
    warm_s: float,
    after_s: float,
) -> RestartSoak:
    """Both runs, the restart's first (the baseline's window lasts as long as it did)."""
    before = machine_load.mark()
    with ExitStack() as stack:
        grpc_url = stack.enter_context(servers.triton_url(triton_url, MODELS, null_speed=speed))
        server = stack.enter_context(redis_server(True))
        if not isinstance(server, RedisServer):
            raise RuntimeError(f"the restart soak needs a Redis: {server}")
        with cluster(grpc_url, workers, server.url) as running:
            print(f"[restart soak] {workers} workers on Redis, {sessions} sessions", flush=True)
            restarted = asyncio.run(
                soak_cluster(
                    running,
                    sessions,
                    seed,
                    restart=True,
                    warm_s=warm_s,
                    after_s=after_s,
                    store_url=server.url,
                    speed=speed,
                )
            )
        hold = restarted.restart_s if restarted.ended else 20.0
        with cluster(grpc_url, workers, "memory") as running:
            print("[restart soak] baseline: the memory store, no restart", flush=True)
            baseline = asyncio.run(
                soak_cluster(
                    running,
                    sessions,
                    seed,
                    restart=False,
                    warm_s=warm_s,
                    after_s=after_s,
                    hold_s=hold,
                    speed=speed,
                )
            )
        note = f"redis-server {server.version}"
    load = machine_load.Load(before, machine_load.mark())
    return RestartSoak(restarted, baseline, speed, note, load)


def _quantiles(values: list[float]) -> str:
    """median / p90 / p99 / max in ms, "-" when none."""
    kept = stats.finite(values)
    if not kept:
        return "-"
    cells = [f"{stats.ms(kept, q):.0f}" for q in (0.5, 0.9, 0.99)]
    return " / ".join([*cells, f"{max(kept) * 1000:.0f}"])


def _per_turn(run: RestartRun) -> tuple[str, str, str, str]:
    """Over the window: snapshot writes per turn, KiB per write, KiB per turn, worker CPU ms
    per turn."""
    if run.window is None or not run.window_turns:
        return ("-", "-", "-", "-")
    first, last = run.window
    turns = run.window_turns
    written = last.writes.get("written", 0.0) - first.writes.get("written", 0.0)
    count = last.snapshots - first.snapshots
    size = last.snapshot_bytes - first.snapshot_bytes
    per_write = f"{size / count / 1024:.1f}" if count else "-"
    return (
        f"{written / turns:.2f}",
        per_write,
        f"{size / turns / 1024:.1f}",
        f"{(last.cpu_s - first.cpu_s) / turns * 1000:.1f}",
    )


def render_restart(soak: RestartSoak, command: str) -> str:
    r, b = soak.restarted, soak.baseline
    failures = soak.failures()

    def row(name: str, restart: str, baseline: str) -> str:
        return f"| {name} | {restart} | {baseline} |"

    def statuses(run: RestartRun) -> str:
        t = run.tally
        other = {k: v for k, v in t.statuses.items() if k != "completed"}
        extra = ", ".join(f"{k} {v}" for k, v in sorted(other.items()))
        return f"{t.statuses['completed']} completed" + (f", {extra}" if extra else "")

    r_turns = _per_turn(r)
    b_turns = _per_turn(b)
    per_worker = ", ".join(f"{k} {v:.1f}" for k, v in sorted(r.per_worker_s.items()))
    lines = [
        HEADING,
        "",
        f"Command: `{command}` ({machine_load.machine()}; `null` at {soak.command_speed:g}x speed; "
        f"{soak.redis_note}; {r.seconds:.0f} s of sessions with the restart, {b.seconds:.0f} s "
        "for the baseline).",
        "",
        f"`turntaker serve --workers {r.workers}` behind nginx, sessions through nginx, each "
        "running text turns (4-8 tokens) with 1-3 s between them; SIGHUP to the supervisor: "
        "each worker in turn drains (a session's final snapshot, `error` `server_restarting`, "
        "close 4001) and is started again; each client resumes at once and another worker "
        "takes the session over from Redis (`moved`). Resume time: from the close to "
        "`session.resumed`. After the restart every session does a turn and checks that "
        "`conversation.context` holds every item it saw. Baseline: the same soak on the "
        "`memory` store with no restart; each session cut once (a reset) when the restart "
        "would have begun and resumed on its worker, its resume time taken from the cut. "
        "Per turn: over the window after the restart (every worker new by then; the baseline's "
        "as long), from the workers' `/metrics` and their CPU (/proc). Rules: "
        "bench/restart_soak.py.",
        "",
        *machine_load.lines(soak.load),
        "| figure | rolling restart (Redis store) | baseline: no restart (memory store) |",
        "|---|---:|---:|",
        row("sessions", str(r.tally.sessions), str(b.tally.sessions)),
        row(
            "conversations kept",
            f"{r.tally.kept} of {r.tally.sessions} ({r.tally.items_checked} items, "
            f"{r.tally.items_before_restart} from before the restart)",
            f"{b.tally.kept} of {b.tally.sessions} ({b.tally.items_checked} items)",
        ),
        row("turns (responses)", statuses(r), statuses(b)),
        row("sequenced events checked", str(r.tally.events), str(b.tally.events)),
        row(
            "events lost (seqs skipped) / duplicated (seq at or below the last)",
            f"{r.tally.losses} / {r.tally.duplicates}",
            f"{b.tally.losses} / {b.tally.duplicates}",
        ),
        row("event_ids repeated", str(r.tally.repeated_ids), str(b.tally.repeated_ids)),
        row(
            "terminals missing / extra",
            f"{r.tally.missing_terminals} / {r.tally.extra_terminals}",
            f"{b.tally.missing_terminals} / {b.tally.extra_terminals}",
        ),
        row(
            "resumes: moved (close 4001) / plain drop / lost (no close frame)",
            f"{r.tally.resumes['moved']} / {r.tally.resumes['dropped']} / "
            f"{r.tally.resumes['lost']}",
            f"{b.tally.resumes['moved']} / {b.tally.resumes['dropped']} / "
            f"{b.tally.resumes['lost']}",
        ),
        row(
            "resume time ms: median / p90 / p99 / max",
            _quantiles(r.tally.resume_s.get("moved", [])) + " (moved)",
            _quantiles(b.tally.resume_s.get("dropped", [])) + " (plain drop)",
        ),
        row(
            "connections tried again / turns sent again after a move",
            f"{r.tally.connect_retries} / {r.tally.resent}",
            f"{b.tally.connect_retries} / {b.tally.resent}",
        ),
        row(
            "resume failures, other errors, hangs",
            f"{r.tally.resume_failures}, {r.tally.unexpected}, {r.tally.hangs}",
            f"{b.tally.resume_failures}, {b.tally.unexpected}, {b.tally.hangs}",
        ),
        row(
            "restart: total s (SIGHUP to done; supervisor's figure)",
            (f"{r.restart_s:.1f} ({r.printed_s:.1f})" if r.ended else "-")
            + (f"; ABORTED: {r.aborted}" if r.aborted else ""),
            "-",
        ),
        row("restart: each worker s (stop to healthy)", per_worker or "-", "-"),
        row(
            "turn ms (create to done): median / p90 / p99 / max, during the restart",
            _quantiles(r.turn_s(r.began, r.ended)),
            _quantiles(b.turn_s(b.began, b.ended)),
        ),
        row(
            "turn ms: the same, outside it",
            _quantiles([t for a, t in r.tally.turns if not r.began <= a <= r.ended]),
            _quantiles([t for a, t in b.tally.turns if not b.began <= a <= b.ended]),
        ),
        row("turns in the per-turn window", str(r.window_turns), str(b.window_turns)),
        row("snapshot writes per turn", r_turns[0], b_turns[0]),
        row(
            "snapshot KiB per write / per turn",
            f"{r_turns[1]} / {r_turns[2]}",
            f"{b_turns[1]} / {b_turns[2]}",
        ),
        row(
            "checkpoint CPU ms (build + encode, per snapshot): median / p90 / p99 / max",
            _cpu_quantiles(r.checkpoint_cpu_s),
            "-",
        ),
        row("workers' CPU ms per turn (all of it)", r_turns[3], b_turns[3]),
        "",
        f"- Verdict: {'held' if not failures else 'FAILED: ' + '; '.join(failures)}.",
    ]
    return "\n".join(lines) + "\n"


def _cpu_quantiles(values: list[float]) -> str:
    """median / p90 / p99 / max in ms with 2 decimals, "-" when none."""
    kept = stats.finite(values)
    if not kept:
        return "-"
    cells = [f"{stats.ms(kept, q):.2f}" for q in (0.5, 0.9, 0.99)]
    return " / ".join([*cells, f"{max(kept) * 1000:.2f}"]) + f" ({len(kept)} snapshots)"


def outcome(args: argparse.Namespace, seed: int, quoted: str) -> cli.Outcome:
    """The run `args` ask for (`--workers`, `--sessions`, `--speed`, `--triton-url`,
    `--warm-s`, `--after-s`; a None `--sessions` or `--speed` takes this module's default),
    its section quoting `quoted`; the drop soak's `--restart` runs this too."""
    if args.workers < 2:
        raise cli.Usage("--restart needs --workers 2 or more (one carries the sessions)")
    restart = run_restart(
        args.workers,
        args.sessions if args.sessions is not None else SESSIONS,
        args.speed if args.speed is not None else SPEED,
        seed,
        args.triton_url,
        args.warm_s,
        args.after_s,
    )
    for text in restart.restarted.tally.failures + restart.baseline.tally.failures:
        print(f"[restart soak] {text}", file=sys.stderr)
    return cli.Outcome(render_restart(restart, quoted), failed=bool(restart.failures()))


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=4, help="2 or more")
    parser.add_argument("--sessions", type=int, default=None, help=f"default {SESSIONS}")
    parser.add_argument(
        "--speed", type=float, default=None, help=f"the `null` model's speed (default {SPEED:g})"
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--triton-url", help="an already running Triton (host:grpc-port) whose `null` is at --speed"
    )
    parser.add_argument("--warm-s", type=float, default=10.0, help="turns before the restart")
    parser.add_argument("--after-s", type=float, default=20.0, help="turns after it")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    print(f"[restart soak] seed {seed}", flush=True)
    return outcome(args, seed, f"{command} --seed {seed}" if args.seed is None else command)


BENCH = cli.Bench("bench.restart_soak", __doc__, DOC, _arguments, _run, local=("--triton-url",))


def main(argv: list[str] | None = None) -> int:
    return cli.main(BENCH, argv)


if __name__ == "__main__":
    raise SystemExit(main())
