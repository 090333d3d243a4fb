"""Calls that outlive their relay: a `relay attach` subprocess owns a call (the mock's sideband
attach) with Redis as the store, and is killed (SIGKILL) or paused (SIGSTOP) while a tool runs;
a `relay sidecar` replica in the test's process, sharing the store, takes the call over. The
mock sees each call answered exactly once, and the tools' effects (counted in Redis by
idempotency key) are applied once."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from relay.dialects.openai import OPENAI
from relay.engine import CallState
from relay.edges.sidecar import INCOMING_CALL, SidecarServer, SidecarServerConfig, signed_headers
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.mock.session import MockSession
from relay.engine.records import Phase
from relay.store import CallStore, open_store
from relay.tools.sources import tool_registry
from tests.support.frames import said
from tests.support.processes import next_log_line, relay_process
from tests.store.conftest import Writes
from tests.support.relays import http_request, sidecar_on

TOOLS = Path(__file__).parent / "tools" / "effects.py"
PAUSING_TOOLS = Path(__file__).parent / "tools" / "pauses.py"   # pause an owner between two steps
SECRET = "whsec_dGVzdA=="
LEASE = 1.0
TIMEOUT = 20.0

SCRIPT = MockScript(
    rules=[Rule(match="refund", calls=[ToolCall(name="refund", arguments={"order": 7})]),
           Rule(match="book", calls=[ToolCall(name="book", arguments={"slot": "9am"})])],
    after_outputs=Reply(say="Done: {output}"),
)


async def accepted(mock: MockUpstream, tools_path: Path = TOOLS) -> tuple[str, MockSession]:
    call_id = mock.create_call()
    tools = OPENAI.tool_definitions(tool_registry([str(tools_path)]))
    response = await http_request("POST", f"{mock.rest_url}/realtime/calls/{call_id}/accept", {},
                                  json.dumps({"type": "realtime", "tools": tools}).encode())
    assert response.status_code == 200
    session = mock.find_session(call_id)
    assert session is not None
    return call_id, session


@asynccontextmanager
async def owner(mock: MockUpstream, call_id: str, redis_url: str, tools: Path = TOOLS,
                **env: str) -> AsyncIterator[Any]:
    """`relay attach` on the call in a subprocess (with `env` besides), once it holds the call's lease."""
    async with relay_process("attach", "--call-id", call_id, "--upstream", mock.url, "--tools", str(tools),
                             "--store", redis_url, "--lease-seconds", str(LEASE), "--log-format", "json",
                             env={"RELAY_TEST_REDIS": redis_url, **env}) as process:
        # it says "session start" once it holds the lease (relay/edges/sideband.py: hold, then serve)
        await next_log_line(process.stderr, lambda line: line["msg"] == "session start", [], TIMEOUT)
        assert await store_holds(redis_url, call_id)
        yield process


async def store_holds(redis_url: str, call_id: str) -> bool:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return bool(await client.exists("relay:{" + call_id + "}:lease"))
    finally:
        await client.aclose()


def replica_config(mock: MockUpstream, redis_url: str, **options: Any) -> SidecarServerConfig:
    return SidecarServerConfig(**{
        "tools": [str(TOOLS)], "upstream": mock.url, "dialect": "openai", "api_key": "sk-test", "store": redis_url,
        "lease_seconds": LEASE, "scan_seconds": 0.05, "webhook_secret": SECRET, "rest_base": mock.rest_url,
        "port": 0, **options})


@asynccontextmanager
async def replica(mock: MockUpstream, redis_url: str, tools: Path = TOOLS) -> AsyncIterator[SidecarServer]:
    """A `relay sidecar` replica sharing the store, in this process, looking for orphans. It stops
    at the test's end without offering its calls to a peer (drain_seconds 0): there is none, and
    the offer would wait out the default drain, 10 s, for nobody (the hand-off has its own test:
    test_a_draining_replica_hands_its_call_to_a_peer_without_waiting_for_it_to_end)."""
    server = SidecarServer(replica_config(mock, redis_url, tools=[str(tools)], drain_seconds=0.0))
    async with server.running():
        yield server


