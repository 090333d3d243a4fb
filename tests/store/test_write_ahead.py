"""The session loop writes the engine's records ahead of what they guard, and a store that fails
(unreachable at start, lost mid-session, slow) leaves sessions running, degraded: one log line,
an event for the metric, never a crash. In-memory sockets; a real redis-server where Redis is
the point."""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.engine import EngineConfig, OpenAIEngine
from relay.engine.records import CallRecord, Phase
from relay.session.loop import SessionLoop
from relay.store import MemoryStore, open_store
from relay.store.writeahead import WriteAhead
from relay.tools import tool
from tests.support.local_mock import LocalMock, model_call
from tests.support.peers import MemoryPeer
from tests.support.redis_server import free_port, redis_server

TIMEOUT = 10.0


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


class HeldStore(MemoryStore):
    """An asynchronous store whose writes of `phase` wait until the test lets them through."""

    synchronous = False

    def __init__(self, phase: Phase) -> None:
        super().__init__()
        self.phase = phase
        self.arrived = anyio.Event()
        self.let_through = anyio.Event()

    async def put(self, record: CallRecord, *, fence: int = 0) -> None:
        if record.phase is self.phase:
            self.arrived.set()
            await self.let_through.wait()
        self.put_now(record, fence=fence)


class SilentStore(MemoryStore):
    """A store that never answers a write (a slow or hung Redis)."""

    synchronous = False

    async def put(self, record: CallRecord, *, fence: int = 0) -> None:
        await anyio.sleep_forever()


def output_event(event: dict[str, Any]) -> bool:
    return event["type"] == "conversation.item.create" and event["item"]["type"] == "function_call_output"


async def run_session(write_ahead: WriteAhead, scenario: Any) -> SessionLoop:
    upstream = MemoryPeer()
    engine = OpenAIEngine([refund], config=EngineConfig(mode="sidecar", strict=True, declare_tools=False),
                          session_id="sess-1")
    loop = SessionLoop(engine, upstream=upstream, write_ahead=write_ahead)
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            await loop.started.wait()
            await scenario(LocalMock(), upstream)
            await upstream.feed(None)
    upstream.close_streams()
    return loop


async def ask_refund(mock: LocalMock, upstream: MemoryPeer, order: int = 7) -> dict[str, Any]:
    """A call of `refund` arrives; the output the relay sends for it."""
    for event in mock.respond([model_call("refund", json.dumps({"order": order}))]):
        await upstream.feed(json.dumps(event))
    return await upstream.wait_for(lambda e: output_event(e) and f"refunded {order}" in e["item"]["output"])


async def test_an_output_waits_until_its_decided_record_is_written() -> None:
    store = HeldStore(Phase.DECIDED)

    async def scenario(mock: LocalMock, upstream: MemoryPeer) -> None:
        for event in mock.connect():
            await upstream.feed(json.dumps(event))
        for event in mock.respond([model_call("refund", '{"order": 7}')]):
            await upstream.feed(json.dumps(event))
        await store.arrived.wait()
        assert not any(output_event(json.loads(frame)) for frame in upstream.sent)
        phases = [r.phase for r in await store.session_records("sess-1")]
        assert phases == [Phase.STARTED]   # READY's record was replaced by STARTED's: one per call
        store.let_through.set()
        await upstream.wait_for(output_event)
        await upstream.wait_for(lambda e: e["type"] == "response.create")

    await run_session(WriteAhead(store), scenario)
    [kept] = await store.session_records("sess-1")
    assert kept.phase is Phase.FOLLOWED_UP and kept.output == "refunded 7"   # written ahead of the create


async def test_the_memory_store_keeps_a_session_s_records_while_it_lasts() -> None:
    store = MemoryStore()
    kept: list[CallRecord] = []

    async def scenario(mock: LocalMock, upstream: MemoryPeer) -> None:
        for event in mock.connect():
            await upstream.feed(json.dumps(event))
        await ask_refund(mock, upstream)
        kept.extend(await store.session_records("sess-1"))

    write_ahead = WriteAhead(store)
    await write_ahead.open()
    await run_session(write_ahead, scenario)
    assert [record.phase for record in kept] in ([Phase.SENT], [Phase.FOLLOW_UP], [Phase.FOLLOWED_UP])
    assert await store.session_records("sess-1") == []   # the session ended: nothing outlives it here


async def test_records_reach_redis_before_the_output_goes_up(redis_url: str) -> None:
    store = open_store(redis_url)
    write_ahead = WriteAhead(store, timeout=2.0)
    await write_ahead.open()
    seen: list[Phase] = []

    async def scenario(mock: LocalMock, upstream: MemoryPeer) -> None:
        for event in mock.connect():
            await upstream.feed(json.dumps(event))
        await ask_refund(mock, upstream)
        # the output is up: its DECIDED record was written first, and SENT right after it
        seen.extend(r.phase for r in await store.session_records("sess-1"))
        await upstream.wait_for(lambda e: e["type"] == "response.create")

    await run_session(write_ahead, scenario)
    assert seen and seen[0] in (Phase.DECIDED, Phase.SENT, Phase.FOLLOW_UP, Phase.FOLLOWED_UP)
    [kept] = await store.session_records("sess-1")   # "followed_up" went ahead of the create
    assert kept.phase is Phase.FOLLOWED_UP and kept.idempotency_key.startswith("sess-1:")
    assert not write_ahead.degraded and write_ahead.written >= 5
    await write_ahead.close()


