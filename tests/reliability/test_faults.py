"""Faults, on real sockets: the upstream goes away at every stage of a tool call, the client goes
away mid-handler, handlers raise, hang and block, the upstream cannot be reached, a peer stops
reading or never answers a close, the relay is stopped with calls running, the disk fails. No
crash, a clear close code, and no tool call left without its one output while the upstream is
there to take it."""

from __future__ import annotations

import asyncio
import errno
import functools
import itertools
import json
import logging
import socket
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.asyncio.server import ServerConnection

import relay.edges.serve
from relay.mock import Faults, MockScript, MockUpstream, Reply, Rule, StreamOptions, ToolCall
from relay.recording.format import UPSTREAM_TO_RELAY
from relay.recording.writer import RecordingWriter
from relay.tools import tool
from tests.support.clients import TIMEOUT, RealtimeClient, http_get, parse_exposition
from tests.support.frames import function_call_outputs, model_call_ids, session_created, user_text
from tests.support.keys import PROVIDER_KEY
from tests.support.peers import MarkSeen
from tests.support.relays import LeakGuard, bare_upstream, socket_transport, weather_turn



async def test_an_upstream_that_never_answers_the_close_is_cut_off(guard: LeakGuard) -> None:
    async def silent_after_hello(upstream: ServerConnection) -> None:
        await upstream.send(session_created())
        upstream.transport.pause_reading()   # reads nothing more: the closing handshake goes unanswered
        await upstream.wait_closed()

    async with bare_upstream(silent_after_hello) as url, guard.relay(url) as server:
        async with guard.client(server) as client:
            await client.wait_type("session.created")
            session = next(iter(server.sessions.values()))
        await asyncio.wait_for(session.wait_closed(), 3)
        assert session.loop is not None
        # the provider connection is dropped, not left open in CLOSING for ever
        await asyncio.wait_for(session.loop.upstream.close(None), TIMEOUT)


# ---- the upstream goes away ----------------------------------------------------------------

CALL_ONLY = MockScript(
    rules=[Rule(match="weather", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})])],
    after_outputs=Reply(say="It is {output}"),
    options=StreamOptions(argument_deltas=3),
)


class Probe:
    """A relay tool that counts its runs, can be held until released, and tells when it starts,
    when it is cancelled, and what it returned."""

    def __init__(self, *, hold: bool = False) -> None:
        self.runs: list[str] = []
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()
        if not hold:
            self.release.set()

        @tool(name="get_weather")
        async def handler(city: str) -> str:
            """Current weather in a city."""
            self.runs.append(city)
            self.started.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return f"sunny in {city}"

        self.tool = handler


async def ask_for_weather(client: RealtimeClient) -> None:
    await client.send(user_text("What's the weather?"))
    await client.send({"type": "response.create"})


async def test_the_upstream_dropping_mid_arguments_ends_the_session_and_runs_nothing(guard: LeakGuard) -> None:
    probe = Probe()
    async with MockUpstream(script=CALL_ONLY, api_key=PROVIDER_KEY) as mock, \
            guard.relay(mock, tools=[probe.tool]) as server, guard.client(server) as client:
        await client.send(user_text("What's the weather?"))
        await client.wait_type("conversation.item.added")
        await mock.wait_for_sent(lambda e: e["type"] == "session.updated")
        connection = mock.sessions[0].connections[0]
        # response.created, rate_limits.updated, output_item.added, item.added, the first delta: then gone
        mock.sessions[0].faults = Faults(drop_after_events=connection.events_sent + 5)
        await client.send({"type": "response.create"})
        code, _ = await client.closed()
    sent = [record.event["type"] for record in mock.sent]
    assert sent[-1] == "response.function_call_arguments.delta"   # the drop came mid-arguments
    assert code == 1011   # the upstream vanished without a close frame
    assert not [e for e in client.events if "function_call" in e["type"]]   # not shown, not even in part
    assert probe.runs == []
    assert server.metrics.tool_calls == {}


async def test_the_upstream_dropping_mid_handler_cancels_it_and_the_call_is_counted_abandoned(
        guard: LeakGuard) -> None:
    probe = Probe(hold=True)
    async with MockUpstream(script=CALL_ONLY, api_key=PROVIDER_KEY) as mock, \
            guard.relay(mock, tools=[probe.tool]) as server, guard.client(server) as client:
        await ask_for_weather(client)
        await asyncio.wait_for(probe.started.wait(), TIMEOUT)
        upstream = mock.sessions[0]
        upstream.faults = Faults(drop_after_events=upstream.connections[0].events_sent + 1)
        await mock.inject(upstream, {"type": "rate_limits.updated", "event_id": "event_r", "rate_limits": []})
        code, _ = await client.closed()
        await asyncio.wait_for(probe.cancelled.wait(), TIMEOUT)
    assert code == 1011
    assert server.metrics.tool_calls == {("get_weather", "abandoned"): 1}
    [line] = [json.loads(line) for line in guard.log.getvalue().splitlines() if '"tool call"' in line]
    assert line["outcome"] == "abandoned" and line["tool"] == "get_weather"
    assert function_call_outputs(mock) == []


