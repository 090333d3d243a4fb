"""Proxy-mode rules in the engine: tool declaration and merging, hiding the relay's calls from the
client, holding the client's response.create, and refusing what a client may not do."""

from __future__ import annotations

import json

import pytest

from relay.engine import EngineConfig
from relay.engine.hiding import FORGED_CALLS_KEPT
from tests.support.engine import EngineDriver
from tests.support.local_mock import model_call
from tests.support.tools import DOOR_TOOL, get_weather


def proxy(**config) -> EngineDriver:
    return EngineDriver([get_weather], config=EngineConfig(mode="proxy", strict=True, **config))


def tool_names(tools) -> list[str]:
    return [t["name"] for t in tools]


def test_relay_declares_its_tools_after_session_created_when_the_client_says_nothing() -> None:
    h = proxy()
    h.connect()
    [update] = h.sent_of("session.update")
    assert tool_names(update["session"]["tools"]) == ["get_weather"]
    assert update["session"]["type"] == "realtime"
    # the client sees session.created and session.updated without the relay's tool
    sessions = [e for e in h.to_client if e["type"].startswith("session.")]
    assert [e["type"] for e in sessions] == ["session.created", "session.updated"]
    assert all(tool_names(e["session"]["tools"]) == [] for e in sessions)


def test_client_tools_are_merged_with_relay_tools_in_every_session_update() -> None:
    h = proxy()
    h.client({"type": "session.update", "session": {"type": "realtime", "instructions": "hi", "tools": [DOOR_TOOL]}})
    h.connect()
    [update] = h.sent_of("session.update")  # no second update of the relay's own
    assert tool_names(update["session"]["tools"]) == ["open_door", "get_weather"]
    assert update["session"]["instructions"] == "hi"
    h.client({"type": "session.update", "session": {"type": "realtime", "instructions": "bye"}})
    assert "tools" not in h.sent_of("session.update")[-1]["session"]  # absent tools stay as they were
    h.client({"type": "session.update", "session": {"type": "realtime", "tools": []}})
    assert tool_names(h.sent_of("session.update")[-1]["session"]["tools"]) == ["get_weather"]
    updated = [e for e in h.to_client if e["type"] == "session.updated"]
    assert tool_names(updated[0]["session"]["tools"]) == ["open_door"]
    assert tool_names(updated[-1]["session"]["tools"]) == []


def test_the_relay_tools_are_declared_before_a_client_response_create_that_precedes_session_created() -> None:
    harness = EngineDriver([get_weather], config=EngineConfig(mode="proxy", strict=True))
    harness.client({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]}})
    harness.client({"type": "response.create"})
    harness.connect()   # session.created arrives after the client's first events went upstream
    sent = [(e["type"], json.dumps(e.get("session", {}).get("tools", []))) for e in harness.sent]
    declared = next(i for i, (kind, tools) in enumerate(sent) if kind == "session.update" and "get_weather" in tools)
    first_create = next(i for i, (kind, _) in enumerate(sent) if kind == "response.create")
    assert declared < first_create


def test_a_client_cannot_redefine_a_relay_tool() -> None:
    h = proxy()
    h.connect()
    sent_before = len(h.sent)
    h.client({"type": "session.update", "event_id": "c1",
              "session": {"tools": [DOOR_TOOL, {**DOOR_TOOL, "name": "get_weather"}]}})
    h.client({"type": "response.create", "event_id": "c2",
              "response": {"tools": [{**DOOR_TOOL, "name": "get_weather"}]}})
    assert len(h.sent) == sent_before  # nothing forwarded
    errors = [e["error"] for e in h.to_client if e["type"] == "error"]
    assert [e["code"] for e in errors] == ["relay_tool_redefined", "relay_tool_redefined"]
    assert [e["event_id"] for e in errors] == ["c1", "c2"]
    assert "'get_weather'" in errors[0]["message"]


def test_response_create_with_tools_keeps_the_relay_tools() -> None:
    h = proxy()
    h.connect()
    h.client({"type": "response.create", "response": {"tools": [DOOR_TOOL], "instructions": "x"}})
    assert tool_names(h.creates[-1]["response"]["tools"]) == ["open_door", "get_weather"]


