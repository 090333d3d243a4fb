"""Serving the relay's own ASGI apps in-process: `relay sidecar`'s webhook endpoint and the mock's
fake REST API run on uvicorn inside their owner's task group, instead of a server of our own.

    server = AppServer(app, "127.0.0.1", 0)
    server.listen()                      # bound and listening now (OSError if it cannot be)
    task_group.start_soon(server.serve)  # stop() ends it gracefully; cancelling it, at once

uvicorn is used the way an embedding program must use it: its signal handling is off (the
relay's process code owns SIGTERM and SIGINT), its logging is left to the relay's (only its
warnings show), no lifespan. Every connection serves one request (the response says
`Connection: close`), so the limits below hold per connection: a request head must be whole
within `read_timeout` seconds of connecting and fit in `max_head_bytes`; `read_body` bounds a
body's size and the time it takes to arrive. A WebSocket (the live inspector's feed under
`relay sidecar --inspector`) is served by uvicorn's sans-I/O protocol on the `websockets`
package; once upgraded, it is no longer bound by the head's deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import anyio
import uvicorn
from starlette.requests import ClientDisconnect, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from relay.errors import RelayError

if TYPE_CHECKING:
    import h11

MAX_HEAD_BYTES = 16 * 1024
MAX_BODY_BYTES = 1024 * 1024
READ_TIMEOUT = 10.0


class BodyRefused(RelayError):
    """A request body that is too large, too slow or cut off; `status` is what to answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_body(request: Request, *, limit: int = MAX_BODY_BYTES, timeout: float = READ_TIMEOUT) -> bytes:
    """The whole body, refused (`BodyRefused`: 413, 408 or 400) when it is larger than `limit`
    bytes or has not arrived within `timeout` seconds; a declared `Content-Length` over the
    limit is refused before anything is read."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyRefused(413, f"the body is larger than {limit} bytes")
    body = bytearray()
    try:
        with anyio.fail_after(timeout):
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    raise BodyRefused(413, f"the body is larger than {limit} bytes")
    except TimeoutError:
        raise BodyRefused(408, f"the body did not arrive within {timeout:g} s") from None
    except ClientDisconnect:
        raise BodyRefused(400, "the client went away before the end of the body") from None
    return bytes(body)


class _InProcessServer(uvicorn.Server):
    """uvicorn without its own signal handlers: the process's owner decides what a signal does."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _HeadDeadline(H11Protocol):
    """uvicorn's h11 protocol, closing a connection that has not sent a whole request head within
    `head_timeout` seconds (uvicorn itself times out only idle kept-alive connections)."""

    head_timeout = READ_TIMEOUT
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline = asyncio.get_running_loop().call_later(self.head_timeout, self._head_overdue)

    def _head_overdue(self) -> None:
        if self.cycle is None and not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        # the head came whole and the connection is the WebSocket protocol's from now on (the live
        # inspector's feed): the deadline is for heads, not for how long a feed stays open
        if self._deadline is not None:
            self._deadline.cancel()
        super().handle_websocket_upgrade(event)


class AppServer:
    """One ASGI app served by uvicorn on a socket bound here. `listen()` binds (so the port is
    known, and connections queue, before serving starts); `serve()` is the task that serves;
    `stop()` makes it stop accepting, answer the requests in flight and return; cancelling it
    closes everything at once (requests in flight are cancelled)."""

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1", port: int = 0, *,
                 max_head_bytes: int = MAX_HEAD_BYTES, read_timeout: float = READ_TIMEOUT) -> None:
        self.app = app
        self.host = host
        self.requested_port = port
        self.max_head_bytes = max_head_bytes
        self.read_timeout = read_timeout
        self._socket: socket.socket | None = None
        self._address: tuple[str, int] | None = None
        self._server: _InProcessServer | None = None
        self._stop_wanted = False
        self._closing = False

    @property
    def address(self) -> tuple[str, int]:
        if self._address is None:
            raise RuntimeError("the server is not listening")
        return self._address

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def base_url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}"

    def listen(self) -> None:
        """Bind and listen; raises OSError when the address cannot be had."""
        family, _, _, _, address = socket.getaddrinfo(self.host, self.requested_port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(128)
        except BaseException:
            sock.close()
            raise
        sock.setblocking(False)
        self._socket = sock
        self._address = sock.getsockname()[:2]

    def close(self) -> None:
        """Stop as `stop()` does, and give the socket back when `serve()` never ran."""
        self.stop()
        if self._server is None and self._socket is not None:
            self._socket.close()

    def stop(self) -> None:
        """Stop accepting; `serve()` returns once the requests in flight are answered."""
        self._stop_wanted = True
        if self._server is not None:
            self._server.should_exit = True

    async def serve(self) -> None:
        if self._socket is None:
            raise RuntimeError("listen() first")
        protocol = type("HeadDeadline", (_HeadDeadline,), {"head_timeout": self.read_timeout})
        config = uvicorn.Config(
            self._one_request_per_connection, interface="asgi3", http=protocol, ws="websockets-sansio", lifespan="off",
            log_config=None, log_level="warning", access_log=False, server_header=False,
            proxy_headers=False, h11_max_incomplete_event_size=self.max_head_bytes)
        server = self._server = _InProcessServer(config)
        server.should_exit = self._stop_wanted
        finished = False
        try:
            await server.serve(sockets=[self._socket])
            finished = True
        finally:
            if not finished:
                with anyio.CancelScope(shield=True):
                    await self._close_now(server)
            self._socket.close()

    async def _close_now(self, server: uvicorn.Server) -> None:
        """What uvicorn's own shutdown does, without its waits: cancelled, the server closes at once."""
        self._closing = True
        for listener in getattr(server, "servers", ()):
            listener.close()
        for connection in list(server.server_state.connections):
            transport = getattr(connection, "transport", None)
            if transport is not None:
                transport.close()   # first, so a cancelled request counts as disconnected
        tasks = [task for task in server.server_state.tasks if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def _one_request_per_connection(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers: list[Any] = [*message.get("headers", ()), (b"connection", b"close")]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_closing)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # cancelled by _close_now, which waits for this task: end quietly instead of being
            # logged by uvicorn as a failed request
