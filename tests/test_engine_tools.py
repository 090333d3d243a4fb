"""Relay-owned tools in the engine: readiness, execution, outputs, injection and sequencing.
Fake clock, the mock upstream in-process, no sockets."""

from __future__ import annotations

import json

import pytest
from openai.types.realtime.realtime_conversation_item_function_call_output import (
    RealtimeConversationItemFunctionCallOutput,
)
from pydantic import BaseModel

from relay.dialects import FOUNDRY, OPENAI_BETA
from relay.engine import CallState, EngineConfig, Owner
from relay.mock import ToolCall
from relay.tools import ToolResult, tool
from tests.support.engine import EngineDriver
from tests.support.local_mock import model_call
from tests.support.tools import get_weather_data


class Order(BaseModel):
    order_id: int
    express: bool = False


@tool(timeout=2)
def ship(order: Order) -> str:
    """Ship an order."""
    return f"shipped {order.order_id}"


@tool
def broken(city: str) -> str:
    raise ValueError("no such city")


TOOLS = [get_weather_data, ship, broken]


def session(*tools, **kwargs) -> EngineDriver:
    harness = EngineDriver(tools or TOOLS, **kwargs)
    harness.connect()
    harness.upstream(harness.mock.user_turn("what's the weather?"))
    return harness


def weather(city: str) -> ToolCall:
    return model_call("get_weather", json.dumps({"city": city}))


@pytest.mark.parametrize("count", [1, 2, 5])
def test_parallel_calls_get_one_output_each_and_one_follow_up_after_done(count: int) -> None:
    h = session()
    cities = [f"City{n}" for n in range(count)]
    h.respond([weather(c) for c in cities], finish=False)
    assert len(h.started) == count  # each starts when its item completes, before response.done
    h.run_all()
    assert h.outputs == [] and h.creates == []  # nothing is injected before response.done
    h.upstream(h.mock.finish_response())
    assert len(h.outputs) == count
    assert [json.loads(o["item"]["output"])["city"] for o in h.outputs] == cities
    assert len(h.creates) == 1
    create = h.creates[0]
    assert create["response"]["metadata"]["call_ids"] == ",".join(h.call_ids())
    # the create came after the last output, and the server accepted everything
    assert h.sent.index(create) > h.sent.index(h.outputs[-1])
    assert not h.mock.errors
    assert all(e.follow_up_response_id for e in h.engine.ledger)


def test_outputs_are_placed_after_the_response_in_call_order_even_when_finished_in_reverse() -> None:
    h = session()
    h.respond([weather("A"), weather("B"), weather("C")])
    a, b, c = h.call_ids()
    h.upstream(h.mock.user_turn("and tomorrow?"))  # a newer item arrives meanwhile
    for call_id in (c, a, b):
        h.finish(call_id, {"done": call_id})
    order = [i["call_id"] if i["type"] != "message" else i["role"] for i in h.mock.items]
    assert order == ["user", a, b, c, a, b, c, "user", "assistant"]
    # the first two outputs went after the last call item, the others after earlier outputs
    assert not h.mock.errors


def test_calls_of_a_cancelled_response_are_never_executed() -> None:
    h = session()
    # the call item is still streaming when the user barges in
    h.upstream(h.mock.respond([weather("Paris")], stop=lambda e: e["type"].endswith("arguments.delta")))
    h.upstream(h.mock.barge_in())
    [entry] = h.engine.ledger
    assert entry.state is CallState.SKIPPED
    assert "cancelled" in entry.skip_reason and "turn_detected" in entry.skip_reason
    assert not h.started and not h.outputs and not h.creates


def test_an_incomplete_item_in_a_completed_response_is_skipped() -> None:
    h = session()
    events = h.mock.respond([weather("Paris")], finish=False)
    # drop the item's completion events: response.done lists it as incomplete
    events = [e for e in events if e["type"] not in ("response.output_item.done", "conversation.item.done")]
    h.upstream(events)
    h.mock.active.output[0]["status"] = "incomplete"
    h.upstream(h.mock.finish_response())
    [entry] = h.engine.ledger
    assert entry.state is CallState.SKIPPED and entry.skip_reason == "item incomplete"
    assert not h.started


