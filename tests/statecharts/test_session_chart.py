"""SessionChart: turn detection as a guard, barge-in, clear addressing, pause mode."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statecharts.effects import (
    AdoptPreemptive,
    AnnounceSpeechStarted,
    AnnounceSpeechStopped,
    AnswerClear,
    CommitInput,
    CreateResponse,
    DropInput,
    DropPreemptive,
    Effect,
    HearByAcknowledgement,
    InterruptResponse,
    InterruptResponses,
    OverlapDecided,
    OverlapSpeechStarted,
    OverlapSpeechStopped,
    PauseOutput,
    PreemptDropReason,
    Reject,
    ResumeOutput,
    StartPreemptive,
)
from statecharts.session import SessionChart
from statecharts.vocabulary import TurnMode


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
        OverlapSpeechStarted(100),
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


def test_pause_interrupt_word_interrupts_before_min_speech() -> None:
    chart = paused()
    effects = chart.handle("overlap_heard", speech_ms=180, heard="urgent")
    assert effects == [
        OverlapDecided("r1", "interrupt", "speech"),
        InterruptResponses("turn_detected"),
    ]


def test_pause_interrupt_word_held_short_speech_ends_the_turn() -> None:
    chart = paused()
    assert CommitInput(900) not in chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=9)
    chart = paused()
    effects = chart.handle(
        "speech_stopped", audio_end_ms=900, buffered_ms=9, speech_ms=250, heard="urgent"
    )
    assert decisions(effects) == [OverlapDecided("r1", "interrupt", "speech")]


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
    assert effects == [AnnounceSpeechStopped(900), OverlapSpeechStopped(900)]
    assert chart.is_held and chart.is_paused


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
    assert decisions(effects) == [] and chart.is_held


def test_pause_late_words_after_stop_interrupt_and_commit_the_held_turn() -> None:
    chart = paused()
    chart.handle("speech_stopped", audio_end_ms=1500, buffered_ms=9, speech_ms=600, heard="noise")
    effects = chart.handle("overlap_heard", speech_ms=600, heard="words")
    assert decisions(effects) == [OverlapDecided("r1", "interrupt", "speech")]
    assert effects[-2:] == [CommitInput(1500), CreateResponse()]


def test_pause_new_speech_within_window_continues_the_overlap() -> None:
    chart = paused()
    chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=8, speech_ms=200)
    assert chart.handle("speech_started", audio_start_ms=1200) == [
        AnnounceSpeechStarted(1200),
        OverlapSpeechStarted(1200),
    ]
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


def test_pause_clear_when_settled_answers_clear_with_one_decision() -> None:
    """Pause mode: from `paused_settled` (the paused reply heard in full, nothing live) a
    `clear` of the latest decides the overlap (`interrupt`, `client`) and is answered as v1's
    clear of nothing: AnswerClear, no InterruptResponses."""
    chart = paused()
    chart.handle("response_finished", response_id="r1", audio_pending=False)
    assert "paused_settled" in chart.active and not chart.is_output_live
    assert chart.handle("clear", response_id="r1") == [
        OverlapDecided("r1", "interrupt", "client"),
        AnswerClear("r1"),
    ]
    assert not chart.is_paused and "idle" in chart.active
    chart = paused()
    chart.handle("response_finished", response_id="r1", audio_pending=False)
    assert chart.handle("clear") == [OverlapDecided("r1", "interrupt", "client"), AnswerClear(None)]


def test_pause_cancel_when_settled_is_rejected_with_one_decision() -> None:
    """Pause mode: from `paused_settled` a `cancel` decides the overlap (`interrupt`,
    `client`) and is rule 3's rejection: nothing is live to cancel."""
    chart = paused()
    chart.handle("response_finished", response_id="r1", audio_pending=False)
    effects = chart.handle("cancel")
    assert effects[0] == OverlapDecided("r1", "interrupt", "client")
    assert len(effects) == 2 and isinstance(effects[1], Reject)
    assert effects[1].code == "response_cancel_not_active"
    assert not chart.is_paused and "idle" in chart.active
    # The overlap is decided: a second cancel is a plain rule 3 rejection, no decision.
    again = chart.handle("cancel")
    assert decisions(again) == [] and [type(e) for e in again] == [Reject]


