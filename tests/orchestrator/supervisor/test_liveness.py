"""How the `--workers` supervisor tells a running worker from a hung one
(orchestrator/supervisor/liveness.py); each test names the rule it guards."""

from __future__ import annotations

from orchestrator.supervisor.liveness import Liveness, LivenessPolicy

POLICY = LivenessPolicy(interval_s=2.0, timeout_s=1.0, misses=3, start_s=60.0)


def test_rule_1_a_starting_worker_is_not_hung_for_failing_probes() -> None:
    live = Liveness(POLICY, started_at=0.0)
    now = 0.0
    while now < 59.0:
        assert live.probe_due(now)
        assert not live.answered(now + 0.1, ok=False)
        now += 0.5
    assert not live.up and live.missed == 0


def test_rule_1_a_start_that_never_answers_is_hung() -> None:
    live = Liveness(POLICY, started_at=0.0)
    assert not live.start_overdue(60.0)
    assert live.start_overdue(60.5)
    assert live.probe_due(61.0)
    assert live.answered(61.2, ok=False)


def test_rule_2_once_up_it_is_probed_every_interval_one_at_a_time() -> None:
    live = Liveness(POLICY, started_at=0.0)
    assert live.probe_due(5.0)
    assert not live.probe_due(5.1), "one probe in flight at a time"
    assert not live.answered(5.2, ok=True)
    assert live.up
    assert not live.probe_due(7.1)
    assert live.probe_due(7.2)


def test_rule_2_misses_in_a_row_make_it_hung_and_an_answer_clears_them() -> None:
    live = Liveness(POLICY, started_at=0.0)
    assert live.probe_due(1.0) and not live.answered(1.0, ok=True)
    verdicts = []
    now = 3.0
    for ok in (False, False, True, False, False, False):
        assert live.probe_due(now)
        now += 1.0  # the probe's timeout
        verdicts.append(live.answered(now, ok=ok))
        now += POLICY.interval_s
    assert verdicts == [False, False, False, False, False, True]
    assert live.missed == 3
    assert not live.start_overdue(1e9), "an up worker is judged by its misses alone"