def test_a_call_listed_only_in_response_done_becomes_ready() -> None:
    h = session()
    events = h.mock.respond([weather("Oslo")])
    keep = [e for e in events if e["type"] in ("response.created", "response.done")]
    h.upstream(keep)
    assert list(h.started) == h.call_ids()
    h.run_all()
    assert len(h.outputs) == 1 and len(h.creates) == 1


def test_follow_up_waits_for_a_response_the_server_started() -> None:
    h = session()
    h.respond([weather("Paris")])
    h.upstream(h.mock.user_turn("hello?"))
    h.respond(["Still looking that up."], finish=False)  # server VAD answered the user
    h.run_all()
    assert len(h.outputs) == 1
    assert h.creates == []  # a response is active: the follow-up waits
    h.upstream(h.mock.finish_response())
    assert len(h.creates) == 1


def test_a_response_started_after_outputs_were_in_answers_them() -> None:
    h = session()
    h.respond([weather("Paris")], finish=False)
    h.run_all()
    h.deliver = False
    h.upstream(h.mock.finish_response())     # outputs and the follow-up are sent ...
    assert len(h.outputs) == 1 and len(h.creates) == 1
    h.deliver = True
    # ... and before the server sees our create, VAD starts a response after our output landed
    frames = list(h.undelivered)
    h.undelivered.clear()
    h.upstream(h.mock.receive(frames[0]))          # output lands
    h.respond(["Here is the weather."], finish=False)  # server starts a response on its own
    h.upstream(h.mock.receive(frames[1]))          # our create is refused: already active
    assert h.mock.errors[-1]["error"]["code"] == "conversation_already_has_active_response"
    h.upstream(h.mock.finish_response())
    # no retry: the server's own response already answered the output
    assert len(h.creates) == 1
    [entry] = h.engine.ledger
    assert entry.follow_up_response_id is not None


def test_active_response_error_aimed_at_our_create_is_retried_once_after_done() -> None:
    h = session()
    h.respond([weather("Paris")])
    h.deliver = False
    h.run_all()
    assert len(h.creates) == 1
    output_frame, create_frame = list(h.undelivered)
    h.undelivered.clear()
    h.deliver = True
    # a second writer (e.g. the browser on the same call) starts a response before our output
    h.respond(["Hmm."], finish=False)
    h.upstream(h.mock.receive(output_frame))
    h.upstream(h.mock.receive(create_frame))
    assert h.mock.errors[-1]["error"]["event_id"] == h.creates[0]["event_id"]
    assert len(h.creates) == 1  # no immediate retry, no loop
    h.upstream(h.mock.finish_response())
    assert len(h.creates) == 2
    assert h.creates[1]["event_id"] == h.creates[0]["event_id"]
    assert len(h.mock.errors) == 1
    assert h.mock.active is None and len(h.mock.responses) == 3


def test_duplicated_done_events_run_the_handler_once() -> None:
    h = session()
    events = h.mock.respond([weather("Paris")])
    doubled = []
    for event in events:
        doubled.append(event)
        if event["type"].endswith(".done"):
            doubled.append(dict(event, event_id=event["event_id"] + "_dup"))
    h.upstream(doubled)
    assert len(h.started) == 1
    h.run_all()
    assert len(h.outputs) == 1 and len(h.creates) == 1
    assert any("duplicate response.done" in a.message for a in h.engine.anomalies)


def test_handler_exception_becomes_an_error_output_with_a_follow_up() -> None:
    h = session()
    h.respond([model_call("broken", '{"city":"Atlantis"}')])
    h.run_all()
    [call_id] = h.call_ids()
    output = h.output_for(call_id)
    assert json.loads(output["output"]) == {"error": "ValueError: no such city"}
    assert output["status"] == "completed"
    assert len(h.creates) == 1
    assert h.engine.ledger.get(call_id).outcome == "error"


