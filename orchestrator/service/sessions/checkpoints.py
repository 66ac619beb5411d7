"""A session's checkpoints: its snapshots, written to the session store under its lease.

Plumbing, as vad_feeder.py is: it decides nothing. When a snapshot is due is the core's rule 9
(its `Checkpoint` action); what a snapshot holds is snapshot.py's. This carries them out:
1. The lease: acquired when the session starts, in the background (a slow or unreachable
   store never delays a session), and renewed every third of its ttl. Checkpoints asked
   before it is held are written once it is (the state then is what counts).
2. Each checkpoint: the core's state and the link's sequence, token digest and journal,
   encoded (`snapshot.encode`, bounded by `snapshot_max_bytes`) and offered to the process's
   one `SnapshotWriter` (latest wins; it counts and logs every failure), `COALESCE_S` after it
   was asked: the step's events leave first (a barge-in's `output_audio_buffer.cleared` never
   waits for an encode), and the boundaries of one moment (a commit, the old response's end,
   the new one's start) make one snapshot. A snapshot over its bound is logged and skipped:
   the store keeps the previous one.
3. While the session lives, each renewal of its lease keeps its latest snapshot too (the
   store's rule 4), so it does not expire between turns without being written again. A
   renewal refused means the lease is no longer this session's (another worker took it over,
   or it lapsed and its next write would be fenced): `on_lost`, as for a fenced write.
4. At its end: a session that ended for good (the client left, its grace passed, a fault)
   has its snapshot and lease deleted, so no one can take over what is over, but only while
   its lease is still this session's (`release` says so): a session taken over elsewhere
   leaves the new owner's state alone. One ended by a drain (`keep=True`) leaves both to
   expire, for another worker to take it over, and has its last snapshot written to the
   store itself, awaited (within `LAST_WRITE_S`), not offered to the writer: its client is
   told to resume elsewhere right after, and the worker it reaches must find the session as
   it ended here (a snapshot still waiting in the writer would be read stale there, and then
   fenced here).
A store error is logged, never raised into the session: without a store a session goes on
in memory, as it would have before (docs/deployment.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

import trio

from orchestrator.service.store.base import SessionStore, StoreError
from orchestrator.service.store.writer import SnapshotWriter
from orchestrator.session.core import SessionCore
from orchestrator.session.resume import snapshot as snap
from orchestrator.session.resume.link import SessionLink

log = logging.getLogger("turntaker.snapshots")

# Rule 2: how long after a boundary its snapshot is taken.
COALESCE_S: Final = 0.01
# Rule 4: how long a drained session's last write may hold its close (Redis takes ~2 ms).
LAST_WRITE_S: Final = 2.0


class Checkpoints:
    def __init__(
        self,
        session_id: str,
        store: SessionStore,
        writer: SnapshotWriter,
        *,
        owner: str,
        ttl_s: float,
        max_bytes: int,
        max_image_bytes: int,
        max_journal_bytes: int,
        # The session's core, link and event ids handed out (each snapshot's parts).
        state: Callable[[], tuple[SessionCore, SessionLink, int]],
        on_lost: Callable[[], None],
        version: int = 0,
        fence: int | None = None,
    ) -> None:
        self.session_id = session_id
        self._store = store
        self._writer = writer
        self._owner = owner
        self._ttl_s = ttl_s
        self._max_bytes = max_bytes
        self._max_image_bytes = max_image_bytes
        self._max_journal_bytes = max_journal_bytes
        self._state = state
        self._on_lost = on_lost
        self.version = version  # the last snapshot's (a takeover goes on from the one it read)
        # The lease's token: a takeover comes with the one it acquired (host.py).
        self.fence = fence
        self._due = False
        self._wake = trio.Event()
        self._written = False  # a snapshot of this session was offered

    async def run(self) -> None:
        """Rules 1-3, until cancelled with the session."""
        while self.fence is None:
            try:
                self.fence = await self._store.acquire(self.session_id, self._owner, self._ttl_s)
            except StoreError as error:
                log.warning("session %s: no lease yet (%s); retrying", self.session_id, error)
                await trio.sleep(min(self._ttl_s / 3, 5.0))
        renew_at = trio.current_time() + self._ttl_s / 3
        while True:
            with trio.move_on_at(renew_at):
                await self._wake.wait()
            if self._due:
                await trio.sleep(COALESCE_S)
                self._write()
            if trio.current_time() >= renew_at:
                renew_at = trio.current_time() + self._ttl_s / 3
                await self._renew()

    async def _renew(self) -> None:
        """Rule 3."""
        assert self.fence is not None
        try:
            held = await self._store.renew(self.session_id, self._owner, self.fence, self._ttl_s)
        except StoreError as error:
            log.warning("session %s: lease not renewed (%s)", self.session_id, error)
            return
        if not held:
            log.info("session %s: its lease is another's now", self.session_id)
            self._on_lost()

    def checkpoint(self) -> None:
        """Rule 2: a snapshot is due (written by `run`, once the lease is held)."""
        self._due = True
        self._wake.set()

    def _write(self) -> None:
        if self.fence is None:
            return  # still due: `run` writes it once the lease is held
        self._due = False
        self._wake = trio.Event()
        data = self._encode()
        if data is not None:
            self._written = True
            self._writer.offer(self.session_id, self.version, data, fence=self.fence)

    def _encode(self) -> bytes | None:
        """The next version of the session's snapshot; None if it is over its bound."""
        core, link, events_named = self._state()
        self.version += 1
        snapshot = snap.take(
            core.state(),
            session_id=self.session_id,
            version=self.version,
            identity=link.identity,
            token=link.token,
            last_seq=link.last_seq,
            journal=link.journal.held(),
            events_named=events_named,
            max_image_bytes=self._max_image_bytes,
            max_journal_bytes=self._max_journal_bytes,
        )
        try:
            return snap.encode(snapshot, self._max_bytes)
        except snap.SnapshotTooLarge as error:
            log.error("session %s: snapshot skipped: %s", self.session_id, error)
            return None

    async def end(self, *, keep: bool) -> None:
        """Rule 4."""
        if keep:
            await self._last_write()
            return
        self._writer.forget(self.session_id)
        if self.fence is None:
            return  # never held the lease: nothing here is this session's to delete
        with trio.move_on_after(min(self._ttl_s, 2.0)):
            try:
                if await self._store.release(self.session_id, self._owner, self.fence):
                    await self._store.delete(self.session_id)
            except StoreError as error:
                log.warning("session %s: snapshot not deleted (%s)", self.session_id, error)

    async def _last_write(self) -> None:
        """Rule 4, a drained session: its state now, in the store before it returns."""
        if self.fence is None:
            return  # never held the lease: the store was out of reach all along
        self._writer.forget(self.session_id)  # an older offer would only be stale
        data = self._encode()
        if data is None:
            return
        with trio.move_on_after(LAST_WRITE_S) as waited:
            try:
                answer = await self._store.put(
                    self.session_id, self.version, data, self._ttl_s, self.fence
                )
            except StoreError as error:
                log.error("session %s: last snapshot not written (%s)", self.session_id, error)
                return
        if waited.cancelled_caught:
            log.error(
                "session %s: last snapshot not written in %g s", self.session_id, LAST_WRITE_S
            )
            return
        self._written = True
        log.info("session %s: last snapshot v%d: %s", self.session_id, self.version, answer)
