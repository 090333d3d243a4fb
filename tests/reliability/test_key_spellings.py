"""The provider key goes nowhere but to the provider: no redirect carries it to another host. On
the transport the test run is on (both in CI)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tests.support.clients import TIMEOUT
from tests.support.relays import LeakGuard


# ---- redirects ---------------------------------------------------------------------------------

@asynccontextmanager
async def redirecting_to_elsewhere() -> AsyncIterator[tuple[str, list[bytes]]]:
    """An upstream that answers every handshake with a 302 to another origin (another port),
    and that other origin, which keeps the request heads it receives. Yields the first's URL and
    the second's list."""
    seen: list[bytes] = []

    async def elsewhere(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.read(65536))
        writer.close()

    async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 302 Found\r\nLocation: ws://127.0.0.1:{other_port}/v1/realtime?model=m\r\n"
                     "Content-Length: 0\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    other = await asyncio.start_server(elsewhere, "127.0.0.1", 0)
    other_port = other.sockets[0].getsockname()[1]
    first = await asyncio.start_server(redirect, "127.0.0.1", 0)
    async with other, first:
        yield f"ws://127.0.0.1:{first.sockets[0].getsockname()[1]}/v1/realtime", seen


@pytest.mark.parametrize("dialect", ["openai", "azure"])   # the key in `Authorization`, in `api-key`
async def test_a_redirect_is_refused_and_the_other_host_gets_nothing(guard: LeakGuard, dialect: str) -> None:
    async with redirecting_to_elsewhere() as (url, seen), guard.relay(url, dialect=dialect) as server, \
            guard.client(server) as client:
        code, _ = await asyncio.wait_for(client.closed(), TIMEOUT)
    [error] = client.events
    assert code == 1011
    assert error["error"]["code"] == "upstream_unavailable" and "HTTP 302" in error["error"]["message"]
    assert seen == []
