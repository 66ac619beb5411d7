"""A session's timers: the core asks (`ArmTimer` / `CancelTimer`), these only sleep.

Rules:
- The clock is the session's: ms since the actor started (`now_ms`), the same numbers the core
  is given with every input, so a deadline means the same to both.
- One timer per kind: arming a kind replaces (cancels) its earlier timer; `TimerFired` carries
  the arming's token, and the core ignores a stale one.
- `now_ms` rounds up, so a timer that slept until its deadline reads as at or past it.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import trio

from orchestrator.session.actions import ArmTimer
from orchestrator.session.inputs import TimerFired, TimerKind

Post = Callable[[TimerFired], Awaitable[None]]


class Timers:
    def __init__(self, post: Post) -> None:
        self._post = post
        self._t0 = trio.current_time()
        self._scopes: dict[TimerKind, trio.CancelScope] = {}

    def now_ms(self) -> int:
        return math.ceil((trio.current_time() - self._t0) * 1000 - 1e-6)

    def arm(self, nursery: trio.Nursery, timer: ArmTimer) -> None:
        self.cancel(timer.kind)
        scope = self._scopes[timer.kind] = trio.CancelScope()
        wake = self._t0 + timer.deadline_ms / 1000

        async def sleep() -> None:
            with scope:
                await trio.sleep_until(wake)
                await self._post(TimerFired(timer.kind, timer.token))

        nursery.start_soon(sleep)

    def cancel(self, kind: TimerKind) -> None:
        scope = self._scopes.pop(kind, None)
        if scope is not None:
            scope.cancel()
