"""SessionChart: turn detection as a guard, barge-in, clear addressing."""

from __future__ import annotations

from statecharts.effects import (
    AnnounceSpeechStarted,
    AnnounceSpeechStopped,
    CommitInput,
    CreateResponse,
    InterruptResponse,
    InterruptResponses,
    Reject,
)
from statecharts.session import SessionChart


def generating(chart: SessionChart, rid: str = "r1") -> SessionChart:
    chart.handle("response_started", response_id=rid)
    assert chart.is_generating
    return chart


def test_server_vad_speech_commits_and_creates_response() -> None:
    chart = SessionChart()
    assert chart.handle("speech_started", audio_start_ms=120) == [AnnounceSpeechStarted(120)]
    assert chart.user_speaking
    assert chart.handle("speech_stopped", audio_end_ms=900) == [
        AnnounceSpeechStopped(900),
        CommitInput(900),
        CreateResponse(),
    ]
    assert "listening" in chart.active


def test_server_vad_without_create_response_only_commits() -> None:
    chart = SessionChart(create_response=False)
    chart.handle("speech_started", audio_start_ms=0)
    assert chart.handle("speech_stopped", audio_end_ms=500) == [
        AnnounceSpeechStopped(500),
        CommitInput(500),
    ]


def test_manual_mode_ignores_vad_and_commits_on_request() -> None:
    chart = SessionChart(turn_detection="manual")
    assert chart.handle("speech_started", audio_start_ms=0) == []
    assert chart.handle("commit", buffered_ms=200) == [CommitInput(None)]
    assert chart.handle("commit", buffered_ms=200, create_response=True) == [
        CommitInput(None),
        CreateResponse(),
    ]


def test_rule7_empty_commit_is_rejected_with_code() -> None:
    chart = SessionChart(turn_detection="manual")
    [effect] = chart.handle("commit", buffered_ms=0)
    assert isinstance(effect, Reject)
    assert effect.code == "input_audio_buffer_commit_empty"


def test_commit_bridge_non_final_commit_is_ignored() -> None:
    chart = SessionChart(turn_detection="manual")
    assert chart.handle("commit", buffered_ms=200, final=False) == []
    assert chart.handle("commit", buffered_ms=400, final=True) == [CommitInput(None)]


def test_rule1_speech_while_generating_interrupts_and_starts_user_turn() -> None:
    chart = generating(SessionChart())
    effects = chart.handle("speech_started", audio_start_ms=3000)
    assert effects == [AnnounceSpeechStarted(3000), InterruptResponses("turn_detected")]
    assert chart.user_speaking and "idle" in chart.active


def test_rule1_speech_while_draining_interrupts() -> None:
    chart = generating(SessionChart())
    chart.handle("response_finished", response_id="r1", audio_pending=True)
    assert "draining" in chart.active
    assert InterruptResponses("turn_detected") in chart.handle("speech_started", audio_start_ms=1)


def test_rule1_no_barge_in_when_interrupt_response_is_false() -> None:
    chart = generating(SessionChart(interrupt_response=False))
    assert chart.handle("speech_started", audio_start_ms=5) == [AnnounceSpeechStarted(5)]
    assert chart.is_generating


def test_rule1_no_barge_in_after_audio_fully_played() -> None:
    chart = generating(SessionChart())
    chart.handle("response_finished", response_id="r1", audio_pending=True)
    chart.handle("response_settled", response_id="r1")
    assert chart.handle("speech_started", audio_start_ms=5) == [AnnounceSpeechStarted(5)]


def test_rule4_clear_naming_older_response_never_interrupts_newer() -> None:
    chart = generating(SessionChart(), "r1")
    chart.handle("response_finished", response_id="r1", audio_pending=True)
    generating(chart, "r2")
    assert chart.handle("clear", response_id="r1") == [InterruptResponse("r1", "client_cancelled")]
    assert chart.is_generating and chart.latest_response_id == "r2"


def test_rule4_clear_of_latest_interrupts_it() -> None:
    chart = generating(SessionChart(), "r1")
    assert chart.handle("clear", response_id="r1") == [InterruptResponses("client_cancelled")]
    assert not chart.is_output_live


def test_late_finish_of_older_response_does_not_move_output() -> None:
    chart = generating(SessionChart(), "r1")
    chart.handle("response_finished", response_id="r1", audio_pending=True)
    generating(chart, "r2")
    chart.handle("response_settled", response_id="r1")
    chart.handle("response_finished", response_id="r1", audio_pending=False)
    assert chart.is_generating and chart.latest_response_id == "r2"
