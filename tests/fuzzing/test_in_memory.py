"""The in-memory runner finds a broken core (fuzzing/in_memory.py): planted bugs must fail it,
and the real core must pass it. The big run is tests/orchestrator/session/test_core_fuzz.py."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings

from fuzzing.in_memory import MemoryRunner
from fuzzing.inputs import FuzzInput, Script
from fuzzing.scripts import memory_scripts
from orchestrator.protocol import server as se
from orchestrator.protocol.errors import ProtocolError
from orchestrator.session.core import SessionCore, Step

SESSIONS = 40


def _run(runner: MemoryRunner, sessions: int = SESSIONS) -> None:
    @settings(
        max_examples=sessions,
        derandomize=True,
        database=None,
        deadline=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @given(memory_scripts())
    def one(script: Script) -> None:
        runner.run(script)

    one()


def _details(runner: MemoryRunner) -> str:
    return "\n".join(f"{f.invariant}: {f.detail}" for f in runner.stats.failures)


def test_the_real_core_passes() -> None:
    runner = MemoryRunner()
    _run(runner)
    assert not runner.stats.failures, runner.stats.failures[0].report()
    assert runner.stats.inputs >= SESSIONS * 15


def test_semantic_sessions_end_turns_and_preemptive_responses_answer_them() -> None:
    """semantic_vad with preemptive responses, in memory: the stand-in turn model ends turns,
    the preemptive responses are adopted (created after their commit) and every invariant
    holds."""
    vad = {"type": "semantic_vad", "eagerness": "high", "preemptive_response": True}
    update = {"type": "session.update", "session": {"audio": {"input": {"turn_detection": vad}}}}
    setup = FuzzInput("setup", json.dumps(update), "reply", frozenset({"session.updated"}))
    append = {"type": "input_audio_buffer.append", "audio": "AAAA" * 4000}  # 250 ms
    speech = FuzzInput("append", json.dumps(append), "silent")
    runner = MemoryRunner()
    for seed in range(20):
        assert not runner.run(Script((setup, *(speech,) * 15), seed=seed))
    stats = runner.stats
    assert stats.fed["TurnPrediction"], stats.summary()
    assert stats.events_by_type["input_audio_buffer.committed"], stats.summary()
    assert stats.events_by_type["response.created"], stats.summary()


def test_rule7_a_core_that_drops_the_event_id_of_its_errors_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reject = SessionCore.reject

    def careless(self: SessionCore, err: ProtocolError) -> Step:
        return reject(self, msgspec.structs.replace(err, event_id=None))

    monkeypatch.setattr(SessionCore, "reject", careless)
    runner = MemoryRunner()
    _run(runner)
    assert "error does not name the event_id sent" in _details(runner)


def test_a_core_that_half_applies_a_refused_message_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    reject = SessionCore.reject

    def half(self: SessionCore, err: ProtocolError) -> Step:
        applied = self.env.session_updated(self.settings, self.config.model)
        return reject(self, err) + Step(events=(applied,))

    monkeypatch.setattr(SessionCore, "reject", half)
    runner = MemoryRunner()
    _run(runner)
    assert "rejected, yet also applied: ['session.updated']" in _details(runner)


def test_a_core_that_raises_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: SessionCore, event: object) -> None:
        raise KeyError("planted")

    monkeypatch.setattr(SessionCore, "_ack", broken)
    runner = MemoryRunner()
    _run(runner)
    # Whether the generated sessions send a `playback.ack` is the generator's choice (one CI
    # run's sessions sent none); this one does, so the planted fault is reached for sure.
    ack = {"type": "playback.ack", "response_id": "resp_none", "played_ms": 0}
    runner.run(Script((FuzzInput("ack", json.dumps(ack), "error"),)))
    assert "the core never raises" in _details(runner)
    assert "KeyError: 'planted'" in _details(runner)


def test_rule3_a_core_that_never_ends_a_cancelled_response_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = SessionCore.client

    def forgetful(self: SessionCore, event: object) -> Step:
        step = client(self, event)
        kept = tuple(e for e in step.events if not isinstance(e, se.ResponseDone))
        return Step(kept, step.actions)

    monkeypatch.setattr(SessionCore, "client", forgetful)
    runner = MemoryRunner()
    # More sessions than the other planted bugs need: this one shows only where a response is
    # still running when the client cancels it, which the stand-in backend makes rarer.
    _run(runner, sessions=5 * SESSIONS)
    assert "no response.done for" in _details(runner)