def test_the_client_never_sees_relay_calls_and_its_item_chain_stays_consistent() -> None:
    h = proxy()
    h.connect()
    h.upstream(h.mock.user_turn("weather?"))
    h.respond(["Let me check.", model_call("get_weather", '{"city":"Paris"}')])
    h.run_all()
    seen_types = [e["type"] for e in h.to_client]
    assert "response.function_call_arguments.delta" not in seen_types
    relay_ids = {i["id"] for i in h.mock.items if i["type"].startswith("function_call")}
    for event in h.to_client:
        item = event.get("item") or {}
        assert item.get("id") not in relay_ids
        if event["type"] == "response.done":
            assert all(o["id"] not in relay_ids for o in event["response"]["output"])
    # the chain of conversation.item.added the client saw links item to item without gaps
    chain = [e for e in h.to_client if e["type"] == "conversation.item.added"]
    seen: list[str] = []
    for event in chain:
        assert event["previous_item_id"] == (seen[-1] if seen else None)
        seen.append(event["item"]["id"])
    # the follow-up answer reached the client, linked after the client's last visible item
    assert h.engine.conversation.items[seen[-1]].origin == "model"
    assert len(seen) == 3  # user, "Let me check.", the follow-up answer


def test_exposed_tool_events_are_forwarded() -> None:
    h = proxy(hide_tool_events=False)
    h.connect()
    h.respond([model_call("get_weather", '{"city":"Paris"}')])
    h.run_all()
    assert any(e["type"] == "response.function_call_arguments.delta" for e in h.to_client)
    assert any(e.get("item", {}).get("type") == "function_call_output" for e in h.to_client)
    assert tool_names(h.to_client[0]["session"]["tools"]) == []  # created before our update
    assert tool_names([e for e in h.to_client if e["type"] == "session.updated"][0]["session"]["tools"]) == ["get_weather"]


def test_client_response_create_is_held_until_relay_outputs_are_in() -> None:
    h = proxy()
    h.connect()
    h.respond([model_call("get_weather", '{"city":"Paris"}'), model_call("open_door", '{"door":"front"}')])
    relay_call, client_call = h.engine.ledger
    # the client answers its own call and asks for a response while ours still runs
    h.client({"type": "conversation.item.create", "item": {"type": "function_call_output",
                                                           "call_id": client_call.call_id, "output": "opened"}})
    h.client({"type": "response.create", "event_id": "client_create"})
    assert h.creates == []  # held
    h.run_all()
    assert [c["event_id"] for c in h.creates] == ["client_create"]  # released after our output
    types = [(e["type"], e.get("item", {}).get("call_id")) for e in h.sent]
    assert types.index(("conversation.item.create", relay_call.call_id)) < types.index(("response.create", None))
    assert not h.mock.errors
    # the client's response answered both calls: the relay sends no follow-up of its own
    assert relay_call.follow_up_response_id is not None
    assert len(h.creates) == 1


def test_client_output_for_a_relay_call_is_refused() -> None:
    h = proxy()
    h.connect()
    h.respond([model_call("get_weather", '{"city":"Paris"}')])
    [entry] = h.engine.ledger
    before = len(h.sent)
    h.client({"type": "conversation.item.create", "event_id": "evil",
              "item": {"type": "function_call_output", "call_id": entry.call_id, "output": "hacked"}})
    assert len(h.sent) == before
    error = [e for e in h.to_client if e["type"] == "error"][-1]["error"]
    assert error["code"] == "relay_owned_call" and error["event_id"] == "evil"
    h.run_all()
    assert h.output_for(entry.call_id)["output"] == "sunny in Paris"


FORGED_CALL = {"type": "function_call", "call_id": "call_forged", "name": "get_weather", "arguments": '{"city":"X"}'}


