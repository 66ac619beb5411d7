"""SessionChart: turn detection as a guard, barge-in, clear addressing, pause mode."""

from __future__ import annotations

from statecharts.effects import (
    AnnounceSpeechStarted,
    AnnounceSpeechStopped,
    CommitInput,
    CreateResponse,
    DropInput,
    Effect,
    InterruptResponse,
    InterruptResponses,
    OverlapDecided,
    PauseOutput,
    Reject,
    ResumeOutput,
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


# Pause mode (docs/protocol.md "Interruption policy") ------------------------------------


def paused(heard_rid: str = "r1", *, draining: bool = False) -> SessionChart:
    chart = generating(SessionChart(interruption="pause", min_speech_ms=400), heard_rid)
    if draining:
        chart.handle("response_finished", response_id=heard_rid, audio_pending=True)
    assert chart.handle("speech_started", audio_start_ms=100) == [
        AnnounceSpeechStarted(100),
        PauseOutput(heard_rid),
    ]
    assert chart.is_paused and chart.user_speaking
    return chart


def decisions(effects: list[Effect]) -> list[OverlapDecided]:
    return [e for e in effects if isinstance(e, OverlapDecided)]


def test_pause_onset_pauses_without_interrupting() -> None:
    chart = paused()
    # The backend goes on: still generating (a create is refused), nothing interrupted.
    assert chart.is_generating and chart.is_output_live


def test_pause_onset_while_draining_remembers_draining() -> None:
    chart = paused(draining=True)
    assert "paused_draining" in chart.active and not chart.is_generating


def test_immediate_mode_is_v1_barge_in() -> None:
    chart = generating(SessionChart(interruption="immediate"))
    assert chart.handle("speech_started", audio_start_ms=1) == [
        AnnounceSpeechStarted(1),
        InterruptResponses("turn_detected"),
    ]


def test_pause_needs_interrupt_response() -> None:
    chart = generating(SessionChart(interruption="pause", interrupt_response=False))
    assert chart.handle("speech_started", audio_start_ms=1) == [AnnounceSpeechStarted(1)]
    assert not chart.is_paused


def test_pause_interrupt_when_long_speech_holds_words() -> None:
    chart = paused()
    assert chart.handle("overlap_heard", speech_ms=300, heard="words", waited=True) == []
    assert chart.handle("overlap_heard", speech_ms=400, heard="backchannel", waited=True) == []
    effects = chart.handle("overlap_heard", speech_ms=420, heard="words")
    assert effects == [
        OverlapDecided("r1", "interrupt", "speech"),
        InterruptResponses("turn_detected"),
    ]
    # The speech goes on as the next user turn: committed at its end, as in v1.
    assert chart.user_speaking and not chart.is_paused
    assert CommitInput(2000) in chart.handle("speech_stopped", audio_end_ms=2000, buffered_ms=9)


def test_pause_no_transcript_waits_for_grace_then_duration_decides() -> None:
    chart = paused()
    assert chart.handle("overlap_heard", speech_ms=400, heard="nothing", waited=False) == []
    effects = chart.handle("overlap_heard", speech_ms=450, heard="nothing", waited=True)
    assert decisions(effects) == [OverlapDecided("r1", "interrupt", "speech")]


def test_pause_speech_is_held_not_committed_while_undecided() -> None:
    chart = paused()
    effects = chart.handle(
        "speech_stopped", audio_end_ms=900, buffered_ms=800, speech_ms=250, heard="nothing"
    )
    assert effects == [AnnounceSpeechStopped(900)]
    assert chart.input_held() and chart.is_paused


def test_pause_resume_after_short_speech_drops_it() -> None:
    chart = paused()
    chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=800, speech_ms=250)
    effects = chart.handle("resume_timer", speech_ms=250, heard="nothing")
    assert effects == [
        OverlapDecided("r1", "resume", "short"),
        ResumeOutput("r1"),
        DropInput(),
    ]
    assert chart.is_generating and "generating" in chart.active and "listening" in chart.active


def test_pause_resume_reasons_backchannel_and_noise() -> None:
    for heard, speech_ms, reason in [
        ("backchannel", 700, "backchannel"),
        ("backchannel", 200, "backchannel"),
        ("noise", 700, "noise"),
        ("noise", 200, "short"),
    ]:
        chart = paused()
        chart.handle(
            "speech_stopped", audio_end_ms=900, buffered_ms=8, speech_ms=speech_ms, heard=heard
        )
        effects = chart.handle("resume_timer", speech_ms=speech_ms, heard=heard)
        assert decisions(effects) == [OverlapDecided("r1", "resume", reason)], (heard, speech_ms)


def test_pause_long_speech_ending_the_turn_interrupts_and_commits() -> None:
    chart = paused()
    effects = chart.handle(
        "speech_stopped", audio_end_ms=1500, buffered_ms=1400, speech_ms=600, heard="nothing"
    )
    assert decisions(effects) == [OverlapDecided("r1", "interrupt", "speech")]
    assert InterruptResponses("turn_detected") in effects
    assert effects[-2:] == [CommitInput(1500), CreateResponse()]


def test_pause_backchannel_turn_end_waits_for_resume() -> None:
    chart = paused()
    effects = chart.handle(
        "speech_stopped", audio_end_ms=1500, buffered_ms=1400, speech_ms=600, heard="backchannel"
    )
    assert decisions(effects) == [] and chart.input_held()


