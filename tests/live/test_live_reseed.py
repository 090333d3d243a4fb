"""A new GPT-Live session for one whose upstream connection dropped (`relay serve --live-reseed`),
as engine rules on a fake clock: the new `session.start` carries the first one's configuration
(the relay's tools in it) and the conversation so far as its `input`, within GPT-Live's limits;
what the relay's tools already answered is told in it once, never sent again; a call still running
is answered once in the new session, silently; nothing is carried on after the server closed the
session, or where no `session.start` went up (a sideband)."""

from __future__ import annotations

import json

from relay.engine import EngineConfig
from relay.engine.reseed import MAX_INPUT_MESSAGES, MAX_INPUT_TOKENS, seeded_session
from relay.tools import Delegation, ToolResult, delegate
from relay.tools.delegation import Turn
from tests.live.driver import (
    CLIENT_EVENT,
    MODEL,
    LiveDriver,
    Message,
    backend_response,
    call_item,
    delegation_created,
    envelope,
    started,
    transcript,
)
from tests.live.test_live_engine import get_time, get_weather


@delegate(timeout=30)
def assistant(delegation: Delegation) -> ToolResult:
    """Answers client delegations."""
    return ToolResult(result="facts")


SEED = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "The caller is Ann."}]}
RESPONSES = {"type": "responses", "responses": {"model": "gpt-5.4", "tools": []}}


def dropped_mid_conversation() -> LiveDriver:
    """A Responses session: get_weather answered and its batch continued, then get_time running
    when the connection drops."""
    driver = LiveDriver([get_weather, get_time])
    driver.client({"type": "session.start", "session": {"model": MODEL, "instructions": "Be brief.",
                                                         "input": [SEED], "delegation": RESPONSES}})
    driver.upstream(started(RESPONSES))
    driver.upstream(transcript("input", "Weather in Paris?", 200))
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    driver.finish("c1", "sunny in Paris")
    continuation(driver, "item_1", "resp_1b")
    driver.upstream(transcript("output", "It is sunny in Paris.", 1400))
    driver.upstream(transcript("input", "And the time?", 2600))
    driver.upstream(delegation_created("item_2", target="responses", response_id="resp_2"))
    driver.batch("item_2", "resp_2", [call_item("c2", "get_time", {"city": "Paris"})])
    assert set(driver.started) == {"c1", "c2"}
    return driver


def continuation(driver: LiveDriver, delegation_id: str, response_id: str) -> None:
    """The backend's continuation of a batch after the relay's create: it shows the batch's
    outputs were taken (their records say delivered)."""
    driver.upstream(envelope(delegation_id, {"type": "response.created",
                                             "response": backend_response(response_id, "in_progress")}))
    driver.complete(delegation_id, response_id)


def follow_ups(driver: LiveDriver) -> list[str]:
    """The calls each of the relay's `follow_up` notices names."""
    return [notice.fields["call_ids"] for notice in driver.notices if notice.kind == "follow_up"]


def reseed(driver: LiveDriver) -> Message | None:
    driver._act(driver.engine.upstream_disconnected(driver.now))
    frame, actions = driver.engine.new_session(driver.now)   # type: ignore[attr-defined]
    driver._act(actions)
    if frame is None:
        return None
    CLIENT_EVENT.validate_json(frame)
    driver._act(driver.engine.upstream_reconnected(driver.now))
    return json.loads(frame)


def texts(session: Message) -> list[tuple[str, str]]:
    return [(item["role"], item["content"][0]["text"]) for item in session["input"]]


def test_the_new_session_carries_the_config_the_history_and_what_the_tools_did() -> None:
    driver = dropped_mid_conversation()
    sent_before = len(driver.sent())
    start = reseed(driver)
    assert start is not None and start["type"] == "session.start"
    session = start["session"]
    first = driver.sent()[0]["session"]
    assert {k: v for k, v in session.items() if k != "input"} == {k: v for k, v in first.items() if k != "input"}
    assert [t["name"] for t in session["delegation"]["responses"]["tools"]] == ["get_weather", "get_time"]
    said = texts(session)
    assert said[0] == ("developer", "The caller is Ann."), "the first session's own input comes first"
    assert said[1][0] == "developer" and "get_weather" in said[1][1] and "sunny in Paris" in said[1][1]
    assert not any("get_time" in text for _, text in said), "a call still running is not told as done"
    assert said[2:] == [("user", "Weather in Paris?"), ("assistant", "It is sunny in Paris."),
                        ("user", "And the time?")]
    assert len(driver.sent()) == sent_before, "the engine sends nothing itself: the edge sends the start first"
    assert any("new session carries it on" in message for message in driver.anomalies())


