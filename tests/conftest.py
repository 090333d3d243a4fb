"""Fixtures every test folder may use."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

CAPTURED_LOG_LINES = 200
"""A failing test shows the last this many lines of each captured log section."""

from relay.mock import MockUpstream
from relay.observe.logs import NARRATING_LOGGERS
from tests.support.keys import PROVIDER_KEY
from tests.support.paths import shared_dir
import relay.transports
from tests.support.processes import TEST_LOOP, TEST_TRANSPORT
from tests.support.tools import WEATHER_SCRIPT

if TEST_LOOP == "uvloop":
    import uvloop

    @pytest.hookimpl
    def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
        """RELAY_TEST_LOOP=uvloop: every async test and fixture runs on uvloop's event loop (the
        relays the tests start as commands take `--loop uvloop`: tests/support/processes.py)."""
        return {"uvloop": uvloop.new_event_loop}
elif TEST_LOOP != "asyncio":
    raise pytest.UsageError(f"RELAY_TEST_LOOP is asyncio or uvloop, not {TEST_LOOP!r}")

if TEST_TRANSPORT not in ("websockets", "picows"):
    raise pytest.UsageError(f"RELAY_TEST_TRANSPORT is websockets or picows, not {TEST_TRANSPORT!r}")
# RELAY_TEST_TRANSPORT: every relay a test builds in this process (its configuration's transport
# is `auto` unless the test says otherwise) runs its sockets on that library; the dev extra
# installs both, and `auto` would otherwise always be picows (the commands the tests start get
# `--transport`: tests/support/processes.py)
relay.transports.AUTO_ORDER = (TEST_TRANSPORT,)


# The slow kinds a test is of by the fixture it uses (pyproject.toml's markers).
MARKERS_BY_FIXTURE = {"browser": "browser", "haproxy": "cluster"}


# The slow kinds that hold one worker longest first (installs into fresh virtual environments,
# then the benchmarks' smoke runs, the docs site, the soaks...): see `pytest_collection_modifyitems`.
LONGEST_FIRST = ("packaging", "bench", "docs", "soak", "cluster", "browser")


def _start_rank(item: pytest.Item) -> int:
    for rank, marker in enumerate(LONGEST_FIRST):
        if item.get_closest_marker(marker) is not None:
            return rank
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that drives the browser or HAProxy is of that slow kind, whoever wrote it. The slow
    kinds then run first, longest kinds ahead (a stable sort: each kind's tests keep their order,
    a module's together): pytest-xdist hands tests out in this order, so a test that holds a worker
    for a minute or more starts while the others fill the other workers around it, instead of
    starting last and leaving them idle at the end."""
    for item in items:
        for fixture, marker in MARKERS_BY_FIXTURE.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)
    items.sort(key=_start_rank)


@pytest.fixture(autouse=True)
def sessions_under_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session the harness saves without being told where (a failing expectation's) goes under
    the test's own tmp_path, not into the machine's shared relay-sessions/."""
    monkeypatch.setenv("RELAY_SESSIONS_DIR", str(tmp_path / "relay-sessions"))


@pytest.fixture(scope="session")
def recordings_dir() -> Path:
    """The real sessions in ../shared/recordings."""
    return shared_dir() / "recordings"


@pytest.fixture
async def weather_mock() -> AsyncIterator[MockUpstream]:
    """The mock upstream playing WEATHER_SCRIPT, requiring the provider key (so the relay is seen
    to use it)."""
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock:
        yield mock


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """`relay.cli.main` and configure_logging replace the root handlers (pytest's among them) and
    quiet the loggers of libraries that narrate (NARRATING_LOGGERS): put it all back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name in NARRATING_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    """Cap the captured logs a failure report shows to their last lines: a flood test once
    dumped ten thousand lines, burying the assertion that failed."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    capped = []
    for title, content in report.sections:
        lines = content.splitlines()
        if title.startswith("Captured log") and len(lines) > CAPTURED_LOG_LINES:
            kept = lines[-CAPTURED_LOG_LINES:]
            content = "\n".join([f"[... {len(lines) - len(kept)} earlier lines left out ...]", *kept]) + "\n"
        capped.append((title, content))
    report.sections = capped
