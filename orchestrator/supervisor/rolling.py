"""A rolling restart of the workers of `turntaker serve --workers N` (SIGHUP to the supervisor):
each worker in turn is stopped and started again, on the code and config now on disk, while
the others carry the service.

Rules (pure: the caller owns the clock, the processes and the probes; events in, actions out):
1. A restart is asked for with every worker's route, in route order, and restarts them one at
   a time in that order (`Began` first). With one worker up there is no other to carry the
   service while it restarts: that is allowed, and said (`Report`).
2. Stopping: a turn begins with `Terminate(route)`: the worker drains (its sessions get their
   closing events; new connections are refused, and nginx passes them on). It has `stop_s`
   to exit (the caller's drain_timeout_s + STOP_MARGIN_S, as at shutdown), then
   `Kill(route)`, and its exit is waited for. A worker already down at its turn is reported
   exited at once by the caller.
3. Its exit is answered with `Spawn(route)` at once: the same port and route id. Neither this
   exit nor the stop before it is a death: not reported as one, no respawn delay; and no
   liveness probe judges a draining worker (`stopping`).
4. The turn ends when the new process answers `/healthz` (`healthy`): `Restarted(route,
   took_s)`, the time since its `Terminate`. The next worker is stopped `settle_s` later, so
   that two are never out at once, even for a moment.
5. A new process that exits before it answers, or has not answered `start_s` after its spawn,
   aborts the restart: `Aborted(why)` (after `Kill(route)` for one still running), and no
   further worker is stopped. Abort, not go on: the new process ran what is on disk now, as
   every later one would, so going on would stop the remaining workers, which still serve
   (on the old code), only to get more that cannot start: a bad deploy would take the whole
   service down. The failed worker is the caller's as any dead one (reported, respawned on
   its backoff schedule); the workers not reached go on running the old code.
6. After the last turn, `Done(took_s)`, the time since the request.
7. A request while a restart runs is ignored, and said (`Report`); it is not queued. Each
   request is one restart that the operator sees begin and end; one sent again by mistake
   does not restart everything twice, and one sent after `Done` or `Aborted` is honoured.
8. Events about a route that is not the current turn's, or that do not fit its phase (a
   probe's answer for the process being stopped), are no concern of this object: no actions.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class RollingPolicy:
    # Drain and exit of the old process (rule 2).
    stop_s: float
    # The new process's first `/healthz` answer (rule 5).
    start_s: float
    # Between a worker's restart and the next one's stop (rule 4).
    settle_s: float = 0.0

    def __post_init__(self) -> None:
        if self.stop_s <= 0 or self.start_s <= 0 or self.settle_s < 0:
            raise ValueError(f"bad rolling restart timings: {self}")


@dataclass(frozen=True)
class Began:
    """A restart of these workers begins (rule 1)."""

    routes: tuple[str, ...]


@dataclass(frozen=True)
class Terminate:
    """SIGTERM to the worker: it drains and exits (rule 2)."""

    route: str


@dataclass(frozen=True)
class Kill:
    """SIGKILL to the worker (rules 2 and 5); `why` is for the log."""

    route: str
    why: str


@dataclass(frozen=True)
class Spawn:
    """Start the worker again on its port and route id, at once (rule 3)."""

    route: str


@dataclass(frozen=True)
class Restarted:
    """The worker's new process answered `/healthz` (rule 4)."""

    route: str
    took_s: float


@dataclass(frozen=True)
class Report:
    """A line for the log (rules 1 and 7)."""

    text: str


@dataclass(frozen=True)
class Aborted:
    """No further worker is restarted (rule 5)."""

    why: str
    took_s: float


@dataclass(frozen=True)
class Done:
    """Every worker was restarted (rule 6)."""

    took_s: float


Action = Began | Terminate | Kill | Spawn | Restarted | Report | Aborted | Done


class Phase(enum.Enum):
    STOPPING = "stopping"  # Terminate sent, the exit awaited
    KILLED = "killed"  # past stop_s: Kill sent, the exit awaited
    STARTING = "starting"  # Spawn done, the first `/healthz` answer awaited
    SETTLING = "settling"  # between a restart and the next stop (rule 4)


