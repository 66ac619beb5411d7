"""ConnectionChart: drops, resumes and the grace (statecharts/connection.py)."""

from __future__ import annotations

from statecharts.connection import ConnectionChart
from statecharts.effects import (
    ArmGrace,
    AttachConnection,
    CancelGrace,
    EndUnattended,
    ReplaceConnection,
)


def test_a_drop_starts_the_grace_and_a_clean_close_ends_at_once() -> None:
    chart = ConnectionChart()
    assert chart.handle("drop") == [ArmGrace()]
    assert chart.active == {"detached"}
    chart = ConnectionChart()
    assert chart.handle("leave") == [EndUnattended("client_left")]
    assert chart.active == {"ended"}


def test_a_resume_within_the_grace_cancels_it_and_attaches() -> None:
    chart = ConnectionChart()
    chart.handle("drop")
    assert chart.handle("resume") == [CancelGrace(), AttachConnection()]
    assert chart.active == {"attached"}


def test_a_resume_while_attached_replaces_the_open_connection_first() -> None:
    chart = ConnectionChart()
    assert chart.handle("resume") == [ReplaceConnection(), AttachConnection()]


def test_the_grace_or_an_overflow_ends_a_detached_session_as_a_client_leaving() -> None:
    for event, cause in (("expire", "grace_expired"), ("overflow", "journal_overflow")):
        chart = ConnectionChart()
        chart.handle("drop")
        assert chart.handle(event) == [EndUnattended(cause)]  # type: ignore[arg-type]
        assert chart.active == {"ended"}


def test_a_late_grace_timer_or_overflow_decides_nothing_while_attached() -> None:
    chart = ConnectionChart()
    chart.handle("drop")
    chart.handle("resume")
    assert chart.handle("expire") == []
    assert chart.handle("overflow") == []
    assert chart.active == {"attached"}


def test_an_ended_session_never_resumes() -> None:
    for end in ("finish", "leave"):
        chart = ConnectionChart()
        chart.handle(end)
        assert chart.handle("resume") == []
        assert chart.handle("drop") == []
        assert chart.active == {"ended"}
    chart = ConnectionChart()
    chart.handle("drop")
    chart.handle("finish")
    assert chart.handle("resume") == []
