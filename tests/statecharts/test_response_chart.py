"""ResponseChart: one terminal, no output after interruption, history only when heard."""

from __future__ import annotations

import pytest

from statecharts.effects import (
    CancelBackend,
    CommitCall,
    CommitHistory,
    ForwardOutput,
    OpenStream,
    ResponseFinished,
    ResponseSettled,
    SendCleared,
    SendResponseDone,
)
from statecharts.response import ResponseChart
from statecharts.response_events import Complete, Played


def chart_for(rid: str = "r1") -> ResponseChart:
    return ResponseChart(rid, 7)


def generating(rid: str = "r1") -> ResponseChart:
    chart = chart_for(rid)
    assert chart.handle("start") == [OpenStream(rid, 7)]
    return chart


def dones(effects: list[object]) -> list[SendResponseDone]:
    return [e for e in effects if isinstance(e, SendResponseDone)]


def test_rule2_output_forwarded_only_while_generating() -> None:
    chart = chart_for("r1")
    assert chart.handle("output", chunk="early") == []
    chart.handle("start")
    assert chart.handle("output", chunk="a") == [ForwardOutput("r1", "a")]
    chart.handle("barge_in")
    assert chart.handle("output", chunk="late") == []


def test_rule1_barge_in_cancels_backend_first_then_clears_and_ends_cancelled() -> None:
    chart = generating()
    effects = chart.handle("barge_in")
    assert effects[0] == CancelBackend("r1", 7)
    assert SendCleared("r1") in effects
    assert dones(effects) == [SendResponseDone("r1", "cancelled", "turn_detected")]
    assert CommitHistory("r1", "cut") in effects
    assert chart.is_terminal and "interrupted" in chart.active


def test_rule1_barge_in_while_draining_clears_without_second_terminal() -> None:
    chart = generating()
    assert dones(chart.handle("complete", audio_pending=True)) == [
        SendResponseDone("r1", "completed")
    ]
    effects = chart.handle("barge_in")
    assert effects == [SendCleared("r1"), CommitHistory("r1", "cut"), ResponseSettled("r1")]


@pytest.mark.parametrize(
    "path",
    [
        [],
        [("start", {})],
        [("start", {}), ("complete", {"audio_pending": True})],
        [("start", {}), ("complete", {})],
        [("start", {}), ("barge_in", {})],
        [("start", {}), ("cancel", {})],
        [("cancel", {})],
        [("start", {}), ("fail", {"reason": "x"})],
        [("start", {}), ("complete", {"audio_pending": True}), ("played", {})],
        [("start", {}), ("truncate", {"audio_end_ms": 40})],
    ],
)
def test_rule2_forward_fast_path_decides_exactly_as_the_output_event(
    path: list[tuple[str, dict[str, object]]],
) -> None:
    slow, fast = chart_for("r1"), chart_for("r1")
    for event, kwargs in path:
        slow.handle(event, **kwargs)
        fast.handle(event, **kwargs)
    assert fast.forward("chunk") == slow.handle("output", chunk="chunk")
    assert fast.active == slow.active


@pytest.mark.parametrize(
    "events",
    [
        ["start", "complete"],
        ["start", "barge_in", "cancel", "fail", "complete"],
        ["cancel", "start", "complete"],
        ["start", "fail", "barge_in"],
        ["start", "complete_pending", "cancel", "played", "barge_in"],
    ],
)
def test_rule3_exactly_one_terminal(events: list[str]) -> None:
    chart = chart_for("r1")
    terminals: list[SendResponseDone] = []
    for event in events:
        if event == "complete_pending":
            terminals += dones(chart.handle("complete", audio_pending=True))
        else:
            terminals += dones(chart.handle(event))
    assert len(terminals) == 1


@pytest.mark.parametrize("audio_pending", [True, False])
def test_rule3_complete_with_an_end_reason_ends_incomplete_with_that_reason(
    audio_pending: bool,
) -> None:
    # Was: every stream that ended on its own was `completed`, also when the pipeline's own
    # limit (max_output_tokens, the Talker's slot) cut the reply short.
    chart = generating()
    effects = chart.feed(Complete(audio_pending, "max_output_tokens"))
    assert dones(effects) == [SendResponseDone("r1", "incomplete", "max_output_tokens")]
    assert chart.status == "incomplete"
    assert [e for e in effects if isinstance(e, ResponseFinished)] == [
        ResponseFinished("r1", audio_pending)
    ]
    assert dones(chart.handle("barge_in")) == [], "one terminal: draining sent it already"


