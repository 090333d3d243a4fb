"""GPT-Live through `relay serve` against the project's GPT-Live mock (`MockUpstream(dialect="live")`),
with the official SDK's `client.live.connect()` pointed at the relay, unchanged: the caller's turn
is played by the mock (`user_turn`), its timeline advances with the audio the client sends, and the
model speaks what the relay's tools (or its delegate) answered. Every relay-owned call is answered
once with its call_id, the batch gets exactly one `response.create` after its outputs, every
delegation is answered once, and nothing relay-owned reaches the client."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anyio
from openai import AsyncOpenAI
from openai.types.live import ServerEvent
from pydantic import TypeAdapter

from relay.edges.sideband import Sidecar, SidecarConfig
from relay.offline.replay import replay_async
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.tools import Delegation, ToolResult, delegate, tool
from tests.support.clients import TIMEOUT
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.relays import relay_for

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ServerEvent)
AUDIO = base64.b64encode(bytes(4800)).decode()   # 100 ms of PCM16 at 24 kHz
SCRIPT = MockScript(
    rules=[Rule(match="weather", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"}),
                                        ToolCall(name="get_time", arguments={"city": "Paris"})]),
           Rule(match="map", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"}),
                                    ToolCall(name="show_map", arguments={"city": "Paris"})])],
    after_outputs=Reply(say="Here it is: {output}"),
)


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


@tool
def get_time(city: str) -> str:
    """The local time in a city."""
    return f"noon in {city}"


@delegate(timeout=5)
def assistant(delegation: Delegation) -> ToolResult:
    """Answers the caller from the transcript."""
    city = "Paris" if "Paris" in delegation.last_user_text() else "nowhere"
    return ToolResult(result=f"forecast for {city}", message=f"It is sunny in {city}.")


async def conversation(mock: MockUpstream, port: int, delegation: dict[str, Any], *, answered: str,
                       says: str, turn: str = "What's the weather in Paris?", client_answers: bool = False) -> str:
    """Start a session through the relay, play the caller's turn, wait until the mock received
    `answered`, then let the timeline run until the model's words hold `says`. Returns what the
    client received, raw."""
    client = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    received: list[str] = []
    heard = ""
    async with client.live.connect() as connection:
        await connection.send({"type": "session.start", "session": {"model": "gpt-live-1", "delegation": delegation}})
        with anyio.fail_after(TIMEOUT):
            while (event := SERVER_EVENT.validate_json(raw := await connection.recv_bytes())).type != "session.started":
                received.append(raw.decode())
            received.append(raw.decode())
            await connection.send({"type": "session.input_audio.append", "audio": AUDIO})
            session = mock.sessions[-1]
            await mock.user_turn(session, turn)
            if client_answers:   # the client runs its own call, as an SDK application does
                await answer_own_call(connection, received)
            await mock.wait_for(lambda e: e["type"] == answered, TIMEOUT)
            for _ in range(30):   # 3 s of the caller's silence: the timeline reaches the model's words
                await connection.send({"type": "session.input_audio.append", "audio": AUDIO})
            while says not in heard:
                raw = await connection.recv_bytes()
                received.append(raw.decode())
                event = SERVER_EVENT.validate_json(raw)
                if event.type == "session.output_transcript.delta":
                    heard += event.delta
        await close_reading(connection, received)
    return "\n".join(received)


async def close_reading(connection: Any, received: list[str] | None = None) -> None:
    """Close the session as a client that keeps reading does: `session.close`, then every event
    until `session.closed`. (A client that stops reading leaves the server's close frame behind
    the audio it has not read, and its closing handshake waits out its timeout.)"""
    await connection.send({"type": "session.close"})
    with anyio.fail_after(TIMEOUT):
        while True:
            raw = await connection.recv_bytes()
            if received is not None:
                received.append(raw.decode())
            if SERVER_EVENT.validate_json(raw).type == "session.closed":
                return


async def answer_own_call(connection: Any, received: list[str]) -> None:
    """Read until the client's own function call arrives; answer it and ask for the continuation."""
    while True:
        raw = await connection.recv_bytes()
        received.append(raw.decode())
        event = SERVER_EVENT.validate_json(raw)
        nested = event.event if event.type == "response.event" else {}
        item = nested.get("item") if nested.get("type") == "response.output_item.done" else None
        if isinstance(item, dict) and item.get("type") == "function_call":
            await connection.send({"type": "response.item.create", "item": {
                "type": "function_call_output", "call_id": item["call_id"], "output": "map shown"}})
            await connection.send({"type": "response.create"})
            return


async def test_responses_delegation_against_the_mock_with_the_sdk() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock:
        async with relay_for(mock, path="/v1/live/sessions", dialect="live", tools=[get_weather, get_time]) as server:
            shown = await conversation(mock, server.port, {"type": "responses", "responses": {"model": "gpt-5.4"}},
                                       answered="response.create", says="Here it is")
    received = [record.event for record in mock.received]
    kinds = [event["type"] for event in received]
    outputs = [event["item"] for event in received if event["type"] == "response.item.create"]
    assert sorted(item["output"] for item in outputs) == ["noon in Paris", "sunny in Paris"]
    assert len({item["call_id"] for item in outputs}) == 2, "each call answered once, by its call_id"
    assert kinds.count("response.create") == 1
    assert kinds.index("response.create") > max(i for i, kind in enumerate(kinds) if kind == "response.item.create")
    assert not any(e["type"] == "error" for e in (r.event for r in mock.sent)), "the mock refused something"
    assert "get_weather" not in shown and "get_time" not in shown and "function_call" not in shown


