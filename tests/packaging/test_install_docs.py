"""The README's Install section and its pytest plugin recipe, run as written (issue 31): in a
fresh virtual environment, from a project directory with a clean copy of the checkout beside it
as `../relay` (the clone the Install section names), in the environment of a new terminal with
that virtual environment activated. The commands are read from the README, so the test follows
what a user reads.

The plugin recipe's pytest run also collects a test of the project's own (as it would a user's):
an async test that awaits `relay_replay.replay_async` on anyio's plugin, which is what the README
says such a test needs. Slow (two installs from the checkout: about a minute), so marked
`packaging`.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from relay import __version__
from tests.packaging.checkout import REPO, clean_copy, fresh_shell_environment

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(600)]

PLUGIN_HEADING = "### A folder of recordings as tests: the pytest plugin"

ASYNC_TEST = '''\
import pytest


@pytest.mark.anyio
async def test_the_demo_session_replays_in_an_async_test(relay_replay):
    [recording] = __import__("pathlib").Path("recordings").glob("*.jsonl")
    result = await relay_replay.replay_async(recording, tools=["relay.examples.tools"])
    relay_replay.check(result)
'''


def first_block(readme: str, heading: str) -> list[str]:
    """The shell lines of the first indented block under `heading`, comments removed."""
    section = readme.split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    block = re.search(r"((?:^    \S.*\n)+)", section, flags=re.M)
    assert block, f"no indented command block under {heading}"
    return [line.strip().split("  #")[0].strip() for line in block[1].splitlines()]


def test_the_install_section_leads_with_what_works_and_says_when_the_index_will() -> None:
    readme = (REPO / "README.md").read_text()
    install = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    assert first_block(readme, "## Install") == ["pip install ../relay", "relay --version"]
    assert "Once it is published, `pip install realtime-relay` will do the same" in install
    assert "pip install realtime-relay\n" not in readme and "../shared/recordings" not in readme
    assert first_block(readme, PLUGIN_HEADING)[0] == "pip install '../relay[pytest]'"


def test_install_and_the_plugin_recipe_run_as_written_in_a_fresh_virtual_environment(tmp_path: Path) -> None:
    clean_copy(tmp_path / "relay")
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_async_replay.py").write_text(ASYNC_TEST)
    venv = tmp_path / "venv"
    # From inside a virtual environment, `-m venv` makes the new one from the base interpreter.
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = fresh_shell_environment()
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    env["VIRTUAL_ENV"] = str(venv)
    readme = (REPO / "README.md").read_text()
    commands = [*first_block(readme, "## Install"), *first_block(readme, PLUGIN_HEADING)]
    script = "\n".join(["set -euo pipefail", *commands])
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=project, env=env,
                          capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    assert f"relay {__version__}\n" in done.stdout
    assert "recordings/" in done.stdout and re.search(r"^=+ 2 passed", done.stdout, re.M), done.stdout
