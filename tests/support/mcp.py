"""MCP servers for the tests: the SDK-written test server (tests/mcp/server.py) over stdio (a
config the relay starts it from) and over streamable HTTP (a process the test runs, optionally
behind a bearer token), npm's `@modelcontextprotocol/server-everything` when it is installed, and
the mock scripts in which the model calls their tools."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.edges.attach import Sidecar
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.mcp.connection import McpConnection
from relay.tools.mcp_config import McpServerConfig, McpSettings
from tests.support.clients import RealtimeClient, gemini_client
from tests.support.frames import model_words, user_text
from tests.support.keys import GEMINI_KEY, RELAY_TOKEN
from tests.support.paths import REPO
from tests.support.relays import accepted_call, relay_for, sidecar_on

SERVER = Path(__file__).parent.parent / "mcp" / "server.py"
EVERYTHING_VERSION = "2026.8.31"
EVERYTHING_DIR = REPO / ".ci" / "node"   # .ci/run installs it there, beside nothing else
EVERYTHING_BIN = EVERYTHING_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
EVERYTHING_INSTALL = (f"npm install --prefix .ci/node --no-audit --no-fund "
                      f"@modelcontextprotocol/server-everything@{EVERYTHING_VERSION}")


def stdio_server(name: str = "test", **fields: Any) -> McpServerConfig:
    """The test server, started by the relay over stdio."""
    return McpServerConfig(name=name, command=(sys.executable, str(SERVER)), **fields)


def settings(*servers: McpServerConfig, **fields: Any) -> McpSettings:
    return McpSettings(servers=servers, **fields)


@contextmanager
def http_server(*, token: str | None = None, port: int = 0) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """The test server over streamable HTTP in a process of its own (on `port`: 0 picks one);
    yields the process and its URL. Killed on exit."""
    command = [sys.executable, str(SERVER), "http", "--port", str(port)]
    if token is not None:
        command += ["--token", token]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()   # printed once it listens
        assert line.startswith("PORT="), f"the test MCP server did not start: {line!r}"
        yield process, f"http://127.0.0.1:{line.removeprefix('PORT=')}/mcp"
    finally:
        process.kill()
        process.wait()


def http_config(url: str, name: str = "web", **fields: Any) -> McpServerConfig:
    return McpServerConfig(name=name, url=url, **fields)


def everything_command() -> tuple[str, ...]:
    """server-everything over stdio; the test is skipped, with the install command, when it is
    not installed (.ci/run installs it)."""
    node = shutil.which("node")
    if node is None or not EVERYTHING_BIN.is_file():
        pytest.skip(f"@modelcontextprotocol/server-everything is not installed: {EVERYTHING_INSTALL}")
    return (node, str(EVERYTHING_BIN), "stdio")


@contextmanager
def everything_http(port: int) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """server-everything over streamable HTTP on `port` (it has no host setting and listens on
    every interface: the tests give it a free port and reach it on 127.0.0.1); yields the process
    and its URL."""
    node, script, _ = everything_command()
    process = subprocess.Popen([node, script, "streamableHttp"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, "PORT": str(port)})
    try:
        assert process.stdout is not None
        for line in process.stdout:
            if "listening on port" in line:
                break
        else:
            raise AssertionError("server-everything did not start")
        # what it logs from now on is read (and dropped), so that a full pipe never stalls it
        threading.Thread(target=process.stdout.read, daemon=True).start()
        yield process, f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait()


@asynccontextmanager
async def attached_call(script: MockScript, mcp: McpSettings, said: str) -> AsyncIterator[tuple[Sidecar, dict[str, Any]]]:
    """A sidecar with the servers of `mcp`, declaring its tools, on a call of the mock playing
    `script`; once the user said `said`, yields the sidecar (still attached) and the first output
    item it sent."""
    async with MockUpstream(script=script) as mock:
        call_id, session = await accepted_call(mock)
        async with sidecar_on(mock, call_id, [], mcp=mcp, declare_tools=True) as (sidecar, tap):
            await tap.wait_for("upstream>relay", lambda e: e["type"] == "session.updated")
            await mock.user_turn(session, said, respond=True)
            output = await tap.wait_for("relay>upstream", lambda e: e["item"]["type"] == "function_call_output")
            yield sidecar, output["item"]


async def gemini_turns(mcp: McpSettings, rules: tuple[tuple[str, str, dict[str, Any]], ...],
                       *said: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """Gemini Live through `relay serve` with the servers of `mcp`: the user says each of `said`
    in turn (the model calls as `rules` say, see `calls`). The model's words, and the function
    declarations the provider was given, by name."""
    async with MockUpstream(script=calls(*rules, gemini=True), dialect="gemini", api_key=GEMINI_KEY) as mock:
        async with relay_for(mock.url, dialect="gemini", api_key=GEMINI_KEY, mcp=mcp) as server:
            async with gemini_client(server.base_url, key=RELAY_TOKEN) as client:
                await client.setup(generationConfig={"responseModalities": ["TEXT"]})
                for words in said:
                    await client.say(words)
                    await client.turn()
    setup = mock.sessions[0].setup or {}
    return model_words(client.messages), {d["name"]: d for tool in setup["tools"] for d in tool["functionDeclarations"]}


async def turn(client: RealtimeClient, words: str, says: str) -> dict[str, Any]:
    """The user says `words`; the response.done whose output holds `says`."""
    await client.send(user_text(words))
    await client.send({"type": "response.create"})
    return await client.wait_for(lambda e: e["type"] == "response.done" and says in json.dumps(e["response"]["output"]))


def outputs_sent(mock: MockUpstream) -> list[str]:
    """The outputs in the mock's last session, in order."""
    return [item["output"] for item in mock.sessions[-1].items if item.get("type") == "function_call_output"]


def call_started(connection: McpConnection) -> anyio.Event:
    """An event set when the next call on `connection` starts."""
    started = anyio.Event()
    original = connection.call

    async def call(tool: str, arguments: dict[str, Any], **options: Any) -> Any:
        started.set()
        return await original(tool, arguments, **options)

    connection.call = call   # type: ignore[method-assign]
    return started


async def cancelled_on_the_server(connection: McpConnection) -> str:
    """What the test server says the client cancelled (its `cancellations` tool)."""
    result = await connection.call("cancellations", {})
    return "\n".join(block.text for block in result.content)


def calls(*rules: tuple[str, str, dict[str, Any]], gemini: bool = False) -> MockScript:
    """A mock script in which the user's word `match` makes the model call `tool` with
    `arguments`; after the outputs it says them."""
    return MockScript(
        rules=[Rule(match=match, calls=[ToolCall(name=tool, arguments=arguments)]) for match, tool, arguments in rules],
        after_outputs=Reply(say="Here is what I found: {outputs}" if gemini else "Here is what I found: {output}"),
        default=Reply(say="Hello from the mock."),
    )
