"""The relay's own behaviour, written with the harness it offers its users (`relay.testing`):
scripted conversations on virtual time, in both dialects, with expectations and the invariants.
Each case runs the real engine and real tools against the mock model in no real time (see
`--durations`)."""

from __future__ import annotations

import asyncio
import json

import pytest

from relay.offline.timeline import decided_outcomes
from relay.recording.format import RELAY_TO_CLIENT
from relay.testing import Quirks, Script, Turn, call, faults
from relay.tools import tool

DIALECTS = ["openai", "gemini", "xai", "voicelive"]


@tool(on_delay=(800, "One moment, I'm checking the book."), timeout=2)
async def book_table(restaurant: str, people: int) -> dict:
    """Book a table."""
    await asyncio.sleep(5)          # longer than its timeout
    return {"booked": True}


@tool(interruption="cancel")
async def search_flights(destination: str) -> dict:
    """Search flights; a caller who speaks over it does not want the results any more."""
    await asyncio.sleep(2)
    return {"flights": 3}


@tool
async def get_weather(city: str) -> dict:
    """Current weather in a city."""
    await asyncio.sleep(0.3)
    return {"city": city, "temp_c": 21}


@tool
def get_time(city: str) -> str:
    """Local time in a city (a sync tool: it runs in a thread, at one virtual instant)."""
    return f"12:00 in {city}"


def lookup_customer(phone: str) -> dict:
    """The caller application's own tool: the relay must leave its calls to it."""
    return {"customer": "Bo", "vip": True}


TIMEOUT_SCRIPT = Script(
    Turn(say="Let me book that.", calls=[call("book_table", restaurant="Luigi", people=2)]),
    Turn(say="Sorry, the booking system is slow today."),
)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_tool_outliving_its_timeout_gets_a_filler_then_exactly_one_answer(dialect: str) -> None:
    with TIMEOUT_SCRIPT.start([book_table], dialect=dialect) as session:
        session.user("A table for two at Luigi's, please")
        session.advance(6)
    expect = session.expect().user("table for two").next_call("book_table", arguments={"people": 2}, by="relay")
    if dialect != "gemini":   # Gemini Live has no response the relay could ask for a filler in
        expect.filler(after=0.8, text="checking the book")
    expect.output(error=True, contains="timed out after 2 s", outcome="timeout")
    if dialect != "gemini":
        expect.follow_up("book_table")
    expect.spoken("booking system is slow").no_more_events()
    session.check_invariants()


BARGE_IN_SCRIPT = Script(
    Turn(calls=[call("search_flights", destination="Lisbon")]),
    Turn(say="Sure, what else?"),
)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_caller_barging_in_stops_a_tool_whose_policy_is_cancel(dialect: str) -> None:
    with BARGE_IN_SCRIPT.start([search_flights], dialect=dialect) as session:
        session.user("Flights to Lisbon")
        session.advance(0.5)
        session.barge_in()
        session.advance(3)               # the handler would have finished by now: it was cancelled
        session.user("Never mind that")
    expect = session.expect().next_call("search_flights").barge_in()
    if dialect != "gemini":   # the relay answers for the call: cancelled, not to be spoken about
        expect.output(error=True, contains="cancelled", status="incomplete", outcome="cancelled")
    else:                     # the server withdrew the call: no answer may follow
        expect.cancelled("search_flights")
    expect.user("never mind").spoken("what else").no_more_events()
    assert decided_outcomes(session.ledger) == {session.timeline.calls()[0].call_id: "cancelled"}
    session.check_invariants()


PARALLEL_SCRIPT = Script(
    Turn(calls=[call("get_weather", city="Paris"), call("get_time", city="Paris")]),
    Turn(say="In Paris: {joined}"),
)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_parallel_calls_get_one_answer_each_and_one_response_about_both(dialect: str) -> None:
    with PARALLEL_SCRIPT.start([get_weather, get_time], dialect=dialect) as session:
        session.user("Weather and time in Paris?")
        session.advance(1)
    expect = (session.expect().next_call("get_weather").next_call("get_time")
              .output(call="get_time", equals="12:00 in Paris").output(call="get_weather", contains="21"))
    if dialect != "gemini":   # one response about both, asked for once both are in
        expect.follow_up("get_time")   # one request covers both calls
        assert set(expect.last.call_ids) == {c.call_id for c in session.timeline.calls()}
    expect.spoken("12:00 in Paris").no_more_events()
    assert len(session.timeline.of("follow_up")) == (1 if dialect != "gemini" else 0)
    session.check_invariants()


