"""SessionMetrics reads a session's steps: the echo verdicts among its notes are counted by
the rule that held each chunk, and handed to a benchmark's verdict sink."""

from __future__ import annotations

from orchestrator.service.metrics import Metrics
from orchestrator.service.sessions.session_metrics import SessionMetrics
from orchestrator.session.core_types import Step
from orchestrator.session.echo.verdict import EchoRule, EchoVerdict


def _verdict(held_by: tuple[EchoRule, ...], heard: float) -> EchoVerdict:
    return EchoVerdict(
        chunk_end_ms=3200,
        probability=0.7,
        heard=heard,
        since_played_ms=0,
        excess_db=2.0,
        microphone_db=-20.0,
        cleaned_db=-50.0,
        echo_db=-22.0,
        trained=True,
        held_by=held_by,
    )


def test_echo_verdicts_are_counted_by_the_rule_that_held_each_chunk() -> None:
    seen: list[EchoVerdict] = []
    metrics = Metrics(verdict_sink=seen.append)
    verdicts = (_verdict((7, 8, 10), 0.41), _verdict((10,), 0.49), _verdict((), 0.9))
    SessionMetrics(metrics).noted(Step(notes=verdicts))

    def count(rule: str) -> float | None:
        return metrics.registry.get_sample_value("turntaker_echo_chunks_total", {"held_by": rule})

    assert (count("7"), count("8"), count("10"), count("none")) == (1.0, 1.0, 2.0, 1.0)
    assert seen == list(verdicts)
