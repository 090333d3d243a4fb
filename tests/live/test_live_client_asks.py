"""The client's `response.create` while the relay is at work in another delegation (Responses
delegation), as engine rules on a fake clock (relay/engine/client_asks.py). A create names no
delegation: it continues the session's calls, all of them. Sent while a relay call of another
delegation is unanswered, the server refuses it as a partial batch, with an `error` that names the
relay's call to the client; sent while a create of the relay's has not begun its response, it
meets the relay call that response brings. So it is held until the relay's work is over, then goes
up as it came and continues every batch whole by then, the relay's among them. Found by `relay
explore`: the caller barges in with a request for its own tool while the relay's call runs
(`client_never_sees_relay_call`)."""

from __future__ import annotations

from relay.engine import EngineConfig
from relay.engine.backend_calls import CREATE_WAIT
from relay.engine.client_asks import CLIENT_ASK_WAIT
from tests.live.driver import (LiveDriver, backend_response, call_item, delegation_created, envelope, function_tool,
                               started)
from tests.live.test_live_engine import get_weather, responses_driver
from tests.live.test_live_reseed import follow_ups
from tests.live.test_live_reseed_mixed import client_answers, client_asks
from tests.live.test_live_reseed_which import begun


def relay_then_client():
    """Delegation 1 makes get_weather (c1, the relay's), still running; delegation 2 makes
    show_map (c2, the client's), and the client answers it."""
    driver = responses_driver(client_tools=("show_map",))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("c2", "show_map", {"city": "Paris"})])
    client_answers(driver)
    return driver


def test_a_clients_create_waits_for_the_relays_call_of_another_delegation_then_continues_both() -> None:
    driver = relay_then_client()
    client_asks(driver)
    assert driver.sent_of("response.create") == [] and driver.errors_to_client() == []
    assert [n.fields["missing"] for n in driver.notices if n.kind == "client_create_held"] == [["c1"]]
    driver.finish("c1", "sunny")
    assert [e["item"]["call_id"] for e in driver.sent_of("response.item.create")] == ["c2", "c1"]
    assert [e["event_id"] for e in driver.sent_of("response.create")] == ["evt_create"], \
        "one create: the client's, as it came; none of the relay's"
    assert driver.sent()[-1]["type"] == "response.create" and follow_ups(driver) == ["c1"]
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 1


def test_a_second_create_while_one_waits_is_refused_not_sent() -> None:
    driver = relay_then_client()
    client_asks(driver)
    client_asks(driver, "evt_twice")
    [error] = driver.errors_to_client()
    assert error["error"]["code"] == "response_create_pending" and "c1" not in error["error"]["message"]
    driver.finish("c1", "sunny")
    assert [e["event_id"] for e in driver.sent_of("response.create")] == ["evt_create"]


def test_a_clients_create_waits_while_the_relays_create_has_not_begun_its_response() -> None:
    """The relay's create is up and its response has not begun (it may bring a relay call): the
    client's create goes once it begins and ends, or once the wait for it (`CREATE_WAIT`) is over."""
    driver = responses_driver(client_tools=("show_map",))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    driver.finish("c1", "sunny")
    [relay_create] = driver.sent_of("response.create")
    client_asks(driver, "evt_typed")
    assert len(driver.sent_of("response.create")) == 1, "held: the relay's continuation has not begun"
    begun(driver, "item_1", "resp_3", echo=relay_create["event_id"])
    assert len(driver.sent_of("response.create")) == 1, "held: the continuation is under way"
    driver.complete("item_1", "resp_3")
    assert [e["event_id"] for e in driver.sent_of("response.create")] == [relay_create["event_id"], "evt_typed"]
    quiet = responses_driver(client_tools=("show_map",))
    quiet.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    quiet.finish("c1", "sunny")
    client_asks(quiet, "evt_typed")
    quiet.advance(CREATE_WAIT)   # the continuation never shows: the wait for it ends
    assert [e["event_id"] for e in quiet.sent_of("response.create")][-1] == "evt_typed"


