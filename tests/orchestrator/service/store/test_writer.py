"""SnapshotWriter's rules (orchestrator/service/store/writer.py), on both stores; the failing
store is a real Redis, killed mid-test."""

from __future__ import annotations

import logging

import pytest
import trio

from orchestrator.service.store.base import SessionStore, Snapshot
from orchestrator.service.store.redis_store import RedisStore
from orchestrator.service.store.writer import SnapshotWriter, WriteReport, WriteResult
from tests.orchestrator.service.store.conftest import RedisServer

TTL = 30.0


async def test_offers_never_wait_and_the_latest_wins(store: SessionStore) -> None:
    fence = await store.acquire("s1", "worker-a", TTL)
    reports: list[WriteReport] = []
    writer = SnapshotWriter(store, ttl_s=TTL, on_report=reports.append)
    # No writer task yet: offers are only held, one per session.
    assert writer.offer("s1", 1, b"v1", fence=fence)
    assert writer.offer("s1", 3, b"v3", fence=fence)
    assert not writer.offer("s1", 2, b"v2", fence=fence), "older than the one waiting"
    assert writer.waiting == 1
    assert [(r.version, r.result) for r in reports] == [
        (1, WriteResult.REPLACED),
        (2, WriteResult.REPLACED),
    ]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run)
        with trio.fail_after(2):
            await writer.wait_idle()
        nursery.cancel_scope.cancel()
    assert await store.get("s1") == Snapshot(3, b"v3", fence)
    assert reports[-1] == WriteReport("s1", 3, WriteResult.WRITTEN, 2)
    assert writer.counts == {WriteResult.REPLACED: 2, WriteResult.WRITTEN: 1}


async def test_offers_beyond_max_sessions_are_dropped_and_counted(store: SessionStore) -> None:
    writer = SnapshotWriter(store, ttl_s=TTL, max_sessions=2)
    assert writer.offer("s1", 1, b"x", fence=1)
    assert writer.offer("s2", 1, b"x", fence=1)
    assert not writer.offer("s3", 1, b"x", fence=1)
    assert writer.offer("s2", 2, b"x", fence=1), "a waiting session's newer offer still fits"
    assert writer.waiting == 2 and writer.counts[WriteResult.DROPPED] == 1


async def test_a_taken_over_session_is_reported_fenced(store: SessionStore) -> None:
    old = await store.acquire("s1", "worker-a", TTL)
    new = await store.acquire("s1", "worker-b", TTL)
    await store.put("s1", 1, b"b1", TTL, new)
    reports: list[WriteReport] = []
    writer = SnapshotWriter(store, ttl_s=TTL, on_report=reports.append)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.run)
        writer.offer("s1", 7, b"a7", fence=old)
        writer.offer("s2", 1, b"no lease", fence=old)
        with trio.fail_after(2):
            await writer.wait_idle()
        nursery.cancel_scope.cancel()
    assert sorted((r.session_id, r.result) for r in reports) == [
        ("s1", WriteResult.FENCED),
        ("s2", WriteResult.FENCED),
    ]
    assert await store.get("s1") == Snapshot(1, b"b1", new)


async def test_forget_drops_a_waiting_offer(store: SessionStore) -> None:
    writer = SnapshotWriter(store, ttl_s=TTL)
    writer.offer("s1", 1, b"x", fence=1)
    writer.forget("s1")
    assert writer.waiting == 0
    with trio.fail_after(1):
        await writer.wait_idle()


async def test_a_failing_store_is_counted_and_never_raises_into_the_caller(
    own_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    store = await RedisStore.connect(own_redis.url, timeout_s=0.5)
    fence = await store.acquire("s1", "worker-a", TTL)
    writer = SnapshotWriter(store, ttl_s=TTL, retry_s=0.05, retry_max_s=0.1)
    caplog.set_level(logging.WARNING, logger="turntaker.store")
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.run)
            writer.offer("s1", 1, b"v1", fence=fence)
            with trio.fail_after(2):
                await writer.wait_idle()
            assert writer.counts[WriteResult.WRITTEN] == 1

            own_redis.kill()
            for version in range(2, 6):
                assert writer.offer("s1", version, b"v%d" % version, fence=fence)
                await trio.sleep(0.05)
            with trio.fail_after(2):
                while writer.counts[WriteResult.FAILED] < 2:
                    await trio.sleep(0.01)
            failures = [r for r in caplog.records if r.levelno == logging.ERROR]
            assert len(failures) == 1, "logged at the first failure, then every log_every_s"
            assert "not written" in failures[0].getMessage()

            # Back, but empty (no persistence): the latest offer, tried again, is now fenced.
            own_redis.start()
            with trio.fail_after(3):
                await writer.wait_idle()
            nursery.cancel_scope.cancel()
    finally:
        await store.close()
    assert writer.counts[WriteResult.FENCED] == 1
    assert writer.counts[WriteResult.WRITTEN] == 1
    assert any("reach the store again" in r.getMessage() for r in caplog.records)
