"""One real tritonserver for the whole test session, on ports free at run time.

Shared by the Triton model tests and the service tests, so the suite pays its start-up once.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import BackgroundServer
from orchestrator.triton import TritonConfig, TritonServer

REPO_ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports: every socket is held until all are bound, as separate
    `free_port` calls may be handed the same port back (a server then refuses its HTTP and
    gRPC on one port)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture(scope="session")
def triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    log = tmp_path_factory.mktemp("triton") / "tritonserver.log"
    config = TritonConfig(
        model_repository=REPO_ROOT / "model_repository",
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        log_file=log,
        # While working on one model, TURNTAKER_TEST_MODELS=asr,tts loads only those.
        models=tuple(m for m in os.environ.get("TURNTAKER_TEST_MODELS", "").split(",") if m),
        # The thinker's prompt journal: what each request's prompt really held. Shared by every
        # test on this server; a test picks its own lines by request id.
        prompt_log=tmp_path_factory.mktemp("omni") / "prompts.jsonl",
    )
    server = TritonServer(config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def realtime_server(triton_server: TritonServer) -> Iterator[BackgroundServer]:
    """A real realtime server (Trio, hypercorn, real sockets) on the session's tritonserver."""
    config = ServiceConfig(port=free_port(), triton_urls=(triton_server.grpc_url,))
    with BackgroundServer(config) as server:
        yield server


@pytest.fixture(scope="session")
def omni_realtime_server(triton_server: TritonServer) -> Iterator[BackgroundServer]:
    """A real realtime server on the `qwen3_omni` pipeline (tiny random weights) of the session's
    tritonserver; its models: `qwen3_omni`, `vad`, `asr`, `cancel` (serve.needed_models)."""
    config = ServiceConfig(
        port=free_port(), triton_urls=(triton_server.grpc_url,), pipeline="qwen3_omni"
    )
    with BackgroundServer(config) as server:
        yield server


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Debian redis-server of the module's own, on loopback (tests/redis_server.py)."""
    # Imported here: tests/redis_server.py takes `free_port` from this module.
    from tests.redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server.url
    finally:
        server.kill()
