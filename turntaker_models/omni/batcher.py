"""One forward for many streams: the streams' threads meet here and one thread runs their jobs.

Each stream of a stage keeps its own thread (streams.py: its messages in order, its state);
where it would run the model it `call`s the stage's batcher instead and blocks until its job
is done. The batcher's thread takes the jobs waiting, runs them as one batch and hands each
caller its result.

Rules:
1. A round starts once a job waits. It gathers more while a stream served in the last round
   has not called again, for at most `gather_ratio` of the last round's run time (at least
   `gather_min_s`, at most `gather_max_s`): streams that step together stay together, and a
   stream that waits for upstream input (the talker for its next text token) costs the
   others that much at most.
2. `pick` chooses which waiting jobs run in a round (say, every decode step and at most one
   prefill, so one long prompt stalls the others' steps by one prefill at most); the rest
   wait for the next round, first come first served. At most `max_batch` run in a round.
3. A stream that is done (finished, cancelled, failed) `leave`s: no round waits for it.
4. A job's error reaches its own caller only; an error of the whole batch reaches every
   caller in it (the engines isolate their rows before that: a row that cannot run, or that
   fails a forward run alone, fails alone; thinker_engine.py and talker_engine.py). After
   `close` every waiting and later call raises `BatcherClosed`.
5. Bounded: a stream has at most one job waiting (its thread blocks in `call`), and the
   stage bounds its streams.
6. A `pick` that raises fails the jobs it was choosing among, with its error, and the
   batcher goes on: a bug in choosing never leaves a stream blocked.
7. If the batcher's thread dies all the same, every caller then waiting hears `BatcherDied`
   within `watch_s` (a caller waits in slices and looks), and the next call starts a new
   thread: a stage's streams fail promptly instead of blocking forever, and the stage goes on
   serving new ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

log = logging.getLogger("turntaker.omni")

J = TypeVar("J")
R = TypeVar("R")


class BatcherClosed(RuntimeError):
    pass


class BatcherDied(RuntimeError):
    """Rule 7: the batcher's thread ended while this job was waiting or running."""


@dataclass(frozen=True)
class Gather:
    ratio: float = 0.25
    min_s: float = 0.0005
    max_s: float = 0.02


@dataclass
class _Pending(Generic[J, R]):
    member: Hashable
    job: J
    done: threading.Event = field(default_factory=threading.Event)
    result: R | None = None
    error: BaseException | None = None


Run = Callable[[Sequence[J]], Sequence[R | BaseException]]
Pick = Callable[[Sequence[J]], Sequence[int]]


def pick_all(jobs: Sequence[object]) -> Sequence[int]:
    return range(len(jobs))


class StepBatcher(Generic[J, R]):
    def __init__(
        self,
        name: str,
        run: Run[J, R],
        max_batch: int,
        gather: Gather | None = None,
        pick: Pick[J] = pick_all,
        watch_s: float = 0.25,
    ) -> None:
        self.name = name
        self._run = run
        self._pick = pick
        self.max_batch = max_batch
        self.gather = gather or Gather()
        self._lock = threading.Condition()
        self._waiting: list[_Pending[J, R]] = []
        self._last_members: set[Hashable] = set()
        self._last_run_s = 0.0
        self._closed = False
        # Counters for benchmarks and logs: rounds run and jobs in them.
        self.rounds = 0
        self.jobs = 0
        self.watch_s = watch_s
        self.restarts = 0
        self._thread = self._start()

    def _start(self) -> threading.Thread:
        thread = threading.Thread(target=self._loop, name=f"{self.name}-batcher", daemon=True)
        thread.start()
        return thread

    def call(self, member: Hashable, job: J) -> R:
        pending: _Pending[J, R] = _Pending(member, job)
        with self._lock:
            if self._closed:
                raise BatcherClosed(f"{self.name}: closed")
            if not self._thread.is_alive():  # rule 7: a new thread for the calls from now on
                self.restarts += 1
                log.error("%s: the batcher's thread had died; starting another", self.name)
                self._thread = self._start()
            thread = self._thread
            self._waiting.append(pending)
            self._lock.notify_all()
        # Rule 7: wait in slices, and stop waiting on a thread that is gone.
        while not pending.done.wait(self.watch_s):
            if not thread.is_alive() and not pending.done.is_set():
                with self._lock:
                    if pending in self._waiting:
                        self._waiting.remove(pending)
                raise BatcherDied(f"{self.name}: the batcher's thread died")
        if pending.error is not None:
            raise pending.error
        return pending.result  # type: ignore[return-value]

    def leave(self, member: Hashable) -> None:
        """Rule 3."""
        with self._lock:
            self._last_members.discard(member)
            self._lock.notify_all()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, []
            self._lock.notify_all()
        for pending in waiting:
            pending.error = BatcherClosed(f"{self.name}: closed")
            pending.done.set()
        self._thread.join(timeout=5.0)

    def _gathered(self) -> list[_Pending[J, R]] | None:
        """Rules 1 and 2: the round's jobs, or None once closed."""
        with self._lock:
            while not self._waiting and not self._closed:
                self._lock.wait()
            if self._closed:
                return None
            wait = min(
                self.gather.max_s, max(self.gather.min_s, self.gather.ratio * self._last_run_s)
            )
            deadline = time.monotonic() + wait
            while True:
                present = {p.member for p in self._waiting}
                missing = self._last_members - present
                left = deadline - time.monotonic()
                if not missing or left <= 0 or len(self._waiting) >= self.max_batch:
                    break
                self._lock.wait(left)
            jobs = [p.job for p in self._waiting]
            try:
                chosen = sorted(set(self._pick(jobs)))[: self.max_batch] or [0]
            except Exception as error:  # rule 6: those jobs hear it; the batcher goes on
                log.exception("%s: choosing among %d jobs failed", self.name, len(jobs))
                failed, self._waiting = self._waiting, []
                for pending in failed:
                    pending.error = error
                    pending.done.set()
                return []
            taken = [self._waiting[i] for i in chosen]
            keep = set(chosen)
            self._waiting = [p for i, p in enumerate(self._waiting) if i not in keep]
            return taken

    def _loop(self) -> None:
        while True:
            taken = self._gathered()
            if taken is None:
                return
            if not taken:
                continue
            began = time.perf_counter()
            try:
                results = self._run([p.job for p in taken])
                if len(results) != len(taken):
                    raise RuntimeError(f"{len(results)} results for {len(taken)} jobs")
            except BaseException as error:  # rule 4: every caller hears it
                log.exception("%s: a batch of %d failed", self.name, len(taken))
                results = [error] * len(taken)
            elapsed = time.perf_counter() - began
            with self._lock:
                self._last_run_s = elapsed
                self._last_members = {p.member for p in taken}
                self.rounds += 1
                self.jobs += len(taken)
            for pending, result in zip(taken, results, strict=True):
                if isinstance(result, BaseException):
                    pending.error = result
                else:
                    pending.result = result
                pending.done.set()
