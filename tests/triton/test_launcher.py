"""`turntaker triton` and TritonServer: start-up report, Ctrl-C, parent death, clean-up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.triton.launcher import SHM_DIR, SHM_PREFIX
from tests.triton.conftest import REPO_ROOT, _free_port

TURNTAKER = Path(sys.executable).parent / "turntaker"

# What these tests check is the launcher (its report, signals, parent death, SIGKILL of the
# process group), not the models: one Python-backend model (a stub process in the server's
# group) is enough, and starts in ~2 s where the whole repository takes ~25 s each time. The
# whole repository (the default, no --model) is loaded by the session's `triton_server`.
MODEL = "vad"


def _ports() -> list[str]:
    return [
        f"--http-port={_free_port()}",
        f"--grpc-port={_free_port()}",
        f"--metrics-port={_free_port()}",
    ]


def _read_until(process: subprocess.Popen[str], marker: str, timeout_s: float) -> list[str]:
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return lines
    raise AssertionError(f"no {marker!r} in output: {''.join(lines)}")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_cli_reports_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            str(TURNTAKER),
            "triton",
            *_ports(),
            f"--model={MODEL}",
            f"--log-file={tmp_path / 'server.log'}",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = _read_until(process, "metrics", timeout_s=120)
        text = "".join(lines)
        assert "ready in" in text and "vad" in text.split("models:")[1], text
        assert "HTTP    http://127.0.0.1:" in text and "gRPC    127.0.0.1:" in text, text
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "server exited with 0" in (process.stdout.read() if process.stdout else "")


# A parent that starts a server, prints the server's pid and then waits to be killed.
_PARENT = """
import sys, time
from pathlib import Path
from orchestrator.triton import TritonConfig, TritonServer
server = TritonServer(TritonConfig(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                   int(sys.argv[4]), log_file=Path(sys.argv[5]),
                                   models=(sys.argv[6],)))
server.start()
print(server.pid, flush=True)
time.sleep(600)
"""


def test_server_dies_with_its_parent(tmp_path: Path) -> None:
    ports = [str(_free_port()) for _ in range(3)]
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _PARENT,
            str(REPO_ROOT / "model_repository"),
            *ports,
            str(tmp_path / "server.log"),
            MODEL,
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    server_pid = 0
    try:
        assert parent.stdout is not None
        server_pid = int(parent.stdout.readline())
        assert _alive(server_pid)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _wait_gone(server_pid, timeout_s=60), "tritonserver outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if server_pid and _alive(server_pid):
            os.killpg(server_pid, signal.SIGKILL)


def test_stale_shm_regions_are_removed_when_no_server_runs() -> None:
    from orchestrator.triton.launcher import remove_stale_shm_regions, triton_processes_running

    stale = SHM_DIR / f"{SHM_PREFIX}turntaker_test_{os.getpid()}"
    stale.write_bytes(b"x")
    try:
        removed = remove_stale_shm_regions()
        if triton_processes_running():
            assert stale.exists() and removed == []
        else:
            assert stale in removed and not stale.exists()
    finally:
        stale.unlink(missing_ok=True)


def test_stop_kills_a_server_that_does_not_exit_in_time(tmp_path: Path) -> None:
    from orchestrator.triton import TritonConfig, TritonServer

    config = TritonConfig(
        model_repository=REPO_ROOT / "model_repository",
        http_port=_free_port(),
        grpc_port=_free_port(),
        metrics_port=_free_port(),
        log_file=tmp_path / "server.log",
        models=(MODEL,),
        # No grace at all: the SIGKILL path that a hung SIGTERM shutdown needs.
        stop_timeout_s=0.0,
    )
    server = TritonServer(config)
    server.start()
    pid = server.pid
    assert pid is not None
    assert server.stop() == -signal.SIGKILL
    assert not _alive(pid)
    # The stubs shared the server's process group and went with it.
    try:
        os.killpg(pid, 0)
        group_alive = True
    except ProcessLookupError:
        group_alive = False
    assert not group_alive, "Python backend stubs outlived the killed server"
