"""`relay serve --store`: a client that reconnects with its resume token carries its session on,
on another replica sharing a Redis (or on the same process with the in-memory store): the new
upstream session is seeded with the conversation so far, and every relay call is run once."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection

from relay.edges.resume import resume_key
from relay.edges.serve import ProxySession, RelayServer
from relay.engine.resume import ResumeState, merged
from relay.mock import MockScript, MockSession, MockUpstream, Reply, Rule, ToolCall
from relay.tools import IdempotencyKey, tool
from tests.support.clients import TIMEOUT, realtime_client
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.relays import captured_logs, relay_for
from tests.support.tools import WEATHER_SCRIPT

QUESTION = "What's the weather in Paris?"


def counted_weather(runs: Counter[str]) -> Any:
    @tool
    def get_weather(city: str) -> str:
        """Current weather in a city."""
        runs[city] += 1
        return f"sunny in {city}"
    return get_weather


@asynccontextmanager
async def sdk(server: RelayServer, **options: Any) -> AsyncIterator[AsyncRealtimeConnection]:
    client = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1", max_retries=0)
    async with client.realtime.connect(model="gpt-realtime", **options) as connection:
        yield connection


async def until(connection: AsyncRealtimeConnection, check: Any) -> list[dict[str, Any]]:
    """The events (as the wire had them) up to the first that `check` accepts."""
    seen = []
    async with asyncio.timeout(TIMEOUT):
        while True:
            raw = await connection.recv_bytes()
            event = json.loads(raw)
            seen.append(event)
            if check(event):
                return seen


def spoke(says: str) -> Any:
    return lambda e: e["type"] == "response.done" and says in json.dumps(e["response"]["output"])


def only_session(server: RelayServer) -> ProxySession:
    [session] = server.sessions.values()
    return session


def words(session: MockSession) -> list[tuple[str, str]]:
    """The mock's conversation as (type or role, words) pairs."""
    found = []
    for item in session.items:
        if item["type"] == "message":
            text = " ".join(part.get("text") or part.get("transcript") or "" for part in item["content"])
            found.append((item["role"], text))
        elif item["type"] == "function_call":
            found.append(("call", f"{item['name']} {item['arguments']}"))
        else:
            found.append(("output", item["output"]))
    return found


async def test_a_client_resumes_on_another_replica_and_the_model_sees_the_conversation(redis_url: str) -> None:
    runs: Counter[str] = Counter()
    get_weather = counted_weather(runs)
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, tools=[get_weather], store=redis_url) as first, \
            relay_for(mock, tools=[get_weather], store=redis_url) as second:
        async with sdk(first) as connection:
            created = await connection.recv()
            assert created.type == "session.created"
            token = created.relay["resume_token"]   # type: ignore[attr-defined]  (the SDK keeps the extra field)
            assert len(token) >= 43 and RELAY_TOKEN not in token and PROVIDER_KEY not in token
            await connection.conversation.item.create(item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]})
            await connection.response.create()
            await until(connection, spoke("sunny in Paris"))
            left = only_session(first)
        await left.wait_closed()   # its last state written, its lease let go

        async with sdk(second, extra_headers={"x-relay-resume": token}) as connection:
            opened = await until(connection, lambda e: e["type"] == "session.created")
            assert opened[-1]["relay"]["resume_token"] == token
            resumed = mock.sessions[1]
            await mock.wait_for(lambda e: e["type"] == "conversation.item.create"
                                and e["item"].get("role") == "assistant")
            await connection.conversation.item.create(item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]})
            await connection.response.create()
            later = await until(connection, lambda e: e["type"] == "response.done")

    seen = words(resumed)
    assert seen[:5] == [("user", QUESTION), ("assistant", "Let me check."), ("call", 'get_weather {"city": "Paris"}'),
                        ("output", "sunny in Paris"), ("assistant", "Here is what I found: sunny in Paris")], seen
    assert seen[-2][0] == "user" and seen[-2][1] == "Thanks!"
    assert runs == {"Paris": 1}   # answered before the drop: seeded with its output, not run again
    shown = json.dumps(opened + later)
    assert "get_weather" not in shown and "function_call" not in shown, "the client saw the relay's call"
    assert not any(e["type"] == "error" for e in opened + later)
    assert first.resumes is not None and second.resumes is not None
    assert first.resumes.counts["issued"] == 1 and second.resumes.counts["resumed"] == 1
    assert second.metrics.resumes["resumed"] == 1


