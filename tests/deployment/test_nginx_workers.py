"""`turntaker serve --workers 2`: two realtime processes behind a real nginx, on the session's
real tritonserver, driven over real WebSockets through nginx (deploy/nginx.conf).

What a user would notice:
- new sessions are spread over both workers;
- a connection with `?session_id=sess_w1_...` (a client resuming) lands on w1 every time,
  `sess_w0_...` on w0, and any other value on some worker;
- the HTTP endpoints and the page answer through nginx;
- after a SIGKILL of w1, `?session_id=sess_w1_...` lands on w0 and gets a working session,
  and the sessions open on w0 go on answering;
- a hung (SIGSTOPped) worker is SIGKILLed once it stops answering `/healthz`, its client's
  socket is cut, and it is respawned;
- a killed worker is started again (after `--worker-respawn-s`) on its port and route id: it
  answers, a resume of a session the old process held gets `session_resume_failed` and a
  working fresh session there, and new sessions reach it again;
- SIGTERM to the supervisor: open sessions get their closing events through nginx, and the
  workers, nginx and every port are gone within a bounded time.

The `null` pipeline streams fixed audio with no compute; every wait is bounded.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from bench.servers import bindable, consecutive_free_ports
from orchestrator.supervisor.nginx_conf import (
    Backend,
    find_nginx,
    read_template,
    render_nginx_conf,
)
from orchestrator.triton import TritonServer
from tests.conftest import REPO_ROOT
from tests.e2e.realtime_client import RawSession, raw_session
from tests.e2e.test_conversation_e2e import _ask_text, _manual
from tests.e2e.test_reliability_e2e import _closed
from tests.e2e.test_resume_e2e import _resume

pytestmark = pytest.mark.skipif(
    not (REPO_ROOT / "model_repository" / "null").is_dir(), reason="no `null` model"
)

DRAIN_S = 4
START_S = 60.0
# The longest respawn delay there is: longer than any test here takes after a kill.
LATE_RESPAWN_S = 30.0
_WORKER = re.compile(r"turntaker serve: worker (\w+) pid (\d+) on ([\d.]+):(\d+)")
_NGINX = re.compile(r"turntaker serve: nginx pid (\d+) on ")
_READY = "workers behind nginx"


@dataclass
class Cluster:
    """A `turntaker serve --workers 2` process and what it printed."""

    process: subprocess.Popen[str]
    port: int
    lines: list[str] = field(default_factory=list)
    workers: dict[str, tuple[int, int]] = field(default_factory=dict)  # route: (pid, port)
    nginx_pid: int = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime?model=turntaker"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return "".join(self.lines[-60:])

    def wait_line(self, pattern: str, timeout_s: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            for line in self.lines[seen:]:
                found = re.search(pattern, line)
                if found:
                    return found
            seen = len(self.lines)
            if self.process.poll() is not None and seen == len(self.lines):
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} within {timeout_s} s:\n{self.log()}")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone too, as far as a user can tell; its parent just has not reaped it yet.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@contextmanager
def _cluster(triton: TritonServer, *, respawn_s: float = LATE_RESPAWN_S) -> Iterator[Cluster]:
    """By default a killed worker stays down for the test's length (respawned only after
    `LATE_RESPAWN_S`): what is checked is how nginx routes around a dead one."""
    port = consecutive_free_ports(3)
    command = [sys.executable, "-m", "orchestrator.cli", "serve", "--workers", "2"]
    command += ["--pipeline", "null", "--triton-url", triton.grpc_url, "--port", str(port)]
    command += ["--worker-respawn-s", str(respawn_s)]
    env = {**os.environ, "TURNTAKER_DRAIN_TIMEOUT_S": str(DRAIN_S), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    cluster = Cluster(process, port)

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            cluster.lines.append(line)

    threading.Thread(target=read, name="cluster-output", daemon=True).start()
    try:
        cluster.wait_line(_READY, START_S)
        for line in list(cluster.lines):
            if found := _WORKER.search(line):
                cluster.workers[found.group(1)] = (int(found.group(2)), int(found.group(4)))
            if found := _NGINX.search(line):
                cluster.nginx_pid = int(found.group(1))
        assert sorted(cluster.workers) == ["w0", "w1"], cluster.log()
        assert cluster.nginx_pid, cluster.log()
        yield cluster
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(DRAIN_S + 20)
            except subprocess.TimeoutExpired:
                process.kill()  # its children get SIGTERM from their parent-death signal
                process.wait()


@pytest.fixture(scope="module")
def cluster(triton_server: TritonServer) -> Iterator[Cluster]:
    with _cluster(triton_server) as running:
        yield running


def _route(session: RawSession) -> str:
    created = session.events[0]
    assert created["type"] == "session.created", created
    found = re.fullmatch(r"sess_(\w+?)_[0-9a-f]{16}", created["session"]["id"])
    assert found, created["session"]["id"]
    return found.group(1)


def _answers(session: RawSession) -> None:
    """A text turn on the null pipeline ends with a completed `response.done`."""
    _manual(session, max_tokens=4)
    rid = _ask_text(session, "Say hello.")
    done = session.until("response.done", timeout_s=30)["response"]
    assert done["id"] == rid and done["status"] == "completed", done


def test_the_rendered_config_passes_nginx_own_check(tmp_path: Path) -> None:
    nginx = find_nginx()
    assert nginx is not None, "nginx is not installed (the Makefile's APT_PACKAGES has it)"
    backends = [Backend("w0", "127.0.0.1", 1), Backend("w1", "127.0.0.1", 2)]
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        render_nginx_conf(read_template(), backends, "127.0.0.1", 3, loopback_only=True)
    )
    command = [str(nginx), "-t", "-p", f"{tmp_path}/", "-c", str(conf)]
    check = subprocess.run(
        [*command, "-e", str(tmp_path / "error.log")],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert check.returncode == 0, check.stderr


def test_new_sessions_are_spread_over_both_workers(cluster: Cluster) -> None:
    with ExitStack() as stack:
        # Held open together: least_conn sees each one.
        sessions = [stack.enter_context(raw_session(cluster.url)) for _ in range(6)]
        routes = [_route(s) for s in sessions]
    assert set(routes) == {"w0", "w1"}, routes


def test_a_session_id_in_the_url_routes_to_its_worker(cluster: Cluster) -> None:
    for route in ("w1", "w0", "w1", "w0", "w1", "w0"):
        with raw_session(f"{cluster.url}&session_id=sess_{route}_0123456789abcdef") as session:
            assert _route(session) == route
    # Unknown routes and other values: a fresh session on some worker, never an error.
    for value in ("sess_w7_0123456789abcdef", "sess_0123456789abcdef", "x", ""):
        with raw_session(f"{cluster.url}&session_id={value}") as session:
            assert _route(session) in {"w0", "w1"}


def test_the_http_endpoints_answer_through_nginx(cluster: Cluster) -> None:
    with httpx.Client(base_url=cluster.http, timeout=5) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        assert client.get("/readyz").json()["ready"] is True
        assert "turntaker_sessions_active" in client.get("/metrics").text
        assert "<html" in client.get("/").text.lower()
        assert client.get("/static/app.js").status_code == 200
        assert client.get("/nothing-here").status_code == 404


def test_a_killed_worker_resumes_land_on_the_live_one(triton_server: TritonServer) -> None:
    with _cluster(triton_server) as cluster:
        with raw_session(f"{cluster.url}&session_id=sess_w0_0123456789abcdef") as on_w0:
            assert _route(on_w0) == "w0"
            os.kill(cluster.workers["w1"][0], signal.SIGKILL)
            cluster.wait_line(r"WORKER w1 .* DIED: killed by SIGKILL", 5)
            url = f"{cluster.url}&session_id=sess_w1_0123456789abcdef"
            for _ in range(3):
                with raw_session(url) as resumed:
                    assert _route(resumed) == "w0"
            with raw_session(url) as resumed:
                assert _route(resumed) == "w0"
                _answers(resumed)
            # New sessions too, and the session that was open on w0 all along.
            for _ in range(3):
                with raw_session(cluster.url) as fresh:
                    assert _route(fresh) == "w0"
            _answers(on_w0)
        assert cluster.process.poll() is None, cluster.log()


def test_a_killed_worker_is_respawned_and_takes_sessions_again(
    triton_server: TritonServer,
) -> None:
    with _cluster(triton_server, respawn_s=1.0) as cluster:
        old_pid, port = cluster.workers["w1"]
        with raw_session(f"{cluster.url}&session_id=sess_w1_0123456789abcdef") as lost:
            created = lost.events[0]
            sid, token = created["session"]["id"], created["resume_token"]
            assert _route(lost) == "w1"
            os.kill(old_pid, signal.SIGKILL)
            cluster.wait_line(r"WORKER w1 .* DIED: killed by SIGKILL; .*respawning in 1 s", 5)
            found = cluster.wait_line(
                rf"worker w1 pid (\d+) on 127\.0\.0\.1:{port} \(respawned", 10
            )
        new_pid = int(found.group(1))
        assert new_pid != old_pid
        _wait_healthy(port, START_S, cluster)
        # The old session's resume reaches the new w1, which never knew it: a fresh session.
        with raw_session(f"{cluster.url}&session_id={sid}") as again:
            assert _route(again) == "w1"
            _resume(again, sid, token, 1)
            error = again.until("error", timeout_s=10)["error"]
            assert error["code"] == "session_resume_failed", error
            _answers(again)
        with ExitStack() as stack:
            sessions = [stack.enter_context(raw_session(cluster.url)) for _ in range(6)]
            routes = [_route(s) for s in sessions]
        assert set(routes) == {"w0", "w1"}, routes
        assert cluster.process.poll() is None, cluster.log()


def test_a_hung_worker_is_killed_and_respawned(triton_server: TritonServer) -> None:
    with _cluster(triton_server, respawn_s=1.0) as cluster:
        old_pid, port = cluster.workers["w1"]
        with raw_session(f"{cluster.url}&session_id=sess_w1_0123456789abcdef") as stuck:
            assert _route(stuck) == "w1"
            # Stopped, it keeps its port: connects succeed and nothing ever answers.
            os.kill(old_pid, signal.SIGSTOP)
            cluster.wait_line(r"WORKER w1 .* HUNG: no /healthz answer 3 times in a row", 30)
            cluster.wait_line(r"WORKER w1 .* DIED: killed by SIGKILL; .*respawning", 5)
            # Its client is not left hanging: the socket is cut.
            code, _ = _closed(stuck.ws, timeout_s=10)
            assert code != 1000, code
        found = cluster.wait_line(rf"worker w1 pid (\d+) on 127\.0\.0\.1:{port} \(respawned", 10)
        assert int(found.group(1)) != old_pid
        _wait_healthy(port, START_S, cluster)
        assert cluster.process.poll() is None, cluster.log()


def _wait_healthy(port: int, timeout_s: float, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the respawned worker on {port} never answered:\n{cluster.log()}")


def test_sigterm_drains_the_workers_and_stops_everything(triton_server: TritonServer) -> None:
    with _cluster(triton_server) as cluster:
        ports = [cluster.port] + [port for _, port in cluster.workers.values()]
        pids = [pid for pid, _ in cluster.workers.values()] + [cluster.nginx_pid]
        with ExitStack() as stack:
            sessions = [
                stack.enter_context(
                    raw_session(f"{cluster.url}&session_id=sess_{route}_0123456789abcdef")
                )
                for route in ("w0", "w1")
            ]
            assert [_route(s) for s in sessions] == ["w0", "w1"]
            began = time.monotonic()
            cluster.process.send_signal(signal.SIGTERM)
            # Each session's closing events still come through nginx.
            for session in sessions:
                error = session.until("error", timeout_s=DRAIN_S + 5)["error"]
                assert error["code"] == "server_shutting_down", error
                assert _closed(session.ws) == (1001, "server is shutting down")
        assert cluster.process.wait(DRAIN_S + 15) == 0, cluster.log()
        took = time.monotonic() - began
        assert took < DRAIN_S + 10, (took, cluster.log())
        assert all(_gone(pid) for pid in pids), cluster.log()
        assert all(bindable(port) for port in ports), cluster.log()
