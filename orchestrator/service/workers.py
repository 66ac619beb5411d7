"""`turntaker serve --workers N`: N realtime processes behind one nginx, sharing one Triton.

Rules:
1. Ports. nginx listens on `--host:--port`; worker i on 127.0.0.1, port `--port + 1 + i`.
   Every one of them must be free at start, else nothing is started. Workers bind loopback
   only: clients reach them through nginx.
2. Names. Worker i has the route id `w<i>` (`<route_id>w<i>` when a route id is configured,
   for several supervisors behind one more balancer); its session ids carry it, and nginx
   routes `?session_id=sess_<route>_...` to that worker (deploy/nginx.conf).
3. Triton. One, started as plain `turntaker serve` starts it (`serve.local_triton`), unless
   `--triton-url` is given; every worker gets its gRPC URL(s).
4. Workers are `python -m orchestrator.cli serve` children with the user's flags passed
   through (config file, pipeline, API keys file, origins, per-key limits; the Triton-only
   ones, `--weights` and `--model-repository`, are not: the workers never start a Triton).
   `TURNTAKER_*` variables reach them by inheritance; the flags set here win over them. Each
   child has its own process group (Ctrl-C reaches only the supervisor, which stops them in
   order) and a parent-death SIGTERM (a supervisor killed outright leaves none behind).
   Their output goes to the supervisor's stdout and stderr.
5. Start-up: every worker answers `/healthz` within `WORKER_START_S`, then nginx, rendered
   into a fresh temporary prefix folder, answers through itself within `NGINX_START_S`. Any
   failure stops whatever was started and exits 1. A line `turntaker serve: worker <route>
   pid <pid> on <host>:<port>` names each worker as it starts.
6. A worker that dies is reported on stderr and not respawned: nginx routes around it
   (max_fails=1); its sessions are lost, and their resumes get a fresh session on a live
   worker. When the last worker dies, or nginx, or the local Triton, everything is stopped
   and the supervisor exits 1.
7. SIGTERM or Ctrl-C: every worker gets SIGTERM and drains (`drain_timeout_s`) while nginx
   still carries their closing events; a worker still there `STOP_MARGIN_S` after that is
   killed. Then nginx is stopped, then Triton; exit 0. Further signals during the (bounded)
   shutdown are ignored. While the local Triton starts (before any worker), the signals keep
   their default actions, as for plain `turntaker serve`: Triton follows the supervisor out
   by its parent-death signal.
8. The pure parts (route ids, ports, a worker's command line; the nginx config in
   nginx_conf.py) are plain functions; the rest is process plumbing.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from orchestrator.service.config import ServiceConfig
from orchestrator.service.nginx_conf import (
    Backend,
    bracket_host,
    find_nginx,
    read_template,
    render_nginx_conf,
)
from orchestrator.service.serve import access_settings, config_from_args, local_triton
from orchestrator.triton.launcher import TritonServer

WORKER_HOST = "127.0.0.1"
# A worker imports the service and checks every Triton endpoint before it listens.
WORKER_START_S = 60.0
NGINX_START_S = 10.0
# Past a worker's own drain deadline: its loop's teardown and exit.
STOP_MARGIN_S = 5.0
NGINX_STOP_S = 5.0
POLL_S = 0.1
_PR_SET_PDEATHSIG = 1


def route_ids(count: int, prefix: str = "") -> list[str]:
    """`w0`..`w<count-1>`, each behind `prefix` (letters and digits, like every route id)."""
    if count < 1:
        raise ValueError(f"--workers must be at least 1, got {count}")
    if prefix and not prefix.isalnum():
        raise ValueError(f"route id prefix must be letters and digits, got {prefix!r}")
    return [f"{prefix}w{i}" for i in range(count)]


def worker_ports(port: int, count: int) -> list[int]:
    """The workers' ports: the `count` ports right after nginx's `port`."""
    ports = [port + 1 + i for i in range(count)]
    if port < 1 or ports[-1] > 65535:
        raise ValueError(f"--port {port} leaves no room for {count} worker ports up to 65535")
    return ports


def worker_command(
    args: argparse.Namespace,
    *,
    python: str,
    backend: Backend,
    triton_urls: Sequence[str],
) -> list[str]:
    """One worker's command line: its address and route id, the Triton URLs, and the user's
    flags that matter to a realtime process (rule 4)."""
    command = [python, "-m", "orchestrator.cli", "serve"]
    command += ["--host", backend.host, "--port", str(backend.port)]
    command += ["--route-id", backend.route_id]
    for url in triton_urls:
        command += ["--triton-url", url]
    passed: tuple[tuple[str, object], ...] = (
        ("--config", args.config),
        ("--pipeline", args.pipeline),
        ("--api-keys-file", args.api_keys_file),
        ("--max-sessions-per-key", args.max_sessions_per_key),
        ("--append-bytes-per-s-per-key", args.append_bytes_per_s_per_key),
    )
    for flag, value in passed:
        if value is not None:
            command += [flag, str(value)]
    for origin in args.allow_origins or ():
        command += ["--allow-origin", origin]
    return command


def dial_host(host: str) -> str:
    """An address to reach a server listening on `host` from this machine."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


