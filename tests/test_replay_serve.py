"""Record a session through `relay serve` and the mock upstream (parallel calls, a handler
error), then replay it: the same tools give no divergence (exit 0); a changed tool output is
reported with a diff (exit 1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from websockets.asyncio.client import connect

from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.edges.serve import RelayServer, ServerConfig
from tests.support.paths import REPO

TOOLS = '''
from relay import tool

@tool
def get_weather(city: str) -> dict:
    return {"city": city, "temp_c": 21}

@tool
def lookup_order(order_id: str) -> dict:
    raise LookupError(f"order {order_id} not found")
'''

SCRIPT = MockScript(
    rules=(Rule(match="weather", say="Checking.",
                calls=(ToolCall(name="get_weather", arguments={"city": "Paris"}),
                       ToolCall(name="get_weather", arguments={"city": "Rome"}),
                       ToolCall(name="lookup_order", arguments={"order_id": "Z9"}))),),
    after_outputs=Reply(say="Done: {joined}"),
)


async def record(tools_file: Path, record_dir: Path) -> Path:
    async with MockUpstream(script=SCRIPT) as mock:
        config = ServerConfig(upstream=mock.url, dialect="openai", tools=[str(tools_file)], port=0,
                              record_dir=record_dir, api_key="sk-provider-key-for-the-test")
        async with RelayServer(config) as server:
            async with connect(f"{server.url}?model=gpt-realtime") as client:
                await client.send(json.dumps({"type": "conversation.item.create", "item": {
                    "type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": "weather and my order"}]}}))
                await client.send(json.dumps({"type": "response.create"}))
                # the model's response, then the relay's follow-up: two response.done
                done = 0
                async for message in client:
                    if json.loads(message)["type"] == "response.done":
                        done += 1
                        if done == 2:
                            break
            outputs = [r.event for r in mock.received
                       if r.event.get("item", {}).get("type") == "function_call_output"]
            assert len(outputs) == 3
    [path] = record_dir.glob("*.jsonl")
    return path


def replay_cli(recording: Path, tools_file: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "relay", "replay", str(recording), "--tools", str(tools_file)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)


async def test_record_through_serve_then_replay(tmp_path: Path) -> None:
    tools_file = tmp_path / "tools.py"
    tools_file.write_text(TOOLS)
    recording = await record(tools_file, tmp_path / "recordings")
    assert "sk-provider-key-for-the-test" not in recording.read_text()

    same = replay_cli(recording, tools_file)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "verdict: no divergence" in same.stdout
    assert same.stdout.count("get_weather call_") == 2 and "lookup_order call_" in same.stdout

    tools_file.write_text(TOOLS.replace('"temp_c": 21', '"temp_c": 30'))
    changed = replay_cli(recording, tools_file)
    assert changed.returncode == 1
    assert "changed: output of call_" in changed.stdout
    assert '-      "temp_c": 21' in changed.stdout and '+      "temp_c": 30' in changed.stdout
