"""The respawn schedule of `turntaker serve --workers N` (orchestrator/supervisor/respawn.py):
times in, delays out; each test names the rule it guards."""

from __future__ import annotations

import pytest

from orchestrator.service.config import ServiceConfig
from orchestrator.supervisor.respawn import RespawnPolicy, RespawnSchedule

POLICY = RespawnPolicy(first_s=1.0, max_s=8.0, stable_s=60.0)


def test_rule_1_a_worker_that_ran_long_is_respawned_after_the_first_delay() -> None:
    schedule = RespawnSchedule(POLICY, started_at=0.0)
    assert schedule.due_at is None and not schedule.due(1e9)
    assert schedule.died(now=600.0) == 1.0
    assert schedule.due_at == 601.0
    assert not schedule.due(600.9)
    assert schedule.due(601.0)
    schedule.started(now=601.0)
    assert schedule.due_at is None and not schedule.due(1e9)


def test_rule_1_quick_deaths_double_the_delay_up_to_the_cap() -> None:
    schedule = RespawnSchedule(POLICY, started_at=0.0)
    now, delays = 0.0, []
    for _ in range(6):
        now += 2.0  # dies two seconds after each start: never stable
        delay = schedule.died(now)
        assert delay is not None
        delays.append(delay)
        now += delay
        schedule.started(now)
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert schedule.deaths == 6


def test_rule_1_a_worker_that_stayed_up_starts_the_backoff_over() -> None:
    schedule = RespawnSchedule(POLICY, started_at=0.0)
    for now in (1.0, 3.0, 8.0):
        delay = schedule.died(now)
        assert delay is not None
        schedule.started(now + delay)
    # Up for a minute since its last start: the next death is met at once again.
    assert schedule.died(now=500.0) == 1.0
    schedule.started(501.0)
    assert schedule.died(now=502.0) == 2.0


def test_rule_3_a_zero_delay_turns_respawning_off() -> None:
    schedule = RespawnSchedule(RespawnPolicy(first_s=0.0), started_at=0.0)
    assert schedule.died(now=100.0) is None
    assert schedule.due_at is None and not schedule.due(1e9)
    assert schedule.deaths == 1


def test_the_configured_delay_is_bounded() -> None:
    assert ServiceConfig(worker_respawn_s=0).worker_respawn_s == 0
    with pytest.raises(ValueError, match="worker_respawn_s"):
        ServiceConfig(worker_respawn_s=-1)
    with pytest.raises(ValueError, match="worker_respawn_s"):
        ServiceConfig(worker_respawn_s=31)
    with pytest.raises(ValueError, match="max_s"):
        RespawnPolicy(first_s=10.0, max_s=5.0)
