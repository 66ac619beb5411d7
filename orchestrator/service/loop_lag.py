"""Event-loop lag: how late a task that asked to wake up actually wakes.

Every realtime duty of the server (the VAD clock, barge-in, audio forwarding) waits behind
whatever else the one Trio thread is doing, so lag is the first sign of overload. A probe task
sleeps a fixed period and records the overshoot. A period, not a busy loop: an idle server's
probe costs one wake-up per period.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

# Given each lag sample in seconds (the Prometheus histogram; a benchmark's recorder).
LagSink = Callable[[float], None]


async def probe_loop_lag(interval_s: float, sinks: list[LagSink]) -> None:
    if interval_s <= 0:
        raise ValueError("the lag probe's interval must be positive")
    while True:
        due = trio.current_time() + interval_s
        await trio.sleep_until(due)
        lag = max(0.0, trio.current_time() - due)
        for sink in sinks:
            sink(lag)
