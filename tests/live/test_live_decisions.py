"""GPT-Live's Decisions delegation through the engine, on a fake clock, without sockets.

A Decisions session delegates to the Decision API, which answers the configured questions in a
`decision.event`; it makes no function call (its config has no tools, and `function_call` items are
inputs the client appends with `decision.item.create`). So the relay declares nothing, runs
nothing and owes nothing there: the session goes up as the client wrote it (the strict config
would refuse a tool), the `decision.*` events pass both ways unchanged, and odd input is told, not
fatal. Every frame the engine writes is checked against `openai.types.live` (tests/live/driver.py).
"""

from __future__ import annotations

import json

from relay.engine import EngineConfig
from relay.tools import Delegation, ToolResult, delegate, tool
from tests.live.driver import MODEL, LiveDriver, Message, delegation_created, started, transcript

DECISIONS = {"type": "decisions", "decisions": {"model": "gpt-5-mini", "questions": [
    {"type": "predicate", "name": "wants_human", "instructions": "Does the caller ask for a person?"}]}}
DECISION = {"answers": [{"type": "predicate", "name": "wants_human", "probability": 0.9}], "model": "gpt-5-mini",
            "usage": {"input_tokens": 10, "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 0},
                      "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 11}}


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


@delegate(timeout=10)
def assistant(delegation: Delegation) -> ToolResult:
    """Answers client delegations."""
    return ToolResult(result="facts", message="say it")


def decision_event(delegation_id: str | None, n: int = 0, nested: object = None) -> Message:
    event = {"type": "decision.completed", "decision": DECISION} if nested is None else nested
    return {"type": "decision.event", "event_id": f"event_dec{n}", "delegation_id": delegation_id, "event": event}


def decisions_driver(*tools: object, config: EngineConfig | None = None) -> LiveDriver:
    driver = LiveDriver(tools or [get_weather, assistant], config=config)   # type: ignore[arg-type]
    driver.client({"type": "session.start", "event_id": "c_start", "session": {"model": MODEL,
                                                                                 "delegation": DECISIONS}})
    driver.upstream(started(DECISIONS))
    return driver


def test_the_session_goes_up_as_written_and_one_line_says_the_relay_tools_are_not_offered() -> None:
    driver = decisions_driver()
    (start,) = driver.sent()
    assert start["session"] == {"model": MODEL, "delegation": DECISIONS}, "nothing added: there is no tool channel"
    assert driver.engine.mode == "decisions"
    told = [message for message in driver.anomalies() if "no tool channel" in message]
    assert len(told) == 1
    assert driver.to_client()[0]["session"]["delegation"] == DECISIONS


def test_without_relay_tools_nothing_is_said() -> None:
    driver = LiveDriver([])
    driver.client({"type": "session.start", "session": {"model": MODEL, "delegation": DECISIONS}})
    driver.upstream(started(DECISIONS))
    assert driver.anomalies() == []


def test_a_decisions_delegation_and_its_decision_reach_the_client_and_nothing_is_run_or_sent() -> None:
    driver = decisions_driver()
    driver.upstream(transcript("input", "Can I talk to a person?", 800))
    driver.upstream(delegation_created("item_d1", target="decisions"))
    driver.upstream(decision_event("item_d1"))
    shown = driver.to_client()
    assert [e["type"] for e in shown[1:]] == ["session.input_transcript.delta", "session.delegation.created",
                                             "decision.event"]
    assert shown[-1]["event"]["decision"] == DECISION and shown[-1]["delegation_id"] == "item_d1"
    assert driver.started == {}, "no handler runs for a Decisions delegation (the delegate is for client ones)"
    assert len(driver.sent()) == 1, "the relay sends nothing of its own"
    driver.advance(60)
    assert len(driver.sent()) == 1 and driver.started == {}
    assert [m for m in driver.anomalies() if "no tool channel" not in m] == []


def test_the_clients_decision_commands_go_up_unchanged() -> None:
    """`decision.item.create` with a call and its output (the client records its own tool work
    for later decisions), `decision.create`, `decision.item.delete`: the client's, as written."""
    driver = decisions_driver()
    commands: list[Message] = [
        {"type": "decision.item.create", "event_id": "c1", "item": {
            "type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'}},
        {"type": "decision.item.create", "event_id": "c2", "item": {
            "type": "function_call_output", "call_id": "call_1", "output": "sunny"}},
        {"type": "decision.create", "event_id": "c3"},
        {"type": "decision.item.delete", "event_id": "c4", "item_id": "di_1"},
    ]
    for command in commands:
        driver.client(command)
    assert driver.sent()[1:] == commands
    assert driver.errors_to_client() == []
    driver.upstream({"type": "decision.item.created", "event_id": "e1", "client_event_id": "c1", "item": {
        **commands[0]["item"], "id": "di_1"}})
    driver.upstream(decision_event(None, 1))
    driver.upstream({"type": "decision.item.deleted", "event_id": "e3", "client_event_id": "c4", "item_id": "di_1"})
    assert [e["type"] for e in driver.to_client()[-3:]] == ["decision.item.created", "decision.event",
                                                           "decision.item.deleted"]


def test_a_trigger_decision_passes_without_a_delegation() -> None:
    driver = decisions_driver()
    fired = {**decision_event(None, 2), "trigger_id": "trig_1", "source_event_id": "event_t800",
             "source_event_type": "session.input_transcript.delta"}
    driver.upstream(fired)
    assert driver.to_client()[-1] == fired
    assert [m for m in driver.anomalies() if "no tool channel" not in m] == []


def test_bad_decision_input_is_told_and_passed_on_never_fatal() -> None:
    driver = decisions_driver()
    driver.check_shapes = False   # the bad frames are forwarded as they came
    driver.upstream(decision_event("item_never_seen", 3))
    driver.upstream(decision_event("item_d1", 4, nested={"type": "decision.failed", "error": {"code": "x"}}))
    driver.upstream(decision_event("item_d1", 5, nested="not an object"))
    driver.upstream(decision_event(None, 6, nested={"type": "decision.completed"}))
    driver.upstream({**decision_event(None, 7), "delegation_id": 42})
    driver.upstream({"type": "decision.event", "event_id": 5})   # no nested event at all
    driver.upstream(delegation_created("item_x", target="somewhere_new"))
    driver.upstream('{"type": "decision.event", "event": ')       # not JSON
    told = driver.anomalies()
    assert any("item_never_seen" in m and "never saw" in m for m in told)
    assert sum("no decision of the known shape" in m for m in told) == 4
    assert any("not a string" in m for m in told)
    assert any("unknown target 'somewhere_new'" in m for m in told)
    assert any("not a JSON event" in m for m in told)
    shown = [json.loads(frame) for frame in driver.client_frames]
    assert sum(e["type"] == "decision.event" for e in shown) == 6, "each decision passed on as it came"
    driver.client({"type": "decision.item.create", "item": "not an object"})   # the server's to refuse
    driver.client({"type": "decision.create"})                                 # no event_id: the server's to refuse
    assert len(driver.sent()) == 3 and driver.errors_to_client() == []


def test_a_session_closed_with_a_decision_pending_owes_nothing() -> None:
    driver = decisions_driver()
    driver.upstream(delegation_created("item_d1", target="decisions"))
    driver.upstream({"type": "session.closed", "event_id": "event_c", "reason": "connection_lost",
                     "session": started(DECISIONS)["session"], "usage": {"seconds": 4}})
    driver.close()
    driver.upstream(decision_event("item_d1", 9))   # late: after the close, never a crash
    assert len(driver.sent()) == 1 and driver.started == {}
    assert driver.records() == [], "no relay call, so nothing owed and nothing recorded"


def test_attached_to_a_decisions_session_the_relay_sends_no_update() -> None:
    driver = LiveDriver([get_weather], config=EngineConfig(strict=True, mode="sidecar"))
    driver.upstream(started(DECISIONS))
    driver.upstream(delegation_created("item_d1", target="decisions"))
    driver.upstream(decision_event("item_d1"))
    assert driver.sent() == [], "no session.update: a Decisions config has nowhere to put a tool"
    assert driver.engine.mode == "decisions"
    assert sum("no tool channel" in m for m in driver.anomalies()) == 1
