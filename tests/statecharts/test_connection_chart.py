"""ConnectionChart: drops, resumes and the grace (statecharts/connection.py)."""

from __future__ import annotations

from statecharts import connection_events as cev
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
    assert chart.feed(cev.Drop()) == [ArmGrace()]
    assert chart.active == {"detached"}
    chart = ConnectionChart()
    assert chart.feed(cev.Leave()) == [EndUnattended("client_left")]
    assert chart.active == {"ended"}


def test_a_resume_within_the_grace_cancels_it_and_attaches() -> None:
    chart = ConnectionChart()
    chart.feed(cev.Drop())
    assert chart.feed(cev.Resume()) == [CancelGrace(), AttachConnection()]
    assert chart.active == {"attached"}


def test_a_resume_while_attached_replaces_the_open_connection_first() -> None:
    chart = ConnectionChart()
    assert chart.feed(cev.Resume()) == [ReplaceConnection(), AttachConnection()]


def test_the_grace_or_an_overflow_ends_a_detached_session_as_a_client_leaving() -> None:
    for event, cause in ((cev.Expire(), "grace_expired"), (cev.Overflow(), "journal_overflow")):
        chart = ConnectionChart()
        chart.feed(cev.Drop())
        assert chart.feed(event) == [EndUnattended(cause)]  # type: ignore[arg-type]
        assert chart.active == {"ended"}


def test_a_late_grace_timer_or_overflow_decides_nothing_while_attached() -> None:
    chart = ConnectionChart()
    chart.feed(cev.Drop())
    chart.feed(cev.Resume())
    assert chart.feed(cev.Expire()) == []
    assert chart.feed(cev.Overflow()) == []
    assert chart.active == {"attached"}


def test_an_ended_session_never_resumes() -> None:
    for end in (cev.Finish(), cev.Leave()):
        chart = ConnectionChart()
        chart.feed(end)
        assert chart.feed(cev.Resume()) == []
        assert chart.feed(cev.Drop()) == []
        assert chart.active == {"ended"}
    chart = ConnectionChart()
    chart.feed(cev.Drop())
    chart.feed(cev.Finish())
    assert chart.feed(cev.Resume()) == []
