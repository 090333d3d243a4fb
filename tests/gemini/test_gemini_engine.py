"""The Gemini engine with a fake clock and no sockets: declarations, splitting, answers, errors,
timeouts, cancellation policies, streaming, both key spellings, and what the client may not do.
Everything the relay writes is checked against `google-genai`'s own types."""

from __future__ import annotations

import json
import warnings
from typing import Any, AsyncIterator

import pytest
from google.genai import types as genai_types
from pydantic import BaseModel

from relay.dialects import GEMINI
from relay.engine import CallState, EngineConfig, Owner
from relay.tools import ToolResult, tool
from tests.support.engine import EngineDriver
from tests.support.frames import (
    TURN_COMPLETE,
    cancellation,
    function_call,
    gemini_user_text,
    model_text,
    tool_call,
)
from tests.support.tools import get_weather_data


@tool
def greet(name: str) -> str:
    """A greeting."""
    return f"hello {name}"


class Order(BaseModel):
    order_id: int
    express: bool = False


@tool(timeout=2, interruption="cancel")
def ship(order: Order) -> str:
    """Ship an order."""
    return f"shipped {order.order_id}"


@tool(interruption="finish_silently")
def book(room: str) -> str:
    """Book a room."""
    return f"booked {room}"


@tool(scheduling="interrupt")
def alert(text: str) -> str:
    """Raise an alert now."""
    return text


@tool
def clock() -> str:
    """The time."""
    return "noon"


@tool(timeout=5)
async def track(parcel: str) -> AsyncIterator[str]:
    """Follow a parcel."""
    yield f"{parcel}: picked up"
    yield f"{parcel}: delivered"


TOOLS = [get_weather_data, greet, ship, book, alert, clock, track]
CLIENT_TOOL = {"name": "open_door", "description": "Open the door.",
               "parameters": {"type": "object", "properties": {"door": {"type": "string"}}}}


def session(*tools: Any, config: EngineConfig | None = None, client_tools: bool = True) -> EngineDriver:
    harness = EngineDriver(tools or TOOLS, config=config, dialect=GEMINI)
    harness.setup([{"functionDeclarations": [CLIENT_TOOL]}] if client_tools else None)
    harness.client(gemini_user_text("hello"))
    harness.upstream_frames.clear()   # tests look at what follows the setup and the first turn
    harness.client_frames.clear()
    return harness


