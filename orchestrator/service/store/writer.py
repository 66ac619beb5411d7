"""SnapshotWriter: the session side's writer of snapshots into a `SessionStore`.

Rules:
1. `offer` never blocks and never raises for the store's sake: a session hands its latest
   snapshot over and goes on. The writer's tasks (`run`) write it.
2. Latest wins, per session: an offer replaces its session's unwritten one if its version is
   newer, and is itself dropped if not (both counted `replaced`). So a session has at most one
   offer waiting, and a slow store skips versions rather than queueing them.
3. Bounded: offers of at most `max_sessions` sessions wait (and at most `concurrency` more are
   being written). A new session's offer beyond that is dropped, counted `dropped` and logged.
4. A session's offers are written one at a time, in version order; different sessions' up to
   `concurrency` at once.
5. Every outcome is reported to `on_report` (`WriteReport`: the session, the version, the
   result, the snapshot's bytes): `written`, `stale`, `fenced` (the store's answers: rules 1
   and 3 of base.py), `failed` (a `StoreError`), `dropped`, `replaced`. `fenced` tells the
   session side that another worker has taken the session over. Results are counted
   (`counts`) either way.
6. A failed write is tried again unless a newer offer has come meanwhile; while writes fail,
   each task waits between tries (from `retry_s`, doubling up to `retry_max_s`). Failures are
   logged loudly but boundedly: at the first, then at most every `log_every_s` with how many,
   and once when the store answers again.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import trio

from orchestrator.service.store.base import SessionStore, StoreError, check_ttl

log = logging.getLogger("turntaker.store")


class WriteResult(enum.StrEnum):
    WRITTEN = "written"
    STALE = "stale"
    FENCED = "fenced"
    FAILED = "failed"
    DROPPED = "dropped"
    REPLACED = "replaced"


@dataclass(frozen=True, slots=True)
class WriteReport:
    session_id: str
    version: int
    result: WriteResult
    bytes: int


Report = Callable[[WriteReport], None]


@dataclass(frozen=True, slots=True)
class _Offer:
    version: int
    data: bytes
    fence: int


class SnapshotWriter:
    def __init__(
        self,
        store: SessionStore,
        *,
        ttl_s: float,
        max_sessions: int = 10_000,
        concurrency: int = 4,
        on_report: Report | None = None,
        retry_s: float = 0.1,
        retry_max_s: float = 2.0,
        log_every_s: float = 10.0,
    ) -> None:
        check_ttl(ttl_s)
        if max_sessions <= 0 or concurrency <= 0:
            raise ValueError(f"max_sessions ({max_sessions}), concurrency ({concurrency}) > 0")
        self._store = store
        self._ttl_s = ttl_s
        self._max_sessions = max_sessions
        self._concurrency = concurrency
        self._on_report = on_report
        self._retry_s = retry_s
        self._retry_max_s = retry_max_s
        self._log_every_s = log_every_s
        # Insertion order: the oldest waiting session is written first.
        self._waiting: dict[str, _Offer] = {}
        self._writing: set[str] = set()
        self._work = trio.lowlevel.ParkingLot()
        self._idle = trio.lowlevel.ParkingLot()
        self.counts: Counter[WriteResult] = Counter()
        # Rule 6: failures since the last log line, when it was, and the wait between tries.
        self._failing = False
        self._unlogged = 0
        self._logged_at = -float("inf")
        self._backoff = 0.0

    @property
    def waiting(self) -> int:
        """Sessions with an offer not yet being written (at most `max_sessions`)."""
        return len(self._waiting)

    def offer(self, session_id: str, version: int, data: bytes, *, fence: int) -> bool:
        """Rules 1-3: whether the offer is waiting to be written (False: replaced by a newer
        waiting one, or dropped)."""
        held = self._waiting.get(session_id)
        if held is not None:
            if version <= held.version:
                self._report(session_id, version, WriteResult.REPLACED, len(data))
                return False
            self._report(session_id, held.version, WriteResult.REPLACED, len(held.data))
        elif len(self._waiting) >= self._max_sessions:
            self._report(session_id, version, WriteResult.DROPPED, len(data))
            self._trouble(f"snapshot of {session_id} dropped: {self._max_sessions} sessions wait")
            return False
        self._waiting[session_id] = _Offer(version, data, fence)
        self._work.unpark()
        return True

    def forget(self, session_id: str) -> None:
        """Drops the session's waiting offer (the session has ended); one being written ends."""
        if self._waiting.pop(session_id, None) is not None:
            self._wake_if_idle()

    async def run(self) -> None:
        """The writer's tasks, until cancelled."""
        async with trio.open_nursery() as nursery:
            for _ in range(self._concurrency):
                nursery.start_soon(self._write_loop)

    async def wait_idle(self) -> None:
        """Until nothing waits and nothing is being written (needs `run`)."""
        while self._waiting or self._writing:
            await self._idle.park()

    async def _write_loop(self) -> None:
        while True:
            session_id = self._next()
            if session_id is None:
                await self._work.park()
                continue
            offer = self._waiting.pop(session_id)
            self._writing.add(session_id)
            try:
                failed = not await self._write(session_id, offer)
            finally:
                self._writing.discard(session_id)
            if failed:
                # Rule 6: tried again, unless a newer offer came (then that one is).
                if session_id not in self._waiting:
                    self._requeue(session_id, offer)
                self._backoff = min(max(self._backoff * 2, self._retry_s), self._retry_max_s)
                await trio.sleep(self._backoff)
            self._wake_if_idle()

    def _requeue(self, session_id: str, offer: _Offer) -> None:
        if len(self._waiting) >= self._max_sessions:
            # Others took its place while it was written (rule 3 holds for retries too).
            self._report(session_id, offer.version, WriteResult.DROPPED, len(offer.data))
            self._trouble(f"snapshot of {session_id} dropped: {self._max_sessions} sessions wait")
            return
        self._waiting[session_id] = offer

    def _next(self) -> str | None:
        """The oldest waiting session not being written (rule 4)."""
        for session_id in self._waiting:
            if session_id not in self._writing:
                return session_id
        return None

    async def _write(self, session_id: str, offer: _Offer) -> bool:
        """Whether the store answered (written, stale or fenced)."""
        try:
            answer = await self._store.put(
                session_id, offer.version, offer.data, self._ttl_s, offer.fence
            )
        except StoreError as error:
            self._report(session_id, offer.version, WriteResult.FAILED, len(offer.data))
            self._trouble(f"snapshot of {session_id} not written: {error}")
            return False
        result = WriteResult(answer.value)
        self._report(session_id, offer.version, result, len(offer.data))
        if self._failing:
            log.warning("session store: writes reach the store again (%s)", result)
            self._failing = False
            self._unlogged = 0
            self._logged_at = -float("inf")
        self._backoff = 0.0
        if result is WriteResult.FENCED:
            log.warning("session store: %s v%d fenced: taken over", session_id, offer.version)
        return True

    def _report(self, session_id: str, version: int, result: WriteResult, size: int) -> None:
        self.counts[result] += 1
        if self._on_report is not None:
            self._on_report(WriteReport(session_id, version, result, size))

    def _trouble(self, what: str) -> None:
        """Rule 6: the first failure at once, then a line per `log_every_s` at most."""
        self._unlogged += 1
        now = trio.current_time()
        if not self._failing or now - self._logged_at >= self._log_every_s:
            log.error("session store: %s (%d such since the last report)", what, self._unlogged)
            self._failing = True
            self._unlogged = 0
            self._logged_at = now

    def _wake_if_idle(self) -> None:
        if not self._waiting and not self._writing:
            self._idle.unpark_all()
