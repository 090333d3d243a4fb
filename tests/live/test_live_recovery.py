"""A GPT-Live sideband that drops mid-tool (`relay attach --dialect live`, what `relay sidecar`
runs per call): the relay re-attaches to the same session at `/v1/live/sessions/{id}/attach`
(bounded attempts, backing off), and the answers owed are given once, on the new sideband; and,
with a shared store, an answer decided before another replica took the lease never goes up
(the lease fences a Live sideband's outputs and appends as it fences Realtime's).

The mock drops the sideband's socket without a close frame (`mock.live_calls.drop`) while the
tool runs; the backoff's `sleep` is the test's, so nothing waits on a clock: it records the waits
and, where the test says so, lets the handler finish while the relay is away."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from openai import AsyncOpenAI

from relay.edges.sideband import Sidecar, SidecarConfig
from relay.engine import CallState
from relay.mock import MockUpstream
from relay.mock.live import LiveMockSession
from relay.store import open_store
from relay.tools import Delegation, ToolResult, delegate, tool
from tests.live.test_live_mock import SCRIPT, get_time
from tests.support.clients import TIMEOUT
from tests.support.hooks import returned
from tests.support.redis_server import redis_server
from tests.support.relays import SidecarTap, captured_logs

RESPONSES, CLIENT = "responses", "client"


class Gated:
    """A tool (`get_weather`) and a delegate whose handlers wait until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.opened = anyio.Event()

        @tool(name="get_weather")
        async def gated_weather(city: str) -> str:
            """Current weather in a city."""
            self.entered.set()
            await self.opened.wait()
            return f"sunny in {city}"

        @delegate(timeout=30)
        async def gated_assistant(delegation: Delegation) -> ToolResult:
            """Answers the caller from the transcript."""
            self.entered.set()
            await self.opened.wait()
            return ToolResult(result="forecast for Paris", message="It is sunny in Paris.")

        self.tool, self.delegate = gated_weather, gated_assistant

    def tools(self, mode: str) -> list[Any]:
        return [self.tool, get_time] if mode == RESPONSES else [self.delegate]


async def accepted_call(mock: MockUpstream, gated: Gated, mode: str) -> LiveMockSession:
    """A SIP call accepted as `relay sidecar` accepts one (the SDK's REST client, the tools in the
    delegation config)."""
    session = mock.live_calls.create()
    delegation: dict[str, Any] = {"type": CLIENT}
    if mode == RESPONSES:
        tools = [{"type": "function", "name": spec.name, "description": spec.description, "parameters": spec.parameters}
                 for spec in (gated.tool.__relay_tool__, get_time.__relay_tool__)]   # type: ignore[attr-defined]
        delegation = {"type": RESPONSES, "responses": {"model": "gpt-5.4", "tools": tools}}
    await sdk(mock).live.sessions.accept(session.id, session={"type": "live", "model": "gpt-live-1",
                                                               "delegation": delegation})   # type: ignore[typeddict-item]
    return session


@asynccontextmanager
async def attached(mock: MockUpstream, session: LiveMockSession, tools: list[Any],
                   sleep: Callable[[float], Any], **options: Any) -> AsyncIterator[tuple[Sidecar, SidecarTap]]:
    tap = SidecarTap()
    config = SidecarConfig(tools=tools, upstream=mock.url, dialect="live", api_key="sk-test", **options)
    sidecar = Sidecar(session.id, config, tap=tap, sleep=sleep)
    async with anyio.create_task_group() as group:
        group.start_soon(sidecar.run)
        await tap.wait_for("upstream>relay", lambda e: e["type"] == "session.started")
        yield sidecar, tap
        await sidecar.stop()


def answers(mock: MockUpstream, session: LiveMockSession) -> list[tuple[int, str, str]]:
    """What answered a relay call at the mock: (connection, type, the call or delegation id)."""
    found = []
    for record in mock.received:
        event = record.event
        if record.session_id != session.id:
            continue
        if event["type"] == "response.item.create":
            found.append((record.connection, event["type"], event["item"]["call_id"]))
        elif event["type"] in ("session.thinking.append", "session.commentary.append"):
            found.append((record.connection, event["type"], event["delegation_id"]))
    return found


