"""The code's shape is checked, so the map in docs/architecture.md cannot drift: the layers and
the edges' independence (import-linter's contracts in .importlinter), no import cycle in relay/
(type-only and function-level imports count), the engine's imports (nothing asynchronous, no
pydantic, no MCP client), the compiled lane's imports (`transports/_picows_lane.pyx`, which
import-linter cannot read), and no class over 400 lines or module over 600 (`.pyx` included)."""

from __future__ import annotations

import ast
import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.support.paths import REPO

MAX_CLASS_LINES = 400
MAX_MODULE_LINES = 600


def test_the_import_contracts_hold() -> None:
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint_imports is None:
        pytest.fail("lint-imports is missing: pip install -e '.[dev]' installs import-linter")
    done = subprocess.run([lint_imports, "--config", str(REPO / ".importlinter")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    edges = {module: sorted(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            module, child = work.pop()
            if child == 0:
                index[module] = low[module] = len(index)
                stack.append(module)
                on_stack.add(module)
            for position in range(child, len(edges[module])):
                target = edges[module][position]
                if target not in index:
                    work += [(module, position + 1), (target, 0)]
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        cycles.append(sorted(component))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[module])
    return cycles


def test_relay_has_no_import_cycle() -> None:
    graph = grimp.build_graph("relay", include_external_packages=False)
    assert import_cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c", "d"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    graph.add_import(importer="c", imported="a")
    graph.add_import(importer="c", imported="d")
    assert import_cycles(graph) == [["a", "b", "c"]]


def test_the_engine_loads_nothing_asynchronous() -> None:
    """`import relay.engine` in a fresh interpreter loads no event loop library, no pydantic and no
    MCP client: the engine is pure data and rules (pydantic comes with the first tool defined)."""
    probe = ("import sys, relay.engine; "
             "print(' '.join(sorted({name.split('.')[0] for name in sys.modules} "
             "& {'asyncio', 'anyio', 'pydantic', 'pydantic_core', 'mcp', 'trio', 'uvloop'}))); "
             "print(' '.join(sorted(name for name in sys.modules if name.startswith('relay.mcp'))))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["", ""], done.stdout


def compiled_modules() -> list[Path]:
    return sorted((REPO / "relay").rglob("*.pyx"))


def test_the_compiled_lane_imports_only_from_its_layer_or_below() -> None:
    """The layers contract, for the modules import-linter does not parse (Cython): a `.pyx` under
    relay.transports may import what relay.transports may."""
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    layers = [line.strip() for line in config["importlinter:contract:layers"]["layers"].splitlines() if line.strip()]
    assert compiled_modules(), "no .pyx under relay/: drop this test"
    for path in compiled_modules():
        package = "relay." + path.relative_to(REPO / "relay").parts[0]
        position = next(index for index, line in enumerate(layers)
                        if package in (name.strip() for name in line.split("|")))
        allowed = {package} | {name.strip() for line in layers[position + 1:] for name in line.split("|")}
        imported = re.findall(r"^\s*(?:from|c?import)\s+(relay(?:\.\w+)?)", path.read_text(encoding="utf-8"),
                              re.MULTILINE)
        assert imported, f"{path.name}: no relay import found (the pattern may be stale)"
        upward = sorted({name for name in imported if name != "relay" and name not in allowed})
        assert upward == [], f"{path.name} imports from a layer above its own: {upward}"


def test_the_package_holds_no_test_support() -> None:
    # selenium drives the inspector's browser tests; what launches the browser is the tests'
    drives_a_browser = sorted(path.relative_to(REPO).as_posix() for path in (REPO / "relay").rglob("*.py")
                              if re.search(r"^\s*(from|import) selenium\b", path.read_text(encoding="utf-8"), re.M))
    assert drives_a_browser == []


def test_no_class_over_400_lines_and_no_module_over_600() -> None:
    too_long = []
    for path in sorted((REPO / "relay").rglob("*.py")) + compiled_modules():
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        name = path.relative_to(REPO).as_posix()
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        if path.suffix == ".pyx":   # Cython: its line count only
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                if length > MAX_CLASS_LINES:
                    too_long.append(f"{name}: class {node.name}, {length} lines")
    assert too_long == []
