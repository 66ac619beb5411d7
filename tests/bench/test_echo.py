"""bench/echo.py `--quick` end to end (its own tritonserver: `null` answering with the cascade's
voice, `vad`, `asr`, `cancel`, `turn`; the realtime server in its own process): its section has
a row for every setting and echo level with finite numbers where the row has them, the cost
lines and the targets, so the full run (`make bench`) cannot rot unseen. Timings and the
targets' verdicts are never asserted; one behaviour is: `null` answers with a voice (the
TURNTAKER_NULL_AUDIO option), so without cancellation its echo is heard as speech, which the
model's quiet tone never was."""

from __future__ import annotations

import math
import re
from pathlib import Path

from bench import echo
from bench.echo_corpus import VOICES

SHARE = re.compile(r"^(\d+)/(\d+) \((\d+)%\)$")
COLUMNS = [c.format(group="group") for c in echo.COLUMNS]


def _share(cell: str) -> tuple[int, int]:
    match = SHARE.match(cell)
    assert match, f"not a share: {cell!r}"
    part, whole = int(match[1]), int(match[2])
    assert 0 <= part <= whole and whole > 0
    return part, whole


def _latency(cell: str) -> None:
    median, p90 = (float(v) for v in cell.split(" / "))
    assert math.isfinite(median) and math.isfinite(p90) and 0 <= median <= p90, cell


def test_quick_run_writes_every_row_with_finite_numbers(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Other bench\n\nkept\n", encoding="utf-8")
    assert echo.main(["--quick", "--write", "--doc", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert "kept" in text, "the bench replaced another bench's section"
    section = text[text.index(echo.HEADING) :]
    assert "`python -m bench.echo --quick`" in section, "command not quoted"
    by_level = section[section.index("By echo level") : section.index("By delay")]
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for line in by_level.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(COLUMNS) and cells[0] in VOICES:
            rows[(cells[1], cells[3])] = dict(zip(COLUMNS, cells, strict=True))
    plan = echo.QUICK
    for setting in ("off", "on"):
        for level in plan.levels_db:
            row = rows.get((setting, f"{level:g} dB"))
            assert row is not None, f"no row for cancellation {setting}, {level:g} dB"
            _share(row["false barge-ins (echo alone)"])
            _share(row["echo heard as speech"])
            _share(row["interruptions cut by echo first"])
            if setting == "on":
                whole, after = (float(v) for v in row["ERLE dB (whole / after 1 s)"].split(" / "))
                assert math.isfinite(whole) and math.isfinite(after)
        free = rows.get((setting, "none"))
        assert free is not None, f"no echo-free row for cancellation {setting}"
        _share(free["interruptions missed"])
    _latency(rows[("off", "none")]["onset -> interrupt"])
    heard = sum(
        _share(rows[("off", f"{lv:g} dB")]["echo heard as speech"])[0] for lv in plan.levels_db
    )
    assert heard > 0, "the null voice's echo should sound like speech without cancellation"
    for line in ("server CPU per session-second", "the canceller alone"):
        found = next(x for x in section.splitlines() if line in x)
        assert "nan" not in found, found
    targets = section[section.index("Targets (cancellation on):") :]
    for target in ("false barge-ins from echo alone", "interruptions over echo missed",
                   "onset -> interrupt over echo", "no blind window"):  # fmt: skip
        found = next(x for x in targets.splitlines() if target in x)
        assert found.endswith((": met", ": MISSED")), found