async def started_run(effects: aioredis.Redis) -> str:
    """Wait for a tool run to start; which tool and pid."""
    found = await effects.blpop(["started"], timeout=TIMEOUT)
    assert found is not None, "no tool run started"
    return found[1].decode()


def outputs(mock: MockUpstream, call_id: str) -> list[str]:
    return [r.event["item"]["output"] for r in mock.received
            if r.event.get("type") == "conversation.item.create"
            and r.event["item"].get("type") == "function_call_output" and r.event["item"]["call_id"] == call_id]


async def answered(mock: MockUpstream, session: MockSession) -> tuple[str, dict[str, Any]]:
    """The call the model made, once its output came and the model spoke about it."""
    done = await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "Done:" in said(e),
                                    timeout=TIMEOUT, session=session)
    [call] = model_calls(mock, session)
    return call, done.event


def model_calls(mock: MockUpstream, session: MockSession) -> list[str]:
    """The call ids of the function calls the model made in the session (each once, though every
    connection of the session was sent it)."""
    return list(dict.fromkeys(
        r.event["item"]["call_id"] for r in mock.sent if r.session_id == session.id
        and r.event.get("type") == "response.output_item.done" and r.event["item"].get("type") == "function_call"))


async def killed_mid_tool(mock: MockUpstream, redis_url: str, effects: aioredis.Redis, ask: str,
                          tool: str, *, release: bool = False) -> MockSession:
    """An owner in a subprocess runs `tool` for the call it owns and is killed (SIGKILL) while
    the tool runs (having let go of its hold first, with `release`, so a run after it ends);
    the call's session."""
    call_id, session = await accepted(mock)
    await effects.set("hold", 1)
    async with owner(mock, call_id, redis_url) as process:
        await mock.user_turn(session, ask)
        assert (await started_run(effects)).startswith(f"{tool} {process.pid}")
        if release:
            await effects.delete("hold")
        process.send_signal(signal.SIGKILL)
        await process.wait()
    return session


async def test_a_killed_owner_s_non_idempotent_call_is_refused_once_not_run_again(
        redis_url: str, effects: aioredis.Redis) -> None:
    async with MockUpstream(script=SCRIPT) as mock, replica(mock, redis_url) as peer:
        session = await killed_mid_tool(mock, redis_url, effects, "Please refund my order", "refund")
        tool_call_id, done = await answered(mock, session)
        [output] = outputs(mock, tool_call_id)
        assert "not retried" in output and "error" in json.loads(output)
        assert await effects.get("effects:refund:7") == b"1"
        assert await effects.llen("started") == 0          # never run again
        assert session.call_id in peer.calls
        health = peer.health()
        assert health["handovers"]["takeovers"] == 1 and health["handovers"]["calls_refused_after_takeover"] == 1
        assert health["store"]["kind"] == "redis" and not health["store"]["degraded"]
        assert health["store"]["write_ms_p50"] is not None
        metrics = peer.metrics.render()
        assert 'relay_handovers_total{kind="takeover"} 1.0' in metrics
        assert 'relay_calls_after_takeover_total{fate="refused"} 1.0' in metrics
        assert "relay_store_write_seconds_count" in metrics


async def test_a_killed_owner_s_keyed_call_is_run_again_with_its_key_and_applied_once(
        redis_url: str, effects: aioredis.Redis) -> None:
    async with MockUpstream(script=SCRIPT) as mock, replica(mock, redis_url) as peer:
        session = await killed_mid_tool(mock, redis_url, effects, "Please book me in", "book", release=True)
        tool_call_id, done = await answered(mock, session)
        assert outputs(mock, tool_call_id) == ["booked 9am"]
        assert (await started_run(effects)).startswith(f"book {os.getpid()}")   # run again, here
        assert await effects.get("effects:book") == b"1"                        # applied once
        assert peer.runtime.handovers.calls["retried"] == 1