def test_timeout_cancels_the_handler_and_answers_incomplete() -> None:
    h = session()
    h.respond([model_call("ship", '{"order":{"order_id":7}}')])
    [call_id] = h.call_ids()
    assert h.engine.next_deadline() == pytest.approx(h.engine.ledger.get(call_id).started_at + 2)
    h.advance(1.9)
    assert not h.outputs
    h.advance(0.2)
    assert [c.call_id for c in h.cancelled] == [call_id]
    output = h.output_for(call_id)
    assert json.loads(output["output"]) == {"error": "timed out after 2 s"}
    assert output["status"] == "incomplete"
    assert len(h.creates) == 1
    h.finish(call_id, "too late")  # a late report changes nothing
    assert len(h.outputs) == 1


@pytest.mark.parametrize("arguments, fragment", [
    ("{not json", "not valid JSON"),
    ('{"order": {"order_id": "seven"}}', "order.order_id"),
    ("{}", "'order': Field required"),
])
def test_bad_arguments_become_an_error_output_naming_the_problem(arguments: str, fragment: str) -> None:
    h = session()
    h.respond([model_call("ship", arguments)])
    assert not h.started  # the handler never runs
    [call_id] = h.call_ids()
    error = json.loads(h.output_for(call_id)["output"])["error"]
    assert fragment in error
    assert h.engine.ledger.get(call_id).outcome == "bad_arguments"
    assert len(h.creates) == 1


def test_typed_arguments_reach_the_handler() -> None:
    h = session()
    h.respond([model_call("ship", '{"order":{"order_id":7,"express":true}}')])
    [start] = h.started.values()
    assert start.arguments["order"] == Order(order_id=7, express=True)
    h.run_all()
    assert h.outputs[0]["item"]["output"] == "shipped 7"


def test_a_response_with_a_client_call_leaves_the_follow_up_to_the_client() -> None:
    h = session()
    h.respond([weather("Paris"), model_call("open_door", '{"door":"front"}')])
    relay_call, client_call = h.engine.ledger
    assert relay_call.owner is Owner.RELAY and client_call.owner is Owner.CLIENT
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == [relay_call.call_id]
    assert h.creates == []
    assert client_call.call_id not in h.started
    # the client sees its own call, not ours
    seen = {e.get("item", {}).get("call_id") for e in h.to_client if "item" in e}
    assert client_call.call_id in seen and relay_call.call_id not in seen


def test_ownership_unknown_tools_can_be_answered_with_an_error() -> None:
    h = session(get_weather_data, config=EngineConfig(mode="sidecar", unknown_tools="error", strict=True))
    h.respond([model_call("teleport", "{}")])
    [entry] = h.engine.ledger
    assert entry.owner is Owner.RELAY and entry.outcome == "unknown_tool"
    assert json.loads(h.outputs[0]["item"]["output"]) == {"error": "unknown tool 'teleport'"}
    assert len(h.creates) == 1


def test_foundry_output_carries_name_response_id_and_created_at() -> None:
    h = session(get_weather_data, dialect=FOUNDRY)
    h.respond([weather("Paris")])
    h.run_all()
    item = h.outputs[0]["item"]
    [entry] = h.engine.ledger
    assert item["name"] == "get_weather"
    assert item["response_id"] == entry.response_id
    assert item["created_at"] == int(h.now)
    assert not h.mock.errors


def test_ga_output_validates_with_the_openai_type_and_has_no_foundry_fields() -> None:
    h = session(get_weather_data)
    h.respond([weather("Paris")])
    h.run_all()
    item = h.outputs[0]["item"]
    parsed = RealtimeConversationItemFunctionCallOutput.model_validate(item)
    assert parsed.status == "completed" and parsed.id == item["id"]
    assert not {"name", "response_id", "created_at"} & item.keys()
    assert not h.mock.errors  # the mock rejects Foundry fields on GA, like OpenAI does


def test_beta_wire_works_end_to_end() -> None:
    h = session(get_weather_data, dialect=OPENAI_BETA)
    h.respond([weather("Paris")])
    h.run_all()
    assert len(h.outputs) == 1 and len(h.creates) == 1 and not h.mock.errors
    assert "type" not in h.sent_of("session.update")[0]["session"]


