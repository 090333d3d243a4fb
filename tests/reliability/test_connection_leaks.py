"""Connections the relay opens to the provider have an owner from the moment they start: a client
that leaves at any stage of its session's start (before the upstream connection starts, while it
opens, just as it completes, mid-session) takes its upstream connection with it. Counted from the
process's own file descriptors (/proc/self/fd), on the transport the test run is on."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect

from relay.edges.serve import RelayServer
from relay.mock import MockUpstream
from tests.support.clients import TIMEOUT
from tests.support.keys import RELAY_TOKEN
from tests.support.relays import LeakGuard

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts sockets in /proc/self/fd")

ROUNDS = 3   # per stage
UPGRADE = (b"GET /v1/realtime?model=gpt-realtime HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
           b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
           b"Authorization: Bearer " + RELAY_TOKEN.encode() + b"\r\n\r\n")


def open_sockets() -> int:
    """The sockets this process holds open (the relay's, the mock's, the door's, the clients')."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):   # the listing's own descriptor is gone by now
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


async def sockets_back_to(baseline: int, timeout: float = TIMEOUT) -> int:
    """Wait until the process holds `baseline` sockets again, or `timeout` passes; the count then."""
    with anyio.move_on_after(timeout):
        while open_sockets() > baseline:
            await asyncio.sleep(0.02)
    return open_sockets()


class Door:
    """A TCP forwarder between the relay and the mock upstream that can hold each new connection
    before it reaches the mock (`closed`), and says when a connection arrives and when the mock's
    answer to the upgrade went through (`on_upgraded`, called in the same step as the write)."""

    def __init__(self, mock: MockUpstream) -> None:
        self.mock = mock
        self.open = asyncio.Event()
        self.open.set()
        self.arrived = asyncio.Event()
        self.on_upgraded: Callable[[], None] | None = None
        self.port = 0

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[Door]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            yield self
            server.close()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1/realtime"

    async def _serve(self, relay_side: asyncio.StreamReader, relay_writer: asyncio.StreamWriter) -> None:
        self.arrived.set()
        mock_writer: asyncio.StreamWriter | None = None
        try:
            await self.open.wait()
            mock_side, mock_writer = await asyncio.open_connection("127.0.0.1", self.mock.port)
            async with anyio.create_task_group() as pumps:
                async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, upgrade: bool) -> None:
                    while data := await source.read(65536):
                        sink.write(data)
                        if upgrade and self.on_upgraded is not None and data.startswith(b"HTTP/1.1 101"):
                            self.on_upgraded()
                        upgrade = False
                    pumps.cancel_scope.cancel()   # one side left: so does the other

                pumps.start_soon(pump, relay_side, mock_writer, False)
                pumps.start_soon(pump, mock_side, relay_writer, True)
        except OSError:
            pass
        finally:
            for writer in (relay_writer, mock_writer):
                if writer is not None:
                    writer.transport.abort()


async def sessions_ended(server: RelayServer) -> None:
    for session in server.sessions.values():
        await asyncio.wait_for(session.wait_closed(), TIMEOUT)


async def test_a_client_that_leaves_at_any_stage_of_its_start_leaves_no_socket_open(
        guard: LeakGuard, mock: MockUpstream) -> None:
    door = Door(mock)
    async with door.serving(), guard.relay(door.url) as server:
        url = f"ws://127.0.0.1:{server.port}/v1/realtime?model=gpt-realtime"
        headers = {"Authorization": f"Bearer {RELAY_TOKEN}"}
        baseline = open_sockets()

        # before the upstream connection starts: the client leaves in its own handshake
        for _ in range(ROUNDS):
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(UPGRADE)
            writer.transport.abort()
            _, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.transport.abort()
        await sessions_ended(server)
        assert await sockets_back_to(baseline) == baseline, "a client that left in its handshake"

        # while the upstream connection opens: the door holds it until the client has left, then
        # lets the upgrade through (an upstream connection nobody owns would then open)
        for _ in range(ROUNDS):
            door.open.clear()
            door.arrived.clear()
            async with connect(url, additional_headers=headers, open_timeout=TIMEOUT) as client:
                await asyncio.wait_for(door.arrived.wait(), TIMEOUT)
                client.transport.abort()
            await sessions_ended(server)
            door.open.set()
            assert await sockets_back_to(baseline) == baseline, "a client that left while the upstream connected"

        # just as the upstream connection completes: the client drops in the step that hands the
        # relay the provider's 101
        for _ in range(ROUNDS):
            async with connect(url, additional_headers=headers, open_timeout=TIMEOUT) as client:
                upgraded = asyncio.Event()
                door.on_upgraded = lambda: (client.transport.abort(), upgraded.set())
                await asyncio.wait_for(upgraded.wait(), TIMEOUT)
            door.on_upgraded = None
            await sessions_ended(server)
            assert await sockets_back_to(baseline) == baseline, "a client that left as the upstream connected"

        # mid-session
        for _ in range(ROUNDS):
            async with connect(url, additional_headers=headers, open_timeout=TIMEOUT) as client:
                await asyncio.wait_for(client.recv(), TIMEOUT)   # session.created
            await sessions_ended(server)
            assert await sockets_back_to(baseline) == baseline, "a client that left mid-session"
        assert server.sessions == {}
