"""Fixtures of the inspector tests: the demo's recording (made once), and headless Chromium."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.paths import REPO
from tests.support.processes import missing_program


@pytest.fixture(scope="session")
def demo_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from relay.cli.demo import EXAMPLE_TOOLS, run_demo

    directory = tmp_path_factory.mktemp("demo")
    out = io.StringIO()
    status = anyio.run(lambda: run_demo(tools=str(EXAMPLE_TOOLS), record_dir=str(directory), color=False, out=out))
    assert status == 0
    [recording] = directory.glob("*.jsonl")
    page = recording.with_suffix(".html")
    assert f"see it as a timeline (open in a browser): {page}" in out.getvalue() and page.exists()
    return recording


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where screenshots go: $RELAY_TEST_ARTIFACTS, else test-artifacts/ in the checkout."""
    directory = Path(os.environ.get("RELAY_TEST_ARTIFACTS") or REPO / "test-artifacts")
    directory.mkdir(parents=True, exist_ok=True)
    return directory


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium. Without it the browser tests skip, naming the install command; in CI
    (CI=true) they fail instead, so a missing install step cannot pass unnoticed."""
    from tests.support.chromium import chromium, missing_reason

    reason = missing_reason()
    if reason is not None:
        missing_program(reason)
    with chromium() as driver:
        yield driver
