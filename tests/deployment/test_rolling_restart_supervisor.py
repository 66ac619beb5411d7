"""SIGHUP to `turntaker serve --workers 2`: a rolling restart (orchestrator/supervisor/rolling.py),
with real processes behind a real nginx, on the session's real tritonserver.

What a user would notice: each worker gets a new process in turn, the lines that say so (and
no death, hang or abort), the supervisor goes on running, and new sessions through nginx, on
either worker, work after it. The workers' drain is `DRAIN_S` and they hold no session when
the signal comes, so each stops at once; every wait is bounded.
"""

from __future__ import annotations

import re
import signal
import time

import pytest

from orchestrator.supervisor.workers import STOP_MARGIN_S
from orchestrator.triton import TritonServer
from tests.conftest import REPO_ROOT
from tests.deployment.test_nginx_workers import DRAIN_S, START_S, _answers, _cluster, _gone, _route
from tests.e2e.realtime_client import raw_session

pytestmark = pytest.mark.skipif(
    not (REPO_ROOT / "model_repository" / "null").is_dir(), reason="no `null` model"
)

# Per worker: its drain, the kill margin, a new process's start (a loaded 2-core machine).
TURN_S = DRAIN_S + STOP_MARGIN_S + START_S
_SPAWNED = re.compile(r"turntaker serve: worker \w+ pid (\d+) on ")


def test_sighup_restarts_each_worker_in_turn_and_the_service_goes_on(
    triton_server: TritonServer,
) -> None:
    with _cluster(triton_server) as cluster:
        old = {route: pid for route, (pid, _) in cluster.workers.items()}
        cluster.process.send_signal(signal.SIGHUP)
        cluster.wait_line(r"turntaker serve: SIGHUP: rolling restart of 2 workers", 10)
        new: dict[str, int] = {}
        for route in ("w0", "w1"):
            found = cluster.wait_line(
                rf"turntaker serve: worker {route} restarted: pid (\d+) -> (\d+) in [\d.]+ s",
                TURN_S,
            )
            assert int(found.group(1)) == old[route], cluster.log()
            new[route] = int(found.group(2))
        cluster.wait_line(r"turntaker serve: rolling restart done in [\d.]+ s", 10)
        assert cluster.process.poll() is None, cluster.log()
        assert all(new[r] != old[r] for r in old), (old, new)
        assert all(_gone(pid) for pid in old.values()), cluster.log()
        assert not any(_gone(pid) for pid in new.values()), cluster.log()
        for word in ("DIED", "HUNG", "ABORTED", "killing it"):
            assert not any(word in line for line in cluster.lines), cluster.log()
        # New sessions through nginx: on each worker's new process, then wherever nginx
        # sends them; each answers.
        for route in ("w0", "w1"):
            with raw_session(f"{cluster.url}&session_id=sess_{route}_0123456789abcdef") as on:
                assert _route(on) == route, cluster.log()
        with raw_session(cluster.url) as fresh:
            assert _route(fresh) in {"w0", "w1"}
            _answers(fresh)
        # A second SIGHUP, now that the first is over, is honoured; a SIGTERM in the middle
        # of it still stops everything, in bounded time, with exit 0.
        cluster.process.send_signal(signal.SIGHUP)
        began = time.monotonic()
        while sum("rolling restart of 2 workers" in line for line in cluster.lines) < 2:
            assert time.monotonic() - began < 10, cluster.log()
            time.sleep(0.05)
        cluster.process.send_signal(signal.SIGTERM)
        assert cluster.process.wait(DRAIN_S + STOP_MARGIN_S + 15) == 0, cluster.log()
        pids = [int(m.group(1)) for m in map(_SPAWNED.search, cluster.lines) if m]
        assert len(pids) >= 4 and all(_gone(pid) for pid in pids), cluster.log()
