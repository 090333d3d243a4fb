"""docs/mcp.md: every example on the page is a file under docs/examples/mcp/ that the page includes, and
the example runs as written: the mock model, the relay with the MCP server's tool, the client."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.snippets import check_page_includes_its_examples

PAGE = REPO / "docs" / "mcp.md"
EXAMPLES = REPO / "docs" / "examples" / "mcp"


def test_the_page_includes_every_example_file() -> None:
    check_page_includes_its_examples(PAGE, EXAMPLES)


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
