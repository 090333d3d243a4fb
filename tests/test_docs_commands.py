"""The command pages' examples that need no provider key run as written: `relay replay`,
`relay inspect` and `relay export` on the recording the docs ship (docs/examples/recordings), each
read off its page, run from a scratch directory (the recording's path made absolute), exit 0 and
write what the page says. The other pages' commands need a key or a live call and are shown as
illustrations."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "docs" / "commands"
SHIPPED = "docs/examples/recordings/"


def keyless_commands(page: Path) -> list[str]:
    """The page's indented `relay ...` command lines that read a shipped recording."""
    return [line.strip() for line in page.read_text().splitlines()
            if re.match(r"^    relay \w+ ", line) and SHIPPED in line]


@pytest.mark.parametrize("page", ["replay.md", "inspect.md", "export.md"])
def test_a_command_page_s_keyless_example_runs_as_written(page: str, tmp_path: Path) -> None:
    commands = keyless_commands(PAGES / page)
    assert commands, f"{page} shows no command on {SHIPPED}"
    for command in commands:
        argv = [str(REPO / arg) if arg.startswith(SHIPPED) else arg for arg in shlex.split(command)]
        done = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=120,
                              cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        if "--out" in argv:
            written = tmp_path / argv[argv.index("--out") + 1]
            assert written.stat().st_size > 0, command
        if argv[1] == "replay":
            assert "no divergence" in done.stdout, done.stdout
