"""Typed chart events: every event class names an event its chart has, every event of a chart
has its class, and a name the chart does not know is an error, never a silent no-op
(statecharts/base.py rules 3 and 4)."""

from __future__ import annotations

import dataclasses

import pytest

from statecharts import response_events, session_events
from statecharts.base import ChartEvent, UnknownEvent
from statecharts.connection import ConnectionChart
from statecharts.response import ResponseChart
from statecharts.session import SessionChart


def _classes(module: object, base: type[ChartEvent]) -> dict[str, type[ChartEvent]]:
    found = {
        cls.name: cls
        for cls in vars(module).values()
        if isinstance(cls, type) and issubclass(cls, base) and cls is not base
    }
    return found


def test_rule4_session_events_are_exactly_the_session_charts() -> None:
    classes = _classes(session_events, session_events.SessionEvent)
    assert set(classes) == SessionChart().event_names


def test_rule4_response_events_are_exactly_the_response_charts() -> None:
    classes = _classes(response_events, response_events.ResponseEvent)
    assert set(classes) == ResponseChart("r1", 1).event_names


@pytest.mark.parametrize("chart", [SessionChart(), ResponseChart("r1", 1), ConnectionChart()])
def test_rule3_an_unknown_event_name_raises(chart: SessionChart) -> None:
    with pytest.raises(UnknownEvent):
        chart.handle("speech_startd", audio_start_ms=1)


def test_rule3_a_known_event_without_transition_is_dropped() -> None:
    chart = ResponseChart("r1", 1)
    assert chart.feed(response_events.Played()) == []  # `created`: nothing to play yet


def test_rule4_each_event_carries_its_fields_as_arguments() -> None:
    event = session_events.SpeechStopped(900, 800, speech_ms=250, heard="words")
    assert event.arguments() == {
        "audio_end_ms": 900,
        "buffered_ms": 800,
        "speech_ms": 250,
        "heard": "words",
        "waited": False,
    }
    assert all(dataclasses.is_dataclass(cls) for cls in (session_events.Commit,))
