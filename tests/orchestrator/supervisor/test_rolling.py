"""The rolling restart of `turntaker serve --workers N` (orchestrator/supervisor/rolling.py):
events in, actions out, plain numbers for the clock; each test names the rule it guards."""

from __future__ import annotations

import signal

import pytest

from orchestrator.supervisor.processes import Signals
from orchestrator.supervisor.rolling import (
    Aborted,
    Action,
    Began,
    Done,
    Kill,
    Phase,
    Report,
    Restarted,
    RollingPolicy,
    RollingRestart,
    Spawn,
    Terminate,
)

POLICY = RollingPolicy(stop_s=10.0, start_s=60.0, settle_s=5.0)
ROUTES = ("w0", "w1", "w2")


def _restart(now: float = 100.0, routes: tuple[str, ...] = ROUTES) -> RollingRestart:
    rolling = RollingRestart(POLICY)
    actions = rolling.requested(now, routes, up=len(routes))
    assert actions[0] == Began(routes) and actions[-1] == Terminate(routes[0])
    return rolling


def _turn(rolling: RollingRestart, route: str, now: float) -> list[Action]:
    """The current worker exits at `now` and its new process answers a second later."""
    assert rolling.exited(route, now) == [Spawn(route)]
    return rolling.healthy(route, now + 1.0)


def test_rule_1_every_worker_is_restarted_one_at_a_time_in_route_order() -> None:
    rolling = _restart(now=0.0)
    stopped, restarted = ["w0"], []
    now = 0.0
    while rolling.running:
        route = rolling.current
        assert route is not None and rolling.stopping(route)
        assert [r for r in ROUTES if rolling.stopping(r)] == [route], "one at a time"
        for action in _turn(rolling, route, now + 2.0):
            assert isinstance(action, Restarted | Done)
            if isinstance(action, Restarted):
                restarted.append(action.route)
        now += 3.0 + POLICY.settle_s
        for action in rolling.tick(now):
            assert isinstance(action, Terminate)
            stopped.append(action.route)
    assert stopped == restarted == list(ROUTES)


def test_rule_1_a_single_worker_up_is_restarted_and_the_outage_is_said() -> None:
    rolling = RollingRestart(POLICY)
    actions = rolling.requested(0.0, ("w0", "w1"), up=1)
    assert actions[0] == Began(("w0", "w1")) and actions[-1] == Terminate("w0")
    (report,) = [a for a in actions if isinstance(a, Report)]
    assert "service is down while it restarts" in report.text
    with pytest.raises(ValueError):
        RollingRestart(POLICY).requested(0.0, (), up=0)


def test_rule_2_a_worker_that_does_not_stop_in_time_is_killed_and_its_exit_awaited() -> None:
    rolling = _restart(now=0.0)
    assert rolling.tick(9.9) == []
    (kill,) = rolling.tick(10.0)
    assert isinstance(kill, Kill) and kill.route == "w0" and "10 s" in kill.why
    assert rolling.phase is Phase.KILLED and rolling.stopping("w0")
    assert rolling.tick(1000.0) == [], "killed once; then its exit is waited for"
    assert rolling.exited("w0", 10.2) == [Spawn("w0")]


def test_rule_2_a_worker_already_down_at_its_turn_is_started_at_once() -> None:
    rolling = RollingRestart(POLICY)
    rolling.requested(0.0, ROUTES, up=2)
    # The caller finds w0 down when told to stop it, and says it exited.
    assert rolling.exited("w0", 0.0) == [Spawn("w0")]
    assert rolling.phase is Phase.STARTING and not rolling.stopping("w0")


def test_rule_3_the_exit_of_a_stopped_worker_is_answered_with_a_spawn_at_once() -> None:
    rolling = _restart(now=0.0)
    assert rolling.stopping("w0")
    assert rolling.exited("w0", 3.0) == [Spawn("w0")]
    assert rolling.phase is Phase.STARTING
    # From its spawn on it is an ordinary worker to the caller: probed, its exit a death.
    assert not rolling.stopping("w0")


def test_rule_4_a_turn_ends_at_the_first_healthz_answer_and_the_next_waits_the_settle() -> None:
    rolling = _restart(now=0.0)
    rolling.exited("w0", 4.0)
    assert rolling.healthy("w0", 7.5) == [Restarted("w0", 7.5)], "timed from its Terminate"
    assert rolling.phase is Phase.SETTLING and rolling.current is None
    assert rolling.tick(12.4) == []
    assert rolling.tick(12.5) == [Terminate("w1")]


