"""docs/testing.md, the testing guide: every example on the page is a file under
docs/examples/testing/ that the page includes (scripts/docs writes it in), and the
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
from tests.support.snippets import check_page_includes_its_examples

PAGE = REPO / "docs" / "testing.md"
EXAMPLES = REPO / "docs" / "examples" / "testing"


def test_the_page_includes_every_example_file() -> None:
    check_page_includes_its_examples(PAGE, EXAMPLES)
    assert PAGE.read_text().count("```") == 2 * len(list(EXAMPLES.iterdir())), "no code on the page but the example files"


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
