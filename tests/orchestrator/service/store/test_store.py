"""The rules of orchestrator/service/store/base.py, each on a MemoryStore and a RedisStore."""

from __future__ import annotations

import trio

from orchestrator.service.store.base import PutResult, SessionStore, Snapshot

TTL = 30.0


async def test_a_put_needs_the_current_leases_token(store: SessionStore) -> None:
    assert await store.put("s1", 1, b"one", TTL, fence=1) is PutResult.FENCED
    assert await store.get("s1") is None
    fence = await store.acquire("s1", "worker-a", TTL)
    assert await store.put("s1", 1, b"one", TTL, fence=fence + 1) is PutResult.FENCED
    assert await store.put("s1", 1, b"one", TTL, fence=fence) is PutResult.WRITTEN
    assert await store.get("s1") == Snapshot(1, b"one", fence)
    assert await store.get("s2") is None


async def test_an_older_or_equal_version_is_refused_as_stale(store: SessionStore) -> None:
    fence = await store.acquire("s1", "worker-a", TTL)
    assert await store.put("s1", 5, b"five", TTL, fence) is PutResult.WRITTEN
    assert await store.put("s1", 4, b"four", TTL, fence) is PutResult.STALE
    assert await store.put("s1", 5, b"other five", TTL, fence) is PutResult.STALE
    assert await store.get("s1") == Snapshot(5, b"five", fence)
    assert await store.put("s1", 6, b"six", TTL, fence) is PutResult.WRITTEN
    assert await store.get("s1") == Snapshot(6, b"six", fence)


async def test_a_takeover_fences_the_old_owner(store: SessionStore) -> None:
    old = await store.acquire("s1", "worker-a", TTL)
    assert await store.put("s1", 1, b"a1", TTL, old) is PutResult.WRITTEN
    new = await store.acquire("s1", "worker-b", TTL)
    assert new > old
    # However new its version, the old owner writes no more; the new one goes on from v1.
    assert await store.put("s1", 99, b"a99", TTL, old) is PutResult.FENCED
    assert await store.put("s1", 2, b"b2", TTL, new) is PutResult.WRITTEN
    assert await store.get("s1") == Snapshot(2, b"b2", new)
    assert not await store.renew("s1", "worker-a", old, TTL)
    assert not await store.release("s1", "worker-a", old)
    assert await store.put("s1", 3, b"b3", TTL, new) is PutResult.WRITTEN


async def test_the_same_owner_acquiring_again_keeps_its_token(store: SessionStore) -> None:
    fence = await store.acquire("s1", "worker-a", TTL)
    assert await store.acquire("s1", "worker-a", TTL) == fence
    assert await store.put("s1", 1, b"one", TTL, fence) is PutResult.WRITTEN


async def test_tokens_are_never_handed_out_twice(store: SessionStore) -> None:
    first = await store.acquire("s1", "worker-a", TTL)
    other = await store.acquire("s2", "worker-a", TTL)
    await store.delete("s1")
    again = await store.acquire("s1", "worker-a", TTL)
    assert len({first, other, again}) == 3 and first < other < again
    assert await store.put("s1", 1, b"one", TTL, first) is PutResult.FENCED


async def test_a_snapshot_and_a_lease_expire_after_their_ttl(store: SessionStore) -> None:
    fence = await store.acquire("s1", "worker-a", 0.3)
    assert await store.put("s1", 1, b"one", 0.3, fence) is PutResult.WRITTEN
    await trio.sleep(0.4)
    assert await store.get("s1") is None
    assert await store.put("s1", 2, b"two", TTL, fence) is PutResult.FENCED
    assert not await store.renew("s1", "worker-a", fence, TTL)
    # Gone as if deleted: a new lease, and any version is new again.
    again = await store.acquire("s1", "worker-a", TTL)
    assert again > fence
    assert await store.put("s1", 1, b"one again", TTL, again) is PutResult.WRITTEN


async def test_renew_keeps_the_lease_past_its_first_ttl(store: SessionStore) -> None:
    fence = await store.acquire("s1", "worker-a", 0.3)
    await trio.sleep(0.2)
    assert await store.renew("s1", "worker-a", fence, 0.3)
    await trio.sleep(0.2)
    assert await store.put("s1", 1, b"one", TTL, fence) is PutResult.WRITTEN
    assert not await store.renew("s1", "worker-b", fence, TTL), "only the owner renews"


async def test_rule4_renew_keeps_the_snapshot_too_without_writing_it_again(
    store: SessionStore,
) -> None:
    # Was: only the lease was renewed, so every live session wrote its whole snapshot again
    # at each renewal to keep it from expiring between turns.
    fence = await store.acquire("s1", "worker-a", 0.3)
    assert await store.put("s1", 1, b"one", 0.3, fence) is PutResult.WRITTEN
    await trio.sleep(0.2)
    assert await store.renew("s1", "worker-a", fence, 0.3)
    await trio.sleep(0.2)
    kept = await store.get("s1")
    assert kept is not None and kept.data == b"one", "the snapshot expired under a renewed lease"
    assert not await store.renew("s1", "worker-b", fence, 5.0)
    await trio.sleep(0.35)
    assert await store.get("s1") is None, "another owner's renewal kept the snapshot"


async def test_release_ends_the_lease_only_for_its_owner_and_token(
    store: SessionStore,
) -> None:
    fence = await store.acquire("s1", "worker-a", TTL)
    assert await store.put("s1", 1, b"one", TTL, fence) is PutResult.WRITTEN
    assert not await store.release("s1", "worker-b", fence)
    assert not await store.release("s1", "worker-a", fence + 1)
    assert await store.release("s1", "worker-a", fence)
    assert await store.put("s1", 2, b"two", TTL, fence) is PutResult.FENCED
    assert await store.get("s1") == Snapshot(1, b"one", fence), "the snapshot stays"


async def test_delete_removes_the_snapshot_and_the_lease(store: SessionStore) -> None:
    fence = await store.acquire("s1", "worker-a", TTL)
    assert await store.put("s1", 1, b"one", TTL, fence) is PutResult.WRITTEN
    await store.delete("s1")
    await store.delete("never-seen")
    assert await store.get("s1") is None
    assert await store.put("s1", 2, b"two", TTL, fence) is PutResult.FENCED


async def test_snapshots_are_bytes_kept_exactly(store: SessionStore) -> None:
    data = bytes(range(256)) * 64 + b"\x00"
    fence = await store.acquire("s1", "worker-a", TTL)
    assert await store.put("s1", 1, data, TTL, fence) is PutResult.WRITTEN
    snapshot = await store.get("s1")
    assert snapshot is not None and snapshot.data == data
