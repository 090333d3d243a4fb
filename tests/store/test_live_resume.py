"""`relay serve --dialect live --store`: a GPT-Live client that reconnects with its resume token to
another replica sharing a Redis carries its session on: the new upstream session's `session.start`
is seeded with the conversation so far and what the relay's tools already answered, and every
relay call is answered exactly once (the official SDK's `client.live.connect()` as the client)."""

from __future__ import annotations

import asyncio
import base64
from collections import Counter
from typing import Any

import anyio
import pytest
from openai import AsyncOpenAI
from openai.types.live import ServerEvent
from pydantic import TypeAdapter

from relay.edges.serve import RelayServer
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.tools import tool
from tests.support.clients import TIMEOUT, realtime_client
from tests.support.keys import RELAY_TOKEN
from tests.support.relays import captured_logs, relay_for
from tests.store.test_resume import (FakeMonotonic, blocking_book, counted_weather,
                                     three_refusals_logged_and_counted, unknown_and_expired_are_refused)

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ServerEvent)
AUDIO = base64.b64encode(bytes(4800)).decode()   # 100 ms of PCM16 at 24 kHz
PATH = "/v1/live/sessions"
DELEGATION = {"type": "responses", "responses": {"model": "gpt-5.4"}}
START = {"type": "session.start", "session": {"model": "gpt-live-1", "instructions": "Be brief.",
                                              "delegation": DELEGATION}}
QUESTION = "What's the weather in Paris?"
SCRIPT = MockScript(rules=[Rule(match="weather", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})]),
                           Rule(match="book", calls=[ToolCall(name="book", arguments={"table": 4})])],
                    after_outputs=Reply(say="Here it is: {output}"))


def live_relay(mock: MockUpstream, store: str, tools: list[Any]) -> Any:
    return relay_for(mock, path=PATH, dialect="live", tools=tools, store=store)