def sdk(mock: MockUpstream) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="sk-test", base_url=mock.rest_url, max_retries=0)


def sideband_lines(logs: Any) -> list[tuple[str, str, str | None]]:
    """The sidecar's log lines about the call: (level, message, the reason of a `call ended`),
    each naming the session by `live_session_id`, never by Realtime's `realtime_call_id`."""
    found = []
    for line in map(json.loads, logs.getvalue().splitlines()):
        if line["logger"] == "relay.sidecar":
            assert "live_session_id" in line and "realtime_call_id" not in line, line
            found.append((line["level"], line["msg"], line.get("reason") if line["msg"] == "call ended" else None))
    return found


def creates(mock: MockUpstream) -> list[int]:
    return [record.connection for record in mock.received if record.event["type"] == "response.create"]


@pytest.mark.parametrize("mode", [RESPONSES, CLIENT])
@pytest.mark.parametrize("handler_finishes", ["while disconnected", "after re-attaching"])
async def test_the_sideband_drops_mid_tool_and_each_answer_arrives_once_after_re_attaching(
        mode: str, handler_finishes: str) -> None:
    gated = Gated()
    waits: list[float] = []
    async with MockUpstream(script=SCRIPT, dialect="live") as mock:
        session = await accepted_call(mock, gated, mode)

        async def backoff(seconds: float) -> None:
            waits.append(seconds)
            if handler_finishes == "while disconnected":
                engine = sidecar.engine
                assert engine is not None and not engine.upstream_connected
                gated_id = next(entry.call_id for entry in engine.calls if entry.name != "get_time")
                with returned(engine, "handler_finished", lambda call_id, *_: call_id == gated_id) as finished:
                    gated.opened.set()
                    with anyio.fail_after(TIMEOUT):
                        await finished.wait()
                # decided while away: it waits for the new sideband
                assert engine.ledger.get(gated_id).state is CallState.FINISHED  # type: ignore[union-attr]

        with captured_logs() as logs:
            async with attached(mock, session, gated.tools(mode), backoff) as (sidecar, tap):
                await mock.user_turn(session, "What's the weather in Paris?")
                with anyio.fail_after(TIMEOUT):
                    await gated.entered.wait()
                await mock.live_calls.drop(session)
                await tap.wait_for("upstream>relay", lambda e: e["type"] == "session.started", start=1)
                gated.opened.set()
                if mode == RESPONSES:
                    await mock.wait_for(lambda e: e["type"] == "response.create", TIMEOUT)
                else:
                    await mock.wait_for(lambda e: e["type"] == "session.commentary.append", TIMEOUT)
                await mock.live_calls.caller_audio(session, 3000)   # the model speaks what was answered
                assert sidecar.engine is not None
                entries = list(sidecar.engine.calls)
    assert len(session.connections) == 2 and waits == [0.2] and sidecar.reconnects == 1
    attach = f"/v1/live/sessions/{session.id}/attach"
    assert mock.handshakes == [(attach, None), (attach, None)], "a drop is re-attached"
    lines = sideband_lines(logs)
    assert ("warning", "sideband lost; reconnecting", None) in lines and ("info", "sideband reconnected", None) in lines
    assert "call ended" not in [msg for _, msg, _ in lines]
    assert all(entry.state is CallState.ANSWERED for entry in entries)
    got = answers(mock, session)
    if mode == RESPONSES:
        weather = next(entry.call_id for entry in entries if entry.name == "get_weather")
        time_call = next(entry.call_id for entry in entries if entry.name == "get_time")
        assert sorted(call_id for _, _, call_id in got) == sorted([time_call, weather]), "each call answered once"
        assert (1, "response.item.create", weather) in got, "the one owed at the drop: on the new sideband"
        assert creates(mock) == [1], "one create, on the new sideband, after the batch"
        assert "Here it is" in "".join(r.event["delta"] for r in mock.sent
                                       if r.event["type"] == "session.output_transcript.delta")
    else:
        (entry,) = entries
        assert got == [(1, "session.thinking.append", entry.call_id), (1, "session.commentary.append", entry.call_id)]
    assert not any(r.event["type"] == "error" for r in mock.sent), "the mock refused something"