async def test_a_client_vanishing_mid_handler_cancels_it_and_closes_the_upstream(guard: LeakGuard) -> None:
    probe = Probe(hold=True)
    async with MockUpstream(script=CALL_ONLY, api_key=PROVIDER_KEY) as mock, \
            guard.relay(mock, tools=[probe.tool]) as server:
        async with guard.client(server) as client:
            await ask_for_weather(client)
            await asyncio.wait_for(probe.started.wait(), TIMEOUT)
            [session] = server.sessions.values()
            client.ws.transport.abort()   # no closing handshake: the TCP connection is just gone
        async with asyncio.timeout(TIMEOUT):
            end = await session.wait_closed()
            await probe.cancelled.wait()
            await mock.wait_session_ended(mock.sessions[0])
    assert (end.by, end.code) == ("client", 1006)
    assert server.metrics.tool_calls == {("get_weather", "abandoned"): 1}


# ---- handlers that fail ----------------------------------------------------------------------

@tool(name="get_weather")
def raising_weather(city: str) -> str:
    """Current weather in a city."""
    raise LookupError(f"no station in {city}")


@tool(name="get_weather", timeout=0.2)
async def hanging_weather(city: str) -> str:
    """Current weather in a city."""
    await asyncio.Event().wait()
    return "never"


@pytest.mark.parametrize("handler, output, outcome", [
    (raising_weather, {"error": "LookupError: no station in Paris"}, "error"),
    (hanging_weather, {"error": "timed out after 0.2 s"}, "timeout"),
], ids=["raises", "hangs"])
async def test_a_handler_that_raises_or_hangs_still_answers_its_call_once(
        guard: LeakGuard, handler: Any, output: dict[str, str], outcome: str) -> None:
    async with MockUpstream(script=CALL_ONLY, api_key=PROVIDER_KEY) as mock, \
            guard.relay(mock, tools=[handler]) as server, guard.client(server) as client:
        await ask_for_weather(client)
        done = await client.wait_for(lambda e: e["type"] == "response.done" and "It is" in json.dumps(e))
    [answer] = function_call_outputs(mock)
    assert json.loads(answer["output"]) == output
    assert answer["call_id"] in model_call_ids(mock)
    assert server.metrics.tool_calls == {("get_weather", outcome): 1}
    assert done["response"]["status"] == "completed"


async def test_a_blocked_sync_handler_does_not_slow_another_session(guard: LeakGuard, mock: MockUpstream) -> None:
    entered, unblock = threading.Event(), threading.Event()
    calls = itertools.count()

    @tool(name="get_weather")
    def blocking_weather(city: str) -> str:
        """Current weather in a city; the first call blocks its thread until released."""
        if next(calls) == 0:
            entered.set()
            unblock.wait(10)
        return f"sunny in {city}"

    async with guard.relay(mock, tools=[blocking_weather]) as server, \
            guard.client(server) as blocked, guard.client(server) as other:
        try:
            await ask_for_weather(blocked)
            assert await anyio.to_thread.run_sync(entered.wait, 5)
            await weather_turn(other)   # a whole tool call while the first handler's thread is blocked
            await blocked.send({"type": "input_audio_buffer.clear"})   # the blocked session reads on too
            await blocked.wait_type("input_audio_buffer.cleared")
            assert not unblock.is_set()
        finally:
            unblock.set()
        await blocked.wait_for(lambda e: e["type"] == "response.done" and "sunny" in json.dumps(e))


@tool(name="get_weather")
async def sleepy_weather(city: str) -> str:
    """Current weather in a city, from code that blocks the event loop."""
    time.sleep(0.2)   # what the test is about: a blocking call in an `async def`
    return f"sunny in {city}"


async def test_a_handler_that_blocks_the_event_loop_is_named_in_the_log_and_counted(
        guard: LeakGuard, mock: MockUpstream) -> None:
    async with guard.relay(mock, tools=[sleepy_weather]) as server, guard.client(server) as client:
        await weather_turn(client)
        assert server.metrics.loop_blocks == {"get_weather": 1}
        _, _, body = await http_get(server.port, "/metrics")
    assert parse_exposition(body.decode())['relay_tool_loop_blocks_total{tool="get_weather"}'] == 1
    [line] = [json.loads(line) for line in guard.log.getvalue().splitlines() if "held the event loop" in line]
    assert line["level"] == "warning" and line["tool"] == "get_weather" and line["seconds"] >= 0.2
    assert "get_weather" in line["msg"] and "sync tool" in line["msg"]
    assert line["session_id"]   # which session's tool it was


# ---- the upstream cannot be reached ----------------------------------------------------------

