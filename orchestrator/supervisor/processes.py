"""Process plumbing of the `--workers` supervisor: spawning children that die with it,
waiting for a server to answer, stopping a process group, signals, ports, open files.

Nothing here decides anything about workers or sessions (workers.py and respawn.py do).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

POLL_S = 0.1
_PR_SET_PDEATHSIG = 1


class StartFailed(RuntimeError):
    """A worker or nginx did not come up; the message says which and why."""


# What signal.signal takes and returns: a function, SIG_DFL/SIG_IGN, or None (not set from
# Python).
_Handler = Callable[[int, FrameType | None], Any] | int | None


class Signals:
    """SIGTERM and SIGINT set `received` (the watch loop polls it); later ones are ignored,
    since the shutdown they would interrupt is bounded anyway. SIGHUP is no stop signal: it
    asks for a rolling restart (workers.py), counted in `hangups` for the watch loop to take;
    one during the shutdown is left untaken."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.hangups = 0
        self._previous: dict[int, _Handler] = {}

    def __enter__(self) -> Signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        self._previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, self._hangup)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def take_hangups(self) -> int:
        """The SIGHUPs since the last call."""
        count, self.hangups = self.hangups, 0
        return count

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = signum
            print(f"turntaker serve: {name}: stopping the workers (they drain)", flush=True)
        else:
            print(f"turntaker serve: {name} ignored: already stopping", flush=True)

    def _hangup(self, signum: int, frame: FrameType | None) -> None:
        # Only counted: the loop that takes it prints what becomes of it (a print here could
        # land inside one of the main thread's own, which Python refuses as reentrant).
        self.hangups += 1


def wait_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Whether it exited by itself within `timeout_s`; else its whole group is killed."""
    try:
        process.wait(timeout=max(timeout_s, 0.0))
        return True
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # its own group: nginx's workers too
        except ProcessLookupError:
            pass
        process.wait()
        return False


def wait_up(
    what: str,
    url: str,
    process: subprocess.Popen[bytes],
    timeout_s: float,
    signals: Signals,
    ok: set[int] | None,
) -> None:
    """Until `url` answers (with a status in `ok`; None: any), or a stop signal came."""
    deadline = time.monotonic() + timeout_s
    while signals.received is None:
        code = process.poll()
        if code is not None:
            raise StartFailed(f"{what} exited during start-up: {exit_status(code)}")
        status = http_status(url)
        if status is not None and (ok is None or status in ok):
            return
        if time.monotonic() > deadline:
            raise StartFailed(f"{what} did not answer {url} within {timeout_s:.0f} s")
        time.sleep(POLL_S)


def http_status(url: str, timeout_s: float = 1.0) -> int | None:
    """The status `url` answers with; None when it does not within `timeout_s`."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:
        return error.code
    except (OSError, ValueError):
        return None


def spawn(command: list[str], *, stdout: int | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        # Own group: Ctrl-C reaches only the supervisor, which stops the children in order.
        process_group=0,
        preexec_fn=_die_with_parent,
    )


def _die_with_parent() -> None:
    # Between fork and exec: SIGTERM when the supervisor's main thread (which forks every
    # child) ends, however it ends.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As the servers themselves bind: connections left in TIME_WAIT do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def raise_open_files() -> int:
    """Lifts this process's open-files limit to its hard limit (the children inherit it:
    every session is a socket in a worker and two in nginx); returns nginx's
    worker_connections for it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = 65536
    target = cap if hard == resource.RLIM_INFINITY else min(hard, cap)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    limit = cap if soft == resource.RLIM_INFINITY else min(soft, cap)
    # Room for the listener, the logs and nginx's own files.
    return max(limit - 64, 256)


def exit_status(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def tail(path: Path, chars: int = 2000) -> str:
    try:
        text = path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
    return f"\n{path}:\n{text}" if text else ""
