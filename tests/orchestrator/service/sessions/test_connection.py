"""sessions/connection.py: a connection knows its session only as a `CarriedSession`."""

from __future__ import annotations

import ast
from pathlib import Path

import orchestrator.service.sessions.connection as connection_module


def test_the_connection_imports_no_session_actor_so_there_is_no_import_cycle() -> None:
    tree = ast.parse(Path(connection_module.__file__).read_text())
    imported = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module is not None
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert not {m for m in imported if m.startswith("orchestrator.service.sessions.actor")}
    assert not {m for m in imported if m.startswith("orchestrator.service.sessions.attachment")}