def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("url, host", [
    (f"ws://127.0.0.1:{closed_port()}/v1/realtime", "127.0.0.1"),
    ("ws://relay-test.invalid/v1/realtime", "relay-test.invalid"),   # RFC 6761: never resolves
], ids=["refused", "unresolvable"])
async def test_an_unreachable_upstream_gets_an_error_event_then_1011(
        guard: LeakGuard, url: str, host: str) -> None:
    async with guard.relay(url, open_timeout=2.0) as server, guard.client(server) as client:
        async with asyncio.timeout(TIMEOUT):
            code, reason = await client.closed()
    [error] = client.events
    assert (code, reason) == (1011, "upstream unavailable")
    assert error["error"]["code"] == "upstream_unavailable" and host in error["error"]["message"]
    assert server.metrics.sessions_ended["relay"] == 1


# ---- a peer that stops reading ---------------------------------------------------------------

async def test_a_client_that_stops_reading_holds_the_upstream_back_then_is_dropped(
        guard: LeakGuard, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="relay")
    limit, mark = 4 * 1024 * 1024, 1024 * 1024   # the back-pressure mark: 1 MiB (DEFAULT_HOLD_BACK_BYTES)
    chunks = 200   # of 128 KB of base64 each: 25 MB
    audio_flood = MockScript(default=Reply(say="la la la"),
                             options=StreamOptions(audio_chunk_bytes=96_000, audio_chunks=chunks))
    async with MockUpstream(script=audio_flood, api_key=PROVIDER_KEY) as mock, \
            guard.relay(mock, max_queue_bytes=limit, stall_seconds=0.5) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)   # a small window fills fast
        sock.connect(("127.0.0.1", server.port))
        async with guard.client(server, sock=sock, max_queue=1) as client:
            await mock.wait_for(lambda e: e["type"] == "session.update")   # the session loop runs
            [session] = server.sessions.values()
            assert session.loop is not None
            queue = session.loop.to_client
            at_mark = MarkSeen(queue, socket_transport(session.client))   # the upstream is held back from there
            await client.send({"type": "response.create"})
            async with asyncio.timeout(TIMEOUT):
                end = await session.wait_closed()
                await session.client.close(None)   # the TCP connection is gone, not only the session
            client.ws.transport.abort()
            read_from_upstream = server.metrics.frames[UPSTREAM_TO_RELAY]
    largest_frame = 200_000   # 96,000 bytes of audio in base64, in JSON
    assert (end.by, end.code) == ("relay", 1008)
    # what the relay read of the flood: the client's socket buffers' worth and the queue's; the
    # rest was left to TCP (the kernel's buffers on loopback hold most of it)
    assert 8 < read_from_upstream < chunks / 2
    [warning] = [r.getMessage() for r in caplog.records if "is not reading" in r.getMessage()]
    assert warning.startswith("client is not reading: nothing taken for 0.5 s")   # not the limit's overflow
    # held back at the mark; past it, only the rest of the read that crossed it came in
    assert mark <= at_mark.size < mark + largest_frame
    assert at_mark.socket_buffer <= 64 * 1024 + largest_frame


# ---- the relay is stopped --------------------------------------------------------------------

async def test_a_stop_request_lets_a_running_call_answer_the_upstream_then_closes_with_1001(
        guard: LeakGuard) -> None:
    """What SIGTERM does (`request_stop`), with a tool call running: the output still reaches the
    upstream during the drain, then the session is closed with 1001."""
    probe = Probe(hold=True)
    async with MockUpstream(script=CALL_ONLY, api_key=PROVIDER_KEY) as mock, \
            guard.relay(mock, tools=[probe.tool], drain_seconds=1.0) as server:
        serving = asyncio.ensure_future(server.serve_forever())
        async with guard.client(server) as client:
            await ask_for_weather(client)
            await asyncio.wait_for(probe.started.wait(), TIMEOUT)
            server.request_stop()
            probe.release.set()
            output = await mock.wait_for(lambda e: e["item"]["type"] == "function_call_output")
            assert (await client.closed())[0] == 1001
        await asyncio.wait_for(serving, TIMEOUT)
    assert output.event["item"]["output"] == "sunny in Paris"
    assert server.metrics.tool_calls == {("get_weather", "ok"): 1}
    assert mock.sessions[0].connections[0].closed


# ---- the disk fails --------------------------------------------------------------------------

class FillingDisk:
    """A recording file on a disk that is full after `room` bytes."""

    def __init__(self, path: Path, room: int) -> None:
        self._file = open(path, "xb", buffering=0)
        self._room = room

    def write(self, data: bytes | memoryview) -> int:
        if len(data) > self._room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self._room -= len(data)
        return self._file.write(data)

    def close(self) -> None:
        self._file.close()


async def test_a_disk_that_fills_up_mid_session_stops_the_recording_not_the_session(
        guard: LeakGuard, mock: MockUpstream, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(relay.edges.serve, "RecordingWriter",
                        functools.partial(RecordingWriter, opener=lambda path: FillingDisk(path, 3000)))
    async with guard.relay(mock) as server, guard.client(server) as client:
        for _ in range(2):
            await weather_turn(client)
        assert server.metrics.tool_calls == {("get_weather", "ok"): 2}
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage().split(":")[0] for r in failures] == ["session recording stopped, later frames are dropped"]
    [recording] = guard.record_dir.glob("*.jsonl")
    assert 0 < recording.stat().st_size <= 3000
