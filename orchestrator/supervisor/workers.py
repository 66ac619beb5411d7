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
6. A worker that dies is reported on stderr, and nginx routes around it (nginx_conf.py rule 3); its
   sessions are lost, and their resumes get a fresh session on a live worker. It is started
   again on its port and route id after `worker_respawn_s`, backing off while it keeps dying
   (respawn.py), and is not waited for: nginx finds its port refusing until it listens. With
   `worker_respawn_s = 0` it stays dead, and when the last worker is dead everything is
   stopped and the supervisor exits 1; so it does when nginx or the local Triton dies.
   A worker that stops answering `/healthz` (stopped, wedged: it keeps its port, so nginx
   would go on handing it sessions) is SIGKILLed (liveness.py), and so met as a dead one.
7. SIGTERM or Ctrl-C: every worker gets SIGTERM and drains (`drain_timeout_s`) while nginx
   still carries their closing events; a worker still there `STOP_MARGIN_S` after that is
   killed. Then nginx is stopped, then Triton; exit 0. Further signals during the (bounded)
   shutdown are ignored. While the local Triton starts (before any worker), the signals keep
   their default actions, as for plain `turntaker serve`: Triton follows the supervisor out
   by its parent-death signal.
8. The pure parts (route ids, ports, a worker's command line; the nginx config in
   nginx_conf.py; the respawn schedule in respawn.py; liveness in liveness.py; the rolling
   restart in rolling.py) are plain functions and values; the process plumbing is in
   processes.py.
9. SIGHUP: a rolling restart (rolling.py): one worker at a time, in route order, gets SIGTERM
   and drains as in rule 7 (killed `STOP_MARGIN_S` past `drain_timeout_s`), is started again
   at once on its port and route id as soon as it exits (no death reported, no respawn
   delay, no liveness probe while it drains), and the next one follows `SETTLE_S` after it
   answers `/healthz`. A new
   process that exits or does not answer within `WORKER_START_S` aborts the restart (the
   code on disk cannot start: the workers not reached keep running the old one), and is
   then met as a dead worker (rule 6). A SIGHUP during a restart is ignored, and so is one
   during the workers' start (they run the code on disk); both are said. While the local
   Triton starts, SIGHUP keeps its default action, as the others do (rule 7). Lines:
   `turntaker serve: SIGHUP: rolling restart of <N> workers`, per worker `turntaker serve:
   worker <route> restarted: pid <old> -> <new> in <s> s`, then `turntaker serve: rolling
   restart done in <s> s`, or `turntaker serve: ROLLING RESTART ABORTED: <why>` on stderr.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from orchestrator.service.config import RESPAWN_MAX_S, ServiceConfig
from orchestrator.service.serve import access_settings, config_from_args, local_triton
from orchestrator.supervisor.liveness import Liveness, LivenessPolicy
from orchestrator.supervisor.nginx_conf import (
    Backend,
    bracket_host,
    find_nginx,
    read_template,
    render_nginx_conf,
)
from orchestrator.supervisor.processes import (
    POLL_S,
    Signals,
    StartFailed,
    exit_status,
    http_status,
    port_free,
    raise_open_files,
    spawn,
    tail,
    wait_or_kill,
    wait_up,
)
from orchestrator.supervisor.respawn import RespawnPolicy, RespawnSchedule
from orchestrator.supervisor.rolling import (
    Aborted,
    Action,
    Began,
    Done,
    Kill,
    Report,
    Restarted,
    RollingPolicy,
    RollingRestart,
    Spawn,
    Terminate,
)
from orchestrator.triton.launcher import TritonServer