async def test_a_paused_owner_that_lost_its_lease_sends_no_output_and_runs_no_handler(
        redis_url: str, effects: aioredis.Redis) -> None:
    async with MockUpstream(script=SCRIPT) as mock, replica(mock, redis_url) as peer:
        call_id, session = await accepted(mock)
        await effects.set("hold", 1)
        async with owner(mock, call_id, redis_url) as process:
            await mock.user_turn(session, "Please refund my order")
            assert await started_run(effects) == f"refund {process.pid}"
            process.send_signal(signal.SIGSTOP)          # paused past its lease, mid-tool
            refund_call, _ = await answered(mock, session)
            assert peer.runtime.handovers.takeovers == 1
            await effects.delete("hold")
            sent = len(mock.sent)
            await mock.user_turn(session, "And book me in")   # a call the paused owner sees on resuming
            await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "booked" in said(e),
                                     timeout=TIMEOUT, session=session, start=sent)
            assert await started_run(effects) == f"book {os.getpid()}"
            process.send_signal(signal.SIGCONT)
            await effects.rpush(f"release:{process.pid}", 1)   # its refund run ends now
            with anyio.fail_after(TIMEOUT):
                await process.wait()
            log = (await process.stderr.read()).decode()
        calls = model_calls(mock, session)
        assert len(calls) == 2
        for made in calls:
            assert len(outputs(mock, made)) == 1
        assert "not retried" in outputs(mock, refund_call)[0]
        assert await effects.llen("started") == 0          # no handler ran in the resumed owner
        assert await effects.get("effects:refund:7") == b"1"
        lines = list(map(json.loads, log.splitlines()))
        lost = [line for line in lines if line["msg"].startswith("lease lost")]
        assert len(lost) == 1, log
        # its refund call is the peer's to answer, which it did: never logged "abandoned"
        told = [line["outcome"] for line in lines if line["msg"] == "tool call" and line.get("call_id") == refund_call]
        assert "abandoned" not in told, told


async def test_a_call_an_owner_stops_on_losing_its_lease_is_logged_as_handed_to_the_peer(
        redis_url: str, effects: aioredis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="relay.sidecar")
    async with MockUpstream(script=SCRIPT) as mock:
        call_id, session = await accepted(mock)
        await effects.set("hold", 1)
        async with sidecar_on(mock, call_id, [str(TOOLS)], store=redis_url, lease_seconds=LEASE) as (sidecar, _):
            await mock.user_turn(session, "Please book me in")
            assert (await started_run(effects)).startswith("book ")
            await effects.delete("relay:{" + call_id + "}:lease")   # another replica takes the call
            store = open_store(redis_url)
            assert await store.acquire(call_id, "another-replica", ttl=30) is not None
            await store.close()
            assert sidecar.lease is not None
            with anyio.fail_after(TIMEOUT):
                await sidecar.lease.lost.wait()                    # its next renewal is refused
            await effects.rpush(f"release:{os.getpid()}", 1)      # the book run's thread may end now
            with anyio.fail_after(TIMEOUT):
                await sidecar.ended.wait()
    told = [record for record in caplog.records if record.getMessage() == "tool call"]
    assert [getattr(record, "outcome", None) for record in told] == ["handed_to_peer"]
    assert "another replica answers it" in getattr(told[0], "reason", "")


async def test_a_draining_replica_hands_its_call_to_a_peer_without_waiting_for_it_to_end(
        redis_url: str, effects: aioredis.Redis) -> None:
    async with MockUpstream(script=SCRIPT) as mock, replica(mock, redis_url) as peer:
        call_id = mock.create_call()
        session = mock.find_session(call_id)
        assert session is not None
        draining = SidecarServer(replica_config(mock, redis_url, drain_seconds=TIMEOUT))
        async with anyio.create_task_group() as group:
            await group.start(draining.run)
            body = json.dumps({"type": INCOMING_CALL, "data": {"call_id": call_id}}).encode()
            headers = signed_headers(SECRET, body, webhook_id="wh_1", timestamp=int(time.time()))
            assert (await http_request("POST", draining.url, headers, body)).status_code == 200
            with anyio.fail_after(TIMEOUT):
                await draining.calls[call_id].attached.wait()
            await mock.user_turn(session, "Please book me in")
            booked, _ = await answered(mock, session)
            draining.request_stop()       # the call goes on: it is handed to the peer, not waited for
        assert draining.runtime.handovers.handoffs == 1 and len(draining.runtime.handovers.handoff_seconds) == 1
        assert 'relay_handovers_total{kind="handoff"} 1.0' in draining.metrics.render()
        assert call_id in peer.calls and peer.runtime.handovers.takeovers == 1
        sent = len(mock.sent)
        await mock.user_turn(session, "Now refund my order")
        await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "refunded" in said(e),
                                 timeout=TIMEOUT, session=session, start=sent)
        refund_call = next(call for call in model_calls(mock, session) if call != booked)
        assert outputs(mock, booked) == ["booked 9am"] and outputs(mock, refund_call) == ["refunded order 7"]
        assert [await effects.lpop("started") for _ in range(2)] == [
            f"book {os.getpid()}".encode(), f"refund {os.getpid()}".encode()]
        assert peer.runtime.handovers.calls == {"retried": 0, "refused": 0, "answered": 0, "followed_up": 0}


