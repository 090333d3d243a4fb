"""GPT-Live sessions that outlive their relay: a `relay attach --dialect live` subprocess owns a
SIP call's session (the mock's sideband attach) with Redis as the store, and is killed (SIGKILL)
while its tool or delegate runs, or right after it decided or sent an answer; a `relay sidecar`
replica in the test's process, sharing the store, takes the session over. The mock sees each
owed call answered once at the most and each batch continued once, and the effects (counted in
Redis) are applied once; an answer marked sent that never left is not sent again (GPT-Live has no
id that would let the provider refuse a duplicate), and the survivor says so."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis
from openai import AsyncOpenAI

from relay.dialects.live import LIVE
from relay.edges.sidecar import SidecarServer, SidecarServerConfig
from relay.engine.records import CallRecord, Phase
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.mock.live import LiveMockSession
from relay.store import open_store
from relay.tools.sources import tool_registry
from tests.store.conftest import Writes
from tests.support.processes import next_log_line, relay_process

STORE_TOOLS = Path(__file__).parent / "tools"
EFFECTS = STORE_TOOLS / "effects.py"            # refund (not idempotent), book (takes the key)
DELEGATE = STORE_TOOLS / "live_delegate.py"     # a delegate that refunds (not idempotent)
PAUSES = STORE_TOOLS / "pauses.py"              # pause an owner between two steps
LEASE = 1.0
TIMEOUT = 20.0
SECRET = "whsec_dGVzdA=="
RESPONSES, CLIENT = "responses", "client"

SCRIPT = MockScript(rules=[Rule(match="refund", calls=[ToolCall(name="refund", arguments={"order": 7})])],
                    after_outputs=Reply(say="Done: {output}"))


async def accepted(mock: MockUpstream, mode: str) -> LiveMockSession:
    """A SIP call accepted with the tools in its Responses delegation (or client delegation)."""
    session = mock.live_calls.create()
    delegation: dict[str, Any] = {"type": CLIENT}
    if mode == RESPONSES:
        tools = [LIVE.function_tool(spec.name, spec.description, spec.parameters)
                 for spec in tool_registry([str(EFFECTS)])]
        delegation = {"type": RESPONSES, "responses": {"model": "gpt-5.4", "tools": tools}}
    sdk = AsyncOpenAI(api_key="sk-test", base_url=mock.rest_url, max_retries=0)
    await sdk.live.sessions.accept(session.id, session={"type": "live", "model": "gpt-live-1",
                                                       "delegation": delegation})   # type: ignore[typeddict-item]
    return session


def tools_of(mode: str) -> list[Path]:
    return [EFFECTS if mode == RESPONSES else DELEGATE, PAUSES]


@asynccontextmanager
async def owner(mock: MockUpstream, session: LiveMockSession, redis_url: str, mode: str) -> AsyncIterator[Any]:
    """`relay attach --dialect live` on the session in a subprocess, once it holds the lease."""
    tools = [arg for path in tools_of(mode) for arg in ("--tools", str(path))]
    async with relay_process("attach", "--dialect", "live", "--call-id", session.id, "--upstream", mock.url,
                             *tools, "--store", redis_url, "--lease-seconds", str(LEASE), "--log-format", "json",
                             env={"RELAY_TEST_REDIS": redis_url, "RELAY_TEST_PAUSES": "1"}) as process:
        await next_log_line(process.stderr, lambda line: line["msg"] == "session start", [], TIMEOUT)
        yield process


@asynccontextmanager
async def replica(mock: MockUpstream, redis_url: str, mode: str) -> AsyncIterator[SidecarServer]:
    """A `relay sidecar --dialect live` replica sharing the store, in this process."""
    server = SidecarServer(SidecarServerConfig(
        tools=[str(path) for path in tools_of(mode)], upstream=mock.url, dialect="live", api_key="sk-test",
        store=redis_url, lease_seconds=LEASE, scan_seconds=0.05, webhook_secret=SECRET, rest_base=mock.rest_url,
        port=0, responses_model="gpt-5.4", drain_seconds=0.0))
    async with server.running():
        yield server


async def killed(mock: MockUpstream, session: LiveMockSession, redis_url: str, effects: aioredis.Redis,
                 mode: str, *, pause: str | None = None, said_key: str = "") -> str:
    """The owner answers the caller's request and is SIGKILLed while its handler runs (or where
    it pauses, `pause`); the call or delegation it was answering."""
    await effects.set(pause or "hold", 1)
    async with owner(mock, session, redis_url, mode) as process:
        await mock.user_turn(session, "Please refund my order")
        if pause is None:
            found = await effects.blpop(["started"], timeout=TIMEOUT)
        else:
            found = await effects.blpop([said_key], timeout=TIMEOUT)
        assert found is not None, "the owner never got there"
        assert found[1].decode().endswith(str(process.pid))
        process.send_signal(signal.SIGKILL)
        await process.wait()
    await effects.delete(pause or "hold")
    made = [r.event for r in mock.sent if r.session_id == session.id and r.event["type"] == "session.delegation.created"]
    return made[0]["delegation"]["id"] if mode == CLIENT else next(iter(session.backend.calls))


def answers(mock: MockUpstream, session: LiveMockSession, call_id: str) -> list[dict[str, Any]]:
    """What the mock received that answers the call or delegation."""
    found = []
    for record in mock.received:
        event = record.event
        if record.session_id != session.id:
            continue
        if event["type"] == "response.item.create" and event["item"].get("call_id") == call_id:
            found.append(event)
        elif event["type"].endswith(".append") and event.get("delegation_id") == call_id:
            found.append(event)
    return found


async def record_of(redis_url: str, session_id: str, call_id: str) -> CallRecord | None:
    store = open_store(redis_url)
    try:
        return next((kept for kept in await store.session_records(session_id) if kept.call_id == call_id), None)
    finally:
        await store.close()


def creates(mock: MockUpstream, session: LiveMockSession) -> int:
    return sum(1 for r in mock.received if r.session_id == session.id and r.event["type"] == "response.create")


async def spoken(mock: MockUpstream, session: LiveMockSession, words: str) -> None:
    """The caller's audio keeps the timeline moving until the model said `words`."""
    with anyio.fail_after(TIMEOUT):
        while words not in "".join(r.event["delta"] for r in mock.sent if r.session_id == session.id
                                   and r.event["type"] == "session.output_transcript.delta"):
            await mock.live_calls.caller_audio(session, 500)
            await anyio.sleep(0)


