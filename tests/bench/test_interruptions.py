"""bench/interruptions.py `--quick` against the session's tritonserver (it needs `null`, `vad`,
`asr` and `cancel`, e.g. TURNTAKER_TEST_MODELS=null,vad,asr,cancel): its section has a row for
every mode, speech source (synthetic, human) and class with finite numbers where the class has
them, and the pause-mode targets per source, so the full run (`make bench`) cannot rot unseen.
Timings are never asserted."""

from __future__ import annotations

import math
import re
from pathlib import Path

from bench import interruptions
from bench.overlap_corpus import KINDS, ORIGINS, build_corpus
from orchestrator.triton import TritonServer

COLUMNS = (
    "mode",
    "speech",
    "class",
    "items",
    "false interruptions",
    "missed interruptions",
    "onset -> speech_started",
    "speech_started -> paused",
    "onset -> paused",
    "onset -> interrupt",
    "answers completed",
    "decisions",
    "without transcript",
)
# "part/whole (percent)", with its 95% interval where the cell is an error rate.
SHARE = re.compile(r"^(\d+)/(\d+) \((\d+)%(?:; (\d+)-(\d+)%)?\)$")


def _latency(cell: str) -> tuple[float, float]:
    median, p90 = (float(v) for v in cell.split(" / "))
    assert math.isfinite(median) and math.isfinite(p90) and 0 <= median <= p90, cell
    return median, p90


def _share(cell: str) -> tuple[int, int]:
    match = SHARE.match(cell)
    assert match, f"not a share: {cell!r}"
    part, whole = int(match[1]), int(match[2])
    assert 0 <= part <= whole and whole > 0
    if match[4] is not None:
        assert int(match[4]) <= int(match[3]) <= int(match[5]), f"rate outside its interval: {cell}"
    return part, whole


def test_quick_run_writes_every_row_with_finite_numbers(
    triton_server: TritonServer, tmp_path: Path
) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Other bench\n\nkept\n", encoding="utf-8")
    # 10 sessions at a time, not the default 4: each runs in real time, so a mode's 20 items
    # take about 2 rounds instead of 5 (the same items, the same rows).
    argv = ["--quick", "--parallel", "10", "--url", triton_server.grpc_url]
    assert interruptions.main([*argv, "--write", "--doc", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert "kept" in text, "the bench replaced another bench's section"
    section = text[text.index(interruptions.HEADING) :]
    quoted = "`python -m bench.interruptions --quick --parallel 10`"
    assert quoted in section, "command not quoted"
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(COLUMNS) and cells[0] in ("immediate", "pause"):
            rows[(cells[0], cells[1], cells[2])] = dict(zip(COLUMNS, cells, strict=True))
    plan = interruptions.QUICK_PLAN
    present = {(item.origin, item.kind) for item in build_corpus(plan)}
    per_offset = {"synthetic": plan.interruptions, "human": plan.human_interruptions}
    for mode in ("immediate", "pause"):
        for origin in ORIGINS:
            for kind in (*(k for k in KINDS if (origin, k) in present), "all"):
                row = rows.get((mode, origin, kind))
                assert row is not None, f"no row for {mode} / {origin} / {kind}"
                assert int(row["items"]) >= 1
                _share(row["answers completed"])
            speech = rows[(mode, origin, "interruption")]
            assert int(speech["items"]) == per_offset[origin] * len(plan.offsets_s)
            _share(speech["missed interruptions"])
            for kind in KINDS:
                if (origin, kind) in present and kind in ("backchannel", "burst", "nonspeech"):
                    _share(rows[(mode, origin, kind)]["false interruptions"])
            _share(rows[(mode, origin, "all")]["false interruptions"])
            _latency(speech["onset -> speech_started"])
            _latency(rows[(mode, origin, "all")]["onset -> speech_started"])
            missed, whole = _share(speech["missed interruptions"])
            if origin == "synthetic" or missed < whole:  # human: when one was cut at all
                _latency(speech["onset -> interrupt"])
    for kind in ("interruption", "backchannel"):
        row = rows[("pause", "synthetic", kind)]
        _latency(row["speech_started -> paused"])
        _latency(row["onset -> paused"])
        assert row["decisions"] != "-", f"pause / {kind}: no overlap.decision seen"
        _share(row["without transcript"])
    for origin in ORIGINS:
        for kind in KINDS:
            if (origin, kind) not in present:
                continue
            row = rows[("immediate", origin, kind)]
            assert row["speech_started -> paused"] == "-", "paused in v1 mode"
    targets = section[section.index("Targets (pause mode), per speech source:") :]
    for origin in ORIGINS:
        for target in ("false interruptions <=", "missed interruptions <=", "-> `paused` <=",
                       "onset -> interrupt median <="):  # fmt: skip
            lines = targets.splitlines()
            line = next(x for x in lines if x.startswith(f"- {origin}: ") and target in x)
            assert line.endswith((", met", ", MISSED")), line
            assert origin == "human" or "nan" not in line, line
    assert "Machine load: load average" in section, "the run's load is not recorded"