# Preemptive responses (docs/protocol.md "Semantic end of turn and preemptive responses") --


def preempting(turn_detection: TurnMode = "server_vad", **kwargs: Any) -> SessionChart:
    """A chart with preemptive responses on, the user speaking and one preemption running."""
    chart = SessionChart(turn_detection=turn_detection, preemptive=True, **kwargs)
    chart.handle("speech_started", audio_start_ms=100)
    assert chart.handle("turn_paused") == [StartPreemptive()]
    assert "running" in chart.active
    return chart


def test_preempt_turn_paused_starts_one() -> None:
    """Preemption: `turn_paused` with VAD turns, preemptive, create_response, the output
    idle and the user speaking starts one (StartPreemptive), and nothing else moves."""
    chart = preempting()
    assert chart.user_speaking and "idle" in chart.active


@pytest.mark.parametrize("turn_detection", ["server_vad", "semantic_vad"])
def test_preempt_starts_with_either_vad(turn_detection: TurnMode) -> None:
    """Preemption: VAD turns are server_vad's and semantic_vad's alike."""
    preempting(turn_detection)


def test_preempt_needs_vad_turns() -> None:
    """Preemption guard `vad_turns`: manual turns never preempt (the user speaking is the
    client's business there)."""
    chart = SessionChart(preemptive=True)
    chart.handle("speech_started", audio_start_ms=0)
    chart.configure(
        turn_detection="manual", create_response=True, interrupt_response=True, preemptive=True
    )
    assert chart.user_speaking
    assert chart.handle("turn_paused") == []
    assert "standby" in chart.active


def test_preempt_needs_preemptive_response() -> None:
    """Preemption guard `preemptive_on`: off by default (a v1 session never preempts)."""
    chart = SessionChart()
    chart.handle("speech_started", audio_start_ms=0)
    assert chart.handle("turn_paused") == []
    assert "standby" in chart.active


def test_preempt_needs_create_response() -> None:
    """Preemption guard `create_response_on`: a turn that gets no response is not answered
    ahead of time."""
    chart = SessionChart(preemptive=True, create_response=False)
    chart.handle("speech_started", audio_start_ms=0)
    assert chart.handle("turn_paused") == []
    assert "standby" in chart.active


def test_preempt_needs_the_output_idle() -> None:
    """Preemption guard `output_idle` (rule 3): not while another response is live."""
    chart = generating(SessionChart(preemptive=True, interrupt_response=False))
    chart.handle("speech_started", audio_start_ms=0)
    assert chart.user_speaking and chart.is_generating
    assert chart.handle("turn_paused") == []
    # Draining (generated, not yet heard) is live too.
    chart.handle("response_finished", response_id="r1", audio_pending=True)
    assert "draining" in chart.active
    assert chart.handle("turn_paused") == []
    assert "standby" in chart.active


def test_preempt_needs_the_user_speaking() -> None:
    """Preemption guard `user_is_speaking`: a pause with no turn in progress starts none."""
    chart = SessionChart(preemptive=True)
    assert chart.handle("turn_paused") == []
    chart.handle("speech_started", audio_start_ms=0)
    chart.handle("speech_stopped", audio_end_ms=500)
    assert "listening" in chart.active
    assert chart.handle("turn_paused") == []
    assert "standby" in chart.active


def test_preempt_at_most_one_runs() -> None:
    """Preemption: at most one runs; a second pause while running starts nothing."""
    chart = preempting()
    assert chart.handle("turn_paused") == []
    assert "running" in chart.active


@pytest.mark.parametrize(
    ("event", "kwargs", "reason"),
    [
        ("speech_resumed", {}, "speech_resumed"),
        ("context_changed", {}, "context_changed"),
        ("preempt_failed", {}, "failed"),
        ("preempt_failed", {"reason": "failed"}, "failed"),
        ("preempt_failed", {"reason": "overflow"}, "overflow"),
        ("clear_input", {}, "input_cleared"),
        ("close", {}, "closed"),
    ],
)
def test_preempt_dropped_with_its_reason(
    event: str, kwargs: dict[str, Any], reason: PreemptDropReason
) -> None:
    """Preemption: each drop event emits DropPreemptive with its reason and returns to
    standby; a second one finds nothing to drop."""
    chart = preempting()
    assert chart.handle(event, **kwargs) == [DropPreemptive(reason)]
    assert "standby" in chart.active and "running" not in chart.active
    assert DropPreemptive(reason) not in chart.handle(event, **kwargs)


