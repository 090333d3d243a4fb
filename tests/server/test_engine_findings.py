"""Engine behaviour the proxy work ran into, fixed in the engine: kept as regression tests."""

from __future__ import annotations

import json

from relay.engine import EngineConfig
from tests.support.engine import EngineDriver
from tests.support.tools import get_weather


def test_the_relay_tools_are_declared_before_a_client_response_create_that_precedes_session_created() -> None:
    harness = EngineDriver([get_weather], config=EngineConfig(mode="proxy", strict=True))
    harness.client({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}]}})
    harness.client({"type": "response.create"})
    harness.connect()   # session.created arrives after the client's first events went upstream
    sent = [(e["type"], json.dumps(e.get("session", {}).get("tools", []))) for e in harness.sent]
    declared = next(i for i, (kind, tools) in enumerate(sent) if kind == "session.update" and "get_weather" in tools)
    first_create = next(i for i, (kind, _) in enumerate(sent) if kind == "response.create")
    assert declared < first_create
