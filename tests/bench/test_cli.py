"""bench/cli.py: every bench's `main` (each test names the rule it guards)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench import cli

SECTION = "## Toy\n\nCommand: `{command}`.\n\n| figure | value |\n|---|---:|\n| n | {n} |\n"


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--url", help="a running server (local: not quoted)")


def _run(args: argparse.Namespace, command: str) -> cli.Outcome:
    if args.n < 0:
        raise cli.Usage("--n: a count")
    return cli.Outcome(SECTION.format(command=command, n=args.n), failed=args.n == 13)


def _bench(doc: Path | None) -> cli.Bench:
    return cli.Bench("bench.toy", "A toy bench.", doc, _arguments, _run, local=("--url",))


def _doc(tmp_path: Path) -> Path:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Other\n\nkept\n", encoding="utf-8")
    return doc


def test_rule_2_without_write_it_prints_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _doc(tmp_path)
    before = doc.read_text(encoding="utf-8")
    assert cli.main(_bench(doc), ["--n", "5"]) == 0
    assert "| n | 5 |" in capsys.readouterr().out
    assert cli.main(_bench(doc), ["--n", "5", "--no-write"]) == 0
    assert doc.read_text(encoding="utf-8") == before, "a trial run rewrote the document"


def test_rules_2_3_write_replaces_its_section_in_the_given_doc(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = _doc(tmp_path)
    assert cli.main(_bench(tmp_path / "unused.md"), ["--write", "--doc", str(doc)]) == 0
    assert cli.main(_bench(tmp_path / "unused.md"), ["--n", "7", "--write", "--doc", str(doc)]) == 0
    text = doc.read_text(encoding="utf-8")
    assert "kept" in text, "--write replaced another bench's section"
    assert text.count("## Toy") == 1 and "| n | 7 |" in text and "| n | 3 |" not in text
    assert not (tmp_path / "unused.md").exists()


def test_rule_3_files_are_written_beside_the_document_and_only_with_write(tmp_path: Path) -> None:
    written: list[Path] = []

    def run(args: argparse.Namespace, command: str) -> cli.Outcome:
        return cli.Outcome(SECTION.format(command=command, n=1), files=written.append)

    bench = cli.Bench("bench.toy", None, _doc(tmp_path), _arguments, run)
    cli.main(bench, [])
    assert written == []
    cli.main(bench, ["--write"])
    assert written == [tmp_path]


def test_rule_3_a_section_without_its_heading_is_not_written(tmp_path: Path) -> None:
    def run(args: argparse.Namespace, command: str) -> cli.Outcome:
        return cli.Outcome("no heading\n")

    bench = cli.Bench("bench.toy", None, _doc(tmp_path), _arguments, run)
    with pytest.raises(ValueError, match="heading"):
        cli.main(bench, ["--write"])


def test_rule_4_the_command_is_canonical_without_harness_or_local_options(
    tmp_path: Path,
) -> None:
    doc = _doc(tmp_path)
    argv = ["--url", "127.0.0.1:9", "--quick", "--write", "--doc", str(doc), "--n", "4"]
    cli.main(_bench(doc), argv)
    text = doc.read_text(encoding="utf-8")
    assert "Command: `python -m bench.toy --n 4 --quick`." in text, text
    assert "127.0.0.1" not in text and str(doc) not in text
    order = ["--n", "--quick", "--url"]
    assert cli.command("bench.toy", ["--quick", "--n=2", "--url=x"], ("--url",), order) == (
        "python -m bench.toy --n=2 --quick"
    )
    assert cli.command("bench.toy", ["--no-write", "--doc=d.md"]) == "python -m bench.toy"


def test_rule_5_usage_errors_and_failures_have_their_exit_status(tmp_path: Path) -> None:
    bench = _bench(_doc(tmp_path))
    with pytest.raises(SystemExit) as usage:
        cli.main(bench, ["--n", "-1"])
    assert usage.value.code == 2
    with pytest.raises(SystemExit) as unknown:
        cli.main(bench, ["--bogus"])
    assert unknown.value.code == 2
    assert cli.main(bench, ["--n", "13"]) == 1, "a failure found by the run"


def test_rule_2_a_bench_without_a_document_takes_no_write() -> None:
    with pytest.raises(SystemExit):
        cli.main(_bench(None), ["--write"])
    assert cli.main(_bench(None), ["--n", "2"]) == 0