def test_preempt_drop_events_in_standby_do_nothing() -> None:
    """Preemption: with none running, the drop events emit no DropPreemptive."""
    chart = SessionChart(preemptive=True)
    chart.handle("speech_started", audio_start_ms=0)
    for event in ("speech_resumed", "context_changed", "preempt_failed"):
        assert chart.handle(event) == [], event
    assert chart.handle("clear_input") == []
    assert chart.handle("close") == []


def test_preempt_after_speech_resumed_the_next_pause_starts_another() -> None:
    """Preemption: dropped when the user speaks on, a later pause of the same turn preempts
    again."""
    chart = preempting()
    chart.handle("speech_resumed")
    assert chart.handle("turn_paused") == [StartPreemptive()]


@pytest.mark.parametrize("turn_detection", ["server_vad", "semantic_vad"])
def test_preempt_speech_stopped_adopts_after_commit(turn_detection: TurnMode) -> None:
    """Preemption: the turn's end (`speech_stopped`) while one runs emits CommitInput, then
    AdoptPreemptive instead of CreateResponse: `committed` precedes `response.created`."""
    chart = preempting(turn_detection)
    assert chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=800) == [
        AnnounceSpeechStopped(900),
        CommitInput(900),
        AdoptPreemptive(),
    ]
    assert "standby" in chart.active and "listening" in chart.active


def test_preempt_client_commit_without_create_response_drops_not_answered() -> None:
    """Preemption: a client `commit` (create_response unset: a client commit answers only
    when it asks) while one runs drops it (`not_answered`) and emits no response effect."""
    chart = preempting()
    effects = chart.handle("commit", buffered_ms=800)
    assert DropPreemptive("not_answered") in effects
    assert CommitInput(None) in effects
    assert not any(isinstance(e, CreateResponse | AdoptPreemptive) for e in effects)
    assert "standby" in chart.active and "listening" in chart.active


def test_preempt_client_commit_with_create_response_false_drops_not_answered() -> None:
    """Preemption: a commit that says create_response=False is not answered either."""
    chart = preempting()
    effects = chart.handle("commit", buffered_ms=800, create_response=False)
    assert DropPreemptive("not_answered") in effects
    assert not any(isinstance(e, CreateResponse | AdoptPreemptive) for e in effects)


def test_preempt_client_commit_with_create_response_adopts() -> None:
    """Preemption: a client commit that asks for a response adopts the running one, after
    CommitInput, with no CreateResponse and no drop."""
    chart = preempting()
    assert chart.handle("commit", buffered_ms=800, create_response=True) == [
        CommitInput(None),
        AdoptPreemptive(),
    ]
    assert "standby" in chart.active


def test_preempt_empty_or_non_final_commit_keeps_it_running() -> None:
    """Preemption: a commit that commits nothing (empty, or the bridge's final=False) is not
    the turn's end: the preemption runs on."""
    chart = preempting()
    effects = chart.handle("commit", buffered_ms=0)
    assert [type(e) for e in effects] == [Reject]
    assert chart.handle("commit", buffered_ms=800, final=False) == []
    assert "running" in chart.active and chart.user_speaking


def test_preempt_speech_stopped_without_create_response_drops_not_answered() -> None:
    """Preemption: create_response turned off (session.update) while one runs: the VAD
    commit wants no response, so it is dropped (`not_answered`) and nothing is created."""
    chart = preempting()
    chart.configure(
        turn_detection="server_vad",
        create_response=False,
        interrupt_response=True,
        preemptive=True,
    )
    effects = chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=800)
    assert DropPreemptive("not_answered") in effects and CommitInput(900) in effects
    assert not any(isinstance(e, CreateResponse | AdoptPreemptive) for e in effects)


