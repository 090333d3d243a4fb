"""Helpers for the mock upstream's tests: clients (the official SDK, raw websockets) and a check
that every event the mock sent parses as the SDK's server event types."""

from __future__ import annotations

import asyncio
import json
import os
import typing
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import openai.types.beta.realtime as beta_types
import openai.types.realtime as ga_types
import pytest
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection
from pydantic import BaseModel, TypeAdapter
from websockets.asyncio.client import ClientConnection, connect

from relay.mock import MockUpstream


def _models_by_type(union: Any) -> dict[str, TypeAdapter[Any]]:
    """The SDK's server event union split by event type, so a failure names the right model."""
    members = typing.get_args(typing.get_args(union)[0])
    return {
        literal: TypeAdapter(member)
        for member in members
        for literal in typing.get_args(member.model_fields["type"].annotation)
    }


GA_EVENTS = _models_by_type(ga_types.RealtimeServerEvent)
BETA_EVENTS = _models_by_type(beta_types.RealtimeServerEvent)
# Fields real servers send that the SDK models do not declare (all seen in ../shared/recordings).
RECORDED_EXTRA_FIELDS = frozenset(
    {"obfuscation", "object", "id", "expires_at", "client_secret", "include", "image_tokens", "cached_tokens_details"}
)
FOUNDRY_ITEM_FIELDS = frozenset({"response_id", "created_at", "name"})
TIMEOUT = 3.0


def undeclared_fields(value: Any, path: str = "") -> list[str]:
    """Paths of fields a parsed SDK model kept as extras, i.e. fields its schema lacks."""
    found: list[str] = []
    if isinstance(value, BaseModel):
        found += [f"{path}.{key}" for key in value.model_extra or {}]
        for name in type(value).model_fields:
            found += undeclared_fields(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, list):
        for index, element in enumerate(value):
            found += undeclared_fields(element, f"{path}[{index}]")
    elif isinstance(value, dict):
        for key, element in value.items():
            found += undeclared_fields(element, f"{path}.{key}")
    return found


def check_event(event: dict[str, Any], *, beta: bool = False, foundry: bool = False) -> Any:
    """Parse with the SDK's server event union; fail on fields the SDK and recordings do not know."""
    models = BETA_EVENTS if beta else GA_EVENTS
    assert event.get("type") in models, f"not a {'beta' if beta else 'GA'} server event: {event.get('type')}"
    parsed = models[event["type"]].validate_python(event)
    assert parsed.type == event["type"]
    allowed = RECORDED_EXTRA_FIELDS | (FOUNDRY_ITEM_FIELDS if foundry else frozenset())
    unknown = [p for p in undeclared_fields(parsed) if p.rsplit(".", 1)[-1] not in allowed]
    assert not unknown, f"{event['type']} has fields the SDK does not declare: {unknown}"
    return parsed


MockFactory = Callable[..., Awaitable[MockUpstream]]


@pytest.fixture
def recordings_dir() -> Path:
    """The shared real-session recordings: $RELAY_SHARED_DIR, else ../shared beside the checkout,
    else /work/shared."""
    candidates = [Path(os.environ["RELAY_SHARED_DIR"])] if "RELAY_SHARED_DIR" in os.environ else []
    candidates += [Path(__file__).resolve().parents[3] / "shared", Path("/work/shared")]
    for base in candidates:
        if (base / "recordings").is_dir():
            return base / "recordings"
    pytest.skip("the shared recordings are not available")


@pytest.fixture
async def make_mock() -> AsyncIterator[MockFactory]:
    """Start mocks for a test; afterwards check every event each one sent against the SDK types
    (pass `validate=False` for tests that inject malformed events on purpose)."""
    checked: list[MockUpstream] = []
    async with AsyncExitStack() as stack:

        async def factory(*, validate: bool = True, **kwargs: Any) -> MockUpstream:
            mock = await stack.enter_async_context(MockUpstream(**kwargs))
            if validate:
                checked.append(mock)
            return mock

        yield factory
    for mock in checked:
        wires = {session.id: session.wire for session in mock.sessions}
        for record in mock.sent:
            wire = wires[record.session_id]
            check_event(record.event, beta=wire.beta, foundry=wire.foundry)


@asynccontextmanager
async def sdk_connect(mock: MockUpstream, **options: Any) -> AsyncIterator[AsyncRealtimeConnection]:
    """The official SDK connected to the mock; the first event (session.created) is consumed."""
    client = AsyncOpenAI(api_key="sk-test", websocket_base_url=mock.base_url + "/v1", max_retries=0)
    async with client.realtime.connect(model="gpt-realtime", **options) as connection:
        first = await asyncio.wait_for(connection.recv(), TIMEOUT)
        assert first.type == "session.created"
        yield connection


async def sdk_until(connection: AsyncRealtimeConnection, event_type: str) -> list[Any]:
    """Typed SDK events up to and including the first of `event_type`."""
    events = []
    while True:
        event = await asyncio.wait_for(connection.recv(), TIMEOUT)
        events.append(event)
        if event.type == event_type:
            return events


class RawClient:
    """A plain WebSocket client for what the SDK cannot express; events are dicts."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def send(self, event: dict[str, Any] | str) -> None:
        await self.ws.send(event if isinstance(event, str) else json.dumps(event))

    async def recv(self) -> dict[str, Any]:
        return json.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT))

    async def until(self, event_type: str) -> list[dict[str, Any]]:
        events = []
        while True:
            events.append(await self.recv())
            if events[-1]["type"] == event_type:
                return events

    async def ask(self, event: dict[str, Any] | str, reply_type: str) -> list[dict[str, Any]]:
        await self.send(event)
        return await self.until(reply_type)


@asynccontextmanager
async def raw_connect(
    mock: MockUpstream,
    query: str = "model=gpt-realtime",
    *,
    path: str = "/v1/realtime",
    headers: dict[str, str] | None = None,
    subprotocols: list[str] | None = None,
    skip_created: bool = True,
) -> AsyncIterator[RawClient]:
    url = f"{mock.base_url}{path}?{query}" if query else f"{mock.base_url}{path}"
    async with connect(url, additional_headers=headers, subprotocols=subprotocols, max_size=None) as ws:  # type: ignore[arg-type]
        client = RawClient(ws)
        if skip_created:
            assert (await client.recv())["type"] == "session.created"
        yield client


def types_of(events: list[Any]) -> list[str]:
    return [e["type"] if isinstance(e, dict) else e.type for e in events]


def user_text(text: str, **extra: Any) -> dict[str, Any]:
    """A `conversation.item.create` event with a user text message."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return {"type": "conversation.item.create", "item": item, **extra}


WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TIME_TOOL = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
