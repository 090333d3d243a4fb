"""`relay serve --store` with Gemini Live: a google-genai client hands its relay handle to another
replica sharing a Redis, and the session goes on there (relay/edges/handle_resume.py): the new
upstream connection resumes the mock's session with the service's handle, which the client never
sees, and the relay's call ran once. A handle that is unknown, or whose session is open on another
connection, closes the client's connection with one clear reason. Loopback, the Gemini mock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from google.genai import types as genai_types

from relay.edges.serve import RelayServer, ServerConfig
from relay.mock import MockUpstream
from relay.mock.gemini import GeminiMockSession
from relay.offline.replay import replay_async
from relay.tools import tool
from tests.gemini.conftest import loopback_certificate  # noqa: F401  (the fixture, for this directory)
from tests.gemini.test_gemini_sdk import MODEL, model_turn, relay_answers, sdk_client
from tests.support.clients import TIMEOUT, Certificate
from tests.support.keys import GEMINI_KEY, RELAY_TOKEN
from tests.support.tools import GEMINI_SCRIPT


@tool(name="get_weather")
def weather(city: str) -> dict:
    """Current weather in a city."""
    return {"city": city, "sky": "sunny"}


@asynccontextmanager
async def replica(mock: MockUpstream, certificate: Certificate, store: str, *tools: Any) -> AsyncIterator[RelayServer]:
    config = ServerConfig(upstream=mock.url, dialect="gemini", tools=list(tools), port=0, api_key=GEMINI_KEY,
                          auth_token=RELAY_TOKEN, drain_seconds=0.0, tls_cert=certificate.cert,
                          tls_key=certificate.key, store=store)
    async with RelayServer(config) as server:
        yield server


async def handed_handle(session: Any, seen: list[genai_types.LiveServerMessage]) -> str:
    """The handle of the next resumable `sessionResumptionUpdate` the client receives."""
    async with asyncio.timeout(TIMEOUT):
        while True:
            async for message in session.receive():
                seen.append(message)
                update = message.session_resumption_update
                if update is not None and update.resumable and update.new_handle:
                    return update.new_handle


async def refused(server: RelayServer, certificate: Certificate, handle: str) -> str:
    """The reason the relay gives when a client resumes with `handle` and is refused."""
    client = sdk_client(server, certificate)
    with pytest.raises(Exception) as caught:
        async with client.aio.live.connect(model=MODEL, config={
                "response_modalities": ["TEXT"], "session_resumption": {"handle": handle}}) as session:
            await model_turn(session)
    return str(caught.value)


async def test_a_gemini_client_resumes_on_another_replica_with_the_relays_handle(
        loopback_certificate: Certificate, redis_url: str, tmp_path: Path) -> None:  # noqa: F811
    runs: list[str] = []

    @tool
    def get_weather(city: str) -> dict:
        """Current weather in a city."""
        runs.append(city)
        return {"city": city, "sky": "sunny"}

    seen: list[genai_types.LiveServerMessage] = []
    config = {"response_modalities": ["TEXT"], "session_resumption": {}}
    async with MockUpstream(script=GEMINI_SCRIPT, dialect="gemini", api_key=GEMINI_KEY) as mock, \
            replica(mock, loopback_certificate, redis_url, get_weather) as first, \
            replica(mock, loopback_certificate, redis_url, get_weather) as second:
        async with sdk_client(first, loopback_certificate).aio.live.connect(model=MODEL, config=config) as session:
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "What's the weather?"}]})
            words, messages = await model_turn(session)
            seen += messages
            assert words.startswith("Let me check.Here is what I found: ") and "sunny" in words
            handle = await handed_handle(session, seen)
            [left] = first.sessions.values()
        await left.wait_closed()   # its last state written, its lease let go
        [upstream] = mock.sessions
        assert isinstance(upstream, GeminiMockSession)
        assert handle not in upstream.handles and len(handle) >= 43 and RELAY_TOKEN not in handle

        resumed_config = {"response_modalities": ["TEXT"], "session_resumption": {"handle": handle}}
        async with sdk_client(second, loopback_certificate).aio.live.connect(model=MODEL,
                                                                              config=resumed_config) as session:
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "hello"}]})
            words, messages = await model_turn(session)
            seen += messages
            assert words == "Hello from the mock."
            assert await handed_handle(session, seen) == handle   # the session keeps its relay handle
            # a second connection with the handle while this one holds the session: refused
            in_use = await refused(first, loopback_certificate, handle)
        unknown = await refused(second, loopback_certificate, "not-a-handle")

    # the mock's one session went on over a second connection, resumed with the service's handle
    assert mock.sessions[0] is upstream and len(upstream.connections) == 2
    assert all(other.setup is None for other in mock.sessions[1:]), "a refused resume's setup went up"
    setups = [record.event["setup"] for record in mock.received if "setup" in record.event]
    assert len(setups) == 2 and setups[1]["sessionResumption"]["handle"] in upstream.handles
    turns = [record.connection for record in mock.received if {"clientContent", "client_content"} & set(record.event)]
    assert turns == [0, 1]
    assert len(runs) == 1   # the relay's call ran once, before the drop; the resumed session did not rerun it
    assert len(relay_answers(mock)) == 1
    updates = [m.session_resumption_update for m in seen if m.session_resumption_update is not None]
    assert all(u.new_handle in (None, "", handle) for u in updates), "a service's handle reached the client"
    assert all(m.tool_call is None for m in seen), "the client saw the relay's call"
    assert "resume refused" in in_use and "open on another connection" in in_use
    assert "resume refused" in unknown and "unknown or expired" in unknown
    assert first.resumes is not None and second.resumes is not None
    assert first.resumes.counts["issued"] == 1 and second.resumes.counts["resumed"] == 1
    assert first.resumes.counts["refused_resume_token_in_use"] == 1
    assert second.resumes.counts["refused_resume_token_invalid"] == 1


async def test_a_call_cut_off_by_the_drop_is_not_run_again_after_the_resume(
        loopback_certificate: Certificate, tmp_path: Path) -> None:  # noqa: F811
    started = asyncio.Event()
    runs: list[str] = []

    @tool(name="get_weather")
    async def get_weather(city: str) -> dict:
        """Current weather in a city."""
        runs.append(city)
        started.set()
        await asyncio.Event().wait()   # never answers: the client leaves while it runs
        return {"city": city}

    seen: list[genai_types.LiveServerMessage] = []
    config = {"response_modalities": ["TEXT"], "session_resumption": {}}
    async with MockUpstream(script=GEMINI_SCRIPT, dialect="gemini", api_key=GEMINI_KEY) as mock, \
            replica(mock, loopback_certificate, "memory", get_weather) as server:
        async with sdk_client(server, loopback_certificate).aio.live.connect(model=MODEL, config=config) as session:
            handle = await handed_handle(session, seen)   # the one after setupComplete
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "What's the weather?"}]})
            async with asyncio.timeout(TIMEOUT):
                await started.wait()
            [left] = server.sessions.values()
        await left.wait_closed()
        resumed_config = {"response_modalities": ["TEXT"], "session_resumption": {"handle": handle}}
        async with sdk_client(server, loopback_certificate).aio.live.connect(model=MODEL,
                                                                              config=resumed_config) as session:
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "hello"}]})
            words, _ = await model_turn(session)
            assert words == "Hello from the mock."
    [upstream] = mock.sessions
    assert isinstance(upstream, GeminiMockSession) and len(upstream.connections) == 2
    assert [call.state for call in upstream.calls.values()] == ["cancelled"]   # lost with its turn, as the service does
    assert len(runs) == 1 and relay_answers(mock) == []   # started once, never run again nor answered late


async def test_the_recording_keeps_no_relay_handle_sent_and_replays(
        loopback_certificate: Certificate, tmp_path: Path) -> None:  # noqa: F811
    seen: list[genai_types.LiveServerMessage] = []
    config = {"response_modalities": ["TEXT"], "session_resumption": {}}
    async with MockUpstream(script=GEMINI_SCRIPT, dialect="gemini", api_key=GEMINI_KEY) as mock:
        settings = ServerConfig(upstream=mock.url, dialect="gemini", tools=[weather], port=0, api_key=GEMINI_KEY,
                                auth_token=RELAY_TOKEN, drain_seconds=0.0, tls_cert=loopback_certificate.cert,
                                tls_key=loopback_certificate.key, store="memory", record_dir=tmp_path)
        async with RelayServer(settings) as server:
            async with sdk_client(server, loopback_certificate).aio.live.connect(model=MODEL, config=config) as session:
                await session.send_client_content(turns={"role": "user", "parts": [{"text": "What's the weather?"}]})
                await model_turn(session)
                handle = await handed_handle(session, seen)
            [left] = server.sessions.values()
            await left.wait_closed()
    [recording] = tmp_path.glob("*.jsonl")
    assert handle not in recording.read_text(encoding="utf-8")
    replayed = await replay_async(recording, [weather])
    assert replayed.ok, [divergence.describe() for divergence in replayed.divergences]