# ---- one replica, the in-memory store -----------------------------------------------------------
BOOK_SCRIPT = MockScript(rules=[Rule(match="book", calls=[ToolCall(name="book", arguments={"table": 4})])],
                         after_outputs=Reply(say="Booked: {output}"))


def blocking_book(started: list[str], *, idempotent: bool, ran: asyncio.Event | None = None) -> Any:
    """A tool that records each start (with its idempotency key, if it takes it), sets `ran`,
    and does not finish its first run."""
    if idempotent:
        @tool(name="book")
        async def book_keyed(table: int, key: IdempotencyKey) -> str:
            """Book a table."""
            started.append(str(key))
            if ran is not None:
                ran.set()
            if len(started) == 1:
                await asyncio.Event().wait()
            return f"table {table} booked"
        return book_keyed

    @tool(name="book")
    async def book(table: int) -> str:
        """Book a table."""
        started.append("")
        if ran is not None:
            ran.set()
        await asyncio.Event().wait()
        return f"table {table} booked"
    return book


@pytest.mark.parametrize("idempotent", [False, True], ids=["not-retried", "keyed-run-again"])
async def test_a_call_cut_off_by_the_drop_is_finished_once_on_resume(idempotent: bool) -> None:
    started: list[str] = []
    async with MockUpstream(script=BOOK_SCRIPT, api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, tools=[blocking_book(started, idempotent=idempotent)], store="memory") as server:
        async with realtime_client(server) as client:
            created = await client.wait_type("session.created")
            token = created["relay"]["resume_token"]
            await client.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "book a table"}]}})
            await client.send({"type": "response.create"})
            await mock.wait_for(lambda e: e["type"] == "response.create")
            left = only_session(server)
            async with asyncio.timeout(TIMEOUT):
                while not started:   # the handler runs: woken by the mock's events below
                    await client.receive()
        await left.wait_closed()
        assert left.end is not None and left.end.by == "client"

        # the query form this time (not passed upstream): `?resume=`
        async with realtime_client(server, path=f"/v1/realtime?model=gpt-realtime&resume={token}") as client:
            done = await client.wait_for(lambda e: e["type"] == "response.done" and "Booked" in json.dumps(e))

    outputs = [e["item"]["output"] for e in (r.event for r in mock.received)
               if e["type"] == "conversation.item.create" and e["item"]["type"] == "function_call_output"]
    if idempotent:   # run again, with the same key: the tool agreed to it
        assert len(started) == 2 and started[0] == started[1] and started[0]
        assert outputs == ["table 4 booked"]
    else:
        assert started == [""]   # never run twice
        assert len(outputs) == 1 and "not retried" in outputs[0]
    assert "book" not in json.dumps(done["response"]["output"][0].get("name", ""))
    assert mock.sessions[1].connections[0].query == {"model": "gpt-realtime"}
    [call] = [item for item in mock.sessions[1].items if item["type"] == "function_call"]
    assert call["name"] == "book"   # the model's new session has the call its output answers


# ---- refusals -------------------------------------------------------------------------------------
async def refused(server: RelayServer, token: str) -> tuple[dict[str, Any], int]:
    async with realtime_client(server, headers={"x-relay-resume": token}) as client:
        error = await client.wait_type("error")
        code, _ = await client.closed()
    return error["error"], code


Refuse = Callable[[RelayServer, str], Awaitable[tuple[dict[str, Any], int]]]


async def unknown_and_expired_are_refused(server: RelayServer, token: str, clock: FakeMonotonic,
                                          refuse: Refuse) -> None:
    """Once the token's session has ended: a token nobody was given, then the real one past its
    time, each refused as invalid with a 1008 close."""
    unknown, code = await refuse(server, "not-a-token")
    assert (unknown["code"], code) == ("resume_token_invalid", 1008)
    clock.now += server.config.resume_seconds + 1
    expired, code = await refuse(server, token)
    assert (expired["code"], code) == ("resume_token_invalid", 1008)


def three_refusals_logged_and_counted(server: RelayServer, logs: Any) -> None:
    """One token in use, then unknown, then expired: one log line and one count each."""
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    said = [line["msg"].split(":")[0] for line in lines if line["logger"] == "relay.server" and "resume" in line["msg"]]
    assert said == ["resume refused"] * 3   # one line each
    assert server.metrics.resumes == {"issued": 1, "refused_resume_token_in_use": 1,
                                      "refused_resume_token_invalid": 2}


