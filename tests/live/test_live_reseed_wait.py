"""How long a carried batch's continuation waits for backend work of the new session
(`relay serve --live-reseed`), as engine rules on a fake clock. The relay's one `response.create`
for a batch a dropped session left uncontinued waits while backend work of the new session is
under way (a create then is a partial batch, or a second response at once). What ends the wait:
that work ending (a response's end; an `error` naming a continuation's create, which starts
none), or `CARRIED_WAIT` seconds of it: GPT-Live has no event that closes a delegation whose
response never begins, and a batch of the client's calls is the client's to continue, so neither
is owed an end. Past the wait the carried results are said instead (`session.commentary.append`
with `delegation_id: null`) and no create goes up: none into a batch the server would refuse as
partial, and the caller who asked hears the answer once. A client's own `response.create` after
typed input of its own is that input's, not a carried batch's (docs/gpt-live.md)."""

from __future__ import annotations

from relay.engine.delegation_records import CARRIED_WAIT
from tests.live.driver import MODEL, call_item, delegation_created, function_tool, started
from tests.live.test_live_reseed import RESPONSES, follow_ups, reseed
from tests.live.test_live_reseed_mixed import client_answers, client_asks, mixed_batch
from tests.live.test_live_reseed_which import Logged, begun, creates_while_open, running_at_a_drop
from tests.live.test_live_engine import get_time, get_weather

WITH_MAP = {"type": "responses", "responses": {"model": "gpt-5.4", "tools": [function_tool("show_map")]}}


def said(driver: Logged) -> list[str]:
    """What the relay asked the model to say of no delegation (commentary, `delegation_id: null`)."""
    return [e["content"] for e in driver.sent_of("session.commentary.append") if e["delegation_id"] is None]


def carried_waiting_for_a_delegation() -> Logged:
    """get_weather runs at the drop; in the new session the caller's turn is delegated to the
    backend (announced with its `response_id`), whose response has not begun when get_weather's
    result is told: the carried create waits for it."""
    driver = running_at_a_drop()
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.finish("c1", "sunny in Paris")
    assert driver.sent()[-1]["type"] == "session.thinking.append" and follow_ups(driver) == []
    return driver


def test_a_delegation_whose_response_never_begins_does_not_hold_the_carried_results_for_ever() -> None:
    """Nothing on GPT-Live's wire closes a delegation whose response never begins (the SDK's server
    events have `session.delegation.created` and no end). Past `CARRIED_WAIT` the carried result is
    said, once, and no create goes up (the response may still begin: a create then is a second
    response). Before, the relay waited until the next drop and the caller heard nothing."""
    driver = carried_waiting_for_a_delegation()
    driver.advance(CARRIED_WAIT - 1)
    assert said(driver) == [] and driver.sent_of("response.create") == []
    driver.advance(2)
    (speech,) = said(driver)
    assert "get_weather" in speech and "sunny in Paris" in speech
    assert driver.sent_of("response.create") == [] and follow_ups(driver) == []
    begun(driver, "item_2", "resp_2", complete=True)   # the late response, over: nothing more to continue
    driver.advance(600)
    assert len(said(driver)) == 1 and driver.sent_of("response.create") == []


def test_a_delegation_whose_response_begins_and_ends_in_time_is_followed_by_the_carried_create() -> None:
    driver = carried_waiting_for_a_delegation()
    driver.advance(CARRIED_WAIT / 2)
    begun(driver, "item_2", "resp_2", complete=True)
    assert follow_ups(driver) == ["c1"] and driver.sent()[-1]["type"] == "response.create"
    driver.advance(600)
    assert said(driver) == [] and len(driver.sent_of("response.create")) == 1
    assert creates_while_open(driver) == []


def continuation_asked_not_begun() -> Logged:
    """In the new session the caller's turn makes a get_time call, which the relay answers and
    continues (its create up, its response not begun) before get_weather's result is told."""
    driver = running_at_a_drop()
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("c2", "get_time", {"city": "Paris"})])
    driver.finish("c2", "noon")
    assert follow_ups(driver) == ["c2"]
    driver.finish("c1", "sunny in Paris")
    assert follow_ups(driver) == ["c2"], "not while get_time's continuation is to begin"
    return driver


def test_a_continuation_that_never_begins_does_not_hold_the_carried_results_for_ever() -> None:
    driver = continuation_asked_not_begun()
    driver.advance(CARRIED_WAIT + 1)
    assert [s for s in said(driver) if "sunny in Paris" in s] and follow_ups(driver) == ["c2"]
    assert len(driver.sent_of("response.create")) == 1


def test_a_refused_continuation_ends_the_wait_at_once() -> None:
    """The server refuses get_time's create (an `error` naming it): it starts no response, so
    nothing is under way and the carried create goes up now."""
    driver = continuation_asked_not_begun()
    refused = driver.sent_of("response.create")[-1]["event_id"]
    driver.upstream({"type": "error", "event_id": "event_e", "error": {
        "type": "invalid_request_error", "code": "invalid_value", "message": "refused", "client_event_id": refused}})
    assert follow_ups(driver) == ["c2", "c1"] and driver.sent()[-1]["type"] == "response.create"
    driver.advance(600)
    assert said(driver) == []