def test_a_clients_create_with_no_relay_work_under_way_goes_at_once() -> None:
    driver = responses_driver(client_tools=("show_map",))
    driver.batch("item_1", "resp_1", [call_item("c2", "show_map", {"city": "Paris"})])
    client_answers(driver)
    client_asks(driver)
    assert [e["event_id"] for e in driver.sent_of("response.create")] == ["evt_create"]
    assert [n for n in driver.notices if n.kind == "client_create_held"] == []


def map_then_weather(driver: LiveDriver) -> LiveDriver:
    """Delegation 1 (announced already) makes show_map (c2, the client's), not answered yet;
    delegation 2 makes get_weather (c1, the relay's), which finishes."""
    driver.batch("item_1", "resp_1", [call_item("c2", "show_map", {"city": "Paris"})])
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("c1", "get_weather", {"city": "Paris"})])
    driver.finish("c1", "sunny")
    return driver


def client_then_relay():
    """`map_then_weather` in a proxy."""
    return map_then_weather(responses_driver(client_tools=("show_map",)))


def test_the_relays_batch_waits_for_the_clients_call_of_another_delegation_and_its_create() -> None:
    """A create before show_map's output is a partial batch (the server refuses it); once the
    client answered, its create is to come, and continues the relay's batch too: one create."""
    driver = client_then_relay()
    assert [e["item"]["call_id"] for e in driver.sent_of("response.item.create")] == ["c1"]
    assert driver.sent_of("response.create") == [], "show_map, the client's, is unanswered"
    client_answers(driver, "c2", "shown")
    assert driver.sent_of("response.create") == [], "the client asks next"
    client_asks(driver)
    assert [e["event_id"] for e in driver.sent_of("response.create")] == ["evt_create"]
    assert follow_ups(driver) == ["c1"]
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 1


def test_a_client_that_answers_and_never_asks_leaves_the_relays_batch_to_the_relay() -> None:
    driver = client_then_relay()
    client_answers(driver, "c2", "shown")
    driver.advance(CLIENT_ASK_WAIT - 0.5)
    assert driver.sent_of("response.create") == []
    driver.advance(0.5)
    [create] = driver.sent_of("response.create")
    assert create["event_id"] != "evt_create" and follow_ups(driver) == ["c1"]


def test_a_clients_create_waits_for_a_delegation_announced_whose_response_has_not_begun() -> None:
    """The model has just delegated again (its response not begun): what it brings may be the
    relay's call, which the client's create would then meet unanswered."""
    driver = responses_driver(client_tools=("show_map",))
    driver.batch("item_1", "resp_1", [call_item("c2", "show_map", {"city": "Paris"})])
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    client_answers(driver, "c2", "shown")
    client_asks(driver)
    assert driver.sent_of("response.create") == [], "delegation 2's response is to begin"
    driver.batch("item_2", "resp_2", [call_item("c1", "get_weather", {"city": "Paris"})])
    assert driver.sent_of("response.create") == [], "get_weather, the relay's, runs"
    driver.finish("c1", "sunny")
    assert [e["event_id"] for e in driver.sent_of("response.create")] == ["evt_create"]
    assert follow_ups(driver) == ["c1"] and driver.errors_to_client() == []


def sidecar_client_then_relay():
    """`map_then_weather` on a sideband, which never sees the client's output for show_map."""
    driver = LiveDriver([get_weather], config=EngineConfig(strict=True, mode="sidecar", hide_tool_events=False))
    driver.upstream(started({"type": "responses", "responses": {"model": "gpt-5.4", "tools": [function_tool("show_map")]}}))
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    return map_then_weather(driver)


