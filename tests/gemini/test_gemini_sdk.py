"""The google-genai SDK through `relay serve --dialect gemini` to the Gemini mock, end to end on
loopback: the relay's calls are answered and hidden, the client's call is left to the client, a
barge-in cancels a relay call (and no answer follows), and a streaming tool's interim answers reach
the model with `willContinue`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from google import genai
from google.genai import types as genai_types

from relay.edges.serve import RelayServer, ServerConfig
from relay.mock import MockUpstream
from relay.mock.quirks import Quirks
from relay.recording.reader import read_recording
from relay.tools import tool
from relay.tools.spec import build_spec
from tests.support.clients import TIMEOUT, Certificate
from tests.support.keys import GEMINI_KEY, RELAY_TOKEN
from tests.support.tools import GEMINI_DOOR, GEMINI_SCRIPT, track

MODEL = "gemini-live-2.5-flash-preview"
TEXT_WITH_DOOR = {"response_modalities": ["TEXT"], "tools": [{"function_declarations": [
    {"name": GEMINI_DOOR["name"], "description": GEMINI_DOOR["description"],
     "parameters_json_schema": GEMINI_DOOR["parametersJsonSchema"]}]}]}
"""The client's config: text answers, and its own tool (`open_door`)."""


@tool
def get_weather(city: str) -> dict:
    """Current weather in a city."""
    return {"city": city, "sky": "sunny", "temp_c": 21}


class Shipping:
    """A slow tool whose cancellation the test can see."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.cancelled = anyio.Event()

    async def ship(self, order_id: int) -> str:
        """Ship an order (slow)."""
        self.started.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled.set()
        return "never"


@asynccontextmanager
async def relay_and_mock(certificate: Certificate, tmp_path: Path, *tools: Any,
                         quirks: Quirks | None = None, **options: Any
                         ) -> AsyncIterator[tuple[RelayServer, MockUpstream]]:
    async with MockUpstream(script=GEMINI_SCRIPT, dialect="gemini", api_key=GEMINI_KEY, quirks=quirks) as mock:
        config = ServerConfig(upstream=mock.url, dialect="gemini", tools=list(tools), port=0, api_key=GEMINI_KEY,
                              auth_token=RELAY_TOKEN, drain_seconds=0.0, tls_cert=certificate.cert,
                              tls_key=certificate.key, record_dir=tmp_path, **options)
        async with RelayServer(config) as server:
            yield server, mock


def sdk_client(server: RelayServer, certificate: Certificate) -> genai.Client:
    return genai.Client(api_key=RELAY_TOKEN, http_options={
        "base_url": f"https://127.0.0.1:{server.port}", "api_version": "v1beta",
        "async_client_args": {"ssl": certificate.client_context()}})


async def model_turn(session: Any) -> tuple[str, list[genai_types.LiveServerMessage]]:
    """Messages up to the next turnComplete or toolCall, and the words the model said in them."""
    messages = []
    async with asyncio.timeout(TIMEOUT):
        async for message in session.receive():
            messages.append(message)
            if message.tool_call is not None:
                break
    words = "".join(m.text or "" for m in messages if m.server_content is not None)
    return words, messages


def relay_answers(mock: MockUpstream) -> list[dict[str, Any]]:
    """The FunctionResponses the mock received, each checked against the SDK's type."""
    answers = []
    for record in mock.received:
        message = record.event.get("toolResponse") or record.event.get("tool_response")
        if message is not None:
            genai_types.LiveClientToolResponse.model_validate(message)
            answers += message["functionResponses"]
    return answers


