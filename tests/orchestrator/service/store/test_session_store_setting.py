"""`session_store` (ServiceConfig, `--session-store`, TURNTAKER_SESSION_STORE) and `open_store`."""

from __future__ import annotations

import argparse

import pytest

from orchestrator.service.config import ServiceConfig, load_config
from orchestrator.service.serve import add_arguments, config_from_args
from orchestrator.service.store.base import StoreUnavailable
from orchestrator.service.store.factory import open_store
from orchestrator.service.store.memory import MemoryStore
from orchestrator.service.store.redis_store import RedisStore
from tests.conftest import free_port
from tests.redis_server import RedisServer


def test_the_session_store_is_memory_by_default() -> None:
    assert ServiceConfig().session_store == "memory"
    assert load_config(env={}).session_store == "memory"


def test_the_session_store_comes_from_the_environment_and_the_flag() -> None:
    url = "redis://127.0.0.1:6390/2"
    assert load_config(env={"TURNTAKER_SESSION_STORE": url}).session_store == url
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--session-store", "rediss://cache.internal:6380"])
    assert config_from_args(args).session_store == "rediss://cache.internal:6380"


@pytest.mark.parametrize(
    "spec",
    ["", "Memory", "redis", "redis://", "http://h:6379/0", "redis://h:port/0", "redis://h/db"],
)
def test_any_other_session_store_is_a_clear_error(spec: str) -> None:
    with pytest.raises(ValueError, match=r"session_store must be 'memory' or redis://HOST:PORT/DB"):
        load_config(env={"TURNTAKER_SESSION_STORE": spec})


def test_a_refused_session_store_never_shows_its_password() -> None:
    with pytest.raises(ValueError) as caught:
        ServiceConfig(session_store="redis://:hunter2@h:port/0")
    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in repr(ServiceConfig(session_store="redis://:hunter2@h:1/0"))


async def test_open_store_follows_the_setting(redis_server: RedisServer) -> None:
    memory = await open_store("memory")
    assert isinstance(memory, MemoryStore)
    shared = await open_store(redis_server.url)
    assert isinstance(shared, RedisStore)
    await shared.close()
    with pytest.raises(StoreUnavailable):
        await open_store(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(ValueError, match="session_store must be"):
        await open_store("postgres://h/0")


def test_serve_with_an_unreachable_store_stops_at_once_with_a_clear_error() -> None:
    # Redis down at start: one line saying which store and why, exit 2, before Triton's start.
    import subprocess
    import sys

    url = f"redis://127.0.0.1:{free_port()}/0"
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "serve", "--session-store", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "session store" in done.stderr and "127.0.0.1" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "triton" not in done.stdout.lower(), done
