"""The session store's interface: a session's latest snapshot, and the lease that says which
worker may write it.

Rules (every implementation, `MemoryStore` and `RedisStore` alike; the tests run each case on
both):
1. A session has at most one snapshot: `put` keeps `data` only if its `version` is newer than
   the stored one's (else `PutResult.STALE`), so a late write never replaces a newer one.
2. A session has at most one lease: an owner and its fencing token. `acquire` is a takeover:
   it always succeeds, and a new owner gets a token larger than any handed out before (for any
   session, so a token is never handed out twice); the same owner acquiring again keeps its
   token and extends the lease.
3. `put` writes only with the current lease's token (else `PutResult.FENCED`, checked before
   the version): once another worker has taken the session over, or the lease has lapsed,
   the old owner's writes are refused, however new their version.
4. A snapshot lasts `ttl_s` after its last write or `renew` (the resume grace), a lease
   `ttl_s` after its acquisition or last `renew`; then each is gone as if deleted. `renew`
   and `release` act only for the lease's owner with its token, and say whether they did: a
   live session keeps its snapshot by renewing, without writing it again.
5. `delete` removes the session's snapshot and lease; its tokens are never reused.
6. A store that cannot do its work (Redis unreachable, a reply missing, the store closed)
   raises `StoreUnavailable`, with the cause chained; a store with no room for another session
   raises `StoreFull`. Both are `StoreError`s: nothing else is raised for the store's sake.

`owner` names one process's claim (`ServiceConfig.instance_id`, random per process): a worker
respawned under the same route id is a new owner.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    data: bytes
    # The token of the lease it was written under.
    fence: int


class PutResult(enum.StrEnum):
    WRITTEN = "written"
    STALE = "stale"  # rule 1: the stored snapshot is as new or newer
    FENCED = "fenced"  # rule 3: not the current lease's token


class StoreError(Exception):
    """Rule 6: the store could not do what it was asked."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or answered wrongly; `__cause__` is the client's error."""


class StoreFull(StoreError):
    """No room for another session (`MemoryStore.max_sessions`)."""


class SessionStore(Protocol):
    async def put(
        self, session_id: str, version: int, data: bytes, ttl_s: float, fence: int
    ) -> PutResult: ...

    async def get(self, session_id: str) -> Snapshot | None: ...

    async def acquire(self, session_id: str, owner: str, ttl_s: float) -> int: ...

    async def renew(self, session_id: str, owner: str, fence: int, ttl_s: float) -> bool: ...

    async def release(self, session_id: str, owner: str, fence: int) -> bool: ...

    async def delete(self, session_id: str) -> None: ...

    async def close(self) -> None: ...


def check_ttl(ttl_s: float) -> None:
    if not ttl_s > 0:
        raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
