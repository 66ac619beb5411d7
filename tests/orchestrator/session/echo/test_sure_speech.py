"""echo/sure_speech.py: the run of sure chunks that vouches for the user over the echo."""

from __future__ import annotations

from orchestrator.session.echo.sure_speech import (
    SURE_CHUNKS,
    SURE_EXCESS_DB,
    SURE_SPEECH,
    SureSpeech,
)


def test_rule1_a_chunk_under_sure_ends_the_run() -> None:
    run = SureSpeech()
    for _ in range(SURE_CHUNKS - 1):
        assert not run.add(SURE_SPEECH, SURE_EXCESS_DB)
    assert not run.add(SURE_SPEECH - 0.01, SURE_EXCESS_DB)
    for _ in range(SURE_CHUNKS - 1):
        assert not run.add(SURE_SPEECH, SURE_EXCESS_DB)
    assert run.add(SURE_SPEECH, SURE_EXCESS_DB)


def test_rule2_a_run_vouches_only_with_more_than_the_echo_in_one_of_its_chunks() -> None:
    run = SureSpeech()
    for _ in range(3 * SURE_CHUNKS):
        assert not run.add(1.0, SURE_EXCESS_DB - 0.1), "the echo explains all of it"
    assert run.add(1.0, SURE_EXCESS_DB), "one chunk over"
    assert run.add(1.0, 0.0), "and the run goes on vouching"
    run.add(0.5, None)
    first = [run.add(1.0, SURE_EXCESS_DB + 5 if i == 0 else 0.0) for i in range(SURE_CHUNKS)]
    assert first == [False] * (SURE_CHUNKS - 1) + [True], "its first chunk counts too"


def test_rule2_a_chunk_with_no_measure_says_nothing_of_the_echo() -> None:
    run = SureSpeech()
    results = [run.add(1.0, None) for _ in range(SURE_CHUNKS)]
    assert results == [False] * (SURE_CHUNKS - 1) + [True]
