"""The batcher's rules (batcher.py) with plain jobs: which jobs share a round, who hears what."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest

from turntaker_models.omni.batcher import BatcherClosed, BatcherDied, Gather, StepBatcher


class Recorder:
    def __init__(self) -> None:
        self.rounds: list[list[int]] = []

    def run(self, jobs: Sequence[int]) -> list[int | BaseException]:
        self.rounds.append(list(jobs))
        time.sleep(0.002)  # a forward takes time: the others come back meanwhile
        return [ValueError(f"bad {job}") if job < 0 else job * 10 for job in jobs]


def lockstep(batcher: StepBatcher[int, int], members: int, steps: int) -> list[list[int]]:
    results: list[list[int]] = [[] for _ in range(members)]

    def one(member: int) -> None:
        for step in range(steps):
            results[member].append(batcher.call(member, member * 1000 + step))
        batcher.leave(member)

    threads = [threading.Thread(target=one, args=(m,)) for m in range(members)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def _callers(batcher: StepBatcher[int, int], jobs: Sequence[int]) -> dict[int, object]:
    out: dict[int, object] = {}

    def call(job: int) -> None:
        try:
            out[job] = batcher.call(job, job)
        except Exception as error:
            out[job] = error

    threads = [threading.Thread(target=call, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert not any(thread.is_alive() for thread in threads), "a caller is still blocked"
    return out


def test_rule1_streams_that_step_together_share_rounds() -> None:
    recorder = Recorder()
    batcher = StepBatcher("test", recorder.run, max_batch=8, gather=Gather(1.0, 0.01, 0.05))
    try:
        results = lockstep(batcher, 4, 20)
    finally:
        batcher.close()
    assert results == [[(m * 1000 + s) * 10 for s in range(20)] for m in range(4)]
    assert batcher.jobs == 80
    assert batcher.rounds <= 30, f"rule 1: 80 jobs of 4 streams took {batcher.rounds} rounds"


def test_rule2_pick_defers_jobs_to_later_rounds_first_come_first_served() -> None:
    recorder = Recorder()
    started = threading.Event()

    def run(jobs: Sequence[int]) -> list[int | BaseException]:
        started.set()
        return recorder.run(jobs)

    # Odd jobs are "prefills": one per round.
    def pick(jobs: Sequence[int]) -> list[int]:
        odd = [i for i, job in enumerate(jobs) if job % 2]
        return [i for i, job in enumerate(jobs) if not job % 2] + odd[:1]

    batcher = StepBatcher("test", run, max_batch=8, gather=Gather(0, 0.05, 0.05), pick=pick)
    out: dict[int, int] = {}

    def call(job: int) -> None:
        out[job] = batcher.call(job, job)

    try:
        threads = [threading.Thread(target=call, args=(job,)) for job in (1, 3, 5, 2, 4)]
        for thread in threads:
            thread.start()
            time.sleep(0.001)
        for thread in threads:
            thread.join(10)
    finally:
        batcher.close()
    assert out == {1: 10, 3: 30, 5: 50, 2: 20, 4: 40}
    for jobs in recorder.rounds:
        assert sum(job % 2 for job in jobs) <= 1, f"rule 2: two prefills in one round {jobs}"
    prefills = [job for jobs in recorder.rounds for job in jobs if job % 2]
    assert prefills == [1, 3, 5], "rule 2: first come first served"


def test_rule3_a_stream_that_left_is_not_waited_for() -> None:
    recorder = Recorder()
    # A long gather: a round that waited for the stream that left would take a second.
    batcher = StepBatcher("test", recorder.run, max_batch=8, gather=Gather(0, 1.0, 1.0))
    try:
        batcher.call("a", 1)  # "a" is in the last round: the next round would wait for it
        began = time.monotonic()
        batcher.leave("a")
        assert batcher.call("b", 2) == 20
        assert time.monotonic() - began < 0.5, "rule 3: a round waited for streams that left"
    finally:
        batcher.close()


def test_rule4_an_error_reaches_its_own_caller_only_and_close_refuses_the_rest() -> None:
    recorder = Recorder()
    batcher = StepBatcher("test", recorder.run, max_batch=8, gather=Gather(0, 0.05, 0.05))
    out = _callers(batcher, [-1, 2])
    assert isinstance(out[-1], ValueError) and out[2] == 20
    batcher.close()
    with pytest.raises(BatcherClosed):
        batcher.call(9, 9)


def test_rule4_a_batch_that_raises_fails_every_caller_in_it() -> None:
    def run(jobs: Sequence[int]) -> list[int | BaseException]:
        raise RuntimeError("the forward failed")

    batcher = StepBatcher("test", run, max_batch=8)
    try:
        with pytest.raises(RuntimeError, match="the forward failed"):
            batcher.call(1, 1)
    finally:
        batcher.close()


def test_rule6_a_pick_that_raises_fails_its_jobs_within_a_second_and_the_batcher_goes_on() -> None:
    # Was: `pick` ran outside the batch's `try`; its error killed the batcher's thread and
    # every stream blocked in `call` forever.
    planted = [True]

    def pick(jobs: Sequence[int]) -> Sequence[int]:
        if planted[0]:
            planted[0] = False
            raise KeyError("a bug in choosing")
        return range(len(jobs))

    recorder = Recorder()
    batcher = StepBatcher(
        "test", recorder.run, max_batch=8, gather=Gather(0, 0.05, 0.05), pick=pick
    )
    try:
        began = time.monotonic()
        out = _callers(batcher, [1])
        assert isinstance(out[1], KeyError), out
        assert time.monotonic() - began < 1.0
        assert _callers(batcher, [2]) == {2: 20}, "rule 6: the batcher serves the next job"
    finally:
        batcher.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_rule7_a_dead_batcher_fails_its_callers_promptly_and_the_next_call_restarts_it() -> None:
    # A thread that dies outside every `try` (here a SystemExit from `pick`, which rule 6 does
    # not catch): its callers hear BatcherDied within `watch_s`, the next call is served by a
    # new thread.
    killed = [False]

    def pick(jobs: Sequence[int]) -> Sequence[int]:
        if not killed[0]:
            killed[0] = True
            raise SystemExit("the thread ends")
        return range(len(jobs))

    recorder = Recorder()
    batcher = StepBatcher(
        "test", recorder.run, max_batch=8, gather=Gather(0, 0.05, 0.05), pick=pick, watch_s=0.05
    )
    try:
        began = time.monotonic()
        out = _callers(batcher, [1])
        assert isinstance(out[1], BatcherDied), out
        assert time.monotonic() - began < 1.0
        assert _callers(batcher, [3]) == {3: 30}, "rule 7: the next call is served"
        assert batcher.restarts == 1
    finally:
        batcher.close()
