"""The session invariants of `relay.testing` hold for the relay as it is, and each one fails, with
a message saying what broke and where, when a test double of the engine breaks its rule on
purpose (the real engine inside, one action rewritten)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from relay.engine import Action, SendUpstream, new_engine
from relay.offline.events import FOLLOW_UP, UPDATE
from relay.offline.explore import run_schedule
from relay.offline.explore_input import from_script
from relay.testing import ExpectationFailed, Script, Turn, call, check_invariants
from relay.tools import tool
from relay.tools.sources import tool_registry


@tool
async def get_weather(city: str) -> dict:
    await asyncio.sleep(0.5)
    return {"city": city, "temp_c": 21}


Rewrite = Callable[[list[Action], Any], list[Action]]


class BrokenEngine:
    """The real engine with one rule broken: `rewrite` changes the actions it answers with."""

    def __init__(self, real: Any, rewrite: Rewrite) -> None:
        self._real = real
        self._rewrite = rewrite

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def receive_upstream(self, frame: Any, now: float) -> list[Action]:
        return self._rewrite(self._real.receive_upstream(frame, now), frame)

    def receive_client(self, frame: Any, now: float) -> list[Action]:
        return self._rewrite(self._real.receive_client(frame, now), None)

    def handler_finished(self, call_id: str, outcome: Any, now: float) -> list[Action]:
        return self._rewrite(self._real.handler_finished(call_id, outcome, now), None)

    def tick(self, now: float) -> list[Action]:
        return self._rewrite(self._real.tick(now), None)


def broken(rewrite: Rewrite) -> Callable[..., Any]:
    return lambda tools, **options: BrokenEngine(new_engine(tools, **options), rewrite)


def sent(action: Action) -> dict[str, Any]:
    return json.loads(action.frame) if isinstance(action, SendUpstream) else {}


def is_output(action: Action) -> bool:
    message = sent(action)
    return (message.get("item") or {}).get("type") == "function_call_output" or "toolResponse" in message


def is_create(action: Action) -> bool:
    return sent(action).get("type") == "response.create"


def again(action: Action, suffix: str) -> SendUpstream:
    """The same frame once more (a new event id where it has one, so the upstream takes it)."""
    message = sent(action)
    if "event_id" in message:
        message["event_id"] += suffix
    return SendUpstream(json.dumps(message))


WEATHER = Script(Turn(calls=[call("get_weather", city="Paris")]), Turn(say="Paris: {output}"), strict=False)


def run(dialect: str, engine: Callable[..., Any] | None = None, script: Script = WEATHER) -> Any:
    with script.start([get_weather], dialect=dialect, engine=engine) as session:
        session.user("Weather in Paris?")
        session.advance(2)
    return session


def broken_invariant(session: Any, name: str) -> str:
    with pytest.raises(ExpectationFailed) as failed:
        check_invariants(session, name)
    return str(failed.value)


@pytest.mark.parametrize("dialect", ["openai", "gemini", "xai", "voicelive"])
def test_the_relay_as_it_is_keeps_every_invariant(dialect: str) -> None:
    check_invariants(run(dialect))


@pytest.mark.parametrize("dialect", ["openai", "gemini"])
def test_a_relay_answering_twice_breaks_answered_once(dialect: str) -> None:
    def answer_twice(actions: list[Action], frame: Any) -> list[Action]:
        return [a for action in actions for a in ([action, again(action, "_again")] if is_output(action) else [action])]

    message = broken_invariant(run(dialect, broken(answer_twice)), "answered_once")
    assert message.startswith("expected: the invariant: every relay call is answered exactly once")
    assert re.search(r"^came: +\S+ \(get_weather\) was answered 2 times \(at 0\.500, 0\.500 s\)", message, re.M)
    assert re.search(r"^  >> +0\.500  output +\S+ \(get_weather\) by the relay", message, re.M)


def test_a_relay_answering_a_clients_call_breaks_answered_once() -> None:
    def lookup_customer(phone: str) -> dict:
        return {"customer": "Bo"}

    def answer_the_clients_call(actions: list[Action], frame: Any) -> list[Action]:
        message = json.loads(frame) if isinstance(frame, str) else {}
        item = message.get("item") or {}
        if message.get("type") == "response.output_item.done" and item.get("name") == "lookup_customer":
            output = {"type": "conversation.item.create", "event_id": "relay_e_bad",
                      "item": {"type": "function_call_output", "call_id": item["call_id"], "output": "{}"}}
            return [*actions, SendUpstream(json.dumps(output))]
        return actions

    script = Script(Turn(calls=[call("lookup_customer", phone="1")]), strict=False)
    with script.start([get_weather], engine=broken(answer_the_clients_call), client_tools=[lookup_customer]) as session:
        session.user("It's Bo")
    assert "a call the client owns" in broken_invariant(session, "answered_once")


def test_a_relay_asking_twice_breaks_one_response_at_a_time_and_no_create_while_active() -> None:
    def create_twice(actions: list[Action], frame: Any) -> list[Action]:
        return [a for action in actions for a in ([action, again(action, "_again")] if is_create(action) else [action])]

    # the model's answer stays open, as a spoken answer does for a while
    held = Script(Turn(calls=[call("get_weather", city="Paris")]), Turn(say="Paris: {output}", ends="held"),
                  strict=False)
    session = run("openai", broken(create_twice), held)
    one = broken_invariant(session, "one_response_at_a_time")
    assert one.startswith("expected: the invariant: never two responses at once")
    assert re.search(r"^came: +the upstream refused a second response: Conversation already has an active response",
                     one, re.M)
    active = broken_invariant(session, "no_create_while_active")
    assert re.search(r"^came: +the relay asked for a follow-up while its request at 0\.500 s was not yet answered",
                     active, re.M)


def test_a_relay_that_never_asks_the_model_to_speak_breaks_spoke_after_tools() -> None:
    def never_follow_up(actions: list[Action], frame: Any) -> list[Action]:
        return [action for action in actions if not is_create(action)]

    message = broken_invariant(run("openai", broken(never_follow_up)), "spoke_after_tools")
    assert message.startswith("expected: the invariant: the model speaks after every tool")
    assert re.search(r"^came: +nothing was said after the answer to \S+ \(get_weather\)", message, re.M)


def test_a_relay_asking_again_after_the_answer_was_spoken_breaks_one_follow_up() -> None:
    asked: list[Action] = []

    def ask_again(actions: list[Action], frame: Any) -> list[Action]:
        asked.extend(action for action in actions if is_create(action))
        message = json.loads(frame) if isinstance(frame, str) else {}
        metadata = (message.get("response") or {}).get("metadata") or {}
        if message.get("type") == "response.done" and metadata.get("relay") == "follow_up" and len(asked) == 1:
            asked.append(again(asked[0], "_again"))   # once
            return [*actions, asked[-1]]
        return actions

    message = broken_invariant(run("openai", broken(ask_again)), "one_follow_up")
    assert re.search(r"^came: +the model was asked twice to speak about \S+: responses \S+ and \S+", message, re.M)


def test_an_unknown_invariant_is_named() -> None:
    with pytest.raises(ValueError, match="unknown invariant 'polite'; the invariants are answered_once"):
        check_invariants(run("openai"), "polite")


@tool
async def ticker(symbol: str):
    """Stream a symbol's prices: the first is the output, the others updates."""
    for price in (1, 2, 3):
        yield {"symbol": symbol, "price": price}
        await asyncio.sleep(0.02)


def test_an_update_sent_after_the_follow_up_was_asked_for_may_be_spoken_about_again() -> None:
    """A streaming tool's later values go in after its batch's follow-up was asked for, so that
    response cannot cover them: the relay's next follow-up about the call speaks them and is no
    second answer. Two follow-ups with no update after the first ask still break it (above)."""
    script = Script(Turn(say="Let me look.", calls=[call("ticker", symbol="X"), call("ticker", symbol="Y")]),
                    Turn(say="Done."))
    conversation = from_script(script, tool_registry([ticker]), dialect="openai", lines=("Go",))
    run = run_schedule(conversation, (), keep=True)
    try:
        events = list(run.session.timeline)
    finally:
        run.session.close()
    assert run.broken == [], run.broken
    asks = [e.index for e in events if e.kind == FOLLOW_UP]
    updates = [e.index for e in events if e.kind == UPDATE]
    assert len(asks) == 2 and any(asks[0] < u < asks[1] for u in updates), "an update came between the two asks"
