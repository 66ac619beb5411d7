"""The servers a benchmark measures: a local tritonserver, and `turntaker serve` in its own
process.

Rules:
- The realtime server runs as `python -m orchestrator.cli serve` in a process of its own (the
  production path), so that its loop does not share the benchmark clients' GIL; it is ready
  once `/readyz` answers 200, and a server that exits or is not ready in time is an error.
- Its counters are read from `/metrics` as Prometheus samples: (name, labels, value).
- `local_triton(None, models)` starts a tritonserver with `models` from model_repository/
  (its log in a temporary folder) for the block; a given URL is used as it is.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench import report
from orchestrator.service.config import Pipeline
from orchestrator.triton import TritonConfig, TritonServer

ROOT = Path(__file__).resolve().parent.parent

Sample = tuple[str, dict[str, str], float]


class RealtimeProcess:
    def __init__(self, triton_url: str, pipeline: Pipeline, ready_timeout_s: float = 120) -> None:
        self.port = report.free_port()
        self.url = f"ws://127.0.0.1:{self.port}/v1/realtime"
        self.http = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "orchestrator.cli", "serve", "--pipeline", pipeline]
        command += ["--triton-url", triton_url, "--port", str(self.port)]
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + ready_timeout_s
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the realtime server ({pipeline}) did not become ready")
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.http}/readyz", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def samples(self) -> list[Sample]:
        """Every sample `/metrics` shows now."""
        with urllib.request.urlopen(f"{self.http}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        return [
            (sample.name, dict(sample.labels), sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def local_triton(url: str | None, models: tuple[str, ...]) -> Iterator[str]:
    """The gRPC URL of a tritonserver serving `models`: `url`, or a local one for the block."""
    if url is not None:
        yield url
        return
    config = TritonConfig(
        model_repository=ROOT / "model_repository",
        http_port=report.free_port(),
        grpc_port=report.free_port(),
        metrics_port=report.free_port(),
        models=models,
        log_file=Path(tempfile.mkdtemp()) / "tritonserver.log",
    )
    with TritonServer(config) as server:
        yield server.grpc_url
