"""MemoryStore's own rules (orchestrator/service/store/memory.py): bounded, swept, closed."""

from __future__ import annotations

import pytest

from orchestrator.service.store.base import PutResult, StoreFull, StoreUnavailable
from orchestrator.service.store.memory import MemoryStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_session_beyond_max_sessions_is_refused_and_none_evicted() -> None:
    store = MemoryStore(2)
    a = await store.acquire("s1", "w", 30)
    b = await store.acquire("s2", "w", 30)
    with pytest.raises(StoreFull, match="2 sessions"):
        await store.acquire("s3", "w", 30)
    assert len(store) == 2
    assert await store.put("s1", 1, b"one", 30, a) is PutResult.WRITTEN
    assert await store.put("s2", 1, b"one", 30, b) is PutResult.WRITTEN
    # A put never adds a session: without a lease there is nothing to write under.
    assert await store.put("s3", 1, b"one", 30, b) is PutResult.FENCED
    assert len(store) == 2


async def test_expired_sessions_are_swept_to_make_room() -> None:
    clock = Clock()
    store = MemoryStore(2, clock=clock)
    fence = await store.acquire("s1", "w", 1)
    await store.put("s1", 1, b"one", 1, fence)
    await store.acquire("s2", "w", 1)
    clock.now += 2
    await store.acquire("s3", "w", 30)
    assert len(store) == 1, "both expired sessions were swept"
    assert await store.get("s1") is None


async def test_a_full_store_makes_room_when_its_shortest_lease_expires() -> None:
    clock = Clock()
    store = MemoryStore(2, clock=clock)
    await store.acquire("s1", "w", 60)
    await store.acquire("s2", "w", 1)
    clock.now += 2
    await store.acquire("s3", "w", 1)  # the sweep frees s2; s3 expires before s1
    with pytest.raises(StoreFull):
        await store.acquire("s4", "w", 60)
    clock.now += 2
    await store.acquire("s4", "w", 60)
    assert await store.get("s3") is None and len(store) == 2


async def test_a_closed_memory_store_is_unavailable() -> None:
    store = MemoryStore()
    await store.acquire("s1", "w", 30)
    await store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        await store.get("s1")


@pytest.mark.parametrize("ttl", [0.0, -1.0, float("nan")])
async def test_a_ttl_must_be_positive(ttl: float) -> None:
    with pytest.raises(ValueError, match="ttl_s must be > 0"):
        await MemoryStore().acquire("s1", "w", ttl)
