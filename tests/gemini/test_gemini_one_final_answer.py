"""Gemini Live: every call gets one final answer upstream, never a second, with a fake clock and
no sockets. What the service does with a second one is not documented (docs/gemini.md, "A second
answer to one call"); the mock takes no notice of it, so the relay must not rely on a close to
show it. The relay's own calls are answered once whatever its handlers report; a client's call
the provider delivered twice may be answered twice by the client, and the second answer is not
forwarded."""

from __future__ import annotations

from typing import Any

from relay.dialects import GEMINI
from relay.engine import CallState
from relay.engine.answer_hold import HOLD_LIMIT
from relay.engine.calls import Owner
from tests.gemini.test_gemini_crossing import track, weather
from tests.support.engine import EngineDriver
from tests.support.frames import cancellation, function_call, gemini_user_text, tool_call

DOOR = {"name": "open_door", "description": "Open a door.",
        "parametersJsonSchema": {"type": "object", "properties": {"door": {"type": "string"}}}}


def session() -> EngineDriver:
    h = EngineDriver([weather, track], dialect=GEMINI)
    h.setup([{"functionDeclarations": [DOOR]}])
    h.client(gemini_user_text("open the door, and the weather in Paris"))
    return h


def answers(h: EngineDriver) -> list[tuple[str, bool]]:
    """(call id, final) for each FunctionResponse the relay sent upstream, in order."""
    return [(answer["id"], answer.get("willContinue") is not True)
            for message in h.sent if "toolResponse" in message
            for answer in message["toolResponse"]["functionResponses"]]


def door_answer(call_id: str, **extra: Any) -> dict[str, Any]:
    return {"toolResponse": {"functionResponses": [{"id": call_id, "name": "open_door",
                                                    "response": {"output": "open"}, **extra}]}}


def test_a_clients_second_final_answer_to_its_call_is_not_forwarded() -> None:
    """The explorer's finding (the tests' Gemini script, the client's call delivered twice): the
    client answered each delivery, and the relay passed both answers up."""
    h = session()
    door = tool_call(function_call("door", "open_door", {"door": "front"}))
    h.upstream(door)
    h.client(door_answer("door"))
    h.upstream(door)   # the provider delivers the call again: the client sees it again
    assert sum("toolCall" in message for message in h.to_client) == 2
    h.client(door_answer("door"))
    assert answers(h) == [("door", True)]
    entry = h.engine.ledger.get("door")
    assert entry.owner is Owner.CLIENT and entry.state is CallState.ANSWERED
    assert any("door" in a.message and "again after its final answer" in a.message for a in h.engine.anomalies)


def test_a_clients_interim_answers_go_up_until_its_final_one() -> None:
    h = session()
    h.upstream(tool_call(function_call("door", "open_door", {"door": "front"})))
    h.client(door_answer("door", willContinue=True))
    h.client(door_answer("door", willContinue=True))
    h.client(door_answer("door"))
    h.client(door_answer("door", willContinue=True))
    assert answers(h) == [("door", False), ("door", False), ("door", True)]


def test_a_relay_call_is_answered_once_whatever_its_handler_reports() -> None:
    """Delivered in both shapes, its handler reported finished twice: one answer."""
    h = session()
    paris = function_call("paris", "weather", {"city": "Paris"})
    h.upstream({"serverContent": {"modelTurn": {"role": "model", "parts": [{"functionCall": paris}]}}})
    h.upstream(tool_call(paris))
    h.finish("paris", "sunny in Paris")
    h.finish("paris", "sunny again")
    assert answers(h) == [("paris", True)]


def test_an_answer_held_behind_interrupted_goes_up_once() -> None:
    h = session()
    h.upstream(tool_call(function_call("paris", "weather", {"city": "Paris"}),
                         function_call("rome", "weather", {"city": "Rome"})))
    h.upstream({"serverContent": {"interrupted": True}})
    h.finish("paris", "sunny in Paris")
    h.finish("paris", "sunny again")
    h.upstream(cancellation("rome"))
    h.finish("rome", "sunny in Rome")
    h.advance(HOLD_LIMIT * 2)
    assert answers(h) == [("paris", True)]
    assert h.engine.ledger.get("rome").state is CallState.SKIPPED


def test_a_streaming_calls_answers_end_with_its_one_final_answer() -> None:
    h = session()
    h.upstream(tool_call(function_call("p", "track", {"parcel": "P"})))
    h.yield_value("p", "moving")
    h.end_stream("p")
    h.yield_value("p", "late")
    h.end_stream("p")
    assert answers(h) == [("p", False), ("p", True)]
