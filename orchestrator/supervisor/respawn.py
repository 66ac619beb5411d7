"""When the supervisor of `turntaker serve --workers N` starts a dead worker again.

Rules (pure: the caller owns the clock and the processes; times in, times out):
1. A worker that dies is started again, on its own port with its own route id, after a
   delay: `first_s` for a worker that had run `stable_s` or longer (a crash now and then is
   met at once), doubled for every death that comes sooner than that after its last start,
   up to `max_s` (a worker that cannot stay up is retried at a bounded rate, for ever: the
   cause, a full disk or a Triton restarting, may pass).
2. A respawned worker carries no session of the old process: a resume of one of those lands
   on it (or on a backup while it is down) and gets `session_resume_failed` and a fresh
   session, as on any worker that does not know the session.
3. `first_s <= 0` turns respawning off: a dead worker stays dead and nginx routes around it.
"""

from __future__ import annotations

from dataclasses import dataclass

# A worker that ran this long before dying is called stable: its next delay is `first_s`.
STABLE_S = 60.0


@dataclass(frozen=True)
class RespawnPolicy:
    first_s: float = 1.0
    max_s: float = 30.0
    stable_s: float = STABLE_S

    def __post_init__(self) -> None:
        if self.max_s < self.first_s:
            raise ValueError(f"max_s ({self.max_s}) is below first_s ({self.first_s})")

    @property
    def enabled(self) -> bool:
        return self.first_s > 0


class RespawnSchedule:
    """One worker's lifetimes: when it (re)started, and when it is due to start again."""

    def __init__(self, policy: RespawnPolicy, started_at: float) -> None:
        self._policy = policy
        self._started_at = started_at
        self._delay_s = policy.first_s
        self._due_at: float | None = None
        self.deaths = 0

    @property
    def due_at(self) -> float | None:
        """When the dead worker is to start again; None while it runs (or never, rule 3)."""
        return self._due_at

    def died(self, now: float) -> float | None:
        """Rule 1: the delay before the next start (None: respawning is off)."""
        self.deaths += 1
        if not self._policy.enabled:
            return None
        if now - self._started_at >= self._policy.stable_s:
            self._delay_s = self._policy.first_s
        delay = self._delay_s
        self._delay_s = min(self._delay_s * 2, self._policy.max_s)
        self._due_at = now + delay
        return delay

    def due(self, now: float) -> bool:
        return self._due_at is not None and now >= self._due_at

    def started(self, now: float) -> None:
        self._started_at = now
        self._due_at = None