def validate_tool_response(message: dict[str, Any]) -> genai_types.LiveClientToolResponse:
    """The relay's toolResponse parses as the SDK's type, with known enum values only."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # the SDK only warns about an unknown enum value
        parsed = genai_types.LiveClientToolResponse.model_validate(message["toolResponse"])
    assert parsed.function_responses
    return parsed


# ---- setup ---------------------------------------------------------------------------------------

def test_setup_gains_the_relay_declarations_and_keeps_the_clients() -> None:
    h = EngineDriver(TOOLS, dialect=GEMINI)
    h.client({"setup": {"model": "models/m", "tools": [{"googleSearch": {}},
                                                      {"functionDeclarations": [CLIENT_TOOL]}]}})
    (setup_message,) = h.sent
    setup = genai_types.LiveClientSetup.model_validate(setup_message["setup"])
    assert setup.tools is not None and setup.tools[0].google_search is not None
    declarations = {d.name: d for d in setup.tools[1].function_declarations or []}
    assert list(declarations) == ["open_door", *(spec.__relay_tool__.name for spec in TOOLS)]
    weather = declarations["get_weather"]
    assert weather.parameters_json_schema == get_weather_data.__relay_tool__.parameters
    assert weather.parameters is None and weather.behavior is None   # blocking: the default
    assert declarations["alert"].behavior is genai_types.Behavior.NON_BLOCKING
    assert declarations["track"].behavior is genai_types.Behavior.NON_BLOCKING


def test_setup_in_snake_case_is_extended_in_its_own_spelling() -> None:
    h = EngineDriver([get_weather_data], dialect=GEMINI)
    h.client({"setup": {"model": "models/m", "tools": [{"function_declarations": [CLIENT_TOOL]}]}})
    tools = h.sent[0]["setup"]["tools"]
    assert [list(t) for t in tools] == [["function_declarations"]]
    assert [d["name"] for d in tools[0]["function_declarations"]] == ["open_door", "get_weather"]


def test_setup_without_tools_gets_a_tools_entry_and_keeps_the_frame_kind() -> None:
    h = EngineDriver([get_weather_data], dialect=GEMINI)
    h.client({"setup": {"model": "models/m"}}, binary=True)
    (frame,) = h.upstream_frames
    assert isinstance(frame, bytes)
    assert json.loads(frame)["setup"]["tools"] == [
        {"functionDeclarations": [{"name": "get_weather", "description": "Current weather for a city.",
                                   "parametersJsonSchema": get_weather_data.__relay_tool__.parameters}]}]


def test_without_relay_tools_the_setup_passes_as_the_same_frame() -> None:
    h = EngineDriver([], dialect=GEMINI)
    frame = json.dumps({"setup": {"model": "models/m", "tools": [{"functionDeclarations": [CLIENT_TOOL]}]}})
    h.client(frame)
    assert h.upstream_frames == [frame]


def test_a_client_redefining_a_relay_tool_is_closed_with_1008_and_nothing_is_forwarded() -> None:
    h = EngineDriver(TOOLS, dialect=GEMINI)
    h.client({"setup": {"model": "models/m",
                        "tools": [{"functionDeclarations": [{"name": "get_weather"}, CLIENT_TOOL]}]}})
    h.client(gemini_user_text("hello"))
    assert h.upstream_frames == []
    (close,) = h.closes
    assert (close.target, close.code) == ("client", 1008)
    assert "get_weather" in close.reason
    assert any(n.kind == "client_error" and "get_weather" in n.fields["message"] for n in h.notices)


# ---- calls ---------------------------------------------------------------------------------------

def test_a_mixed_tool_call_is_split_the_client_sees_only_its_call() -> None:
    h = session()
    h.upstream(tool_call(function_call("c1", "get_weather", {"city": "Paris"}),
                       function_call("c2", "open_door", {"door": "front"})))
    (frame,) = h.client_frames
    assert isinstance(frame, bytes), "a server frame reaches the client in the kind it came in"
    assert h.to_client == [tool_call(function_call("c2", "open_door", {"door": "front"}))]
    assert list(h.started) == ["c1"] and h.started["c1"].arguments == {"city": "Paris"}
    (started,) = [n.fields for n in h.notices if n.kind == "tool_started"]
    assert (started["call_id"], started["name"], json.loads(started["arguments"])) == (
        "c1", "get_weather", {"city": "Paris"})
    h.run_all()
    (message,) = [m for m in h.sent if "toolResponse" in m]
    validate_tool_response(message)
    assert h.output_for("c1") == {"id": "c1", "name": "get_weather",
                                  "response": {"output": {"city": "Paris", "temp_c": 21}}}
    assert h.outputs_for("c2") == []
    ledger = h.engine.ledger
    assert ledger.get("c1").owner is Owner.RELAY and ledger.get("c1").state is CallState.ANSWERED
    assert ledger.get("c2").owner is Owner.CLIENT and ledger.get("c2").state is CallState.COMPLETE


def test_a_tool_call_of_relay_calls_only_never_reaches_the_client() -> None:
    h = session()
    h.upstream(tool_call(function_call("c1", "get_weather", {"city": "Rome"})))
    assert h.client_frames == []


def test_expose_tool_events_shows_the_client_every_call_unchanged() -> None:
    h = session(config=EngineConfig(strict=True, hide_tool_events=False))
    frame = json.dumps(tool_call(function_call("c1", "get_weather", {"city": "Rome"}))).encode()
    h.upstream(frame)
    assert h.client_frames == [frame]
    assert "c1" in h.started


def test_client_calls_pass_through_as_the_same_frame() -> None:
    h = session()
    frame = json.dumps(tool_call(function_call("c2", "open_door", {"door": "back"}))).encode()
    h.upstream(frame)
    assert h.client_frames == [frame]
    assert h.started == {}


def test_text_results_stay_text_and_json_results_stay_structured() -> None:
    h = session(greet, get_weather_data, tool(name="digits")(lambda: "42"))
    h.upstream(tool_call(function_call("a", "greet", {"name": "Ada"}), function_call("b", "digits"),
                       function_call("c", "get_weather", {"city": "Oslo"})))
    h.run_all()
    assert h.output_for("a")["response"] == {"output": "hello Ada"}
    assert h.output_for("b")["response"] == {"output": "42"}, "a string that looks like JSON is still a string"
    assert h.output_for("c")["response"] == {"output": {"city": "Oslo", "temp_c": 21}}


def test_a_tool_without_parameters_runs_when_args_are_absent() -> None:
    h = session()
    h.upstream(tool_call(function_call("t", "clock")))
    assert h.started["t"].arguments == {}


@pytest.mark.parametrize(("args", "fragment"), [
    ({"order": {"order_id": "x"}}, "order.order_id"),
    ({}, "order"),
    ("not an object", "must be a JSON object"),
])
def test_bad_arguments_get_an_error_answer_and_no_handler(args: Any, fragment: str) -> None:
    h = session()
    h.upstream(tool_call(function_call("s", "ship", args)))
    assert h.started == {}
    (answer,) = h.outputs
    assert set(answer["response"]) == {"error"} and fragment in answer["response"]["error"]
    assert h.engine.ledger.get("s").outcome == "bad_arguments"


def test_typed_arguments_reach_the_handler() -> None:
    h = session()
    h.upstream(tool_call(function_call("s", "ship", {"order": {"order_id": 7}})))
    assert h.started["s"].arguments["order"] == Order(order_id=7)
    h.run_all()
    assert h.output_for("s")["response"] == {"output": "shipped 7"}


def test_handler_errors_and_error_results_become_error_answers() -> None:
    h = session()
    h.upstream(tool_call(function_call("a", "greet", {"name": "x"}), function_call("b", "get_weather", {"city": "y"})))
    h.fail("a", ValueError("no such person"))
    h.finish("b", ToolResult(error={"code": 404, "detail": "unknown city"}))
    assert h.output_for("a")["response"] == {"error": "ValueError: no such person"}
    assert h.output_for("b")["response"] == {"error": {"code": 404, "detail": "unknown city"}}
    assert [h.engine.ledger.get(c).outcome for c in "ab"] == ["error", "error"]


def test_unknown_tools_are_the_clients_unless_configured_to_be_answered_with_an_error() -> None:
    h = session()
    h.upstream(tool_call(function_call("u", "teleport")))
    assert h.outputs == [] and h.to_client == [tool_call(function_call("u", "teleport"))]

    h = session(config=EngineConfig(strict=True, unknown_tools="error"))
    h.upstream(tool_call(function_call("u", "teleport"), function_call("d", "open_door", {"door": "x"})))
    assert h.output_for("u")["response"] == {"error": "unknown tool 'teleport'"}
    assert h.engine.ledger.get("d").owner is Owner.CLIENT, "a function the client declared stays the client's"


def test_timeout_cancels_the_handler_and_answers_once_with_an_error() -> None:
    h = session()
    h.upstream(tool_call(function_call("s", "ship", {"order": {"order_id": 1}})))
    assert h.engine.next_deadline() == pytest.approx(h.now + 2)
    h.advance(1.9)
    assert h.outputs == [] and h.cancelled == []
    h.advance(0.2)
    assert [c.call_id for c in h.cancelled] == ["s"]
    assert h.output_for("s")["response"] == {"error": "timed out after 2 s"}
    h.finish("s", "too late")
    assert len(h.outputs) == 1
    entry = h.engine.ledger.get("s")
    assert (entry.outcome, entry.output_status, entry.state) == ("timeout", "incomplete", CallState.ANSWERED)
    assert h.engine.next_deadline() is None


def test_a_call_delivered_twice_runs_once() -> None:
    h = session()
    call = tool_call(function_call("c1", "greet", {"name": "Bo"}))
    h.upstream(call)
    h.upstream(call)
    h.run_all()
    assert len(h.outputs) == 1
    assert any("delivered again" in a.message for a in h.engine.anomalies)


def call_parts(*calls: dict[str, Any], text: str | None = None, **content: Any) -> dict[str, Any]:
    """A model turn delivering calls as `functionCall` parts (Gemini's second shape), with text
    before them if given."""
    parts: list[dict[str, Any]] = [{"text": text}] if text is not None else []
    parts += [{"functionCall": call} for call in calls]
    return {"serverContent": {"modelTurn": {"role": "model", "parts": parts}, **content}}


@pytest.mark.parametrize("part_first", [True, False], ids=["part-first", "toolcall-first"])
def test_a_relay_call_delivered_as_a_part_and_a_tool_call_is_hidden_in_both_run_and_answered_once(
        part_first: bool) -> None:
    h = session()
    call = function_call("c1", "greet", {"name": "Bo"})
    shapes = [call_parts(call), tool_call(call)]
    for message in shapes if part_first else shapes[::-1]:
        h.upstream(message)
    h.run_all()
    assert list(h.started) == ["c1"] and [a["id"] for a in h.outputs] == ["c1"]
    assert h.client_frames == []                       # neither shape reached the client
    assert h.engine.ledger.get("c1").delivered_as == (("modelTurn part", "toolCall") if part_first
                                                       else ("toolCall", "modelTurn part"))
    assert h.engine.anomalies == []                    # the provider's double delivery is expected


def test_a_call_part_beside_text_leaves_the_text_and_the_rest_of_the_message() -> None:
    h = session()
    h.upstream(call_parts(function_call("c1", "greet", {"name": "Bo"}), text="Let me greet Bo.",
                          outputTranscription={"text": "Let me"}))
    [seen] = h.to_client
    assert seen == {"serverContent": {"modelTurn": {"role": "model", "parts": [{"text": "Let me greet Bo."}]},
                                      "outputTranscription": {"text": "Let me"}}}
    assert isinstance(h.client_frames[0], bytes)       # rewritten in the frame kind it came in
    h.upstream(tool_call(function_call("c1", "greet", {"name": "Bo"})))
    h.run_all()
    assert len(h.to_client) == 1 and len(h.outputs) == 1


def test_a_mixed_part_message_keeps_the_clients_call_part_and_drops_the_relays() -> None:
    h = session()
    mine, theirs = function_call("r1", "greet", {"name": "Bo"}), function_call("k1", "open_door", {"door": "front"})
    h.upstream(call_parts(mine, theirs))
    assert h.to_client == [call_parts(theirs)]
    h.upstream(tool_call(mine, theirs))
    assert h.to_client[1:] == [tool_call(theirs)]      # the toolCall split as ever
    h.run_all()
    assert [a["id"] for a in h.outputs] == ["r1"]


def test_a_client_call_delivered_twice_reaches_the_client_twice_as_sent_and_counts_once() -> None:
    h = session()
    theirs = function_call("k1", "open_door", {"door": "front"})
    part, call = call_parts(theirs, text="Opening."), tool_call(theirs)
    h.upstream(part)
    h.upstream(call)
    assert h.to_client == [part, call] and h.outputs == []
    assert [(e.call_id, e.owner) for e in h.engine.ledger] == [("k1", Owner.CLIENT)]
    h.client({"toolResponse": {"functionResponses": [{"id": "k1", "name": "open_door",
                                                      "response": {"output": "open"}}]}})
    entry = h.engine.ledger.get("k1")
    assert entry.state is CallState.ANSWERED and h.engine.anomalies == []


def test_an_id_less_call_part_of_a_relay_tool_is_hidden_and_waits_for_its_tool_call() -> None:
    h = session()
    h.upstream(call_parts({"name": "greet", "args": {"name": "Bo"}}, text="Hi"))
    assert h.to_client == [call_parts(text="Hi")] and h.started == {}
    h.upstream(tool_call(function_call("c1", "greet", {"name": "Bo"})))
    h.run_all()
    assert [a["id"] for a in h.outputs] == ["c1"]


# ---- scheduling and streaming ------------------------------------------------------------------

def test_scheduling_is_sent_only_for_non_blocking_tools() -> None:
    h = session()
    h.upstream(tool_call(function_call("a", "alert", {"text": "fire"}), function_call("g", "greet", {"name": "x"})))
    h.run_all()
    assert h.output_for("a")["scheduling"] == "INTERRUPT"
    assert "scheduling" not in h.output_for("g") and "willContinue" not in h.output_for("g")


def test_a_result_may_override_the_tools_scheduling() -> None:
    h = session()
    h.upstream(tool_call(function_call("a", "alert", {"text": "fire"})))
    h.finish("a", ToolResult(result="quiet", scheduling="silent"))
    (message,) = [m for m in h.sent if "toolResponse" in m]
    parsed = validate_tool_response(message).function_responses[0]
    assert parsed.scheduling is genai_types.FunctionResponseScheduling.SILENT


def test_a_streaming_tool_sends_interim_answers_then_one_final() -> None:
    h = session()
    h.upstream(tool_call(function_call("p", "track", {"parcel": "P1"})))
    h.yield_value("p", "picked up")
    h.yield_value("p", {"at": "depot"})
    h.end_stream("p")
    answers = h.outputs_for("p")
    assert [a["willContinue"] for a in answers] == [True, True, False]
    assert [a["response"] for a in answers] == [{"output": "picked up"}, {"output": {"at": "depot"}},
                                                {"output": {"at": "depot"}}]
    assert [a["scheduling"] for a in answers] == ["WHEN_IDLE", "WHEN_IDLE", "SILENT"]
    for message in h.sent:
        validate_tool_response(message)
    entry = h.engine.ledger.get("p")
    assert entry.state is CallState.ANSWERED and entry.updates == ("picked up", '{"at":"depot"}')
    assert h.engine.next_deadline() is None


def test_a_stream_failing_after_a_value_ends_with_an_error_answer() -> None:
    h = session()
    h.upstream(tool_call(function_call("p", "track", {"parcel": "P1"})))
    h.yield_value("p", "picked up")
    h.fail("p", RuntimeError("carrier down"))
    assert [(a["willContinue"], a["response"]) for a in h.outputs_for("p")] == [
        (True, {"output": "picked up"}), (False, {"error": "RuntimeError: carrier down"})]


def test_a_stream_without_values_ends_with_an_error_and_a_stuck_stream_times_out() -> None:
    h = session()
    h.upstream(tool_call(function_call("p", "track", {"parcel": "P1"}), function_call("q", "track", {"parcel": "P2"})))
    h.end_stream("p")
    assert h.output_for("p")["response"] == {"error": "track finished without producing a result"}
    h.yield_value("q", "picked up")
    h.advance(5)
    assert [a["willContinue"] for a in h.outputs_for("q")] == [True, False]
    assert h.outputs_for("q")[-1]["response"] == {"error": "timed out after 5 s"}
    assert [c.call_id for c in h.cancelled] == ["q"]


# ---- cancellation --------------------------------------------------------------------------------

def test_cancellation_with_policy_cancel_stops_the_handler_and_sends_no_answer() -> None:
    h = session()
    h.upstream(tool_call(function_call("s", "ship", {"order": {"order_id": 3}})))
    h.upstream(cancellation("s"))
    assert [c.call_id for c in h.cancelled] == ["s"]
    assert h.client_frames == [], "the client never heard of the call, so not of its cancellation"
    h.finish("s", "shipped anyway")
    h.advance(10)
    assert h.outputs == []
    entry = h.engine.ledger.get("s")
    assert (entry.state, entry.outcome) == (CallState.SKIPPED, "cancelled")
    assert "toolCallCancellation" in (entry.skip_reason or "")
    assert entry not in h.engine.ledger.unanswered()


def test_cancellation_with_a_finishing_policy_lets_the_handler_finish_unheard() -> None:
    h = session()
    h.upstream(tool_call(function_call("b", "book", {"room": "blue"})))
    h.upstream(cancellation("b"))
    assert h.cancelled == []
    h.run_all()
    assert h.outputs == []
    entry = h.engine.ledger.get("b")
    assert (entry.state, entry.outcome, entry.output) == (CallState.SKIPPED, "ok", "booked blue")


def test_a_streaming_call_cancelled_after_interim_answers_gets_no_final() -> None:
    h = session(tool(interruption="cancel", name="watch")(track.__relay_tool__.handler))
    h.upstream(tool_call(function_call("w", "watch", {"parcel": "P"})))
    h.yield_value("w", "moving")
    h.upstream(cancellation("w"))
    h.yield_value("w", "late")
    h.end_stream("w")
    assert [a["willContinue"] for a in h.outputs_for("w")] == [True]


def test_a_mixed_cancellation_is_split_and_client_ids_are_forwarded() -> None:
    h = session()
    h.upstream(tool_call(function_call("s", "ship", {"order": {"order_id": 3}}),
                       function_call("d", "open_door", {"door": "front"})))
    h.upstream(cancellation("s", "d", "unknown"))
    assert h.to_client[-1] == cancellation("d", "unknown")
    assert h.engine.ledger.get("d").state is CallState.SKIPPED


def test_a_cancellation_after_the_answer_changes_nothing() -> None:
    h = session()
    h.upstream(tool_call(function_call("g", "greet", {"name": "x"})))
    h.run_all()
    h.upstream(cancellation("g"))
    assert h.engine.ledger.get("g").state is CallState.ANSWERED
    assert h.cancelled == [] and len(h.outputs) == 1


# ---- spelling and the client's side --------------------------------------------------------------

def test_snake_case_messages_are_understood_and_rewritten_in_their_own_spelling() -> None:
    h = session()
    h.upstream({"tool_call": {"function_calls": [{"id": "c1", "name": "greet", "args": {"name": "Al"}},
                                               {"id": "c2", "name": "open_door", "args": {"door": "x"}}]}})
    assert h.to_client == [{"tool_call": {"function_calls": [{"id": "c2", "name": "open_door",
                                                              "args": {"door": "x"}}]}}]
    h.run_all()
    assert h.output_for("c1")["response"] == {"output": "hello Al"}
    h.upstream({"tool_call_cancellation": {"ids": ["c2"]}})
    assert h.to_client[-1] == {"tool_call_cancellation": {"ids": ["c2"]}}


def test_the_clients_answers_pass_but_never_for_a_relay_call() -> None:
    h = session()
    h.upstream(tool_call(function_call("r", "ship", {"order": {"order_id": 1}}),
                       function_call("c", "open_door", {"door": "x"})))
    # the SDK's own spelling: snake_case at the top, camelCase inside
    h.client({"tool_response": {"functionResponses": [
        {"id": "r", "name": "ship", "response": {"output": "forged"}},
        {"id": "c", "name": "open_door", "response": {"output": "opened"}}]}})
    assert h.sent[-1] == {"tool_response": {"functionResponses": [
        {"id": "c", "name": "open_door", "response": {"output": "opened"}}]}}
    assert any(n.kind == "client_error" and n.fields["code"] == "relay_owned_call" for n in h.notices)
    client_call = h.engine.ledger.get("c")
    assert (client_call.state, client_call.output) == (CallState.ANSWERED, "opened")
    assert h.engine.ledger.get("r").state is CallState.RUNNING


def test_a_client_answer_made_up_for_a_relay_tool_is_refused() -> None:
    h = session()
    h.client({"toolResponse": {"functionResponses": [
        {"id": "made_up", "name": "greet", "response": {"output": "forged"}}]}})
    assert h.sent == []
    assert [n.fields["code"] for n in h.notices if n.kind == "client_error"] == ["relay_owned_call"]


@pytest.mark.parametrize("part", [
    {"functionResponse": {"id": "r", "name": "ship", "response": {"output": "forged"}}},
    {"function_response": {"id": "r", "name": "anything", "response": {"output": "forged"}}},
    {"functionResponse": {"id": "made_up", "name": "greet", "response": {"output": "forged"}}},
    {"functionCall": {"id": "made_up", "name": "greet", "args": {"name": "Eve"}}},
], ids=["answer to a relay call", "snake_case answer to a relay call", "answer for a relay tool", "call of a relay tool"])
def test_a_client_turn_that_answers_or_makes_up_a_relay_call_is_refused(part: dict[str, Any]) -> None:
    h = session()
    h.upstream(tool_call(function_call("r", "ship", {"order": {"order_id": 1}})))
    sent = len(h.sent)
    h.client({"client_content": {"turns": [{"role": "user", "parts": [{"text": "here"}, part]}],
                                 "turnComplete": True}})
    assert len(h.sent) == sent
    assert [n.fields["code"] for n in h.notices if n.kind == "client_error"] == ["relay_owned_call"]
    h.client({"clientContent": {"turns": [{"role": "user", "parts": [
        {"functionResponse": {"id": "c", "name": "open_door", "response": {"output": "opened"}}}]}]}})
    assert len(h.sent) == sent + 1   # the client's own answers still pass
    h.run_all()
    assert h.output_for("r")["response"] == {"output": "shipped 1"}


def test_a_client_answer_only_for_relay_calls_is_not_forwarded_at_all() -> None:
    h = session()
    h.upstream(tool_call(function_call("r", "greet", {"name": "x"})))
    sent = len(h.upstream_frames)
    h.client({"toolResponse": {"functionResponses": [{"id": "r", "name": "greet", "response": {}}]}})
    assert len(h.upstream_frames) == sent


def test_answers_wait_while_the_upstream_is_away() -> None:
    h = session()
    h.upstream(tool_call(function_call("g", "greet", {"name": "x"})))
    h._act(h.engine.upstream_disconnected(h.now))
    h.run_all()
    assert h.outputs == [] and h.engine.ledger.get("g").state is CallState.FINISHED
    h._act(h.engine.upstream_reconnected(h.now))
    assert h.output_for("g")["response"] == {"output": "hello x"}


def test_close_cancels_running_handlers_and_abandons_their_calls() -> None:
    h = session()
    h.upstream(tool_call(function_call("g", "greet", {"name": "x"})))
    h._act(h.engine.close(h.now, "client closed"))
    assert [c.call_id for c in h.cancelled] == ["g"]
    (notice,) = [n for n in h.notices if n.kind == "tool_call"]
    assert notice.fields["outcome"] == "abandoned" and notice.fields["reason"] == "client closed"
    h.finish("g", "late")
    assert h.outputs == []


# ---- fast path -----------------------------------------------------------------------------------

def audio_chunk(size: int = 32_000) -> bytes:
    data = "A" * size
    return json.dumps({"serverContent": {"modelTurn": {"parts": [
        {"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": data}}]}}}).encode()


def test_audio_frames_are_forwarded_as_the_same_object_without_being_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    h = session()
    parsed: list[Any] = []
    real_loads = json.loads
    monkeypatch.setattr("relay.engine.immediate.json.loads", lambda s, **k: parsed.append(s) or real_loads(s, **k))
    chunk = audio_chunk()
    h.upstream(chunk)
    mic = json.dumps({"realtimeInput": {"audio": {"mimeType": "audio/pcm;rate=16000", "data": "B" * 8000}}})
    h.client(mic)
    assert h.client_frames[-1] is chunk and h.upstream_frames[-1] is mic
    assert parsed == []
    # the model's audio still counts as a message in its turn
    assert [r.role for r in h.engine.conversation.visible_items()][-1] == "assistant"


def test_frames_with_words_or_turn_state_are_parsed_even_when_large() -> None:
    h = session()
    transcribed = {"serverContent": {"modelTurn": {"parts": [{"inlineData": {"data": "A" * 20_000}}]},
                                     "outputTranscription": {"text": "It is sunny."}}}
    h.upstream(transcribed)
    h.upstream(TURN_COMPLETE)
    (answer,) = [r for r in h.engine.conversation.visible_items() if r.role == "assistant"]
    assert answer.text() == "It is sunny." and answer.status == "completed"
    assert h.engine.conversation.responses[answer.response_id].status == "completed"


def test_an_unparsed_media_frame_passes_but_other_broken_frames_stop_at_the_relay() -> None:
    h = session()
    broken = b'{"serverContent": {"modelTurn": {"parts": [{"inlineData": {"data": "AAAA'
    h.upstream(broken)
    assert h.client_frames == [broken] and h.engine.anomalies == []
    h.upstream(b'{"toolCall": {"functionCalls": [{"id": "c1", "name": "get_weather"')
    h.upstream(b"[1, 2]")
    assert h.client_frames == [broken], "a broken frame may hold a relay call: it is not forwarded"
    assert [a.message[:26] for a in h.engine.anomalies] == ["frame is not valid JSON: E", "frame is a JSON list, not "]


# ---- conversation --------------------------------------------------------------------------------

def test_the_conversation_follows_turns_calls_and_answers() -> None:
    h = EngineDriver(TOOLS, dialect=GEMINI)
    h.client({"setup": {"model": "m", "systemInstruction": {"parts": [{"text": "Be brief."}]}}})
    h.client(gemini_user_text("weather in Paris?"))
    h.upstream(model_text("Let me "))
    h.upstream(model_text("check."))
    h.upstream(tool_call(function_call("c1", "get_weather", {"city": "Paris"})))
    h.run_all()
    h.upstream(model_text("Sunny, 21."))
    h.upstream(TURN_COMPLETE)
    conversation = h.engine.conversation
    assert conversation.session["instructions"] == "Be brief."
    shape = [(r.type, r.role, r.origin, r.hidden) for r in conversation.visible_items()]
    assert shape == [("message", "user", "client", False), ("message", "assistant", "model", False),
                     ("function_call", None, "model", True), ("function_call_output", None, "relay", True),
                     ("message", "assistant", "model", False)]
    texts = [r.text() for r in conversation.visible_items() if r.type == "message"]
    assert texts == ["weather in Paris?", "Let me check.", "Sunny, 21."]
    output = conversation.visible_items()[3]
    assert json.loads(output.data["output"]) == {"city": "Paris", "temp_c": 21}
    (turn,) = conversation.responses.values()
    assert turn.status == "completed" and len(turn.output_item_ids) == 3


def test_lagging_input_transcription_goes_before_the_models_answer_and_interruption_ends_the_turn() -> None:
    h = session()
    h.upstream({"serverContent": {"outputTranscription": {"text": "Sure, "}}})
    h.upstream({"serverContent": {"inputTranscription": {"text": "Tell me "}}})
    h.upstream({"serverContent": {"inputTranscription": {"text": "a story."}}})
    h.upstream({"serverContent": {"interrupted": True}})
    h.upstream({"serverContent": {"inputTranscription": {"text": "Stop."}}})
    items = h.engine.conversation.visible_items()
    assert [(r.role, r.text()) for r in items[1:]] == [
        ("user", "Tell me a story."), ("assistant", "Sure, "), ("user", "Stop.")]
    assert items[2].status == "incomplete"
    (turn,) = h.engine.conversation.responses.values()
    assert (turn.status, turn.reason) == ("cancelled", "turn_detected")


def test_text_sent_as_realtime_input_is_a_user_turn() -> None:
    h = session()
    h.client({"realtime_input": {"text": "and tomorrow?"}})
    h.client({"realtimeInput": {"audioStreamEnd": True}})
    assert [r.text() for r in h.engine.conversation.visible_items() if r.role == "user"] == ["hello", "and tomorrow?"]
    assert len(h.upstream_frames) == 2
