"""Engine behaviour the proxy work ran into that looks wrong. The engine belongs to the lead: each
finding is a failing test marked xfail(strict=True), so it turns into an error once it is fixed
and the mark can go."""

from __future__ import annotations

import json

import pytest

from relay.engine import EngineConfig
from relay.tools import tool
from tests.fakeserver import Call
from tests.harness import Harness


@tool
def get_weather(city: str) -> str:
    """Current weather for a city."""
    return f"sunny in {city}"


@pytest.mark.xfail(strict=True, reason=(
    "proxy + hide_tool_events: the relay's follow-up response carries metadata "
    "{relay: follow_up, relay_event, call_ids} and response.created/response.done reach the client "
    "with it, so the call_id of a hidden relay call is shown to the client"))
def test_a_hidden_call_id_never_reaches_the_client() -> None:
    harness = Harness([get_weather], config=EngineConfig(mode="proxy", strict=True))
    harness.connect()
    harness.upstream(harness.server.user_turn("what's the weather?"))
    harness.respond([Call("get_weather", json.dumps({"city": "Paris"}))])
    harness.run_all()
    [call] = harness.engine.ledger
    assert harness.creates, "the follow-up was sent"
    assert not [e for e in harness.to_client if call.call_id in json.dumps(e)]