class RollingRestart:
    """One supervisor's rolling restarts, one at a time (rule 7)."""

    def __init__(self, policy: RollingPolicy) -> None:
        self._policy = policy
        self._queue: list[str] = []
        self._count = 0
        self._current: str | None = None
        self._phase: Phase | None = None
        self._began_at = 0.0
        self._turn_at = 0.0  # when the current worker's Terminate went out
        self._phase_at = 0.0  # when the current phase began

    @property
    def running(self) -> bool:
        return self._phase is not None

    @property
    def current(self) -> str | None:
        """The route whose turn it is (None between restarts and while settling)."""
        return self._current

    @property
    def phase(self) -> Phase | None:
        return self._phase

    def stopping(self, route: str) -> bool:
        """Whether `route` is being stopped by the restart: its exit is no death and no
        liveness probe is to judge it (rule 3)."""
        return route == self._current and self._phase in (Phase.STOPPING, Phase.KILLED)

    def requested(self, now: float, routes: Sequence[str], up: int) -> list[Action]:
        """A restart of `routes` (in that order; `up` of them running) is asked for (rules 1
        and 7)."""
        if self.running:
            done = self._count - len(self._queue) - (self._current is not None)
            return [
                Report(
                    f"rolling restart already under way ({done} of {self._count} workers "
                    "restarted): this request is ignored; send it again after it ends"
                )
            ]
        if not routes:
            raise ValueError("a rolling restart needs at least one worker")
        self._queue = list(routes)
        self._count = len(routes)
        self._began_at = now
        actions: list[Action] = [Began(tuple(routes))]
        if up < 2:
            actions.append(
                Report(
                    f"only {up} worker up: the service is down while it restarts"
                    if up == 1
                    else "no worker up: each is started at its turn"
                )
            )
        return actions + self._next_turn(now)

    def exited(self, route: str, now: float) -> list[Action]:
        """The current worker's process exited (rules 3 and 5)."""
        if route != self._current:
            return []
        if self._phase in (Phase.STOPPING, Phase.KILLED):
            self._phase, self._phase_at = Phase.STARTING, now
            return [Spawn(route)]
        if self._phase is Phase.STARTING:
            return self._abort(now, f"the new worker {route} exited before it answered /healthz")
        return []

    def healthy(self, route: str, now: float) -> list[Action]:
        """The current worker's process answered `/healthz` (rule 4); an answer of the old
        process, still draining, is none (rule 8)."""
        if route != self._current or self._phase is not Phase.STARTING:
            return []
        actions: list[Action] = [Restarted(route, now - self._turn_at)]
        self._current = None
        if not self._queue:
            return actions + self._finish(now)
        self._phase, self._phase_at = Phase.SETTLING, now
        # Without a settle the next turn begins at once.
        return actions + self.tick(now)

    def tick(self, now: float) -> list[Action]:
        """The deadlines (rules 2, 4 and 5)."""
        elapsed = now - self._phase_at
        if self._phase is Phase.STOPPING and elapsed >= self._policy.stop_s:
            assert self._current is not None
            self._phase, self._phase_at = Phase.KILLED, now
            why = f"did not stop within {self._policy.stop_s:g} s"
            return [Kill(self._current, why)]
        if self._phase is Phase.STARTING and elapsed >= self._policy.start_s:
            route = self._current
            assert route is not None
            why = (
                f"the new worker {route} did not answer /healthz within {self._policy.start_s:g} s"
            )
            return [Kill(route, why), *self._abort(now, why)]
        if self._phase is Phase.SETTLING and elapsed >= self._policy.settle_s:
            return self._next_turn(now)
        return []

    def _next_turn(self, now: float) -> list[Action]:
        self._current = self._queue.pop(0)
        self._phase = Phase.STOPPING
        self._turn_at = self._phase_at = now
        return [Terminate(self._current)]

    def _abort(self, now: float, why: str) -> list[Action]:
        left = len(self._queue)
        self._reset()
        if left:
            why += f"; {left} worker(s) not restarted (still on the old code)"
        return [Aborted(why, now - self._began_at)]

    def _finish(self, now: float) -> list[Action]:
        self._reset()
        return [Done(now - self._began_at)]

    def _reset(self) -> None:
        self._queue = []
        self._current = None
        self._phase = None
