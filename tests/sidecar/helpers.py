"""Helpers for the sidecar's tests: a script in which the model calls the sidecar's tool and the
primary's own, tools whose handler the test releases, a tap that lets a test wait for a frame the
sidecar saw or sent, and a sidecar attached to a mock call. Everything binds 127.0.0.1 port 0."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio

from relay.http import http_request
from relay.mock import MockScript, MockSession, MockUpstream, Reply, Rule, ToolCall
from relay.sidecar import Sidecar, SidecarConfig
from relay.tools import ToolRegistry, tool

ACTIVE_RESPONSE = "conversation_already_has_active_response"


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


WEATHER_TOOL = ToolRegistry([get_weather]).definitions()[0]
ORDER_TOOL = {
    "type": "function",
    "name": "lookup_order",
    "description": "Where an order is.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
}
SCRIPT = MockScript(
    rules=[
        Rule(match="weather", say="Let me check.", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})]),
        Rule(match="order", calls=[ToolCall(name="lookup_order", arguments={"order_id": "A1"})]),
    ],
    after_outputs=Reply(say="Here is what I found: {output}"),
)


class Gate:
    """A `get_weather` whose handler waits until the test opens the gate."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.opened = anyio.Event()
        self.finished = anyio.Event()

        @tool(name="get_weather")
        async def gated_weather(city: str) -> str:
            """Current weather in a city."""
            self.entered.set()
            await self.opened.wait()
            self.finished.set()
            return f"sunny in {city}"

        self.tool = gated_weather


class Frames:
    """A sidecar tap: every frame it saw (`upstream>relay`) or sent (`relay>upstream`), parsed,
    and a way to wait for one. Frames are recorded before the engine acts on them, in the same
    step, so once a frame is here every earlier one has been fully handled."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []
        self._changed = anyio.Event()

    def __call__(self, direction: str, frame: str | bytes) -> None:
        self.frames.append((direction, json.loads(frame)))
        self._changed.set()
        self._changed = anyio.Event()

    def sent(self, event_type: str) -> list[dict[str, Any]]:
        return [e for d, e in self.frames if d == "relay>upstream" and e["type"] == event_type]

    async def wait_for(self, direction: str, predicate: Callable[[dict[str, Any]], bool], *,
                       start: int = 0, timeout: float = 5.0) -> dict[str, Any]:
        """The first frame from index `start` on in `direction` that satisfies `predicate`."""
        with anyio.fail_after(timeout):
            index = start
            while True:
                while index < len(self.frames):
                    seen_direction, event = self.frames[index]
                    index += 1
                    if seen_direction == direction and _matches(predicate, event):
                        return event
                await self._changed.wait()


def _matches(predicate: Callable[[dict[str, Any]], bool], event: dict[str, Any]) -> bool:
    try:
        return bool(predicate(event))
    except (KeyError, IndexError, TypeError):
        return False


@asynccontextmanager
async def sidecar_on(mock: MockUpstream, call_id: str, tools: list[Any], **options: Any
                   ) -> AsyncIterator[tuple[Sidecar, Frames]]:
    """A sidecar on `call_id` of `mock`, running in a task group, once it has seen the session.
    It detaches on exit. `options` are SidecarConfig fields (`sleep` and `tap` go to Sidecar)."""
    frames = Frames()
    sleep = options.pop("sleep", anyio.sleep)
    config = SidecarConfig(tools=tools, upstream=mock.url, dialect="openai", api_key="sk-test", **options)
    sidecar = Sidecar(call_id, config, tap=frames, sleep=sleep)
    async with anyio.create_task_group() as group:
        group.start_soon(sidecar.run)
        await frames.wait_for("upstream>relay", lambda e: e["type"] == "session.created")
        yield sidecar, frames
        await sidecar.stop()


async def accepted_call(mock: MockUpstream) -> tuple[str, MockSession]:
    """A SIP-like call (a session without a socket), accepted with the sidecar's tool as the
    application's webhook handler would: its call_id and its mock session."""
    call_id = mock.create_call()
    response = await http_request("POST", f"{mock.rest_url}/realtime/calls/{call_id}/accept", {},
                                  json.dumps({"type": "realtime", "tools": [WEATHER_TOOL]}).encode())
    assert response.status == 200
    session = mock.find_session(call_id)
    assert session is not None
    return call_id, session


def user_text(text: str) -> dict[str, Any]:
    return {"type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}


def session_tools(tools: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "session.update", "session": {"type": "realtime", "tools": tools}}


def outputs_received(mock: MockUpstream) -> list[tuple[int, str]]:
    """(connection index, call_id) of every function_call_output the mock received."""
    return [(record.connection, record.event["item"]["call_id"]) for record in mock.received
            if record.event.get("type") == "conversation.item.create"
            and record.event.get("item", {}).get("type") == "function_call_output"]


def said(event: dict[str, Any]) -> str:
    """What a response.done's output says (transcripts and texts)."""
    return json.dumps(event["response"]["output"])
