"""bench/report.py: one section written, every other kept; cells that read the same in every
table (each test names the rule it guards)."""

from __future__ import annotations

from pathlib import Path

from bench import report


def test_rule_1_a_section_is_replaced_in_place_and_the_others_kept(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text(
        "# Benchmarks\n\n## A\n\na numbers\n\n## B\n\nold b\n\n## C\n\nc numbers\n",
        encoding="utf-8",
    )
    report.write_section("## B", "## B\n\nnew b\n", doc)
    text = doc.read_text(encoding="utf-8")
    assert "old b" not in text and text.count("## B") == 1
    assert text.index("a numbers") < text.index("new b") < text.index("c numbers")


def test_rule_1_a_new_section_is_appended_and_a_new_document_started(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## A\n\na numbers\n", encoding="utf-8")
    report.write_section("## Z", "## Z\n\nz\n", doc)
    assert doc.read_text(encoding="utf-8") == "# Benchmarks\n\n## A\n\na numbers\n\n## Z\n\nz\n"
    fresh = tmp_path / "sub" / "none.md"
    report.write_section("## Z", "## Z\n\nz\n", fresh)
    assert fresh.read_text(encoding="utf-8").startswith("# Benchmarks\n\n## Z")


def test_rule_2_cells_read_the_same_in_every_table() -> None:
    assert report.median_p90([0.010, 0.020, 0.030]) == "20 / 28"
    assert report.median_p90([0.0101, 0.0103], 1) == "10.2 / 10.3"
    assert report.median_p90([]) == "-"
    assert report.median_p90([float("nan")]) == "-", "nothing measured"
    assert report.share(1, 4) == "1/4 (25%)"
    assert report.share(0, 0) == "-"
    assert report.ms(0.0123) == "12.3"
    assert report.ms(0.0123, 0) == "12"
    assert report.ms(float("nan")) == "-"