def carried_beside_a_client_batch() -> Logged:
    """get_weather runs at the drop; in the new session a backend response asks the client's
    show_map, and completes: a batch of the client's calls only, the client's to continue."""
    driver = Logged([get_weather, get_time])
    driver.client({"type": "session.start", "session": {"model": MODEL, "delegation": WITH_MAP}})
    driver.upstream(started(WITH_MAP))
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    reseed(driver)
    driver.upstream(started(WITH_MAP, session_id="live_2"))
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("m1", "show_map", {"city": "Paris"})])
    driver.finish("c1", "sunny in Paris")
    assert follow_ups(driver) == [] and driver.sent_of("response.create") == []
    return driver


def test_a_client_batch_the_client_never_continues_does_not_hold_the_carried_results_for_ever() -> None:
    """The client never answers show_map: a create would be a partial batch, which the server
    refuses, so none goes up, ever; past the wait get_weather's result is said."""
    driver = carried_beside_a_client_batch()
    driver.advance(CARRIED_WAIT + 1)
    assert [s for s in said(driver) if "sunny in Paris" in s]
    driver.advance(600)
    assert driver.sent_of("response.create") == [] and len(said(driver)) == 1


def test_a_client_batch_continued_in_time_is_followed_by_the_carried_create() -> None:
    driver = carried_beside_a_client_batch()
    driver.client({"type": "response.item.create",
                   "item": {"type": "function_call_output", "call_id": "m1", "output": "shown"}},
                  {"type": "response.create", "event_id": "client_create"})
    assert driver.sent()[-1]["event_id"] == "client_create" and follow_ups(driver) == []
    begun(driver, "item_2", "resp_2b", complete=True)
    assert follow_ups(driver) == ["c1"] and driver.sent()[-1]["type"] == "response.create"
    driver.advance(600)
    assert said(driver) == [] and creates_while_open(driver) == []


def test_results_said_in_place_of_a_continuation_are_said_again_after_a_drop_before_they_were_placed() -> None:
    """The connection drops again before the said result's append reached the timeline (its
    acknowledgement not in): the next new session continues the batch, once."""
    driver = carried_waiting_for_a_delegation()
    driver.advance(CARRIED_WAIT + 1)
    assert len(said(driver)) == 1
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    assert follow_ups(driver) == ["c1"] and driver.sent()[-1]["type"] == "response.create"


def test_results_said_and_placed_are_not_said_again() -> None:
    driver = carried_waiting_for_a_delegation()
    driver.advance(CARRIED_WAIT + 1)
    speech = driver.sent_of("session.commentary.append")[-1]["event_id"]
    driver.upstream({"type": "session.commentary.appended", "event_id": "event_a", "client_event_id": speech,
                     "start_ms": 3000, "end_ms": 3200})
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    driver.advance(600)
    assert follow_ups(driver) == [] and len(said(driver)) == 1


def typed(driver: Logged, text: str = "Also, book a table.") -> None:
    driver.client({"type": "response.item.create", "event_id": "client_item",
                   "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}},
                  {"type": "response.create", "event_id": "client_typed"})


def test_a_clients_create_for_typed_input_is_not_taken_for_the_carried_batchs() -> None:
    """A carried batch of both waits for the client's part (show_map still runs on its side at the
    drop). The client types something and asks a response for it: that create follows an input
    item of its own and no output since its last create, so it is the typed input's, forwarded as
    it came. The batch waits for the client's answer and ask, and its continuation for the typed
    input's response to end. Before, the typed input's create was swallowed as the batch's, and
    the client's later create for the batch went up as a second one."""
    driver = mixed_batch()
    driver.finish("c1", "sunny in Paris")
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_2"))
    typed(driver)
    assert driver.sent()[-1]["event_id"] == "client_typed", "forwarded as it came"
    driver.upstream(delegation_created("item_t", target="responses"))
    begun(driver, "item_t", "resp_t", echo="client_typed", complete=True)
    client_answers(driver)
    assert follow_ups(driver) == [], "the batch's create is still the client's to ask for"
    client_asks(driver)
    assert follow_ups(driver) == ["c1"] and driver.sent()[-1]["event_id"] != "evt_create"
    assert [e["event_id"] for e in driver.sent_of("response.create")][0] == "client_typed"
    assert len(driver.sent_of("response.create")) == 2


def test_a_clients_create_after_its_carried_output_is_the_batchs_even_with_typed_input() -> None:
    """The client answers its carried call, types, and asks once: the create follows an output
    of the batch, so it asks for the batch (whose continuation sees the typed input too)."""
    driver = mixed_batch()
    driver.finish("c1", "sunny in Paris")
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_2"))
    client_answers(driver)
    typed(driver)
    assert [e["event_id"] for e in driver.sent_of("response.create")] != ["client_typed"]
    assert follow_ups(driver) == ["c1"] and len(driver.sent_of("response.create")) == 1


def test_a_refused_carried_create_has_the_results_said() -> None:
    """The server refuses the carried continuation's own create (an `error` naming it): it starts
    no response, so the result is said instead, once."""
    driver = running_at_a_drop()
    driver.finish("c1", "sunny in Paris")
    refused = driver.sent_of("response.create")[-1]["event_id"]
    assert said(driver) == []
    driver.upstream({"type": "error", "event_id": "event_e", "error": {
        "type": "invalid_request_error", "code": "invalid_value", "message": "refused", "client_event_id": refused}})
    assert [s for s in said(driver) if "sunny in Paris" in s]
    driver.advance(600)
    assert len(said(driver)) == 1 and len(driver.sent_of("response.create")) == 1