async def test_a_token_in_use_unknown_or_expired_is_refused_with_an_error_and_a_close(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, store="memory") as server:
        clock = FakeMonotonic()
        server.write_ahead.store.clock = clock   # type: ignore[attr-defined]
        with captured_logs() as logs:
            async with realtime_client(server) as client:
                token = (await client.wait_type("session.created"))["relay"]["resume_token"]
                in_use, code = await refused(server, token)
                assert (in_use["code"], code) == ("resume_token_in_use", 1008)
                await client.send({"type": "input_audio_buffer.clear"})   # the first connection goes on
                await client.wait_type("input_audio_buffer.cleared")
                left = only_session(server)
            await left.wait_closed()
            await unknown_and_expired_are_refused(server, token, clock, refused)
        three_refusals_logged_and_counted(server, logs)


class FakeMonotonic:
    def __init__(self) -> None:
        import time
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


async def test_without_a_store_no_token_is_handed_out_and_a_resume_is_refused(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock) as server:
        async with realtime_client(server) as client:
            created = await client.wait_type("session.created")
            assert "relay" not in created
        error, code = await refused(server, "anything")
    assert (error["code"], code) == ("resume_not_supported", 1008)
    assert server.resumes is None


async def test_a_token_is_bound_to_the_relay_credential(redis_url: str, weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, store=redis_url) as first, \
            relay_for(weather_mock, store=redis_url, auth_token="another-relay-token-0123456789") as second:
        async with realtime_client(first) as client:
            token = (await client.wait_type("session.created"))["relay"]["resume_token"]
            left = only_session(first)
        await left.wait_closed()
        async with realtime_client(second, token="another-relay-token-0123456789",
                                   headers={"x-relay-resume": token}) as client:
            error = await client.wait_type("error")
    assert error["error"]["code"] == "resume_token_invalid"
    raw = await _redis_values(redis_url)
    assert token.encode() not in raw and PROVIDER_KEY.encode() not in raw and RELAY_TOKEN.encode() not in raw


async def _redis_values(url: str) -> bytes:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        keys = await client.keys("relay:resume:*")
        return b"".join([await client.get(key) or b"" for key in keys]) + b"".join(keys)
    finally:
        await client.aclose()


async def test_the_sdk_reconnects_through_a_replica_stop_and_carries_the_session_on(redis_url: str) -> None:
    """A rolling deploy: two replicas share a port (SO_REUSEPORT) and a Redis; the one the client
    is on stops (close 1001); the official SDK reconnects by itself, presenting the token its
    `on_reconnecting` hook adds, lands on the other replica and the conversation goes on."""
    runs: Counter[str] = Counter()
    get_weather = counted_weather(runs)
    token: list[str] = []
    reconnects: list[int] = []

    def on_reconnecting(event: Any) -> dict[str, Any]:
        reconnects.append(event.close_code)
        return {"extra_headers": {**event.extra_headers, "x-relay-resume": token[0]}}

    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, tools=[get_weather], store=redis_url, reuse_port=True) as first:
        async with sdk(first, on_reconnecting=on_reconnecting) as connection:
            events = connection.__aiter__()

            async def next_until(check: Any) -> Any:
                async with asyncio.timeout(TIMEOUT):
                    while not check(event := await anext(events)):
                        pass
                    return event

            created = await next_until(lambda e: e.type == "session.created")
            token.append(created.relay["resume_token"])
            async with relay_for(mock, tools=[get_weather], store=redis_url, port=first.port,
                                 reuse_port=True) as second:
                await connection.conversation.item.create(item={
                    "type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]})
                await connection.response.create()
                await next_until(lambda e: e.type == "response.done" and "sunny in Paris" in e.model_dump_json())
                await first.shutdown()   # its sessions closed with 1001: the SDK reconnects
                again = await next_until(lambda e: e.type == "session.created")
                assert again.relay["resume_token"] == token[0]
                await connection.conversation.item.create(item={
                    "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks!"}]})
                await connection.response.create()
                await next_until(lambda e: e.type == "response.done")
                assert second.resumes is not None and second.resumes.counts["resumed"] == 1

    assert reconnects == [1001]
    assert runs == {"Paris": 1}
    assert [role for role, _ in words(mock.sessions[1])][:5] == ["user", "assistant", "call", "output", "assistant"]


# ---- the state, in each store ---------------------------------------------------------------------
async def test_each_store_keeps_a_resume_state_under_its_key_latest_first(store: Any) -> None:
    key = f"k{id(object())}"
    assert await store.resume_state(key) is None
    await store.keep_resume(key, "rs_1", '{"v":1}', 60)
    await store.keep_resume(key, "rs_1", '{"v":2}', 60)
    assert await store.resume_state(key) == '{"v":2}'
    assert await store.resume_state(key + "x") is None


