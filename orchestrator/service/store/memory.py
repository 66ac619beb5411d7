"""MemoryStore: the embedded session store, a dict in this process (nothing to install).

It keeps the rules of `base.py` for one process only: no other worker can read it, so a
session outlives a lost connection here but not its worker (the behaviour before issue 36).

Rules, besides `base.py`'s:
1. Bounded: at most `max_sessions` sessions (a snapshot, a lease or both). An expired
   snapshot or lease is gone at once for every call (rule 4 of `base.py`); its entry is swept
   when room is needed. A new session beyond the bound raises `StoreFull`, and nothing held is
   evicted: a live session's snapshot is never dropped for another's.
2. A sweep remembers when the first entry can expire (lowered by every expiry set since):
   until then a new session in a full store is refused without scanning again, so a full
   store costs O(1) per refusal.
3. Every method is one step between checkpoints (nothing awaited inside), so each is atomic
   among Trio tasks, as Redis's scripts are among workers.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import trio

from orchestrator.service.store.base import (
    PutResult,
    Snapshot,
    StoreFull,
    StoreUnavailable,
    check_ttl,
)

Clock = Callable[[], float]


@dataclass(slots=True)
class _Lease:
    owner: str
    fence: int
    expires_at: float


@dataclass(slots=True)
class _Entry:
    snapshot: Snapshot | None = None
    snapshot_expires_at: float = -math.inf
    lease: _Lease | None = None

    def expires_at(self) -> float:
        lease = self.lease.expires_at if self.lease is not None else -math.inf
        return max(self.snapshot_expires_at if self.snapshot else -math.inf, lease)


class MemoryStore:
    def __init__(self, max_sessions: int = 10_000, *, clock: Clock = time.monotonic) -> None:
        if max_sessions <= 0:
            raise ValueError(f"max_sessions must be > 0, got {max_sessions}")
        self.max_sessions = max_sessions
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        # The last token handed out (rule 2 of base.py: never reused, whatever the session).
        self._fence = 0
        # Rule 2: no entry expires before this, so a full store needs no sweep until then.
        self._full_until = -math.inf
        self._closed = False

    def __len__(self) -> int:
        """Sessions held, expired ones not yet swept included (at most `max_sessions`)."""
        return len(self._entries)

    async def put(
        self, session_id: str, version: int, data: bytes, ttl_s: float, fence: int
    ) -> PutResult:
        check_ttl(ttl_s)
        await self._checkpoint()
        now = self._clock()
        entry = self._live(session_id, now)
        lease = entry.lease if entry is not None else None
        if entry is None or lease is None or lease.fence != fence:
            return PutResult.FENCED
        if entry.snapshot is not None and entry.snapshot.version >= version:
            return PutResult.STALE
        entry.snapshot = Snapshot(version, bytes(data), fence)
        entry.snapshot_expires_at = self._expiring(now + ttl_s)
        return PutResult.WRITTEN

    async def get(self, session_id: str) -> Snapshot | None:
        await self._checkpoint()
        entry = self._live(session_id, self._clock())
        return entry.snapshot if entry is not None else None

    async def acquire(self, session_id: str, owner: str, ttl_s: float) -> int:
        check_ttl(ttl_s)
        await self._checkpoint()
        now = self._clock()
        entry = self._live(session_id, now)
        if entry is None:
            entry = self._admit(session_id, now)
        if entry.lease is not None and entry.lease.owner == owner:
            entry.lease.expires_at = self._expiring(now + ttl_s)
            return entry.lease.fence
        self._fence += 1
        entry.lease = _Lease(owner, self._fence, self._expiring(now + ttl_s))
        return self._fence

    async def renew(self, session_id: str, owner: str, fence: int, ttl_s: float) -> bool:
        check_ttl(ttl_s)
        await self._checkpoint()
        now = self._clock()
        lease = self._lease(session_id, owner, fence, now)
        if lease is None:
            return False
        lease.expires_at = self._expiring(now + ttl_s)
        entry = self._entries[session_id]
        if entry.snapshot is not None:
            entry.snapshot_expires_at = lease.expires_at
        return True

    async def release(self, session_id: str, owner: str, fence: int) -> bool:
        await self._checkpoint()
        now = self._clock()
        if self._lease(session_id, owner, fence, now) is None:
            return False
        entry = self._entries[session_id]
        entry.lease = None
        self._full_until = -math.inf  # the entry may now expire sooner than the bound
        if entry.snapshot is None:
            self._forget(session_id)
        return True

    async def delete(self, session_id: str) -> None:
        await self._checkpoint()
        self._forget(session_id)

    async def close(self) -> None:
        self._closed = True
        self._entries.clear()

    def sweep(self) -> int:
        """Drops every expired entry; returns how many were dropped."""
        now = self._clock()
        expired = [sid for sid, entry in self._entries.items() if entry.expires_at() <= now]
        for sid in expired:
            del self._entries[sid]
        # Rule 2: the first live entry's expiry bounds when a sweep can next free room.
        self._full_until = min((e.expires_at() for e in self._entries.values()), default=now)
        return len(expired)

    async def _checkpoint(self) -> None:
        if self._closed:
            raise StoreUnavailable("the memory store is closed")
        await trio.lowlevel.checkpoint()

    def _live(self, session_id: str, now: float) -> _Entry | None:
        """The session's entry with whatever has expired taken out; None when nothing is left."""
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        if entry.snapshot is not None and entry.snapshot_expires_at <= now:
            entry.snapshot = None
        if entry.lease is not None and entry.lease.expires_at <= now:
            entry.lease = None
        if entry.snapshot is None and entry.lease is None:
            del self._entries[session_id]
            return None
        return entry

    def _lease(self, session_id: str, owner: str, fence: int, now: float) -> _Lease | None:
        entry = self._live(session_id, now)
        lease = entry.lease if entry is not None else None
        if lease is None or lease.owner != owner or lease.fence != fence:
            return None
        return lease

    def _admit(self, session_id: str, now: float) -> _Entry:
        if len(self._entries) >= self.max_sessions:
            if now < self._full_until or self.sweep() == 0:
                raise StoreFull(
                    f"the memory store holds {self.max_sessions} sessions (max_sessions)"
                )
        entry = self._entries[session_id] = _Entry()
        return entry

    def _expiring(self, expires_at: float) -> float:
        """Keeps rule 2's bound below every expiry set since the last sweep."""
        self._full_until = min(self._full_until, expires_at)
        return expires_at

    def _forget(self, session_id: str) -> None:
        if self._entries.pop(session_id, None) is not None:
            # Room was made: the next new session need not wait for an expiry.
            self._full_until = -math.inf
