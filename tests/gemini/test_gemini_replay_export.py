"""A Gemini Live session recorded through `relay serve` and the Gemini mock (a relay call, a
client call, a streaming tool, a barge-in that cancels a relay call) replays without divergence,
reports a changed or missing tool by call id, and exports as a conversation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from google.genai import types as genai_types

from relay.cli import build_parser
from relay.edges.serve import RelayServer, ServerConfig
from relay.mock import MockUpstream
from relay.offline.export import export_recording
from relay.offline.replay import render_report, replay_async
from relay.offline.replaying import GeminiSends
from relay.tools import tool
from tests.support.clients import gemini_client
from tests.support.frames import model_words
from tests.support.keys import GEMINI_KEY
from tests.support.tools import GEMINI_DOOR, GEMINI_SCRIPT, get_weather_data, track

TEXT = {"generationConfig": {"responseModalities": ["TEXT"]}}


@tool(interruption="cancel")
async def ship(order_id: int) -> str:
    """Ship an order (never finishes in these tests)."""
    await anyio.sleep_forever()
    return "shipped"


TOOLS = [get_weather_data, ship, track]


def is_answer(event: dict[str, Any], name: str, final: bool = True) -> bool:
    answers = (event.get("toolResponse") or event.get("tool_response") or {}).get("functionResponses") or []
    return any(a["name"] == name and (a.get("willContinue") is not True) == final for a in answers)


async def record_session(directory: Path) -> Path:
    async with MockUpstream(script=GEMINI_SCRIPT, dialect="gemini", api_key=GEMINI_KEY) as mock:
        config = ServerConfig(upstream=mock.url, dialect="gemini", tools=TOOLS, port=0, api_key=GEMINI_KEY,
                              drain_seconds=0.0, record_dir=directory)
        async with RelayServer(config) as server:
            async with gemini_client(server.base_url, key=None) as client:
                await client.setup(tools=[{"functionDeclarations": [GEMINI_DOOR]}], **TEXT)
                await client.say("What's the weather?")
                await client.turn()
                await client.say("Open the door")
                call = (await client.turn())[-1]["toolCall"]["functionCalls"][0]
                await client.answer(call["id"], "open_door", "the door is open")
                await client.turn()
                await client.say("track my parcel")
                await mock.wait_for(lambda e: is_answer(e, "track"))
                await client.wait_for(lambda _: "P1 delivered" in model_words(client.messages))
                await client.say("ship it")
                await mock.wait_for_sent(lambda e: e["toolCall"]["functionCalls"][0]["name"] == "ship")
                await client.say("never mind")
                heard = len(client.messages)
                await client.wait_for(lambda _: "Hello from the mock." in model_words(client.messages[heard:]))
    (path,) = directory.glob("*.jsonl")
    return path


@pytest.fixture
async def recording(tmp_path: Path) -> Path:
    return await record_session(tmp_path)


async def test_the_same_tools_replay_without_divergence(recording: Path) -> None:
    result = await replay_async(recording, TOOLS, gate_timeout=2.0)
    assert result.ok, "\n".join(d.describe() for d in result.divergences)
    calls = {call.name: call for call in result.calls}
    assert set(calls) == {"get_weather", "ship", "track"}
    assert calls["get_weather"].output == '{"city":"Paris","temp_c":21}'
    assert calls["ship"].skipped and "toolCallCancellation" in calls["ship"].skipped
    assert calls["track"].recorded_output == "P1 delivered"
    timeline = "\n".join(result.timeline)
    assert "recv  call get_weather" in timeline and "recv  cancellation of" in timeline
    assert "[interim] P1 picked up" in timeline and "[final] P1 delivered" in timeline
    assert f"ship {calls['ship'].call_id}: cancelled (cancelled by the server" in render_report(result)
    client_calls = [entry for entry in result.engine.ledger if not entry.relay_owned]
    assert [(e.name, e.output) for e in client_calls] == [("open_door", "the door is open")]


async def test_a_changed_tool_is_reported_by_call_id(recording: Path) -> None:
    @tool(name="get_weather")
    def warmer(city: str) -> dict:
        """Current weather for a city."""
        return {"city": city, "temp_c": 30}

    result = await replay_async(recording, [warmer, ship, track], gate_timeout=2.0)
    (divergence,) = result.divergences
    assert divergence.kind == "changed" and divergence.what.startswith("answer 1 to function-call-")
    assert '-      "temp_c": 21' in divergence.diff and '+      "temp_c": 30' in divergence.diff


async def test_a_missing_tool_shows_in_the_setup_and_its_answers(recording: Path) -> None:
    result = await replay_async(recording, [ship, track], gate_timeout=2.0)
    kinds = sorted((d.kind, d.what.split(" to ")[0]) for d in result.divergences)
    assert kinds == [("changed", "setup"), ("missing", "answer 1")]


def test_replay_takes_the_gemini_dialect_on_the_command_line() -> None:
    assert build_parser().parse_args(["replay", "x.jsonl", "--dialect", "gemini"]).dialect == "gemini"


def test_answers_are_numbered_per_call() -> None:
    sends = GeminiSends()
    answer = {"toolResponse": {"functionResponses": [{"id": "a", "name": "t", "response": {}},
                                                     {"id": "b", "name": "t", "response": {}}]}}
    assert [key for key, _ in sends(answer)] == [("answer", "a", "0"), ("answer", "b", "0")]
    assert [key for key, _ in sends(answer)] == [("answer", "a", "1"), ("answer", "b", "1")]
    assert sends({"setup": {"model": "m"}}) == [(("setup",), {"model": "m"})]
    assert sends({"clientContent": {}}) == []


async def test_export_reads_the_gemini_recording(recording: Path) -> None:
    chat = export_recording(recording, "openai-chat").document["messages"]
    assert chat[0] == {"role": "user", "content": "What's the weather?"}
    assert chat[1]["role"] == "assistant" and chat[1]["content"] == "Let me check."
    assert chat[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert chat[2] == {"role": "tool", "tool_call_id": chat[1]["tool_calls"][0]["id"],
                       "content": '{"city":"Paris","temp_c":21}'}
    assert {"role": "tool", "tool_call_id": chat[5]["tool_calls"][0]["id"], "content": "the door is open"} in chat

    exported = export_recording(recording, "gemini")
    contents = [genai_types.Content.model_validate(c) for c in exported.document["contents"]]
    responses = {p.function_response.name: p.function_response.response
                 for c in contents for p in c.parts or [] if p.function_response is not None}
    assert responses["track"] == {"output": "P1 delivered"}, "the final answer, not the interim one"
    assert "error" in responses["ship"], "the cancelled call has no answer: the export says so"
    assert any(note.kind == "unanswered_call" and "toolCallCancellation" in note.message for note in exported.report)


def test_export_and_replay_read_a_plain_gemini_event_log(tmp_path: Path) -> None:
    log = tmp_path / "gemini_log.jsonl"
    messages = [
        {"setup": {"model": "models/m", "systemInstruction": {"parts": [{"text": "Be brief."}]}}},
        {"setupComplete": {}},
        {"clientContent": {"turns": [{"role": "user", "parts": [{"text": "weather?"}]}], "turnComplete": True}},
        {"toolCall": {"functionCalls": [{"id": "fc1", "name": "get_weather", "args": {"city": "Oslo"}}]}},
        {"toolResponse": {"functionResponses": [{"id": "fc1", "name": "get_weather", "response": {"output": "cold"}}]}},
        {"serverContent": {"modelTurn": {"parts": [{"text": "It is cold."}]}}},
        {"serverContent": {"turnComplete": True}},
    ]
    log.write_text("".join(json.dumps(m) + "\n" for m in messages))
    document = export_recording(log, "anthropic").document
    assert document["system"] == "Be brief."
    assert [m["role"] for m in document["messages"]] == ["user", "assistant", "user", "assistant"]
    assert document["messages"][2]["content"][0]["content"] == "cold"

    result = anyio.run(lambda: replay_async(log, [get_weather_data]))
    assert result.kind == "event-log"
    (call,) = result.calls
    assert (call.call_id, call.output) == ("fc1", '{"city":"Oslo","temp_c":21}')