async def test_an_orphaned_call_that_ended_meanwhile_is_unlisted_by_the_replica_that_finds_it(
        redis_url: str, effects: aioredis.Redis) -> None:
    store = open_store(redis_url)
    try:
        async with MockUpstream(script=SCRIPT) as mock, replica(mock, redis_url) as peer:
            found: list[Any] = []
            attached = anyio.Event()
            attach = peer.fleet.attach

            def taking(call_id: str) -> None:   # the replica's takeover of what its scan finds
                attach(call_id)
                found.append(peer.calls[call_id])
                attached.set()

            peer.fleet.attach = taking
            assert await store.acquire("rtc_gone", "a-dead-replica", ttl=0.001, target="rtc_gone") is not None
            with anyio.fail_after(TIMEOUT):
                await attached.wait()
                await found[0].ended.wait()   # the mock has no such call (404): unlisted, then ended
        assert [sidecar.call_id for sidecar in found] == ["rtc_gone"]
        assert await effects.hget("relay:sessions", "rtc_gone") is None
        assert await store.orphans() == []
    finally:
        await store.close()


async def test_an_output_decided_before_the_lease_moved_does_not_go_up_after(
        redis_url: str, effects: aioredis.Redis) -> None:
    held_call = MockScript(rules=[Rule(match="book", calls=[
        ToolCall(name="book", arguments={"slot": "9am"}, hold_after=True)])], after_outputs=Reply(say="Done: {output}"))
    async with MockUpstream(script=held_call) as mock:
        call_id, session = await accepted(mock)
        async with sidecar_on(mock, call_id, [str(TOOLS)], store=redis_url, lease_seconds=30) as (sidecar, _):
            writes = Writes(sidecar.runtime.write_ahead)
            await mock.user_turn(session, "Please book me in")
            assert (await started_run(effects)).startswith("book ")

            async def decided() -> bool:   # its output waits for the response's end
                return any(entry.state is CallState.FINISHED for entry in sidecar.engine.ledger)

            await writes.until(decided, timeout=TIMEOUT)   # the decided record is written as it is decided
            await effects.delete("relay:{" + call_id + "}:lease")   # another replica takes the call
            store = open_store(redis_url)
            assert await store.acquire(call_id, "another-replica", ttl=30) is not None
            await store.close()
            mock.release(session)
            with anyio.fail_after(TIMEOUT):
                await sidecar.ended.wait()
            assert sidecar.loop is not None and sidecar.loop.lease_lost == "a write was fenced"
        [made] = model_calls(mock, session)
        assert outputs(mock, made) == []


async def phase_of(store: CallStore, session_id: str, call_id: str, phase: Phase) -> bool:
    return any(kept.call_id == call_id and kept.phase is phase for kept in await store.session_records(session_id))


def follow_up_creates(mock: MockUpstream, session: MockSession) -> list[dict[str, Any]]:
    """The relays' follow-up `response.create`s the mock received in the session."""
    return [r.event for r in mock.received if r.session_id == session.id and r.event.get("type") == "response.create"
            and (r.event.get("response") or {}).get("metadata", {}).get("relay") == "follow_up"]