def test_preempt_after_adoption_a_turn_without_one_creates_response() -> None:
    """Preemption: after adoption the region is standby, and a later turn that was not
    preempted commits and emits CreateResponse, as without preemption."""
    chart = preempting()
    chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=800)
    assert "standby" in chart.active
    chart.handle("speech_started", audio_start_ms=2000)
    assert chart.handle("speech_stopped", audio_end_ms=2600, buffered_ms=600) == [
        AnnounceSpeechStopped(2600),
        CommitInput(2600),
        CreateResponse(),
    ]
    # And a client commit after an adoption is answered only when it asks, as in v1.
    chart = preempting()
    chart.handle("commit", buffered_ms=800, create_response=True)
    chart.handle("speech_started", audio_start_ms=2000)
    assert chart.handle("commit", buffered_ms=600) == [CommitInput(None)]


def test_preempt_after_a_drop_the_turn_end_creates_response() -> None:
    """Preemption: dropped (the user spoke on), the turn's end is v1's: CreateResponse."""
    chart = preempting()
    chart.handle("speech_resumed")
    assert chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=800) == [
        AnnounceSpeechStopped(900),
        CommitInput(900),
        CreateResponse(),
    ]


def test_preempt_adopted_response_is_barged_in_as_any() -> None:
    """Preemption: an adopted response is a response like any: once started, speech
    interrupts it (rule 1)."""
    chart = preempting()
    chart.handle("speech_stopped", audio_end_ms=900, buffered_ms=800)
    generating(chart, "r1")
    assert chart.handle("speech_started", audio_start_ms=3000) == [
        AnnounceSpeechStarted(3000),
        InterruptResponses("turn_detected"),
    ]


def test_semantic_vad_turns_move_the_input_region() -> None:
    """Turn detection guard: semantic_vad's VAD events move the input region as server_vad's
    do, and the VAD commit creates the response."""
    chart = SessionChart(turn_detection="semantic_vad")
    assert chart.vad_turns()
    assert chart.handle("speech_started", audio_start_ms=120) == [AnnounceSpeechStarted(120)]
    assert chart.user_speaking
    assert chart.handle("speech_stopped", audio_end_ms=900) == [
        AnnounceSpeechStopped(900),
        CommitInput(900),
        CreateResponse(),
    ]
    assert "listening" in chart.active


def test_semantic_vad_barge_in() -> None:
    """Rule 1 under semantic_vad: speech while generating interrupts; while draining too."""
    chart = generating(SessionChart(turn_detection="semantic_vad"))
    assert chart.handle("speech_started", audio_start_ms=3000) == [
        AnnounceSpeechStarted(3000),
        InterruptResponses("turn_detected"),
    ]
    chart = generating(SessionChart(turn_detection="semantic_vad"))
    chart.handle("response_finished", response_id="r1", audio_pending=True)
    assert InterruptResponses("turn_detected") in chart.handle("speech_started", audio_start_ms=1)


def test_semantic_vad_pause_mode_pauses() -> None:
    """Pause mode under semantic_vad: speech onset while generating pauses, as server_vad."""
    chart = generating(SessionChart(turn_detection="semantic_vad", interruption="pause"))
    assert chart.handle("speech_started", audio_start_ms=100) == [
        AnnounceSpeechStarted(100),
        PauseOutput("r1"),
        OverlapSpeechStarted(100),
    ]


def test_preemption_region_keeps_exactly_one_state() -> None:
    """Each region is in exactly one state through every preemption event."""
    chart = preempting()
    regions = (
        {"listening", "user_speaking", "held", "committed"},
        {"idle", "generating", "draining", "interrupted", "paused"},
        {"standby", "running"},
    )
    for event, kwargs in [
        ("turn_paused", {}),
        ("commit", {"buffered_ms": 0}),
        ("speech_resumed", {}),
        ("turn_paused", {}),
        ("speech_stopped", {"audio_end_ms": 900, "buffered_ms": 800}),
        ("speech_started", {"audio_start_ms": 1000}),
        ("turn_paused", {}),
        ("clear_input", {}),
    ]:
        chart.handle(event, **kwargs)
        for region in regions:
            assert len(region & chart.active) == 1, (event, chart.active)