class Caller:
    """The official SDK's Live connection, with what it was shown."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.shown: list[Any] = []

    async def until(self, done: Any) -> Any:
        with anyio.fail_after(TIMEOUT):
            while not done():
                self.shown.append(SERVER_EVENT.validate_json(await self.connection.recv_bytes()))
        return self.shown[-1]

    async def audio(self, count: int = 1) -> None:
        for _ in range(count):
            await self.connection.send({"type": "session.input_audio.append", "audio": AUDIO})

    def heard(self) -> str:
        return "".join(e.delta for e in self.shown if e.type == "session.output_transcript.delta")


def sdk(server: RelayServer, **headers: str) -> Any:
    client = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
    # an unbounded queue: the model's audio left unread does not hold the close up for its timeout
    return client.live.connect(extra_headers=headers, max_retries=0, websocket_connection_options={"max_queue": None})


async def test_a_live_client_resumes_on_another_replica_seeded_with_the_conversation(redis_url: str) -> None:
    runs: Counter[str] = Counter()
    get_weather = counted_weather(runs)
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, \
            live_relay(mock, redis_url, [get_weather]) as first, live_relay(mock, redis_url, [get_weather]) as second:
        async with sdk(first) as connection:
            caller = Caller(connection)
            await connection.send(START)
            started = await caller.until(lambda: any(e.type == "session.started" for e in caller.shown))
            token = started.relay["resume_token"]   # the SDK keeps the relay's extra field
            assert len(token) >= 43 and RELAY_TOKEN not in token
            await caller.audio()
            await mock.user_turn(mock.sessions[-1], QUESTION)
            await mock.wait_for(lambda e: e["type"] == "response.create", TIMEOUT)
            await caller.audio(30)   # the caller's silence: the timeline reaches the model's words
            await caller.until(lambda: "Here it is" in caller.heard())
            [left] = first.sessions.values()
        await left.wait_closed()   # its last state written, its lease let go

        async with sdk(second, **{"x-relay-resume": token}) as connection:
            again = Caller(connection)
            await connection.send(START)
            resumed = await again.until(lambda: any(e.type == "session.started" for e in again.shown))
            assert resumed.relay["resume_token"] == token
            assert len(mock.sessions) == 2
            [left] = second.sessions.values()
        await left.wait_closed()
        async with sdk(first, **{"x-relay-resume": token}) as connection:   # and back: resumed twice
            third = Caller(connection)
            await connection.send(START)
            await third.until(lambda: any(e.type == "session.started" for e in third.shown))
        received = list(mock.received)
        refused = [record.event for record in mock.sent if record.event["type"] == "error"]

    assert refused == [], "the mock refused something the relay sent"
    starts = [r.event["session"] for r in received if r.event["type"] == "session.start"]
    assert len(starts) == 3 and starts[1]["instructions"] == "Be brief."
    assert starts[2]["input"] == starts[1]["input"], "the second resume lost what the first was seeded with"
    assert [t["name"] for t in starts[1]["delegation"]["responses"]["tools"]] == ["get_weather"]
    history = [(item["role"], item["content"][0]["text"]) for item in starts[1]["input"]]
    assert history[0][0] == "developer" and "get_weather" in history[0][1] and "sunny in Paris" in history[0][1]
    assert ("user", QUESTION) in history
    assert any(role == "assistant" and "Here it is" in text for role, text in history)
    assert runs == {"Paris": 1}   # answered before the drop: told in the history, not run again
    assert not any("get_weather" in str(e.model_dump()) for e in again.shown), "the relay's tool reached the client"
    assert first.resumes is not None and second.resumes is not None
    assert first.resumes.counts["issued"] == 1 and second.resumes.counts["resumed"] == 1
    assert first.resumes.counts["resumed"] == 1


@pytest.mark.parametrize("idempotent", [False, True], ids=["not-retried", "keyed-run-again"])
async def test_a_live_call_cut_off_by_the_drop_is_answered_once_in_the_resumed_session(idempotent: bool) -> None:
    started: list[str] = []
    ran = asyncio.Event()
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, \
            live_relay(mock, "memory", [blocking_book(started, idempotent=idempotent, ran=ran)]) as server:
        async with sdk(server) as connection:
            caller = Caller(connection)
            await connection.send(START)
            first = await caller.until(lambda: any(e.type == "session.started" for e in caller.shown))
            await caller.audio()
            await mock.user_turn(mock.sessions[-1], "book a table")
            with anyio.fail_after(TIMEOUT):
                await ran.wait()   # the handler runs (and does not finish)
            [left] = server.sessions.values()
        await left.wait_closed()

        async with sdk(server, **{"x-relay-resume": first.relay["resume_token"]}) as connection:
            again = Caller(connection)
            await connection.send(START)
            await again.until(lambda: any(e.type == "session.started" for e in again.shown))
            await again.audio()
            note = await mock.wait_for(lambda e: e["type"].endswith(".append") and "book" in str(e), TIMEOUT,
                                       session=mock.sessions[-1])
        received = [r.event for r in mock.received if r.session_id == mock.sessions[-1].id]

    notes = [e for e in received if e["type"] != "session.input_audio.append" and e["type"].endswith(".append")]
    assert len(notes) == 1 and note.event in notes   # answered once, as a note of the resumed session
    if idempotent:   # run again, with the same key: the tool agreed to it
        assert len(started) == 2 and started[0] == started[1] and started[0]
        assert "table 4 booked" in str(notes[0])
    else:
        assert started == [""]   # never run twice
        assert "not retried" in str(notes[0])
    assert not any(e["type"] == "response.item.create" for e in received), "an old batch's output went up"


async def refused(server: RelayServer, token: str) -> tuple[dict[str, Any], int]:
    async with realtime_client(server, path=PATH, headers={"x-relay-resume": token}) as client:
        error = await client.wait_type("error")
        code, _ = await client.closed()
    return error["error"], code


async def test_a_live_token_unknown_in_use_or_expired_is_refused_with_an_error_and_a_close() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, live_relay(mock, "memory", []) as server:
        clock = FakeMonotonic()
        server.write_ahead.store.clock = clock   # type: ignore[attr-defined]
        with captured_logs() as logs:
            async with realtime_client(server, path=PATH) as client:
                await client.send(START)
                token = (await client.wait_type("session.started"))["relay"]["resume_token"]
                in_use, code = await refused(server, token)
                assert (in_use["code"], code) == ("resume_token_in_use", 1008)
                left = next(iter(server.sessions.values()))   # the first connection's (the refused one may linger)
            await left.wait_closed()
            await unknown_and_expired_are_refused(server, token, clock, refused)
        three_refusals_logged_and_counted(server, logs)