def test_a_sidecar_waits_for_the_clients_continuation_which_continues_its_batch_too() -> None:
    """The sideband never sees the client's output for show_map: a create of the relay's now could
    be a partial batch. The client, once it answered, asks; the response that begins continues
    get_weather's output too, and no create of the relay's goes."""
    driver = sidecar_client_then_relay()
    assert [e["item"]["call_id"] for e in driver.outputs()] == ["c1"]
    assert driver.sent_of("response.create") == []
    driver.upstream(envelope("item_1", {"type": "response.created", "response": backend_response("resp_3", "in_progress")}))
    assert follow_ups(driver) == ["c1"]
    driver.advance(60)
    assert driver.sent_of("response.create") == []


def test_a_sidecar_whose_client_never_asks_continues_its_batch_after_the_ask_wait() -> None:
    """The client may have answered and asked before the relay's output was in (its create then
    refused as partial), or never: `CLIENT_ASK_WAIT` after the client's batch ended, the relay
    continues its own."""
    driver = sidecar_client_then_relay()
    driver.advance(CLIENT_ASK_WAIT - 0.5)
    assert driver.sent_of("response.create") == []
    driver.advance(0.5)
    assert len(driver.sent_of("response.create")) == 1 and follow_ups(driver) == ["c1"]


def relay_then_announced():
    """Delegation 1 makes get_weather (c1, the relay's), which finishes just after the model
    delegated again (delegation 2 announced, its response not begun)."""
    driver = responses_driver()
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.finish("c1", "sunny")
    return driver


def test_the_relays_create_waits_for_a_delegation_announced_then_continues_both() -> None:
    """What delegation 2's response brings may be the relay's call, which a create sent before it
    begins would leave out (a partial batch, which the server refuses): the create waits for it,
    then for its call's output, and continues both batches (found by `relay explore`: a barge-in
    asking for the relay's second tool as the first one's output went up)."""
    driver = relay_then_announced()
    assert [e["item"]["call_id"] for e in driver.sent_of("response.item.create")] == ["c1"]
    assert driver.sent_of("response.create") == [], "delegation 2's response is to begin"
    driver.batch("item_2", "resp_2", [call_item("c2", "get_weather", {"city": "Rome"})])
    assert driver.sent_of("response.create") == [], "get_weather c2 runs"
    driver.finish("c2", "rain")
    [create] = driver.sent_of("response.create")
    assert sorted(follow_ups(driver)) == ["c1", "c2"]
    assert {notice.fields["event_id"] for notice in driver.notices if notice.kind == "follow_up"} == {create["event_id"]}
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 1


def test_the_relays_create_goes_when_the_announced_response_never_begins() -> None:
    """Nothing on the wire ends a delegation whose response never begins: the relay's create waits
    for it `CREATE_WAIT` seconds from its announcement, then goes for its own batch."""
    driver = relay_then_announced()
    driver.advance(CREATE_WAIT - 0.5)
    assert driver.sent_of("response.create") == []
    driver.advance(0.5)
    assert len(driver.sent_of("response.create")) == 1 and follow_ups(driver) == ["c1"]


def test_the_relays_create_goes_at_once_when_the_announced_response_made_no_relay_call() -> None:
    driver = relay_then_announced()
    driver.batch("item_2", "resp_2", [])
    assert len(driver.sent_of("response.create")) == 1 and follow_ups(driver) == ["c1"]


def client_held_then_its_next_call():
    """The client answers show_map (c2, delegation 1) and asks while delegation 2's response is
    under way (held: it may bring a relay call); that response brings the client's show_map (c3)."""
    driver = responses_driver(client_tools=("show_map",))
    driver.batch("item_1", "resp_1", [call_item("c2", "show_map", {"city": "Paris"})])
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [], complete=False)
    client_answers(driver, "c2", "shown")
    client_asks(driver)
    assert driver.sent_of("response.create") == [], "delegation 2's response is under way"
    driver.upstream(envelope("item_2", {"type": "response.output_item.done", "output_index": 0,
                                        "item": call_item("c3", "show_map", {"city": "Rome"})}))
    driver.complete("item_2", "resp_2")
    return driver


