"""PlaybackChart: what the user heard of one reply, each rule of statecharts/playback.py."""

from __future__ import annotations

import pytest

from statecharts import playback_events as pe
from statecharts.effects import HearAll, HearNothing, HearUntil, StartGrace
from statecharts.playback import PlaybackChart


def by_ack() -> PlaybackChart:
    chart = PlaybackChart()
    assert chart.feed(pe.Acknowledge()) == []  # nothing held: nothing withdrawn
    return chart


def heard(chart: PlaybackChart) -> str:
    (state,) = chart.active & {
        "unheard",
        "estimated",
        "played_out",
        "heard_in_full",
        "cut_estimated",
        "cut_provisional",
        "cut_by_ack",
        "cut_by_truncate",
        "cut_at_cursor",
    }
    return state


def test_rule1_audio_is_taken_only_while_sending() -> None:
    chart = PlaybackChart()
    assert chart.takes_audio
    chart.feed(pe.Clear(estimate_ms=300, cursor_ms=0))
    assert not chart.takes_audio and "stopped" in chart.active
    assert chart.feed(pe.Finish()) == []  # a cut reply is never complete
    assert not chart.is_complete

    done = PlaybackChart()
    done.feed(pe.Finish())
    assert not done.takes_audio and done.is_complete


def test_rule2_the_basis_moves_to_acknowledged_once_and_for_good() -> None:
    chart = by_ack()
    assert chart.is_by_ack
    chart.feed(pe.Acknowledge())
    assert chart.is_by_ack and "by_estimate" not in chart.active


def test_rule3_by_estimate_a_complete_reply_is_heard_in_full_at_once() -> None:
    chart = PlaybackChart()
    assert chart.feed(pe.Finish()) == [HearAll()]
    assert chart.is_estimated and chart.is_settled

    played = PlaybackChart()
    assert played.feed(pe.Finish(clock_done=True)) == [HearAll()]
    assert played.is_played_out  # a text-only reply, or the clock already at its end


def test_rule3_by_ack_only_the_ack_that_covers_it_all_hears_it_in_full() -> None:
    chart = by_ack()
    assert chart.feed(pe.Ack(cursor_ms=1200, acked_all=True)) == []  # not complete yet
    assert chart.feed(pe.Finish()) == []
    assert not chart.is_settled
    assert chart.feed(pe.Ack(cursor_ms=600)) == []
    assert chart.feed(pe.Ack(cursor_ms=1200, acked_all=True)) == [HearAll()]
    assert heard(chart) == "heard_in_full"

    raced = by_ack()
    assert raced.feed(pe.Finish(acked_all=True)) == [HearAll()]  # the full ACK came first


def test_rule4_the_playout_clock_settles_an_estimate() -> None:
    chart = PlaybackChart()
    chart.feed(pe.Finish())
    assert chart.feed(pe.ClockPlayed()) == []
    assert chart.is_played_out and not chart.is_estimated


@pytest.mark.parametrize("finished", [False, True])
def test_rule5_the_servers_clear_by_estimate_cuts_at_the_clock(finished: bool) -> None:
    chart = PlaybackChart()
    if finished:
        chart.feed(pe.Finish())
    assert chart.feed(pe.Clear(estimate_ms=700, cursor_ms=200)) == [HearUntil(700)]
    assert heard(chart) == "cut_estimated" and not chart.is_final


def test_rule5_the_servers_clear_by_ack_cuts_at_the_cursor_provisionally() -> None:
    chart = by_ack()
    assert chart.feed(pe.Clear(estimate_ms=700, cursor_ms=200)) == [HearUntil(200), StartGrace()]
    assert chart.is_in_grace and not chart.is_final


def test_rule5_a_second_clear_changes_nothing() -> None:
    chart = PlaybackChart()
    chart.feed(pe.Clear(estimate_ms=700, cursor_ms=0))
    assert chart.feed(pe.Clear(estimate_ms=1500, cursor_ms=0)) == []  # the buffer was cleared

    provisional = by_ack()
    provisional.feed(pe.Clear(estimate_ms=0, cursor_ms=200))
    assert provisional.feed(pe.Clear(estimate_ms=0, cursor_ms=400)) == []
    assert provisional.is_in_grace


@pytest.mark.parametrize("settle", ["heard_in_full", "played_out"])
def test_rule5_a_clear_after_the_reply_was_heard_in_full_keeps_it(settle: str) -> None:
    chart = by_ack() if settle == "heard_in_full" else PlaybackChart()
    chart.feed(pe.Finish(acked_all=True, clock_done=True))
    assert heard(chart) == settle
    assert chart.feed(pe.Clear(estimate_ms=1200, cursor_ms=1200)) == []
    assert heard(chart) == settle