def test_a_resume_state_reads_back_strictly() -> None:
    state = ResumeState("rs_1", "openai", {"instructions": "Be brief."},
                        [{"type": "message", "id": "i1", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
    assert ResumeState.from_json(state.to_json()) == state
    for bad in ("", "[]", '{"v":1}', '{"v":2,"session_id":"s","dialect":"openai","session":{},"items":[]}',
                '{"v":1,"session_id":"s","dialect":"openai","session":{},"items":[{"type":"message"}]}'):
        with pytest.raises(ValueError):
            ResumeState.from_json(bad)


async def test_a_state_the_store_cannot_read_is_refused_as_invalid(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, store="memory") as server:
        await server.write_ahead.store.keep_resume(resume_key("t" * 43, RELAY_TOKEN), "rs_x", "not json", 60)
        error, code = await refused(server, "t" * 43)
    assert (error["code"], code) == ("resume_token_invalid", 1008)


async def test_a_connection_whose_session_was_taken_stops_and_closes(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, store="memory", lease_seconds=0.3) as server:
        store = server.write_ahead.store
        clock = FakeMonotonic()
        store.clock = clock   # type: ignore[attr-defined]
        async with realtime_client(server) as client:
            await client.wait_type("session.created")
            session = only_session(server)
            assert session.keeper is not None and session.keeper.lease is not None
            clock.now += 1   # its lease expired (the store's clock): another connection takes the session
            assert await store.acquire(session.keeper.engine.session_id, "another", ttl=60) is not None
            code, reason = await client.closed()
    assert (code, reason) == (1008, "session resumed on another connection")


async def test_an_unreachable_store_leaves_sessions_running_and_refuses_their_resume(weather_mock: MockUpstream) -> None:
    from tests.support.redis_server import free_port
    from tests.support.relays import weather_turn

    with captured_logs() as logs:
        async with relay_for(weather_mock, tools=[counted_weather(Counter())],
                             store=f"redis://127.0.0.1:{free_port()}/0") as server:
            async with realtime_client(server) as client:
                token = (await client.wait_type("session.created"))["relay"]["resume_token"]
                await weather_turn(client, says="sunny in Paris")
                left = only_session(server)
            await left.wait_closed()
            error, code = await refused(server, token)
    assert (error["code"], code) == ("store_unavailable", 1008)
    lines = [json.loads(line) for line in logs.getvalue().splitlines()]
    assert len([line for line in lines if line["msg"].startswith("resume state not kept")]) == 1
    assert not [line for line in lines if line["level"] == "error" or "Traceback" in line.get("exc", "")]


def test_a_state_merges_what_the_engine_forgot_and_what_has_not_come_back_yet() -> None:
    def items(*ids: str) -> list[dict[str, Any]]:
        return [{"id": item_id, "type": "message"} for item_id in ids]

    forgotten = merged(items("a", "b", "c"), items("c", "d"), gone=set())
    assert [item["id"] for item in forgotten] == ["a", "b", "c", "d"]
    seeded = merged(items("a", "b", "c"), items("a", "b"), gone=set())   # c not echoed yet
    assert [item["id"] for item in seeded] == ["a", "b", "c"]
    deleted = merged(items("a", "b", "c"), items("a", "c", "e"), gone={"b"})
    assert [item["id"] for item in deleted] == ["a", "c", "e"]
    updated = merged([{"id": "a", "text": "hel"}], [{"id": "a", "text": "hello"}], gone=set())
    assert updated == [{"id": "a", "text": "hello"}]


async def test_a_long_conversation_resumes_whole_twice_though_the_engine_keeps_its_recent_past(
        weather_mock: MockUpstream) -> None:
    said = [f"note {n}" for n in range(6)]
    async with relay_for(weather_mock, store="memory", history_limit=4) as server:
        token = ""
        for round_ in range(3):   # a session, then two resumes, each adding turns
            headers = {"x-relay-resume": token} if token else {}
            async with realtime_client(server, headers=headers) as client:
                token = (await client.wait_type("session.created"))["relay"]["resume_token"]
                for text in said[2 * round_:2 * round_ + 2]:
                    await client.send({"type": "conversation.item.create", "item": {
                        "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}})
                    await client.send({"type": "response.create"})
                    await client.wait_type("response.done")
                left = only_session(server)
            await left.wait_closed()
    last = mock_words = words(weather_mock.sessions[2])
    assert [text for role, text in mock_words if role == "user"] == said[:6], last
    assert len(mock_words) == 12   # six user turns, six answers, in order
