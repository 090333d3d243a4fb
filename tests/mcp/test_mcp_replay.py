"""A recorded session with MCP tools replays offline, answered from the recording (at the recorded
moments: a filler and a timeout happen again), or from live servers; from code, the command and
the pytest plugin."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from relay.cli import main
from relay.mock import MockUpstream
from relay.offline.replay import replay_async
from relay.tools.mcp_config import ToolSettings
from tests.mcp.test_mcp_serve import SCRIPT
from tests.support.clients import realtime_client
from tests.support.keys import PROVIDER_KEY
from tests.support.mcp import SERVER, settings, stdio_server, turn
from tests.support.relays import relay_for

SETTINGS = settings(stdio_server(tool_settings=(
    ("slow", ToolSettings(on_delay=(200, "Hold on a moment."), timeout=2.0)),)))


async def record(directory: Path, *words: tuple[str, str]) -> Path:
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        async with relay_for(mock, mcp=SETTINGS, record_dir=directory) as server:
            async with realtime_client(server) as client:
                for said, answer in words:
                    await turn(client, said, answer)
    return next(directory.glob("*.jsonl"))


async def test_a_recorded_session_replays_offline_answered_from_the_recording(tmp_path: Path) -> None:
    path = await record(tmp_path, ("forecast please", "sunny"), ("fail now", "no luck"),
                        ("slow one", "slept 0.6 s"), ("stuck", "Here is what I found"))
    result = await replay_async(path)
    assert result.ok, "\n".join(d.describe() for d in result.divergences)
    outputs = {call.name: call.output for call in result.calls}
    assert json.loads(outputs["forecast"])["conditions"] == "sunny"
    assert "no luck" in outputs["fail"]
    assert any("filler response" in line for line in result.timeline), \
        "the recorded filler is sent again: the answer came at its recorded moment"
    assert [c.outcome for c in result.calls if c.name == "slow"][-1] == "timeout"


async def test_live_answers_come_from_the_servers(tmp_path: Path) -> None:
    path = await record(tmp_path, ("forecast please", "sunny"), ("echo it", "hello there"))
    result = await replay_async(path, mcp_answers="live", mcp=SETTINGS)
    assert result.ok, "\n".join(d.describe() for d in result.divergences)
    assert not result.warnings


def test_the_command_replays_from_the_recording_or_live(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        restore_logging: None) -> None:
    path = asyncio.run(record(tmp_path, ("echo it", "hello there")))
    assert main(["replay", str(path)]) == 0
    assert "no divergence" in capsys.readouterr().out
    assert main(["replay", str(path), "--mcp-answers", "live"]) == 2
    assert "live MCP answers need the MCP servers: --mcp or --mcp-config" in capsys.readouterr().err
    assert main(["replay", str(path), "--mcp-answers", "live", "--mcp", f"test={sys.executable} {SERVER}"]) == 0
    assert "no divergence" in capsys.readouterr().out