@asynccontextmanager
async def taken_over(redis_url: str, effects: aioredis.Redis, mode: str, pause: str | None = None,
                     said_key: str = "") -> AsyncIterator[tuple[MockUpstream, LiveMockSession, SidecarServer, str]]:
    """A session whose owner was killed (`killed`), once the replica took it over: the mock, the
    session, the replica and the call or delegation the owner was answering."""
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, replica(mock, redis_url, mode) as peer:
        took_over = anyio.Event()
        counted = peer.runtime.handovers.on_count

        def count(kind: str, number: int) -> None:
            if counted is not None:
                counted(kind, number)
            if kind == "takeover":
                took_over.set()

        peer.runtime.handovers.on_count = count
        session = await accepted(mock, mode)
        call_id = await killed(mock, session, redis_url, effects, mode, pause=pause, said_key=said_key)
        with anyio.fail_after(TIMEOUT):
            await took_over.wait()
        yield mock, session, peer, call_id


@pytest.mark.parametrize("mode", [RESPONSES, CLIENT])
async def test_a_killed_owner_s_unfinished_live_call_is_answered_once_with_an_honest_failure(
        redis_url: str, effects: aioredis.Redis, mode: str) -> None:
    async with taken_over(redis_url, effects, mode) as (mock, session, peer, call_id):
        await spoken(mock, session, "Done:")
        got = answers(mock, session, call_id)
        if mode == RESPONSES:
            [output] = got
            assert "not retried" in output["item"]["output"]
            assert creates(mock, session) == 1 and session.backend.creates == 1
            assert await effects.get("effects:refund:7") == b"1"
        else:
            assert [e["type"] for e in got] == ["session.commentary.append"]
            assert "not retried" in got[0]["content"]
            assert await effects.get(f"effects:refund:{call_id}") == b"1"
        assert await effects.llen("started") == 0, "never run again"
        assert peer.runtime.handovers.takeovers == 1 and peer.runtime.handovers.calls["refused"] == 1
        assert not [r for r in mock.sent if r.session_id == session.id and r.event["type"] == "error"]


