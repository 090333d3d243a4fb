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


# The tests CI runs under the lowest Python only (marked `once`; the newest Python's pass, .ci/run,
# deselects them), by file or node id, each with why the newest Python adds nothing to its proof.
# That pass keeps what depends on the interpreter: the engine, the dialects and the offline tools'
# unit tests, every loopback integration test but those named here (each transport, each dialect,
# the store's contract and leases, the CLI's answers), and the package built and installed.
ONCE = {
    # Processes killed and paused mid-call while a replica takes over: the fleet's protocol, the
    # same under any Python; the store, its leases and its takeover records under the newest
    # Python are tests/store's other files.
    "tests/store/test_takeover.py": "a replica takes over from a killed or paused owner process",
    "tests/store/test_live_takeover.py": "the same for GPT-Live sessions",
    # MCP servers started as processes, killed and restarted, behind the relay's edges: the MCP
    # client's code runs under the newest Python in tests/mcp's other files.
    "tests/mcp/test_mcp_serve.py": "MCP server processes through the relay's edges",
    # Random walks over code the unit tests run under the newest Python too: they look for logic
    # errors, which the interpreter does not change.
    "tests/test_engine_fuzz.py": "the engine fuzzed",
    "tests/reliability/test_fuzz.py": "the edges fuzzed",
    "tests/gemini/test_gemini_fuzz.py": "Gemini sessions fuzzed",
    # The explorer's fixed-seed walks over four conversation shapes on every dialect: the same
    # logic errors under any Python (the explorer's own tests, its fixed seeds among them, run
    # under the newest; this keeps CI's second interpreter from repeating 34 walks).
    "tests/test_explore_shapes.py": "the explorer's walks over other conversation shapes",
    # Scale counted, not timed: 10,000 lines, the same counts under any Python (the file's other
    # tests redact under the newest).
    "tests/test_relay_redact.py::test_a_long_recording_is_redacted_in_two_passes_a_line_at_a_time":
        "linear redaction, counted over 10,000 lines",
    # A subprocess that hides opentelemetry: an import guard (the file's other tests trace under
    # the newest Python).
    "tests/server/test_tracing.py::test_the_relay_runs_unchanged_without_opentelemetry": "no opentelemetry",
    # The demo as a command: the newest Python's pass runs it from the installed wheel
    # (tests/packaging/test_wheel.py).
    "tests/test_demo.py": "the demo as a command",
    # The source's text, read the same by any Python.
    "tests/test_wire_names.py": "wire names in the source",
    "tests/test_sequencer_lifecycle.py::test_no_code_in_relay_sets_a_sequencer_state_but_move":
        "sequencer states set in the source",
    # The README's commands with the machine's python3, whatever Python runs the suite.
    "tests/packaging/test_quickstart.py::test_after_the_quick_start_relay_runs_in_a_new_shell": "the quick start",
    # The same commands under either Python (a fresh environment, two installs, the plugin: 40 s);
    # the wheel tests build and install the package under the newest.
    "tests/packaging/test_install_docs.py::"
    "test_install_and_the_plugin_recipe_run_as_written_in_a_fresh_virtual_environment": "the README's install recipe",
    # A build whose compiler fails (the compiled lane left out) is setup.py's, not the interpreter's.
    "tests/packaging/test_wheel.py::test_without_a_c_compiler_the_wheel_builds_without_the_compiled_lane":
        "the wheel without a compiler",
}


def _once(nodeid: str) -> bool:
    return any(nodeid == key or nodeid.startswith((key + "::", key + "[")) for key in ONCE)


# The slow kinds that hold one worker longest first (installs into fresh virtual environments,
# then the benchmarks' smoke runs, the docs site, the soaks...): see `pytest_collection_modifyitems`.
LONGEST_FIRST = ("packaging", "bench", "docs", "soak", "cluster", "browser")


def _start_rank(item: pytest.Item) -> int:
    for rank, marker in enumerate(LONGEST_FIRST):
        if item.get_closest_marker(marker) is not None:
            return rank
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that drives the browser or HAProxy is of that slow kind, whoever wrote it; a test
    ONCE names is marked `once`. The slow kinds then run first, longest kinds ahead (a stable
    sort: each kind's tests keep their order, a module's together): pytest-xdist hands tests out in this order, so a test that holds a worker
    for a minute or more starts while the others fill the other workers around it, instead of
    starting last and leaving them idle at the end."""
    for item in items:
        for fixture, marker in MARKERS_BY_FIXTURE.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)
        if _once(item.nodeid):
            item.add_marker("once")
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
