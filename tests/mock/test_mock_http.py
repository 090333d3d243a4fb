"""relay/asgi.py: how the relay serves its ASGI apps (the mock's REST API, the webhook endpoint)
on uvicorn: one request per connection, bounded heads and bodies, a deadline for each, a status
for anything malformed instead of an exception, and a stop that waits for nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send
from websockets.asyncio.client import connect

from relay.transports.asgi import READ_TIMEOUT, AppServer, BodyRefused, read_body
from relay.mock import MockUpstream
from tests.support.clients import TIMEOUT

HOST = b"Host: 127.0.0.1\r\n"
SHORT = 0.3   # the deadlines of the server whose deadlines are under test


async def _echo(request: Request) -> Response:
    if request.url.path == "/boom":
        raise RuntimeError("handler bug")
    if request.url.path == "/hold":
        request.app.state.holding.set()
        await anyio.sleep_forever()
    try:
        body = await read_body(request, limit=64, timeout=request.app.state.body_timeout)
    except BodyRefused as refused:
        return JSONResponse({"error": str(refused)}, status_code=refused.status)
    seen = {
        "method": request.method,
        "path": request.url.path,
        "query": dict(request.query_params),
        "headers": dict(request.headers),
        "body": body.decode(),
    }
    return JSONResponse(seen, status_code=201)


def echo_app(body_timeout: float = READ_TIMEOUT) -> Starlette:
    app = Starlette(routes=[Route("/{path:path}", _echo, methods=["GET", "POST"])])
    app.state.body_timeout = body_timeout
    return app


ECHO = echo_app()


async def _served(server: AppServer) -> AsyncIterator[AppServer]:
    server.listen()
    serving = asyncio.get_running_loop().create_task(server.serve())   # as the mock does
    yield server
    serving.cancel()
    await asyncio.gather(serving, return_exceptions=True)


@pytest.fixture
async def server() -> AsyncIterator[AppServer]:
    async for served in _served(AppServer(ECHO, "127.0.0.1", 0, max_head_bytes=1024)):
        yield served


@pytest.fixture
async def hurried() -> AsyncIterator[AppServer]:
    """A server whose head and body deadlines are SHORT."""
    async for served in _served(AppServer(echo_app(SHORT), "127.0.0.1", 0, read_timeout=SHORT)):
        yield served


async def _echo_later(scope: Scope, receive: Receive, send: Send) -> None:
    """A WebSocket that answers each message after the head deadline (SHORT) has passed twice."""
    assert scope["type"] == "websocket"
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    while (message := await receive())["type"] == "websocket.receive":
        await anyio.sleep(2 * SHORT)   # time passing is what is under test
        await send({"type": "websocket.send", "text": message["text"]})


async def test_a_websocket_outlives_the_head_deadline() -> None:
    async for served in _served(AppServer(_echo_later, "127.0.0.1", 0, read_timeout=SHORT)):
        async with connect(f"ws://127.0.0.1:{served.port}/feed", open_timeout=TIMEOUT) as ws:
            await ws.send("still open?")
            assert await asyncio.wait_for(ws.recv(), TIMEOUT) == "still open?"


async def _raw(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(), TIMEOUT)
    writer.close()
    await writer.wait_closed()
    return reply


async def test_round_trip(server: AppServer) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{server.base_url}/hooks/call?x=1&y=two", headers={"X-Token": "t"},
                                     content=b'{"a": 1}')
    assert response.status_code == 201 and response.headers["content-type"] == "application/json"
    assert response.headers["connection"] == "close"
    seen = response.json()
    assert (seen["method"], seen["path"], seen["query"], seen["body"]) == (
        "POST",
        "/hooks/call",
        {"x": "1", "y": "two"},
        '{"a": 1}',
    )
    assert seen["headers"]["x-token"] == "t" and seen["headers"]["content-length"] == "8"


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\n\r\n", b"400"),                      # HTTP/1.1 without Host
        (b"GET / HTTP/1.1\r\n" + HOST + b"Bad Header\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: -1\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nab", b"400"),
        (b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 65\r\n\r\n" + b"x" * 65, b"413"),
        (b"POST / HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\n41\r\n" + b"x" * 65 + b"\r\n0\r\n\r\n",
         b"413"),
        (b"GET / HTTP/1.1\r\n" + HOST + b"X: " + b"x" * 2000, b"400"),   # a head past max_head_bytes
        (b"GET /boom HTTP/1.1\r\n" + HOST + b"\r\n", b"500"),
    ],
)
async def test_bad_requests_get_error_statuses(server: AppServer, data: bytes, status: bytes) -> None:
    reply = await _raw(server.port, data)
    assert reply.split(b" ")[1] == status
    assert b"connection: close" in reply.lower()


async def test_silent_or_slow_clients_are_cut_at_their_deadline(hurried: AppServer) -> None:
    assert await _raw(hurried.port, b"") == b"", "nothing sent: dropped without a reply"
    assert await _raw(hurried.port, b"GET / HTTP/1.1\r\nHo") == b"", "the head never ended"
    cut = await _raw(hurried.port, b"POST / HTTP/1.1\r\n" + HOST + b"Content-Length: 10\r\n\r\nabc")
    assert cut.split(b" ")[1] == b"408" and b"did not arrive within 0.3 s" in cut


async def test_stop_answers_requests_in_flight_and_cancelling_closes_at_once() -> None:
    served = AppServer(ECHO, "127.0.0.1", 0)
    served.listen()
    async with anyio.create_task_group() as group, httpx.AsyncClient() as client:
        group.start_soon(served.serve)
        assert (await client.get(f"{served.base_url}/a")).status_code == 201
        served.stop()
    with pytest.raises(httpx.ConnectError):   # stopped: the port no longer listens
        async with httpx.AsyncClient() as client:
            await client.get(f"{served.base_url}/a")

    held = AppServer(ECHO, "127.0.0.1", 0)
    held.listen()
    ECHO.state.holding = anyio.Event()
    async with anyio.create_task_group() as group:
        group.start_soon(held.serve)
        reader, writer = await asyncio.open_connection("127.0.0.1", held.port)
        writer.write(b"GET /hold HTTP/1.1\r\n" + HOST + b"\r\n")
        await writer.drain()
        with anyio.fail_after(TIMEOUT):
            await ECHO.state.holding.wait()
        group.cancel_scope.cancel()
    assert await asyncio.wait_for(reader.read(), TIMEOUT) == b"", "the held request was cut, not answered"
    writer.close()


async def test_the_address_is_taken_when_listen_returns() -> None:
    first = AppServer(ECHO, "127.0.0.1", 0)
    first.listen()
    with pytest.raises(OSError):
        AppServer(ECHO, "127.0.0.1", first.port).listen()
    with pytest.raises(RuntimeError):
        AppServer(ECHO).port   # noqa: B018 - not listening yet
    async with anyio.create_task_group() as group:
        group.start_soon(first.serve)
        first.stop()


async def test_the_mock_rest_api_is_served_the_same_way() -> None:
    async with MockUpstream() as mock:
        reply = await _raw(mock.rest_port, b"GET /v1/realtime/calls/x/accept HTTP/1.1\r\n" + HOST + b"\r\n")
        assert reply.split(b" ")[1] == b"405" and b"connection: close" in reply.lower()
        too_big = b"x" * (1024 * 1024 + 1)
        call_id = mock.create_call()
        async with httpx.AsyncClient() as client:
            response = await client.post(f"{mock.rest_url}/realtime/calls/{call_id}/accept", content=too_big)
        assert response.status_code == 413 and mock.find_session(call_id).accepts == []
