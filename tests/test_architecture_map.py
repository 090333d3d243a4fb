"""docs/architecture.md is the map a newcomer opens first: every module of relay/ (the compiled
`.pyx` too) is on it (a row of its tables names it by its path under relay/; later names in the
same cell may drop the directory the row's first path gave), and every module it names exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.paths import REPO

MAP = REPO / "docs" / "architecture.md"
NAME = re.compile(r"`([A-Za-z_][\w/]*\.pyx?)`")


def named_on_the_map(text: str) -> set[str]:
    """The modules the map's table rows name, as paths under relay/."""
    named: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        first_cell = line.split("|")[1]
        directory = ""
        for name in NAME.findall(first_cell):
            if "/" in name:
                directory = name.rsplit("/", 1)[0] + "/"
                named.add(name)
            else:
                named.add(directory + name)
    return named


def modules_of_relay() -> set[str]:
    """Every module under relay/ (the compiled `.pyx` too), but packages' `__init__.py` that hold
    nothing but a docstring."""
    modules = {path.relative_to(REPO / "relay").as_posix() for path in (REPO / "relay").rglob("*.pyx")}
    for path in (REPO / "relay").rglob("*.py"):
        if path.name == "__init__.py":
            body = ast.parse(path.read_text(encoding="utf-8")).body
            if all(isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) for node in body):
                continue
        relative = path.relative_to(REPO / "relay").as_posix()
        if not relative.startswith("examples/"):
            modules.add(relative)
    return modules


def test_every_module_is_on_the_map() -> None:
    missing = sorted(modules_of_relay() - named_on_the_map(MAP.read_text(encoding="utf-8")))
    assert missing == [], f"add these to docs/architecture.md: {missing}"


def test_every_module_the_map_names_exists() -> None:
    gone = sorted(name for name in named_on_the_map(MAP.read_text(encoding="utf-8"))
                  if not (REPO / "relay" / name).exists())
    assert gone == [], f"docs/architecture.md names modules that are not there: {gone}"


def test_every_path_under_relay_that_pyproject_names_exists() -> None:
    named = re.findall(r"(?<![\w/.-])relay/[\w/.]*[\w/]", (REPO / "pyproject.toml").read_text(encoding="utf-8"))
    gone = sorted({name for name in named if not (REPO / name).exists()})
    assert named and gone == [], f"pyproject.toml names paths that are not there: {gone}"


def test_the_reading_of_a_row(tmp_path: Path) -> None:
    text = "| `tools/spec.py`, `schema.py` | x |\n| `errors.py` | y |\nnot a row `a.py`\n"
    assert named_on_the_map(text) == {"tools/spec.py", "tools/schema.py", "errors.py"}
