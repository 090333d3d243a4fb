"""The relay on either event loop (`--loop auto|asyncio|uvloop`): sessions complete on uvloop's
loop as on asyncio's, whichever the test run uses (RELAY_TEST_LOOP), and `--loop` picks the loop
it names."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from relay.edges.process import event_loop_factory, run_in_loop
from relay.errors import UnusableInput
from relay.mock import MockUpstream
from tests.support.clients import realtime_client
from tests.support.keys import PROVIDER_KEY
from tests.support.processes import TEST_LOOP
from tests.support.relays import relay_for, weather_turn
from tests.support.tools import WEATHER_SCRIPT, get_weather

uvloop = pytest.importorskip("uvloop")


async def sessions_through_the_relay(count: int) -> list[tuple[str, int]]:
    """`count` sessions through `relay serve` to the mock, each a tool call and its answer; how
    each ended (who closed, with which code)."""
    ends = []
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, tools=[get_weather]) as server:
        for _ in range(count):
            async with realtime_client(server) as client:
                assert "sunny in Paris" in json.dumps(await weather_turn(client))
                [session] = server.sessions.values()
            end = await asyncio.wait_for(session.wait_closed(), 5)
            ends.append((end.by, end.code))
    return ends


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_sessions_complete_on_either_event_loop(loop: str) -> None:
    """On uvloop, whose transports look a protocol's `data_received` up once, the client's frames
    once stalled in the handshake's probe reader: no event went either way after
    `session.created`, and the close never came through. Short frames show it (a frame without
    a newline byte stayed there): several sessions of a few short frames each."""
    def running_loop_kind() -> type:
        return type(asyncio.get_running_loop())

    async def scenario() -> tuple[type, list[tuple[str, int]]]:
        return running_loop_kind(), await sessions_through_the_relay(4)

    kind, ends = run_in_loop(scenario, loop)
    assert (kind is uvloop.Loop) == (loop == "uvloop")
    assert ends == [("client", 1000)] * 4


def test_loop_names_the_event_loop_it_runs() -> None:
    assert event_loop_factory("uvloop") is uvloop.new_event_loop
    assert event_loop_factory("auto") is uvloop.new_event_loop      # installed: auto takes it
    assert event_loop_factory("asyncio") is asyncio.SelectorEventLoop
    with pytest.raises(UnusableInput, match="--loop takes"):
        event_loop_factory("trio")


def test_loop_uvloop_without_uvloop_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)   # as if it were not installed
    with pytest.raises(UnusableInput, match=r"realtime-relay\[fast\]"):
        event_loop_factory("uvloop")
    assert event_loop_factory("auto") is asyncio.new_event_loop


async def test_the_test_run_is_on_the_loop_it_says() -> None:
    """RELAY_TEST_LOOP=uvloop (CI's second pass) puts the async tests on uvloop's loop."""
    assert isinstance(asyncio.get_running_loop(), uvloop.Loop) == (TEST_LOOP == "uvloop")
