"""The decode benchmark runs and rewrites only its own section of docs/benchmarks.md."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# `bench` is not an installed package (only orchestrator/statecharts are), and pytest's
# entry point does not put the repo root on sys.path; load the script by its path.
_PATH = Path(__file__).resolve().parents[3] / "bench" / "protocol_decode.py"
_SPEC = importlib.util.spec_from_file_location("bench_protocol_decode", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)
HEADING, run, write_section = bench.HEADING, bench.run, bench.write_section


def test_bench_table_names_both_decoders_and_the_command() -> None:
    table = run(n=50, repeats=3)
    assert table.startswith(HEADING)
    assert "python -m bench.protocol_decode" in table
    assert "`decode_client_event`" in table
    assert "`json.loads` + `base64.b64decode`" in table


def test_bench_replaces_its_section_and_keeps_the_others(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\n## VAD\n\nvad numbers\n\n"
        f"{HEADING}\n\nold numbers\n\n## Latency\n\nlatency numbers\n",
        encoding="utf-8",
    )
    write_section(f"{HEADING}\n\nnew numbers\n", doc)
    text = doc.read_text(encoding="utf-8")
    assert "old numbers" not in text
    assert text.count(HEADING) == 1
    assert text.index("vad numbers") < text.index("new numbers") < text.index("latency numbers")


def test_bench_appends_its_section_when_absent(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## VAD\n\nvad numbers\n", encoding="utf-8")
    write_section(f"{HEADING}\n\nnew numbers\n", doc)
    text = doc.read_text(encoding="utf-8")
    assert text.startswith("# Benchmarks\n\n## VAD\n\nvad numbers\n\n" + HEADING)
    missing = tmp_path / "none.md"
    write_section(f"{HEADING}\n\nx\n", missing)
    assert HEADING in missing.read_text(encoding="utf-8")