# ---- with a shared store: the lease fences a Live sideband's answers -------------------------
@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server.url


@pytest.mark.parametrize("mode", [RESPONSES, CLIENT])
async def test_an_answer_decided_before_another_replica_took_the_lease_never_goes_up(
        mode: str, redis_url: str) -> None:
    gated = Gated()
    store = open_store(redis_url)
    await store.open()
    effects = aioredis.Redis.from_url(redis_url)
    try:
        async with MockUpstream(script=SCRIPT, dialect="live") as mock:
            session = await accepted_call(mock, gated, mode)

            async def backoff(seconds: float) -> None:
                """While the relay is away: the gated call is decided and its record written, then
                another replica takes the call."""
                assert sidecar.engine is not None
                entry = next(e for e in sidecar.engine.calls if e.name != "get_time")
                with returned(sidecar.runtime.write_ahead, "write",
                              lambda record: record.call_id == entry.call_id and record.phase == "decided") as kept:
                    gated.opened.set()
                    with anyio.fail_after(TIMEOUT):
                        await kept.wait()
                assert any(r.call_id == entry.call_id and r.phase == "decided"
                           for r in await store.session_records(session.id)), "written to the shared store"
                await effects.delete("relay:{" + session.id + "}:lease")
                assert await store.acquire(session.id, "another-replica", ttl=30) is not None
                owed.append(entry.call_id)

            owed: list[str] = []
            async with attached(mock, session, gated.tools(mode), backoff, store=redis_url,
                                lease_seconds=30) as (sidecar, tap):
                await mock.user_turn(session, "What's the weather in Paris?")
                with anyio.fail_after(TIMEOUT):
                    await gated.entered.wait()
                await mock.live_calls.drop(session)
                with anyio.fail_after(TIMEOUT):
                    await sidecar.ended.wait()
            assert sidecar.loop is not None and sidecar.loop.lease_lost == "a write was fenced"
            assert len(session.connections) == 2, "it re-attached, then found the call was another's"
            (call_id,) = owed
            assert [answer for answer in answers(mock, session) if answer[2] == call_id] == []
            assert creates(mock) == [], "nor was the batch continued"
    finally:
        await store.close()
        await effects.aclose()


async def test_a_call_hung_up_mid_tool_ends_the_sideband_and_its_late_answer_is_dropped() -> None:
    gated = Gated()
    waits: list[float] = []

    async def backoff(seconds: float) -> None:
        waits.append(seconds)

    with captured_logs() as logs:
        async with MockUpstream(script=SCRIPT, dialect="live") as mock:
            session = await accepted_call(mock, gated, RESPONSES)
            async with attached(mock, session, gated.tools(RESPONSES), backoff) as (sidecar, _):
                await mock.user_turn(session, "What's the weather in Paris?")
                with anyio.fail_after(TIMEOUT):
                    await gated.entered.wait()
                await sdk(mock).live.sessions.hangup(session.id)
                with anyio.fail_after(TIMEOUT):
                    await sidecar.ended.wait()
                gated.opened.set()   # the late result: nobody to give it to
                assert sidecar.engine is not None
                weather = next(entry for entry in sidecar.engine.calls if entry.name == "get_weather")
    assert sidecar.end is not None and (sidecar.end.by, sidecar.end.reason) == ("upstream", "call ended")
    assert waits == [] and sidecar.reconnects == 0, "session.closed said the call is over: no re-attach"
    assert mock.handshakes == [(f"/v1/live/sessions/{session.id}/attach", None)], "one attach, never another"
    lines = sideband_lines(logs)
    assert ("info", "call ended", "close_requested") in lines and lines[-1][1] == "session end"
    assert [line for line in lines if line[0] != "info"] == [], "an ended call is no warning"
    assert weather.outcome == "abandoned", "owed and unanswered when the call ended"
    assert weather.state is not CallState.ANSWERED
    assert weather.call_id not in [call_id for _, _, call_id in answers(mock, session)]
    assert creates(mock) == []
    closed = [r.event for r in mock.sent if r.event["type"] == "session.closed"]
    assert [e["reason"] for e in closed] == ["close_requested"]
