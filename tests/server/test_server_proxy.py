"""`relay serve` end to end on loopback: a client (the official SDK, or a raw socket) talks to the
relay, the relay to the mock upstream; the relay's tools run inside the session."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from openai.types.realtime import RealtimeServerEvent
from openai import AsyncOpenAI
from pydantic import TypeAdapter

from relay.mock import MockScript, MockUpstream, Rule, ToolCall
from relay.tools import tool
from tests.support.clients import TIMEOUT, realtime_client
from tests.support.frames import received_types, user_text
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.relays import relay_for
from tests.support.tools import WEATHER_SCRIPT


SERVER_EVENT = TypeAdapter(RealtimeServerEvent)


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny and 21 degrees in {city}"


def check_item_chain(events: list[dict[str, Any]]) -> None:
    """Every `previous_item_id` the client is shown names an item it was shown before."""
    seen: set[str] = set()
    for event in events:
        previous = event.get("previous_item_id")
        if event["type"] in ("conversation.item.added", "conversation.item.created",
                             "input_audio_buffer.committed") and previous is not None:
            assert previous in seen, f"{event['type']} points at {previous}, which the client never saw"
        item = event.get("item")
        if isinstance(item, dict) and "id" in item:
            seen.add(item["id"])
        if event["type"] == "input_audio_buffer.committed":
            seen.add(event["item_id"])


async def test_sdk_client_gets_a_consistent_session_without_the_relay_tool(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, tools=[get_weather]) as server:
        client = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
        raw_frames: list[bytes] = []
        async with client.realtime.connect(model="gpt-realtime") as connection:
            await connection.session.update(session={"type": "realtime", "instructions": "Be brief."})
            await connection.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "What's the weather in Paris?"}]})
            await connection.response.create()
            responses_done = 0
            async with asyncio.timeout(TIMEOUT):
                while responses_done < 2:
                    raw = await connection.recv_bytes()
                    raw_frames.append(raw)
                    event = SERVER_EVENT.validate_json(raw)   # every event parses as the SDK's type
                    responses_done += event.type == "response.done"

    events = [json.loads(raw) for raw in raw_frames]
    assert not any(b"get_weather" in raw for raw in raw_frames), "the client saw the relay tool"
    assert not any(b"function_call" in raw for raw in raw_frames), "the client saw the relay call or output"
    assert not any(e["type"] == "error" for e in events)
    check_item_chain(events)
    final = [e for e in events if e["type"] == "response.done"][-1]
    assert "sunny and 21 degrees in Paris" in json.dumps(final["response"]["output"])

    upstream_events = [record.event for record in weather_mock.received]
    outputs = [e for e in upstream_events if e["type"] == "conversation.item.create"
               and e["item"]["type"] == "function_call_output"]
    assert len(outputs) == 1 and outputs[0]["item"]["output"] == "sunny and 21 degrees in Paris"
    hidden_call_id = outputs[0]["item"]["call_id"].encode()
    assert not any(hidden_call_id in raw for raw in raw_frames), "the client saw the relay call's id"
    creates = [e for e in upstream_events if e["type"] == "response.create"]
    assert len(creates) == 2   # the client's, then the relay's one follow-up
    assert upstream_events.index(creates[1]) > upstream_events.index(outputs[0])
    session = weather_mock.sessions[0]
    assert session.connections[0].auth == "bearer"
    assert [t["name"] for t in session.tools] == ["get_weather"]


async def test_client_response_create_is_held_until_the_relay_output_is_in() -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def check_stock(item: str) -> str:
        """Units in stock."""
        started.set()
        await release.wait()
        return f"3 {item}s in stock"

    script = MockScript(rules=[Rule(match="order", calls=[
        ToolCall(name="lookup_order", arguments={"order": "42"}),
        ToolCall(name="check_stock", arguments={"item": "lamp"}),
    ])])
    client_tool = {"type": "function", "name": "lookup_order", "description": "Find an order.",
                   "parameters": {"type": "object", "properties": {"order": {"type": "string"}}}}
    async with MockUpstream(script=script, api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, tools=[check_stock]) as server, realtime_client(server) as client:
        await client.send({"type": "session.update", "session": {"type": "realtime", "tools": [client_tool]}})
        updated = await client.wait_for(lambda e: e["type"] == "session.updated" and e["session"]["tools"])
        assert [t["name"] for t in updated["session"]["tools"]] == ["lookup_order"]   # ours hidden
        await client.send(user_text("Where is my order?"))
        await client.send({"type": "response.create"})
        done = await client.wait_type("response.done")
        calls = [o for o in done["response"]["output"] if o["type"] == "function_call"]
        assert [c["name"] for c in calls] == ["lookup_order"]
        await asyncio.wait_for(started.wait(), TIMEOUT)

        await client.send({"type": "conversation.item.create", "item": {
            "type": "function_call_output", "call_id": calls[0]["call_id"], "output": "shipped"}})
        await client.send({"type": "response.create", "event_id": "client_create"})
        # a later event overtakes nothing on the relay: once it is upstream, a forwarded create would be too
        await client.send({"type": "input_audio_buffer.clear", "event_id": "marker"})
        await mock.wait_for(lambda e: e.get("event_id") == "marker")
        assert received_types(mock).count("response.create") == 1, "the client's create was not held"

        release.set()
        await mock.wait_for(lambda e: e.get("event_id") == "client_create")
        await client.wait_for(lambda e: e["type"] == "response.done" and e["response"]["id"] != done["response"]["id"])

    upstream = [record.event for record in mock.received]
    relay_output = next(i for i, e in enumerate(upstream) if e["type"] == "conversation.item.create"
                        and e["item"].get("output") == "3 lamps in stock")
    client_create = next(i for i, e in enumerate(upstream) if e.get("event_id") == "client_create")
    assert relay_output < client_create
    assert received_types(mock).count("response.create") == 2   # no follow-up of the relay's own
    assert not any("check_stock" in frame for frame in client.frames)
    check_item_chain(client.events)


async def test_expose_tool_events_shows_the_relay_tool_to_the_client(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, tools=[get_weather], expose_tool_events=True) as server, \
            realtime_client(server) as client:
        created = await client.wait_type("session.created")
        await client.send(user_text("weather please"))
        await client.send({"type": "response.create"})
        output = await client.wait_for(lambda e: e["type"] == "conversation.item.added"
                                       and e["item"]["type"] == "function_call_output")
    assert output["item"]["output"] == "sunny and 21 degrees in Paris"
    assert created["type"] == "session.created"
    assert any(e["type"] == "response.output_item.added" and e["item"].get("name") == "get_weather"
               for e in client.events)


async def test_azure_upstream_gets_the_key_as_api_key_header(monkeypatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_API_KEY", PROVIDER_KEY)

    async with MockUpstream(script=WEATHER_SCRIPT, dialect="azure", api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, path="/openai/v1/realtime", dialect="azure", api_key=None,
                      tools=[get_weather]) as server, \
            realtime_client(server, path="/openai/v1/realtime?model=my-deployment", token=None,
                            headers={"api-key": RELAY_TOKEN}) as client:
        await client.wait_type("session.created")
        await client.send(user_text("weather in Paris?"))
        await client.send({"type": "response.create"})
        await mock.wait_for(lambda e: e["type"] == "conversation.item.create"
                            and e["item"]["type"] == "function_call_output")
    connection = mock.sessions[0].connections[0]
    assert connection.auth == "api-key"
    assert connection.query == {"model": "my-deployment"}
    assert "authorization" not in connection.headers


async def test_foundry_output_items_carry_the_function_name() -> None:

    async with MockUpstream(script=WEATHER_SCRIPT, dialect="foundry", api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, path="/openai/v1/realtime", dialect="foundry", tools=[get_weather]) as server, \
            realtime_client(server, path="/openai/v1/realtime?model=gpt-realtime") as client:
        await client.wait_type("session.created")
        await client.send(user_text("weather in Paris?"))
        await client.send({"type": "response.create"})
        record = await mock.wait_for(lambda e: e["type"] == "conversation.item.create"
                                     and e["item"]["type"] == "function_call_output")
        await mock.wait_for(lambda e: e["type"] == "response.create" and e.get("response", {}).get("metadata"))
    assert record.event["item"]["name"] == "get_weather"
    assert not any(e["type"] == "error" for e in client.events)


async def test_a_beta_client_gets_a_beta_session(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, tools=[get_weather]) as server, \
            realtime_client(server, headers={"OpenAI-Beta": "realtime=v1"}) as client:
        await client.wait_type("session.created")
        await client.send(user_text("weather in Paris?"))
        await client.send({"type": "response.create"})
        await client.wait_for(lambda e: e["type"] == "response.done"
                              and "sunny" in json.dumps(e["response"]["output"]))
    assert weather_mock.sessions[0].connections[0].headers.get("openai-beta") == "realtime=v1"
    assert any(e["type"] == "conversation.item.created" for e in client.events)   # beta names
