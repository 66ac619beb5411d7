"""echo/input_clock.py: where the client's input stands at a server time (rules named)."""

from __future__ import annotations

from orchestrator.session.echo.input_clock import WINDOW_MS, InputClock

RATE = 24000
MS = RATE // 1000


def test_rule2_nothing_known_before_the_first_append() -> None:
    assert InputClock(RATE).position(1000) is None


def test_rules_1_2_a_steady_lag_puts_the_client_that_far_ahead_of_the_server() -> None:
    clock = InputClock(RATE)
    for n in range(1, 51):  # 20 ms appends, each handled 30 ms after it was captured
        clock.heard(n * 20 * MS, n * 20 + 30)
    assert clock.position(1030) == 1000 * MS
    assert clock.position(1045) == 1015 * MS, "between appends the client's clock runs on"


def test_rule1_appends_that_waited_do_not_move_it() -> None:
    clock = InputClock(RATE)
    for n in range(1, 51):
        clock.heard(n * 20 * MS, n * 20 + 30)
    for n in range(51, 61):  # a backlog: these waited 200 ms more in the mailbox
        clock.heard(n * 20 * MS, n * 20 + 230)
    assert clock.position(1430) == 1400 * MS, "the least lag stands"


def test_rule3_a_lasting_change_of_lag_is_followed_after_the_window() -> None:
    clock = InputClock(RATE)
    clock.heard(20 * MS, 30)
    for n in range(2, WINDOW_MS // 20 + 100):
        clock.heard(n * 20 * MS, n * 20 + 80)  # the network got 50 ms slower for good
    now = (WINDOW_MS // 20 + 99) * 20 + 80
    assert clock.position(now) == (now - 80) * MS


def test_rule3_bounded_by_the_appends_in_the_window() -> None:
    clock = InputClock(RATE)
    for n in range(1, 5001):
        clock.heard(n * 20 * MS, n * 20 + 30 + (n % 7))
    assert len(clock._lags) <= WINDOW_MS // 20 + 1