WORKER_HOST = "127.0.0.1"
# A worker imports the service and checks every Triton endpoint before it listens.
WORKER_START_S = 60.0
NGINX_START_S = 10.0
# Past a worker's own drain deadline: its loop's teardown and exit.
STOP_MARGIN_S = 5.0
# A rolling restart's pause between a new worker's first /healthz answer and the next
# worker's stop: the sessions just moved to it settle first (nginx keeps no failure state
# to wait out: nginx_conf.py rule 3).
SETTLE_S = 1.0
NGINX_STOP_S = 5.0
# How a running worker is told from a hung one (liveness.py); its start gets WORKER_START_S.
LIVENESS = LivenessPolicy(start_s=WORKER_START_S)


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
        # One store for every worker: any of them can take another's sessions over.
        ("--session-store", getattr(args, "session_store", None)),
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


@dataclass
class _Worker:
    backend: Backend
    command: list[str]
    process: subprocess.Popen[bytes]
    schedule: RespawnSchedule
    liveness: Liveness
    alive: bool = True
    # The `/healthz` probe in flight (a thread's, so that a hung worker holds up nothing).
    probe: Future[int | None] | None = None

    def announce(self, how: str = "") -> None:
        print(
            f"turntaker serve: worker {self.backend.route_id} pid {self.process.pid} "
            f"on {self.backend.address}{how}",
            flush=True,
        )


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
    busy = [f"{config.host}:{config.port}"] if not port_free(config.host, config.port) else []
    busy += [f"{WORKER_HOST}:{p}" for p in ports if not port_free(WORKER_HOST, p)]
    if busy:
        print(f"turntaker serve: ports in use: {', '.join(busy)}", file=sys.stderr, flush=True)
        return 1
    backends = [Backend(r, WORKER_HOST, p) for r, p in zip(routes, ports, strict=True)]
    connections = raise_open_files()
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
    policy = RespawnPolicy(first_s=plan.config.worker_respawn_s, max_s=RESPAWN_MAX_S)
    with Signals() as signals:
        try:
            for backend in plan.backends:
                command = worker_command(
                    plan.args, python=sys.executable, backend=backend, triton_urls=triton_urls
                )
                now = time.monotonic()
                schedule = RespawnSchedule(policy, now)
                process = spawn(command)
                worker = _Worker(backend, command, process, schedule, Liveness(LIVENESS, now))
                workers.append(worker)
                worker.announce()
            for worker in workers:
                url = f"http://{worker.backend.address}/healthz"
                what = f"worker {worker.backend.route_id}"
                wait_up(what, url, worker.process, WORKER_START_S, signals, ok={200})
            if signals.received is not None:
                return 0
            nginx = _start_nginx(plan, prefix)
            url = f"http://{bracket_host(dial_host(plan.config.host))}:{plan.config.port}/healthz"
            # Any answer from nginx will do (a 403: a non-loopback listen address without keys).
            wait_up("nginx", url, nginx, NGINX_START_S, signals, ok=None)
            if signals.received is not None:
                return 0
            host, port = bracket_host(plan.config.host), plan.config.port
            print(
                f"turntaker serve: realtime on ws://{host}:{port}/v1/realtime "
                f"({len(workers)} workers behind nginx, pipeline {plan.config.pipeline}); "
                "Ctrl-C stops",
                flush=True,
            )
            restarts = _Restarts(workers, plan.config.drain_timeout_s)
            return _watch(workers, nginx, triton, signals, prefix, policy, restarts)
        except StartFailed as error:
            log = tail(prefix / "error.log") if nginx is not None else ""
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
    process = spawn(command, stdout=subprocess.DEVNULL)
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
    signals: Signals,
    prefix: Path,
    policy: RespawnPolicy,
    restarts: _Restarts,
) -> int:
    """Until a signal (0) or a fatal death (1); a worker's death alone is not (rule 6)."""
    # One more than the workers: a restarted worker's old probe may still hold a thread
    # (until its timeout) while the new process is probed.
    probes = ThreadPoolExecutor(max_workers=len(workers) + 1, thread_name_prefix="healthz")
    try:
        return _watch_loop(workers, nginx, triton, signals, prefix, policy, probes, restarts)
    finally:
        # A probe of a hung worker ends by its own timeout; nothing waits for it.
        probes.shutdown(wait=False, cancel_futures=True)


