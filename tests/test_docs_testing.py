"""docs/testing.md, the testing guide: every example on the page is a file under
docs/examples/testing/ shown as it is (a later docs site includes the files themselves), and the
examples run: the shell walk from a recorded call to a blocking test, which runs the Python ones."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

PAGE = REPO / "docs" / "testing.md"
EXAMPLES = REPO / "docs" / "examples" / "testing"
SHOWN = re.compile(r"<!-- example: (?P<path>\S+) -->\n```\w*\n(?P<body>.*?)```\n", re.S)


def test_the_page_shows_every_example_file_as_it_is() -> None:
    shown = {match["path"]: match["body"] for match in SHOWN.finditer(PAGE.read_text())}
    files = {f"docs/examples/testing/{path.name}": path.read_text() for path in EXAMPLES.iterdir() if path.is_file()}
    assert sorted(shown) == sorted(files), "every example file is on the page, and only those"
    for path, body in shown.items():
        assert body == files[path], f"{path} differs from what docs/testing.md shows"
    assert PAGE.read_text().count("```") == 2 * len(shown), "no code on the page but the example files"


@pytest.mark.docs
def test_the_examples_run_from_a_recorded_call_to_a_blocking_test(tmp_path: Path) -> None:
    for path in EXAMPLES.iterdir():
        shutil.copy(path, tmp_path / path.name)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}
    run = subprocess.run(["sh", "make_fixture.sh"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert any(re.fullmatch(r"  replaced: card: 0 \(0 distinct\), email: 0 \(0 distinct\), order: \d+ \(1 distinct\), "
                            r"phone: 0 \(0 distinct\)", line) for line in lines), run.stdout
    assert re.search(r"^1 passed, \d+ deselected", run.stdout, re.M), run.stdout       # the blocking recording
    assert re.search(r"^5 passed", run.stdout, re.M), run.stdout                       # the Python examples
    assert not re.search(r"\bZ9\b", (tmp_path / "tests" / "recordings" / "demo.jsonl").read_text())   # ids aside
    assert (tmp_path / "demo.html").is_file()
