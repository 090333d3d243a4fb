"""Helpers for `relay serve` tests: a relay in front of the mock upstream, a raw realtime client
that keeps every frame it received, and a tiny HTTP GET. Everything binds 127.0.0.1 port 0."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.server import RelayServer, ServerConfig

PROVIDER_KEY = "sk-test-SECRET-0123456789abcdefXYZ"
RELAY_TOKEN = "relay-token-4c8d1f"
WEATHER_SCRIPT = MockScript(
    rules=[Rule(match="weather", say="Let me check.",
                calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})])],
    after_outputs=Reply(say="Here is what I found: {output}"),
)


@asynccontextmanager
async def relay_for(mock: MockUpstream, path: str = "/v1/realtime", **options: Any) -> AsyncIterator[RelayServer]:
    """A started relay whose upstream is `mock` (at `path`), with test defaults: port 0, the
    provider key given explicitly, the relay token required, no drain on exit."""
    settings: dict[str, Any] = {
        "upstream": mock.base_url + path,
        "dialect": "openai",
        "port": 0,
        "api_key": PROVIDER_KEY,
        "auth_token": RELAY_TOKEN,
        "drain_seconds": 0.0,
    }
    settings.update(options)
    async with RelayServer(ServerConfig(**settings)) as server:
        yield server


class RealtimeClient:
    """A realtime client on a raw socket that keeps every frame and event it received."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[str] = []
        self.events: list[dict[str, Any]] = []

    async def send(self, event: dict[str, Any] | str) -> None:
        await self.ws.send(event if isinstance(event, str) else json.dumps(event))

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0) -> dict[str, Any]:
        """Read events until one satisfies `predicate` (events read on the way are kept)."""
        async with asyncio.timeout(timeout):
            while True:
                frame = await self.ws.recv()
                assert isinstance(frame, str)
                self.frames.append(frame)
                event = json.loads(frame)
                self.events.append(event)
                if predicate(event):
                    return event

    async def wait_type(self, event_type: str, timeout: float = 5.0) -> dict[str, Any]:
        return await self.wait_for(lambda e: e.get("type") == event_type, timeout)

    async def closed(self, timeout: float = 5.0) -> tuple[int, str]:
        """Read until the relay closes the socket; returns the close code and reason received."""
        async with asyncio.timeout(timeout):
            try:
                while True:
                    frame = await self.ws.recv()
                    assert isinstance(frame, str)
                    self.frames.append(frame)
                    self.events.append(json.loads(frame))
            except ConnectionClosed as closed:
                assert closed.rcvd is not None, f"no close frame received: {closed!r}"
                return closed.rcvd.code, closed.rcvd.reason


@asynccontextmanager
async def realtime_client(
    server_or_url: RelayServer | str,
    *,
    path: str = "/v1/realtime?model=gpt-realtime",
    token: str | None = RELAY_TOKEN,
    headers: dict[str, str] | None = None,
    **options: Any,
) -> AsyncIterator[RealtimeClient]:
    base = server_or_url if isinstance(server_or_url, str) else f"ws://127.0.0.1:{server_or_url.port}"
    all_headers = dict(headers or {})
    if token is not None:
        all_headers.setdefault("Authorization", f"Bearer {token}")
    # No receive limit by default: a test that stops reading early must not stall the close.
    options.setdefault("max_queue", None)
    async with connect(base + path, additional_headers=all_headers, open_timeout=5, close_timeout=1,
                       **options) as ws:
        yield RealtimeClient(ws)


async def http_get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET over a fresh connection (the relay closes it after the response)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    async with asyncio.timeout(5):
        raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


def user_text(text: str) -> dict[str, Any]:
    return {"type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}


def received_types(mock: MockUpstream) -> list[str]:
    return [record.event.get("type") for record in mock.received]
