"""A dropped GPT-Live batch with the client's calls and the relay's (`relay serve --live-reseed`),
as engine rules on a fake clock. Its create is the client's to ask for (as on Realtime), so the
relay continues it in the new session once the client's part is done there: each of its calls
told (answered before the drop: a note in the new session's `input`; after it: a note when the
client's output comes, which the new session, never having had the call, would refuse), and the
create asked for (before the drop or after it). A client that does its part as it always does
gets its batch spoken; one that never answers its call leaves the batch unspoken, as it would
without the drop (docs/gpt-live.md)."""

from __future__ import annotations

from relay.engine.backend_calls import CREATE_WAIT
from tests.live.driver import LiveDriver, call_item, started
from tests.live.test_live_engine import responses_driver
from tests.live.test_live_reseed import RESPONSES, follow_ups, reseed, texts


def mixed_batch() -> LiveDriver:
    """One backend response asks get_weather (the relay's) and show_map (the client's)."""
    driver = responses_driver(client_tools=("show_map",))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"}),
                                      call_item("c2", "show_map", {"city": "Paris"})])
    return driver


def client_answers(driver: LiveDriver, call_id: str = "c2", output: str = "shown on the map") -> None:
    driver.client({"type": "response.item.create",
                   "item": {"type": "function_call_output", "call_id": call_id, "output": output}})


def client_asks(driver: LiveDriver, event_id: str = "evt_create") -> None:
    driver.client({"type": "response.create", "event_id": event_id})


def told_of(driver: LiveDriver, start: dict | None, *names: str) -> None:
    assert start is not None
    said = " ".join(text for _, text in texts(start["session"]))
    for name in names:
        assert name in said, f"the new session's input tells {name}"


def test_a_batch_whose_client_had_done_its_part_is_continued_in_the_new_session() -> None:
    """The client answered show_map and asked (its create held: get_weather still ran) when the
    connection dropped: the new session is told show_map's result in its `input`, get_weather's by
    its note once it finishes, and gets one `response.create`. Before, nothing continued it and
    the caller heard neither result (the explorer: a `reseed`, `spoke_after_tools`)."""
    driver = mixed_batch()
    client_answers(driver)
    client_asks(driver)
    assert driver.sent_of("response.create") == [], "held: get_weather still runs"
    start = reseed(driver)
    told_of(driver, start, "show_map", "shown on the map")
    driver.upstream(started(RESPONSES, session_id="live_2"))
    driver.finish("c1", "sunny in Paris")
    assert [e["type"] for e in driver.sent()[-2:]] == ["session.thinking.append", "response.create"]
    assert follow_ups(driver) == ["c1"]
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 1, "once"


def test_a_batch_continued_before_the_drop_whose_continuation_never_showed_is_continued_again() -> None:
    driver = mixed_batch()
    driver.finish("c1", "sunny in Paris")
    client_answers(driver)
    client_asks(driver)
    assert len(driver.sent_of("response.create")) == 1, "the client's create, once the batch was whole"
    start = reseed(driver)
    told_of(driver, start, "show_map", "shown on the map", "get_weather", "sunny in Paris")
    assert len(driver.sent_of("response.create")) == 1, "not before the new session is up"
    driver.upstream(started(RESPONSES, session_id="live_2"))
    assert driver.sent()[-1]["type"] == "response.create" and len(driver.sent_of("response.create")) == 2


def test_a_client_that_answers_and_asks_after_the_drop_gets_its_batch_continued() -> None:
    """show_map still ran on the client's side at the drop. Its output, for a call the new session
    never had, is told as a silent note instead of forwarded (the session would refuse it); the
    client's create is the batch's: the relay sends one, once the batch is whole."""
    driver = mixed_batch()
    driver.finish("c1", "sunny in Paris")
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_2"))
    before = len(driver.sent())
    client_answers(driver)
    after = driver.sent()[before:]
    assert [e["type"] for e in after] == ["session.thinking.append"]
    assert after[0]["delegation_id"] is None and "shown on the map" in after[0]["content"]
    assert driver.errors_to_client() == []
    client_asks(driver)
    assert [e["type"] for e in driver.sent()[before:]] == ["session.thinking.append", "response.create"]
    assert driver.sent()[-1]["event_id"] != "evt_create", "the relay's create, which it follows"
    assert follow_ups(driver) == ["c1"]
    creates = len(driver.sent_of("response.create"))
    client_asks(driver, "evt_again")
    assert len(driver.sent_of("response.create")) == creates, "held while the relay's create has not begun its response"
    driver.advance(CREATE_WAIT)   # (that response never shows here: the wait for it ends)
    assert [e["event_id"] for e in driver.sent_of("response.create")][-1] == "evt_again", \
        "a later create is the client's own again, as it came"


def test_a_client_that_never_answers_its_call_leaves_the_batch_unspoken() -> None:
    """What happens when the client does nothing: the relay has no result to tell for the client's
    call and does not answer it (it never answers a call it does not own), so no continuation
    goes up; get_weather's result is in the new session's `input`, silent. The same batch without
    the drop would wait for the client as well."""
    driver = mixed_batch()
    driver.finish("c1", "sunny in Paris")
    start = reseed(driver)
    told_of(driver, start, "get_weather", "sunny in Paris")
    driver.upstream(started(RESPONSES, session_id="live_2"))
    driver.advance(600)
    assert driver.sent_of("response.create") == [] and follow_ups(driver) == []


def test_a_batch_of_the_relays_calls_only_is_not_held_back_by_one_waiting_for_the_client() -> None:
    driver = mixed_batch()
    driver.finish("c1", "sunny in Paris")
    driver.upstream({"type": "session.delegation.created", "event_id": "event_d_item_3", "offset_ms": 2000,
                     "delegation": {"id": "item_3", "type": "delegation", "target": "responses",
                                    "response_id": "resp_3"}})
    driver.batch("item_3", "resp_3", [call_item("c3", "get_time", {"city": "Paris"})], complete=False)
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_2"))
    driver.finish("c3", "noon")
    assert follow_ups(driver) == ["c3"], "get_time's batch is continued; get_weather's waits for the client"
    client_answers(driver)
    client_asks(driver)
    assert follow_ups(driver) == ["c3", "c1"]


def test_a_client_that_answered_before_the_drop_and_asks_after_it_gets_one_continuation() -> None:
    driver = mixed_batch()
    driver.finish("c1", "sunny in Paris")
    client_answers(driver)
    start = reseed(driver)
    told_of(driver, start, "show_map", "shown on the map", "get_weather", "sunny in Paris")
    driver.upstream(started(RESPONSES, session_id="live_2"))
    driver.advance(60)
    assert driver.sent_of("response.create") == [], "the client has not asked"
    client_asks(driver)
    assert len(driver.sent_of("response.create")) == 1 and driver.sent()[-1]["event_id"] != "evt_create"
    assert follow_ups(driver) == ["c1"]