chart_steps = st.lists(
    st.one_of(
        st.tuples(st.just("speech_started"), st.fixed_dictionaries({"audio_start_ms": st.just(1)})),
        st.tuples(
            st.just("speech_stopped"),
            st.fixed_dictionaries(
                {
                    "audio_end_ms": st.just(9),
                    "buffered_ms": st.sampled_from([0, 8]),
                    "speech_ms": st.sampled_from([100, 900]),
                    "heard": st.sampled_from(["nothing", "words", "backchannel", "noise"]),
                }
            ),
        ),
        st.tuples(
            st.just("commit"),
            st.fixed_dictionaries(
                {
                    "buffered_ms": st.sampled_from([0, 8]),
                    "create_response": st.sampled_from([None, True, False]),
                    "final": st.sampled_from([None, True, False]),
                }
            ),
        ),
        st.tuples(
            st.sampled_from(["response_started", "response_settled", "clear", "cancel"]),
            st.fixed_dictionaries({"response_id": st.sampled_from(["r1", "r2"])}),
        ),
        st.tuples(
            st.just("response_finished"),
            st.fixed_dictionaries(
                {"response_id": st.sampled_from(["r1", "r2"]), "audio_pending": st.booleans()}
            ),
        ),
        st.tuples(
            st.just("overlap_heard"),
            st.fixed_dictionaries({"speech_ms": st.just(900), "heard": st.just("words")}),
        ),
        st.tuples(
            st.sampled_from(
                [
                    "turn_paused",
                    "turn_paused",
                    "speech_resumed",
                    "context_changed",
                    "preempt_failed",
                    "clear_input",
                    "close",
                    "resume_timer",
                    "truncate",
                ]
            ),
            st.just({}),
        ),
        st.tuples(st.just("configure"), st.fixed_dictionaries({"create_response": st.booleans()})),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(
    turn_detection=st.sampled_from(["server_vad", "semantic_vad"]),
    interruption=st.sampled_from(["immediate", "pause"]),
    steps=chart_steps,
)
def test_preemption_properties(
    turn_detection: TurnMode, interruption: Any, steps: list[tuple[str, dict[str, Any]]]
) -> None:
    """Preemption region, whatever the events: a running one always belongs to a user turn
    in progress; every StartPreemptive ends in exactly one AdoptPreemptive or DropPreemptive
    (none without one running); AdoptPreemptive comes right after CommitInput and never with
    CreateResponse; StartPreemptive only with the output idle."""
    chart = SessionChart(turn_detection=turn_detection, interruption=interruption, preemptive=True)
    running = False
    for event, kwargs in steps:
        if event == "configure":
            chart.configure(
                turn_detection=turn_detection,
                create_response=kwargs["create_response"],
                interrupt_response=True,
                interruption=interruption,
                preemptive=True,
            )
            continue
        idle_before = "idle" in chart.active
        effects = chart.handle(event, **kwargs)
        for n, e in enumerate(effects):
            if isinstance(e, StartPreemptive):
                assert not running and idle_before, (event, effects)
                running = True
            elif isinstance(e, AdoptPreemptive | DropPreemptive):
                assert running, (event, effects)
                running = False
            if isinstance(e, AdoptPreemptive):
                assert n > 0 and isinstance(effects[n - 1], CommitInput), effects
        assert not (AdoptPreemptive() in effects and CreateResponse() in effects), effects
        assert ("running" in chart.active) == running, (event, chart.active)
        if running:
            assert chart.user_speaking, (event, chart.active)


def test_heard_by_the_first_ack_switches_to_acknowledged_once_and_for_good() -> None:
    chart = SessionChart()
    assert "generated" in chart.active
    assert chart.handle("playback_acked", response_id="r1") == [HearByAcknowledgement("r1")]
    assert "acknowledged" in chart.active
    assert chart.handle("playback_acked", response_id="r2") == []  # no way back, no second
    chart.handle("speech_started", audio_start_ms=0)
    assert "acknowledged" in chart.active


def test_rule3_response_requested_while_generating_is_refused() -> None:
    """Rule 3: one active response at a time; refused while generating, paused or not."""
    chart = SessionChart()
    assert chart.handle("response_requested") == []
    chart = generating(SessionChart())
    [refused] = chart.handle("response_requested")
    assert isinstance(refused, Reject)
    assert refused.code == "conversation_already_has_active_response"
    assert "r1" in refused.message and chart.is_generating
    chart = paused()
    assert [type(e) for e in chart.handle("response_requested")] == [Reject]
    assert chart.is_paused and chart.is_generating
    chart.handle("response_finished", response_id="r1", audio_pending=True)
    assert chart.handle("response_requested") == []  # paused_draining: a new one may start
