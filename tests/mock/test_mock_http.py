"""relay/http.py: the small HTTP/1.1 server and client (used by the mock's REST API)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from relay.http import HTTPError, Request, Response, http_request, serve_http


async def _echo(request: Request) -> Response:
    if request.path == "/boom":
        raise RuntimeError("handler bug")
    body = {
        "method": request.method,
        "path": request.path,
        "query": request.query,
        "headers": request.headers,
        "body": request.body.decode(),
    }
    return Response.from_json(201, body)


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    server = await serve_http(_echo, "127.0.0.1", 0, max_header_bytes=1024, max_body_bytes=64, read_timeout=0.3)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def _raw(base_url: str, data: bytes) -> bytes:
    host, port = base_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(data)
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(), 3)
    writer.close()
    await writer.wait_closed()
    return reply


async def test_round_trip(base_url: str) -> None:
    response = await http_request("POST", f"{base_url}/hooks/call?x=1&y=two", {"X-Token": "t"}, b'{"a": 1}')
    assert response.status == 201 and response.header("content-type") == "application/json"
    seen = response.json()
    assert (seen["method"], seen["path"], seen["query"], seen["body"]) == (
        "POST",
        "/hooks/call",
        {"x": "1", "y": "two"},
        '{"a": 1}',
    )
    assert seen["headers"]["x-token"] == "t" and seen["headers"]["content-length"] == "8"
    assert Request("POST", "/", {}, {}, b'{"a": 1}').json() == {"a": 1}


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"GET nowhere HTTP/1.1\r\n\r\n", b"400"),
        (b"GET / HTTP/2.0\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", b"400"),
        (b"POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n" + b"x" * 65, b"413"),
        (b"GET / HTTP/1.1\r\nX: " + b"x" * 2000 + b"\r\n\r\n", b"431"),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"501"),
        (b"GET /boom HTTP/1.1\r\n\r\n", b"500"),
    ],
)
async def test_bad_requests_get_error_statuses(base_url: str, data: bytes, status: bytes) -> None:
    reply = await _raw(base_url, data)
    assert reply.split(b" ")[1] == status
    assert b"Connection: close" in reply


async def test_silent_or_truncated_clients_are_dropped_without_a_reply(base_url: str) -> None:
    assert await _raw(base_url, b"") == b""
    assert (
        await _raw(base_url, b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc") == b""
    ), "timed out waiting for the body"


async def _reply_with(raw_response: bytes) -> tuple[asyncio.Server, str]:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(raw_response)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"


@pytest.mark.parametrize(
    ("raw_response", "body"),
    [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer: x\r\n\r\n",
            b"hello world",
        ),
        (b"HTTP/1.1 200 OK\r\n\r\nuntil the end", b"until the end"),
        (b"HTTP/1.1 204 No Content\r\n\r\n", b""),
    ],
)
async def test_client_reads_every_body_framing(raw_response: bytes, body: bytes) -> None:
    server, url = await _reply_with(raw_response)
    async with server:
        assert (await http_request("GET", url)).body == body


@pytest.mark.parametrize(
    "raw_response",
    [
        b"garbage\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
async def test_client_rejects_malformed_responses(raw_response: bytes) -> None:
    server, url = await _reply_with(raw_response)
    async with server:
        with pytest.raises(HTTPError):
            await http_request("GET", url)


async def test_client_refuses_other_schemes() -> None:
    with pytest.raises(ValueError):
        await http_request("GET", "ftp://example.com/")


async def test_json_helpers() -> None:
    response = Response.from_json(200, {"ok": True})
    assert (
        json.loads(response.body) == response.json() == {"ok": True}
        and response.header("Content-Type") == "application/json"
    )
