"""The report writer: a benchmark's section of a results document, and its table cells.

Rules:
1. A section starts at its heading ("## Name") and runs to the next "## " line; writing one
   replaces only that section and keeps every other one, in place. A section not yet in the
   document is appended at its end; a document not yet there is started ("# Benchmarks").
2. Cells read the same in every table: a latency pair is "median / p90" in ms, a count out
   of a whole is "part/whole (percent)", and a figure with nothing measured is "-".
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from bench import stats

DOCS = Path(__file__).resolve().parent.parent / "docs"
DOC = DOCS / "benchmarks.md"
RELIABILITY = DOCS / "reliability.md"


def write_section(heading: str, section: str, doc: Path = DOC) -> None:
    """Replace the section starting at `heading` (up to the next "## "), keep the rest."""
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Benchmarks\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == heading), None)
    if start is None:
        body = text.rstrip("\n") + "\n\n" + section
    else:
        end = next(
            (j for j in range(start + 1, len(lines)) if lines[j].startswith("## ")), len(lines)
        )
        rest = "\n".join(lines[end:])
        body = "\n".join(lines[:start]) + ("\n" if start else "") + section
        if rest:
            body += "\n" + rest + "\n"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(body, encoding="utf-8")


def median_p90(values: Iterable[float], digits: int = 0) -> str:
    """A table cell: "median / p90" in ms with `digits` decimals, "-" when there are none."""
    kept = stats.finite(values)
    if not kept:
        return "-"
    return f"{stats.ms(kept, 0.5):.{digits}f} / {stats.ms(kept, 0.9):.{digits}f}"


def share(part: int, whole: int) -> str:
    """A table cell: "part/whole (percent)", "-" of nothing."""
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"


def share_ci(part: int, whole: int) -> str:
    """A table cell: "part/whole (percent; 95% interval)", "-" of nothing (stats rule 5)."""
    if not whole:
        return "-"
    low, high = stats.wilson(part, whole)
    return f"{part}/{whole} ({100 * part / whole:.0f}%; {100 * low:.0f}-{100 * high:.0f}%)"


def ms(seconds: float, digits: int = 1) -> str:
    """A table cell: seconds as ms with `digits` decimals, "-" when not measured (nan)."""
    return "-" if seconds != seconds else f"{seconds * 1000:.{digits}f}"