def _watch_loop(
    workers: list[_Worker],
    nginx: subprocess.Popen[bytes],
    triton: TritonServer | None,
    signals: Signals,
    prefix: Path,
    policy: RespawnPolicy,
    probes: ThreadPoolExecutor,
    restarts: _Restarts,
) -> int:
    if signals.take_hangups():
        print(
            "turntaker serve: SIGHUP during start-up ignored: the workers just started run "
            "the code on disk",
            flush=True,
        )
    while signals.received is None:
        now = time.monotonic()
        for _ in range(signals.take_hangups()):
            restarts.request(now)
        restarts.apply(restarts.plan.tick(now), now)
        for worker in workers:
            _tend(worker, workers, time.monotonic(), probes, restarts)
        if not policy.enabled and not any(w.alive for w in workers):
            print("turntaker serve: every worker is dead", file=sys.stderr, flush=True)
            return 1
        code = nginx.poll()
        if code is not None:
            log = tail(prefix / "error.log")
            print(
                f"turntaker serve: NGINX DIED: {exit_status(code)}{log}",
                file=sys.stderr,
                flush=True,
            )
            return 1
        if triton is not None and not triton.running():
            print("turntaker serve: TRITON DIED", file=sys.stderr, flush=True)
            return 1
        time.sleep(POLL_S)
    return 0


def _tend(
    worker: _Worker,
    workers: list[_Worker],
    now: float,
    probes: ThreadPoolExecutor,
    restarts: _Restarts,
) -> None:
    """Probes a running worker (killing a hung one), reports a death, and starts a dead
    worker again when its schedule says (rule 6); a worker stopped by a rolling restart is
    neither probed nor dead (rule 9)."""
    route = worker.backend.route_id
    if worker.alive:
        code = worker.process.poll()
        stopping = restarts.plan.stopping(route)
        if code is None:
            if not stopping:
                _probe(worker, now, probes, restarts)
            return
        if stopping:
            restarts.apply(restarts.plan.exited(route, now), now)
            return
        worker.alive = False
        worker.probe = None
        delay = worker.schedule.died(now)
        left = sum(w.alive for w in workers)
        then = "not respawned" if delay is None else f"respawning in {delay:g} s"
        print(
            f"turntaker serve: WORKER {worker.backend.route_id} (pid {worker.process.pid}) "
            f"DIED: {exit_status(code)}; its sessions are lost; nginx routes around it; "
            f"{then} ({left} of {len(workers)} up)",
            file=sys.stderr,
            flush=True,
        )
        # A rolling restart's new process that dies before it answers aborts the restart.
        restarts.apply(restarts.plan.exited(route, now), now)
    elif worker.schedule.due(now):
        # Not waited for: until it listens nginx finds its port refusing and uses the others.
        worker.process = spawn(worker.command)
        worker.schedule.started(now)
        worker.liveness = Liveness(LIVENESS, now)
        worker.alive = True
        worker.announce(f" (respawned after {worker.schedule.deaths} death(s))")


def _probe(worker: _Worker, now: float, probes: ThreadPoolExecutor, restarts: _Restarts) -> None:
    """liveness.py's rules carried out: one probe at a time; a hung worker is SIGKILLed, and
    its death is then met as any other. An answer is also what ends a rolling restart's
    turn (rule 9)."""
    if worker.probe is not None:
        if not worker.probe.done():
            return
        status, worker.probe = worker.probe.result(), None
        answered_at = time.monotonic()
        hung = worker.liveness.answered(answered_at, ok=status == 200)
        if status == 200:
            restarts.apply(restarts.plan.healthy(worker.backend.route_id, answered_at), answered_at)
    else:
        hung = worker.liveness.start_overdue(now)
        if not hung and worker.liveness.probe_due(now):
            url = f"http://{worker.backend.address}/healthz"
            worker.probe = probes.submit(http_status, url, LIVENESS.timeout_s)
    if hung:
        why = (
            f"no /healthz answer {worker.liveness.missed} times in a row"
            if worker.liveness.up
            else f"no /healthz answer within {LIVENESS.start_s:.0f} s of its start"
        )
        print(
            f"turntaker serve: WORKER {worker.backend.route_id} (pid {worker.process.pid}) "
            f"HUNG: {why}: killing it",
            file=sys.stderr,
            flush=True,
        )
        worker.process.kill()