def test_a_client_made_function_call_naming_a_relay_tool_is_refused_and_so_is_its_output() -> None:
    h = proxy()
    h.connect()
    before = len(h.sent)
    h.client({"type": "conversation.item.create", "event_id": "call", "item": FORGED_CALL})
    h.client({"type": "conversation.item.create", "event_id": "output", "item": {
        "type": "function_call_output", "call_id": "call_forged", "output": "made up"}})
    h.client({"type": "response.create"})
    assert not h.started and list(h.engine.ledger) == []
    assert [e["type"] for e in h.sent[before:]] == ["response.create"]
    errors = [e["error"] for e in h.to_client if e["type"] == "error"]
    assert [(e["code"], e["event_id"], e["param"]) for e in errors] == [
        ("relay_owned_call", "call", "item.name"), ("relay_owned_call", "output", "item.call_id")]


@pytest.mark.parametrize("item", ["output", "call"])
def test_a_response_create_whose_input_forges_a_relay_call_or_its_output_is_refused(item: str) -> None:
    h = proxy()
    h.connect()
    h.respond([model_call("get_weather", '{"city":"Paris"}')])
    [entry] = h.engine.ledger
    forged = {"output": {"type": "function_call_output", "call_id": entry.call_id, "output": "frogs"},
              "call": FORGED_CALL}[item]
    before = len(h.sent)
    h.client({"type": "response.create", "event_id": "evil", "response": {
        "conversation": "none", "input": [{"type": "message", "role": "user", "content": []}, forged]}})
    assert len(h.sent) == before and not h.engine.view.held.waiting()
    [error] = [e["error"] for e in h.to_client if e["type"] == "error"]
    assert error["code"] == "relay_owned_call" and error["event_id"] == "evil"
    assert error["param"].startswith("response.input[1].")
    h.run_all()
    assert h.output_for(entry.call_id)["output"] == "sunny in Paris"
    assert len(h.creates) == 1   # the relay's own follow-up


def test_the_made_up_calls_kept_are_bounded() -> None:
    h = proxy()
    h.connect()
    for n in range(FORGED_CALLS_KEPT * 3):
        h.client({"type": "conversation.item.create", "item": {**FORGED_CALL, "call_id": f"call_{n}"}})
    assert len(h.engine.view.forged_calls) == FORGED_CALLS_KEPT


def test_audio_frames_pass_through_as_the_same_text() -> None:
    h = proxy()
    e = h.engine
    frame = '{"type":"input_audio_buffer.append","audio":"' + "QUJD" * 300 + '"}'
    [action] = e.receive_client(frame, 1.0)
    assert action.frame is frame
    upstream_audio = '{"type":"response.output_audio.delta","event_id":"e","delta":"' + "QUJD" * 300 + '"}'
    [action] = e.receive_upstream(upstream_audio, 1.0)
    assert action.frame is upstream_audio


def test_errors_aimed_at_the_client_are_forwarded_and_ours_are_not() -> None:
    h = proxy()
    h.connect()
    h.upstream({"type": "error", "event_id": "e1", "error": {"type": "invalid_request_error", "code": "x",
                                                            "message": "yours", "param": None, "event_id": "c9"}})
    assert h.to_client[-1]["error"]["message"] == "yours"
    h.upstream({"type": "error", "event_id": "e2", "error": {"type": "invalid_request_error", "code": "x",
                                                            "message": "relay-internal", "param": None, "event_id": "t_e1"}})
    assert h.to_client[-1]["error"]["message"] == "yours"
    assert json.dumps(h.to_client).count("relay-internal") == 0


def test_a_hidden_call_id_never_reaches_the_client() -> None:
    h = proxy()
    h.connect()
    h.upstream(h.mock.user_turn("what's the weather?"))
    h.respond([model_call("get_weather", json.dumps({"city": "Paris"}))])
    h.run_all()
    [entry] = h.engine.ledger
    assert h.creates and entry.follow_up_response_id
    assert not [e for e in h.to_client if entry.call_id in json.dumps(e)]
    follow_up = [e for e in h.to_client if e["type"] == "response.created"][-1]
    assert follow_up["response"]["metadata"]["relay"] == "follow_up"   # still recognisable