def test_rule_4_without_a_settle_the_next_worker_is_stopped_in_the_same_call() -> None:
    rolling = RollingRestart(RollingPolicy(stop_s=10.0, start_s=60.0))
    rolling.requested(0.0, ("w0", "w1"), up=2)
    rolling.exited("w0", 1.0)
    assert rolling.healthy("w0", 2.0) == [Restarted("w0", 2.0), Terminate("w1")]


def test_rule_5_a_new_process_that_exits_at_its_start_aborts_the_rest() -> None:
    rolling = _restart(now=0.0)
    rolling.exited("w0", 2.0)
    (aborted,) = rolling.exited("w0", 5.0)
    assert isinstance(aborted, Aborted)
    assert "w0 exited before it answered" in aborted.why
    assert "2 worker(s) not restarted" in aborted.why
    assert aborted.took_s == 5.0
    assert not rolling.running
    assert rolling.tick(1000.0) == [], "w1 and w2 are never stopped"


def test_rule_5_a_new_process_that_never_answers_is_killed_and_aborts_the_rest() -> None:
    rolling = _restart(now=0.0)
    rolling.exited("w0", 2.0)
    assert rolling.tick(61.9) == []
    kill, aborted = rolling.tick(62.0)
    assert isinstance(kill, Kill) and kill.route == "w0" and "60 s" in kill.why
    assert isinstance(aborted, Aborted) and "not restarted" in aborted.why
    assert not rolling.running
    # Its death that follows is the caller's (respawn schedule), none of this object's.
    assert rolling.exited("w0", 62.1) == []


def test_rule_5_an_abort_at_the_last_worker_names_none_left() -> None:
    rolling = _restart(now=0.0, routes=("w0",))
    rolling.exited("w0", 1.0)
    (aborted,) = rolling.exited("w0", 2.0)
    assert isinstance(aborted, Aborted) and "not restarted" not in aborted.why


def test_rule_6_done_after_the_last_turn_timed_from_the_request() -> None:
    rolling = _restart(now=100.0, routes=("w0", "w1"))
    _turn(rolling, "w0", 102.0)
    assert rolling.tick(108.0) == [Terminate("w1")]
    assert rolling.exited("w1", 110.0) == [Spawn("w1")]
    assert rolling.healthy("w1", 111.5) == [Restarted("w1", 3.5), Done(11.5)]
    assert not rolling.running and rolling.current is None


def test_rule_7_a_request_during_a_restart_is_ignored_and_said() -> None:
    rolling = _restart(now=0.0)
    (report,) = rolling.requested(1.0, ROUTES, up=3)
    assert isinstance(report, Report) and "ignored" in report.text
    assert "0 of 3" in report.text
    assert rolling.current == "w0" and rolling.phase is Phase.STOPPING
    _turn(rolling, "w0", 2.0)
    (report,) = rolling.requested(4.0, ROUTES, up=3)  # while settling
    assert isinstance(report, Report) and "1 of 3" in report.text


def test_rule_7_a_request_after_the_end_is_honoured() -> None:
    rolling = _restart(now=0.0, routes=("w0",))
    assert _turn(rolling, "w0", 1.0) == [Restarted("w0", 2.0), Done(2.0)]
    assert rolling.requested(50.0, ("w0",), up=1)[-1] == Terminate("w0")
    rolling.exited("w0", 51.0)
    rolling.exited("w0", 52.0)  # aborted
    assert rolling.requested(60.0, ("w0",), up=0)[-1] == Terminate("w0")


def test_rule_8_events_of_other_routes_or_phases_do_nothing() -> None:
    rolling = _restart(now=0.0)
    assert rolling.exited("w1", 1.0) == [], "w1's own death is the caller's"
    assert rolling.healthy("w1", 1.0) == []
    assert rolling.healthy("w0", 1.0) == [], "the old process, draining, still answers"
    assert rolling.phase is Phase.STOPPING
    idle = RollingRestart(POLICY)
    assert idle.exited("w0", 1.0) == [] and idle.healthy("w0", 1.0) == []
    assert idle.tick(1e9) == [] and not idle.running


def test_the_timings_are_checked() -> None:
    with pytest.raises(ValueError):
        RollingPolicy(stop_s=0.0, start_s=60.0)
    with pytest.raises(ValueError):
        RollingPolicy(stop_s=1.0, start_s=60.0, settle_s=-1.0)


def test_sighup_asks_for_a_restart_and_is_no_stop_signal() -> None:
    before = signal.getsignal(signal.SIGHUP)
    with Signals() as signals:
        signal.raise_signal(signal.SIGHUP)
        signal.raise_signal(signal.SIGHUP)
        assert signals.received is None
        assert signals.take_hangups() == 2
        assert signals.take_hangups() == 0
    assert signal.getsignal(signal.SIGHUP) == before
