"""`open_store`: the session store that `ServiceConfig.session_store` names.

`memory` is a `MemoryStore`; `redis://HOST:PORT/DB` (or `rediss://`) a `RedisStore`, which
must answer at once: a store that cannot be reached is `StoreUnavailable` here, at start.
The spelling is checked by `ServiceConfig` (config.py), so anything else is a `ValueError`.
"""

from __future__ import annotations

from orchestrator.service.config import check_session_store, redact_url
from orchestrator.service.store.base import SessionStore
from orchestrator.service.store.memory import MemoryStore
from orchestrator.service.store.redis_store import RedisStore

MEMORY = "memory"
REDIS_SCHEMES = ("redis://", "rediss://")


async def open_store(spec: str, *, max_sessions: int = 10_000) -> SessionStore:
    """`max_sessions` bounds the memory store; Redis is bounded by its own `maxmemory`."""
    if spec == MEMORY:
        return MemoryStore(max_sessions)
    if spec.startswith(REDIS_SCHEMES):
        return await RedisStore.connect(spec)
    check_session_store(spec)  # raises: the spelling is config.py's to judge
    raise ValueError(f"session store {redact_url(spec)!r}: neither memory nor Redis")
