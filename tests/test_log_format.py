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

from relay.cli import main
from relay.observe.logs import configure_logging, resolved_format
from tests.support.keys import PROVIDER_KEY
from tests.support.paths import REPO

TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ERROR relay\.cli: (.*) command=serve$")


def serve_at_a_terminal_with_broken_tools(tmp_path: Path) -> tuple[int, str]:
    """`relay serve`, its stderr a pseudo-terminal, with a tools file that does not import: its
    exit status and what it wrote to the terminal."""
    tools = tmp_path / "broken_tools.py"
    tools.write_text("def broken(:\n")
    command = [sys.executable, "-m", "relay", "serve", "--port", "0", "--dialect", "openai",
               "--tools", str(tools)]
    environment = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "OPENAI_API_KEY": PROVIDER_KEY}
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
    status, stderr = serve_at_a_terminal_with_broken_tools(tmp_path)
    assert status == 2
    [line] = stderr.strip().splitlines()
    found = TEXT_LINE.match(line)
    assert found, line
    assert found.group(1).startswith("importing ") and "SyntaxError: invalid syntax at " in found.group(1)
    assert found.group(1).endswith(": def broken(:")   # as the user wrote it: not escaped, not JSON


def test_a_startup_error_into_a_pipe_is_a_json_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    restore_logging: None) -> None:
    """In-process: stderr is pytest's capture, not a terminal (tests/test_cli_bad_input.py runs
    `relay serve` with a pipe as stderr and reads the same JSON line)."""
    tools = tmp_path / "broken_tools.py"
    tools.write_text("def broken(:\n")
    assert main(["serve", "--port", "0", "--dialect", "openai", "--tools", str(tools)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    record = json.loads(line)
    assert (record["level"], record["logger"], record["command"]) == ("error", "relay.cli", "serve")
    assert "SyntaxError: invalid syntax" in record["msg"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_option_overrides_what_stderr_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             restore_logging: None) -> None:
    tools = tmp_path / "broken_tools.py"
    tools.write_text("def broken(:\n")
    serve = ["serve", "--port", "0", "--dialect", "openai", "--tools", str(tools)]
    for stream, log_format in ((Terminal(), "json"), (io.StringIO(), "text")):
        monkeypatch.setattr(sys, "stderr", stream)
        assert main([*serve, "--log-format", log_format]) == 2
        [line] = stream.getvalue().splitlines()
        if log_format == "json":
            assert json.loads(line)["command"] == "serve"
        else:
            assert TEXT_LINE.match(line), line


@pytest.mark.parametrize("stream, expected", [(Terminal(), "text"), (io.StringIO(), "json")])
def test_auto_follows_the_stream(stream: io.StringIO, expected: str, restore_logging: None) -> None:
    assert resolved_format("auto", stream) == expected
    assert resolved_format("json", Terminal()) == "json" and resolved_format("text", io.StringIO()) == "text"
    configure_logging("auto", stream=stream)
    logging.getLogger("relay.test").warning("hello")
    written = stream.getvalue().strip()
    assert written.startswith("{") == (expected == "json")
