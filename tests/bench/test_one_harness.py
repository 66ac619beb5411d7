"""Issue 24 item 7, kept: every bench runs through the one harness (bench/cli.py), starts its
servers through bench/servers.py, writes through bench/report.py and takes its statistics from
bench/stats.py; no bench keeps its own copy of any of them."""

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path

import pytest

from bench import cli, servers

BENCH = Path(__file__).resolve().parents[2] / "bench"
HELPERS = {"cli.py", "servers.py", "report.py", "stats.py"}
# The realtime server as the load benchmarks run it: a server program, not a bench.
SERVER_PROGRAM = "load_server.py"


@cache  # Parsed once: every test (and every entry point) reads the same trees, never changes them.
def _sources() -> dict[str, ast.Module]:
    return {
        path.name: ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(BENCH.glob("*.py"))
        if path.name not in HELPERS
    }


def _calls(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                names.add(func.attr)
            elif isinstance(func, ast.Name):
                names.add(func.id)
    return names


def _entry_points() -> list[str]:
    return [
        name
        for name, tree in _sources().items()
        if name != SERVER_PROGRAM
        and any(isinstance(n, ast.FunctionDef) and n.name == "main" for n in tree.body)
    ]


def test_every_bench_main_is_the_harness() -> None:
    entry_points = _entry_points()
    assert len(entry_points) >= 14, entry_points
    for name in entry_points:
        module = importlib.import_module(f"bench.{name.removesuffix('.py')}")
        assert isinstance(module.BENCH, cli.Bench), f"{name}: no BENCH"
        assert module.BENCH.module == f"bench.{name.removesuffix('.py')}", name
        assert "ArgumentParser" not in _calls(_sources()[name]), f"{name}: its own parser"


@pytest.mark.parametrize(
    "call", ["TritonServer", "TritonConfig", "BackgroundServer", "free_port", "write_section"]
)
def test_no_bench_starts_a_server_or_writes_a_document_itself(call: str) -> None:
    for name, tree in _sources().items():
        if name == "protocol_decode.py" and call == "write_section":
            continue  # its write_section(section, doc) is report.write_section under its heading
        assert call not in _calls(tree), f"{name} calls {call} itself"


@pytest.mark.parametrize("call", ["percentile", "quantile", "median"])
def test_no_bench_computes_its_statistics_itself(call: str) -> None:
    for name, tree in _sources().items():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == call
                and isinstance(node.func.value, ast.Name)
            ):
                assert node.func.value.id == "stats", f"{name}: {node.func.value.id}.{call}"


def test_a_given_triton_url_is_used_as_it_is() -> None:
    with servers.triton_url("127.0.0.1:1", ("null",)) as url:
        assert url == "127.0.0.1:1"


def test_free_ports_are_loopback_ports_free_now() -> None:
    port = servers.free_port()
    assert 0 < port < 65536
