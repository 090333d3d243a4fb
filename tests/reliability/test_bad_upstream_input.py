"""Bad upstream input: frames the mock injects that no provider should send, events out of order,
for unknown ids, duplicated, or a call whose arguments are not JSON. The relay does not crash, the
session goes on (a tool call still works), and each anomaly is logged and counted in `/metrics`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from openai.types.realtime import ConversationItemCreateEvent
from websockets.asyncio.server import ServerConnection

from relay.dialects.jsontext import compact_json
from relay.mock import Faults, MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.engine import Notice
from relay.edges.serve import ProxySession, RelayServer, ServerConfig
from tests.support.clients import http_get, parse_exposition
from tests.support.frames import (frame_of_size, function_call_outputs, model_call_ids, model_words, session_created,
                                  user_text)
from tests.support.keys import PROVIDER_KEY
from tests.support.relays import LeakGuard, bare_upstream, weather_turn
from tests.support.tools import CountedWeather

DEEP = 100_000
MARKER = {"type": "relay_test.marker"}   # an unknown type: forwarded as it is, so it shows the order


def response_done(response_id: str) -> dict[str, Any]:
    return {"type": "response.done", "event_id": "event_d",
            "response": {"object": "realtime.response", "id": response_id, "status": "completed", "output": []}}


# (frames the upstream sends, anomalies the relay records, whether the client sees the frames)
BAD_UPSTREAM = {
    "not JSON": (["this is not json"], 1, False),
    "a JSON array": (['[{"type": "response.done"}]'], 1, False),
    "no type": (['{"event_id": "event_x", "response": {}}'], 1, False),
    "a binary frame": ([b'{"type": "response.created"}'], 1, False),
    "arrays nested 100,000 deep": (["[" * DEEP + "]" * DEEP], 1, False),
    "an event nested 100,000 deep": (['{"type": "session.updated", "session": ' + '{"a": ' * DEEP + "1"
                                      + "}" * DEEP + "}"], 1, False),
    "an unknown event type": ([{"type": "conversation.future_feature", "event_id": "event_f"}], 0, True),
    "an output item before its response": ([{
        "type": "response.output_item.added", "event_id": "event_o", "response_id": "resp_later",
        "output_index": 0, "item": {"id": "item_o", "type": "message", "role": "assistant",
                                    "status": "in_progress", "content": []}}], 1, True),
    "a truncation of an unknown item": ([{
        "type": "conversation.item.truncated", "event_id": "event_t", "item_id": "item_nowhere",
        "content_index": 0, "audio_end_ms": 10}], 1, True),
    "a transcript for an unknown item": ([{
        "type": "conversation.item.input_audio_transcription.completed", "event_id": "event_c",
        "item_id": "item_nowhere", "content_index": 0, "transcript": "hello"}], 1, True),
    "arguments for an unknown call": ([{
        "type": "response.function_call_arguments.delta", "event_id": "event_a", "response_id": "resp_x",
        "item_id": "item_nowhere", "output_index": 0, "call_id": "call_nowhere", "delta": "{"}], 1, True),
    "response.done without response.created": ([response_done("resp_orphan")], 1, True),
    "a duplicate response.done": ([response_done("resp_twice"), response_done("resp_twice")], 2, True),
}


@pytest.mark.parametrize("frames, anomalies, forwarded", BAD_UPSTREAM.values(), ids=BAD_UPSTREAM.keys())
async def test_bad_upstream_frames_are_logged_and_counted_and_the_session_goes_on(
        guard: LeakGuard, mock: MockUpstream, frames: list[Any], anomalies: int, forwarded: bool) -> None:
    async with guard.relay(mock) as server, guard.client(server) as client:
        await client.wait_type("session.created")
        await mock.inject(mock.sessions[0], [*frames, MARKER])
        await client.wait_type(MARKER["type"])
        shown = [e for e in client.events if e["type"] not in ("session.created", "session.updated")][:-1]
        assert len(shown) == (len(frames) if forwarded else 0)
        done = await weather_turn(client)   # the session still works
        assert done["response"]["status"] == "completed"
        _, _, body = await http_get(server.port, "/metrics")
        [session] = server.sessions.values()
        assert session.engine is not None and len(session.engine.anomalies) == anomalies
    metrics = parse_exposition(body.decode())
    assert metrics.get('relay_anomalies_total{source="upstream"}', 0) == anomalies
    warnings = [line for line in guard.log.getvalue().splitlines() if '"upstream anomaly' in line]
    assert len(warnings) == anomalies
    assert all('"level": "warning"' in line and session.id in line for line in warnings)


async def test_a_flood_of_upstream_anomalies_is_counted_but_logged_only_at_first(
        guard: LeakGuard, mock: MockUpstream) -> None:
    async with guard.relay(mock) as server, guard.client(server) as client:
        await client.wait_type("session.created")
        await mock.inject(mock.sessions[0], ["not json"] * 500 + [MARKER])
        await client.wait_type(MARKER["type"])
        await weather_turn(client)
        assert server.metrics.anomalies["upstream"] == 500
    lines = [json.loads(line) for line in guard.log.getvalue().splitlines() if "upstream anomal" in line]
    assert len(lines) == 11
    assert "500" not in lines[-1]["msg"] and "counted" in lines[-1]["msg"]


# Frames of an unknown type the upstream floods one session with: enough to outlast the other
# session's whole tool turn many times over, few enough that relay, mock and client in one process
# get through them in seconds on a loaded 2-core machine (10,000 took up to 40 s of a 45 s wait).
FLOOD = 2_000


async def test_a_flood_from_the_upstream_reaches_the_client_while_other_sessions_go_on(
        guard: LeakGuard, mock: MockUpstream) -> None:
    async with guard.relay(mock) as server, guard.client(server) as bystander, guard.client(server) as client:
        await client.wait_type("session.created")
        await bystander.wait_type("session.created")
        unknown = [{"type": "conversation.future_feature", "n": n} for n in range(FLOOD)]
        async with asyncio.TaskGroup() as running:
            running.create_task(mock.inject(mock.sessions[1], unknown + [MARKER]))
            running.create_task(weather_turn(bystander))
            await client.wait_type(MARKER["type"], timeout=45)
    assert [e["n"] for e in client.events if e["type"] == "conversation.future_feature"] == list(range(FLOOD))


async def test_every_done_event_twice_still_runs_the_handler_once_and_answers_once(guard: LeakGuard) -> None:
    weather = CountedWeather()
    paris = ToolCall(name="get_weather", arguments={"city": "Paris"})
    script = MockScript(rules=[Rule(match="weather", calls=[paris])],
                        after_outputs=Reply(say="It is {output}"))
    async with MockUpstream(script=script, api_key=PROVIDER_KEY, faults=Faults(duplicate_done=True)) as mock, \
            guard.relay(mock, tools=[weather.tool]) as server, guard.client(server) as client:
        await client.send(user_text("weather?"))
        await client.send({"type": "response.create"})
        await client.wait_for(lambda e: e["type"] == "response.done" and "sunny" in json.dumps(e))
        anomalies = server.metrics.anomalies["upstream"]
    [call_id] = set(model_call_ids(mock))
    assert weather.runs == ["Paris"]
    assert len(function_call_outputs(mock, call_id)) == 1
    assert anomalies >= 2   # each duplicated response.done at least


async def test_a_call_whose_arguments_are_not_json_gets_an_error_output_and_no_handler_run(
        guard: LeakGuard) -> None:
    weather = CountedWeather()
    script = MockScript(rules=[Rule(match="weather", calls=[ToolCall(name="get_weather", arguments='{"city": "Par')])],
                        after_outputs=Reply(say="Sorry: {output}"))
    async with MockUpstream(script=script, api_key=PROVIDER_KEY) as mock, \
            guard.relay(mock, tools=[weather.tool]) as server, guard.client(server) as client:
        await client.send(user_text("weather?"))
        await client.send({"type": "response.create"})
        await client.wait_for(lambda e: e["type"] == "response.done" and "Sorry" in json.dumps(e))
        outcomes = dict(server.metrics.tool_calls)
    [output] = function_call_outputs(mock)
    assert weather.runs == []
    assert "error" in json.loads(output["output"])
    assert outcomes == {("get_weather", "bad_arguments"): 1}


def test_an_internal_error_the_engine_recorded_is_logged_as_an_error(
        mock: MockUpstream, caplog: pytest.LogCaptureFixture) -> None:
    server = RelayServer(ServerConfig(upstream=mock.url, dialect="openai", port=0, api_key=PROVIDER_KEY))
    session = ProxySession(id="rs_x", client=None,  # type: ignore[arg-type]
                           remote="", path="/v1/realtime", dialect=server.dialect)
    server._on_notice(session, Notice("anomaly", {"message": "internal error: KeyError: 'x'",
                                                  "event_type": None, "source": "upstream", "internal": True}))
    [record] = [r for r in caplog.records if r.name == "relay.server"]
    assert record.levelname == "ERROR" and record.session_id == "rs_x"


async def bad_frame_after_hello(frame: bytes, upstream: ServerConnection) -> None:
    await upstream.send(session_created())
    await upstream.recv()   # the relay's session.update declaring its tools
    await upstream.send(frame, text=True)
    await upstream.wait_closed()


@pytest.mark.parametrize("frame, what", [
    (b'{"type": "\xff\xfe"}', "not UTF-8"),
    (frame_of_size(64 * 1024 + 1).encode(), "one byte over the frame limit"),
])
async def test_an_upstream_protocol_violation_closes_the_client_with_1014_not_its_own_code(
        guard: LeakGuard, frame: bytes, what: str) -> None:
    """1007 or 1009 would tell the client that *it* sent bad data; the fault is the upstream's."""
    async def handler(upstream: ServerConnection) -> None:
        await bad_frame_after_hello(frame, upstream)

    async with bare_upstream(handler) as url, guard.relay(url, max_frame_bytes=64 * 1024) as server, \
            guard.client(server) as client:
        await client.wait_type("session.created")
        code, reason = await client.closed()
    assert code == 1014
    assert reason.startswith("the upstream sent an invalid frame")