async def test_a_mixed_batch_waits_for_the_clients_output_and_gets_one_create() -> None:
    show_map = {"type": "function", "name": "show_map", "description": "Show a map of a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
    async with MockUpstream(script=SCRIPT, dialect="live") as mock:
        async with relay_for(mock, path="/v1/live/sessions", dialect="live", tools=[get_weather]) as server:
            shown = await conversation(mock, server.port, {"type": "responses", "responses": {
                "model": "gpt-5.4", "tools": [show_map]}}, answered="response.create", says="Here it is",
                turn="Show me a map of Paris", client_answers=True)
    received = [record.event for record in mock.received]
    kinds = [event["type"] for event in received]
    outputs = [event["item"]["output"] for event in received if event["type"] == "response.item.create"]
    assert sorted(outputs) == ["map shown", "sunny in Paris"]
    assert kinds.count("response.create") == 1, "the client's create, held until the relay's output was in"
    assert kinds.index("response.create") > max(i for i, kind in enumerate(kinds) if kind == "response.item.create")
    assert not any(e["type"] == "error" for e in (r.event for r in mock.sent)), "the mock refused something"
    assert "show_map" in shown and "get_weather" not in shown


async def test_client_delegation_against_the_mock_is_answered_by_the_delegate() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock:
        async with relay_for(mock, path="/v1/live/sessions", dialect="live", tools=[get_weather, assistant]) as server:
            shown = await conversation(mock, server.port, {"type": "client"},
                                       answered="session.commentary.append", says="sunny in Paris")
    received = [record.event for record in mock.received]
    appends = [e for e in received if e["type"] in ("session.thinking.append", "session.commentary.append")]
    (delegation_id,) = {e["delegation_id"] for e in appends}
    assert [(e["type"], e["content"]) for e in appends] == [
        ("session.thinking.append", "forecast for Paris"), ("session.commentary.append", "It is sunny in Paris.")]
    assert not any(e["type"] == "error" for e in (r.event for r in mock.sent)), "the mock refused something"
    assert delegation_id not in shown, "the relay's delegation reached the client"


async def test_attach_beside_an_sdk_session_answers_its_calls_on_the_sideband(tmp_path: Path) -> None:
    declared = [{"type": "function", "name": spec.name, "description": spec.description, "parameters": spec.parameters}
                for spec in (get_weather.__relay_tool__, get_time.__relay_tool__)]   # type: ignore[attr-defined]
    async with MockUpstream(script=SCRIPT, dialect="live") as mock:
        client = AsyncOpenAI(api_key="sk-test", websocket_base_url=mock.base_url + "/v1")
        async with client.live.connect() as connection, anyio.create_task_group() as group:
            await connection.send({"type": "session.start", "session": {"model": "gpt-live-1", "delegation": {
                "type": "responses", "responses": {"model": "gpt-5.4", "tools": declared}}}})
            with anyio.fail_after(TIMEOUT):
                while SERVER_EVENT.validate_json(await connection.recv_bytes()).type != "session.started":
                    pass
                session = mock.sessions[-1]
                sidecar = Sidecar(session.id, SidecarConfig(tools=[get_weather, get_time], upstream=mock.url,
                                                            dialect="live", api_key=PROVIDER_KEY,
                                                            record_dir=str(tmp_path)))
                group.start_soon(sidecar.run)
                await sidecar.attached.wait()
                await mock.wait_for_sent(lambda e: e["type"] == "session.started", TIMEOUT, start=1)
                await connection.send({"type": "session.input_audio.append", "audio": AUDIO})
                await mock.user_turn(session, "What's the weather in Paris?")
                await mock.wait_for(lambda e: e["type"] == "response.create", TIMEOUT)
                for _ in range(30):
                    await connection.send({"type": "session.input_audio.append", "audio": AUDIO})
                heard = ""
                while "Here it is" not in heard:
                    event = SERVER_EVENT.validate_json(await connection.recv_bytes())
                    if event.type == "session.output_transcript.delta":
                        heard += event.delta
            await sidecar.stop()
            await close_reading(connection)
    sideband = [record for record in mock.received if record.connection != 0]
    kinds = [record.event["type"] for record in sideband]
    assert "session.start" not in kinds, "an attached relay never starts the session"
    outputs = [record.event["item"] for record in sideband if record.event["type"] == "response.item.create"]
    assert sorted(item["output"] for item in outputs) == ["noon in Paris", "sunny in Paris"]
    assert kinds.count("response.create") == 1 and kinds[-1] == "response.create"
    primary = [record.event["type"] for record in mock.received if record.connection == 0]
    assert "response.item.create" not in primary and "response.create" not in primary
    assert not any(r.event["type"] == "error" for r in mock.sent), "the mock refused something"
    # relay attach --record: the sideband's session is recorded, and its recording replays as it went
    (recording,) = tmp_path.glob("*.jsonl")
    replayed = await replay_async(recording, [get_weather, get_time])
    assert replayed.ok and sorted(str(c.output) for c in replayed.calls) == ["noon in Paris", "sunny in Paris"]
