"""The GPT-Live mock as the relay's upstream: the official SDK's `client.live.connect()` talks to
`relay serve`, which talks to `MockUpstream(dialect="live")`. In Responses delegation the relay's
tools answer the mock's calls, each once, and the batch gets one `response.create` after its
outputs; in client delegation the relay's delegate answers the mock's delegation with appends the
mock acknowledges on its timeline. The mock refuses nothing the relay sends."""

from __future__ import annotations

import base64
from typing import Any

import anyio
from openai import AsyncOpenAI

from relay.mock import LiveMockSession, MockScript, MockUpstream, Reply, Rule, ToolCall
from tests.live.test_live_serve import assistant, get_time, get_weather   # the tools the engine's tests use
from tests.support.clients import TIMEOUT
from tests.support.keys import RELAY_TOKEN
from tests.support.relays import relay_for

SILENCE = base64.b64encode(bytes(4800)).decode()   # 100 ms of PCM16 24 kHz
SCRIPT = MockScript(
    rules=[Rule(match="Paris", say="One moment.", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"}),
                                                         ToolCall(name="get_time", arguments={"city": "Paris"})])],
    after_outputs=Reply(say="Here it is: {joined}"),
)


async def converse(mock: MockUpstream, port: int, session: dict[str, Any], until: str) -> list[str]:
    """The SDK through the relay: start, then silence while the caller asks about Paris, until the
    model's transcript says `until`. Returns every event the client got, as JSON."""
    client = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{port}/v1")
    seen: list[str] = []
    said = ""
    async with client.live.connect() as connection:
        await connection.session.start(session=session)   # type: ignore[arg-type]
        with anyio.fail_after(TIMEOUT):
            while (event := await connection.recv()).type != "session.started":
                seen.append(event.to_json())
            live = mock.sessions[0]
            assert isinstance(live, LiveMockSession)
            await mock.user_turn(live, "What's the weather and the time in Paris?")
            while until not in said:
                await connection.session.input_audio.append(audio=SILENCE)
                event = await connection.recv()
                seen.append(event.to_json())
                if event.type == "session.output_transcript.delta":
                    said += event.delta
        await connection.session.close()
    return seen


def refusals(mock: MockUpstream) -> list[dict[str, Any]]:
    return [record.event for record in mock.sent if record.event["type"] == "error"]


async def test_the_relay_answers_the_mock_s_backend_calls_once_with_one_create() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock:
        async with relay_for(mock, "/v1/live/sessions", dialect="live", tools=[get_weather, get_time]) as server:
            seen = await converse(mock, server.port, {"model": "gpt-live-1", "delegation": {
                "type": "responses", "responses": {"model": "gpt-5", "tools": []}}}, "noon in Paris")
        session = mock.sessions[0]
    assert isinstance(session, LiveMockSession)
    assert refusals(mock) == []
    received = [record.event for record in mock.received]
    outputs = [event["item"] for event in received if event["type"] == "response.item.create"]
    assert sorted(output["output"] for output in outputs) == ["noon in Paris", "sunny and 21 degrees in Paris"]
    assert {output["call_id"] for output in outputs} == set(session.backend.calls)
    kinds = [event["type"] for event in received]
    assert kinds.count("response.create") == 1 and kinds.index("response.create") > max(
        index for index, kind in enumerate(kinds) if kind == "response.item.create")
    assert session.backend.creates == 1
    shown = "".join(seen)
    assert "get_weather" not in shown and "function_call" not in shown, "the client saw the relay's calls"


async def test_the_relay_s_delegate_answers_the_mock_s_delegation() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock:
        async with relay_for(mock, "/v1/live/sessions", dialect="live", tools=[get_weather, assistant]) as server:
            seen = await converse(mock, server.port, {"model": "gpt-live-1", "delegation": {"type": "client"}},
                                  "Tell the caller it is sunny in Paris.")
        session = mock.sessions[0]
    assert isinstance(session, LiveMockSession)
    assert refusals(mock) == []
    (delegation,) = session.delegations.values()
    appends = [event for event in session.acknowledged if event.delegation_id == delegation.id]
    assert [event.content for event in appends] == ["sunny and 21 degrees in Paris", "Tell the caller it is sunny in Paris."]
    assert delegation.results == ["Tell the caller it is sunny in Paris."]
    assert "session.delegation.created" not in "".join(seen), "the client saw the relay's delegation"
