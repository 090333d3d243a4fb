"""GPT-Live's engine across a sideband's drop and re-attach to the same session (`relay attach`,
`relay sidecar`), on a fake clock: what the server sent while the sideband was away is lost, and
the relay is told of the drop and of the return (`upstream_disconnected` / `upstream_reconnected`).
Both cases were found by `relay explore` once it dropped GPT-Live's sideband too
(relay/offline/explore_live.py `reconnect`; tests/test_explore_reattach.py)."""

from __future__ import annotations

from relay.engine import EngineConfig
from relay.tools import Delegation, ToolResult, delegate, tool
from tests.live.driver import LiveDriver, call_item, delegation_created, function_tool, started

FILLER = "One moment, I am checking."


@tool
def get_weather(city: str) -> str:
    return "sunny"


@delegate(on_delay=(500, FILLER))
def slow(delegation: Delegation) -> ToolResult:
    return ToolResult(result="r")


def sidecar(*tools: object, delegation: dict[str, object]) -> LiveDriver:
    driver = LiveDriver(tools, config=EngineConfig(strict=True, mode="sidecar"))
    driver.upstream(started(delegation))
    return driver


def away(driver: LiveDriver) -> None:
    driver._act(driver.engine.upstream_disconnected(driver.now))


def back(driver: LiveDriver) -> None:
    driver._act(driver.engine.upstream_reconnected(driver.now))


def fillers(driver: LiveDriver) -> list[str]:
    return [e["delegation_id"] for e in driver.appends() if e["content"] == FILLER]


def test_a_backend_response_whose_end_the_drop_lost_is_over_at_the_return() -> None:
    """The backend response of call c1 ended (`response.completed`) while the sideband was away:
    at the return its output goes up, and the batch gets its one `response.create`. Before, the
    output waited for a `response.completed` that never came, and the call was never answered."""
    driver = sidecar(get_weather, delegation={"type": "responses", "responses": {"model": "gpt-5.4", "tools": []}})
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Paris"})], complete=False)
    away(driver)   # the response's end is sent while the sideband is away: lost
    driver.finish("c1", "sunny")
    assert driver.outputs() == [] and driver.sent_of("response.create") == []
    back(driver)
    assert [e["item"]["output"] for e in driver.outputs()] == ["sunny"]
    assert len(driver.sent_of("response.create")) == 1
    (entry,) = driver.engine.calls
    assert entry.state.value == "answered"
    driver.complete("item_1", "resp_1")   # had it ended after the return after all: nothing more goes up
    assert len(driver.outputs()) == 1 and len(driver.sent_of("response.create")) == 1


def test_a_call_still_running_at_the_return_is_answered_when_it_finishes() -> None:
    driver = sidecar(get_weather, delegation={"type": "responses", "responses": {"model": "gpt-5.4", "tools": []}})
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Rome"})], complete=False)
    away(driver)
    back(driver)
    assert driver.outputs() == [] and driver.sent_of("response.create") == []
    driver.finish("c1", "sunny")
    assert [e["item"]["output"] for e in driver.outputs()] == ["sunny"]
    assert len(driver.sent_of("response.create")) == 1


def test_a_delegates_filler_waits_for_the_sideband_and_is_said_on_its_return() -> None:
    """A filler due while the sideband is away goes up on its return while the delegate still
    works (before, it went up on the dropped connection and was lost)."""
    driver = sidecar(slow, delegation={"type": "client"})
    driver.upstream(delegation_created("item_d1"))
    away(driver)
    driver.advance(0.6)
    assert fillers(driver) == []
    driver.advance(3)
    back(driver)
    driver.advance(0)
    assert fillers(driver) == ["item_d1"]
    driver.finish("item_d1", ToolResult(result="slow", message="Here it is."))
    assert fillers(driver) == ["item_d1"]


def test_a_filler_whose_delegate_answered_while_away_is_never_said() -> None:
    driver = sidecar(slow, delegation={"type": "client"})
    driver.upstream(delegation_created("item_d1"))
    away(driver)
    driver.advance(0.6)
    driver.finish("item_d1", ToolResult(result="slow", message="Here it is."))
    back(driver)
    driver.advance(5)
    assert fillers(driver) == []
    assert [e["content"] for e in driver.appends()] == ["slow", "Here it is."]


def test_the_session_started_a_re_attach_brings_changes_nothing_owed() -> None:
    """A sideband is sent `session.started` as it attaches (GPT-LIVE.md 1.1), the re-attach's too:
    the session as it is, with the tools the relay declared on it. The call running across the
    re-attach is answered once, with one create, and the tools are not declared again."""
    declared = {"type": "responses", "responses": {"model": "gpt-5.4", "tools": [function_tool("get_weather")]}}
    driver = sidecar(get_weather, delegation={"type": "responses", "responses": {"model": "gpt-5.4", "tools": []}})
    updates = len(driver.sent_of("session.update"))
    assert updates == 1   # the relay's tools, declared on the sideband
    driver.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    driver.batch("item_1", "resp_1", [call_item("c1", "get_weather", {"city": "Rome"})], complete=False)
    away(driver)
    back(driver)
    driver.upstream(started(declared))
    driver.complete("item_1", "resp_1")
    driver.finish("c1", "sunny")
    assert [e["item"]["output"] for e in driver.outputs()] == ["sunny"]
    assert len(driver.sent_of("response.create")) == 1
    assert len(driver.sent_of("session.update")) == updates and driver.anomalies() == []


def test_a_delegate_running_across_a_re_attach_and_its_session_started_answers_once() -> None:
    driver = sidecar(slow, delegation={"type": "client"})
    driver.upstream(delegation_created("item_d1"))
    away(driver)
    back(driver)
    driver.upstream(started({"type": "client"}))
    driver.finish("item_d1", ToolResult(result="slow", message="Here it is."))
    driver.advance(1)
    assert [e["content"] for e in driver.appends()] == ["slow", "Here it is."]
    assert driver.anomalies() == []


def test_a_declaration_the_drop_lost_is_made_again_at_the_re_attach() -> None:
    """The relay's `session.update` declaring its tools went up just before the sideband dropped,
    and the session the re-attach shows has none of them: the relay declares them again (before,
    it counted them declared, and the model was never offered them)."""
    bare = {"type": "responses", "responses": {"model": "gpt-5.4", "tools": [function_tool("show_map")]}}
    driver = sidecar(get_weather, delegation=bare)
    away(driver)
    back(driver)
    driver.upstream(started(bare))
    first, again = driver.sent_of("session.update")
    assert again["session"] == first["session"]
    assert [tool["name"] for tool in again["session"]["delegation"]["responses"]["tools"]] == ["show_map", "get_weather"]
    driver.upstream(started({"type": "responses", "responses": {"model": "gpt-5.4", "tools": [
        function_tool("show_map"), function_tool("get_weather")]}}))   # a later re-attach, the tools there
    assert len(driver.sent_of("session.update")) == 2
