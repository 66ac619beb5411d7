"""bench/gpu_omni.py on the tiny weights (`--quick`, the session's tritonserver: it needs
`qwen3_omni` and `cancel`, e.g. TURNTAKER_TEST_MODELS=qwen3_omni,cancel): its section has every
row of its table with finite numbers, so the GPU run (bench/gpu_omni.sh) cannot rot unseen."""

from __future__ import annotations

import math
from pathlib import Path

from bench import gpu_omni
from orchestrator.triton import TritonServer

METRICS = (
    "time to first audio, ms",
    "codec frames/s per stream",
    "real-time factor (frames/s / 12.5)",
    "cancel -> last stage stopped, ms",
)


def _number(cell: str) -> float:
    return float(cell.strip().rstrip("x").replace(",", ""))


def test_quick_run_writes_every_row_with_finite_numbers(
    triton_server: TritonServer, tmp_path: Path
) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Other bench\n\nkept\n", encoding="utf-8")
    argv = ["--weights", "tiny", "--quick", "--url", triton_server.grpc_url]
    argv += ["--board", str(triton_server.board_path), "--write", "--doc", str(doc)]
    assert gpu_omni.main(argv) == 0
    text = doc.read_text(encoding="utf-8")
    assert "kept" in text, "--write replaced another bench's section"
    section = text[text.index(gpu_omni.HEADINGS["tiny"]) :]
    assert "`python -m bench.gpu_omni --weights tiny --quick" in section, "command not quoted"
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 8 and cells[0] in METRICS:
            rows[(cells[0], int(cells[1]))] = cells
    plan = gpu_omni.plan_for("tiny", quick=True)
    for metric in METRICS:
        for streams in plan.concurrency:
            cells = rows.get((metric, streams))
            assert cells is not None, f"no row for {metric} at {streams} streams"
            assert int(cells[2]) >= 1, f"{metric} at {streams} streams has no samples"
            values = [_number(c) for c in cells[3:7]]
            assert all(math.isfinite(v) and v > 0 for v in values), f"{metric}: {cells}"
    assert "vllm-omni async-chunk 1,629 ms" in rows[(METRICS[0], 10)][7], "anchor missing"
    assert "234 ms" in rows[(METRICS[0], 1)][7], "the report's first-packet anchor is missing"