def test_a_held_create_waits_for_the_clients_call_its_wait_let_in_then_goes_once_for_both() -> None:
    """Released when delegation 2's response ended, the held create would be a partial batch (c3
    unanswered): it waits for c3's output and continues both batches; the client's own create for
    c3, which follows, is not sent (found by `relay explore`: two barge-ins asking for the client's
    tool, the first answered late)."""
    driver = client_held_then_its_next_call()
    assert driver.sent_of("response.create") == [], "c3, the client's, is unanswered"
    client_answers(driver, "c3", "shown")
    assert [e["event_id"] for e in driver.sent_of("response.create")] == ["evt_create"]
    client_asks(driver, "evt_second")
    assert [e["event_id"] for e in driver.sent_of("response.create")] == ["evt_create"]
    assert [n.fields["call_ids"] for n in driver.notices if n.kind == "client_create_merged"] == ["c3"]
    assert driver.errors_to_client() == []
    client_asks(driver, "evt_later")   # no output since: new input of its own, not merged
    assert [n.fields["call_ids"] for n in driver.notices if n.kind == "client_create_merged"] == ["c3"]


def test_a_held_create_waits_for_the_clients_call_no_longer_than_the_ask_wait() -> None:
    driver = client_held_then_its_next_call()
    driver.advance(CLIENT_ASK_WAIT - 0.5)
    assert driver.sent_of("response.create") == []
    driver.advance(0.5)
    assert [e["event_id"] for e in driver.sent_of("response.create")] == ["evt_create"]


def refusal(event_id: str, missing: str) -> dict:
    return {"type": "error", "event_id": f"event_{event_id}", "client_event_id": event_id, "error": {
        "type": "invalid_request_error", "code": "invalid_request_error", "client_event_id": event_id,
        "message": f"A partial batch is rejected: response.create needs a function_call_output for every call "
                   f"of the response (missing: {missing})."}}


def test_a_clients_create_the_server_refused_for_the_relays_new_call_goes_again_once_it_is_answered() -> None:
    """The client's create crossed the model's new delegation on the wire: the relay forwarded it
    (no work of its own yet), the server, which had delegated again, refused it as a partial batch
    naming the relay's new call. That refusal is not the client's to see; the create goes again,
    once, when the relay's call is answered (found by `relay explore`: the caller answers its own
    call late and has barged in asking for the relay's; the relay's create then waited 15 s for the
    refused one's response)."""
    driver = responses_driver(client_tools=("show_map",))
    driver.batch("item_1", "resp_1", [call_item("c2", "show_map", {"city": "Paris"})])
    client_answers(driver, "c2", "shown")
    driver.client({"type": "response.create"})
    [create] = driver.sent_of("response.create")
    assert create["event_id"].startswith("client_"), "an id, so that the server's answer names it"
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("c1", "get_weather", {"city": "Rome"})])
    driver.upstream(refusal(create["event_id"], "c1"))
    assert driver.to_client()[-1]["type"] != "error" and driver.errors_to_client() == []
    assert [n.fields.get("refused") for n in driver.notices if n.kind == "client_create_held"] == [True]
    driver.finish("c1", "rain")
    assert len(driver.sent_of("response.create")) == 2 and "c1" in follow_ups(driver)
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 2


def test_a_clients_create_refused_with_no_relay_work_is_told_to_the_client() -> None:
    driver = responses_driver(client_tools=("show_map",))
    driver.batch("item_1", "resp_1", [call_item("c2", "show_map", {"city": "Paris"})])
    driver.client({"type": "response.create"})   # before its output: its own partial batch
    [create] = driver.sent_of("response.create")
    driver.upstream(refusal(create["event_id"], "c2"))
    [error] = driver.errors_to_client()
    assert "missing: c2" in error["error"]["message"] and "client_event_id" not in error, "its create had no id"
    client_asks(driver, "evt_own")
    driver.upstream(refusal("evt_own", "c2"))
    assert [e.get("client_event_id") for e in driver.errors_to_client()] == [None, "evt_own"], "forwarded as it came"
