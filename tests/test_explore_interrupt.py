"""Ctrl-C during `relay explore`: the first stops the exploration after the schedule in flight and
reports what it tried, without a traceback and without a handler taking the interrupt as its
call's error; the second ends the process at once."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Iterator

import pytest

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.offline.explore import ExploreResult, explore
from relay.offline.explore_session import Conversation
from relay.tools.sources import tool_registry
from tests.support.paths import REPO

WAIT = 60.0


def test_an_exploration_asked_to_stop_reports_what_it_tried() -> None:
    seen: list[int] = []

    def progress(result: ExploreResult) -> None:
        seen.append(result.tried)

    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS]))
    result = explore(conversation, budget=10_000, seed=3, progress=progress, stop=lambda: bool(seen))
    assert (result.stopped, result.tried, result.ok) == ("interrupted", 50, True)
    assert result.to_json()["stopped"] == "interrupted"
    assert "stopped by                 an interrupt (Ctrl-C)" in result.report()
    assert all(count == 50 for count in result.held.values() if count), result.held


def _lines(stream: IO[str]) -> queue.Queue[str]:
    """The stream's lines as they come, from a thread (the test waits on them with a timeout)."""
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
        lines.put("")

    threading.Thread(target=read, daemon=True).start()
    return lines


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts, killed at its end if still running (a failed test must not
    leave an exploration of a million schedules behind)."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=WAIT)


def _explore_until_progress(spawned: list[subprocess.Popen[str]], *args: str, budget: int = 1_000_000,
                            ignoring: bool = False,
                            ) -> tuple[subprocess.Popen[str], queue.Queue[str], list[str], queue.Queue[str]]:
    """`relay explore` (default: the demo) with a budget it will not reach, once it reported its
    first schedules; `ignoring`: started with SIGINT ignored, as a shell's background job is."""
    command = [sys.executable, "-m", "relay", "explore", *(args or ("demo",)), "--budget", str(budget)]
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(REPO)},
                               preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignoring else None)
    spawned.append(process)
    assert process.stderr is not None and process.stdout is not None
    errors, output = _lines(process.stderr), _lines(process.stdout)
    said: list[str] = []
    while not said or not said[-1].startswith("explored 50/"):
        said.append(errors.get(timeout=WAIT))
        assert said[-1], f"relay explore ended before exploring: {said}"
    return process, errors, said, output


def _ended(process: subprocess.Popen[str], errors: queue.Queue[str], said: list[str],
           output: queue.Queue[str]) -> tuple[str, str]:
    """What the process printed on stdout and stderr, once it ended."""
    while said[-1]:
        said.append(errors.get(timeout=WAIT))
    out = [output.get(timeout=WAIT)]
    while out[-1]:
        out.append(output.get(timeout=WAIT))
    process.wait(timeout=WAIT)
    return "".join(out), "".join(said)


def test_ctrl_c_stops_relay_explore_with_its_summary_and_no_traceback(
        spawned: list[subprocess.Popen[str]]) -> None:
    process, errors, said, output = _explore_until_progress(spawned)
    process.send_signal(signal.SIGINT)
    out, stderr = _ended(process, errors, said, output)
    assert process.returncode == 130, (out, stderr)
    assert "stopping after this schedule" in stderr
    assert "Traceback" not in stderr and "never retrieved" not in stderr, stderr
    assert "an interrupt (Ctrl-C)" in out
    assert "BROKEN" not in out, out   # the interrupt is no handler's error: nothing broke


BLOCKING_TOOL = """
import os, sys, threading
from relay.tools import tool

@tool
def lookup_order(order_id: str) -> str:
    \"\"\"Look an order up.\"\"\"
    if os.path.exists(os.environ["BLOCK_FLAG"]):
        print("stuck", file=sys.stderr, flush=True)
        threading.Event().wait()   # blocked in real time, as a tool stuck on a network call is
    return "shipped"
"""
BLOCKING_SCRIPT = """{"lines": ["Where is order A1?"],
 "script": {"rules": [{"match": "order", "calls": [{"name": "lookup_order", "arguments": {"order_id": "A1"}}]}],
            "after_outputs": {"say": "{output}"}}}"""


def test_a_second_ctrl_c_ends_relay_explore_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    spawned: list[subprocess.Popen[str]]) -> None:
    """The first Ctrl-C waits for the schedule in flight, whose tool is stuck in real time; the
    second ends the process there (a `KeyboardInterrupt` would leave the tool's thread holding
    the interpreter's exit)."""
    (tmp_path / "stuck.py").write_text(BLOCKING_TOOL)
    (tmp_path / "order.script.json").write_text(BLOCKING_SCRIPT)
    flag = tmp_path / "block"
    monkeypatch.setenv("BLOCK_FLAG", str(flag))
    process, errors, said, output = _explore_until_progress(spawned, str(tmp_path / "order.script.json"),
                                                    "--tools", str(tmp_path / "stuck.py"))
    flag.touch()   # from here on, the next schedule's tool never returns
    while said[-1] != "stuck\n":
        said.append(errors.get(timeout=WAIT))
        assert said[-1], said
    process.send_signal(signal.SIGINT)
    while "stopping after this schedule" not in said[-1]:
        said.append(errors.get(timeout=WAIT))
        assert said[-1], said
    process.send_signal(signal.SIGINT)
    out, stderr = _ended(process, errors, said, output)
    assert process.returncode == 130, stderr
    assert "relay explore: interrupted" in stderr and "Traceback" not in stderr, stderr
    assert out == ""   # stopped inside a schedule: no summary


def test_relay_explore_started_with_sigint_ignored_keeps_ignoring_it(spawned: list[subprocess.Popen[str]]) -> None:
    """A background job (`relay explore ... &` in a script) starts with SIGINT ignored: the
    exploration does not take it up, and runs to its budget."""
    process, errors, said, output = _explore_until_progress(spawned, budget=120, ignoring=True)
    process.send_signal(signal.SIGINT)
    out, stderr = _ended(process, errors, said, output)
    assert process.returncode == 0, stderr
    assert "stopping after this schedule" not in stderr
    assert "schedules tried            120" in out and "the schedule budget" in out