class StartFailed(RuntimeError):
    """A worker or nginx did not come up; the message says which and why."""


# What signal.signal takes and returns: a function, SIG_DFL/SIG_IGN, or None (not set from
# Python).
_Handler = Callable[[int, FrameType | None], Any] | int | None


class _Signals:
    """SIGTERM and SIGINT set `received` (the watch loop polls it); later ones are ignored,
    since the shutdown they would interrupt is bounded anyway."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, _Handler] = {}

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = signum
            print(f"turntaker serve: {name}: stopping the workers (they drain)", flush=True)
        else:
            print(f"turntaker serve: {name} ignored: already stopping", flush=True)


@dataclass
class _Worker:
    backend: Backend
    process: subprocess.Popen[bytes]
    reported: bool = False


def run(args: argparse.Namespace) -> int:
    """The supervisor (rules 1-7); returns the exit code."""
    try:
        config = config_from_args(args)
        routes = route_ids(args.workers, config.route_id)
        ports = worker_ports(config.port, args.workers)
        # A bad keys file or origin fails now, not after Triton's minutes of start-up.
        loopback_only = not access_settings(config).keys
        template = read_template()
    except (OSError, ValueError) as error:
        print(f"turntaker serve: {error}", file=sys.stderr, flush=True)
        return 2
    nginx = find_nginx()
    if nginx is None:
        print("turntaker serve: nginx not found (apt-get install nginx)", file=sys.stderr)
        return 1
    busy = [f"{config.host}:{config.port}"] if not _port_free(config.host, config.port) else []
    busy += [f"{WORKER_HOST}:{p}" for p in ports if not _port_free(WORKER_HOST, p)]
    if busy:
        print(f"turntaker serve: ports in use: {', '.join(busy)}", file=sys.stderr, flush=True)
        return 1
    backends = [Backend(r, WORKER_HOST, p) for r, p in zip(routes, ports, strict=True)]
    connections = _raise_open_files()
    plan = _Plan(config, args, backends, nginx, template, loopback_only, connections)
    if config.local_triton:
        with local_triton(config) as server:
            code = _supervise(plan, (server.grpc_url,), server)
    else:
        code = _supervise(plan, config.triton_urls, None)
    print(f"turntaker serve: {'stopped' if code == 0 else 'failed and stopped'}", flush=True)
    return code


@dataclass(frozen=True)
class _Plan:
    config: ServiceConfig
    args: argparse.Namespace
    backends: list[Backend]
    nginx: Path
    template: str
    loopback_only: bool
    worker_connections: int


def _supervise(plan: _Plan, triton_urls: Sequence[str], triton: TritonServer | None) -> int:
    workers: list[_Worker] = []
    nginx: subprocess.Popen[bytes] | None = None
    prefix = Path(tempfile.mkdtemp(prefix="turntaker-nginx-"))
    with _Signals() as signals:
        try:
            for backend in plan.backends:
                command = worker_command(
                    plan.args, python=sys.executable, backend=backend, triton_urls=triton_urls
                )
                worker = _Worker(backend, _spawn(command))
                workers.append(worker)
                print(
                    f"turntaker serve: worker {backend.route_id} pid {worker.process.pid} "
                    f"on {backend.address}",
                    flush=True,
                )
            for worker in workers:
                url = f"http://{worker.backend.address}/healthz"
                what = f"worker {worker.backend.route_id}"
                _wait_up(what, url, worker.process, WORKER_START_S, signals, ok={200})
            if signals.received is not None:
                return 0
            nginx = _start_nginx(plan, prefix)
            url = f"http://{bracket_host(dial_host(plan.config.host))}:{plan.config.port}/healthz"
            # Any answer from nginx will do (a 403: a non-loopback listen address without keys).
            _wait_up("nginx", url, nginx, NGINX_START_S, signals, ok=None)
            if signals.received is not None:
                return 0
            host, port = bracket_host(plan.config.host), plan.config.port
            print(
                f"turntaker serve: realtime on ws://{host}:{port}/v1/realtime "
                f"({len(workers)} workers behind nginx, pipeline {plan.config.pipeline}); "
                "Ctrl-C stops",
                flush=True,
            )
            return _watch(workers, nginx, triton, signals, prefix)
        except StartFailed as error:
            log = _tail(prefix / "error.log") if nginx is not None else ""
            print(f"turntaker serve: {error}{log}", file=sys.stderr, flush=True)
            return 1
        finally:
            _stop_all(workers, nginx, plan.config.drain_timeout_s)
            shutil.rmtree(prefix, ignore_errors=True)


def _start_nginx(plan: _Plan, prefix: Path) -> subprocess.Popen[bytes]:
    conf = prefix / "nginx.conf"
    conf.write_text(
        render_nginx_conf(
            plan.template,
            plan.backends,
            plan.config.host,
            plan.config.port,
            loopback_only=plan.loopback_only,
            worker_connections=plan.worker_connections,
        )
    )
    if os.geteuid() == 0:
        # A root master runs its workers as nobody: they must be able to enter the prefix
        # (its temp folders are created and chowned for them by the master).
        prefix.chmod(0o711)
    command = [str(plan.nginx), "-p", f"{prefix}/", "-c", str(conf)]
    # -e: even the messages before the config is read go to the prefix, not /var/log.
    command += ["-e", str(prefix / "error.log"), "-g", "daemon off;"]
    process = _spawn(command, stdout=subprocess.DEVNULL)
    print(
        f"turntaker serve: nginx pid {process.pid} on {bracket_host(plan.config.host)}:"
        f"{plan.config.port} (config {conf})",
        flush=True,
    )
    return process


def _watch(
    workers: list[_Worker],
    nginx: subprocess.Popen[bytes],
    triton: TritonServer | None,
    signals: _Signals,
    prefix: Path,
) -> int:
    """Until a signal (0) or a fatal death (1); a worker's death alone is reported (rule 6)."""
    while signals.received is None:
        for worker in workers:
            code = worker.process.poll()
            if code is not None and not worker.reported:
                worker.reported = True
                left = sum(not w.reported for w in workers)
                print(
                    f"turntaker serve: WORKER {worker.backend.route_id} (pid "
                    f"{worker.process.pid}) DIED: {_exit_status(code)}; its sessions are "
                    f"lost; nginx routes around it; not respawned ({left} of {len(workers)} "
                    "left)",
                    file=sys.stderr,
                    flush=True,
                )
        if all(w.reported for w in workers):
            print("turntaker serve: every worker is dead", file=sys.stderr, flush=True)
            return 1
        code = nginx.poll()
        if code is not None:
            log = _tail(prefix / "error.log")
            print(
                f"turntaker serve: NGINX DIED: {_exit_status(code)}{log}",
                file=sys.stderr,
                flush=True,
            )
            return 1
        if triton is not None and not triton.running():
            print("turntaker serve: TRITON DIED", file=sys.stderr, flush=True)
            return 1
        time.sleep(POLL_S)
    return 0


