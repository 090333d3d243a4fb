"""Helpers for Gemini Live socket tests: a raw client that keeps every frame, its kind and the
close it got, and a check that a server message parses as `google-genai`'s own type."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from google.genai import types as genai_types
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from relay.mock.gemini import URL_PATH
from relay.mock.script import MockScript, Reply, Rule, ToolCall

MODEL = "models/gemini-live-2.5-flash-preview"
PROVIDER_KEY = "AIza-test-SECRET-0123456789"
RELAY_TOKEN = "relay-token-77f0e2"
TIMEOUT = 5.0


def server_message(message: dict[str, Any]) -> genai_types.LiveServerMessage:
    """The message as the SDK parses it; fails on a field or enum value the SDK does not know."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return genai_types.LiveServerMessage.model_validate(message)


class GeminiClient:
    """A Gemini Live client on a raw socket: every message received, and the frame kinds."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.messages: list[dict[str, Any]] = []
        self.binary: list[bool] = []

    async def send(self, message: dict[str, Any] | str) -> None:
        await self.ws.send(message if isinstance(message, str) else json.dumps(message))

    async def setup(self, **fields: Any) -> dict[str, Any]:
        await self.send({"setup": {"model": MODEL, **fields}})
        return await self.wait_for(lambda m: "setupComplete" in m)

    async def say(self, text: str) -> None:
        await self.send({"clientContent": {"turns": [{"role": "user", "parts": [{"text": text}]}],
                                           "turnComplete": True}})

    async def answer(self, call_id: str, name: str, output: Any, **extra: Any) -> None:
        await self.send({"toolResponse": {"functionResponses": [
            {"id": call_id, "name": name, "response": {"output": output}, **extra}]}})

    async def receive(self) -> dict[str, Any]:
        frame = await self.ws.recv()
        message = json.loads(frame)
        self.messages.append(message)
        self.binary.append(isinstance(frame, bytes))
        return message

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = TIMEOUT) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                message = await self.receive()
                if predicate(message):
                    return message

    async def turn(self, timeout: float = TIMEOUT) -> list[dict[str, Any]]:
        """The messages up to the next turnComplete or toolCall."""
        start = len(self.messages)
        await self.wait_for(lambda m: "toolCall" in m or m.get("serverContent", {}).get("turnComplete") is True,
                            timeout)
        return self.messages[start:]

    async def closed(self, timeout: float = TIMEOUT) -> tuple[int, str]:
        async with asyncio.timeout(timeout):
            try:
                while True:
                    await self.receive()
            except ConnectionClosed as closed:
                assert closed.rcvd is not None, f"no close frame received: {closed!r}"
                return closed.rcvd.code, closed.rcvd.reason


@asynccontextmanager
async def gemini_client(base_url: str, *, path: str = URL_PATH, key: str | None = PROVIDER_KEY,
                        query: str = "") -> AsyncIterator[GeminiClient]:
    headers = {"x-goog-api-key": key} if key is not None else {}
    async with connect(base_url + path + query, additional_headers=headers, open_timeout=TIMEOUT,
                       close_timeout=1, max_queue=None) as ws:
        yield GeminiClient(ws)


def model_words(messages: list[dict[str, Any]]) -> str:
    """Everything the model said in these messages: text parts and output transcriptions."""
    words = []
    for message in messages:
        content = message.get("serverContent") or {}
        for part in (content.get("modelTurn") or {}).get("parts") or []:
            words.append(part.get("text") or "")
        words.append((content.get("outputTranscription") or {}).get("text") or "")
    return "".join(words)


WEATHER_SCRIPT = MockScript(
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
GET_WEATHER = {"name": "get_weather", "description": "Current weather.",
               "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}
OPEN_DOOR = {"name": "open_door", "description": "Open a door.",
             "parametersJsonSchema": {"type": "object", "properties": {"door": {"type": "string"}}}}
