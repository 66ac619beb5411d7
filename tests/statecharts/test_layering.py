"""The charts are the lowest layer: nothing in statecharts/ imports the orchestrator (the
chart never carries a prompt; the core builds `StartBackend` from `OpenStream`)."""

from __future__ import annotations

import ast
from pathlib import Path

CHARTS = Path(__file__).resolve().parents[2] / "statecharts"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.add(node.module)
    return names


def test_statecharts_import_nothing_of_the_orchestrator() -> None:
    offenders = {
        path.name: sorted(n for n in _imports(path) if n.split(".")[0] == "orchestrator")
        for path in sorted(CHARTS.glob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}