async def test_an_answer_decided_by_a_killed_owner_goes_up_once_from_the_survivor_without_a_second_run(
        redis_url: str, effects: aioredis.Redis) -> None:
    async with taken_over(redis_url, effects, CLIENT, "pause_decided", "output_decided") as (
            mock, session, peer, delegation):
        await spoken(mock, session, "Done:")
        assert [(e["type"], e["content"]) for e in answers(mock, session, delegation)] == [
            ("session.thinking.append", "order 7 refunded"),
            ("session.commentary.append", "Tell the caller order 7 is refunded.")]
        assert await effects.get(f"effects:refund:{delegation}") == b"1", "the delegate ran once, in the owner"
        assert peer.runtime.handovers.calls["answered"] == 1

        async def delivered() -> bool:   # the survivor's answer was acknowledged on the timeline
            kept = await record_of(redis_url, session.id, delegation)
            return kept is not None and kept.delivered

        await Writes(peer.runtime.write_ahead).until(delivered, timeout=TIMEOUT)


async def test_an_answer_marked_sent_that_never_left_a_killed_owner_is_not_sent_again(
        redis_url: str, effects: aioredis.Redis) -> None:
    async with taken_over(redis_url, effects, CLIENT, "pause_output", "output_marked") as (
            mock, session, peer, delegation):
        await mock.live_calls.caller_audio(session, 2000)
        # never twice: it may have been delivered, and nothing on the wire would refuse it again
        assert answers(mock, session, delegation) == []
        assert await effects.get(f"effects:refund:{delegation}") == b"1"
        [sidecar] = peer.calls.values()
        assert sidecar.adoption is not None and sidecar.adoption.unconfirmed == 1
        assert sidecar.adoption.decisions == {}


async def test_a_batch_s_follow_up_a_killed_owner_owed_is_sent_once_by_the_survivor(
        redis_url: str, effects: aioredis.Redis) -> None:
    async with taken_over(redis_url, effects, RESPONSES, "pause_follow_up", "follow_up_owed") as (
            mock, session, peer, call_id):
        await spoken(mock, session, "Done:")
        assert len(answers(mock, session, call_id)) == 1, "the output went up once, from the old owner"
        assert creates(mock, session) == 1 and session.backend.creates == 1
        assert peer.runtime.handovers.calls["followed_up"] == 1
        kept = await record_of(redis_url, session.id, call_id)
        assert kept is not None and kept.phase is Phase.FOLLOWED_UP


async def test_a_paused_live_owner_that_lost_its_lease_appends_nothing_when_it_resumes(
        redis_url: str, effects: aioredis.Redis) -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, replica(mock, redis_url, CLIENT) as peer:
        session = await accepted(mock, CLIENT)
        await effects.set("hold", 1)
        async with owner(mock, session, redis_url, CLIENT) as process:
            await mock.user_turn(session, "Please refund my order")
            found = await effects.blpop(["started"], timeout=TIMEOUT)
            assert found is not None and found[1].decode() == f"refund_desk {process.pid}"
            process.send_signal(signal.SIGSTOP)          # paused past its lease, mid-delegate
            # the survivor's honest failure (no caller audio meanwhile: the paused owner's sideband
            # would fill with it, and the mock waits on a socket nobody reads)
            failure = await mock.wait_for(lambda e: e["type"] == "session.commentary.append", TIMEOUT)
            delegation = failure.event["delegation_id"]
            assert peer.runtime.handovers.takeovers == 1
            process.send_signal(signal.SIGCONT)
            await effects.rpush(f"release:{process.pid}", 1)   # its delegate's run ends now
            with anyio.fail_after(TIMEOUT):
                await process.wait()
            log = (await process.stderr.read()).decode()
        got = answers(mock, session, delegation)
        assert len(got) == 1 and "not retried" in got[0]["content"], "the resumed owner appended nothing"
        assert {record.connection for record in mock.received if record.event in got} == {
            session.connections[-1].index}
        assert await effects.get(f"effects:refund:{delegation}") == b"1"
        lost = [line for line in map(json.loads, log.splitlines()) if line["msg"].startswith("lease lost")]
        assert len(lost) == 1, log