ODD_CITY = "Par\ud800is"   # a lone surrogate: valid JSON (`"\ud800"`), not encodable as UTF-8
ANSWERED_CITY = "Par\ufffdis"   # in the relay's output: valid Unicode (`relay.tools.render.valid_unicode`)


async def test_a_lone_surrogate_in_tool_arguments_reaches_the_tool_and_its_output_goes_up(
        guard: LeakGuard) -> None:
    weather = CountedWeather()
    script = MockScript(rules=[Rule(match="weather", calls=[ToolCall(name="get_weather", arguments={"city": ODD_CITY})])],
                        after_outputs=Reply(say="It is {output}"))
    async with MockUpstream(script=script, api_key=PROVIDER_KEY) as mock, \
            guard.relay(mock, tools=[weather.tool]) as server, guard.client(server) as client:
        await client.send(user_text("weather?"))
        await client.send({"type": "response.create"})
        done = await client.wait_for(lambda e: e["type"] == "response.done" and "It is" in json.dumps(e))
        await weather_turn(client, says="It is")   # the session goes on
    assert weather.runs[0] == ODD_CITY
    assert function_call_outputs(mock)[0]["output"] == f"sunny in {ANSWERED_CITY}"
    assert f"sunny in {ANSWERED_CITY}" in done["response"]["output"][0]["content"][0]["transcript"]
    # the frame as the relay wrote it is one the official SDK's models read (pydantic's parser
    # refuses JSON holding a lone surrogate's escape)
    sent = next(r.event for r in mock.received if r.event["type"] == "conversation.item.create"
                and r.event["item"]["type"] == "function_call_output")
    read = ConversationItemCreateEvent.model_validate_json(compact_json(sent))
    assert read.item.output == f"sunny in {ANSWERED_CITY}"
    assert server.metrics.sessions_ended.get("relay", 0) == 0


async def test_a_lone_surrogate_in_gemini_tool_arguments_reaches_the_tool_and_its_answer_goes_up(
        guard: LeakGuard) -> None:
    weather = CountedWeather()
    script = MockScript(rules=[Rule(match="weather", calls=[ToolCall(name="get_weather", arguments={"city": ODD_CITY})])],
                        after_outputs=Reply(say="Here is what I found: {outputs}"))
    async with guard.gemini_session(script, [weather.tool]) as (mock, server, client):
        await client.say("weather")
        await client.turn()
        await client.say("weather again")   # the session goes on
        await client.turn()
    assert weather.runs == [ODD_CITY, ODD_CITY]
    answers = [r.event["toolResponse"]["functionResponses"][0]["response"] for r in mock.received
               if "toolResponse" in r.event]
    assert answers == [{"output": f"sunny in {ANSWERED_CITY}"}] * 2
    assert model_words(client.messages).count("Here is what I found") == 2
    assert server.metrics.sessions_ended.get("relay", 0) == 0
