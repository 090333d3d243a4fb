"""GPT-Live's engine rules on a fake clock, without sockets: the Responses batch rule, client
delegations answered by a delegate (the split, the timeout, barge-in), and bad input from either
side. Every frame the engine writes is checked against `openai.types.live` (tests/live/driver.py)."""

from __future__ import annotations

import json

from relay.engine import EngineConfig
from relay.engine.appends import APPEND_BYTE_LIMIT
from relay.tools import Delegation, Interruption, ToolResult, delegate, tool
from tests.live.driver import (
    LiveDriver,
    call_item,
    client_session,
    delegation_created,
    envelope,
    function_tool,
    responses_session,
    started,
    transcript,
    types_of,
)


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


@tool
def get_time(city: str) -> str:
    """The time in a city."""
    return "noon"


@delegate(timeout=10, on_failure="Sorry, I could not look that up.")
def assistant(delegation: Delegation) -> ToolResult:
    """Answers the caller's delegated requests."""
    return ToolResult(result="facts", message="say it")


RESPONSES = {"type": "responses", "responses": {"model": "gpt-5.4", "tools": []}}


def responses_driver(client_tools: tuple[str, ...] = (), **options: object) -> LiveDriver:
    driver = LiveDriver([get_weather, get_time], **options)   # type: ignore[arg-type]
    driver.client(responses_session([function_tool(name) for name in client_tools]))
    driver.upstream(started(RESPONSES))
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    return driver


# ---- Responses delegation ------------------------------------------------------------------
def test_the_relay_tools_join_the_responses_tools_and_the_client_never_sees_them() -> None:
    driver = LiveDriver([get_weather])
    driver.client(responses_session([function_tool("show_map")]))
    (start,) = driver.sent()
    assert [t["name"] for t in start["session"]["delegation"]["responses"]["tools"]] == ["show_map", "get_weather"]
    driver.upstream(started({"type": "responses", "responses": {
        "model": "gpt-5.4", "tools": start["session"]["delegation"]["responses"]["tools"]}}))
    assert b"get_weather" not in "".join(driver.client_frames).encode()
    final = started({"type": "responses", "responses": {
        "model": "gpt-5.4", "tools": start["session"]["delegation"]["responses"]["tools"]}})["session"]
    driver.upstream({"type": "session.closed", "event_id": "event_c", "reason": "close_requested",
                     "session": final, "usage": {"seconds": 3}})
    closed = driver.to_client()[-1]
    assert closed["type"] == "session.closed" and closed["reason"] == "close_requested"
    assert [t["name"] for t in closed["session"]["delegation"]["responses"]["tools"]] == ["show_map"]


def test_one_create_per_batch_after_completed_and_every_result() -> None:
    driver = responses_driver()
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"}),
                                      call_item("c2", "get_time", {"city": "Paris"})], complete=False)
    assert set(driver.started) == {"c1", "c2"}
    driver.finish("c1", "sunny")
    driver.finish("c2", "noon")
    assert driver.outputs() == [], "outputs wait for the backend response to complete"
    driver.complete("item_1", "resp_1")
    sent = driver.sent()[1:]
    assert types_of(sent) == ["response.item.create", "response.item.create", "response.create"]
    assert [e["item"]["call_id"] for e in sent[:2]] == ["c1", "c2"]
    assert [e["item"]["output"] for e in sent[:2]] == ["sunny", "noon"]


def test_a_batch_completed_before_its_results_is_continued_after_the_last_one_only() -> None:
    driver = responses_driver()
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"}),
                                      call_item("c2", "get_time", {"city": "Rome"})])
    driver.finish("c2", "noon")
    assert types_of(driver.sent()[1:]) == ["response.item.create"], "never a create before the batch is whole"
    driver.finish("c1", "sunny")
    assert types_of(driver.sent()[1:]) == ["response.item.create", "response.item.create", "response.create"]
    # the continuation is a new round: its own calls get their own one create
    driver.batch("item_1", "resp_2", [call_item("c3", "get_time", {"city": "Oslo"})])
    driver.finish("c3", "dusk")
    assert len(driver.sent_of("response.create")) == 2
    assert [e["item"]["call_id"] for e in driver.outputs()] == ["c2", "c1", "c3"]