def test_pause_late_words_after_stop_interrupt_and_commit_the_held_turn() -> None:
    chart = paused()
    chart.handle("speech_stopped", audio_end_ms=1500, buffered_ms=9, speech_ms=600, heard="noise")
    effects = chart.handle("overlap_heard", speech_ms=600, heard="words")
    assert decisions(effects) == [OverlapDecided("r1", "interrupt", "speech")]
    assert effects[-2:] == [CommitInput(1500), CreateResponse()]


def test_pause_new_speech_within_window_continues_the_overlap() -> None:
    chart = paused()
    chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=8, speech_ms=200)
    assert chart.handle("speech_started", audio_start_ms=1200) == [AnnounceSpeechStarted(1200)]
    assert chart.is_paused and chart.user_speaking
    # The timer the core cancelled cannot resume while the user speaks.
    assert chart.handle("resume_timer", speech_ms=200) == []


def test_pause_finish_while_paused_drains_after_resume() -> None:
    chart = paused()
    assert chart.handle("response_finished", response_id="r1", audio_pending=True) == []
    assert "paused_draining" in chart.active
    chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=8, speech_ms=200)
    chart.handle("resume_timer", speech_ms=200)
    assert "draining" in chart.active
    chart.handle("response_settled", response_id="r1")
    assert "idle" in chart.active


def test_pause_settled_while_paused_resumes_to_idle() -> None:
    chart = paused(draining=True)
    chart.handle("response_settled", response_id="r1")
    assert "paused_settled" in chart.active and not chart.is_output_live
    chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=8, speech_ms=200)
    assert decisions(chart.handle("resume_timer", speech_ms=200)) == [
        OverlapDecided("r1", "resume", "short")
    ]
    assert "idle" in chart.active


def test_pause_rule4_clear_of_latest_ends_pause_as_v1() -> None:
    chart = paused()
    assert chart.handle("clear", response_id="r1") == [
        OverlapDecided("r1", "interrupt", "client"),
        InterruptResponses("client_cancelled"),
    ]
    assert not chart.is_paused and not chart.is_output_live


def test_pause_rule4_cancel_of_latest_while_held_commits_the_speech() -> None:
    chart = paused()
    chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=8, speech_ms=200)
    effects = chart.handle("cancel", response_id=None)
    assert effects[:2] == [
        OverlapDecided("r1", "interrupt", "client"),
        InterruptResponses("client_cancelled"),
    ]
    assert effects[2:] == [CommitInput(900), CreateResponse()]


def test_pause_rule4_clear_of_older_keeps_the_pause() -> None:
    chart = generating(SessionChart(interruption="pause"), "r1")
    chart.handle("response_finished", response_id="r1", audio_pending=True)
    generating(chart, "r2")
    chart.handle("speech_started", audio_start_ms=1)
    assert chart.handle("clear", response_id="r1") == [InterruptResponse("r1", "client_cancelled")]
    assert chart.is_paused


def test_pause_truncate_ends_pause_with_one_decision() -> None:
    chart = paused()
    assert chart.handle("truncate", response_id="r1") == [
        OverlapDecided("r1", "interrupt", "client")
    ]
    assert chart.handle("truncate", response_id="r1") == []


def test_pause_client_commit_is_the_next_turn() -> None:
    chart = paused()
    effects = chart.handle("commit", buffered_ms=500, create_response=True)
    assert OverlapDecided("r1", "interrupt", "client") in effects
    assert InterruptResponses("turn_detected") in effects
    assert effects[-2:] == [CommitInput(None), CreateResponse()]


def test_pause_clear_input_resumes() -> None:
    chart = paused()
    assert chart.handle("clear_input") == [
        OverlapDecided("r1", "resume", "client"),
        ResumeOutput("r1"),
    ]
    assert "generating" in chart.active and "listening" in chart.active


def test_pause_close_interrupts_with_reason_closed() -> None:
    chart = paused(draining=True)
    assert chart.handle("close") == [
        OverlapDecided("r1", "interrupt", "closed"),
        InterruptResponses("client_cancelled"),
    ]


def test_pause_new_response_after_finish_resumes_and_drops_held_speech() -> None:
    chart = paused(draining=True)
    chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=8, speech_ms=200)
    effects = chart.handle("response_started", response_id="r2")
    assert decisions(effects) == [OverlapDecided("r1", "resume", "client")]
    assert DropInput() in effects and ResumeOutput("r1") in effects
    assert chart.is_generating and chart.latest_response_id == "r2"


def test_pause_exactly_one_decision_per_overlap() -> None:
    chart = paused()
    first = decisions(chart.handle("overlap_heard", speech_ms=500, heard="words"))
    later = [
        *chart.handle("overlap_heard", speech_ms=900, heard="words"),
        *chart.handle("speech_stopped", audio_end_ms=2000, buffered_ms=9, speech_ms=900),
        *chart.handle("resume_timer", speech_ms=900),
        *chart.handle("clear", response_id="r1"),
    ]
    assert len(first) == 1 and decisions(later) == []


def test_each_region_keeps_exactly_one_state_through_self_transitions() -> None:
    """An empty commit or an older clear must not re-enter the other region's initial state."""
    output = {"idle", "generating", "draining", "interrupted", "paused"}
    for chart in (generating(SessionChart(interrupt_response=False)), paused()):
        chart.handle("speech_started", audio_start_ms=1)
        chart.handle("commit", buffered_ms=0)
        chart.handle("clear", response_id="r0")
        chart.handle("cancel", response_id="r0", target_live=True)
        assert len(output & chart.active) == 1, chart.active
        assert len({"listening", "user_speaking", "held", "committed"} & chart.active) == 1
