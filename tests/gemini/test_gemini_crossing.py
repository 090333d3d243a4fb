"""An answer crossing a cancellation (relay/engine/answer_hold.py), with a fake clock and no
sockets: from the server's `interrupted` the engine holds its answers until the next message
decides them. A `toolCallCancellation` drops those of the calls it names (resolved, skipped:
owed nothing); any other message, or `HOLD_LIMIT` seconds of silence, sends the rest, in order."""

from __future__ import annotations

from typing import Any

from google.genai import types as genai_types

from relay.dialects import GEMINI
from relay.engine import CallState
from relay.engine.answer_hold import HOLD_LIMIT
from relay.tools import tool
from tests.support.engine import EngineDriver
from tests.support.frames import TURN_COMPLETE, cancellation, function_call, gemini_user_text, model_text, tool_call

INTERRUPTED = {"serverContent": {"interrupted": True}}


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool(interruption="cancel")
def lookup(order: str) -> str:
    """An order's status."""
    return f"{order} shipped"


@tool(timeout=5)
async def track(parcel: str) -> Any:
    """Follow a parcel (NON_BLOCKING: it streams)."""
    yield f"{parcel}: picked up"


def session() -> EngineDriver:
    h = EngineDriver([weather, lookup, track], dialect=GEMINI)
    h.setup(None)
    h.client(gemini_user_text("the weather in Paris and Rome"))
    h.upstream(tool_call(function_call("paris", "weather", {"city": "Paris"}),
                         function_call("rome", "weather", {"city": "Rome"})))
    return h


def answered(h: EngineDriver) -> list[str]:
    """The ids the relay answered upstream, in order, each answer checked against the SDK's type."""
    ids = []
    for frame in h.sent:
        if "toolResponse" in frame:
            message = genai_types.LiveClientToolResponse.model_validate(frame["toolResponse"])
            ids += [response.id for response in message.function_responses or []]
    return ids


def test_the_explorers_crossing_an_answer_after_interrupted_waits_for_the_cancellation() -> None:
    """The explorer's shrunk schedule, on the engine alone: call 1's handler finishes between the
    server's `interrupted` and its `toolCallCancellation`; the answer goes nowhere, and the call is
    resolved (skipped), not owed."""
    h = session()
    h.finish("rome", "sunny in Rome")
    h.upstream(INTERRUPTED)
    h.finish("paris", "sunny in Paris")
    assert answered(h) == ["rome"], "the answer waits behind interrupted"
    h.upstream(cancellation("paris"))
    h.advance(HOLD_LIMIT * 2)
    assert answered(h) == ["rome"]
    paris = h.engine.ledger.get("paris")
    assert paris.state is CallState.SKIPPED and "toolCallCancellation" in (paris.skip_reason or "")
    assert h.engine.ledger.unanswered() == []
    assert h.engine.next_deadline() is None


def test_the_calls_the_cancellation_spares_are_answered_right_after_it_in_their_order() -> None:
    h = session()
    h.upstream(INTERRUPTED)
    h.finish("rome", "sunny in Rome")
    h.finish("paris", "sunny in Paris")
    assert answered(h) == []
    h.upstream(cancellation("paris"))
    assert answered(h) == ["rome"]
    assert h.engine.ledger.get("rome").state is CallState.ANSWERED


def test_another_message_after_interrupted_says_no_cancellation_is_coming() -> None:
    h = session()
    h.upstream(INTERRUPTED)
    h.finish("paris", "sunny in Paris")
    h.upstream(model_text("About your question"))
    assert answered(h) == ["paris"]
    h.finish("rome", "sunny in Rome")
    assert answered(h) == ["paris", "rome"], "the hold is over: answers go up at once again"


def test_held_answers_go_up_when_nothing_more_comes_within_the_limit() -> None:
    h = session()
    h.finish("rome", "sunny in Rome")
    h.upstream(INTERRUPTED)
    assert h.engine.next_deadline() == h.now + HOLD_LIMIT, "sooner than paris's handler's timeout"
    h.finish("paris", "sunny in Paris", dt=0.1)
    h.advance(HOLD_LIMIT - 0.2)
    assert answered(h) == ["rome"]
    h.advance(0.2)
    assert answered(h) == ["rome", "paris"]
    assert h.engine.next_deadline() is None


def test_interrupted_with_nothing_owed_holds_nothing() -> None:
    h = session()
    h.run_all()
    h.upstream(TURN_COMPLETE)
    h.upstream(INTERRUPTED)
    assert h.engine.next_deadline() is None
    h.client(gemini_user_text("and order A1?"))
    h.upstream(tool_call(function_call("a1", "lookup", {"order": "A1"})))
    h.run_all()
    assert answered(h) == ["paris", "rome", "a1"]


def test_a_streaming_calls_interim_answer_waits_too_and_goes_with_its_cancellation() -> None:
    h = session()
    h.upstream(tool_call(function_call("p", "track", {"parcel": "P"})))
    h.upstream(INTERRUPTED)
    h.yield_value("p", "moving")
    h.upstream(cancellation("p", "paris", "rome"))
    h.end_stream("p")
    h.advance(HOLD_LIMIT * 2)
    assert answered(h) == []
    assert {entry.state for entry in h.engine.ledger} == {CallState.SKIPPED}


def test_a_reconnect_while_holding_sends_what_waited() -> None:
    h = session()
    h.finish("rome", "sunny in Rome")
    h.upstream(INTERRUPTED)
    h.disconnect()
    h.finish("paris", "sunny in Paris")
    h.reconnect()
    assert answered(h) == ["rome", "paris"], "the old connection's cancellation is not coming on the new one"
    assert h.engine.next_deadline() is None


def test_the_interrupted_turns_own_end_does_not_decide_the_hold() -> None:
    """An interrupted turn "will go through interrupted > turn_complete" (google-genai), and the
    cancellation may come after that `turnComplete` (its order is not documented): the answer
    still waits for it, and goes nowhere."""
    h = session()
    h.upstream(INTERRUPTED)
    h.finish("paris", "sunny in Paris")
    h.upstream(TURN_COMPLETE)
    assert answered(h) == [], "the turn's end says nothing of a cancellation"
    h.upstream(cancellation("paris"))
    h.finish("rome", "sunny in Rome")
    assert answered(h) == ["rome"], "the cancellation decided: the hold is over"
    assert h.engine.ledger.get("paris").state is CallState.SKIPPED


def test_after_the_turns_end_the_next_message_or_the_limit_decides() -> None:
    h = session()
    h.upstream({"serverContent": {"interrupted": True, "turnComplete": True}})
    h.finish("paris", "sunny in Paris")
    h.upstream(TURN_COMPLETE)   # a second end is a message like any other
    assert answered(h) == ["paris"]
    h = session()
    h.upstream(INTERRUPTED)
    h.upstream(TURN_COMPLETE)
    h.finish("paris", "sunny in Paris")
    h.advance(HOLD_LIMIT)
    assert answered(h) == ["paris"], "HOLD_LIMIT still bounds the hold"
