"""Whether a running worker of `turntaker serve --workers N` is alive or hung.

A stopped or wedged worker keeps its port: the kernel still accepts connections for it, so
nginx hands it new sessions that never get an answer, and it never dies by itself to be
respawned. The supervisor asks each worker's `/healthz` (answered by the worker's event loop,
not by Triton) and kills one that stopped answering; its death is then met as any other
(respawn.py).

Rules (pure: the caller owns the clock and the probes; times and answers in, verdicts out):
1. A worker is up once it has answered `/healthz` once since its start. Until then it is
   starting (importing, checking Triton): a failed probe is no miss, it is asked again soon,
   and a start that has not answered within `start_s` is a hung one.
2. Once up, it is probed every `interval_s`, one probe at a time; a probe that fails or does
   not answer within `timeout_s` (the caller's HTTP timeout) is a miss, and `misses` in a row
   make it hung. An answer clears the count.
3. A hung worker is killed by the caller, and its next start begins a fresh `Liveness`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LivenessPolicy:
    interval_s: float = 2.0
    # A busy worker answers late, not never (its loop lags ~70 ms at p99 past its real-time
    # limit, docs/benchmarks.md "Load"): killing it would end every session it holds, so a
    # miss is two seconds of silence, and it takes three in a row (about 12 s).
    timeout_s: float = 2.0
    misses: int = 3
    start_s: float = 60.0


class Liveness:
    """One worker's lifetime as its probes saw it."""

    def __init__(self, policy: LivenessPolicy, started_at: float) -> None:
        self._policy = policy
        self._started_at = started_at
        self._up = False
        self._in_flight = False
        self._next_at = started_at
        self.missed = 0

    @property
    def up(self) -> bool:
        return self._up

    def probe_due(self, now: float) -> bool:
        """Whether to send a probe now (the caller then sends exactly one)."""
        if self._in_flight or now < self._next_at:
            return False
        self._in_flight = True
        return True

    def answered(self, now: float, ok: bool) -> bool:
        """A probe's outcome (rule 2); whether the worker is now hung."""
        self._in_flight = False
        if ok:
            self._up = True
            self.missed = 0
            self._next_at = now + self._policy.interval_s
            return False
        if not self._up:
            # Rule 1: still starting; ask again soon, hung only past start_s.
            self._next_at = now + min(self._policy.interval_s, 0.25)
            return self.start_overdue(now)
        self.missed += 1
        self._next_at = now + self._policy.interval_s
        return self.missed >= self._policy.misses

    def start_overdue(self, now: float) -> bool:
        return not self._up and now - self._started_at > self._policy.start_s
