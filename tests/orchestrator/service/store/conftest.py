"""A real redis-server (Debian's binary) on 127.0.0.1 and a free port, and the stores under test.

Every store test that takes `store` runs twice: on a `MemoryStore` and on a `RedisStore`. The
Redis tests share one server for the whole session, each with a key prefix of its own (no test
sees another's keys or tokens); the tests that kill Redis start their own (`own_redis`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from orchestrator.service.store.base import SessionStore
from orchestrator.service.store.memory import MemoryStore
from orchestrator.service.store.redis_store import RedisStore
from tests.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A server for one test, which may kill it."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def unique_prefix() -> str:
    return f"test:{uuid.uuid4().hex[:8]}:"


@pytest.fixture(params=["memory", "redis"])
async def store(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> AsyncIterator[SessionStore]:
    made: SessionStore
    if request.param == "memory":
        made = MemoryStore()
    else:
        made = await RedisStore.connect(redis_server.url, prefix=unique_prefix())
    try:
        yield made
    finally:
        await made.close()