class _Restarts:
    """rolling.py's actions carried out on the workers, and its lines printed (rule 9)."""

    def __init__(self, workers: list[_Worker], drain_s: float) -> None:
        self._workers = {w.backend.route_id: w for w in workers}
        policy = RollingPolicy(
            stop_s=drain_s + STOP_MARGIN_S, start_s=WORKER_START_S, settle_s=SETTLE_S
        )
        self.plan = RollingRestart(policy)
        # Each restarted worker's process before its turn, for the `restarted` line.
        self._old_pids: dict[str, int] = {}

    def request(self, now: float) -> None:
        up = sum(w.alive for w in self._workers.values())
        self.apply(self.plan.requested(now, list(self._workers), up), now)

    def apply(self, actions: list[Action], now: float) -> None:
        for action in actions:
            self._do(action, now)

    def _do(self, action: Action, now: float) -> None:
        match action:
            case Began(routes):
                _say(f"SIGHUP: rolling restart of {len(routes)} workers")
            case Terminate(route):
                worker = self._workers[route]
                self._old_pids[route] = worker.process.pid
                # Its answers no longer count: the next one to count is the new process's.
                worker.probe = None
                if worker.alive and worker.process.poll() is None:
                    worker.process.send_signal(signal.SIGTERM)
                else:
                    # Down already (waiting for its respawn, or just exited): started now.
                    self.apply(self.plan.exited(route, now), now)
            case Kill(route, why):
                worker = self._workers[route]
                _say(f"worker {route} (pid {worker.process.pid}) {why}: killing it", error=True)
                if worker.process.poll() is None:  # else reaped: its pid may be another's
                    try:
                        # Its group, as at shutdown (wait_or_kill).
                        os.killpg(worker.process.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            case Spawn(route):
                worker = self._workers[route]
                worker.process = spawn(worker.command)
                worker.schedule.started(now)
                worker.liveness = Liveness(LIVENESS, now)
                worker.alive = True
                worker.probe = None
                worker.announce(" (rolling restart)")
            case Restarted(route, took_s):
                old, new = self._old_pids.pop(route, 0), self._workers[route].process.pid
                _say(f"worker {route} restarted: pid {old} -> {new} in {took_s:.1f} s")
            case Report(text):
                _say(text)
            case Aborted(why, _):
                _say(f"ROLLING RESTART ABORTED: {why}", error=True)
            case Done(took_s):
                _say(f"rolling restart done in {took_s:.1f} s")


def _say(text: str, *, error: bool = False) -> None:
    print(f"turntaker serve: {text}", file=sys.stderr if error else sys.stdout, flush=True)


def _stop_all(
    workers: list[_Worker], nginx: subprocess.Popen[bytes] | None, drain_s: float
) -> None:
    """Workers first (they drain through nginx), then nginx (rule 7)."""
    live = [w for w in workers if w.process.poll() is None]
    for worker in live:
        worker.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + drain_s + STOP_MARGIN_S
    for worker in live:
        if not wait_or_kill(worker.process, deadline - time.monotonic()):
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
        wait_or_kill(nginx, NGINX_STOP_S)
        print("turntaker serve: nginx stopped", flush=True)


__all__ = [
    "StartFailed",
    "dial_host",
    "route_ids",
    "run",
    "worker_command",
    "worker_ports",
]
