"""The `response` notices (what traces hang tool calls on): each response is told when created
and when done, in both dialects, with the relay's create that made it."""

from __future__ import annotations

import json

from relay.dialects import GEMINI
from relay.engine import Notice
from tests.support.engine import EngineDriver
from tests.support.frames import TURN_COMPLETE, function_call, gemini_user_text, tool_call
from tests.support.local_mock import model_call
from tests.support.tools import get_weather_data


def responses(notices: list[Notice]) -> list[tuple[str, ...]]:
    return [(n.fields["phase"], n.fields["creator"], n.fields.get("purpose") or n.fields.get("status") or "")
            for n in notices if n.kind == "response"]


def test_openai_responses_are_told_created_and_done_the_follow_up_as_the_relays() -> None:
    h = EngineDriver([get_weather_data])
    h.connect()
    h.upstream(h.mock.user_turn("what's the weather?"))
    h.respond([model_call("get_weather", json.dumps({"city": "Paris"}))])
    [started] = [n.fields for n in h.notices if n.kind == "tool_started"]
    [first_created] = [n.fields for n in h.notices if n.kind == "response"][:1]
    assert started["response_id"] == first_created["response_id"]
    h.run_all()
    [follow_up] = [n.fields for n in h.notices if n.kind == "follow_up"]
    [made] = [n.fields for n in h.notices if n.kind == "response" and n.fields.get("event_id")]
    assert made["event_id"] == follow_up["event_id"] and made["purpose"] == "follow_up"
    assert responses(h.notices) == [("created", "server", ""), ("done", "server", "completed"),
                                    ("created", "relay", "follow_up"), ("done", "relay", "completed")]


def test_a_gemini_model_turn_is_told_as_a_response() -> None:
    h = EngineDriver([get_weather_data], dialect=GEMINI)
    h.setup()
    h.client(gemini_user_text("hello"))
    h.upstream(tool_call(function_call("c1", "get_weather", {"city": "Paris"})))
    [created] = [n.fields for n in h.notices if n.kind == "response"]
    [started] = [n.fields for n in h.notices if n.kind == "tool_started"]
    assert started["response_id"] == created["response_id"]
    h.run_all()
    h.upstream(TURN_COMPLETE)
    assert responses(h.notices) == [("created", "server", ""), ("done", "server", "completed")]
