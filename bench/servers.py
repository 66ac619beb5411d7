"""The servers a benchmark measures, each started one way: a local tritonserver, the realtime
server in a process of its own (or, for the benches whose numbers were taken so, in this
process), and `turntaker serve --workers N` behind its nginx.

Rules:
1. Every server listens on loopback ports free at its start (`free_port`; a run of them,
   `consecutive_free_ports`, for nginx and the workers right after it) and writes its log to
   a temporary folder (a cluster: its output, read as it comes), so benches never collide
   with each other or with a deployment.
2. `triton(models)` runs a tritonserver on model_repository/ with only `models` for the block;
   `triton_url(url, models)` uses a given server's gRPC URL as it is, or starts one.
3. `RealtimeProcess` runs the realtime server as a process of its own, so that its loop does
   not share the benchmark clients' GIL: `python -m orchestrator.cli serve` (the production
   path), or with `Instrumented` the same `serve()` in bench/load_server.py, which answers
   commands on stdin ("reset", "stats": samples, CPU, RSS, descriptors) with JSON lines. Either
   is ready once `/readyz` answers 200; one that exits or is not ready in time is an error.
4. Its counters are read from `/metrics` as Prometheus samples: (name, labels, value).
5. `realtime(pipeline, url)` runs the realtime server on a thread of this process
   (`BackgroundServer`) with a tritonserver of the models its pipeline needs; for the benches
   whose tables were measured that way (one client, realtime latency; the fuzzer).
6. `Cluster` runs `python -m orchestrator.cli serve --workers N` (`null` pipeline, a given
   `--session-store`) as a subprocess, nginx in front on the first of its ports; ready once the
   supervisor prints its workers are behind nginx (`START_S` at most); its output is kept line
   by line with the time each came, each worker's route, pid and port read from it.
   (The restart soak's Redis is bench/snapshot_cost.py's `RedisServer`.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.service.config import Pipeline, ServiceConfig
from orchestrator.service.serve import BackgroundServer, needed_models
from orchestrator.triton import TritonConfig, TritonServer

ROOT = Path(__file__).resolve().parent.parent
REPO = ROOT / "model_repository"

Sample = tuple[str, dict[str, str], float]


def free_port() -> int:
    """A loopback port free right now, for the servers a benchmark starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def consecutive_free_ports(count: int) -> int:
    """A loopback port P with P..P+count-1 free: nginx on P, the workers right after it."""
    for _ in range(100):
        port = free_port()
        if port + count <= 65535 and all(bindable(port + i) for i in range(count)):
            return port
    raise RuntimeError(f"no {count} consecutive free ports")


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextmanager
def triton(
    models: tuple[str, ...],
    *,
    null_speed: float = 1.0,
    null_audio: Path | None = None,
    null_audio_loop: bool = False,
    omni_weights: Path | None = None,
    model_threads: int = 1,
    startup_timeout_s: float = 120.0,
    log_dir: Path | None = None,
    omni_batching: bool = True,
    omni_max_streams: int = 32,
) -> Iterator[TritonServer]:
    """A local tritonserver serving `models` for the block (rules 1, 2)."""
    folder = log_dir if log_dir is not None else Path(tempfile.mkdtemp(prefix="bench-triton-"))
    config = TritonConfig(
        model_repository=REPO,
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        models=models,
        null_speed=null_speed,
        null_audio=null_audio,
        null_audio_loop=null_audio_loop,
        omni_weights=omni_weights,
        model_threads=model_threads,
        startup_timeout_s=startup_timeout_s,
        log_file=folder / "tritonserver.log",
        omni_batching=omni_batching,
        omni_max_streams=omni_max_streams,
    )
    with TritonServer(config) as server:
        yield server


@contextmanager
def triton_url(
    url: str | None,
    models: tuple[str, ...],
    null_speed: float = 1.0,
    null_audio: Path | None = None,
) -> Iterator[str]:
    """The gRPC URL of a tritonserver serving `models`: `url`, or a local one for the block
    (`null` answering with the voice `null_audio` where given)."""
    if url is not None:
        yield url
        return
    with triton(models, null_speed=null_speed, null_audio=null_audio) as server:
        yield server.grpc_url


@dataclass(frozen=True)
class Instrumented:
    """Serve through bench/load_server.py: the same `serve()`, measured from inside (rule 3)."""

    vad: str = "triton"  # "inprocess": one silero per session in the server process
    cprofile: str | None = None  # a file for cProfile stats of its Trio thread


def instrumented(vad: str = "triton") -> Instrumented:
    """`Instrumented(vad)`, profiled into $TURNTAKER_LOAD_CPROFILE when that is set."""
    return Instrumented(vad, os.environ.get("TURNTAKER_LOAD_CPROFILE") or None)


