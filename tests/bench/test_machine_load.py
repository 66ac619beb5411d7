"""bench/machine_load.py: a decision bench says how busy the machine was and whether its run
counts."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import machine_load
from bench.machine_load import Load, Mark


def test_rule2_busy_seconds_read_every_state_but_idle_and_iowait() -> None:
    tick = os.sysconf("SC_CLK_TCK")
    stat = f"cpu  {tick} 0 {tick} 9999 9999 0 0 0 0 0\ncpu0 1 2 3 4\n"
    assert machine_load.busy_seconds(stat) == 2.0


def test_rule2_other_work_is_the_machine_busy_time_less_the_bench_own() -> None:
    before = Mark(0.0, busy_s=100.0, own_s=10.0, loadavg=(0.1, 0.1, 0.1))
    after = Mark(10.0, busy_s=115.0, own_s=20.0, loadavg=(1.0, 0.5, 0.2))
    load = Load(before, after)
    assert load.own_cores == 1.0 and load.other_cores == 0.5
    assert not load.quiet, "half a core of other work is not a quiet machine"
    assert "does not count against the targets" in load.describe()


def test_rule3_quiet_is_little_other_work_whatever_the_load_average_before() -> None:
    after = Mark(10.0, busy_s=120.0, own_s=29.0, loadavg=(1.9, 1.0, 0.5))
    # A busy minute just before the run (a test suite) leaves the load average high.
    assert Load(Mark(0.0, 100.0, 10.0, (0.9, 0.3, 0.1)), after).quiet
    busy = Mark(10.0, busy_s=125.0, own_s=29.0, loadavg=(1.9, 1.0, 0.5))
    assert not Load(Mark(0.0, 100.0, 10.0, (0.1, 0.1, 0.1)), busy).quiet, "0.6 cores of other work"
    assert "a quiet machine" in Load(Mark(0.0, 100.0, 10.0, (0.2, 0.1, 0.1)), after).describe()


def test_a_real_mark_counts_this_process_cpu() -> None:
    before = machine_load.mark()
    sum(i * i for i in range(200_000))
    after = machine_load.mark()
    assert after.own_s >= before.own_s and after.busy_s >= before.busy_s
    assert machine_load.lines(None) == []


# A child that leaves a grandchild behind, as Chromium's browser process leaves its helpers:
# the grandchild spends half a CPU-second after its parent has exited.
_ORPHANING = """
import os, time
if os.fork() == 0:
    start = time.process_time()
    while time.process_time() - start < 0.5:
        pass
    os._exit(0)
os._exit(0)
"""

_BENCH = f"""
import subprocess, sys, time
from bench import machine_load

def own_s(adopt):
    before = machine_load.mark()
    if adopt:
        with machine_load.adopted():
            subprocess.run([sys.executable, "-c", {_ORPHANING!r}], check=True)
    else:
        subprocess.run([sys.executable, "-c", {_ORPHANING!r}], check=True)
        time.sleep(1.0)  # the orphan finishes meanwhile, reaped by whoever adopted it
    return machine_load.mark().own_s - before.own_s

print(own_s(False), own_s(True))
"""


def test_rule4_orphans_a_bench_leaves_behind_count_as_its_own_work() -> None:
    """Run in a child interpreter: the test session itself must not become a subreaper or reap
    its fixtures' children."""
    out = subprocess.run(
        [sys.executable, "-c", _BENCH], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    lost, adopted = float(out[0]), float(out[1])
    assert adopted >= 0.45, f"an adopted orphan's CPU is the bench's own: {adopted:.2f} s"
    assert lost < 0.4, f"without adopted() an orphan's CPU is lost to the bench: {lost:.2f} s"
