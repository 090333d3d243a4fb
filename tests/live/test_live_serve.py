"""GPT-Live through `relay serve` and `relay attach` on loopback, with the official SDK's
`client.live.connect()` pointed at the relay, unchanged: a conversation per delegation mode in
which the relay's tools (or its delegate) answer. Every relay-owned call is answered once with
its call_id, each batch gets exactly one `response.create` and never before its outputs, every
delegation is answered once, and nothing relay-owned reaches the client. Every event the client
receives parses as the SDK's `ServerEvent`."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import anyio
from openai import AsyncOpenAI
from openai.types.live import ServerEvent
from pydantic import TypeAdapter

from relay.edges.sideband import Sidecar, SidecarConfig
from relay.tools import Delegation, ToolResult, delegate, tool
from tests.live.upstream import LiveCall, Played, live_upstream
from tests.support.clients import TIMEOUT
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.relays import relay_for

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ServerEvent)
SILENCE = base64.b64encode(bytes(4800)).decode()   # 100 ms of PCM16 24 kHz


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny and 21 degrees in {city}"


@tool
def get_time(city: str) -> str:
    """The local time in a city."""
    return f"noon in {city}"


@delegate(timeout=5)
def assistant(delegation: Delegation) -> ToolResult:
    """Answers the caller from the transcript."""
    city = "Paris" if "Paris" in delegation.last_user_text() else "nowhere"
    return ToolResult(result=get_weather(city), message=f"Tell the caller it is sunny in {city}.")


def responses_start(tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "session.start", "session": {"model": "gpt-live-1", "delegation": {
        "type": "responses", "responses": {"model": "gpt-5.4", "tools": tools}}}}


async def converse(port: int, start: dict[str, Any], *, until: str,
                   answer_client_calls: bool = False) -> list[bytes]:
    """One conversation through the relay with the SDK: start, audio, then every event until an
    output transcript says `until`; the client answers its own calls (and asks for the
    continuation) when told to. Returns the raw frames it received."""
    client = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    received: list[bytes] = []
    async with client.live.connect() as connection:
        await connection.send(start)   # type: ignore[arg-type]
        await connection.send({"type": "session.input_audio.append", "audio": SILENCE})
        with anyio.fail_after(TIMEOUT):
            while True:
                raw = await connection.recv_bytes()
                received.append(raw)
                event = SERVER_EVENT.validate_json(raw)
                if answer_client_calls and event.type == "response.event":
                    nested = event.event
                    item = nested.get("item") if isinstance(nested, dict) else None
                    if nested.get("type") == "response.output_item.done" and isinstance(item, dict) \
                            and item.get("type") == "function_call":
                        await connection.send({"type": "response.item.create", "item": {
                            "type": "function_call_output", "call_id": item["call_id"], "output": "map shown"}})
                        await connection.send({"type": "response.create"})
                if event.type == "session.output_transcript.delta" and until in event.delta:
                    break
        await connection.send({"type": "session.close"})
    return received


async def test_responses_delegation_through_serve_with_the_sdk() -> None:
    calls = [LiveCall("get_weather", {"city": "Paris"}), LiveCall("get_time", {"city": "Paris"})]
    async with live_upstream(calls) as upstream:
        async with relay_for(upstream.url, dialect="live", tools=[get_weather, get_time]) as server:
            frames = await converse(server.port, responses_start([]), until="sunny and 21 degrees in Paris")
    played = upstream.sessions[0]
    await asyncio.wait_for(played.done.wait(), TIMEOUT)
    assert played.refused == []
    declared = played.of("session.start")[0]["session"]["delegation"]["responses"]["tools"]
    assert [tool["name"] for tool in declared] == ["get_weather", "get_time"]
    outputs = [e["item"] for e in played.of("response.item.create")]
    assert sorted(o["output"] for o in outputs) == ["noon in Paris", "sunny and 21 degrees in Paris"]
    assert len({o["call_id"] for o in outputs}) == 2, "every relay call answered once, by its call_id"
    check_one_create_after_the_outputs(played)
    shown = b"".join(frames)
    assert b"get_weather" not in shown and b"get_time" not in shown, "the client saw a relay tool"
    assert b"function_call" not in shown, "the client saw a relay call"


async def test_a_mixed_batch_through_serve_waits_for_the_clients_output() -> None:
    calls = [LiveCall("get_weather", {"city": "Paris"}), LiveCall("show_map", {"city": "Paris"})]
    show_map = {"type": "function", "name": "show_map", "description": "Show a map.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    async with live_upstream(calls) as upstream:
        async with relay_for(upstream.url, dialect="live", tools=[get_weather]) as server:
            frames = await converse(server.port, responses_start([show_map]), until="map shown",
                                    answer_client_calls=True)
    played = upstream.sessions[0]
    await asyncio.wait_for(played.done.wait(), TIMEOUT)
    assert played.refused == []
    assert sorted(e["item"]["output"] for e in played.of("response.item.create")) == [
        "map shown", "sunny and 21 degrees in Paris"]
    check_one_create_after_the_outputs(played)
    shown = b"".join(frames)
    assert b"show_map" in shown and b"get_weather" not in shown


async def test_client_delegation_through_serve_is_answered_by_the_delegate() -> None:
    async with live_upstream() as upstream:
        async with relay_for(upstream.url, dialect="live", tools=[get_weather, assistant]) as server:
            frames = await converse(server.port, {"type": "session.start", "session": {
                "model": "gpt-live-1", "delegation": {"type": "client"}}}, until="It is sunny.")
    played = upstream.sessions[0]
    await asyncio.wait_for(played.done.wait(), TIMEOUT)
    assert played.refused == []
    appends = played.of("session.thinking.append") + played.of("session.commentary.append")
    (delegation_id,) = {a["delegation_id"] for a in appends}
    assert delegation_id.startswith("item_"), "the delegation, answered under its id"
    assert [(a["type"], a["content"]) for a in appends] == [
        ("session.thinking.append", "sunny and 21 degrees in Paris"),
        ("session.commentary.append", "Tell the caller it is sunny in Paris.")]
    assert played.of("session.start")[0]["session"] == {"model": "gpt-live-1", "delegation": {"type": "client"}}
    events = [json.loads(frame) for frame in frames]
    assert "session.delegation.created" not in [e["type"] for e in events], "the relay's delegation was shown"
    assert delegation_id.encode() not in b"".join(frames)


async def test_attach_to_a_live_session_answers_its_calls_without_session_start() -> None:
    async with live_upstream([LiveCall("get_weather", {"city": "Paris"})]) as upstream:
        config = SidecarConfig(tools=[get_weather], upstream=upstream.url, dialect="live", api_key=PROVIDER_KEY,
                               declare_tools=True)
        sidecar = Sidecar(upstream.session_id, config)
        async with anyio.create_task_group() as group:
            group.start_soon(sidecar.run)
            await asyncio.wait_for(upstream.connected.wait(), TIMEOUT)
            played = upstream.sessions[0]
            await played.wait_for("response.create", TIMEOUT)
            await sidecar.stop()
    assert played.path == f"/v1/live/sessions/{upstream.session_id}/attach"
    assert played.of("session.start") == []
    (update,) = played.of("session.update")
    assert [t["name"] for t in update["session"]["delegation"]["responses"]["tools"]] == ["get_weather"]
    (output,) = [e["item"] for e in played.of("response.item.create")]
    assert output["output"] == "sunny and 21 degrees in Paris"
    check_one_create_after_the_outputs(played)
    assert played.refused == []


def check_one_create_after_the_outputs(played: Played) -> None:
    kinds = [e["type"] for e in played.received]
    creates = [i for i, kind in enumerate(kinds) if kind == "response.create"]
    outputs = [i for i, kind in enumerate(kinds) if kind == "response.item.create"]
    assert len(creates) == 1, f"one response.create for the batch, not {len(creates)}"
    assert outputs and max(outputs) < creates[0], "the create came before an output"
