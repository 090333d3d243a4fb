"""The example tools the tests share, as the relay runs them and as a client declares them on the
wire, and the mock scripts in which the model calls them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio

from relay.mock import MockScript, Reply, Rule, ToolCall
from relay.tools import tool


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


@tool(name="get_weather")
def get_weather_data(city: str) -> dict:
    """Current weather for a city."""
    return {"city": city, "temp_c": 21}


@tool
async def track(parcel: str) -> AsyncIterator[str]:
    """Follow a parcel as it moves."""
    yield f"{parcel} picked up"
    yield f"{parcel} delivered"


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


class CountedWeather:
    """A `get_weather` that keeps the city of every run, to prove how often (or whether) it ran."""

    def __init__(self) -> None:
        self.runs: list[str] = []

        @tool(name="get_weather")
        def counted_weather(city: str) -> str:
            """Current weather in a city (each run is counted)."""
            self.runs.append(city)
            return f"sunny in {city}"

        self.tool = counted_weather


def definition(relay_tool: Any) -> dict[str, Any]:
    """A relay tool as an OpenAI client declares it (`session.update` / accept `tools`)."""
    spec = relay_tool.__relay_tool__
    return {"type": "function", "name": spec.name, "description": spec.description, "parameters": spec.parameters}


# ---- declared by clients (OpenAI) ----------------------------------------------------------------
WEATHER_TOOL = definition(get_weather)
ORDER_TOOL = {
    "type": "function",
    "name": "lookup_order",
    "description": "Where an order is.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
}
TIME_TOOL = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
DOOR_TOOL = {"type": "function", "name": "open_door", "description": "Open a door",
             "parameters": {"type": "object", "properties": {"door": {"type": "string"}}}}

# ---- declared by clients (Gemini functionDeclarations) ---------------------------------------------
GEMINI_WEATHER = {"name": "get_weather", "description": "Current weather.",
                  "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}
GEMINI_DOOR = {"name": "open_door", "description": "Open a door.",
               "parametersJsonSchema": {"type": "object", "properties": {"door": {"type": "string"}}}}

# ---- what the mock's model does ------------------------------------------------------------------
WEATHER_SCRIPT = MockScript(
    rules=[
        Rule(match="weather", say="Let me check.", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})]),
        Rule(match="order", calls=[ToolCall(name="lookup_order", arguments={"order_id": "A1"})]),
    ],
    after_outputs=Reply(say="Here is what I found: {output}"),
)
"""OpenAI: asked about the weather, the model calls get_weather for Paris; about an order,
lookup_order; then it speaks the output."""

GEMINI_SCRIPT = MockScript(
    rules=[
        Rule(match="weather", say="Let me check.",
             calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})]),
        Rule(match="door", calls=[ToolCall(name="open_door", arguments={"door": "front"})]),
        Rule(match="both", calls=[ToolCall(name="get_weather", arguments={"city": "Rome"}),
                                  ToolCall(name="open_door", arguments={"door": "back"})]),
        Rule(match="ship", calls=[ToolCall(name="ship", arguments={"order_id": 7})]),
        Rule(match="track", calls=[ToolCall(name="track", arguments={"parcel": "P1"})]),
    ],
    after_outputs=Reply(say="Here is what I found: {outputs}"),
    default=Reply(say="Hello from the mock."),
)
"""Gemini: the weather, a door, both at once, a slow shipment, a streamed parcel; then the model
speaks every output."""
