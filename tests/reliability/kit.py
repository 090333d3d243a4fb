"""Helpers for the reliability tests: a relay in front of the mock upstream that records every
session and logs at DEBUG, clients whose frames are kept, and a `LeakGuard` that scans all of it
for the provider key when the test ends. Everything binds 127.0.0.1 port 0."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import InvalidStatus

from relay.logs import JsonFormatter
from relay.mock import MockUpstream
from relay.server import RelayServer, ServerConfig
from relay.tools import tool
from tests.server.helpers import RealtimeClient, realtime_client, user_text

# Distinctive, so that a scan for it cannot match anything by chance.
PROVIDER_KEY = "sk-proj-RELIABILITY-0f1e2d3c4b5a69788796a5b4"
RELAY_TOKEN = "relay-token-reliability-5e6f"


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


async def weather_turn(client: RealtimeClient, timeout: float = 5.0) -> dict[str, Any]:
    """One user turn that makes the model call the relay's `get_weather` tool; returns the
    response.done of the follow-up that speaks the tool's output."""
    await client.send(user_text("What's the weather in Paris?"))
    await client.send({"type": "response.create"})
    return await client.wait_for(lambda e: e["type"] == "response.done"
                                 and "sunny in Paris" in json.dumps(e["response"]["output"]), timeout)


def frame_of_size(size: int) -> str:
    """An `input_audio_buffer.append` of exactly `size` bytes with valid base64 audio."""
    head, tail = '{"type":"input_audio_buffer.append","event_id":"', '","audio":"'
    audio_chars = (size - len(head) - len(tail) - 2) // 4 * 4
    padding = size - len(head) - len(tail) - 2 - audio_chars
    frame = head + "p" * padding + tail + "A" * audio_chars + '"}'
    assert len(frame.encode()) == size
    return frame


def function_call_outputs(mock: MockUpstream, call_id: str | None = None) -> list[dict[str, Any]]:
    """The function_call_output items the mock received (for one call, or all)."""
    return [r.event["item"] for r in mock.received
            if r.event.get("type") == "conversation.item.create"
            and isinstance(r.event.get("item"), dict)
            and r.event["item"].get("type") == "function_call_output"
            and call_id in (None, r.event["item"].get("call_id"))]


def model_call_ids(mock: MockUpstream) -> list[str]:
    """call_ids of the function calls the mock's model produced (one per call: the
    `response.output_item.done` of each)."""
    return [r.event["item"]["call_id"] for r in mock.sent
            if r.event.get("type") == "response.output_item.done"
            and r.event["item"].get("type") == "function_call"]


class LeakGuard:
    """What the relay showed the world during one test: every relay log record (its websockets
    connections included, at DEBUG, so handshake headers and frames are logged), the recordings
    it wrote, and whatever the test registers (client frames, close reasons, HTTP bodies). At
    teardown `check()` proves the provider key is in none of it and the relay token is in no log
    line and no recording."""

    def __init__(self, record_dir: Path) -> None:
        self.record_dir = record_dir
        self.log = io.StringIO()
        self._handler = logging.StreamHandler(self.log)
        self._handler.setFormatter(JsonFormatter())
        self._handler.addFilter(lambda record: not record.name.startswith("relay.mock"))
        self._seen: list[tuple[str, str]] = []
        self._relay_logger = logging.getLogger("relay")
        self._old_level = self._relay_logger.level

    def __enter__(self) -> LeakGuard:
        self._relay_logger.addHandler(self._handler)
        self._relay_logger.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._relay_logger.removeHandler(self._handler)
        self._relay_logger.setLevel(self._old_level)

    def saw(self, where: str, text: str | bytes | bytearray) -> None:
        """Register something a client (or anyone outside the relay) received."""
        self._seen.append((where, text if isinstance(text, str) else bytes(text).decode("utf-8", "replace")))

    @asynccontextmanager
    async def relay(self, upstream: MockUpstream | str, **options: Any) -> AsyncIterator[RelayServer]:
        """A relay in front of the mock (or a URL) with the distinctive key, recording every session,
        requiring the relay token, without a drain on exit."""
        settings: dict[str, Any] = {
            "upstream": upstream if isinstance(upstream, str) else upstream.url,
            "dialect": "openai", "port": 0, "api_key": PROVIDER_KEY, "auth_token": RELAY_TOKEN,
            "drain_seconds": 0.0, "record_dir": self.record_dir, "tools": [get_weather],
        }
        async with RelayServer(ServerConfig(**(settings | options))) as server:
            yield server

    @asynccontextmanager
    async def client(self, server: RelayServer | str, **options: Any) -> AsyncIterator[RealtimeClient]:
        """A realtime client whose received frames, close reason and refusal body are registered."""
        options.setdefault("token", RELAY_TOKEN)
        client: RealtimeClient | None = None
        try:
            async with realtime_client(server, **options) as client:
                yield client
        except InvalidStatus as refused:
            self.saw("refused handshake", refused.response.body or b"")
            raise
        finally:
            if client is not None:
                self.saw("client frames", "\n".join(client.frames))
                self.saw("client close", f"{client.ws.close_code} {client.ws.close_reason}")

    def check(self) -> None:
        texts = [("log", self.log.getvalue()), *self._seen]
        texts += [(f"recording {path.name}", path.read_text(errors="replace"))
                  for path in sorted(self.record_dir.glob("*.jsonl"))]
        for where, text in texts:
            assert PROVIDER_KEY not in text, f"the provider key leaked into the {where}"
            if where == "log" or where.startswith("recording"):
                assert RELAY_TOKEN not in text, f"the relay token leaked into the {where}"


@asynccontextmanager
async def bare_upstream(handler: Callable[[ServerConnection], Awaitable[None]]) -> AsyncIterator[str]:
    """A bare WebSocket server standing in for the provider, for what the mock will not do (send
    bytes that are not UTF-8, leave a closing handshake unanswered). Yields its realtime URL."""
    async with serve(handler, "127.0.0.1", 0, max_size=None, close_timeout=0.1) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/v1/realtime"


def session_created() -> str:
    return json.dumps({"type": "session.created", "event_id": "event_1",
                       "session": {"type": "realtime", "id": "sess_bare", "tools": []}})
