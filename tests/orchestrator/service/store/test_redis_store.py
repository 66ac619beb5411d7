"""RedisStore's own rules (orchestrator/service/store/redis_store.py) on a real redis-server."""

from __future__ import annotations

import os
import signal

import pytest
import redis
import trio

from orchestrator.service.store.base import PutResult, StoreUnavailable
from orchestrator.service.store.redis_store import RedisStore
from tests.conftest import free_port
from tests.orchestrator.service.store.conftest import RedisServer, unique_prefix


async def test_connect_to_nothing_listening_is_store_unavailable() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    with trio.fail_after(3):
        with pytest.raises(StoreUnavailable, match=f"session store {url}") as caught:
            await RedisStore.connect(url)
    assert isinstance(caught.value.__cause__, redis.ConnectionError)


async def test_connect_errors_never_show_the_password() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    with pytest.raises(StoreUnavailable) as caught:
        await RedisStore.connect(url)
    assert "hunter2" not in str(caught.value) and ":***@127.0.0.1" in str(caught.value)


async def test_a_killed_redis_makes_every_call_store_unavailable(own_redis: RedisServer) -> None:
    store = await RedisStore.connect(own_redis.url)
    try:
        fence = await store.acquire("s1", "worker-a", 30)
        assert await store.put("s1", 1, b"one", 30, fence) is PutResult.WRITTEN
        own_redis.kill()
        with trio.fail_after(3):
            for call in (
                store.put("s1", 2, b"two", 30, fence),
                store.get("s1"),
                store.acquire("s1", "worker-b", 30),
                store.renew("s1", "worker-a", fence, 30),
                store.release("s1", "worker-a", fence),
                store.delete("s1"),
            ):
                with pytest.raises(StoreUnavailable) as caught:
                    await call
                assert isinstance(caught.value.__cause__, redis.RedisError)
    finally:
        await store.close()


async def test_a_stalled_redis_never_stalls_the_event_loop(own_redis: RedisServer) -> None:
    store = await RedisStore.connect(own_redis.url, timeout_s=0.3)
    fence = await store.acquire("s1", "worker-a", 30)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.01)
            ticks += 1

    assert own_redis.process is not None
    os.kill(own_redis.process.pid, signal.SIGSTOP)  # it holds the socket and answers nothing
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            with pytest.raises(StoreUnavailable, match="imeout"):
                await store.put("s1", 1, b"one", 30, fence)
            nursery.cancel_scope.cancel()
    finally:
        os.kill(own_redis.process.pid, signal.SIGCONT)
        await store.close()
    # The put waited at least its timeout (0.3 s): the loop ticked all along.
    assert ticks >= 20


async def test_a_flushed_script_cache_is_loaded_again(redis_server: RedisServer) -> None:
    store = await RedisStore.connect(redis_server.url, prefix=unique_prefix())
    try:
        fence = await store.acquire("s1", "worker-a", 30)
        client = redis.Redis.from_url(redis_server.url)
        client.script_flush()
        client.close()
        assert await store.put("s1", 1, b"one", 30, fence) is PutResult.WRITTEN
    finally:
        await store.close()


async def test_keys_expire_in_redis_itself(redis_server: RedisServer) -> None:
    prefix = unique_prefix()
    store = await RedisStore.connect(redis_server.url, prefix=prefix)
    client = redis.Redis.from_url(redis_server.url)
    try:
        fence = await store.acquire("s1", "worker-a", 20)
        await store.put("s1", 1, b"one", 10, fence)
        snapshot_ms = client.pttl(f"{prefix}{{s1}}:snapshot")
        lease_ms = client.pttl(f"{prefix}{{s1}}:lease")
        assert 9_000 < snapshot_ms <= 10_000 and 19_000 < lease_ms <= 20_000
        assert client.pttl(f"{prefix}fence") == -1, "the token counter never expires"
    finally:
        client.close()
        await store.close()
