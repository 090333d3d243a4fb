"""The README's quick start, followed word for word in a fresh clone and a new shell, leaves
`relay` on the PATH (issue 20: after `scripts/demo` and `scripts/test` it was not, and the README
never said how).

The commands are read from the README's Quick start block, so the test follows what a user
reads. `scripts/test` is left out (it is the suite this test belongs to); everything else runs
in one `bash` with the environment of a new terminal (no activated virtual environment), then
`relay --version` must answer from the clone's `.venv`. Creating that `.venv` installs the
package from pip's cache or the index (the demo's needs alone, not the dev extra: issue 31), so
marked `packaging`.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from relay import __version__
from tests.packaging.checkout import REPO, clean_copy, fresh_shell_environment

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(600)]


def quick_start_blocks(readme: str) -> list[list[str]]:
    """The shell lines of each indented block under `## Quick start`, comments removed."""
    section = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"((?:^    \S.*\n)+)", section, flags=re.M)
    assert blocks, "no indented command block under ## Quick start"
    return [[line.strip().split("  #")[0].strip() for line in block.splitlines()] for block in blocks]


def quick_start_commands(readme: str) -> list[str]:
    return [command for block in quick_start_blocks(readme) for command in block]


def test_the_quick_start_is_two_commands_then_says_how_to_get_relay_on_the_path() -> None:
    blocks = quick_start_blocks((REPO / "README.md").read_text())
    assert blocks[0] == ["scripts/demo", "scripts/test"]
    assert "source .venv/bin/activate" in quick_start_commands((REPO / "README.md").read_text())


def test_after_the_quick_start_relay_runs_in_a_new_shell(tmp_path: Path) -> None:
    clone = tmp_path / "relay"
    clean_copy(clone)
    commands = [c for c in quick_start_commands((clone / "README.md").read_text()) if c != "scripts/test"]
    script = "\n".join(["set -euo pipefail", *commands,
                        'echo "relay is $(command -v relay)"', "relay --version"])
    done = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], cwd=clone,
                          env=fresh_shell_environment(), capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, f"{shlex.join(commands)}\n{done.stdout}\n{done.stderr}"
    assert f"relay is {clone / '.venv' / 'bin' / 'relay'}" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith(f"relay {__version__}"), done.stdout
    assert "relay demo" in done.stdout          # scripts/demo ran the demo on the way
    # it installed what the demo runs, the package alone at its locked versions, and said so as it
    # went (issue 31)
    assert "installing relay's locked dependencies (requirements/run.lock)" in done.stderr
    assert "  fetching 1: " in done.stderr
    has_pytest = subprocess.run([str(clone / ".venv" / "bin" / "python"), "-c", "import pytest"],
                                capture_output=True, timeout=60)
    assert has_pytest.returncode != 0, "scripts/demo installed the dev extra"
