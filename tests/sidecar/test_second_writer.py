"""The sidecar beside another writer, over sockets: a primary connection (the browser or the SIP
gateway, here a raw WebSocket client) and the sidecar's sideband (`?call_id=`) on one mock
session. The sidecar answers its own calls only, never runs two responses at once, and does
not loop on `conversation_already_has_active_response`."""

from __future__ import annotations

from typing import Any

from relay.engine import CallState, Owner
from relay.engine.sequencer import CreateState
from relay.mock import Faults, MockUpstream, Reply
from tests.support.clients import RealtimeClient, realtime_client
from tests.support.frames import outputs_received, said, session_tools, user_text
from tests.support.relays import ACTIVE_RESPONSE, SidecarTap, sidecar_on
from tests.support.tools import (
    ORDER_TOOL,
    WEATHER_SCRIPT,
    WEATHER_TOOL,
    Gate,
    get_weather,
)

# The model's answer to the tool output stays active until the test releases it.
HELD_ANSWER = WEATHER_SCRIPT.model_copy(
    update={"after_outputs": Reply(say="Here is what I found: {output}", hold=True)})


async def primary_with_tools(primary: RealtimeClient, tools: list[dict[str, Any]]) -> None:
    """The primary's session as its call was accepted: with these tools."""
    await primary.wait_type("session.created")
    await primary.send(session_tools(tools))
    await primary.wait_type("session.updated")


async def ask(primary: RealtimeClient, text: str) -> None:
    await primary.send(user_text(text))
    await primary.send({"type": "response.create"})


async def tool_running(primary: RealtimeClient, frames: SidecarTap, gate: Gate) -> None:
    """Ask about the weather; return once the sidecar's handler runs and the call's response is over."""
    await ask(primary, "What's the weather in Paris?")
    await gate.entered.wait()
    await frames.wait_for("upstream>relay", lambda e: e["type"] == "response.done")


async def barrier(primary: RealtimeClient, frames: SidecarTap) -> None:
    """Return once the sidecar has handled every event the primary has seen so far (and sent
    whatever it decided on them): the primary adds an item and the sidecar sees it added."""
    await primary.send(user_text("barrier"))
    await frames.wait_for("upstream>relay", lambda e: e["type"] == "conversation.item.added"
                          and e["item"]["content"][0]["text"] == "barrier")


async def test_the_sidecar_answers_its_calls_and_never_the_primarys() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, realtime_client(mock.base_url, token=None) as primary:
        await primary_with_tools(primary, [ORDER_TOOL, WEATHER_TOOL])
        session = mock.sessions[0]
        notices: list[tuple[str, str]] = []
        async with sidecar_on(mock, session.call_id, [get_weather],
                              on_notice=lambda session_id, notice: notices.append((session_id, notice.kind))
                              ) as (sidecar, frames):
            await ask(primary, "What's the weather in Paris?")
            answer = await primary.wait_for(lambda e: e["type"] == "response.done" and "found" in said(e))
            await ask(primary, "Where is my order?")
            order_done = await primary.wait_for(lambda e: e["type"] == "response.done"
                                                and e["response"]["output"][0]["type"] == "function_call")
            order_call_id = order_done["response"]["output"][0]["call_id"]
            await primary.send({"type": "conversation.item.create", "item": {
                "type": "function_call_output", "call_id": order_call_id, "output": "shipped"}})
            await primary.send({"type": "response.create"})
            await primary.wait_for(lambda e: e["type"] == "response.done" and "shipped" in said(e))
            await barrier(primary, frames)
            assert sidecar.engine is not None
            calls = {entry.name: entry for entry in sidecar.engine.calls}
    weather, order = calls["get_weather"], calls["lookup_order"]
    assert "sunny in Paris" in said(answer)
    assert outputs_received(mock) == [(1, weather.call_id), (0, order_call_id)]
    assert (weather.owner, weather.state, weather.outcome) == (Owner.RELAY, CallState.ANSWERED, "ok")
    assert (order.owner, order.state, order.output) == (Owner.CLIENT, CallState.ANSWERED, "shipped")
    assert len(frames.sent("response.create")) == 1, "one follow-up, for its own call only"
    assert frames.sent("session.update") == [], "the tools were declared when the call was accepted"
    assert session.tools == [ORDER_TOOL, WEATHER_TOOL]
    assert [n for n in notices if n[1] != "response"] == [
        (sidecar.id, "tool_started"), (sidecar.id, "tool_call"), (sidecar.id, "follow_up")]


async def test_declare_tools_adds_its_tools_and_keeps_the_primarys() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, realtime_client(mock.base_url, token=None) as primary:
        await primary_with_tools(primary, [ORDER_TOOL])
        session = mock.sessions[0]
        async with sidecar_on(mock, session.call_id, [get_weather], declare_tools=True) as (sidecar, frames):
            update = await mock.wait_for(lambda e: e["type"] == "session.update" and len(e["session"]["tools"]) == 2)
            await primary.wait_for(lambda e: e["type"] == "session.updated" and len(e["session"]["tools"]) == 2)
            await ask(primary, "What's the weather in Paris?")
            answer = await primary.wait_for(lambda e: e["type"] == "response.done" and "found" in said(e))
            await ask(primary, "Where is my order?")
            order_done = await primary.wait_for(lambda e: e["type"] == "response.done"
                                                and e["response"]["output"][0]["type"] == "function_call")
    assert update.connection == 1
    assert update.event["session"]["tools"] == [ORDER_TOOL, WEATHER_TOOL]
    assert len(frames.sent("session.update")) == 1
    assert session.tools == [ORDER_TOOL, WEATHER_TOOL]
    assert "sunny in Paris" in said(answer), "the model could call the declared tool"
    assert order_done["response"]["output"][0]["name"] == "lookup_order", "the primary's tool is still there"


