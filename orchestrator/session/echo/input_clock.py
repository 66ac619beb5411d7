"""Where the client's input stands at a moment of the server's clock.

The echo's reference must sit where the client plays each delta: it plays a delta as it gets
it, at the same moment as it captures some sample of its input. The server sends a delta at a
moment of its own clock; how many input samples the session has *processed* by then is no
measure of that sample: appends wait in the session's mailbox and on the network for a
varying while (tens to hundreds of ms when the machine is busy), so a reference placed by them
moves against the echo at every hiccup (measured: 300 +/- 40 ms in one bench session), and a
canceller that has to learn the echo path again each time leaves it in.

Rules:
1. Each append handled says: by server time `now_ms` the input had reached sample `end`. The
   client captured that sample at least the append's own waiting earlier, so
   `now_ms - end_ms` is the input's lag plus that wait; its smallest value over the last
   `WINDOW_MS` is the lag itself (the append that waited least).
2. `position(now_ms)` is the input sample the client captures at server time `now_ms`: now
   less that lag, in samples. None before any append.
3. A sliding minimum: the two clocks drift apart (ppm over hours) and the network's own
   latency changes; the window lets the lag follow them. Bounded: a monotonic deque holds at
   most one entry per append in the window.
Pure: numbers in and out; the caller's clock.
"""

from __future__ import annotations

from collections import deque

__all__ = ["InputClock"]

WINDOW_MS = 10_000


class InputClock:
    def __init__(self, rate: int, window_ms: int = WINDOW_MS) -> None:
        self._rate = rate
        self._window_ms = window_ms
        # (now_ms, lag_us): lags increasing from the left, the sliding minimum first.
        self._lags: deque[tuple[int, int]] = deque()

    def heard(self, end: int, now_ms: int) -> None:
        """Rule 1: by `now_ms` the input had reached sample `end`."""
        lag_us = now_ms * 1000 - end * 1_000_000 // self._rate
        while self._lags and self._lags[-1][1] >= lag_us:
            self._lags.pop()
        self._lags.append((now_ms, lag_us))
        while self._lags[0][0] < now_ms - self._window_ms:
            self._lags.popleft()

    def position(self, now_ms: int) -> int | None:
        """Rule 2."""
        if not self._lags:
            return None
        lag_us = self._lags[0][1]
        return (now_ms * 1000 - lag_us) * self._rate // 1_000_000
