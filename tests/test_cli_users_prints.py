"""What the user's tools print while `relay explore` and `relay replay` run goes to stderr: the
command's stdout is its report alone, so `--json` parses (a tool's debug `print` used to land in the
middle of it), and what they write to the file descriptor itself (a subprocess they start, `os.write`)
does too."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from relay.cli import main
from tests.support.paths import REPO

NOISY_TOOL = """
print("{name} loaded")
from relay.tools import tool

@tool
def lookup_order(order_id: str) -> str:
    \"\"\"Look an order up.\"\"\"
    print(f"DEBUG looking up {{order_id}}")
    return "shipped"
"""
ORDER_SCRIPT = {"lines": ["Where is order A1?"],
                "script": {"rules": [{"match": "order", "calls": [{"name": "lookup_order",
                                                                   "arguments": {"order_id": "A1"}}]}],
                           "after_outputs": {"say": "{output}"}}}


def test_relay_explore_json_is_only_json_when_a_tool_prints(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    tools = tmp_path / "noisy_explored_tools.py"
    tools.write_text(NOISY_TOOL.format(name="explored tools"))
    script = tmp_path / "order.script.json"
    script.write_text(json.dumps(ORDER_SCRIPT))
    assert main(["explore", str(script), "--tools", str(tools), "--budget", "3", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["tried"] == 3
    assert "explored tools loaded" in captured.err and "DEBUG looking up A1" in captured.err


def test_relay_replay_json_is_only_json_when_a_tools_module_prints(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    tools = tmp_path / "noisy_replayed_tools.py"
    tools.write_text('print("replayed tools loaded")\nfrom relay.examples.tools import *  # noqa: F401,F403\n')
    recording = REPO / "docs" / "examples" / "recordings" / "demo.jsonl"
    assert main(["replay", str(recording), "--tools", str(tools), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["ok"] is True
    assert "replayed tools loaded" in captured.err


RAW_TOOL = """
import os, subprocess, sys
from relay.tools import tool

os.write(1, b"module writes to fd 1\\n")

@tool
def lookup_order(order_id: str) -> str:
    \"\"\"Look an order up.\"\"\"
    os.write(1, f"raw write for {order_id}\\n".encode())
    subprocess.run([sys.executable, "-c", "print('a child process prints')"], check=True)
    return "shipped"
"""


def test_relay_explore_json_is_only_json_when_a_tool_writes_to_the_descriptor(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    tools = tmp_path / "raw_explored_tools.py"
    tools.write_text(RAW_TOOL)
    script = tmp_path / "order.script.json"
    script.write_text(json.dumps(ORDER_SCRIPT))
    assert main(["explore", str(script), "--tools", str(tools), "--budget", "2", "--json"]) == 0
    captured = capfd.readouterr()
    assert json.loads(captured.out)["tried"] == 2
    for said in ("module writes to fd 1", "raw write for A1", "a child process prints"):
        assert said in captured.err
    os.write(1, b"after the command\n")   # descriptor 1 is stdout's again
    assert capfd.readouterr().out == "after the command\n"
