"""A real realtime server (Trio, hypercorn, real sockets) on the session's real tritonserver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.service.config import ServiceConfig
from orchestrator.service.serve import BackgroundServer
from orchestrator.triton import TritonServer
from tests.conftest import free_port


@pytest.fixture(scope="session")
def realtime_server(triton_server: TritonServer) -> Iterator[BackgroundServer]:
    config = ServiceConfig(port=free_port(), triton_urls=(triton_server.grpc_url,))
    with BackgroundServer(config) as server:
        yield server