def test_a_call_running_at_the_drop_is_answered_once_in_the_new_session_and_its_batch_continued() -> None:
    """Its result is told as a note, then the new session continues the batch the dropped one
    never did (one `response.create`): the caller who asked hears the answer."""
    driver = dropped_mid_conversation()
    reseed(driver)
    before = len(driver.sent())
    driver.upstream(started(RESPONSES, session_id="live_2"))
    driver.finish("c2", "noon")
    after = driver.sent()[before:]
    assert [e["type"] for e in after] == ["session.thinking.append", "response.create"]
    assert after[0]["delegation_id"] is None and "get_time" in after[0]["content"] and "noon" in after[0]["content"]
    assert driver.outputs() == [o for o in driver.outputs() if o["item"]["call_id"] == "c1"], \
        "no function_call_output for a call of the dropped session"
    assert len(driver.sent_of("response.create")) == 2, "c1's batch in the first session, c2's in the new one"
    assert follow_ups(driver) == ["c1", "c2"]
    driver.advance(60)
    assert driver.sent()[before:] == after, "answered and continued once"
    assert {entry.call_id: entry.state.value for entry in driver.engine.calls} == {"c1": "answered", "c2": "answered"}


def test_an_answer_whose_batch_the_drop_left_uncontinued_is_continued_in_the_new_session() -> None:
    """c2 answered just before the drop (its output went up, the batch's create never did): its
    result is in the new session's `input`, and the new session's first command continues it."""
    driver = dropped_mid_conversation()
    driver._act(driver.engine.upstream_disconnected(driver.now))   # the output waits for the connection, the create with it
    driver.finish("c2", "noon")
    creates = len(driver.sent_of("response.create"))
    start = reseed(driver)
    assert start is not None and any("get_time" in text and "noon" in text for _, text in texts(start["session"]))
    assert len(driver.sent_of("response.create")) == creates, "not before the new session is up"
    driver.upstream(started(RESPONSES, session_id="live_2"))
    assert len(driver.sent_of("response.create")) == creates + 1
    assert driver.sent()[-1]["type"] == "response.create"
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == creates + 1, "once"


def one_batch_answered() -> LiveDriver:
    driver = LiveDriver([get_weather, get_time])
    driver.client({"type": "session.start", "session": {"model": MODEL, "delegation": RESPONSES}})
    driver.upstream(started(RESPONSES))
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})])
    driver.finish("c1", "sunny in Paris")
    assert len(driver.sent_of("response.create")) == 1
    return driver


def test_a_batch_whose_continuation_began_before_the_drop_is_not_continued_again() -> None:
    driver = one_batch_answered()
    continuation(driver, "item_1", "resp_1b")
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_2"))
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 1


def test_a_continuation_the_dropped_session_never_showed_is_made_in_the_new_one() -> None:
    """The create went up, and no continuation came before the drop: it may have gone down with
    the connection, and the caller heard nothing. The new session continues the batch, once."""
    driver = one_batch_answered()
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_2"))
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 2 and follow_ups(driver) == ["c1", "c1"]


def carried_and_continued() -> LiveDriver:
    """c2 running at a drop, answered in the new session by its note, then that session's one
    `response.create` for its batch, whose continuation has not begun."""
    driver = dropped_mid_conversation()
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_2"))
    driver.finish("c2", "noon")
    assert [e["type"] for e in driver.sent()[-2:]] == ["session.thinking.append", "response.create"]
    assert follow_ups(driver) == ["c1", "c2"]
    return driver


def test_a_carried_continuation_a_second_drop_cut_short_is_made_in_the_next_session() -> None:
    """A second drop before the new session showed its continuation (the create may have gone
    down with it): the next session is told c2's result in its `input` and continues it, once;
    without that the caller who asked heard nothing (the explorer's `spoke_after_tools`, two
    `reseed`s: tests/test_explore_reseed.py)."""
    driver = carried_and_continued()
    start = reseed(driver)
    assert start is not None and any("get_time" in text and "noon" in text for _, text in texts(start["session"]))
    assert len(driver.sent_of("response.create")) == 2, "not before the next session is up"
    driver.upstream(started(RESPONSES, session_id="live_3"))
    assert driver.sent()[-1]["type"] == "response.create" and follow_ups(driver) == ["c1", "c2", "c2"]
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 3, "once"
    assert not driver.sent_of("session.thinking.append")[1:], "c2 is told once by its note, then as history"


def test_a_carried_continuation_that_began_is_not_made_again_after_a_second_drop() -> None:
    driver = carried_and_continued()
    driver.upstream(envelope("item_3", {"type": "response.created",
                                        "response": backend_response("resp_3", "in_progress")}))
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_3"))
    driver.advance(60)
    assert len(driver.sent_of("response.create")) == 2 and follow_ups(driver) == ["c1", "c2"]


def test_the_new_sessions_calls_are_answered_as_usual() -> None:
    driver = dropped_mid_conversation()
    reseed(driver)
    driver.upstream(started(RESPONSES, session_id="live_2"))
    driver.upstream(delegation_created("item_9", target="responses", response_id="resp_9"))
    driver.batch("item_9", "resp_9", [call_item("c9", "get_weather", {"city": "Rome"})])
    driver.finish("c9", "sunny in Rome")
    assert [o["item"]["call_id"] for o in driver.outputs()] == ["c1", "c9"]
    assert len(driver.sent_of("response.create")) == 2


