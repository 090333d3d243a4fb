"""A client that answers its own call early, in a response that also holds relay calls.

Many clients answer their own call as soon as its item is done and ask for a response at once,
while the response is still active (the relay's calls make it last longer than the client
expects). The relay holds such a `response.create` until no response is active and every relay
output is in, then forwards it: exactly one create reaches the upstream, after every output,
and none ever meets an active response. Every order: the client answers before, between or after
the relay's calls; its create comes with its answer or after `response.done`; the relay tool is
fast, slow or times out; the client sends one create or two (the second is refused, as the
provider refuses a create that meets an active response).
"""

from __future__ import annotations

import itertools

import pytest

from relay.engine import EngineConfig
from relay.tools import tool
from tests.support.engine import EngineDriver
from tests.support.local_mock import model_call


@tool
def get_weather(city: str) -> str:
    """Weather for a city."""
    return f"sunny in {city}"


@tool(timeout=2)
def get_time(city: str) -> str:
    """Time in a city."""
    return f"noon in {city}"


WHEN_ANSWERED = ("before_relay_calls", "between_relay_calls", "after_relay_outputs")
WHEN_CREATED = ("with_the_answer", "after_response_done")
TOOL_SPEED = ("fast", "slow", "times_out")


def response_events(h: EngineDriver) -> list[dict]:
    """One response: the client's call `open_door` first, then two relay calls; still open."""
    return h.mock.respond([model_call("open_door", '{"door":"front"}', "call_client"),
                           model_call("get_weather", '{"city":"Paris"}', "call_weather"),
                           model_call("get_time", '{"city":"Rome"}', "call_time")], finish=False)


def done_of(events: list[dict], call_id: str) -> int:
    """The index of the event completing a call's item."""
    return next(i for i, e in enumerate(events) if e["type"] == "response.output_item.done"
                and e["item"].get("call_id") == call_id)


def answer(h: EngineDriver) -> None:
    h.client({"type": "conversation.item.create", "event_id": "client_output",
              "item": {"type": "function_call_output", "call_id": "call_client", "output": "opened"}})


def create(h: EngineDriver, event_id: str) -> None:
    h.client({"type": "response.create", "event_id": event_id})


@pytest.mark.parametrize(("when_answered", "when_created", "speed", "creates"),
                         list(itertools.product(WHEN_ANSWERED, WHEN_CREATED, TOOL_SPEED, (1, 2))))
def test_exactly_one_create_reaches_the_upstream_after_every_output(
        when_answered: str, when_created: str, speed: str, creates: int) -> None:
    h = EngineDriver([get_weather, get_time], config=EngineConfig(mode="proxy", strict=True))
    h.connect()
    h.mock.hold_responses = True   # the response the client asks for lasts until the test ends it
    events = response_events(h)
    created: list[str] = []

    def client_turn() -> None:
        answer(h)
        if when_created == "with_the_answer":
            for n in range(creates):
                create(h, f"client_create_{n}")
                created.append(f"client_create_{n}")

    def finish_relay_calls(*call_ids: str) -> None:
        for call_id in call_ids:
            if speed == "times_out" and call_id == "call_time":
                h.advance(3)   # get_time's timeout is 2 s
            else:
                h.finish(call_id, f"result of {call_id}")

    # the response streams; the client's call is done first, then the relay's
    cut = done_of(events, "call_client") + 1 if when_answered == "before_relay_calls" else len(events)
    for event in events[:cut]:
        h.upstream(event)
    if when_answered == "before_relay_calls":
        client_turn()
        for event in events[cut:]:
            h.upstream(event)
    if speed == "fast":   # the handlers report before the response ends
        finish_relay_calls("call_weather", "call_time")
    h.upstream(h.mock.finish_response())
    if speed != "fast":
        if when_answered == "between_relay_calls":
            finish_relay_calls("call_weather")
            client_turn()
            finish_relay_calls("call_time")
        else:
            finish_relay_calls("call_weather", "call_time")
    elif when_answered == "between_relay_calls":
        client_turn()
    if when_answered == "after_relay_outputs":
        client_turn()
    if when_created == "after_response_done":
        for n in range(creates):
            create(h, f"client_create_{n}")
    h.upstream(h.mock.finish_response())   # the model's answer to the client's create

    outputs = {e["item"]["call_id"]: n for n, e in enumerate(h.sent)
               if e["type"] == "conversation.item.create" and e["item"]["type"] == "function_call_output"}
    assert set(outputs) == {"call_client", "call_weather", "call_time"}, "every call has its output"
    creates_sent = [n for n, e in enumerate(h.sent) if e["type"] == "response.create"]
    assert len(creates_sent) == 1, [h.sent[n] for n in creates_sent]
    assert creates_sent[0] > max(outputs.values()), "the create goes up after every output"
    assert h.sent[creates_sent[0]]["event_id"] == "client_create_0", "the client's own create is the one"
    assert not h.mock.errors, "no create met an active response"
    assert len([e for e in h.to_client if e["type"] == "response.created"]) == 2, \
        "the model spoke once more, after the outputs"
    refused = [e["error"]["event_id"] for e in h.to_client
               if e["type"] == "error" and e["error"]["code"] == "conversation_already_has_active_response"]
    assert refused == [f"client_create_{n}" for n in range(1, creates)], "a second create is refused"


