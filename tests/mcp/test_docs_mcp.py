"""docs/mcp.md: every example on the page is a file under docs/examples/mcp/ shown as it is, and
the example runs as written: the mock model, the relay with the MCP server's tool, the client."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

PAGE = REPO / "docs" / "mcp.md"
EXAMPLES = REPO / "docs" / "examples" / "mcp"
SHOWN = re.compile(r"<!-- example: (?P<path>\S+) -->\n```\w*\n(?P<body>.*?)```\n", re.S)


def test_the_page_shows_every_example_file_as_it_is() -> None:
    shown = {match["path"]: match["body"] for match in SHOWN.finditer(PAGE.read_text())}
    files = {f"docs/examples/mcp/{path.name}": path.read_text() for path in EXAMPLES.iterdir() if path.is_file()}
    assert sorted(shown) == sorted(files), "every example file is on the page, and only those"
    for path, body in shown.items():
        assert body == files[path], f"{path} differs from what docs/mcp.md shows"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.docs
def test_the_example_runs_as_written(tmp_path: Path) -> None:
    for path in EXAMPLES.iterdir():
        shutil.copy(path, tmp_path / path.name)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "MOCK_PORT": str(free_port()), "RELAY_PORT": str(free_port())}
    env.pop("OPENAI_API_KEY", None)
    run = subprocess.run(["sh", "run.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert '"sky": "sunny"' in run.stdout and '"city": "Oslo"' in run.stdout, run.stdout