async def test_sdk_client_through_the_relay(loopback_certificate: Certificate, tmp_path: Path) -> None:
    shipping = Shipping()
    ship = build_spec(shipping.ship, name="ship", timeout=30, interruption="cancel")
    async with relay_and_mock(loopback_certificate, tmp_path, get_weather, ship, track) as (server, mock):
        client = sdk_client(server, loopback_certificate)
        async with client.aio.live.connect(model=MODEL, config=TEXT_WITH_DOOR) as session:
            # a relay call: answered by the relay, never seen by the client
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "What's the weather?"}]})
            words, messages = await model_turn(session)
            assert words.startswith("Let me check.Here is what I found: ") and "sunny" in words
            assert all(m.tool_call is None for m in messages)

            # the client's own call: the SDK client answers it
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "Open the door"}]})
            _, messages = await model_turn(session)
            (call,) = messages[-1].tool_call.function_calls
            assert call.name == "open_door" and call.args == {"door": "front"}
            await session.send_tool_response(function_responses=[genai_types.FunctionResponse(
                id=call.id, name=call.name, response={"output": "the front door is open"})])
            words, _ = await model_turn(session)
            assert "the front door is open" in words

            # a barge-in cancels the relay's slow call: its handler stops, no answer is sent
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "ship it"}]})
            with anyio.fail_after(TIMEOUT):
                await shipping.started.wait()
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "never mind"}]})
            words, messages = await model_turn(session)
            assert messages[0].server_content.interrupted is True
            assert all(m.tool_call_cancellation is None for m in messages), "the client never saw the call"
            assert words == "" and messages[-1].server_content.turn_complete, "interrupted > turn_complete"
            words, messages = await model_turn(session)   # the model's answer to "never mind"
            assert words == "Hello from the mock."
            with anyio.fail_after(TIMEOUT):
                await shipping.cancelled.wait()

            # a streaming tool: interim answers with willContinue, then the final one
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "track my parcel"}]})
            heard = ""
            async with asyncio.timeout(TIMEOUT):
                while "P1 delivered" not in heard:
                    heard += (await model_turn(session))[0]
            assert "P1 picked up" in heard

    gemini_session = mock.sessions[0]
    calls = {call.name: call for call in gemini_session.calls.values()}
    assert calls["ship"].state == "cancelled" and calls["ship"].answers == []
    assert calls["get_weather"].state == "answered" and calls["open_door"].state == "answered"
    answers = relay_answers(mock)
    weather = [a for a in answers if a["name"] == "get_weather"]
    assert weather == [{"id": calls["get_weather"].id, "name": "get_weather",
                        "response": {"output": {"city": "Paris", "sky": "sunny", "temp_c": 21}}}]
    tracked = [(a.get("willContinue"), a.get("scheduling"), a["response"]) for a in answers if a["name"] == "track"]
    assert tracked == [(True, "WHEN_IDLE", {"output": "P1 picked up"}), (True, "WHEN_IDLE", {"output": "P1 delivered"}),
                       (False, "SILENT", {"output": "P1 delivered"})]
    declared = {d["name"]: d for tool_entry in gemini_session.setup["tools"]
                for d in tool_entry.get("functionDeclarations") or tool_entry.get("function_declarations") or []}
    assert set(declared) == {"open_door", "get_weather", "ship", "track"}
    assert declared["track"]["behavior"] == "NON_BLOCKING" and "behavior" not in declared["get_weather"]
    connection = gemini_session.connections[0]
    assert connection.headers["x-goog-api-key"] == GEMINI_KEY and "key" not in connection.query

    (path,) = tmp_path.glob("*.jsonl")
    recording = read_recording(path)
    assert recording.header["dialect"] == "gemini"
    to_client = [f.binary or (f.raw or json.dumps(f.event)).encode() for f in recording.frames
                 if f.direction == "relay>client"]
    assert to_client and all(f.binary is not None for f in recording.frames if f.direction == "relay>client")
    for name in (b"get_weather", b"ship", b"track", calls["get_weather"].id.encode(), calls["ship"].id.encode()):
        assert not any(name in frame for frame in to_client), f"the client saw {name!r}"


def call_parts(messages: list[genai_types.LiveServerMessage]) -> list[genai_types.FunctionCall]:
    """The calls the client saw as `functionCall` parts of the model's turn."""
    return [part.function_call for m in messages if m.server_content is not None and m.server_content.model_turn
            for part in m.server_content.model_turn.parts or [] if part.function_call is not None]


async def test_sdk_client_with_calls_delivered_twice(loopback_certificate: Certificate, tmp_path: Path) -> None:
    """Gemini's double delivery (each call as a model-turn part and in a toolCall) through the relay:
    the relay's call is hidden in both shapes, its text kept, run and answered once; the client's
    call reaches the client in both shapes and is answered by it once."""
    async with relay_and_mock(loopback_certificate, tmp_path, get_weather, quirks=Quirks(call_parts=True)) as (
            server, mock):
        client = sdk_client(server, loopback_certificate)
        async with client.aio.live.connect(model=MODEL, config=TEXT_WITH_DOOR) as session:
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "What's the weather?"}]})
            words, messages = await model_turn(session)
            assert words.startswith("Let me check.Here is what I found: ") and "sunny" in words
            assert call_parts(messages) == [] and all(m.tool_call is None for m in messages)

            await session.send_client_content(turns={"role": "user", "parts": [{"text": "Open the door"}]})
            _, messages = await model_turn(session)
            (part,) = call_parts(messages)
            (call,) = messages[-1].tool_call.function_calls
            assert part.id == call.id and part.name == call.name == "open_door"
            await session.send_tool_response(function_responses=[genai_types.FunctionResponse(
                id=call.id, name=call.name, response={"output": "the front door is open"})])
            words, _ = await model_turn(session)
            assert "the front door is open" in words

    gemini_session = mock.sessions[0]
    calls = {c.name: c for c in gemini_session.calls.values()}
    assert [a["name"] for a in relay_answers(mock)] == ["get_weather", "open_door"]   # once each
    assert calls["get_weather"].state == calls["open_door"].state == "answered"
    (path,) = tmp_path.glob("*.jsonl")
    recording = read_recording(path)
    to_client = [f.binary or (f.raw or "").encode() for f in recording.frames if f.direction == "relay>client"]
    for hidden in (b"get_weather", calls["get_weather"].id.encode()):
        assert not any(hidden in frame for frame in to_client), f"the client saw {hidden!r}"
    decided = [n.fields for n in recording.notes if n.kind == "tool_call"]
    assert [(d["name"], d["outcome"]) for d in decided] == [("get_weather", "ok")]   # the relay's call, once
