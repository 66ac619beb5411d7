"""The session chart's lifetime region (statecharts/session.py, "Drain"): when a drained
session ends."""

from __future__ import annotations

from statecharts import session_events as ev
from statecharts.effects import EndSession, InterruptResponses, WindDown
from statecharts.session import SessionChart


def _generating(**settings: object) -> SessionChart:
    chart = SessionChart(**settings)  # type: ignore[arg-type]
    chart.feed(ev.ResponseStarted("r1"))
    return chart


def test_drain_with_nothing_generating_ends_at_once() -> None:
    chart = SessionChart()
    assert chart.feed(ev.Drain()) == [EndSession()]
    assert "ended" in chart.active


def test_drain_with_a_reply_already_generated_does_not_wait_for_its_playback() -> None:
    chart = _generating()
    chart.feed(ev.ResponseFinished("r1", audio_pending=True))
    assert "draining" in chart.active
    assert chart.feed(ev.Drain()) == [EndSession()]


def test_drain_while_generating_winds_down_until_the_answer_finishes() -> None:
    chart = _generating()
    assert chart.feed(ev.Drain()) == [WindDown()]
    assert "winding_down" in chart.active and "generating" in chart.active
    # Another response's end is not this answer's.
    assert chart.feed(ev.ResponseFinished("r0")) == []
    assert chart.feed(ev.ResponseFinished("r1", audio_pending=True)) == [EndSession()]
    assert "ended" in chart.active


def test_drain_while_paused_generating_winds_down_too() -> None:
    chart = _generating(interruption="pause")
    chart.feed(ev.SpeechStarted(100))
    assert "paused_generating" in chart.active
    assert chart.feed(ev.Drain()) == [WindDown()]


def test_drain_over_ends_the_session_and_its_close_cuts_the_answer() -> None:
    chart = _generating()
    chart.feed(ev.Drain())
    assert chart.feed(ev.DrainOver()) == [EndSession()]
    # The core then closes as `close` does: the answer still generating is interrupted.
    assert InterruptResponses("client_cancelled") in chart.feed(ev.Close())


def test_an_ended_lifetime_takes_no_second_end() -> None:
    chart = _generating()
    chart.feed(ev.Drain())
    chart.feed(ev.DrainOver())
    assert chart.feed(ev.ResponseFinished("r1")) == []
    assert chart.feed(ev.Drain()) == []
