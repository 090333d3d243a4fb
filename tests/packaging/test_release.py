"""Release hygiene that needs no build: the demo runs the examples the package ships, the
version is set in one place, and the changelog and licence are where users look."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from relay import __version__
from relay.cli import main
from tests.packaging.checkout import REPO

def test_the_demo_uses_the_packaged_tools_by_module_name() -> None:
    from relay.cli.demo import EXAMPLE_TOOLS
    from relay.tools import ToolRegistry

    assert EXAMPLE_TOOLS == "relay.examples.tools"
    registry = ToolRegistry.load([EXAMPLE_TOOLS])
    assert {"get_weather", "lookup_order", "search_flights"} <= set(registry.names)


def test_the_version_is_set_once_and_printed(capsys) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "relay.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", __version__), __version__
    try:
        main(["--version"])
    except SystemExit as exit_:
        assert exit_.code == 0
    assert capsys.readouterr().out.strip() == f"relay {__version__}"


def test_the_changelog_has_a_section_for_this_version_or_unreleased_work() -> None:
    headings = re.findall(r"^## (.+)$", (REPO / "CHANGELOG.md").read_text(), flags=re.M)
    if ".dev" in __version__:
        assert headings[0] == "Unreleased", "a development version's changes go under ## Unreleased"
    else:
        assert any(h.split(" ")[0] == __version__ for h in headings), f"no ## {__version__} section"
    assert "0.1.0 - 2026-11-29" in headings


def test_the_licence_is_declared_and_shipped() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (REPO / "LICENSE").read_text().startswith("MIT License")
    assert (REPO / "relay" / "py.typed").exists()


def test_scripts_pythons_lists_the_claimed_interpreters_lowest_first() -> None:
    """What .ci/run reads to pick the Pythons the suite runs under."""
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "pythons.py")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    versions = []
    for line in done.stdout.splitlines():
        found = re.fullmatch(r"3\.(\d+) (/\S+)", line)
        assert found, line
        versions.append(int(found[1]))
    assert versions == sorted(set(versions)) and versions[0] >= 11