def test_rule5_an_incomplete_reply_is_heard_as_a_completed_one() -> None:
    # What was generated is what was played: a reply cut by the budget drains and is heard.
    chart = generating()
    effects = chart.feed(Complete(audio_pending=True, reason="max_output_tokens"))
    assert not [e for e in effects if isinstance(e, CommitHistory)]
    assert chart.feed(Played()) == [CommitHistory("r1", "full"), ResponseSettled("r1")]
    text_only = generating("r2").feed(Complete(reason="max_output_tokens"))
    assert CommitHistory("r2", "full") in text_only


@pytest.mark.parametrize("audio_pending", [True, False])
def test_rule5_a_call_the_budget_cut_is_never_committed(audio_pending: bool) -> None:
    effects = generating().feed(Complete(audio_pending, "max_output_tokens"))
    assert not [e for e in effects if isinstance(e, CommitCall)]


def test_rule4_cancel_before_start_is_cancelled_and_never_starts() -> None:
    chart = chart_for("r1")
    assert dones(chart.handle("cancel")) == [
        SendResponseDone("r1", "cancelled", "client_cancelled")
    ]
    assert chart.handle("start") == []


def test_rule5_full_history_only_after_played() -> None:
    chart = generating()
    effects = chart.handle("complete", audio_pending=True)
    assert not [e for e in effects if isinstance(e, CommitHistory)]
    assert chart.handle("played") == [CommitHistory("r1", "full"), ResponseSettled("r1")]


def test_rule5_text_only_reply_is_heard_at_completion() -> None:
    chart = generating()
    assert CommitHistory("r1", "full") in chart.handle("complete", audio_pending=False)


@pytest.mark.parametrize("audio_pending", [True, False])
def test_rule5_a_call_is_committed_by_complete_before_the_terminal(audio_pending: bool) -> None:
    effects = generating().handle("complete", audio_pending=audio_pending)
    assert effects.index(CommitCall("r1")) < effects.index(SendResponseDone("r1", "completed"))


@pytest.mark.parametrize(
    ("event", "kwargs"),
    [("barge_in", {}), ("cancel", {}), ("truncate", {"audio_end_ms": 0}), ("fail", {})],
)
def test_rule5_a_call_cut_short_is_never_committed(event: str, kwargs: dict[str, object]) -> None:
    chart = generating()
    assert not [e for e in chart.handle(event, **kwargs) if isinstance(e, CommitCall)]
    assert chart.handle("complete") == []  # a late end of its stream changes nothing


def test_rule5_cut_is_never_undone_by_a_later_full_play() -> None:
    chart = generating()
    chart.handle("complete", audio_pending=True)
    chart.handle("cancel")
    assert chart.handle("played") == []


def test_rule5_truncate_while_draining_cuts_at_audio_end() -> None:
    chart = generating()
    chart.handle("complete", audio_pending=True)
    assert chart.handle("truncate", audio_end_ms=700) == [
        CommitHistory("r1", "cut", 700),
        ResponseSettled("r1"),
    ]
    assert chart.handle("played") == []


def test_rule8_backend_failure_ends_failed_with_reason() -> None:
    chart = generating()
    effects = chart.handle("fail", reason="triton unavailable")
    assert dones(effects) == [SendResponseDone("r1", "failed", "triton unavailable")]
    assert chart.status == "failed"


@pytest.mark.parametrize(
    ("event", "kwargs", "audio_pending"),
    [
        ("complete", {"audio_pending": True}, True),
        ("complete", {}, False),
        ("barge_in", {}, False),
        ("cancel", {}, False),
        ("truncate", {"audio_end_ms": 40}, False),
        ("fail", {"reason": "x"}, False),
    ],
)
def test_leaving_generating_tells_the_session_chart_once(
    event: str, kwargs: dict[str, object], audio_pending: bool
) -> None:
    # One mechanism keeps the charts in step: every way out of `generating` emits exactly one
    # ResponseFinished, and every history commit is followed by ResponseSettled.
    effects = generating().handle(event, **kwargs)
    assert [e for e in effects if isinstance(e, ResponseFinished)] == [
        ResponseFinished("r1", audio_pending)
    ]
    commits = [i for i, e in enumerate(effects) if isinstance(e, CommitHistory)]
    for i in commits:
        assert effects[i + 1] == ResponseSettled("r1")


def test_played_after_draining_settles_without_a_second_finish() -> None:
    chart = generating()
    chart.handle("complete", audio_pending=True)
    assert chart.handle("played") == [CommitHistory("r1", "full"), ResponseSettled("r1")]
