"""The in-memory runner's stand-in I/O answers only what the core asked, as the real one can
(fuzzing/stand_ins.py)."""

from __future__ import annotations

import random

import numpy as np

from fuzzing.stand_ins import StandIns
from orchestrator.session.actions import (
    ArmTimer,
    CancelBackend,
    CancelTimer,
    DetectSpeech,
    InferenceRequest,
    PredictTurn,
    StartBackend,
    Transcribe,
)
from orchestrator.session.inputs import (
    BackendAudio,
    BackendDone,
    BackendEvent,
    BackendFailed,
    BackendText,
    SpeechProbabilities,
    TimerFired,
    TranscriptReady,
    TurnPrediction,
    VadDown,
)

REQUEST = InferenceRequest("", (), ("audio",), 4)
CHUNK = np.zeros(512, np.float32)


def _start(rid: str, seq: int = 1) -> StartBackend:
    return StartBackend(rid, seq, REQUEST)


def test_each_backend_stream_is_its_responses_chunks_then_at_most_one_end() -> None:
    for seed in range(50):
        io = StandIns(random.Random(seed))
        io.carry_out([_start("resp_1", 7)])
        got = list(io.drain())
        assert all(
            isinstance(e, BackendAudio | BackendText | BackendDone | BackendFailed) for e in got
        )
        backend = [e for e in got if not isinstance(e, TimerFired)]
        assert all(e.response_id == "resp_1" and e.seq == 7 for e in backend)
        ends = [e for e in backend if isinstance(e, BackendDone | BackendFailed)]
        assert len(ends) <= 1 and (not ends or backend[-1] is ends[0])


def test_rule2_a_cancelled_stream_leaves_at_most_two_chunks_in_flight() -> None:
    late_seen = 0
    for seed in range(50):
        io = StandIns(random.Random(seed))
        io.carry_out([_start("resp_1"), CancelBackend("resp_1", 1)])
        late: list[BackendEvent] = [e for e in io.drain() if not isinstance(e, TimerFired)]
        assert len(late) <= 2
        late_seen += len(late)
    assert late_seen, "late output of cancelled streams never comes: rule 2 goes untested"


def test_vad_answers_each_ask_in_order_with_one_probability_per_chunk() -> None:
    io = StandIns(random.Random(1))
    asks = [
        DetectSpeech((CHUNK,) * n, tuple(range(32 * k, 32 * (k + n), 32)))
        for k, n in ((1, 3), (9, 1))
    ]
    io.carry_out(asks)
    answers = list(io.drain())
    assert len(answers) == 2
    for ask, answer in zip(asks, answers, strict=True):
        assert isinstance(answer, SpeechProbabilities | VadDown)
        if isinstance(answer, SpeechProbabilities):
            assert answer.chunk_end_ms == ask.chunk_end_ms
            assert len(answer.probabilities) == len(ask.chunks)
            assert all(0.0 <= p <= 1.0 for p in answer.probabilities)


def test_every_transcribe_gets_one_transcript() -> None:
    io = StandIns(random.Random(2))
    io.carry_out([Transcribe(f"item_{i}", np.zeros(1600, np.float32)) for i in range(5)])
    answers = list(io.drain())
    assert all(isinstance(a, TranscriptReady) for a in answers)
    assert sorted(a.item_id for a in answers) == [f"item_{i}" for i in range(5)]


def test_a_timer_fires_once_its_deadline_has_passed_and_a_cancelled_one_rarely_still() -> None:
    io = StandIns(random.Random(3))
    io.carry_out([ArmTimer("idle", 1_000, 1)])
    fired: list[object] = []
    while io.now_ms < 1_000:
        fired += list(io.gap())
    assert fired == [TimerFired("idle", 1)]
    stale = 0
    for seed in range(100):
        io = StandIns(random.Random(seed))
        io.carry_out([ArmTimer("idle", 10**9, 1), CancelTimer("idle")])
        stale += len(list(io.drain()))
    assert 0 < stale < 50, "a timer cancelled as it fired comes back now and then"


def test_a_backend_started_twice_is_a_problem() -> None:
    io = StandIns(random.Random(4))
    io.carry_out([_start("resp_1"), _start("resp_1")])
    assert io.problems == ["the backend of resp_1 was started twice"]


def test_every_predict_turn_gets_one_answer_complete_not_yet_or_an_error() -> None:
    """semantic_vad's turns really end (or wait, or fall back to the silence rule)."""
    io = StandIns(random.Random(5))
    io.carry_out([PredictTurn(token, np.zeros(16000, np.float32)) for token in range(1, 201)])
    answers = list(io.drain())
    assert all(isinstance(a, TurnPrediction) for a in answers)
    assert sorted(a.token for a in answers if isinstance(a, TurnPrediction)) == list(range(1, 201))
    probabilities = [a.probability for a in answers if isinstance(a, TurnPrediction)]
    known = [p for p in probabilities if p is not None]
    assert all(0.0 <= p <= 1.0 for p in known)
    # Complete at every eagerness (>= 0.75), at none (< 0.25), and the model's failures.
    assert any(p >= 0.75 for p in known) and any(p < 0.25 for p in known)
    assert any(0.25 <= p < 0.75 for p in known)
    failed = [a for a in answers if isinstance(a, TurnPrediction) and a.probability is None]
    assert failed and all(a.error for a in failed)
