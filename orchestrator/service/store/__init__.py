"""The session store: each session's latest snapshot and its lease, so that another worker can
take the session over (issue 36).

- `base`: the `SessionStore` interface, `Snapshot`, `PutResult` and the store's errors.
- `memory`: `MemoryStore`, the embedded default (in-process, bounded, nothing to install).
- `redis_store`: `RedisStore`, shared by workers through Redis (the `redis` client in threads).
- `factory`: `open_store`, a store from `ServiceConfig.session_store` (`memory`, `redis://...`).
- `writer`: `SnapshotWriter`, the session side's writer: offers never block, latest wins.
"""