MIXED_SCRIPT = Script(
    Turn(calls=[call("get_weather", city="Oslo"), call("lookup_customer", phone="+47 555 01 234")]),
    Turn(say="Welcome back; {joined}"),
)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_mixed_ownership_each_side_answers_its_own_call(dialect: str) -> None:
    with MIXED_SCRIPT.start([get_weather], dialect=dialect, client_tools=[lookup_customer]) as session:
        session.user("What's the weather? It's Bo.")
        session.advance(1)
    timeline = session.timeline
    relay_call, client_call = timeline.calls("get_weather")[0], timeline.calls("lookup_customer")[0]
    assert (relay_call.by, client_call.by) == ("relay", "client")
    (session.expect().next_call("get_weather", by="relay").next_call("lookup_customer", by="client")
     .output(call="lookup_customer", by="client", contains="vip")
     .output(call="get_weather", by="relay", contains="Oslo")
     .spoken("Welcome back").no_more_events())
    # the relay never answered the client's call, and on OpenAI left the follow-up to the client
    assert [e.by for e in timeline.outputs(client_call.call_id)] == ["client"]
    assert timeline.of("follow_up") == []
    session.check_invariants()


DUPLICATE_SCRIPT = Script(Turn(calls=[call("get_weather", city="Rome")]), Turn(say="Rome: {output}"))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_call_delivered_twice_runs_and_is_answered_once(dialect: str) -> None:
    with DUPLICATE_SCRIPT.start([get_weather], dialect=dialect, faults=[faults.duplicate_delivery(1)]) as session:
        session.user("Weather in Rome?")
        session.advance(1)
    assert [e.kind for e in session.timeline.of("fault")] == ["fault"]
    (session.expect().next_call("get_weather").output(contains="Rome").spoken("Rome").no_more_events())
    assert len(session.timeline.outputs()) == 1
    assert [n.fields["name"] for n in session.notices if n.kind == "tool_started"] == ["get_weather"]
    session.check_invariants()


GEMINI_DOUBLE_DELIVERY = Script(Turn(say="Let me look.", calls=[call("get_weather", city="Rome"),
                                                              call("lookup_customer", phone="+39 06 555")]),
                                Turn(say="Rome: {by_name[get_weather]}"))


def test_gemini_calls_delivered_as_parts_and_tool_calls_are_run_once_and_hidden_from_the_caller() -> None:
    """Gemini Live's double delivery (`Quirks.call_parts`): each call comes as a `functionCall`
    part of the model's turn (beside its speech) and again in the `toolCall`."""
    with GEMINI_DOUBLE_DELIVERY.start([get_weather], dialect="gemini", client_tools=[lookup_customer],
                                      quirks=Quirks(call_parts=True)) as session:
        session.user("Weather in Rome? It's Bo.")
        session.advance(1)
    (session.expect().next_call("get_weather", by="relay")
     .next_call("lookup_customer", by="client").output(call="lookup_customer", by="client")
     .output(call="get_weather", contains="Rome").spoken("Rome:").no_more_events())
    assert [n.fields["name"] for n in session.notices if n.kind == "tool_started"] == ["get_weather"]
    assert len(session.timeline.outputs()) == 2 and session.timeline.of("spoken")[0].text == "Let me look."
    seen = [json.loads(f.raw or f.binary) for f in session.frames if f.direction == RELAY_TO_CLIENT]
    turns = [((m.get("serverContent") or {}).get("modelTurn") or {}).get("parts", []) for m in seen]
    calls = [p["functionCall"]["name"] for parts in turns for p in parts if "functionCall" in p]
    calls += [c["name"] for m in seen for c in (m.get("toolCall") or {}).get("functionCalls", [])]
    assert calls == ["lookup_customer", "lookup_customer"]   # the client's call, both times; never ours
    beside = next(parts for parts in turns if any("functionCall" in p for p in parts))
    assert any("inlineData" in p for p in beside)              # the speech beside it stayed
    assert session.engine.anomalies == []
    session.check_invariants()


@tool
def reserve(guest: str) -> dict:
    """Reserve under a name."""
    return {"ref": "BK0001", "guest": guest, "seats": [1, 2]}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_output_reads_the_same_text_on_every_dialect(dialect: str) -> None:
    script = Script(Turn(calls=[call("reserve", guest="Bo")]), Turn(say="Reserved: {output}"))
    with script.start([reserve], dialect=dialect) as session:
        session.user("Reserve for Bo")
        session.advance(1)
    text = '{"ref":"BK0001","guest":"Bo","seats":[1,2]}'
    session.expect().next_call("reserve").output(contains=text).spoken(text)