def _stop_all(
    workers: list[_Worker], nginx: subprocess.Popen[bytes] | None, drain_s: float
) -> None:
    """Workers first (they drain through nginx), then nginx (rule 7)."""
    live = [w for w in workers if w.process.poll() is None]
    for worker in live:
        worker.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + drain_s + STOP_MARGIN_S
    for worker in live:
        if not _wait_or_kill(worker.process, deadline - time.monotonic()):
            print(
                f"turntaker serve: worker {worker.backend.route_id} did not stop in time: killed",
                file=sys.stderr,
                flush=True,
            )
    if live:
        print(f"turntaker serve: {len(live)} worker(s) stopped", flush=True)
    if nginx is not None and nginx.poll() is None:
        # TERM: nginx's fast shutdown; the sessions it carried are over already.
        nginx.send_signal(signal.SIGTERM)
        _wait_or_kill(nginx, NGINX_STOP_S)
        print("turntaker serve: nginx stopped", flush=True)


def _wait_or_kill(process: subprocess.Popen[bytes], timeout_s: float) -> bool:
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


def _wait_up(
    what: str,
    url: str,
    process: subprocess.Popen[bytes],
    timeout_s: float,
    signals: _Signals,
    ok: set[int] | None,
) -> None:
    """Until `url` answers (with a status in `ok`; None: any), or a stop signal came."""
    deadline = time.monotonic() + timeout_s
    while signals.received is None:
        code = process.poll()
        if code is not None:
            raise StartFailed(f"{what} exited during start-up: {_exit_status(code)}")
        status = _http_status(url)
        if status is not None and (ok is None or status in ok):
            return
        if time.monotonic() > deadline:
            raise StartFailed(f"{what} did not answer {url} within {timeout_s:.0f} s")
        time.sleep(POLL_S)


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:
        return error.code
    except (OSError, ValueError):
        return None


def _spawn(command: list[str], *, stdout: int | None = None) -> subprocess.Popen[bytes]:
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


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As the servers themselves bind: connections left in TIME_WAIT do not count.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _raise_open_files() -> int:
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


def _exit_status(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        text = path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
    return f"\n{path}:\n{text}" if text else ""


__all__ = [
    "StartFailed",
    "dial_host",
    "route_ids",
    "run",
    "worker_command",
    "worker_ports",
]
