"""`relay serve --live-reseed` against the project's GPT-Live mock, with the official SDK's
`client.live.connect()` pointed at the relay, unchanged: the upstream connection drops mid
conversation (no `session.closed`); the relay starts a new session seeded with the first one's
configuration (its own tools in it), the conversation so far and what its tools already did,
and the same client connection talks on: it sees the new session's `session.started`, and the
relay's tools answer the new session's calls as before."""

from __future__ import annotations

import base64
from typing import Any

import anyio
import pytest
from openai import AsyncOpenAI
from openai.types.live import ServerEvent
from pydantic import TypeAdapter
from websockets.exceptions import ConnectionClosed

from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.session.policy import INTERNAL_ERROR
from relay.tools import tool
from tests.support.clients import TIMEOUT
from tests.support.keys import RELAY_TOKEN
from tests.support.relays import relay_for

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ServerEvent)
AUDIO = base64.b64encode(bytes(4800)).decode()   # 100 ms of PCM16 at 24 kHz
SCRIPT = MockScript(rules=[Rule(match="weather", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})])],
                    after_outputs=Reply(say="Here it is: {output}"))
DELEGATION = {"type": "responses", "responses": {"model": "gpt-5.4"}}


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


async def test_a_dropped_upstream_is_carried_on_in_a_seeded_session() -> None:
    shown: list[Any] = []
    async with MockUpstream(script=SCRIPT, dialect="live") as mock:
        async with relay_for(mock, path="/v1/live/sessions", dialect="live", tools=[get_weather],
                             live_reseed=True) as server:
            client = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
            async with client.live.connect() as connection:

                async def read_until(done: Any) -> None:
                    while not done():
                        shown.append(SERVER_EVENT.validate_json(await connection.recv_bytes()))

                async def weather_turn(session: Any) -> None:
                    """The caller asks; the relay's tool answers; the model says it."""
                    heard = len([e for e in shown if e.type == "session.output_transcript.delta"])
                    await connection.send({"type": "session.input_audio.append", "audio": AUDIO})
                    await mock.user_turn(session, "What's the weather in Paris?")
                    await mock.wait_for(lambda e: e["type"] == "response.create", TIMEOUT, session=session)
                    for _ in range(30):   # the caller's silence: the timeline reaches the model's words
                        await connection.send({"type": "session.input_audio.append", "audio": AUDIO})
                    await read_until(lambda: "Here it is" in "".join(
                        [e.delta for e in shown if e.type == "session.output_transcript.delta"][heard:]))

                await connection.send({"type": "session.start", "session": {
                    "model": "gpt-live-1", "instructions": "Be brief.", "delegation": DELEGATION}})
                with anyio.fail_after(TIMEOUT):
                    await read_until(lambda: any(e.type == "session.started" for e in shown))
                    first = mock.sessions[-1]
                    await weather_turn(first)
                    await mock.close_session(first, INTERNAL_ERROR, "the connection dropped")
                    await read_until(lambda: sum(e.type == "session.started" for e in shown) == 2)
                    second = mock.sessions[-1]
                    assert second is not first
                    await weather_turn(second)
                    await connection.send({"type": "session.close"})
                    await read_until(lambda: any(e.type == "session.closed" for e in shown))
            received = list(mock.received)
            refused = [record.event for record in mock.sent if record.event["type"] == "error"]

    assert refused == [], "the mock refused something the relay sent"
    ids = [e.session.id for e in shown if e.type == "session.started"]
    assert ids == [first.id, second.id] and ids[0] != ids[1], "the client is told the new session's id"
    starts = [r.event for r in received if r.event["type"] == "session.start"]
    assert len(starts) == 2 and starts[1]["session"]["instructions"] == "Be brief."
    assert [t["name"] for t in starts[1]["session"]["delegation"]["responses"]["tools"]] == ["get_weather"]
    history = [(item["role"], item["content"][0]["text"]) for item in starts[1]["session"]["input"]]
    assert history[0][0] == "developer" and "get_weather" in history[0][1] and "sunny in Paris" in history[0][1]
    assert ("user", "What's the weather in Paris?") in history
    assert any(role == "assistant" and "Here it is" in text for role, text in history)
    for session in (first, second):   # each session's call answered once, its batch continued once
        kinds = [r.event["type"] for r in received if r.session_id == session.id]
        outputs = [r.event["item"] for r in received
                   if r.session_id == session.id and r.event["type"] == "response.item.create"]
        assert [item["output"] for item in outputs] == ["sunny in Paris"] and kinds.count("response.create") == 1
    assert not any("get_weather" in str(e.model_dump()) for e in shown), "the relay's tool reached the client"


LOOKING: list[anyio.Event] = []


@tool
async def slow_lookup(city: str) -> str:
    """A lookup that is still running when the connection drops (it says when it started)."""
    for started_looking in LOOKING:
        started_looking.set()
    await anyio.sleep_forever()
    return city


async def test_a_new_session_that_cannot_be_opened_ends_the_session_with_nothing_owed() -> None:
    """The connection drops while slow_lookup runs, and the new connection is refused: the relay
    ends the session at once (1011, "upstream lost"; it does not hang), and the running call is
    cancelled and recorded abandoned, nothing left owed."""
    script = MockScript(rules=[Rule(match="look", calls=[ToolCall(name="slow_lookup", arguments={"city": "Paris"})])])
    looking = anyio.Event()
    LOOKING[:] = [looking]
    async with MockUpstream(script=script, dialect="live") as mock:
        async with relay_for(mock, path="/v1/live/sessions", dialect="live", tools=[slow_lookup],
                             live_reseed=True) as server:
            client = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
            async with client.live.connect() as connection:
                await connection.send({"type": "session.start", "session": {"model": "gpt-live-1",
                                                                             "delegation": DELEGATION}})
                with anyio.fail_after(TIMEOUT):
                    while SERVER_EVENT.validate_json(await connection.recv_bytes()).type != "session.started":
                        pass
                    (session,) = server.sessions.values()
                    first = mock.sessions[-1]
                    await connection.send({"type": "session.input_audio.append", "audio": AUDIO})
                    await mock.user_turn(first, "Please look it up.")
                    await looking.wait()
                    mock.api_key = "sk-not-the-relays"   # the next handshake is refused
                    await mock.close_session(first, INTERNAL_ERROR, "the connection dropped")
                    end = await session.wait_closed()
                    with pytest.raises(ConnectionClosed) as closed:
                        while True:
                            await connection.recv_bytes()
    assert (end.by, end.code, end.reason) == ("relay", INTERNAL_ERROR, "upstream lost")
    assert closed.value.rcvd is not None and closed.value.rcvd.code == INTERNAL_ERROR
    assert [status for path, status in mock.handshakes] == [None, 401]
    assert [entry.state.value for entry in session.engine.ledger] == ["abandoned"]
