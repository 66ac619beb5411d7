"""bench/voice.py on two sentences, written to a scratch document: a row per voice with finite
numbers (real-time factor, first clause audio, WER), so the full run (`make bench`) cannot rot
unseen. Timings are never asserted; intelligibility loosely (two short clear sentences)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench import voice


def test_two_sentences_write_a_row_per_voice_with_finite_numbers(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    assert voice.main(["--sentences", "2", "--write", "--doc", str(doc)]) == 0
    section = doc.read_text(encoding="utf-8")
    assert "`python -m bench.voice --sentences 2`" in section, "command not quoted"
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert [row.split("|")[1].strip() for row in rows] == ["`joe`", "`slt`"]
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1] == "2"
        for pair in cells[2:4]:
            median, p90 = (float(v) for v in pair.split(" / "))
            assert math.isfinite(median) and 0 < median <= p90, row
        assert float(cells[4]) > 1.0, "two sentences last more than a second"
        assert float(cells[5].rstrip("%")) <= 25.0, row


def test_an_unknown_voice_is_a_usage_error() -> None:
    with pytest.raises(SystemExit) as exited:
        voice.main(["--voices", "alloy"])
    assert exited.value.code == 2