def test_a_mixed_batch_holds_the_clients_create_until_every_output_is_in() -> None:
    driver = responses_driver(client_tools=("show_map",))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"}),
                                      call_item("c2", "show_map")])
    assert set(driver.started) == {"c1"}, "the client's call is the client's"
    driver.client({"type": "response.create", "event_id": "evt_early"})
    driver.client({"type": "response.item.create",
                   "item": {"type": "function_call_output", "call_id": "c2", "output": "shown"}})
    assert driver.sent_of("response.create") == [], "never a create before the batch is whole"
    driver.client({"type": "response.create", "event_id": "evt_second"})
    assert driver.errors_to_client()[-1]["error"]["code"] == "response_create_pending"
    driver.finish("c1", "sunny")
    sent = driver.sent()[1:]
    assert types_of(sent) == ["response.item.create", "response.item.create", "response.create"]
    assert [e["item"]["call_id"] for e in sent[:2]] == ["c2", "c1"]
    assert sent[2]["event_id"] == "evt_early", "the client's create, as it came"
    shown = "".join(driver.client_frames)
    assert "c2" in shown and "show_map" in shown, "the client sees its own call"
    assert "get_weather" not in shown and '"c1"' not in shown, "nothing relay-owned reaches the client"


def test_a_mixed_batch_whose_client_asks_last_gets_its_create_at_once() -> None:
    driver = responses_driver(client_tools=("show_map",))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"}),
                                      call_item("c2", "show_map")])
    driver.finish("c1", "sunny")
    driver.client({"type": "response.item.create",
                   "item": {"type": "function_call_output", "call_id": "c2", "output": "shown"}})
    assert driver.sent_of("response.create") == [], "the client asks for a batch with its calls"
    driver.client({"type": "response.create", "event_id": "evt_create"})
    assert types_of(driver.sent()[1:]) == ["response.item.create", "response.item.create", "response.create"]
    assert driver.sent()[-1]["event_id"] == "evt_create"


def test_expose_tool_events_shows_the_relay_calls() -> None:
    driver = responses_driver(config=EngineConfig(strict=True, hide_tool_events=False))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    assert "get_weather" in "".join(driver.client_frames)


def test_a_call_of_a_tool_nobody_declared_is_answered_with_an_error_and_the_batch_goes_on() -> None:
    driver = responses_driver()
    driver.batch("item_1", "resp_1", [call_item("c9", "launch_rockets")])
    (output,) = driver.outputs()
    assert output["item"]["call_id"] == "c9" and "unknown tool" in output["item"]["output"]
    assert len(driver.sent_of("response.create")) == 1


def test_a_clients_output_for_a_relay_call_is_refused() -> None:
    driver = responses_driver()
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    driver.client({"type": "response.item.create", "event_id": "evt_forged",
                   "item": {"type": "function_call_output", "call_id": "c1", "output": "forged"}})
    assert driver.outputs() == []
    (error,) = driver.errors_to_client()
    assert error["error"]["code"] == "relay_owned_call"
    driver.finish("c1", "sunny")
    assert [e["item"]["output"] for e in driver.outputs()] == ["sunny"]


def test_a_call_delivered_twice_runs_once_and_is_answered_once() -> None:
    driver = responses_driver()
    item = call_item("c1", "get_weather", {"city": "Paris"})
    driver.upstream(envelope("item_1", {"type": "response.output_item.done", "output_index": 0, "item": item}))
    driver.upstream(envelope("item_1", {"type": "response.output_item.done", "output_index": 0, "item": item}, 1))
    driver.complete("item_1", "resp_1")
    driver.finish("c1", "sunny")
    assert len(driver.outputs()) == 1 and len(driver.sent_of("response.create")) == 1
    assert any("delivered again" in message for message in driver.anomalies())


def test_a_backend_response_that_failed_is_not_continued() -> None:
    driver = responses_driver()
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})], complete=False)
    driver.upstream(envelope("item_1", {"type": "response.failed", "response": {"id": "resp_1", "status": "failed"}}))
    driver.finish("c1", "sunny")
    assert len(driver.outputs()) == 1, "the call still gets its one honest output"
    assert driver.sent_of("response.create") == []


def test_the_session_closed_mid_call_abandons_it_and_sends_nothing_after() -> None:
    driver = responses_driver()
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    driver.close()
    sent = len(driver.upstream_frames)
    driver.finish("c1", "sunny")
    assert len(driver.upstream_frames) == sent
    (entry,) = driver.engine.calls
    assert entry.state.value == "abandoned"


def test_the_sideband_declares_the_relay_tools_with_a_session_update() -> None:
    driver = LiveDriver([get_weather], config=EngineConfig(strict=True, mode="sidecar", hide_tool_events=False))
    driver.upstream(started({"type": "responses", "responses": {"model": "gpt-5.4",
                                                                "tools": [function_tool("show_map")]}}))
    (update,) = driver.sent()
    assert update["type"] == "session.update"
    assert [t["name"] for t in update["session"]["delegation"]["responses"]["tools"]] == ["show_map", "get_weather"]
    assert driver.sent_of("session.start") == []


