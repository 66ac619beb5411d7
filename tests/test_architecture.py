"""The house plan's import rules (issue 24), read from the source with `ast`: nothing is imported.

Rules (each its own test; a failure names the rule, the module, the file and line of the
import, or the modules of the cycle):
1. The pure core (`statecharts/`, `orchestrator/session/`, `orchestrator/protocol/`) imports
   no I/O and no clock: no event loop (`trio`, `asyncio`, `anyio`), no sockets (`socket`,
   `ssl`, `select`, `selectors`), no server or backend client (`hypercorn`, `starlette`,
   `tritonclient`, `grpc`), no clock (`time`, `datetime`), no dynamic import (`importlib`,
   which would hide any of these), and none of the layers that drive the core
   (`orchestrator.service`, `orchestrator.supervisor`, `orchestrator.triton`,
   `orchestrator.cli`, `bench`, `fuzzing`).
2. `statecharts/` imports nothing of `orchestrator/`: the charts are the bottom layer; the core
   reads their effects and the charts know nothing of what carries them out.
3. No import cycle among the modules of `statecharts/`, `orchestrator/`, `turntaker_models/`,
   `bench/` and `fuzzing/`.
4. `turntaker_models/` imports nothing of `orchestrator/`, `statecharts/`, `bench/` or
   `fuzzing/`: the models run inside Triton's Python backend (the GPU image installs only the
   `models` extra); the orchestrator depends on their contract, never the reverse.
5. The wire spellings stay behind the codec: nothing outside `orchestrator/protocol/` imports
   `orchestrator.protocol.client_wire` or `orchestrator.protocol.session_wire` (events are
   parsed once, at the edge; past it only the typed events exist).

What counts as an import: every `import` and `from ... import` statement anywhere in a module:
at module level, inside a function (a lazy import runs all the same), and under
`if TYPE_CHECKING:`. Type-only imports count on purpose. A module that needs another's types
depends on it as much as one that calls it (neither can be read or type-checked alone), and
`TYPE_CHECKING` is how a cycle is hidden from the interpreter while the two modules still need
each other: both cycles that issue 24 names are written so. Relative imports are resolved.
`from pkg import name` is an edge to the module `pkg.name` where that is a module of the source,
else to `pkg` (the name is one of its `__init__`'s). Importing `a.b.c` also runs `a/__init__.py`
and `a/b/__init__.py`, but these implied edges to parent packages are not counted: with them
every package whose `__init__` imports one of its own modules would be a cycle with that module,
an order Python resolves by design. A module that imports a name from its own package's
`__init__` while that `__init__` imports the module is an explicit cycle, and is reported.

A clock, precisely: the core is handed the time with each input (`now_ms`) and never reads it.
The clocks a program reads are `time`'s (`time()`, `monotonic()`, `perf_counter()`,
`sleep()`), `datetime`'s (`now()`, `today()`, `utcnow()`) and an event loop's
(`trio.current_time()`, `asyncio`'s `loop.time()`). Rule 1 bars the import of those modules,
`from time import monotonic` included, rather than looking for calls: an import is where a
dependency starts, and durations in the core are plain milliseconds, so nothing there needs
`timedelta` either. (`os.times()` and the like are not looked for.)
"""

from __future__ import annotations

import ast
import textwrap
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE_PACKAGES = ("statecharts", "orchestrator", "turntaker_models", "bench", "fuzzing")

# Rule 1.
PURE_CORE = ("statecharts", "orchestrator.session", "orchestrator.protocol")
NOT_IN_THE_CORE: Mapping[str, str] = {
    "trio": "an event loop",
    "asyncio": "an event loop",
    "anyio": "an event loop",
    "socket": "sockets",
    "ssl": "sockets",
    "select": "sockets",
    "selectors": "sockets",
    "hypercorn": "the HTTP server",
    "starlette": "the HTTP edge",
    "tritonclient": "the Triton client",
    "grpc": "the Triton client's transport",
    "time": "a clock",
    "datetime": "a clock",
    "importlib": "a dynamic import",
    "orchestrator.service": "the Trio service that drives the core",
    "orchestrator.supervisor": "the worker supervisor",
    "orchestrator.triton": "the Triton launcher and clients",
    "orchestrator.cli": "the command line",
    "bench": "the benchmarks",
    "fuzzing": "the fuzzer that drives the core",
}