def test_tool_results_and_long_outputs() -> None:
    @tool
    def lookup(key: str) -> ToolResult:
        return ToolResult(error={"reason": "missing", "key": key})

    @tool
    def big() -> str:
        return "x" * 40_000

    h = session(lookup, big)
    h.respond([model_call("lookup", '{"key":"k1"}'), model_call("big", "")])
    h.run_all()
    lookup_call, big_call = h.call_ids()
    assert json.loads(h.output_for(lookup_call)["output"]) == {"error": {"reason": "missing", "key": "k1"}}
    output = h.output_for(big_call)["output"]
    assert len(output) == 32_768 and "truncated" in output[-40:]


def test_upstream_error_for_our_output_is_attributed_to_the_call() -> None:
    h = session(get_weather_data)
    h.respond([weather("Paris")])
    [entry] = h.engine.ledger
    h.deliver = False
    h.run_all()
    output_frame = h.undelivered.popleft()
    h.undelivered.clear()
    h.deliver = True
    event = json.loads(output_frame)
    h.upstream({"type": "error", "event_id": "event_x", "error": {
        "type": "invalid_request_error", "code": "string_above_max_length", "message": "too long",
        "param": "item.output", "event_id": event["event_id"]}})
    assert entry.upstream_errors == ("string_above_max_length: too long",)
    assert not [e for e in h.to_client if e["type"] == "error"]  # not the client's business
    assert any(n.kind == "upstream_error" and n.fields["call_id"] == entry.call_id for n in h.notices)


def test_ledger_records_timestamps_and_follow_up() -> None:
    h = session(get_weather_data)
    h.respond([weather("Paris")], finish=False)
    h.finish(h.call_ids()[0], {"ok": True}, dt=0.5)
    h.now += 0.25
    h.upstream(h.mock.finish_response())
    [entry] = h.engine.ledger
    assert entry.ready_at < entry.started_at + 1e-9 <= entry.finished_at < entry.injected_at
    assert entry.latency_ms() == pytest.approx(750.0)
    assert entry.follow_up_event_id == h.creates[0]["event_id"]
    assert entry.follow_up_response_id in h.engine.conversation.responses
    data = entry.as_dict()
    assert data["owner"] == "relay" and data["state"] == "answered"


def test_a_create_in_flight_when_the_connection_drops_is_not_sent_again() -> None:
    h = session(get_weather_data, config=EngineConfig(mode="sidecar", declare_tools=False, strict=True))
    h.respond([weather("Paris")])
    h.deliver = False
    h.run_all()
    assert len(h.creates) == 1
    output_frame, _create_frame = h.undelivered
    h.undelivered.clear()
    h.deliver = True
    h.upstream(h.mock.receive(output_frame))   # the output landed; the create's fate is unknown
    h.disconnect()
    h.reconnect()
    h.advance(30)               # past every ack timeout
    assert len(h.creates) == 1
    # the edge resends the frame its old socket never took: its response is recognised as ours
    h.upstream(h.mock.receive(json.dumps(h.creates[0])))
    follow_up = h.engine.conversation.responses[h.engine.ledger.get(h.call_ids()[0]).follow_up_response_id]
    assert follow_up.creator == "relay"


def test_a_long_session_keeps_only_its_recent_history_when_asked() -> None:
    h = session(get_weather_data, config=EngineConfig(mode="proxy", strict=True, history_limit=10))
    for n in range(40):
        h.upstream(h.mock.user_turn(f"turn {n}"))
        h.respond([weather("Paris")])
        h.run_all()
    conversation = h.engine.conversation
    assert len(conversation.order) <= 20 and len(conversation.items) <= 30
    assert len(conversation.responses) <= 20 and len(h.engine.ledger) <= 20
    assert len(h.outputs) == 40 and len(h.creates) == 40   # every call answered, once
    # what is kept is the recent past, in order, and still consistent with the server
    assert conversation.order == [i["id"] for i in h.mock.items][-len(conversation.order):]
    assert not h.engine.anomalies and not h.mock.errors