def updated(tools: list[str]) -> dict[str, object]:
    """The `session.updated` every connection is sent, with these Responses tools."""
    event = started({"type": "responses", "responses": {"model": "gpt-5.4", "tools": [function_tool(n) for n in tools]}})
    return {**event, "type": "session.updated"}


def test_the_sideband_declares_its_tools_again_when_the_other_party_replaces_them() -> None:
    driver = LiveDriver([get_weather], config=EngineConfig(strict=True, mode="sidecar"))
    driver.upstream(started({"type": "responses", "responses": {"model": "gpt-5.4", "tools": []}}))
    driver.upstream(updated([]))   # an update of the other party's that the server applied first
    assert len(driver.sent_of("session.update")) == 1, "its own declaration is on its way: not sent twice"
    driver.upstream(updated(["get_weather"]))   # the relay's applied
    driver.upstream(updated(["show_map"]))      # the caller's app sets its Responses tools
    updates = driver.sent_of("session.update")
    assert [[t["name"] for t in u["session"]["delegation"]["responses"]["tools"]] for u in updates] == [
        ["get_weather"], ["show_map", "get_weather"]]
    driver.upstream(updated(["show_map", "get_weather"]))
    assert len(driver.sent_of("session.update")) == 2 and driver.anomalies() == []


def test_the_other_partys_tools_set_while_the_sidebands_declaration_was_on_its_way_are_restored() -> None:
    driver = LiveDriver([get_weather], config=EngineConfig(strict=True, mode="sidecar"))
    driver.upstream(started({"type": "responses", "responses": {"model": "gpt-5.4", "tools": []}}))
    driver.upstream(updated(["show_map"]))       # the caller's app set its tools first
    driver.upstream(updated(["get_weather"]))    # then the relay's declaration, built on none, replaced them
    updates = driver.sent_of("session.update")
    assert [[t["name"] for t in u["session"]["delegation"]["responses"]["tools"]] for u in updates] == [
        ["get_weather"], ["show_map", "get_weather"]]
    driver.upstream(updated(["show_map", "get_weather"]))
    assert len(driver.sent_of("session.update")) == 2


# ---- client delegation ------------------------------------------------------------------------
def client_driver(*tools: object, config: EngineConfig | None = None) -> LiveDriver:
    driver = LiveDriver(tools, config=config)
    driver.client(client_session())
    driver.upstream(started({"type": "client"}))
    driver.upstream(transcript("input", "What's the weather", 600), transcript("input", " in Paris?", 800))
    return driver


def test_a_delegation_is_answered_once_result_silent_then_message_spoken() -> None:
    driver = client_driver(assistant)
    driver.upstream(delegation_created("item_d1", offset_ms=1000))
    (start,) = driver.started.values()
    given = start.arguments["delegation"]
    assert given.id == "item_d1" and given.offset_ms == 1000
    assert given.last_user_text() == "What's the weather in Paris?"
    assert "session.delegation.created" not in types_of(driver.to_client()), "the relay's delegation is hidden"
    driver.finish("item_d1", ToolResult(result="sunny, 21 degrees", message="It is sunny in Paris."))
    assert [(e["type"], e["delegation_id"], e["content"]) for e in driver.appends()] == [
        ("session.thinking.append", "item_d1", "sunny, 21 degrees"),
        ("session.commentary.append", "item_d1", "It is sunny in Paris.")]
    driver.finish("item_d1", ToolResult(result="again"))
    assert len(driver.appends()) == 2, "a late second report is not a second answer"


def test_long_answers_are_split_at_the_limit() -> None:
    driver = client_driver(assistant)
    driver.upstream(delegation_created("item_d1"))
    long_message = "Paris " * 300 + "日本語" * 200
    driver.finish("item_d1", ToolResult(result="x", message=long_message))
    spoken = [e for e in driver.appends() if e["type"] == "session.commentary.append"]
    assert len(spoken) > 2
    assert all(len(e["content"].encode("utf-8")) <= APPEND_BYTE_LIMIT for e in spoken)
    assert "".join(e["content"] for e in spoken).replace(" ", "") == long_message.replace(" ", "")


def test_a_timeout_is_spoken_honestly_and_the_late_result_dropped() -> None:
    driver = client_driver(assistant)
    driver.upstream(delegation_created("item_d1"))
    driver.advance(10.5)
    (answer,) = driver.appends()
    assert answer["type"] == "session.commentary.append" and answer["content"] == "Sorry, I could not look that up."
    assert [c.call_id for c in driver.cancelled] == ["item_d1"]
    driver.finish("item_d1", ToolResult(result="late", message="late"))
    assert len(driver.appends()) == 1