def test_a_delegate_running_at_the_drop_answers_in_the_new_session_without_its_old_id() -> None:
    driver = LiveDriver([assistant])
    driver.client({"type": "session.start", "session": {"model": MODEL, "delegation": {"type": "client"}}})
    driver.upstream(started({"type": "client"}))
    driver.upstream(transcript("input", "Book a table", 200))
    driver.upstream(delegation_created("item_d", offset_ms=400))
    (call_id,) = driver.started
    start = reseed(driver)
    assert start is not None and texts(start["session"]) == [("user", "Book a table")]
    driver.finish(call_id, ToolResult(result="booked for two"))
    (told,) = driver.appends()
    assert told["type"] == "session.thinking.append" and told["delegation_id"] is None
    assert "booked for two" in told["content"]


def test_nothing_is_carried_on_after_the_server_closed_the_session_or_on_a_sideband() -> None:
    driver = dropped_mid_conversation()
    driver.upstream({"type": "session.closed", "event_id": "event_c", "reason": "expired",
                     "session": started(RESPONSES)["session"], "usage": {"seconds": 30}})
    assert reseed(driver) is None
    sideband = LiveDriver([get_weather], config=EngineConfig(strict=True, mode="sidecar"))
    sideband.upstream(started(RESPONSES))
    assert reseed(sideband) is None


def test_the_seeded_history_keeps_within_the_limits_the_latest_first() -> None:
    turns = [Turn("user" if n % 2 == 0 else "assistant", f"turn {n} " + "word " * 20) for n in range(400)]
    session = seeded_session({"model": MODEL}, turns, ["note " * 10])
    items = session["input"]
    assert len(items) <= MAX_INPUT_MESSAGES
    assert sum(len(item["content"][0]["text"].encode()) for item in items) <= MAX_INPUT_TOKENS
    assert items[0]["role"] == "developer" and items[-1]["content"][0]["text"].startswith("turn 399")
    long_turn = [Turn("user", "é" * 10_000)]
    (cut,) = seeded_session({"model": MODEL}, long_turn, [])["input"]
    assert 0 < len(cut["content"][0]["text"].encode()) <= MAX_INPUT_TOKENS and set(cut["content"][0]["text"]) == {"é"}


def test_the_new_session_s_start_reaches_the_client_without_the_relay_s_command_id() -> None:
    """The server answers the relay's own `session.start` with its `event_id` as
    `client_event_id`; the client sent no command of that id and is not shown one. The first
    session's answer to the client's own start keeps the client's id."""
    driver = LiveDriver([get_weather, get_time])
    driver.client({"type": "session.start", "event_id": "evt_client_start",
                   "session": {"model": MODEL, "delegation": RESPONSES}})
    driver.upstream({**started(RESPONSES), "client_event_id": "evt_client_start"})
    start = reseed(driver)
    assert start is not None and start["event_id"].startswith(driver.engine.ctx.id_prefix + "_")
    driver.upstream({**started(RESPONSES, session_id="live_2"), "client_event_id": start["event_id"]})
    shown = [event for event in driver.to_client() if event["type"] == "session.started"]
    assert [event["session"]["id"] for event in shown] == ["live_1", "live_2"]
    assert [event.get("client_event_id") for event in shown] == ["evt_client_start", None]


def test_the_new_session_is_told_of_every_answer_the_history_limit_forgot() -> None:
    """`relay serve` keeps a bounded history (16 by default): the calls answered before it are
    forgotten from the call book, not from what a new session is told. Each answered call's note
    is kept (as many as the seeded input can hold), so that the model does not ask again for an
    action that already ran."""
    driver = LiveDriver([get_weather, get_time], config=EngineConfig(strict=True, history_limit=1))
    driver.client({"type": "session.start", "session": {"model": MODEL, "input": [], "delegation": RESPONSES}})
    driver.upstream(started(RESPONSES))
    cities = ["Paris", "Rome", "Oslo", "Lima"]
    for n, city in enumerate(cities, start=1):
        driver.upstream(transcript("input", f"Weather in {city}?", 1000 * n))
        driver.upstream(delegation_created(f"item_{n}", target="responses", response_id=f"resp_{n}"))
        driver.batch(f"item_{n}", f"resp_{n}", [call_item(f"c{n}", "get_weather", {"city": city})])
        driver.finish(f"c{n}", f"sunny in {city}")
        continuation(driver, f"item_{n}", f"resp_{n}b")
    assert len(list(driver.engine.ledger)) < len(cities)   # the call book forgot some
    start = reseed(driver)
    assert start is not None
    notes = [text for role, text in texts(start["session"]) if role == "developer"]
    assert [next(city for city in cities if f"sunny in {city}" in note) for note in notes] == cities
