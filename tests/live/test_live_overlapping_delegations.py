"""Two Responses delegations at once (the caller asks again while the first one's backend
response is still open), as engine rules on a fake clock. A `response.create` names no delegation:
it continues the session's calls, so the relay sends none while another delegation's backend
response is open (a second response at once) or while a relay call of another ended one is
unanswered (a partial batch, or the model speaking over an open call). Once every such call is
answered, one create continues them all. Found by `relay explore` on the refund example on
GPT-Live: a barge-in while call 1's handler ran made a second delegation, and its batch's create
went up while the first response was open and call 1 unanswered."""

from __future__ import annotations

from relay.engine.backend_calls import CREATE_WAIT
from tests.live.driver import MODEL, call_item, delegation_created, started
from tests.live.test_live_engine import get_time, get_weather
from tests.live.test_live_reseed import RESPONSES, follow_ups
from tests.live.test_live_reseed_mixed import client_answers, client_asks
from tests.live.test_live_reseed_which import Logged, begun, creates_while_open


def opened() -> Logged:
    """A Responses session, started."""
    driver = Logged([get_weather, get_time])
    driver.client({"type": "session.start", "session": {"model": MODEL, "delegation": RESPONSES}})
    driver.upstream(started(RESPONSES))
    return driver


def two_delegations() -> Logged:
    """Delegation 1's response is open with get_weather (c1) running; delegation 2's response
    makes get_time (c2) and completes."""
    driver = opened()
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})], complete=False)
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("c2", "get_time", {"city": "Paris"})])
    return driver


def outputs(driver: Logged) -> list[str]:
    return [e["item"]["call_id"] for e in driver.sent_of("response.item.create")]


def test_no_create_while_another_delegations_response_is_open_or_its_call_unanswered() -> None:
    driver = two_delegations()
    driver.finish("c2", "noon")
    assert outputs(driver) == ["c2"] and driver.sent_of("response.create") == []
    driver.complete("item_1", "resp_1")   # delegation 1's response ends, get_weather still running
    assert driver.sent_of("response.create") == []
    driver.finish("c1", "sunny")
    assert outputs(driver) == ["c2", "c1"] and driver.sent()[-1]["type"] == "response.create"
    assert len(driver.sent_of("response.create")) == 1 and creates_while_open(driver) == []
    create = driver.sent_of("response.create")[0]["event_id"]
    assert sorted(follow_ups(driver)) == ["c1", "c2"]
    assert {n.fields["event_id"] for n in driver.notices if n.kind == "follow_up"} == {create}


def test_after_one_continuation_of_both_a_new_batch_goes_on_its_own() -> None:
    """The continuation begins under either delegation: both batches are over, and a later batch
    is continued once it is whole, held by neither."""
    driver = two_delegations()
    driver.finish("c2", "noon")
    driver.complete("item_1", "resp_1")
    driver.finish("c1", "sunny")
    begun(driver, "item_2", "resp_3", complete=True)
    driver.upstream(delegation_created("item_3", target="responses", response_id="resp_4"))
    driver.batch("item_3", "resp_4", [call_item("c3", "get_weather", {"city": "Rome"})])
    driver.finish("c3", "rain")
    assert len(driver.sent_of("response.create")) == 2 and creates_while_open(driver) == []
    assert follow_ups(driver)[-1] == "c3"


def test_a_delegation_announced_whose_response_never_begins_holds_no_longer_than_the_wait() -> None:
    """Nothing on the wire ends a delegation whose response never begins: it holds another
    delegation's create (its response may bring a relay call) for `CREATE_WAIT` seconds from its
    announcement, no longer (relay/engine/client_asks.py)."""
    driver = opened()
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("c2", "get_time", {"city": "Paris"})])
    driver.finish("c2", "noon")
    assert driver.sent_of("response.create") == []
    driver.advance(CREATE_WAIT)
    assert len(driver.sent_of("response.create")) == 1


def test_a_batch_waits_for_a_create_on_its_way_and_no_longer_than_the_wait() -> None:
    """A create of the relay's is up and its response has not begun when another delegation's
    batch is whole: that batch's create waits (a second create on its way is a second response),
    and goes when the first create's response has begun and ended; a create whose response never
    begins holds it `CREATE_WAIT` seconds at most."""

    for begins in (True, False):
        driver = opened()
        driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
        driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
        driver.finish("c1", "sunny")
        assert follow_ups(driver) == ["c1"]   # its create is up; its response has not begun
        driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
        driver.batch("item_2", "resp_2", [call_item("c2", "get_time", {"city": "Paris"})])
        driver.finish("c2", "noon")
        assert follow_ups(driver) == ["c1"], "not while the first create's response is to begin"
        if begins:
            begun(driver, "item_1", "resp_1b", complete=True)
        else:
            driver.advance(CREATE_WAIT - 1)
            assert follow_ups(driver) == ["c1"]
            driver.advance(2)
        assert follow_ups(driver) == ["c1", "c2"] and creates_while_open(driver) == []


def test_a_batch_that_waited_goes_with_the_clients_create_in_a_batch_of_both() -> None:
    """Delegation 1's batch holds a relay call and one of the client's, which the client has not
    answered; delegation 2's batch (relay calls only) waits for delegation 1's relay call, and then
    for the client's: a create before its output is a partial batch (before, it went then, and
    the server refused it). The client's create, the batch of both's one continuation, continues
    delegation 2's batch too: one create."""
    from tests.live.driver import function_tool, responses_session

    driver = Logged([get_weather, get_time])
    driver.client(responses_session([function_tool("show_map")]))
    driver.upstream(started(RESPONSES))
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"}),
                                      call_item("k1", "show_map")])
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("c2", "get_time", {"city": "Paris"})])
    driver.finish("c2", "noon")
    assert follow_ups(driver) == [], "not while get_weather, of delegation 1, is unanswered"
    driver.finish("c1", "sunny")
    assert follow_ups(driver) == [], "nor while show_map, the client's, is unanswered"
    client_answers(driver, "k1", "shown")
    client_asks(driver)
    assert [e["event_id"] for e in driver.sent_of("response.create")] == ["evt_create"]
    assert sorted(follow_ups(driver)) == ["c1,k1", "c2"] and creates_while_open(driver) == []
