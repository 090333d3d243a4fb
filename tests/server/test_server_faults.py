"""What `relay serve` does when something is wrong: refused handshakes, bad frames, an upstream that
is down or goes away, a client that leaves or stops reading."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from relay.mock import Faults, MockScript, MockUpstream, Reply, StreamOptions
from relay.errors import ConfigError
from relay.edges.config import ServerConfig
from relay.edges.serve import RelayServer
from relay.tools import tool
from tests.support.clients import TIMEOUT, RealtimeClient, http_get, realtime_client
from tests.support.frames import user_text
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.peers import MarkSeen
from tests.support.relays import relay_for



async def test_a_wrong_or_missing_token_is_refused_before_any_upstream_connection(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock) as server:
        for headers in ({"Authorization": "Bearer not-the-token"}, {"api-key": "nope"}, {}):
            with pytest.raises(InvalidStatus) as refused:
                async with connect(f"ws://127.0.0.1:{server.port}/v1/realtime?model=m", additional_headers=headers):
                    pass
            assert refused.value.response.status_code == 401
            assert json.loads(refused.value.response.body)["error"]["code"] == "unauthorized"
        assert server.metrics.handshakes_refused[401] == 3
    assert weather_mock.sessions == []


async def test_the_browser_token_subprotocol_is_accepted_and_never_echoed(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock) as server, realtime_client(
            server, token=None, subprotocols=["realtime", f"openai-insecure-api-key.{RELAY_TOKEN}"]) as client:
        await client.wait_type("session.created")
        assert client.ws.subprotocol == "realtime"
        assert RELAY_TOKEN not in str(client.ws.response.headers)
    assert weather_mock.sessions[0].connections[0].auth == "bearer"   # the relay's own key upstream


async def test_an_origin_not_allowed_is_refused_with_403(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, allow_origins=["https://app.example"]) as server:
        with pytest.raises(InvalidStatus) as refused:
            async with realtime_client(server, origin="https://elsewhere.example"):
                pass
        assert refused.value.response.status_code == 403
        async with realtime_client(server, origin="https://app.example") as client:
            await client.wait_type("session.created")
    assert len(weather_mock.sessions) == 1


async def test_an_unknown_path_is_404(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock) as server:
        with pytest.raises(InvalidStatus) as refused:
            async with realtime_client(server, path="/v2/elsewhere"):
                pass
        assert refused.value.response.status_code == 404
    assert weather_mock.sessions == []


async def test_plain_http_on_a_realtime_path_gets_426_without_a_traceback(
        weather_mock: MockUpstream, caplog: pytest.LogCaptureFixture) -> None:
    async with relay_for(weather_mock) as server:
        status, headers, _ = await http_get(server.port, "/v1/realtime")
    assert (status, headers["upgrade"]) == (426, "websocket")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_without_a_token_the_relay_only_binds_loopback() -> None:
    with pytest.raises(ConfigError, match="--auth-token"):
        RelayServer(ServerConfig(host="0.0.0.0", auth_token=None, api_key=PROVIDER_KEY))
    RelayServer(ServerConfig(host="0.0.0.0", auth_token=None, insecure_no_auth=True, api_key=PROVIDER_KEY))
    RelayServer(ServerConfig(host="0.0.0.0", auth_token="secret", api_key=PROVIDER_KEY))
    RelayServer(ServerConfig(host="::1", auth_token=None, api_key=PROVIDER_KEY))


async def test_without_a_token_loopback_clients_connect_and_the_relay_says_so(
        weather_mock: MockUpstream, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="relay")
    async with relay_for(weather_mock, auth_token=None) as server, realtime_client(server, token=None) as client:
        await client.wait_type("session.created")
        assert server.host == "127.0.0.1"
    assert any("no client token" in r.getMessage() and "loopback" in r.getMessage() for r in caplog.records)


async def test_bad_json_gets_an_error_event_and_the_connection_stays(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock) as server, realtime_client(server) as client:
        await client.wait_type("session.created")
        await client.send('{"type": "response.create"')
        error = await client.wait_type("error")
        assert error["error"]["type"] == "invalid_request_error"
        assert error["error"]["code"] == "invalid_json"
        await client.send(user_text("still here?"))
        await client.wait_type("conversation.item.added")
        assert server.metrics.errors[("relay", "invalid_json")] == 1
    assert [r.event["type"] for r in weather_mock.received] == ["conversation.item.create"]


async def test_an_oversize_frame_closes_the_client_with_1009(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, max_frame_bytes=64 * 1024) as server, realtime_client(server) as client:
        await client.wait_type("session.created")
        session = next(iter(server.sessions.values()))
        await client.send(json.dumps({"type": "input_audio_buffer.append", "audio": "A" * 100_000}))
        assert (await client.closed())[0] == 1009
        end = await asyncio.wait_for(session.wait_closed(), TIMEOUT)
        assert (end.by, end.code) == ("client", 1009)
    assert not any(r.event["type"] == "input_audio_buffer.append" for r in weather_mock.received)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_an_unreachable_upstream_gives_an_error_event_then_1011() -> None:
    port = closed_port()
    async with RelayServer(ServerConfig(upstream=f"ws://127.0.0.1:{port}/v1/realtime", dialect="openai",
                                        port=0, api_key=PROVIDER_KEY, drain_seconds=0)) as server, \
            realtime_client(server, token=None) as client:
        code, reason = await client.closed()
        assert (code, reason) == (1011, "upstream unavailable")
        [error] = client.events
        assert error["type"] == "error" and error["error"]["code"] == "upstream_unavailable"
        assert f"127.0.0.1:{port}" in error["error"]["message"]
        assert server.metrics.errors[("relay", "upstream_unavailable")] == 1


async def test_an_upstream_refusing_the_key_is_reported_with_its_status_never_the_key() -> None:
    async with MockUpstream(api_key="sk-the-right-one") as mock, relay_for(mock) as server, \
            realtime_client(server) as client:
        code, _ = await client.closed()
        message = client.events[0]["error"]["message"]
        assert f"127.0.0.1:{mock.port}" in message
    assert code == 1011
    assert "HTTP 401" in message
    assert PROVIDER_KEY not in message and PROVIDER_KEY not in "".join(client.frames)


async def test_an_upstream_dropping_mid_response_closes_the_client_with_1011() -> None:
    long_reply = MockScript(default=Reply(say="A long answer."), options=StreamOptions(audio_chunks=60))
    async with MockUpstream(script=long_reply, faults=Faults(drop_after_events=25)) as mock, \
            relay_for(mock) as server, realtime_client(server) as client:
        await client.wait_type("session.created")
        session = next(iter(server.sessions.values()))
        await client.send({"type": "response.create"})
        code, _ = await client.closed()
        assert code == 1011   # the upstream vanished without a close frame (1006 is not sendable)
        assert any(e["type"] == "response.output_audio.delta" for e in client.events)
        assert not any(e["type"] == "response.done" for e in client.events)
        end = await asyncio.wait_for(session.wait_closed(), TIMEOUT)
        assert (end.by, end.code) == ("upstream", 1011)


def waiting_tool() -> tuple[object, asyncio.Event, asyncio.Event]:
    """A relay tool that runs until cancelled, with events for its start and its cancellation."""
    started, cancelled = asyncio.Event(), asyncio.Event()

    @tool
    async def get_weather(city: str) -> str:
        """Weather, slowly."""
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    return get_weather, started, cancelled


async def test_an_upstream_close_cancels_handlers_and_passes_its_code_on(weather_mock: MockUpstream) -> None:
    slow, started, cancelled = waiting_tool()
    async with relay_for(weather_mock, tools=[slow]) as server, realtime_client(server) as client:
        await client.send(user_text("weather?"))
        await client.send({"type": "response.create"})
        await asyncio.wait_for(started.wait(), TIMEOUT)
        await weather_mock.close_session(weather_mock.sessions[0], 4000, "maintenance")
        assert await client.closed() == (4000, "maintenance")
        await asyncio.wait_for(cancelled.wait(), TIMEOUT)


async def test_a_client_leaving_mid_handler_tears_everything_down(weather_mock: MockUpstream) -> None:
    slow, started, cancelled = waiting_tool()
    async with relay_for(weather_mock, tools=[slow]) as server:
        async with realtime_client(server) as client:
            await client.send(user_text("weather?"))
            await client.send({"type": "response.create"})
            await client.wait_type("response.done")
            await asyncio.wait_for(started.wait(), TIMEOUT)
            session = next(iter(server.sessions.values()))
            upstream_session = weather_mock.sessions[0]
        # the session ends, the handler is cancelled (it would wait for ever) and the provider
        # connection closes, each without waiting on anything else
        async with asyncio.timeout(TIMEOUT):
            end = await session.wait_closed()
            await cancelled.wait()
            await weather_mock.wait_session_ended(upstream_session)
        assert (end.by, end.code) == ("client", 1000)
        assert server.sessions == {}


@asynccontextmanager
async def flooding_a_client_that_does_not_read(chunks: int, **relay_options: Any
                                               ) -> AsyncIterator[tuple[MockUpstream, RelayServer, RealtimeClient]]:
    """A relay in front of a mock that floods `chunks` audio deltas of 128 KB of base64 once
    asked, and a client with a small receive window that has asked and reads nothing yet."""
    audio_flood = MockScript(default=Reply(say="la la la"),
                             options=StreamOptions(audio_chunk_bytes=96_000, audio_chunks=chunks))
    async with MockUpstream(script=audio_flood) as mock, relay_for(mock, **relay_options) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)   # a small window fills fast
        sock.connect(("127.0.0.1", server.port))
        async with realtime_client(server, sock=sock, max_queue=1) as client:
            await client.send({"type": "response.create"})
            await mock.wait_for(lambda e: e["type"] == "response.create")
            yield mock, server, client


async def test_a_client_that_stops_reading_is_closed_with_1008_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="relay")
    async with flooding_a_client_that_does_not_read(
            100, max_queue_bytes=4 * 1024 * 1024, stall_seconds=0.5) as (mock, server, client):
        session = next(iter(server.sessions.values()))
        end = await asyncio.wait_for(session.wait_closed(), TIMEOUT)
        with pytest.raises(ConnectionClosed):   # a client that does not read misses the close frame
            while True:
                await client.ws.recv()
    assert (end.by, end.code) == ("relay", 1008)
    warnings = [r for r in caplog.records if "client is not reading" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].session_id == session.id
    assert "nothing taken for 0.5 s" in warnings[0].getMessage()
    assert mock.sessions[0].connections[0].closed


async def test_a_client_that_reads_slowly_holds_the_upstream_back_and_gets_all_its_audio() -> None:
    # 100 chunks of 128 KB of base64: 12.8 MB, more than the queue's limit and the sockets' buffers
    # together (a relay without back-pressure cuts this client off); the mark is 1 MiB, and what
    # the read that crosses it still brings stays under the limit
    chunks = 100
    async with flooding_a_client_that_does_not_read(chunks, max_queue_bytes=4 * 1024 * 1024) as (_, server, client):
        session = next(iter(server.sessions.values()))
        assert session.loop is not None
        queue = session.loop.to_client
        mark = MarkSeen(queue)
        # the client reads nothing until the relay holds the upstream back (at 1 MiB) ...
        await asyncio.wait_for(mark.event.wait(), TIMEOUT)
        assert queue.size < 4 * 1024 * 1024
        # ... then reads at its own pace: everything comes, nobody is cut off
        deltas = 0
        while (event := await client.receive())["type"] != "response.done":
            deltas += event["type"] == "response.output_audio.delta"
        assert deltas == chunks
        assert session.end is None
