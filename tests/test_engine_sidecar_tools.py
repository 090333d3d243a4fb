"""A sidecar that declares its tools (`relay attach --declare-tools`) keeps them in the session:
after the other party's `session.update` replaces the tools, and after a reconnect whose new
socket's `session.created` shows a declaration the drop lost. Fake clock, the mock in-process."""

from __future__ import annotations

import json
from typing import Any

from relay.dialects import AZURE, XAI
from relay.engine import EngineConfig
from tests.support.engine import EngineDriver
from tests.support.local_mock import OTHER
from tests.support.tools import get_weather_data

SHOW_MAP = {"type": "function", "name": "show_map", "description": "Show a city on the caller's screen.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}


def sidecar(**options: Any) -> EngineDriver:
    driver = EngineDriver([get_weather_data], config=EngineConfig(mode="sidecar", declare_tools=True, strict=True),
                          **options)
    driver.connect()
    return driver


def others_update(driver: EngineDriver, session: dict[str, Any]) -> None:
    """The other party (the caller's app, on the primary connection) updates the session; the
    relay sees the `session.updated` every connection is sent."""
    body = {"type": "realtime", **session} if driver.dialect.wire == "ga" and driver.dialect is not XAI else session
    driver.upstream(driver.mock.receive(json.dumps({"type": "session.update", "session": body}), origin=OTHER))
    assert driver.mock.errors == []


def names(update: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in update["session"]["tools"]]


def session_tools(driver: EngineDriver) -> list[str]:
    return [tool["name"] for tool in driver.mock.session.config["tools"]]


def test_the_other_partys_update_that_drops_the_relays_tools_has_them_added_back() -> None:
    driver = sidecar()
    assert [names(update) for update in driver.sent_of("session.update")] == [["get_weather"]]
    assert session_tools(driver) == ["get_weather"]
    # the caller's app sets its own tools: `tools` replaces the list, the relay's go with it
    others_update(driver, {"tools": [SHOW_MAP]})
    assert [names(update) for update in driver.sent_of("session.update")] == [["get_weather"], ["show_map", "get_weather"]]
    assert session_tools(driver) == ["show_map", "get_weather"]
    # an update that keeps them (or says nothing of tools) is left alone
    others_update(driver, {"instructions": "Be brief."})
    assert len(driver.sent_of("session.update")) == 2 and driver.to_client == []


def test_a_declaration_the_drop_lost_is_made_again_on_the_new_socket() -> None:
    driver = EngineDriver([get_weather_data], config=EngineConfig(mode="sidecar", declare_tools=True, strict=True),
                          deliver=False)
    driver.connect()
    assert len(driver.sent_of("session.update")) == 1
    driver.undelivered.clear()   # sent as the socket dropped: the server never had it
    driver.disconnect()
    driver.reconnect()
    driver.deliver = True
    driver.connect()   # the new socket's opening: the session as it is, without the relay's tools
    assert [names(update) for update in driver.sent_of("session.update")] == [["get_weather"], ["get_weather"]]
    assert session_tools(driver) == ["get_weather"]
    driver.connect()   # a later reconnect that finds them there declares nothing
    assert len(driver.sent_of("session.update")) == 2


def test_on_xai_and_azure_too() -> None:
    for dialect in (XAI, AZURE):
        driver = sidecar(dialect=dialect)
        others_update(driver, {"tools": [SHOW_MAP]})
        assert session_tools(driver) == ["show_map", "get_weather"], dialect


def test_an_update_applied_before_the_relays_own_declaration_sends_nothing_more() -> None:
    driver = EngineDriver([get_weather_data], config=EngineConfig(mode="sidecar", declare_tools=True, strict=True),
                          deliver=False)
    driver.connect()
    others_update(driver, {"instructions": "Be brief."})   # its `session.updated` shows no relay tools yet
    assert len(driver.sent_of("session.update")) == 1
    driver.flush()   # the relay's declaration lands
    assert session_tools(driver) == ["get_weather"] and len(driver.sent_of("session.update")) == 1


def test_the_other_partys_update_that_crossed_the_relays_declaration_is_restored() -> None:
    """The caller's app sets its tools while the relay's declaration, built on the tools before,
    is on its way: the server applies the app's first, then the relay's, which replaces them.
    The relay saw the app's tools in between and declares again with them."""
    driver = EngineDriver([get_weather_data], config=EngineConfig(mode="sidecar", declare_tools=True, strict=True),
                          deliver=False)
    driver.connect()
    others_update(driver, {"tools": [SHOW_MAP]})   # applied before the relay's declaration
    assert len(driver.sent_of("session.update")) == 1
    driver.flush()   # the relay's lands: the app's tool is gone
    driver.deliver = True
    driver.flush()
    assert [names(update) for update in driver.sent_of("session.update")] == [["get_weather"], ["show_map", "get_weather"]]
    assert session_tools(driver) == ["show_map", "get_weather"]