class RealtimeProcess:
    """The realtime server in a process of its own (rule 3)."""

    def __init__(
        self,
        triton_url: str,
        pipeline: str = "null",
        *,
        instrumented: Instrumented | None = None,
        ready_timeout_s: float = 120,
    ) -> None:
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}/v1/realtime"
        self.http = f"http://127.0.0.1:{self.port}"
        self.instrumented = instrumented
        if instrumented is None:
            command = [sys.executable, "-m", "orchestrator.cli", "serve", "--pipeline", pipeline]
            command += ["--triton-url", triton_url, "--port", str(self.port)]
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, text=True)
        else:
            command = [sys.executable, "-m", "bench.load_server", "--port", str(self.port)]
            command += ["--triton-url", triton_url, "--pipeline", pipeline]
            command += ["--vad", instrumented.vad]
            if instrumented.cprofile:
                command += ["--cprofile", instrumented.cprofile]
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
            )
        self.pid = self.process.pid
        deadline = time.monotonic() + ready_timeout_s
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the realtime server ({pipeline}) did not become ready")
            time.sleep(0.2)
        if instrumented is not None:
            self._line()  # {"ready": true, "pid": ...}: its command loop is running

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def _line(self) -> dict[str, Any]:
        out = self.process.stdout
        assert out is not None, "only an Instrumented server answers commands"
        line = out.readline()
        if not line:
            raise RuntimeError(f"the load server exited ({self.process.wait()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, command: str) -> dict[str, Any]:
        """An Instrumented server's answer to `command` ("reset", "stats", ...)."""
        stdin = self.process.stdin
        assert stdin is not None, "only an Instrumented server answers commands"
        stdin.write(command + "\n")
        stdin.flush()
        return self._line()

    def samples(self) -> list[Sample]:
        """Every sample `/metrics` shows now."""
        with urllib.request.urlopen(f"{self.http}/metrics", timeout=10) as answer:
            text = answer.read().decode()
        return [
            (sample.name, dict(sample.labels), sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]

    def total(self, name: str, samples: list[Sample] | None = None) -> float:
        """The sum of the samples called `name` (every label set), now or in `samples`."""
        return sum(v for n, _, v in (self.samples() if samples is None else samples) if n == name)

    def close(self) -> None:
        if self.instrumented is not None and self.process.poll() is None:
            try:
                self.ask("quit")
            except (OSError, RuntimeError, ValueError):
                pass
        else:
            self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def realtime(
    pipeline: str, url: str | None = None, announce: str | None = None, model_threads: int = 1
) -> Iterator[BackgroundServer]:
    """The realtime server on a thread of this process, on `url` or on a local tritonserver
    of the models `pipeline` needs (rule 5), each model process on `model_threads` threads;
    `announce`: a name to say Triton's log under."""
    service = ServiceConfig(port=free_port(), pipeline=cast(Pipeline, pipeline))
    if url is not None:
        with BackgroundServer(replace(service, triton_urls=(url,))) as server:
            yield server
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-triton-"))
    if announce is not None:
        models = ", ".join(needed_models(service))
        print(f"{announce}: starting tritonserver ({models}); log {folder / 'tritonserver.log'}")
    with triton(needed_models(service), log_dir=folder, model_threads=model_threads) as server:
        with BackgroundServer(replace(service, triton_urls=(server.grpc_url,))) as background:
            yield background


# A cluster's start on a busy machine: every worker up and behind nginx (rule 6).
START_S = 180.0
_WORKER = re.compile(r"turntaker serve: worker (\w+) pid (\d+) on ([\d.]+):(\d+)")
_READY = "workers behind nginx"


class Cluster:
    """`turntaker serve --workers N` (`null` pipeline, `store`) as a subprocess, nginx in front
    on loopback; its output read by a thread, each line with the time it came (rule 6)."""

    def __init__(
        self,
        triton_url: str,
        workers: int,
        store: str,
        *,
        env: dict[str, str] | None = None,
        start_s: float = START_S,
    ) -> None:
        self.port = consecutive_free_ports(workers + 1)
        self.url = f"ws://127.0.0.1:{self.port}/v1/realtime"
        self.count = workers
        command = [sys.executable, "-m", "orchestrator.cli", "serve", "--workers", str(workers)]
        command += ["--pipeline", "null", "--triton-url", triton_url, "--port", str(self.port)]
        command += ["--session-store", store]
        environment = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
        self.process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[tuple[float, str]] = []
        threading.Thread(target=self._read, name="cluster-output", daemon=True).start()
        try:
            self.wait_line(_READY, start_s)
        except BaseException:
            self.close()
            raise

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append((time.monotonic(), line))

    def log(self, count: int = 40) -> str:
        return "".join(line for _, line in self.lines[-count:])

    def wait_line(
        self, pattern: str | re.Pattern[str], timeout_s: float, since: float = 0.0
    ) -> tuple[float, re.Match[str]]:
        """The first line matching `pattern` that came after `since`, and when it came."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        while True:
            lines = self.lines[seen:]
            seen += len(lines)
            for at, line in lines:
                found = re.search(pattern, line)
                if found and at >= since:
                    return at, found
            if self.process.poll() is not None and seen == len(self.lines):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        raise RuntimeError(f"no line matching {pattern!r} within {timeout_s:g} s:\n{self.log()}")

    def workers(self) -> dict[str, tuple[int, int]]:
        """Each worker's route: its newest pid and its port."""
        found: dict[str, tuple[int, int]] = {}
        for _, line in list(self.lines):
            if match := _WORKER.search(line):
                found[match.group(1)] = (int(match.group(2)), int(match.group(4)))
        return found

    def hup(self) -> float:
        """SIGHUP to the supervisor (a rolling restart); when it was sent."""
        at = time.monotonic()
        self.process.send_signal(signal.SIGHUP)
        return at

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()  # its children get SIGTERM from their parent-death signal
                self.process.wait(10)


@contextmanager
def cluster(
    triton_url: str, workers: int, store: str, env: dict[str, str] | None = None
) -> Iterator[Cluster]:
    """A `Cluster` for the block (rule 6)."""
    running = Cluster(triton_url, workers, store, env=env)
    try:
        yield running
    finally:
        running.close()
