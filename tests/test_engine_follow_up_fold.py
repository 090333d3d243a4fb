"""A follow-up owed for one batch while a later response's relay calls are still unanswered
waits for them and goes up as one `response.create` after every output (relay/engine/sequencer.py,
`Sequencer.poll`). Sent at once, ahead of those outputs, it would ask the model to speak about a
conversation with a call still open: the mock's model, as a real one may, calls the tool again,
and each new batch's follow-up then goes up ahead of the next call's output, without end (the
explorer's refund example on Voice Live). Fake clock, the mock upstream in-process, no sockets."""

from __future__ import annotations

import json

from relay.engine import CallState
from relay.engine.sequencer import META_CALLS
from relay.mock import ToolCall
from tests.support.engine import EngineDriver
from tests.support.local_mock import model_call
from tests.support.tools import get_weather_data


def weather(city: str) -> ToolCall:
    return model_call("get_weather", json.dumps({"city": city}))


def two_batches() -> tuple[EngineDriver, str, str]:
    """Call 1's response is done and its handler runs; the caller's next turn starts a response
    (held before its `response.done`) with call 2 in it, whose handler runs too."""
    h = EngineDriver([get_weather_data])
    h.connect()
    h.respond([weather("Paris")])
    h.respond([weather("Rome")], finish=False)
    first, second = h.call_ids()
    assert set(h.started) == {first, second}
    return h, first, second


def sent_types(h: EngineDriver) -> list[str]:
    """What went up, a create or an output (with its call id), in order."""
    return [e["type"] if e["type"] == "response.create" else e["item"]["call_id"]
            for e in h.sent if e["type"] in ("response.create", "conversation.item.create")]


def test_a_follow_up_held_behind_a_response_waits_for_the_calls_that_response_made() -> None:
    h, first, second = two_batches()
    h.finish(first, {"temp": 20})        # its output goes in; its follow-up waits for the response
    assert h.creates == [] and [o["item"]["call_id"] for o in h.outputs] == [first]
    h.upstream(h.mock.finish_response())   # that response ends with call 2 still running
    assert h.creates == [], "no create while a call of the response that just ended is unanswered"
    h.finish(second, {"temp": 25})
    assert sent_types(h) == [first, second, "response.create"]
    [create] = h.creates
    assert create["response"]["metadata"][META_CALLS].split(",") == [first, second]
    h.flush()
    assert all(h.engine.ledger.get(c).state is CallState.ANSWERED for c in (first, second))
    assert len(h.creates) == 1


def test_a_follow_up_waits_for_a_later_call_however_its_handler_ends() -> None:
    """The later call fails: its error is its answer, and the one create still follows it."""
    h, first, second = two_batches()
    h.finish(first, {"temp": 20})
    h.upstream(h.mock.finish_response())
    h.fail(second, RuntimeError("the weather service is down"))
    assert sent_types(h) == [first, second, "response.create"]


def test_a_follow_up_with_no_later_call_open_goes_up_when_the_response_ends() -> None:
    """The wait is for calls, not for responses: a response that made none releases it at once."""
    h = EngineDriver([get_weather_data])
    h.connect()
    h.respond([weather("Paris")])
    [first] = h.call_ids()
    h.respond(["Still there?"], finish=False)
    h.finish(first, {"temp": 20})
    assert h.creates == []
    h.upstream(h.mock.finish_response())
    assert sent_types(h) == [first, "response.create"]


def test_a_refused_follow_up_goes_again_with_the_next_batch_as_one_create() -> None:
    """Call 1's follow-up meets a response the server started for the caller (refused: one is
    active) and waits for its end to go again; that response made call 2. The create goes again
    once call 2 is answered, naming both calls: one create after every output."""
    h = EngineDriver([get_weather_data])
    h.connect()
    h.respond([weather("Paris")])
    [first] = h.call_ids()
    h.deliver = False
    h.finish(first, {"temp": 20})          # its output and its follow-up wait on the way up
    assert len(h.creates) == 1
    h.respond([weather("Rome")], finish=False)   # the caller's turn, ahead of them at the server
    h.deliver = True
    h.flush()
    assert [e["error"]["code"] for e in h.mock.errors] == ["conversation_already_has_active_response"]
    second = h.call_ids()[1]
    h.upstream(h.mock.finish_response())
    assert len(h.creates) == 1, "the refused create waits for call 2's answer"
    h.finish(second, {"temp": 25})
    assert sent_types(h) == [first, "response.create", second, "response.create"]
    assert h.creates[-1]["response"]["metadata"][META_CALLS].split(",") == [first, second]
    h.flush()
    assert len(h.creates) == 2 and h.mock.active is None