# Rule 2.
CHARTS = "statecharts"
NOT_IN_THE_CHARTS = "orchestrator"

# Rule 4.
MODELS = "turntaker_models"
NOT_IN_THE_MODELS: Mapping[str, str] = {
    "orchestrator": "the models run inside Triton, apart from the server",
    "statecharts": "the models run inside Triton, apart from the server",
    "bench": "the benchmarks drive the models, not the reverse",
    "fuzzing": "the fuzzer drives the server, not the models",
}

# Rule 5.
PROTOCOL = "orchestrator.protocol"
WIRE_MODULES = ("orchestrator.protocol.client_wire", "orchestrator.protocol.session_wire")


@dataclass(frozen=True)
class Import:
    """One import statement's edge: `importer` (a module of the source) needs `target`."""

    importer: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line} ({self.importer}) imports {self.target}"


def within(name: str, package: str) -> bool:
    """`name` is `package` or one of its modules."""
    return name == package or name.startswith(package + ".")


def source_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of `packages` under `root`, by dotted name (a package by its own name)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _targets(module: str, is_package: bool, node: ast.stmt, known: Mapping[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        # A relative import counts from the module's package (a package is its own).
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join([*base, *([node.module] if node.module else [])])
    else:
        prefix = node.module or ""
    return [
        f"{prefix}.{alias.name}" if f"{prefix}.{alias.name}" in known else prefix
        for alias in node.names
    ]


def source_imports(root: Path, modules: Mapping[str, Path]) -> list[Import]:
    """Every import statement of every module, at any depth, `TYPE_CHECKING` ones included."""
    edges: list[Import] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                edges.extend(
                    Import(module, target, path.relative_to(root), node.lineno)
                    for target in _targets(module, is_package, node, modules)
                    if target != "__future__"
                )
    return sorted(edges, key=lambda e: (e.importer, e.line, e.target))


def import_cycles(modules: Iterable[str], edges: Iterable[Import]) -> list[list[Import]]:
    """One cycle per strongly connected knot of modules, as the imports that close it.

    Tarjan's algorithm finds the knots; within each, a breadth-first search from its first
    module (by name) back to itself gives a shortest cycle, so the report is short and stable.
    """
    graph: dict[str, dict[str, Import]] = {m: {} for m in modules}
    for edge in edges:
        if edge.target in graph and edge.target != edge.importer:
            graph[edge.importer].setdefault(edge.target, edge)

    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    knots: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            knot: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                knot.append(w)
                if w == v:
                    break
            if len(knot) > 1:
                knots.append(sorted(knot))

    for v in sorted(graph):
        if v not in index:
            connect(v)

    cycles: list[list[Import]] = []
    for knot in sorted(knots):
        members, start = set(knot), knot[0]
        came_by: dict[str, Import] = {}
        queue = deque([start])
        while queue and start not in came_by:
            v = queue.popleft()
            for w, edge in sorted(graph[v].items()):
                if w in members and w not in came_by:
                    came_by[w] = edge
                    queue.append(w)
        cycle = [came_by[start]]
        while cycle[0].importer != start:
            cycle.insert(0, came_by[cycle[0].importer])
        cycles.append(cycle)
    return cycles


def describe_cycle(cycle: list[Import]) -> str:
    names = " -> ".join([cycle[0].importer, *(edge.target for edge in cycle)])
    return "\n".join([f"import cycle: {names}", *(f"    {edge}" for edge in cycle)])


@pytest.fixture(scope="module")
def modules() -> dict[str, Path]:
    return source_modules(REPO_ROOT, SOURCE_PACKAGES)


@pytest.fixture(scope="module")
def imports(modules: dict[str, Path]) -> list[Import]:
    return source_imports(REPO_ROOT, modules)


def barred(
    imports: Iterable[Import], importers: Iterable[str], barred: Mapping[str, str]
) -> list[str]:
    """The imports by a module of `importers` of a module of `barred`, each with why not."""
    importers = tuple(importers)
    return [
        f"{edge}: {why}"
        for edge in imports
        if any(within(edge.importer, package) for package in importers)
        for target, why in barred.items()
        if within(edge.target, target)
    ]


def test_rule_1_the_pure_core_imports_no_io_no_clock_and_no_driver(
    imports: list[Import],
) -> None:
    broken = barred(imports, PURE_CORE, NOT_IN_THE_CORE)
    assert not broken, "rule 1 (the pure core does no I/O and reads no clock):\n" + "\n".join(
        broken
    )


def test_rule_2_statecharts_import_nothing_of_the_orchestrator(imports: list[Import]) -> None:
    broken = barred(imports, [CHARTS], {NOT_IN_THE_CHARTS: "the charts are the bottom layer"})
    assert not broken, "rule 2 (statecharts/ imports nothing of orchestrator/):\n" + "\n".join(
        broken
    )


def test_rule_3_no_import_cycle(modules: dict[str, Path], imports: list[Import]) -> None:
    cycles = import_cycles(modules, imports)
    assert not cycles, "rule 3 (no import cycle):\n" + "\n".join(map(describe_cycle, cycles))


def test_rule_4_the_models_import_nothing_of_the_server(imports: list[Import]) -> None:
    broken = barred(imports, [MODELS], NOT_IN_THE_MODELS)
    assert not broken, "rule 4 (turntaker_models/ imports nothing of the server):\n" + "\n".join(
        broken
    )


def test_rule_5_the_wire_spellings_stay_behind_the_codec(imports: list[Import]) -> None:
    broken = [
        str(edge)
        for edge in imports
        if not within(edge.importer, PROTOCOL)
        and any(within(edge.target, wire) for wire in WIRE_MODULES)
    ]
    assert not broken, "rule 5 (only orchestrator/protocol/ sees the wire spellings):\n" + (
        "\n".join(broken)
    )


# The rules above would pass on an empty walk: these check the walker itself.


def test_the_walk_finds_every_source_package_and_the_core(modules: dict[str, Path]) -> None:
    for package in SOURCE_PACKAGES:
        assert package in modules, f"no {package}/__init__.py: the walk would miss it"
    for core in PURE_CORE:
        assert sum(within(m, core) for m in modules) > 1, f"no modules found in {core}"


def _write(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def test_the_walker_sees_every_kind_of_import_and_names_the_cycle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import A\n",
            "pkg/a.py": """
                from __future__ import annotations
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from pkg.sub.b import B
                A = 1
            """,
            "pkg/sub/__init__.py": "",
            "pkg/sub/b.py": """
                import time
                from .. import a
                def f() -> None:
                    from ..sub import c
                B = 2
            """,
            "pkg/sub/c.py": """
                from . import b
                from pkg import A
                from time import monotonic
            """,
        },
    )
    modules = source_modules(tmp_path, ["pkg"])
    assert sorted(modules) == ["pkg", "pkg.a", "pkg.sub", "pkg.sub.b", "pkg.sub.c"]
    edges = {(e.importer, e.target, e.line) for e in source_imports(tmp_path, modules)}
    assert edges == {
        ("pkg", "pkg.a", 1),
        ("pkg.a", "typing", 2),
        ("pkg.a", "pkg.sub.b", 4),  # under TYPE_CHECKING
        ("pkg.sub.b", "time", 1),
        ("pkg.sub.b", "pkg.a", 2),  # relative, two levels
        ("pkg.sub.b", "pkg.sub.c", 4),  # inside a function
        ("pkg.sub.c", "pkg.sub.b", 1),
        ("pkg.sub.c", "pkg", 2),  # a name of the package's __init__
        ("pkg.sub.c", "time", 3),
    }
    clocks = barred(source_imports(tmp_path, modules), ["pkg.sub"], {"time": "a clock"})
    assert clocks == [
        "pkg/sub/b.py:1 (pkg.sub.b) imports time: a clock",
        "pkg/sub/c.py:3 (pkg.sub.c) imports time: a clock",
    ]
    cycles = import_cycles(modules, source_imports(tmp_path, modules))
    # One knot (pkg, a, sub.b, sub.c; pkg.sub imports nothing), reported from its first module.
    assert [[(e.importer, e.target) for e in cycle] for cycle in cycles] == [
        [("pkg", "pkg.a"), ("pkg.a", "pkg.sub.b"), ("pkg.sub.b", "pkg.sub.c"), ("pkg.sub.c", "pkg")]
    ]
    assert describe_cycle(cycles[0]).splitlines()[0] == (
        "import cycle: pkg -> pkg.a -> pkg.sub.b -> pkg.sub.c -> pkg"
    )
