"""bench/gpu_omni.py on the tiny weights (`--quick`, direct mode: the three stages chained in
one process, no tritonserver): its section has every row of its table with finite numbers for
both batching sides, so the GPU run (bench/gpu_omni.sh) cannot rot unseen; and direct mode
imports neither tritonclient nor nvidia-pytriton (the GPU node has neither)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import gpu_omni

ROOT = Path(__file__).resolve().parents[2]
METRICS = (
    "time to first audio, ms",
    "codec frames/s per stream",
    "summed codec frames/s",
    "cancel -> last stage stopped, ms",
)
# Run in a child: pytest's own process may have imported tritonclient already.
RUN = """
import sys
from bench import gpu_omni
code = gpu_omni.main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("tritonclient", "pytriton"))
assert not loaded, f"direct mode imported {loaded}"
raise SystemExit(code)
"""


def _number(cell: str) -> float:
    return float(cell.strip().rstrip("x").replace(",", ""))


def test_quick_direct_run_writes_every_row_for_both_sides_without_triton(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Other bench\n\nkept\n", encoding="utf-8")
    argv = ["--weights", "tiny", "--quick", "--write", "--doc", str(doc)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", RUN, *argv], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = doc.read_text(encoding="utf-8")
    assert "kept" in text, "--write replaced another bench's section"
    section = text[text.index(gpu_omni.HEADINGS["tiny"]) :]
    assert "`python -m bench.gpu_omni --weights tiny --quick`" in section, "command not quoted"
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 12 and cells[0] in METRICS:
            rows[(cells[0], int(cells[1]))] = cells
    plan = gpu_omni.plan_for("tiny", quick=True)
    for metric in METRICS:
        for streams in plan.concurrency:
            row = rows.get((metric, streams))
            assert row is not None, f"no row for {metric} at {streams} streams"
            assert all(int(n) >= 1 for n in row[2].split("/")), f"{metric}: no samples {row}"
            values = [_number(c) for c in row[3:10]]
            assert all(math.isfinite(v) and v > 0 for v in values), f"{metric}: {row}"
    anchor = rows[(METRICS[0], 1)][11]
    assert "vllm-omni async-chunk 523 ms" in anchor and "234 ms" in anchor, "anchors missing"


def test_targets_say_met_or_missed_per_side_at_10_streams() -> None:
    assert gpu_omni._target("summed codec frames/s", {True: 6.0, False: 1.2}) == (
        ">= 5x of 1 stream: batched 6.00x met, unbatched 1.20x missed"
    )
    assert "batched 2.50x missed" in gpu_omni._target("time to first audio, ms", {True: 2.5})
    assert gpu_omni._target("codec frames/s per stream", {True: 1.0}) == ""


def test_a_given_server_is_one_side_so_both_sides_are_refused() -> None:
    with pytest.raises(SystemExit) as exited:
        gpu_omni.main(["--url", "127.0.0.1:1", "--board", "/nonexistent"])
    assert exited.value.code == 2


@pytest.mark.parametrize("batching", [True, False])
def test_a_triton_side_reaches_the_stage_processes_as_its_setting(batching: bool) -> None:
    from orchestrator.triton.launcher import TritonConfig, TritonServer
    from turntaker_models.settings import OMNI_BATCHING_ENV, OMNI_MAX_STREAMS_ENV

    server = TritonServer(
        TritonConfig(Path("model_repository"), omni_batching=batching, omni_max_streams=40)
    )
    env = server.model_settings().environment()
    assert env[OMNI_BATCHING_ENV] == ("1" if batching else "0")
    assert env[OMNI_MAX_STREAMS_ENV] == "40"
