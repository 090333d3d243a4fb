"""MCP servers for the tests: the SDK-written test server (tests/mcp/server.py) over stdio (a
config the relay starts it from) and over streamable HTTP (a process the test runs, optionally
behind a bearer token), npm's `@modelcontextprotocol/server-everything` when it is installed, and
the mock scripts in which the model calls their tools."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from relay.mock import MockScript, Reply, Rule, ToolCall
from relay.tools.mcp_config import McpServerConfig, McpSettings
from tests.support.paths import REPO

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


def calls(*rules: tuple[str, str, dict[str, Any]], gemini: bool = False) -> MockScript:
    """A mock script in which the user's word `match` makes the model call `tool` with
    `arguments`; after the outputs it says them."""
    return MockScript(
        rules=[Rule(match=match, calls=[ToolCall(name=tool, arguments=arguments)]) for match, tool, arguments in rules],
        after_outputs=Reply(say="Here is what I found: {outputs}" if gemini else "Here is what I found: {output}"),
        default=Reply(say="Hello from the mock."),
    )