async def test_a_store_unreachable_at_start_degrades_once_and_sessions_run(
        caplog: pytest.LogCaptureFixture) -> None:
    events: list[str] = []
    write_ahead = WriteAhead(open_store(f"redis://127.0.0.1:{free_port()}/0"), on_event=events.append)
    caplog.set_level(logging.WARNING, "relay.store")
    await write_ahead.open()
    assert write_ahead.degraded and events == ["degraded"]

    async def scenario(mock: LocalMock, upstream: MemoryPeer) -> None:
        for event in mock.connect():
            await upstream.feed(json.dumps(event))
        await ask_refund(mock, upstream)

    await run_session(write_ahead, scenario)
    warnings = [r for r in caplog.records if r.name == "relay.store"]
    assert len(warnings) == 1 and "call store unavailable" in warnings[0].getMessage()
    assert "at start" in warnings[0].getMessage()
    assert write_ahead.skipped >= 4 and set(events) == {"degraded", "skipped"}


async def calls_through_a_redis_fault(tmp_path: Path, timeout: float, fault: Any, after: Any = None
                                      ) -> tuple[WriteAhead, list[str]]:
    """A session on its own redis-server: one call, then `fault(server)`, then two more calls
    (each answered), then `after(server)`. The write-ahead and the store events it told."""
    events: list[str] = []
    with redis_server(tmp_path) as server:
        write_ahead = WriteAhead(open_store(server.url), timeout=timeout, on_event=events.append)
        await write_ahead.open()

        async def scenario(mock: LocalMock, upstream: MemoryPeer) -> None:
            for event in mock.connect():
                await upstream.feed(json.dumps(event))
            await ask_refund(mock, upstream, 1)
            assert await write_ahead.store.session_records("sess-1")
            fault(server)
            try:
                await ask_refund(mock, upstream, 2)   # answered all the same
                await ask_refund(mock, upstream, 3)
            finally:
                if after is not None:
                    after(server)

        await run_session(write_ahead, scenario)
        await write_ahead.close()
    return write_ahead, events


def store_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "relay.store"]


async def test_a_store_lost_mid_session_degrades_and_the_session_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "relay.store")
    write_ahead, events = await calls_through_a_redis_fault(tmp_path, 2.0, lambda server: server.stop())
    assert write_ahead.degraded and events.count("degraded") == 1 and "write_failed" in events
    [warning] = store_warnings(caplog)
    assert "call store unavailable" in warning


async def test_a_slow_store_holds_an_output_no_longer_than_its_timeout(
        caplog: pytest.LogCaptureFixture) -> None:
    events: list[str] = []
    caplog.set_level(logging.WARNING, "relay.store")
    write_ahead = WriteAhead(SilentStore(), timeout=0.05, on_event=events.append)

    async def scenario(mock: LocalMock, upstream: MemoryPeer) -> None:
        for event in mock.connect():
            await upstream.feed(json.dumps(event))
        await ask_refund(mock, upstream, 1)
        await ask_refund(mock, upstream, 2)   # degraded meanwhile: no wait at all

    await run_session(write_ahead, scenario)
    assert write_ahead.degraded and events[:2] == ["write_failed", "degraded"]
    assert write_ahead.failed == 1 and write_ahead.skipped >= 4
    [warning] = [r for r in caplog.records if r.name == "relay.store"]
    assert "no answer writing within the time allowed" in warning.getMessage()


async def test_a_redis_that_stops_answering_is_waited_for_no_longer_than_the_timeout(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "relay.store")
    # SIGSTOP: alive, holding its connections, silent
    write_ahead, events = await calls_through_a_redis_fault(
        tmp_path, 0.2, lambda server: server.process.send_signal(signal.SIGSTOP),
        lambda server: server.process.send_signal(signal.SIGCONT))
    assert write_ahead.degraded and events.count("degraded") == 1 and write_ahead.failed == 1
    [warning] = store_warnings(caplog)
    assert "no answer writing within the time allowed" in warning


async def test_a_degraded_store_is_tried_again_after_a_while_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    store = HeldStore(Phase.SKIPPED)   # asynchronous; every phase used here goes through at once
    write_ahead = WriteAhead(store, retry_after=5.0, clock=lambda: now[0])
    write_ahead._degrade("test")
    record = CallRecord("s", "c", "refund", Phase.READY, 1.0)
    assert write_ahead.write_now(record)   # skipped while degraded
    now[0] = 6.0
    assert not write_ahead.write_now(record)
    caplog.set_level(logging.WARNING, "relay.store")
    await write_ahead.write(record)
    assert not write_ahead.degraded
    assert "reachable again" in caplog.records[-1].getMessage()
    assert [r.call_id for r in await store.session_records("s")] == ["c"]


async def test_the_store_is_let_go_when_the_last_of_its_users_closes() -> None:
    class Counting(SilentStore):
        opened = closed = 0

        async def open(self) -> None:
            self.opened += 1

        async def close(self) -> None:
            self.closed += 1

    store = Counting()
    write_ahead = WriteAhead(store)
    await write_ahead.open()   # the webhook server
    await write_ahead.open()   # a call it attached to
    await write_ahead.close()  # the call ends
    assert (store.opened, store.closed) == (1, 0)
    await write_ahead.close()
    await write_ahead.close()  # once too often: nothing more
    assert (store.opened, store.closed) == (1, 1)