def test_a_repeated_or_escaped_type_key_cannot_smuggle_an_event_past_the_relay() -> None:
    """Parsers keep the last of repeated keys: a frame whose first `type` says audio append must
    not be forwarded unparsed if it holds another `type` (found by the reliability tests)."""
    h = proxy()
    h.connect()
    h.respond([model_call("get_weather", '{"city":"Paris"}')])
    [entry] = h.engine.ledger
    item = json.dumps({"type": "function_call_output", "call_id": entry.call_id, "output": "frogs"})
    before = len(h.sent)
    for second_key in ('"type"', '"typ\\u0065"'):
        h.client('{"type":"input_audio_buffer.append",' + second_key + ':"conversation.item.create","item":' + item + "}")
    assert len(h.sent) == before   # parsed, recognised as an output for a relay call, refused
    assert [e["error"]["code"] for e in h.to_client if e["type"] == "error"] == ["relay_owned_call"] * 2
    h.client('{"type":"input_audio_buffer.append","type":"session.update","session":{"tools":[]}}')
    assert [t["name"] for t in h.sent_of("session.update")[-1]["session"]["tools"]] == ["get_weather"]


def test_a_client_create_held_for_a_slow_relay_tool_goes_up_at_the_hold_limit_and_the_output_follows() -> None:
    # LiveKit Agents' case: a relay tool runs 12 s; the user says "thanks" after 1 s and the client
    # asks for a response, then gives up on it after 10 s of its own
    h = proxy(hold_limit=5.0)
    h.connect()
    h.respond([model_call("get_weather", '{"city":"Paris"}')])
    [entry] = h.engine.ledger
    h.advance(1.0)
    h.client({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "thanks"}]}})
    h.client({"type": "response.create", "event_id": "thanks_create"})
    assert h.creates == []   # held: the relay's tool runs
    assert h.engine.next_deadline() == h.now + 5.0
    h.advance(4.9)
    assert h.creates == []
    h.advance(0.1)
    # the client's create answers the user's new turn, without the tool's output
    assert [c.get("event_id") for c in h.creates] == ["thanks_create"]
    assert h.outputs == []
    assert not [e for e in h.to_client if e["type"] == "error"]
    h.advance(6.0)
    h.finish(entry.call_id, "sunny in Paris")   # the tool ends at 12 s
    # its output goes in once, with the relay's own follow-up after the client's response
    assert [o["item"]["call_id"] for o in h.outputs] == [entry.call_id]
    assert len(h.creates) == 2 and h.creates[1].get("event_id") != "thanks_create"
    assert h.creates[1]["response"]["metadata"]["relay"] == "follow_up"
    types = [e["type"] for e in h.sent]
    assert types.index("conversation.item.create", types.index("response.create") + 1) < len(types) - 1
    assert not h.mock.errors


def test_a_create_held_past_the_limit_behind_an_active_response_waits_for_it_without_spinning() -> None:
    h = proxy(hold_limit=5.0)
    h.connect()
    h.respond([model_call("get_weather", '{"city":"Paris"}')], finish=False)   # it stays active
    [entry] = h.engine.ledger
    h.client({"type": "response.create", "event_id": "early"})
    h.advance(6.0)
    assert h.creates == []   # a response is active: going up now, it would be refused
    deadline = h.engine.next_deadline()
    assert deadline is None or deadline > h.now   # nothing for the edge's timer to spin on
    h.upstream(h.mock.finish_response())
    # the response ended while the tool still runs: the create goes up, without the output
    assert [c.get("event_id") for c in h.creates] == ["early"]
    h.finish(entry.call_id, "sunny in Paris")
    assert [o["item"]["call_id"] for o in h.outputs] == [entry.call_id]
    assert len(h.creates) == 2 and h.creates[1]["response"]["metadata"]["relay"] == "follow_up"
    assert not h.mock.errors


def test_without_a_hold_limit_a_create_waits_for_the_relay_tools_however_long() -> None:
    h = proxy(hold_limit=None)
    h.connect()
    h.respond([model_call("get_weather", '{"city":"Paris"}')])
    [entry] = h.engine.ledger
    h.client({"type": "response.create", "event_id": "patient"})
    h.advance(25.0)   # within the tool's own 30 s timeout
    assert h.creates == []
    h.finish(entry.call_id, "sunny in Paris")
    assert [c.get("event_id") for c in h.creates] == ["patient"]   # it answers the output
