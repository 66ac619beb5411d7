"""Typed chart events: every event class names an event its chart has, every event of a chart
has its class, no production code sends a chart an event by name, and a name the chart does
not know is an error, never a silent no-op (statecharts/base.py rules 3 and 4)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from statecharts import connection_events, playback_events, response_events, session_events
from statecharts.base import ChartEvent, UnknownEvent
from statecharts.connection import ConnectionChart
from statecharts.playback import PlaybackChart
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


def test_rule4_playback_events_are_exactly_the_playback_charts() -> None:
    classes = _classes(playback_events, playback_events.PlaybackEvent)
    assert set(classes) == PlaybackChart().event_names


def test_rule4_connection_events_are_exactly_the_connection_charts() -> None:
    classes = _classes(connection_events, connection_events.ConnectionEvent)
    assert set(classes) == ConnectionChart().event_names


ROOT = Path(__file__).resolve().parents[2]
# Everything that is not a test: a chart is fed typed events there, never a name.
PRODUCTION = ("orchestrator", "statecharts", "fuzzing", "bench", "turntaker_models")


def _calls_by_name(path: Path, root: Path = ROOT) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in {"handle", "send"}
            and node.args
            and isinstance(node.args[0], ast.Constant | ast.IfExp)
            and any(
                isinstance(c, ast.Constant) and isinstance(c.value, str)
                for c in ast.walk(node.args[0])
            )
            and "chart" in ast.unparse(node.func.value)
        ):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_rule4_nothing_sends_a_chart_an_event_by_name() -> None:
    offenders = [
        call
        for package in PRODUCTION
        for path in sorted((ROOT / package).rglob("*.py"))
        for call in _calls_by_name(path)
    ]
    assert offenders == []


def test_rule4_the_by_name_check_sees_a_call_by_name(tmp_path: Path) -> None:
    source = tmp_path / "link.py"
    source.write_text('self.chart.handle("leave" if clean else "drop")\nchart.feed(Drop())\n')
    assert len(_calls_by_name(source, tmp_path)) == 1


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
