"""RedisStore: the session store shared by workers, in Redis, through the `redis` client.

Rules, besides `base.py`'s:
1. Each decision is one Lua script (`register_script`), so it is atomic in Redis: `put`'s
   fence and version checks and its write; `acquire`'s takeover and its token (INCR); the
   owner-and-token checks of `renew` and `release`. No command is hand-spelled on the wire.
2. The client is blocking: every call runs in a Trio worker thread (`trio.to_thread`), at most
   `max_threads` at once (a `trio.CapacityLimiter`, and a connection pool of the same size),
   so a slow Redis holds threads, never the event loop. A call is not abandoned when its task
   is cancelled: it ends within the socket timeout, and its pooled connection stays sound.
3. Every `redis` error (refused, timed out, a reply missing) is raised as `StoreUnavailable`,
   its message naming the server (never its password) and the `redis` error chained.
4. `connect(url)` pings: a store that cannot be reached is an error at start, not at the
   first write.
5. Keys: `{prefix}{<session id>}:snapshot` (hash: version, fence, data) and
   `{prefix}{<session id>}:lease` (hash: owner, fence), each expiring with its TTL
   (PEXPIRE, milliseconds), and `{prefix}fence`, the one token counter of all sessions, which
   never expires (rule 2 of base.py). One Redis server (with replicas if wanted), not Redis
   Cluster: the counter and a session's lease are different slots. A Redis that restarts
   without persistence loses snapshots, leases and the counter, whose tokens then start
   again from 1: run it with an append-only file where takeovers must survive its restarts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import redis
import trio
from redis.backoff import ExponentialBackoff
from redis.retry import Retry
from redis.typing import EncodableT

from orchestrator.service.config import redact_url
from orchestrator.service.store.base import PutResult, Snapshot, StoreUnavailable, check_ttl

T = TypeVar("T")

# KEYS: snapshot, lease. ARGV: version, fence, data, ttl (ms). 1 written, 0 stale, -1 fenced.
_PUT = """
local lease = redis.call('HGET', KEYS[2], 'fence')
if not lease or tonumber(lease) ~= tonumber(ARGV[2]) then return -1 end
local stored = redis.call('HGET', KEYS[1], 'version')
if stored and tonumber(stored) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'fence', ARGV[2], 'data', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""

# KEYS: lease, counter. ARGV: owner, ttl (ms). The lease's token.
_ACQUIRE = """
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(redis.call('HGET', KEYS[1], 'fence'))
end
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'fence', string.format('%d', fence))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return fence
"""

# KEYS: lease, snapshot. ARGV: owner, fence, ttl (ms). 1 when the owner held it with that
# token; its snapshot, if any, lasts as long again.
_RENEW = """
local lease = redis.call('HMGET', KEYS[1], 'owner', 'fence')
if lease[1] ~= ARGV[1] or tonumber(lease[2]) ~= tonumber(ARGV[2]) then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
"""

# KEYS: lease. ARGV: owner, fence.
_RELEASE = """
local lease = redis.call('HMGET', KEYS[1], 'owner', 'fence')
if lease[1] ~= ARGV[1] or tonumber(lease[2]) ~= tonumber(ARGV[2]) then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

_PUT_RESULTS = {1: PutResult.WRITTEN, 0: PutResult.STALE, -1: PutResult.FENCED}


class RedisStore:
    """Made by `connect` (it pings); `close()` closes its connections."""

    def __init__(
        self, client: redis.Redis, where: str, *, max_threads: int, prefix: str = "turntaker:"
    ) -> None:
        self._client = client
        self._where = where
        self._prefix = prefix
        self._limiter = trio.CapacityLimiter(max_threads)
        self._put = client.register_script(_PUT)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        max_threads: int = 8,
        timeout_s: float = 2.0,
        prefix: str = "turntaker:",
    ) -> RedisStore:
        """A store on `url` (`redis://HOST:PORT/DB`, `rediss://` for TLS), once it answers a
        PING within `timeout_s` (rule 4); `timeout_s` bounds every later call's connect, send
        and reply too."""
        if max_threads <= 0:
            raise ValueError(f"max_threads must be > 0, got {max_threads}")
        where = redact_url(url)
        try:
            pool = redis.BlockingConnectionPool.from_url(
                url,
                max_connections=max_threads,
                timeout=timeout_s,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                # One quick retry: a pooled connection the server closed is reopened once;
                # a server that is down fails within the timeouts, not after ten tries.
                retry=Retry(ExponentialBackoff(cap=0.05, base=0.01), retries=1),
            )
        except ValueError as error:
            raise ValueError(f"session store {where}: {error}") from error
        # The client owns the pool: closing it closes every connection.
        client = redis.Redis.from_pool(pool)
        store = cls(client, where, max_threads=max_threads, prefix=prefix)
        try:
            await store._call(store._client.ping)
        except StoreUnavailable:
            await store.close()
            raise
        return store

    async def put(
        self, session_id: str, version: int, data: bytes, ttl_s: float, fence: int
    ) -> PutResult:
        check_ttl(ttl_s)
        keys = [self._key(session_id, "snapshot"), self._key(session_id, "lease")]
        args: list[EncodableT] = [version, fence, data, _ms(ttl_s)]
        answer = await self._call(lambda: self._put(keys=keys, args=args))
        return _PUT_RESULTS[int(answer)]

    async def get(self, session_id: str) -> Snapshot | None:
        key = self._key(session_id, "snapshot")
        version, fence, data = await self._call(
            lambda: self._client.hmget(key, ["version", "fence", "data"])
        )
        if version is None or fence is None or data is None:
            return None
        return Snapshot(
            int(version), data if isinstance(data, bytes) else data.encode(), int(fence)
        )

    async def acquire(self, session_id: str, owner: str, ttl_s: float) -> int:
        check_ttl(ttl_s)
        keys = [self._key(session_id, "lease"), self._prefix + "fence"]
        return int(await self._call(lambda: self._acquire(keys=keys, args=[owner, _ms(ttl_s)])))

    async def renew(self, session_id: str, owner: str, fence: int, ttl_s: float) -> bool:
        check_ttl(ttl_s)
        keys = [self._key(session_id, "lease"), self._key(session_id, "snapshot")]
        args: list[EncodableT] = [owner, fence, _ms(ttl_s)]
        return int(await self._call(lambda: self._renew(keys=keys, args=args))) == 1

    async def release(self, session_id: str, owner: str, fence: int) -> bool:
        keys = [self._key(session_id, "lease")]
        return int(await self._call(lambda: self._release(keys=keys, args=[owner, fence]))) == 1

    async def delete(self, session_id: str) -> None:
        keys = [self._key(session_id, "snapshot"), self._key(session_id, "lease")]
        await self._call(lambda: self._client.delete(*keys))

    async def close(self) -> None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._client.close, limiter=self._limiter)

    def _key(self, session_id: str, part: str) -> str:
        # A hash tag per session: its two keys share a slot, should they ever move to a cluster.
        return f"{self._prefix}{{{session_id}}}:{part}"

    async def _call(self, call: Callable[[], T]) -> T:
        try:
            return await trio.to_thread.run_sync(call, limiter=self._limiter)
        except (redis.RedisError, OSError, ValueError) as error:
            # redis-py lets a socket's own error through when the pool is closed under a
            # call (a store closed at the server's exit): rule 6 all the same.
            raise StoreUnavailable(f"session store {self._where}: {error}") from error


def _ms(ttl_s: float) -> int:
    return max(1, round(ttl_s * 1000))