def refusals(h: EngineDriver) -> list[str]:
    return [e["error"]["event_id"] for e in h.to_client
            if e["type"] == "error" and e["error"]["code"] == "conversation_already_has_active_response"]


def test_a_create_that_meets_someone_elses_response_is_refused_as_the_provider_would() -> None:
    """No relay work in the way: the create is refused when the response ends, not forwarded
    into a second response the provider would never have made."""
    h = EngineDriver([get_weather], config=EngineConfig(mode="proxy", strict=True))
    h.connect()
    h.respond(["Hello there."], finish=False)
    create(h, "while_active")
    assert h.creates == [] and refusals(h) == []
    h.upstream(h.mock.finish_response())
    assert h.creates == [] and refusals(h) == ["while_active"]
    assert not h.mock.errors


def test_a_create_that_meets_a_response_with_a_relay_call_goes_up_after_its_output() -> None:
    h = EngineDriver([get_weather], config=EngineConfig(mode="proxy", strict=True))
    h.connect()
    h.respond([model_call("get_weather", '{"city":"Paris"}', "call_weather")], finish=False)
    create(h, "while_active")
    create(h, "again")
    h.upstream(h.mock.finish_response())
    assert h.creates == []
    h.finish("call_weather", "sunny")
    assert [c["event_id"] for c in h.creates] == ["while_active"], "the client's, not the relay's follow-up"
    assert refusals(h) == ["again"] and not h.mock.errors


def test_a_create_during_the_relays_follow_up_goes_up_after_it() -> None:
    h = EngineDriver([get_weather], config=EngineConfig(mode="proxy", strict=True))
    h.connect()
    h.respond([model_call("get_weather", '{"city":"Paris"}', "call_weather")])
    h.mock.hold_responses = True   # the follow-up's response lasts until the test ends it
    h.finish("call_weather", "sunny")
    [follow_up] = h.creates
    create(h, "typed_text")
    assert len(h.creates) == 1
    h.upstream(h.mock.finish_response())
    assert [c["event_id"] for c in h.creates] == [follow_up["event_id"], "typed_text"]
    assert not h.mock.errors and refusals(h) == []


def test_a_create_when_nothing_is_active_goes_up_at_once() -> None:
    h = EngineDriver([get_weather], config=EngineConfig(mode="proxy", strict=True))
    h.connect()
    create(h, "now")
    assert [c["event_id"] for c in h.creates] == ["now"]