async def test_declared_tools_stay_when_the_primary_sets_its_tools_again() -> None:
    """The primary's later `session.update` sets `tools` (which replaces the list): the sidecar
    adds its own back, once, keeping the primary's, and the model can still call them."""
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, realtime_client(mock.base_url, token=None) as primary:
        await primary_with_tools(primary, [ORDER_TOOL])
        session = mock.sessions[0]
        async with sidecar_on(mock, session.call_id, [get_weather], declare_tools=True) as (sidecar, frames):
            await primary.wait_for(lambda e: e["type"] == "session.updated" and len(e["session"]["tools"]) == 2)
            await primary.send(session_tools([ORDER_TOOL]))   # the app's own tools, set again
            await frames.wait_for("upstream>relay", lambda e: e["type"] == "session.updated"
                                  and len(e["session"]["tools"]) == 2 and frames.sent("session.update")[1:])
            await ask(primary, "What's the weather in Paris?")
            answer = await primary.wait_for(lambda e: e["type"] == "response.done" and "found" in said(e))
    assert [[t["name"] for t in u["session"]["tools"]] for u in frames.sent("session.update")] == [
        ["lookup_order", "get_weather"], ["lookup_order", "get_weather"]]
    assert session.tools == [ORDER_TOOL, WEATHER_TOOL]
    assert "sunny in Paris" in said(answer), "the model could still call the relay's tool"


async def test_creates_from_both_writers_at_the_same_moment_run_one_response() -> None:
    gate = Gate()
    async with MockUpstream(script=HELD_ANSWER) as mock, realtime_client(mock.base_url, token=None) as primary:
        await primary_with_tools(primary, [WEATHER_TOOL])
        session = mock.sessions[0]
        async with sidecar_on(mock, session.call_id, [gate.tool]) as (sidecar, frames):
            await tool_running(primary, frames, gate)
            # someone else's response (out of band, so the conversation still ends in the output)
            other = mock.start_response(session, Reply(say="One moment.", hold=True),
                                        request={"conversation": "none"})
            await frames.wait_for("upstream>relay", lambda e: e["type"] == "response.created"
                                  and e["response"]["id"] == other.id)
            gate.opened.set()
            await mock.wait_for(lambda e: e["item"]["type"] == "function_call_output")
            assert frames.sent("response.create") == [], "no response.create while a response is active"

            # the other response ends: the primary and the sidecar both ask for the next one
            responses_before = len(session.responses)
            mock.release(session)
            await primary.wait_for(lambda e: e["type"] == "response.done" and e["response"]["id"] == other.id)
            await primary.send({"type": "response.create", "event_id": "primary_create"})
            await mock.wait_for(lambda e: e["event_id"] == "primary_create")
            await mock.wait_for(lambda e: e["type"] == "response.create" and e["response"]["metadata"]["relay"])
            assert len(session.responses) == responses_before + 1, "exactly one of the two runs"
            mock.release(session)
            answer = await primary.wait_for(lambda e: e["type"] == "response.done" and "found" in said(e))
            await barrier(primary, frames)
            assert sidecar.engine is not None
            sequencer = sidecar.engine.sequencer
            assert not sequencer.pending() and not sequencer.in_flight()
            entry = sidecar.engine.calls[0]
    refusals = [r for r in mock.sent if r.event["type"] == "error" and r.event["error"]["code"] == ACTIVE_RESPONSE]
    assert len(refusals) == 1
    assert refusals[0].event["error"]["event_id"] in ("primary_create", frames.sent("response.create")[0]["event_id"])
    assert len(frames.sent("response.create")) == 1, "the sidecar never asked twice"
    assert len(session.responses) == responses_before + 1
    assert "sunny in Paris" in said(answer)
    assert entry.follow_up_response_id == answer["response"]["id"]
    assert outputs_received(mock) == [(1, entry.call_id)]


async def test_a_follow_up_refused_before_the_winning_response_shows_up_is_not_retried() -> None:
    gate = Gate()
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, realtime_client(mock.base_url, token=None) as primary:
        await primary_with_tools(primary, [WEATHER_TOOL])
        session = mock.sessions[0]
        async with sidecar_on(mock, session.call_id, [gate.tool]) as (sidecar, frames):
            await tool_running(primary, frames, gate)
            # the primary's create reaches the server first; the sidecar hears the refusal first
            session.faults = Faults(reject_response_create=1, reject_error={
                "type": "invalid_request_error", "code": ACTIVE_RESPONSE,
                "message": "Conversation already has an active response in progress: resp_primary."})
            gate.opened.set()
            refusal = await mock.wait_for_sent(lambda e: e["error"]["code"] == ACTIVE_RESPONSE)
            await primary.send({"type": "response.create"})
            answer = await primary.wait_for(lambda e: e["type"] == "response.done" and "found" in said(e))
            await barrier(primary, frames)
            assert sidecar.engine is not None
            sequencer = sidecar.engine.sequencer
            assert (not sequencer.pending() and not sequencer.in_flight()
                    and sequencer.create_state is not CreateState.RETRY_AFTER_DONE)
            entry = sidecar.engine.calls[0]
    creates = frames.sent("response.create")
    assert refusal.connection == 1 and refusal.event["error"]["event_id"] == creates[0]["event_id"]
    assert len(creates) == 1, "the primary's response answered the output: no retry"
    assert [r.event["response"]["id"] for r in mock.sent if r.connection == 0 and r.event["type"] == "response.created"
            ][-1] == answer["response"]["id"]
    assert entry.follow_up_response_id == answer["response"]["id"]
    assert "sunny in Paris" in said(answer)
