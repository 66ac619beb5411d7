"""Writes one benchmark's section of docs/benchmarks.md, leaving the other sections alone."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


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


def free_port() -> int:
    """A loopback port free right now, for the servers a benchmark starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ms(values: list[float], q: float) -> float:
    """The q-quantile of `values` (seconds) in ms; nan when there are none."""
    return float(np.quantile(np.asarray(values), q) * 1000) if values else float("nan")


def median_p90(values: list[float], digits: int = 0) -> str:
    """A table cell: "median / p90" in ms with `digits` decimals, "-" when there are none."""
    if not values:
        return "-"
    return f"{ms(values, 0.5):.{digits}f} / {ms(values, 0.9):.{digits}f}"


def share(part: int, whole: int) -> str:
    """A table cell: "part/whole (percent)", "-" of nothing."""
    return f"{part}/{whole} ({100 * part / whole:.0f}%)" if whole else "-"
