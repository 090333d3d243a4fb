"""Scripted GPT-Live conversations on virtual time (`relay.testing.Script(...).start(dialect="live")`):
the same script as on the other wires, played by the GPT-Live mock in process against the relay's
real engine and tools, in each delegation mode; the caller's audio keeps the session's timeline
moving as virtual time passes."""

from __future__ import annotations

import json

import pytest

from relay.mock import LiveOptions
from relay.offline.scripted_delegations import START_EPOCH, DelegatingSession
from relay.recording.format import UPSTREAM_TO_RELAY
from relay.testing import Script, Turn, call
from relay.tools import tool
from tests.live.test_live_mock import assistant, get_weather

WEATHER = Script(Turn(say="Let me check.", calls=[call("get_weather", city="Paris"), call("get_time", city="Paris")]))
MAP = Script(Turn(calls=[call("get_weather", city="Paris"), call("show_map", city="Paris")]))
ASKED = Script(Turn(say="Let me look that up.", calls=[call("get_weather", city="Paris")]))


@tool
async def get_time(city: str) -> str:
    """The local time in a city (takes a virtual second)."""
    import asyncio
    await asyncio.sleep(1)
    return f"noon in {city}"


def show_map(city: str) -> str:
    """Show a map of a city (the caller's own tool)."""
    return f"map of {city} shown"


def test_responses_delegation_runs_each_call_once_and_continues_the_batch_once() -> None:
    with WEATHER.start([get_weather, get_time], dialect="live") as session:
        assert isinstance(session, DelegatingSession)
        session.user("What's the weather in Paris?")
        session.advance(4)
    timeline = session.timeline
    assert sorted((c.name, c.by) for c in timeline.calls()) == [("get_time", "relay"), ("get_weather", "relay")]
    outputs = {o.name: o for o in timeline.outputs()}
    assert outputs["get_weather"].text == "sunny in Paris" and outputs["get_time"].text == "noon in Paris"
    assert outputs["get_time"].t >= 1.0, "the tool's own sleep is virtual time"
    (follow_up,) = timeline.of("follow_up")
    assert follow_up.index > max(o.index for o in outputs.values())
    assert any("noon in Paris" in (s.text or "") for s in timeline.of("spoken")), "the answer is spoken"
    session.check_invariants()
    session.expect().next_call("get_weather").output(contains="sunny")


def test_a_mixed_batch_waits_for_the_callers_output_and_gets_one_create() -> None:
    with MAP.start([get_weather], dialect="live", client_tools=[show_map]) as session:
        session.user("Show me Paris")
        session.advance(4)
    timeline = session.timeline
    assert sorted((c.name, c.by) for c in timeline.calls()) == [("get_weather", "relay"), ("show_map", "client")]
    assert sorted((o.name, o.by) for o in timeline.outputs()) == [("get_weather", "relay"), ("show_map", "client")]
    assert len(timeline.of("create")) == 1 and timeline.of("follow_up") == [], "the caller's create, held, went up once"
    session.check_invariants()


def test_client_delegation_is_answered_once_by_the_delegate_and_its_appends_are_placed() -> None:
    with ASKED.start([assistant], dialect="live", delegation="client") as session:
        session.user("What's the weather in Paris?")
        session.advance(3)
    timeline = session.timeline
    (delegation,) = timeline.calls()
    assert (delegation.name, delegation.by) == ("delegation", "relay")
    (answer,) = timeline.outputs()
    assert answer.text == "forecast for Paris It is sunny in Paris." and answer.status == "thinking+commentary"
    assert [a.status for a in timeline.of("appended")] == ["thinking", "commentary"]
    assert any("sunny in Paris" in (s.text or "") for s in timeline.of("spoken"))
    session.expect().next_call("delegation").output(contains="sunny")
    session.check_invariants()


def test_the_same_script_plays_the_same_session_each_time() -> None:
    def frames() -> list[str]:
        with WEATHER.start([get_weather, get_time], dialect="live") as session:
            session.user("What's the weather in Paris?")
            session.advance(4)
        return [f"{f.t:.3f} {f.direction} {f.raw}" for f in session.frames]

    assert frames() == frames()


def test_the_mocks_timestamps_are_read_from_the_virtual_clock() -> None:
    """`expires_at` and a forwarded response's `created_at` are the scripted start epoch plus
    virtual time, not the machine's clock: a run that crosses a second boundary is no different."""
    with WEATHER.start([get_weather, get_time], dialect="live") as session:
        session.user("What's the weather in Paris?")
        session.advance(4)
    events = [json.loads(f.raw) for f in session.frames if f.direction == UPSTREAM_TO_RELAY and f.raw]
    (started,) = [e for e in events if e["type"] == "session.started"]
    assert started["session"]["expires_at"] == START_EPOCH + LiveOptions().expires_in_s
    created = {e["event"]["response"]["created_at"] for e in events
               if e["type"] == "response.event" and "response" in e.get("event", {})}
    assert created and all(START_EPOCH <= t <= START_EPOCH + 4 for t in created)


def test_a_turn_ending_otherwise_than_done_is_refused() -> None:
    with pytest.raises(ValueError, match="cancels nothing"):
        Script(Turn(calls=[call("get_weather", city="Paris")], ends="cancelled")).start([get_weather], dialect="live")


def test_an_unused_turn_fails_in_strict_mode() -> None:
    with pytest.raises(AssertionError, match="never used"):
        with WEATHER.start([get_weather, get_time], dialect="live"):
            pass