def test_rule6_the_clients_first_ack_within_the_grace_sets_the_cut() -> None:
    chart = by_ack()
    chart.feed(pe.Clear(estimate_ms=0, cursor_ms=0))
    assert chart.feed(pe.Ack(cursor_ms=2500)) == [HearUntil(2500)]
    assert heard(chart) == "cut_by_ack" and chart.is_final


def test_rule6_a_truncate_within_the_grace_sets_the_cut() -> None:
    chart = by_ack()
    chart.feed(pe.Clear(estimate_ms=0, cursor_ms=0))
    assert chart.feed(pe.Truncate(audio_end_ms=1800)) == [HearUntil(1800)]
    assert heard(chart) == "cut_by_truncate"


def test_rule6_after_the_grace_the_cursors_cut_is_final() -> None:
    chart = by_ack()
    chart.feed(pe.Clear(estimate_ms=0, cursor_ms=300))
    assert chart.feed(pe.GraceOver()) == []
    assert heard(chart) == "cut_at_cursor" and chart.is_final
    assert chart.feed(pe.Ack(cursor_ms=2500)) == []


def test_rule7_an_ack_past_an_estimated_cut_raises_it_still_an_estimate() -> None:
    chart = PlaybackChart()
    chart.feed(pe.Clear(estimate_ms=500, cursor_ms=0))
    assert chart.feed(pe.Ack(cursor_ms=400)) == []  # not past it: the estimate stands
    assert chart.feed(pe.Ack(cursor_ms=900, raises=True)) == [HearUntil(900)]
    assert heard(chart) == "cut_estimated"


@pytest.mark.parametrize(
    "before",
    [
        [],
        [pe.Finish()],
        [pe.Finish(clock_done=True)],
        [pe.Finish(), pe.Clear(estimate_ms=900, cursor_ms=0)],
        [pe.Acknowledge(), pe.Finish(acked_all=True)],
        [pe.Acknowledge(), pe.Clear(estimate_ms=0, cursor_ms=100)],
    ],
    ids=["unheard", "estimated", "played_out", "cut_estimated", "heard_in_full", "provisional"],
)
@pytest.mark.parametrize("by", ["truncate", "ack"])
def test_rule8_the_clients_truncate_cuts_from_every_state_but_a_final_cut(
    before: list[pe.PlaybackEvent], by: str
) -> None:
    chart = PlaybackChart()
    for event in before:
        chart.feed(event)
    cut: pe.PlaybackEvent = (
        pe.Truncate(audio_end_ms=600) if by == "truncate" else pe.Ack(cursor_ms=600, truncate=True)
    )
    assert chart.feed(cut) == [HearUntil(600)]
    assert heard(chart) == "cut_by_truncate" and chart.is_final


def test_rule9_the_switch_withdraws_estimates_the_client_will_speak_of() -> None:
    playing, other, named, cut = (PlaybackChart() for _ in range(4))
    playing.feed(pe.Finish())
    other.feed(pe.Finish(clock_done=True))
    named.feed(pe.Finish(clock_done=True))
    cut.feed(pe.Clear(estimate_ms=400, cursor_ms=0))

    assert playing.feed(pe.Acknowledge()) == [HearNothing()]
    assert heard(playing) == "unheard"
    assert other.feed(pe.Acknowledge()) == []
    assert heard(other) == "heard_in_full"  # played out before the client said anything
    assert named.feed(pe.Acknowledge(this_reply=True)) == [HearNothing()]
    assert cut.feed(pe.Acknowledge()) == []
    assert heard(cut) == "cut_estimated"


@pytest.mark.parametrize("final", ["cut_by_ack", "cut_by_truncate", "cut_at_cursor"])
def test_rule10_a_final_cut_never_changes(final: str) -> None:
    chart = by_ack()
    chart.feed(pe.Clear(estimate_ms=0, cursor_ms=100))
    if final == "cut_by_ack":
        chart.feed(pe.Ack(cursor_ms=300))
    elif final == "cut_by_truncate":
        chart.feed(pe.Truncate(audio_end_ms=300))
    else:
        chart.feed(pe.GraceOver())
    assert heard(chart) == final
    events: list[pe.PlaybackEvent] = [
        pe.Ack(cursor_ms=900, acked_all=True, raises=True),
        pe.Ack(cursor_ms=900, truncate=True),
        pe.Truncate(audio_end_ms=50),
        pe.Clear(estimate_ms=900, cursor_ms=900),
        pe.Finish(acked_all=True, clock_done=True),
        pe.GraceOver(),
        pe.ClockPlayed(),
        pe.Acknowledge(this_reply=True),
    ]
    for event in events:
        assert chart.feed(event) == [], event
    assert heard(chart) == final
