"""The `relay` command as a user runs it: a subprocess whose stderr is its JSON log; and the
scripts in scripts/ as modules.

The commands that run an event loop run the one the test run is for: asyncio's own, or uvloop's
with RELAY_TEST_LOOP=uvloop (`TEST_LOOP`, which tests/conftest.py gives the in-process tests); the
commands that open the relay's sockets run them on the transport the test run is for: websockets,
or picows with RELAY_TEST_TRANSPORT=picows (`TEST_TRANSPORT`: tests/conftest.py makes it what
`auto` means to the in-process relays)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from tests.support.paths import REPO

SCRIPTS = REPO / "scripts"
TEST_LOOP = os.environ.get("RELAY_TEST_LOOP", "asyncio")
"""The event loop the tests run on (`--loop` of the commands: asyncio or uvloop)."""
LOOP_COMMANDS = frozenset({"serve", "attach", "sidecar", "mock", "demo"})
TEST_TRANSPORT = os.environ.get("RELAY_TEST_TRANSPORT", "websockets")
"""The WebSocket library of the relays the tests start (`--transport`: websockets or picows)."""
TRANSPORT_COMMANDS = frozenset({"serve", "attach", "sidecar", "demo"})


@asynccontextmanager
async def python_process(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                         stdout: bool = False) -> AsyncIterator[asyncio.subprocess.Process]:
    """`python ARGS` with stderr (and stdout, when asked) piped, in the test's environment without
    RELAY_AUTH_TOKEN, plus `env`; killed at exit if it still runs, with any processes it forked
    (`relay serve --workers`: its own process group)."""
    environment = {key: value for key, value in os.environ.items() if key != "RELAY_AUTH_TOKEN"} | (env or {})
    process = await asyncio.create_subprocess_exec(
        sys.executable, *args, cwd=cwd, env=environment,
        stdout=asyncio.subprocess.PIPE if stdout else None, stderr=asyncio.subprocess.PIPE,
        start_new_session=True)
    try:
        yield process
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


def relay_process(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                  stdout: bool = False) -> AbstractAsyncContextManager[asyncio.subprocess.Process]:
    """`python -m relay ARGS`, as `python_process` runs it, on the test run's event loop and
    transport."""
    if args and args[0] in LOOP_COMMANDS and "--loop" not in args:
        args = (args[0], "--loop", TEST_LOOP, *args[1:])
    if args and args[0] in TRANSPORT_COMMANDS and "--transport" not in args:
        args = (args[0], "--transport", TEST_TRANSPORT, *args[1:])
    return python_process("-m", "relay", *args, cwd=cwd, env=env, stdout=stdout)


PROVIDER_KEY_VARIABLES = ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY", "GEMINI_API_KEY")


def run_relay(*args: str, cwd: Path, env: dict[str, str] | None = None,
              timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -m relay ARGS` run to its end from `cwd`, as a user types it in a new terminal: the
    test's environment without RELAY_AUTH_TOKEN or any provider key, plus `env`; on the test
    run's event loop."""
    if args and args[0] in LOOP_COMMANDS and "--loop" not in args:
        args = (args[0], "--loop", TEST_LOOP, *args[1:])
    environment = {key: value for key, value in os.environ.items()
                   if key != "RELAY_AUTH_TOKEN" and key not in PROVIDER_KEY_VARIABLES} | (env or {})
    return subprocess.run([sys.executable, "-m", "relay", *args], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=timeout)


async def next_log_line(stream: asyncio.StreamReader, predicate: Callable[[dict[str, Any]], bool],
                        seen: list[str], timeout: float = 30.0) -> dict[str, Any]:
    """Read JSON log lines from a relay's stderr until one matches (all lines are kept in `seen`).
    The timeout guards against a hang, it measures nothing: a `--workers` worker on a loaded
    2-core machine took over 10 s to say it listens (a CI rehearsal with other tests running)."""
    async with asyncio.timeout(timeout):
        while True:
            raw = await stream.readline()
            if not raw:
                raise AssertionError("relay exited; its log:\n" + "".join(seen))
            line = raw.decode()
            seen.append(line)
            record = json.loads(line)
            if predicate(record):
                return record


def missing_program(reason: str) -> NoReturn:
    """A program a test needs is not installed: skip, naming the install command in `reason`;
    under CI=true fail instead, so that a missing install step cannot pass unnoticed."""
    import pytest

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


def script_module(name: str) -> ModuleType:
    """scripts/NAME.py imported as a module, with scripts/ on sys.path as the scripts have it
    themselves (they import each other: cluster_soak.py uses soak.py and cluster.py)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module(name)


def only_on_transport(name: str) -> Any:
    """A test of what one transport's own code does (its internals, its log lines): skipped when the
    test run is on the other (RELAY_TEST_TRANSPORT)."""
    import pytest

    return pytest.mark.skipif(TEST_TRANSPORT != name, reason=f"a test of the {name} transport's own code")