LOOKED_UP = MockScript(rules=[Rule(match="look", calls=[ToolCall(name="lookup", arguments={"order": 7})])],
                       after_outputs=Reply(say="Done: {output}"))


async def killed_paused(mock: MockUpstream, redis_url: str, effects: aioredis.Redis, pause: str,
                        said_key: str) -> tuple[str, MockSession, str]:
    """An owner in a subprocess that pauses at `pause` (tests/store/tools/pauses.py) as it answers
    the model's call, and is SIGKILLed there; the session's call id, the session, the call."""
    call_id, session = await accepted(mock, PAUSING_TOOLS)
    await effects.set(pause, 1)
    async with owner(mock, call_id, redis_url, PAUSING_TOOLS, RELAY_TEST_PAUSES="1") as process:
        await mock.user_turn(session, "Please look up my order")
        found = await effects.blpop([said_key], timeout=TIMEOUT)
        assert found is not None, f"the owner never paused at {pause}"
        paused_call, pid = found[1].decode().split()
        assert pid == str(process.pid)
        await effects.delete(pause)
        if pause == "pause_follow_up":   # its output went up before it paused
            await mock.wait_for(lambda e: e["type"] == "conversation.item.create"
                                and e["item"].get("call_id") == paused_call, timeout=TIMEOUT)
        assert follow_up_creates(mock, session) == []
        process.send_signal(signal.SIGKILL)
        await process.wait()
    return call_id, session, paused_call


async def test_an_output_marked_sent_that_never_left_a_killed_owner_is_sent_once_by_the_survivor(
        redis_url: str, effects: aioredis.Redis) -> None:
    async with MockUpstream(script=LOOKED_UP) as mock, replica(mock, redis_url, PAUSING_TOOLS) as peer:
        writes = Writes(peer.runtime.write_ahead)
        call_id, session, lost = await killed_paused(mock, redis_url, effects, "pause_output", "output_marked")
        assert outputs(mock, lost) == []           # marked "sent", never sent
        made, done = await answered(mock, session)
        assert made == lost and "Done: order 7 ships today" in said(done)
        assert outputs(mock, made) == ["order 7 ships today"]   # once, as the old owner's item
        assert len(follow_up_creates(mock, session)) == 1
        assert peer.runtime.handovers.calls["answered"] == 1
        store = open_store(redis_url)
        try:   # the survivor's output was echoed: delivered
            await writes.until(lambda: delivered(store, call_id, made), timeout=TIMEOUT)
        finally:
            await store.close()


async def delivered(store: CallStore, session_id: str, call_id: str) -> bool:
    return any(kept.call_id == call_id and kept.delivered for kept in await store.session_records(session_id))


async def test_a_follow_up_a_killed_owner_owed_is_sent_once_by_the_replica_that_takes_over(
        redis_url: str, effects: aioredis.Redis) -> None:
    async with MockUpstream(script=LOOKED_UP) as mock, replica(mock, redis_url, PAUSING_TOOLS) as peer:
        writes = Writes(peer.runtime.write_ahead)
        call_id, session, owed_call = await killed_paused(mock, redis_url, effects, "pause_follow_up",
                                                          "follow_up_owed")
        made, done = await answered(mock, session)
        assert made == owed_call and "Done: order 7 ships today" in said(done)
        # the survivor did not know the output was delivered (the owner paused before its echo was
        # recorded): it sent it again as the same item, and the mock refused the duplicate
        assert outputs(mock, made) == ["order 7 ships today"] * 2
        assert [e["error"]["code"] for e in sent_errors(mock, session)] == ["duplicate_item_id"]
        [create] = follow_up_creates(mock, session)
        assert create["response"]["metadata"]["call_ids"] == made
        assert peer.runtime.handovers.takeovers == 1
        store = open_store(redis_url)
        try:   # the survivor's "followed_up" went ahead of its create
            await writes.until(lambda: phase_of(store, call_id, made, Phase.FOLLOWED_UP), timeout=TIMEOUT)
        finally:
            await store.close()


def sent_errors(mock: MockUpstream, session: MockSession) -> list[dict[str, Any]]:
    return [r.event for r in mock.sent if r.session_id == session.id and r.event.get("type") == "error"]
