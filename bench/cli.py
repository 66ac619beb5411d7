"""One `main` for every benchmark: the same options, the same output, the same `--write`.

Rules:
1. A bench is a `Bench`: its module, its description, the document its section goes into
   (None: it reports no section, as the fuzzer), its own options (`arguments`), those of them
   that name this machine's passing things (a server's URL, a file) and `run(args, command)`,
   which measures and returns an `Outcome`.
2. A bench with a document takes `--write` (replace its section there) and `--doc PATH` (that
   document instead); without `--write` it only prints, so a trial run never rewrites the
   results. `--no-write` spells the default out.
3. A section's first line is its heading ("## Name"); the section is always printed, and
   written only with `--write`, replacing that one section (`report.write_section`); the
   files it comes with (plots) are written beside the document, and only then.
4. The command a section quotes is `python -m <module>` with the options as given, in the
   order the bench declares them, less the harness's own (`--write`, `--no-write`, `--doc`)
   and the bench's local ones: what reruns the measurement anywhere, the same however the
   options were ordered, with no temporary address in the document.
5. A wrong option or value is a usage error (exit status 2, argparse's), also when `run` finds
   it (`Usage`); the exit status is otherwise 0, or 1 when the run found a failure (a leak,
   a broken invariant).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import report

HARNESS_OPTIONS = ("--write", "--no-write", "--doc")


class Usage(Exception):
    """An option's value that `run` cannot take; reported as argparse reports one (rule 5)."""


@dataclass(frozen=True)
class Outcome:
    """What a run hands back: its section (rule 3), whether it found a failure (rule 5) and
    what writes its other files into a folder (the document's), if any."""

    section: str
    failed: bool = False
    files: Callable[[Path], None] | None = None


@dataclass(frozen=True)
class Bench:
    module: str  # "bench.load": what `python -m` runs
    description: str | None
    doc: Path | None
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, str], Outcome]
    local: tuple[str, ...] = ()  # options left out of the quoted command (rule 4)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that remembers the order its options were declared in (rule 4)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.declared: list[str] = []  # before argparse's own add_argument("-h", ...)
        super().__init__(*args, **kwargs)

    def add_argument(self, *names: Any, **kwargs: Any) -> argparse.Action:
        self.declared += [n for n in names if isinstance(n, str) and n.startswith("-")]
        return super().add_argument(*names, **kwargs)


def parser(bench: Bench) -> _Parser:
    """The bench's options, then the harness's (rule 2)."""
    parsed = _Parser(
        prog=f"python -m {bench.module}",
        description=bench.description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.arguments(parsed)
    if bench.doc is not None:
        parsed.add_argument(
            "--write",
            action=argparse.BooleanOptionalAction,
            default=False,
            help="replace this bench's section in the document (default: print only)",
        )
        parsed.add_argument("--doc", type=Path, default=bench.doc, help="%(default)s")
    return parsed


def command(
    module: str, argv: Sequence[str], local: Sequence[str] = (), order: Sequence[str] = ()
) -> str:
    """`python -m module` and the options of `argv` in their declared `order`, less the
    harness's and the `local` ones (rule 4)."""
    groups: list[list[str]] = []
    for word in argv:
        if word.startswith("-") or not groups:
            groups.append([word])
        else:
            groups[-1].append(word)  # a value of the option before it
    dropped = (*HARNESS_OPTIONS, *local)
    kept = [g for g in groups if g[0].split("=", 1)[0] not in dropped]
    rank = {name: i for i, name in enumerate(order)}
    kept.sort(key=lambda g: rank.get(g[0].split("=", 1)[0], len(rank)))
    return shlex.join(["python", "-m", module, *(word for g in kept for word in g)])


def main(bench: Bench, argv: Sequence[str] | None = None) -> int:
    """Parse, run, print, and write when asked (rules 2-5); the exit status."""
    given = list(sys.argv[1:] if argv is None else argv)
    options = parser(bench)
    args = options.parse_args(given)
    try:
        outcome = bench.run(args, command(bench.module, given, bench.local, options.declared))
    except Usage as error:
        options.error(str(error))
    if outcome.section:
        sys.stdout.write(outcome.section)
        sys.stdout.flush()
    if bench.doc is not None and args.write:
        heading = outcome.section.splitlines()[0] if outcome.section else ""
        if not heading.startswith("## "):
            raise ValueError(f"{bench.module}: a section starts with its heading, not {heading!r}")
        report.write_section(heading, outcome.section, args.doc)
        if outcome.files is not None:
            outcome.files(Path(args.doc).parent)
    return 1 if outcome.failed else 0
