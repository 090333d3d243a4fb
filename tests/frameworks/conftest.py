"""The voice frameworks as the relay's clients: each framework's client (clients/NAME_client.py) runs
under the framework's own environment (.venv-fw-NAME, installed by `scripts/frameworks NAME` from
requirements/frameworks/NAME.lock: their pins clash with ours), unchanged, against a `relay serve`
(in this process) in front of the mock, and prints what the framework showed as JSON lines.

Without a framework's environment its tests skip, naming the command that installs it; in CI
(CI=true) they fail instead: CI installs every one (.ci/run)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from relay.edges.serve import RelayServer
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.paths import REPO
from tests.support.relays import relay_for

CLIENTS = Path(__file__).parent / "clients"
TIMEOUT = 60.0
"""How long a client run may take before the test fails: a guard against hangs (a framework's
import alone takes seconds on a loaded 2-core machine), not a speed limit."""

SCRIPT = MockScript(
    rules=[
        Rule(match="report", say="Working on your report.", calls=[ToolCall(name="make_report", arguments={})]),
        Rule(match="weather and the time", say="Checking both.",
             calls=[ToolCall(name="get_weather", arguments={"city": "Paris"}),
                    ToolCall(name="get_time", arguments={"city": "Paris"})]),
        Rule(match="weather", say="Let me check.", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})]),
        Rule(match="time", calls=[ToolCall(name="get_time", arguments={"city": "Paris"})]),
        Rule(match="thanks", say="You are welcome."),
    ],
    after_outputs=Reply(say="Here you go: {joined}."),
    default=Reply(say="Hello from the mock."),
)
"""The model: `get_weather` and `make_report` are the relay's tools, `get_time` the framework's."""


def framework_python(name: str) -> Path:
    """The interpreter of .venv-fw-NAME; skips the test (fails it in CI) when it is not there.
    With RELAY_FRAMEWORKS_NEWEST=1, that of .venv-fw-NAME-newest (`scripts/frameworks --newest`:
    the framework's release newer than its lock), skipping the test when there is none."""
    if os.environ.get("RELAY_FRAMEWORKS_NEWEST"):
        python = REPO / f".venv-fw-{name}-newest" / "bin" / "python"
        if not python.exists():
            pytest.skip(f"{name}: no release newer than its lock (scripts/frameworks --newest)")
        return python
    python = REPO / f".venv-fw-{name}" / "bin" / "python"
    if not python.exists():
        message = f"{name} is not installed: scripts/frameworks {name}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return python


@dataclass
class ClientRun:
    """One client run: the JSON lines it printed so far, and its stderr once it ended."""

    process: asyncio.subprocess.Process
    events: list[dict[str, Any]] = field(default_factory=list)
    stderr: str = ""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def read(self) -> None:
        assert self.process.stdout is not None
        async for raw in self.process.stdout:
            line = raw.decode().strip()
            if line.startswith("{"):
                self.events.append(json.loads(line))
                self._changed.set()
        self._changed.set()

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = TIMEOUT) -> dict[str, Any]:
        """The first event for which `predicate` holds, waiting for it (fails if the client ends first)."""
        async with asyncio.timeout(timeout):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                if self.process.returncode is not None or self.process.stdout is None or self.process.stdout.at_eof():
                    raise AssertionError(f"the client ended without it: {self.events}\n{self.stderr}")
                self._changed.clear()
                await self._changed.wait()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["event"] == kind]

    @property
    def heard(self) -> list[str]:
        return [event["text"] for event in self.of("heard")]


@asynccontextmanager
async def client(name: str, relay: RelayServer, *, turns: list[dict[str, str]] = (), until: list[str] = (),
                 until_errors: list[str] = (), audio_in: bool = False, options: dict[str, Any] | None = None,
                 program: str | None = None) -> AsyncIterator[ClientRun]:
    """clients/NAME_client.py (or clients/PROGRAM_client.py) under the framework NAME's own Python,
    pointed at `relay`, with this plan; the block runs while it does, and at its end the client must
    have finished (printed `done`)."""
    python = framework_python(name)
    plan = {"url": relay.url, "token": RELAY_TOKEN, "turns": list(turns), "until": list(until),
            "until_errors": list(until_errors),
            "audio_in": audio_in, "options": options or {}, "timeout": TIMEOUT}
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("OPENAI_API_KEY", "RELAY_AUTH_TOKEN", "PYTHONPATH")}
    process = await asyncio.create_subprocess_exec(
        str(python), str(CLIENTS / f"{program or name}_client.py"), json.dumps(plan), cwd=CLIENTS, env=environment,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
    run = ClientRun(process)
    reader = asyncio.create_task(run.read())
    errors = asyncio.create_task(process.stderr.read())   # type: ignore[union-attr]
    try:
        yield run
        try:
            async with asyncio.timeout(TIMEOUT):
                await process.wait()
                await reader
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
        run.stderr = (await errors).decode(errors="replace")
        assert run.of("done"), f"the {name} client did not finish: {run.events}\n{run.stderr[-6000:]}"
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        reader.cancel()
        errors.cancel()


@pytest.fixture
async def mock() -> AsyncIterator[MockUpstream]:
    """The mock upstream playing SCRIPT."""
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as upstream:
        yield upstream


@asynccontextmanager
async def relay(mock: MockUpstream, tools: list[Any], **options: Any) -> AsyncIterator[RelayServer]:
    """`relay serve` with these tools in front of the mock."""
    async with relay_for(mock, tools=tools, **options) as server:
        yield server


def outputs(mock: MockUpstream) -> dict[str, list[str]]:
    """The function_call_output items the mock received, their outputs by call name."""
    names = {item["call_id"]: item["name"] for session in mock.sessions for item in session.items
             if item.get("type") == "function_call"}
    found: dict[str, list[str]] = {}
    for record in mock.received:
        item = record.event.get("item", {})
        if record.event["type"] == "conversation.item.create" and item.get("type") == "function_call_output":
            found.setdefault(names.get(item["call_id"], "?"), []).append(item["output"])
    return found
