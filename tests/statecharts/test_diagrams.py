"""The committed diagrams are what `turntaker diagrams` writes now."""

from __future__ import annotations

from pathlib import Path

import pytest

from statecharts.diagrams import normalize_svg, render_all

DOCS = Path(__file__).resolve().parents[2] / "docs" / "statecharts"


@pytest.mark.parametrize("diagram", render_all(), ids=lambda d: d.name)
def test_committed_diagrams_are_not_stale(diagram: object) -> None:
    from statecharts.diagrams import Diagram

    assert isinstance(diagram, Diagram)
    mmd = DOCS / f"{diagram.name}.mmd"
    svg = DOCS / f"{diagram.name}.svg"
    assert mmd.read_text() == diagram.mermaid, "stale: run `turntaker diagrams`"
    assert normalize_svg(svg.read_text()) == diagram.svg, "stale: run `turntaker diagrams`"


def test_session_diagram_shows_the_required_states() -> None:
    text = (DOCS / "session_chart.mmd").read_text()
    for state in ("listening", "generating", "draining", "interrupted"):
        assert f"as {state}" in text
    svg = (DOCS / "session_chart.svg").read_text()
    assert "<svg" in svg and "Interrupted" in svg and "Draining" in svg


def test_playback_diagram_shows_who_cut_and_both_bases() -> None:
    # Issue 35: what was heard is a chart of its own, exported like the others.
    text = (DOCS / "playback_chart.mmd").read_text()
    for state in (
        "sending",
        "played_out",
        "heard_in_full",
        "cut_estimated",
        "cut_provisional",
        "cut_by_ack",
        "cut_by_truncate",
        "cut_at_cursor",
        "by_estimate",
        "by_ack",
    ):
        assert f"as {state}" in text, state
    assert "Cut by truncate" in (DOCS / "playback_chart.svg").read_text()