def test_a_failing_delegate_is_a_spoken_failure() -> None:
    @delegate
    def plain(delegation: Delegation) -> str:
        return "x"

    driver = client_driver(plain)
    driver.upstream(delegation_created("item_d1"))
    driver.fail("item_d1", RuntimeError("the database is down"))
    (answer,) = driver.appends()
    assert answer["type"] == "session.commentary.append"
    assert "the database is down" in answer["content"] and "failed" in answer["content"]


def barge_in(policy: Interruption) -> LiveDriver:
    @delegate(interruption=policy)
    def slow(delegation: Delegation) -> ToolResult:
        return ToolResult(result="r")

    driver = client_driver(slow)
    driver.upstream(delegation_created("item_d1", offset_ms=1000))
    driver.upstream(transcript("input", " please", 1100))   # the tail of the same sentence
    assert driver.cancelled == []
    driver.upstream(transcript("input", "Actually, never mind.", 3000))
    return driver


def test_barge_in_cancel_drops_the_late_result_and_answers_silently() -> None:
    driver = barge_in(Interruption.CANCEL)
    assert [c.call_id for c in driver.cancelled] == ["item_d1"]
    (answer,) = driver.appends()
    assert answer["type"] == "session.thinking.append"
    driver.finish("item_d1", ToolResult(result="late", message="late"))
    assert len(driver.appends()) == 1


def test_barge_in_finish_silently_keeps_the_result_unspoken() -> None:
    driver = barge_in(Interruption.FINISH_SILENTLY)
    driver.finish("item_d1", ToolResult(result="late", message="It is done."))
    assert types_of(driver.appends()) == ["session.thinking.append", "session.thinking.append"]


def test_barge_in_by_default_still_speaks_the_late_result() -> None:
    driver = barge_in(Interruption.FINISH_AND_SPEAK)
    driver.finish("item_d1", ToolResult(result="late", message="It is done."))
    assert types_of(driver.appends()) == ["session.thinking.append", "session.commentary.append"]


def test_without_a_delegate_the_delegations_are_the_clients() -> None:
    driver = client_driver(get_weather)
    driver.upstream(delegation_created("item_d1"))
    assert driver.started == {} and "session.delegation.created" in types_of(driver.to_client())
    driver.client({"type": "session.commentary.append", "delegation_id": "item_d1", "content": "done"})
    assert types_of(driver.sent()) == ["session.start", "session.commentary.append"]
    assert driver.anomalies() == []


# ---- bad input ------------------------------------------------------------------------------------
def test_bad_input_from_either_side_is_told_and_never_crashes() -> None:
    driver = client_driver(assistant, config=EngineConfig(strict=False))
    driver.check_shapes = False   # bad input is passed on as it came
    driver.upstream('{"type": "session.brand_new", "event_id": "e"}', "not json", "[1, 2]")
    assert types_of(driver.to_client())[-1] == "session.brand_new", "an unknown event type is passed on"
    driver.client("{broken", '{"type": "session.telepathy"}')
    assert [e["error"]["code"] for e in driver.errors_to_client()] == ["invalid_event"]
    assert driver.sent()[-1]["type"] == "session.telepathy", "the server answers an unknown command itself"
    driver.client({"type": "session.thinking.append", "delegation_id": "item_never", "content": "x"})
    assert any("item_never" in message for message in driver.anomalies())
    # a malformed envelope: the delegation object lacks its id
    driver.upstream({"type": "session.delegation.created", "event_id": "e", "offset_ms": 1,
                     "delegation": {"type": "delegation", "target": "client"}})
    assert driver.started == {}
    driver.upstream(delegation_created("item_d1"), delegation_created("item_d1"))
    driver.finish("item_d1", ToolResult(result="r", message="m"))
    assert len([a for a in driver.appends() if a["delegation_id"] == "item_d1"]) == 2, \
        "a delegation created twice is answered once"
    driver.client({"type": "session.commentary.append", "delegation_id": "item_d1", "content": "mine"})
    assert driver.errors_to_client()[-1]["error"]["code"] == "relay_owned_delegation"
    assert [a for a in driver.engine.anomalies if a.internal] == []


def test_a_client_redefining_a_relay_tool_is_refused() -> None:
    driver = LiveDriver([get_weather])
    driver.client(responses_session([function_tool("get_weather")]))
    assert driver.sent() == [] and driver.closes
    assert driver.errors_to_client()[0]["error"]["code"] == "relay_tool_redefined"


