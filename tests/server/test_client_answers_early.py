"""A client that answers its own call early, over real sockets: `relay serve` on the mock.

In one response the model calls the client's `open_door` and then two relay tools. The client
answers `open_door` before, between or after the relay's outputs go in, and asks for a response
with its answer or once the response is done (once or twice); the relay's tools are fast, slow or
one of them times out. Whatever the order, exactly one `response.create` reaches the upstream,
after every output; the upstream never refuses a create as "already active"; the model speaks
once more; a second create is refused to the client as the provider would. (The same orders are
checked against the engine alone in tests/test_engine_client_answers_early.py.)
"""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.tools import tool
from tests.support.clients import TIMEOUT, RealtimeClient, realtime_client
from tests.support.frames import user_text
from tests.support.keys import PROVIDER_KEY
from tests.support.relays import relay_for
from tests.support.tools import DOOR_TOOL

WHEN_ANSWERED = ("before_relay_calls", "between_relay_calls", "after_relay_outputs")
WHEN_CREATED = ("with_the_answer", "after_response_done")
TOOL_SPEED = ("fast", "slow", "times_out")


def script(hold_after_door: bool) -> MockScript:
    return MockScript(
        rules=[Rule(match="door", calls=[
            ToolCall(name="open_door", arguments={"door": "front"}, call_id="call_client", hold_after=hold_after_door),
            ToolCall(name="get_weather", arguments={"city": "Paris"}, call_id="call_weather"),
            ToolCall(name="get_time", arguments={"city": "Rome"}, call_id="call_time"),
        ])],
        after_outputs=Reply(say="All done."),
    )


def outputs_received(mock: MockUpstream) -> dict[str, int]:
    return {r.event["item"]["call_id"]: n for n, r in enumerate(mock.received)
            if r.event["type"] == "conversation.item.create" and r.event["item"]["type"] == "function_call_output"}


async def answer(client: RealtimeClient) -> None:
    await client.send({"type": "conversation.item.create", "event_id": "client_output", "item": {
        "type": "function_call_output", "call_id": "call_client", "output": "opened"}})


@pytest.mark.parametrize(("when_answered", "when_created", "speed", "creates"),
                         list(itertools.product(WHEN_ANSWERED, WHEN_CREATED, TOOL_SPEED, (1, 2))))
async def test_exactly_one_create_reaches_the_upstream_after_every_output(
        when_answered: str, when_created: str, speed: str, creates: int) -> None:
    weather_may_finish, time_may_finish = asyncio.Event(), asyncio.Event()
    if speed == "fast":
        weather_may_finish.set()
        time_may_finish.set()

    @tool
    async def get_weather(city: str) -> str:
        """Weather for a city."""
        await weather_may_finish.wait()
        return f"sunny in {city}"

    @tool(timeout=0.3)
    async def get_time(city: str) -> str:
        """Time in a city."""
        await time_may_finish.wait()
        return f"noon in {city}"

    async def client_turn(client: RealtimeClient) -> None:
        await answer(client)
        if when_created == "with_the_answer":
            for n in range(creates):
                await client.send({"type": "response.create", "event_id": f"client_create_{n}"})

    before = when_answered == "before_relay_calls"
    async with MockUpstream(script=script(hold_after_door=before), api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, tools=[get_weather, get_time]) as server, realtime_client(server) as client:
        await client.send({"type": "session.update", "session": {"type": "realtime", "tools": [DOOR_TOOL]}})
        await client.wait_for(lambda e: e["type"] == "session.updated" and e["session"].get("tools"))
        await client.send(user_text("Open the door, please."))
        await client.send({"type": "response.create", "event_id": "first"})
        await client.wait_for(lambda e: e["type"] == "response.output_item.done"
                              and e["item"].get("call_id") == "call_client")
        session = mock.sessions[0]
        if before:   # the response stands still after the client's call: the relay's are still to come
            await client_turn(client)
            await mock.wait_for(lambda e: e.get("event_id") == "client_output", TIMEOUT)
            mock.release(session)
        first_done = await client.wait_type("response.done")
        weather_may_finish.set()   # slow: after the response; when get_time times out, get_weather still answers
        if when_answered == "between_relay_calls":
            await mock.wait_for(lambda e: e.get("item", {}).get("call_id") == "call_weather", TIMEOUT)
            await client_turn(client)
            await mock.wait_for(lambda e: e.get("event_id") == "client_output", TIMEOUT)
            if speed == "slow":
                time_may_finish.set()
        elif when_answered == "after_relay_outputs":
            if speed == "slow":
                time_may_finish.set()
            await mock.wait_for(lambda e: e.get("item", {}).get("call_id") == "call_time", TIMEOUT)
            await client_turn(client)
        elif speed == "slow":
            time_may_finish.set()
        if when_created == "after_response_done":
            for n in range(creates):
                await client.send({"type": "response.create", "event_id": f"client_create_{n}"})
        answered = await client.wait_for(lambda e: e["type"] == "response.done"
                                         and e["response"]["id"] != first_done["response"]["id"])
        if creates == 2 and not [e for e in client.events if e["type"] == "error"]:
            await client.wait_for(lambda e: e["type"] == "error")   # the second is refused once nothing holds it
        # what comes after the create: a marker the relay forwards, to see nothing more went up
        await client.send({"type": "input_audio_buffer.clear", "event_id": "marker"})
        await mock.wait_for(lambda e: e.get("event_id") == "marker", TIMEOUT)

    outputs = outputs_received(mock)
    assert set(outputs) == {"call_client", "call_weather", "call_time"}, "every call has its output"
    creates_sent = [n for n, r in enumerate(mock.received)
                    if r.event["type"] == "response.create" and r.event.get("event_id") != "first"]
    assert len(creates_sent) == 1, [mock.received[n].event for n in creates_sent]
    assert creates_sent[0] > max(outputs.values()), "the create went up after every output"
    assert mock.received[creates_sent[0]].event["event_id"] == "client_create_0"
    assert not [r for r in mock.sent if r.event["type"] == "error"], "the upstream refused nothing"
    assert "All done." in json.dumps(answered["response"]["output"]), "the model spoke once more"
    refused = [e["error"]["event_id"] for e in client.events
               if e["type"] == "error" and e["error"]["code"] == "conversation_already_has_active_response"]
    assert refused == [f"client_create_{n}" for n in range(1, creates)]
    time_call = next(r.event["item"] for r in mock.received if r.event.get("item", {}).get("call_id") == "call_time")
    if speed == "times_out":
        assert "timed out" in time_call["output"] and time_call["status"] == "incomplete"
