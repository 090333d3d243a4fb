"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict`: a broken link,
a missing anchor, a page left out of the navigation or an API reference to a name that does not
exist fails the build; the pages' generated blocks (scripts/docs) render as code and tables. Slow (the build imports the package for
the API reference and renders every page: some seconds), so of the `docs` kind."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

pytestmark = [pytest.mark.docs, pytest.mark.timeout(300)]

COMMANDS = ("serve", "attach", "sidecar", "replay", "inspect", "export", "mock", "redact", "demo")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=REPO, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr
    for command in COMMANDS:
        page = (site / "commands" / command / "index.html").read_text()
        assert f"relay {command}" in page
        assert re.search(rf"<!-- options: {command} -->\s*<table>.*?</table>\s*<!-- /options -->", page, re.S), command
        assert "<td><code>--" in page or command in ("inspect", "export", "redact"), command   # its options table
    testing = (site / "testing" / "index.html").read_text()
    assert "--8<--" not in testing and "../examples/testing/test_booking.py" in testing   # the examples, and where they live
    reference = (site / "reference" / "relay" / "index.html").read_text()
    assert "ToolResult" in reference and "Scheduling" in reference
