"""The session core speaks to its charts only in their typed events (statecharts/base.py rule
4): no chart is fed a name, so a misspelt event cannot pass (orchestrator/session/core.py)."""

from __future__ import annotations

import ast
from pathlib import Path

SESSION = Path(__file__).resolve().parents[3] / "orchestrator" / "session"


def test_core_modules_feed_charts_typed_events_only() -> None:
    by_name = []
    for path in sorted(SESSION.glob("core*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("handle", "send")
                and "chart" in ast.unparse(node.func.value)
            ):
                by_name.append(f"{path.name}:{node.lineno}")
    assert by_name == []
