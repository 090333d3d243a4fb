"""`relay serve` with Gemini Live: the service says goAway mid-call, and the relay resumes the
session on a new upstream connection with the handle the service gave (relay/edges/going_away.py),
invisibly to the google-genai SDK client: it sees neither the goAway nor a second setupComplete,
the call is answered once, and the conversation goes on over the new connection, and the recording
replays to the same outcome. Loopback, the mock upstream (which routes a setup with a handle to
the session it names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from google.genai import types as genai_types

from relay.mock.gemini import GeminiMockSession
from relay.offline.replay import replay_async
from relay.tools import tool
from tests.gemini.test_gemini_sdk import MODEL, model_turn, relay_and_mock, relay_answers, sdk_client
from tests.support.clients import TIMEOUT, Certificate

CONFIG = {"response_modalities": ["TEXT"], "session_resumption": {}}


class Gate:
    """A weather tool that answers only once the test opens the gate."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.opened = anyio.Event()
        self.runs = 0

        @tool(name="get_weather")
        async def get_weather(city: str) -> dict:
            """Current weather in a city."""
            self.runs += 1
            self.entered.set()
            await self.opened.wait()
            return {"city": city, "sky": "sunny"}

        self.tool = get_weather


def setups(mock: Any) -> list[tuple[int, dict[str, Any]]]:
    return [(record.connection, record.event["setup"]) for record in mock.received if "setup" in record.event]


async def test_a_go_away_mid_call_resumes_upstream_with_the_handle_and_the_client_never_knows(
        loopback_certificate: Certificate, tmp_path: Path) -> None:
    gate = Gate()
    async with relay_and_mock(loopback_certificate, tmp_path, gate.tool) as (server, mock):
        client = sdk_client(server, loopback_certificate)
        async with client.aio.live.connect(model=MODEL, config=CONFIG) as session:
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "What's the weather?"}]})
            with anyio.fail_after(TIMEOUT):
                await gate.entered.wait()
            [upstream] = mock.sessions
            assert isinstance(upstream, GeminiMockSession)
            await mock.go_away(upstream, "10s")   # while the call waits: the service is not resumable
            gate.opened.set()
            words, first = await model_turn(session)
            assert words.startswith("Let me check.Here is what I found: ") and "sunny" in words
            # resumed on the handle the turn's end brought, on a second connection of the same session
            record = await mock.wait_for(lambda e: "setup" in e and "handle" in str(e), timeout=TIMEOUT)
            assert record.connection == 1 and len(upstream.connections) == 2
            await session.send_client_content(turns={"role": "user", "parts": [{"text": "hello"}]})
            words, second = await model_turn(session)
            assert words == "Hello from the mock."
        messages: list[genai_types.LiveServerMessage] = [*first, *second]
    assert all(m.go_away is None and m.setup_complete is None for m in messages)
    assert gate.runs == 1 and len(relay_answers(mock)) == 1
    (_, opening), (_, resumed) = setups(mock)
    handle = resumed["sessionResumption"]["handle"]
    assert handle in upstream.handles and "sessionResumption" in opening and "handle" not in opening["sessionResumption"]
    assert resumed["tools"] == opening["tools"]
    assert upstream.connections[0].closed
    # the client's second turn went up on the new connection
    turns = [r.connection for r in mock.received if "clientContent" in r.event or "client_content" in r.event]
    assert turns[-1] == 1
    # and the recording replays to the same outcome: the replay resumes where the session did
    [recording] = tmp_path.glob("*.jsonl")
    replayed = await replay_async(recording, [gate.tool])
    assert replayed.ok, [d.describe() for d in replayed.divergences]
