"""The provider key never reaches a client, in any spelling an upstream can echo it in: a close
reason (whole, or cut short), JSON escapes (`\\u0073k-...`, `sk\\u002d...`, every character
escaped), a key split across streamed deltas; and no redirect carries it to another host. On the
transport the test run is on (both in CI)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from relay.mock import MockUpstream
from tests.support.clients import TIMEOUT
from tests.support.keys import PROVIDER_KEY
from tests.support.relays import LeakGuard

REDACTED = "[redacted]"


def escaped(text: str, which: str) -> str:
    """`text` as JSON string content, the characters `which` picks written as `\\uXXXX`."""
    return "".join(f"\\u{ord(ch):04x}" if ch in which else ch for ch in text)


@pytest.mark.parametrize("reason", [
    f"bye {PROVIDER_KEY}",
    f"bye {PROVIDER_KEY[:20]}",   # a key the upstream cut short
], ids=["whole key", "key cut short"])
async def test_an_upstream_close_reason_holding_the_key_reaches_the_client_redacted(
        guard: LeakGuard, mock: MockUpstream, reason: str) -> None:
    async with guard.relay(mock) as server, guard.client(server) as client:
        await client.wait_type("session.created")
        await mock.close_session(mock.sessions[0], 4000, reason)
        code, received = await client.closed()
    assert code == 4000
    assert received.startswith("bye ") and REDACTED in received
    assert PROVIDER_KEY[:10] not in received


@pytest.mark.parametrize("which", ["s", "-", "sk-", "".join(set(PROVIDER_KEY))],
                         ids=["first letter", "dash", "prefix", "every character"])
async def test_a_key_in_json_escapes_reaches_the_client_redacted(
        guard: LeakGuard, mock: MockUpstream, which: str) -> None:
    async with guard.relay(mock) as server, guard.client(server) as client:
        await client.wait_type("session.created")
        message = escaped(f"Incorrect API key provided: {PROVIDER_KEY}.", which)
        await mock.inject(mock.sessions[0], '{"type":"error","event_id":"event_k","error":{"type":'
                          '"invalid_request_error","code":"invalid_api_key","message":"' + message + '"}}')
        error = await client.wait_type("error")
    assert error["error"]["message"] == f"Incorrect API key provided: {REDACTED}."


def text_delta(text: str, item_id: str = "item_k") -> dict[str, object]:
    return {"type": "response.output_text.delta", "event_id": f"event_{len(text)}", "response_id": "resp_k",
            "item_id": item_id, "output_index": 0, "content_index": 0, "delta": text}


@pytest.mark.parametrize("cut", [1, 3, 8, 20, len(PROVIDER_KEY) - 1])
async def test_a_key_split_across_two_deltas_is_not_shown_whole(
        guard: LeakGuard, mock: MockUpstream, cut: int) -> None:
    """The client sees at most the key's first seven characters (`sk-proj`, the public part of an
    OpenAI key) before the split, and the words around it."""
    async with guard.relay(mock) as server, guard.client(server) as client:
        await client.wait_type("session.created")
        first, second = f"your key is {PROVIDER_KEY[:cut]}", f"{PROVIDER_KEY[cut:]} and more"
        await mock.inject(mock.sessions[0], [text_delta(first), text_delta(second)])
        deltas = [(await client.wait_type("response.output_text.delta"))["delta"] for _ in range(2)]
    said = "".join(deltas)
    assert said.startswith("your key is ") and said.endswith(" and more") and REDACTED in said
    assert PROVIDER_KEY[7:] not in said and not any(PROVIDER_KEY[i:i + 8] in said for i in range(len(PROVIDER_KEY) - 8))


async def test_a_key_split_across_deltas_in_escapes_is_not_shown_whole(guard: LeakGuard, mock: MockUpstream) -> None:
    async with guard.relay(mock) as server, guard.client(server) as client:
        await client.wait_type("session.created")
        frames = [json.dumps(text_delta(PROVIDER_KEY[:12])), json.dumps(text_delta(PROVIDER_KEY[12:]))]
        frames[1] = frames[1].replace(PROVIDER_KEY[12:], escaped(PROVIDER_KEY[12:], PROVIDER_KEY[12:14]))
        await mock.inject(mock.sessions[0], frames)
        said = "".join([(await client.wait_type("response.output_text.delta"))["delta"] for _ in range(2)])
    assert not any(PROVIDER_KEY[i:i + 8] in said for i in range(len(PROVIDER_KEY) - 8))


async def test_the_words_of_other_deltas_pass_unchanged(guard: LeakGuard, mock: MockUpstream) -> None:
    """Streams are told apart: a delta of another item does not complete a key prefix, and
    ordinary text that shares a letter or two with the key is left alone."""
    async with guard.relay(mock) as server, guard.client(server) as client:
        await client.wait_type("session.created")
        words = ["It is sk", "y blue; ", "sk-", "ip it"]
        await mock.inject(mock.sessions[0], [text_delta(w, item_id=f"item_{i % 2}") for i, w in enumerate(words)])
        deltas = [(await client.wait_type("response.output_text.delta"))["delta"] for _ in words]
    assert deltas == words


# ---- redirects ---------------------------------------------------------------------------------

@asynccontextmanager
async def redirecting_to_elsewhere() -> AsyncIterator[tuple[str, list[bytes]]]:
    """An upstream that answers every handshake with a 302 to another origin (another port),
    and that other origin, which keeps the request heads it receives. Yields the first's URL and
    the second's list."""
    seen: list[bytes] = []

    async def elsewhere(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.read(65536))
        writer.close()

    async def redirect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(f"HTTP/1.1 302 Found\r\nLocation: ws://127.0.0.1:{other_port}/v1/realtime?model=m\r\n"
                     "Content-Length: 0\r\n\r\n".encode())
        await writer.drain()
        writer.close()

    other = await asyncio.start_server(elsewhere, "127.0.0.1", 0)
    other_port = other.sockets[0].getsockname()[1]
    first = await asyncio.start_server(redirect, "127.0.0.1", 0)
    async with other, first:
        yield f"ws://127.0.0.1:{first.sockets[0].getsockname()[1]}/v1/realtime", seen


@pytest.mark.parametrize("dialect", ["openai", "azure"])   # the key in `Authorization`, in `api-key`
async def test_a_redirect_is_refused_and_the_other_host_gets_nothing(guard: LeakGuard, dialect: str) -> None:
    async with redirecting_to_elsewhere() as (url, seen), guard.relay(url, dialect=dialect) as server, \
            guard.client(server) as client:
        code, _ = await asyncio.wait_for(client.closed(), TIMEOUT)
    [error] = client.events
    assert code == 1011
    assert error["error"]["code"] == "upstream_unavailable" and "HTTP 302" in error["error"]["message"]
    assert seen == []
