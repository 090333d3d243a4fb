"""Gemini's goAway met with the session's resumption handle (relay/engine/going_away.py): the
engine hides the goAway, asks the edge for a new connection once it holds a handle the server said
resumable, builds the setup with the handle, keeps the answers of the calls in flight until the
new connection's setupComplete (hidden too), then sends each once. Fake clock, no sockets; the
edge's side on loopback with the mock and the google-genai SDK is tests/gemini/test_gemini_sdk_going_away.py."""

from __future__ import annotations

import json
from typing import Any

from relay.dialects import GEMINI
from relay.engine import EngineConfig
from relay.engine.going_away import GOING_AWAY
from tests.support.engine import EngineDriver
from tests.support.frames import TURN_COMPLETE, function_call, gemini_user_text, tool_call
from tests.support.tools import get_weather_data

SETUP = {"model": "models/gemini-live-2.5-flash-preview", "sessionResumption": {}}
GO_AWAY = {"goAway": {"timeLeft": "10s"}}


def update(handle: str | None) -> dict[str, Any]:
    return {"sessionResumptionUpdate": {"newHandle": handle or "", "resumable": handle is not None}}


def session(setup: dict[str, Any] = SETUP) -> EngineDriver:
    h = EngineDriver([get_weather_data], config=EngineConfig(strict=True), dialect=GEMINI)
    h.client({"setup": setup})
    h.upstream([{"setupComplete": {}}, update("h1")])
    h.client(gemini_user_text("weather in Paris?"))
    return h


def going_away(h: EngineDriver) -> list[Any]:
    return [n for n in h.notices if n.kind == GOING_AWAY]


def seen_by_client(h: EngineDriver) -> list[str]:
    return [next(iter(message)) for message in h.to_client]


def test_a_go_away_mid_call_waits_for_a_resumable_handle_and_the_answer_goes_up_once_on_the_new_connection() -> None:
    h = session()
    h.upstream([tool_call(function_call("c1", "get_weather", {"city": "Paris"})), update(None)])
    h.upstream(GO_AWAY)
    assert "goAway" not in seen_by_client(h) and going_away(h) == []   # not resumable while the call waits
    h.run_all()   # the answer goes up on the old connection, still open
    assert [a["id"] for a in h.outputs] == ["c1"]
    h.upstream([TURN_COMPLETE, update("h2")])
    assert len(going_away(h)) == 1
    frame, actions = h.engine.resumption_setup(h.now)
    h._act(actions)
    setup = json.loads(frame)["setup"]
    assert setup["sessionResumption"] == {"handle": "h2"}
    assert [d["name"] for t in setup["tools"] for d in t["functionDeclarations"]] == ["get_weather"]
    h.upstream({"setupComplete": {}})
    assert seen_by_client(h).count("setupComplete") == 1 and len(h.outputs) == 1


def test_answers_decided_while_the_new_connection_opens_wait_for_its_setup_complete() -> None:
    h = session()
    h.upstream(GO_AWAY)
    assert len(going_away(h)) == 1   # h1 is resumable: at once
    frame, actions = h.engine.resumption_setup(h.now)
    h._act(actions)
    assert json.loads(frame)["setup"]["sessionResumption"] == {"handle": "h1"}
    h.upstream(tool_call(function_call("c1", "get_weather", {"city": "Rome"})))   # on the old one
    h.run_all()
    assert h.outputs == []
    h.upstream({"setupComplete": {}})
    assert [a["id"] for a in h.outputs] == ["c1"]
    assert "goAway" not in seen_by_client(h) and seen_by_client(h).count("setupComplete") == 1


def test_without_resumption_in_the_clients_setup_the_go_away_is_the_clients() -> None:
    h = session({"model": SETUP["model"]})
    h.upstream(GO_AWAY)
    assert "goAway" in seen_by_client(h) and going_away(h) == []
    assert h.engine.resumption_setup(h.now)[0] is None
