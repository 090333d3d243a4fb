"""Logs are text when stderr is a terminal and JSON otherwise, or as `--log-format` says
(issue 20, point 6: a startup error at a terminal was one escaped JSON line). The terminal is a
real pseudo-terminal (`pty.openpty`) given to a `relay serve` subprocess as its stderr."""

from __future__ import annotations

import io
import json
import logging
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from relay.logs import configure_logging, resolved_format
from tests.support.keys import PROVIDER_KEY
from tests.support.paths import REPO

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ERROR relay\.cli: (.*) command=serve$")


def serve_with_broken_tools(tmp_path: Path, *options: str, terminal: bool) -> tuple[int, str]:
    """`relay serve` with a tools file that does not import: its exit status and its stderr."""
    tools = tmp_path / "broken_tools.py"
    tools.write_text("def broken(:\n")
    command = [sys.executable, "-m", "relay", "serve", "--port", "0", "--dialect", "openai",
               "--tools", str(tools), *options]
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OPENAI_API_KEY": PROVIDER_KEY}
    if not terminal:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=environment)
        return done.returncode, done.stderr
    controller, terminal_end = pty.openpty()
    try:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=terminal_end, env=environment)
        os.close(terminal_end)
        received = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], deadline - time.monotonic())
            if not ready:
                break
            try:
                chunk = os.read(controller, 4096)
            except OSError:   # EIO: the process closed its end of the terminal
                break
            if not chunk:
                break
            received += chunk
        status = process.wait(timeout=10)
    finally:
        os.close(controller)
    return status, received.decode().replace("\r\n", "\n")


def test_a_startup_error_at_a_terminal_is_a_text_line(tmp_path: Path) -> None:
    status, stderr = serve_with_broken_tools(tmp_path, terminal=True)
    assert status == 2
    [line] = stderr.strip().splitlines()
    found = TEXT_LINE.match(line)
    assert found, line
    assert found.group(1).startswith("importing ") and "SyntaxError: invalid syntax at " in found.group(1)
    assert found.group(1).endswith(": def broken(:")   # as the user wrote it: not escaped, not JSON


def test_a_startup_error_into_a_pipe_is_a_json_line(tmp_path: Path) -> None:
    status, stderr = serve_with_broken_tools(tmp_path, terminal=False)
    assert status == 2
    [line] = stderr.strip().splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"], record["command"]) == ("error", "relay.cli", "serve")
    assert "SyntaxError: invalid syntax" in record["msg"]


def test_the_option_overrides_what_stderr_is(tmp_path: Path) -> None:
    status, stderr = serve_with_broken_tools(tmp_path, "--log-format", "json", terminal=True)
    assert status == 2 and json.loads(stderr.strip())["level"] == "error"
    status, stderr = serve_with_broken_tools(tmp_path, "--log-format", "text", terminal=False)
    assert status == 2 and TEXT_LINE.match(stderr.strip())


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("stream, expected", [(Terminal(), "text"), (io.StringIO(), "json")])
def test_auto_follows_the_stream(stream: io.StringIO, expected: str, restore_logging: None) -> None:
    assert resolved_format("auto", stream) == expected
    assert resolved_format("json", Terminal()) == "json" and resolved_format("text", io.StringIO()) == "text"
    configure_logging("auto", stream=stream)
    logging.getLogger("relay.test").warning("hello")
    written = stream.getvalue().strip()
    assert written.startswith("{") == (expected == "json")
