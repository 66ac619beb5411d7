"""The cancel board: closes the gap where a stream cancel never reaches an ensemble's steps.

Triton does not forward a client's stream cancel to the decoupled steps inside an ensemble
(upstream server#6739, checked here: 0 of 10), so the assistant would keep thinking and talking
after a barge-in. The orchestrator therefore also sends the request id to the small `cancel`
model, which writes it on this board; every stage of every pipeline checks the board before
each decode step, codec frame or audio chunk and stops when its request id is there.

Rules this module guarantees:
1. Bounded: one fixed-size file (a ring of `CANCEL_SLOTS` cancelled ids and a ring of
   `STOP_SLOTS` stop records); an old entry is overwritten, never grown. A stage checks the
   board within one step of a cancel, long before `CANCEL_SLOTS` newer cancels could evict it.
2. Cheap to check: a lookup is one vectorised compare over the ring (a few microseconds), no
   lock and no system call, so a stage can check it every step.
3. No false cancel: ids are compared as 128-bit BLAKE2b digests; a torn read can only delay a
   cancel by one check, never cancel another request.
4. Observable: a stage that stops because of a cancel records (id, stage, time); tests and
   benchmarks read the time from the cancel to the last stage stopping. Times are
   CLOCK_MONOTONIC nanoseconds, the same clock in every process on the machine.
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import numpy as np
import numpy.typing as npt

MAGIC = b"TTBOARD1"
CANCEL_SLOTS = 4096
STOP_SLOTS = 4096
STAGE_NAME_BYTES = 16
# Header: magic, cancel write count, stop write count (u64 each), padded to 64 bytes.
_HEADER = 64
# Cancel record: digest (2 x u64) + monotonic ns (i64).
_CANCEL_DTYPE = np.dtype([("d0", "<u8"), ("d1", "<u8"), ("t_ns", "<i8")])
# Stop record: digest + monotonic ns + stage name.
_STOP_DTYPE = np.dtype(
    [("d0", "<u8"), ("d1", "<u8"), ("t_ns", "<i8"), ("stage", f"S{STAGE_NAME_BYTES}")]
)
SIZE = _HEADER + CANCEL_SLOTS * _CANCEL_DTYPE.itemsize + STOP_SLOTS * _STOP_DTYPE.itemsize


def digest(request_id: str) -> tuple[int, int]:
    raw = hashlib.blake2b(request_id.encode(), digest_size=16).digest()
    return int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")


@dataclass(frozen=True)
class StopRecord:
    stage: str
    t_ns: int


class CancelBoard:
    """One board file, mapped into this process. Open it with `CancelBoard.open(path)`."""

    def __init__(self, path: Path, fd: int, mapped: mmap.mmap) -> None:
        self.path = path
        self._fd = fd
        self._map = mapped
        # flock belongs to the open file, not the thread: threads of one stage need their own.
        self._thread_lock = threading.Lock()
        self._counts: npt.NDArray[np.uint64] = np.frombuffer(mapped, dtype="<u8", count=2, offset=8)
        self._cancels: npt.NDArray[np.void] = np.frombuffer(
            mapped, dtype=_CANCEL_DTYPE, count=CANCEL_SLOTS, offset=_HEADER
        )
        self._stops: npt.NDArray[np.void] = np.frombuffer(
            mapped,
            dtype=_STOP_DTYPE,
            count=STOP_SLOTS,
            offset=_HEADER + CANCEL_SLOTS * _CANCEL_DTYPE.itemsize,
        )

    @classmethod
    def open(cls, path: Path) -> CancelBoard:
        """Open the board at `path`, creating it (zeroed, fixed size) if it does not exist."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_size != SIZE:
                    os.ftruncate(fd, 0)
                    os.ftruncate(fd, SIZE)
                    os.pwrite(fd, MAGIC, 0)
                elif os.pread(fd, len(MAGIC), 0) != MAGIC:
                    raise ValueError(f"{path} is not a cancel board")
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            mapped = mmap.mmap(fd, SIZE)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, mapped)

    def close(self) -> None:
        # The numpy views hold buffer exports; drop them before closing the map.
        del self._counts, self._cancels, self._stops
        self._map.close()
        os.close(self._fd)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def cancel(self, request_id: str) -> int:
        """Mark `request_id` cancelled; returns the monotonic time written."""
        d0, d1 = digest(request_id)
        now = time.monotonic_ns()
        with self._locked():
            n = int(self._counts[0])
            slot = self._cancels[n % CANCEL_SLOTS]
            # Time first, digest last: a reader that sees the digest sees a valid time.
            slot["t_ns"] = now
            slot["d1"] = d1
            slot["d0"] = d0
            self._counts[0] = n + 1
        return now

    def cancelled(self, request_id: str) -> bool:
        d0, d1 = digest(request_id)
        return bool(np.any((self._cancels["d0"] == d0) & (self._cancels["d1"] == d1)))

    def cancelled_at(self, request_id: str) -> int | None:
        d0, d1 = digest(request_id)
        hits = np.flatnonzero((self._cancels["d0"] == d0) & (self._cancels["d1"] == d1))
        return None if hits.size == 0 else int(self._cancels["t_ns"][hits].max())

    def record_stop(self, request_id: str, stage: str) -> None:
        """A stage stopped work on `request_id` because it was cancelled."""
        d0, d1 = digest(request_id)
        now = time.monotonic_ns()
        with self._locked():
            n = int(self._counts[1])
            slot = self._stops[n % STOP_SLOTS]
            slot["t_ns"] = now
            slot["stage"] = stage.encode()[:STAGE_NAME_BYTES]
            slot["d1"] = d1
            slot["d0"] = d0
            self._counts[1] = n + 1

    def stops(self, request_id: str) -> list[StopRecord]:
        d0, d1 = digest(request_id)
        hits = np.flatnonzero((self._stops["d0"] == d0) & (self._stops["d1"] == d1))
        records = [
            StopRecord(bytes(self._stops["stage"][i]).decode(), int(self._stops["t_ns"][i]))
            for i in hits
        ]
        return sorted(records, key=lambda r: r.t_ns)

    def _locked(self) -> _WriterLock:
        return _WriterLock(self._fd, self._thread_lock)


class _WriterLock:
    """Excludes other processes (flock) and other threads of this process (a mutex)."""

    def __init__(self, fd: int, thread_lock: threading.Lock) -> None:
        self._fd = fd
        self._thread_lock = thread_lock

    def __enter__(self) -> None:
        self._thread_lock.acquire()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()