def test_appends_name_their_delegation_and_decode_back() -> None:
    driver = client_driver(assistant)
    driver.upstream(delegation_created("item_d1"))
    driver.finish("item_d1", ToolResult(result={"temp": 21}, message="Mild."))
    assert json.loads(driver.appends()[0]["content"]) == {"temp": 21}


def test_a_slow_delegate_says_its_filler_once_and_a_quick_one_never() -> None:
    @delegate(on_delay=(500, "One moment, I am checking."))
    def slow(delegation: Delegation) -> ToolResult:
        return ToolResult(result="r")

    driver = client_driver(slow)
    driver.upstream(delegation_created("item_d1"), delegation_created("item_d2"))
    driver.finish("item_d2", ToolResult(result="quick", message="Done."))
    driver.advance(0.6)
    driver.advance(5)
    fillers = [e for e in driver.appends() if e["content"] == "One moment, I am checking."]
    assert [(e["type"], e["delegation_id"]) for e in fillers] == [("session.commentary.append", "item_d1")]
    driver.finish("item_d1", ToolResult(result="slow", message="Here it is."))
    assert [e["content"] for e in driver.appends() if e["delegation_id"] == "item_d1"] == [
        "One moment, I am checking.", "slow", "Here it is."]


def test_a_delegation_and_a_backend_call_are_written_ahead_like_any_relay_call() -> None:
    driver = client_driver(assistant)
    driver.upstream(delegation_created("item_d1"))
    driver.finish("item_d1", ToolResult(result="r", message="m"))
    phases = [record.record.phase.value for record in driver.records()]
    assert phases == ["ready", "started", "decided", "sent"]
    decided = next(i for i, a in enumerate(driver.actions)
                   if getattr(a, "record", None) is not None and a.record.phase.value == "decided")
    first_append = next(i for i, a in enumerate(driver.actions) if "session.thinking.append" in str(a))
    assert decided < first_append, "the decision is recorded ahead of the answer it guards"
    responses = responses_driver()
    responses.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    responses.finish("c1", "sunny")
    written = [(r.record.call_id, r.record.phase.value, r.record.delegation_id) for r in responses.records()]
    assert written == [("c1", phase, "item_1") for phase in
                       ("ready", "started", "decided", "sent", "follow_up", "followed_up")]
    followed = next(i for i, a in enumerate(responses.actions)
                    if getattr(a, "record", None) is not None and a.record.phase.value == "followed_up")
    create = next(i for i, a in enumerate(responses.actions) if '"response.create"' in str(a))
    assert followed < create, "the follow-up is recorded sent ahead of the create"


def test_a_clients_session_update_of_its_tools_keeps_the_relays() -> None:
    driver = responses_driver(client_tools=("show_map",))
    driver.client({"type": "session.update", "session": {"delegation": {
        "type": "responses", "responses": {"tools": [function_tool("show_route")]}}}})
    update = driver.sent_of("session.update")[-1]
    assert [t["name"] for t in update["session"]["delegation"]["responses"]["tools"]] == [
        "show_route", "get_weather", "get_time"]
    driver.client({"type": "session.update", "session": {"delegation": {
        "type": "responses", "responses": {"max_output_tokens": 200}}}})
    assert "tools" not in driver.sent_of("session.update")[-1]["session"]["delegation"]["responses"], \
        "a sparse update that leaves the tools alone goes up as it came"


def test_an_uncorrelated_backend_response_is_still_one_batch() -> None:
    driver = responses_driver()
    driver.batch(None, "resp_9", [call_item("c1", "get_weather", {"city": "Paris"})])   # type: ignore[arg-type]
    driver.finish("c1", "sunny")
    assert len(driver.outputs()) == 1 and len(driver.sent_of("response.create")) == 1
    assert any("uncorrelated" in message for message in driver.anomalies())


def test_answers_decided_while_the_sideband_is_away_go_up_on_its_return() -> None:
    driver = LiveDriver([get_weather, assistant], config=EngineConfig(strict=True, mode="sidecar"))
    driver.upstream(started({"type": "responses", "responses": {"model": "gpt-5.4", "tools": []}}))
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    driver._act(driver.engine.upstream_disconnected(driver.now))
    driver.finish("c1", "sunny")
    assert driver.outputs() == [] and driver.sent_of("response.create") == []
    driver._act(driver.engine.upstream_reconnected(driver.now))
    assert [e["item"]["output"] for e in driver.outputs()] == ["sunny"]
    assert len(driver.sent_of("response.create")) == 1
    (entry,) = driver.engine.calls
    assert entry.state.value == "answered"
