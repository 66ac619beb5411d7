"""How busy the machine was around a decision bench, and whether the run counts.

A decision bench (interruptions, end of turn, echo) measures timing-sensitive judgments: on a
machine shared with other work its partial transcripts come back late and it decides by
duration instead. So each run records the machine's load and says whether it was quiet.

Rules:
1. A mark is taken before the bench starts its servers (`mark()`) and one after it has closed
   them (every child waited for), so that the bench's own CPU (this process and its waited
   children: Triton, the realtime server) is counted in `own_s`.
2. Other work's CPU is the whole machine's busy time (/proc/stat: every state but idle and
   iowait) between the marks less the bench's own: `other_cores`, in cores on average. A
   child that is never waited for (a daemon) would count as other work: the error is on the
   side of calling a run loaded.
3. The run is quiet when other work took under `QUIET_OTHER_CORES` on average over it: the
   one measure of what else ran at the same time. The load averages are reported beside it,
   not judged: the 1-minute one still holds the work that ended just before the run (a test
   run, a build). A run that is not quiet says so in its table and does not count against a
   target.
4. A bench whose children leave orphans behind runs inside `adopted()`: Chromium's helper
   processes (renderer, zygote) outlive the browser process that started them, are
   reparented to init and reaped there, so their CPU never reaches this process's children's
   times and rule 2 counted the bench's own browser as other work (one session busy for 4 s:
   0.50 cores own, 0.70 other; bench.echo_page, alone on the machine: 0.50 own, 0.46 other,
   "NOT a quiet machine"). Inside it the process is its descendants' child subreaper (Linux's
   prctl): orphans are reparented to it instead, and on leaving it reaps every child that has
   exited (waiting up to `REAP_S` for those still exiting), so their CPU counts as its own
   (the same session: 1.11 own, 0.01 other). Leaving also ends the subreaper, so orphans of
   whatever the process runs after (a test session) go to init as before.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

QUIET_OTHER_CORES: Final = 0.25
REAP_S: Final = 2.0  # rule 4: how long orphans still exiting are waited for
_PR_SET_CHILD_SUBREAPER: Final = 36  # linux/prctl.h
_STAT: Final = Path("/proc/stat")


@dataclass(frozen=True)
class Mark:
    """One look at the machine: wall clock, its busy CPU-seconds, the bench's own
    CPU-seconds and the load averages (1, 5, 15 minutes)."""

    wall_s: float
    busy_s: float
    own_s: float
    loadavg: tuple[float, float, float]


def busy_seconds(stat: str | None = None) -> float:
    """CPU-seconds the whole machine has spent busy since boot (the "cpu" line of
    /proc/stat: user nice system idle iowait irq softirq steal ...; idle and iowait are not
    busy)."""
    text = stat if stat is not None else _STAT.read_text(encoding="ascii")
    fields = [int(x) for x in text.splitlines()[0].split()[1:9]]
    fields += [0] * (8 - len(fields))
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def mark() -> Mark:
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    return Mark(time.monotonic(), busy_seconds(), own, os.getloadavg())


@dataclass(frozen=True)
class Load:
    """The machine around one run (rules 2 and 3)."""

    before: Mark
    after: Mark

    @property
    def wall_s(self) -> float:
        return max(self.after.wall_s - self.before.wall_s, 1e-9)

    @property
    def own_cores(self) -> float:
        return (self.after.own_s - self.before.own_s) / self.wall_s

    @property
    def other_cores(self) -> float:
        busy = self.after.busy_s - self.before.busy_s
        return max(busy - (self.after.own_s - self.before.own_s), 0.0) / self.wall_s

    @property
    def quiet(self) -> bool:
        return self.other_cores < QUIET_OTHER_CORES

    def describe(self) -> str:
        """One sentence for a bench's table."""
        a, b = self.before.loadavg, self.after.loadavg
        verdict = (
            "a quiet machine"
            if self.quiet
            else "NOT a quiet machine: this run does not count against the targets"
        )
        return (
            f"Machine load: load average {a[0]:.2f} / {a[1]:.2f} (1 / 5 min) before the run, "
            f"{b[0]:.2f} / {b[1]:.2f} after; over its {self.wall_s:.0f} s the bench used "
            f"{self.own_cores:.2f} cores and other work {self.other_cores:.2f} "
            f"({os.cpu_count()} cores): {verdict}."
        )


def _subreaper(on: bool) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(errno)}")


def reap(wait_s: float = REAP_S) -> int:
    """Rule 4: wait for every child that has exited, and for up to `wait_s` for any still
    running to exit; how many were reaped."""
    reaped = 0
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:  # no child left
            return reaped
        if pid:
            reaped += 1
        elif time.monotonic() >= deadline:
            return reaped
        else:
            time.sleep(0.05)


@contextmanager
def adopted() -> Iterator[None]:
    """Rule 4: orphaned descendants are this process's to reap while inside; reaped on leaving,
    so the next `mark()` counts their CPU as the bench's own."""
    _subreaper(True)
    try:
        yield
    finally:
        try:
            reap()
        finally:
            _subreaper(False)


def lines(load: Load | None) -> list[str]:
    """A table's paragraph on the run's load (none when it was not measured)."""
    return [load.describe(), ""] if load is not None else []


def machine() -> str:
    """The machine in a benchmark's command line: its cores, CPU model and Python."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            model = next((ln.split(":", 1)[1].strip() for ln in cpuinfo if "model name" in ln), "")
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model or 'unknown CPU'}), Python {sys.version.split()[0]}"
