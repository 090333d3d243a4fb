"""The `websockets` library behind the transport seam (relay/session/transport.py): client
connections to the provider (`connect`), the server clients connect to (`serve`, with the
handshake's probes), and `WebsocketsTransport`, the session's fast read and write path over one
connection. This is the one place that reaches into websockets' and asyncio's internals, so that
the dependency pin (`websockets>=14,<18` in pyproject.toml) guards this file alone.

Checked with CPython 3.11 against websockets 14.0, 14.1, 14.2, 15.0.1, 16.0, 16.1.1, 17.0 and
17.4 (the write path: tests/test_socket_writer.py and tests/test_session_loop.py on each, the
whole suite on 14.2, 15.0.1, 16.1.1 and 17.4), and as this module, on asyncio's loop and on
uvloop 0.23, against 14.2, 15.0.1 and 17.4 (the transport's, the loop's, tests/server's and the
faults' tests). What it touches, beyond websockets' documented API:

- `Connection.protocol`: the connection's sans-I/O protocol object; its `send_text`,
  `send_binary`, `data_to_send` and `state` (documented for the sans-I/O layer, not for reaching
  into a running asyncio connection) frame messages without websockets' `send`; its
  `handshake_exc` (websockets 17 keeps a failed handshake there instead of raising it).
- `Connection.transport`: its `write`, `is_closing` and `abort` (asyncio's transport API), and
  `max_size`, an attribute of asyncio's selector socket transport (how much one read takes;
  uvloop's and TLS transports have none and are left alone).
- `Connection.paused`: websockets' flow-control flag (the transport asked it to stop writing).
- `Connection.send_context()`: the async context manager websockets' own `send` writes inside
  (state checks, flow control, close handling).
- `Connection.recv_messages.frames`: the frames the assembler read from the socket but has not
  handed out yet.
- `ServerConnection.data_received` and `handshake` (`ProbeConnection`): the bytes of a request
  before websockets parses them, and the coroutine its server awaits before the handler.
- `ConnectionClosed.rcvd`, `.sent` and `.rcvd_then_sent`: documented; read here only.
- `connect.process_redirect`: the method websockets' client asks whether to follow a redirect
  (overridden to follow none).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Any, Callable, Sequence

from websockets.asyncio.client import connect as websockets_connect
from websockets.asyncio.connection import Connection
from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as websockets_serve
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidMessage, InvalidStatus, InvalidURI
from websockets.http11 import Request as WebsocketsRequest
from websockets.http11 import Response
from websockets.protocol import State

from relay.session.http import Answer, Headers, Request
from relay.session.policy import NO_CLOSE_FRAME
from relay.session.transport import (
    BATCH_BYTES,
    ChooseSubprotocol,
    Decide,
    Deliver,
    Express,
    FlushRound,
    Frame,
    Handler,
    HandshakeFailed,
    InvalidURL,
    TransportClosed,
    flush_round,
)

if TYPE_CHECKING:
    from relay.session.transport import FrameQueue

log = logging.getLogger("relay.server")

# the most asyncio reads from a socket at once: its default (256 KiB) is over glibc's mmap
# threshold, so each read could map and unmap a fresh buffer (see read_in_smaller_chunks)
READ_BYTES = 64 * 1024
CLOSE_TIMEOUT = 1.0


def transport_closed(closed: ConnectionClosed) -> TransportClosed:
    """What websockets says of a closed connection, in the seam's terms."""
    frame = closed.rcvd or closed.sent
    code, reason = (frame.code, frame.reason) if frame is not None else (NO_CLOSE_FRAME, "connection lost")
    return TransportClosed(code, reason, received=closed.rcvd is not None,
                           initiated_here=closed.sent is not None and not closed.rcvd_then_sent)


class WebsocketsTransport:
    """One websockets connection (client or server side) as a `Transport`.

    - `receive`: websockets' own `recv`, each message handed on at once; `more` is whether
      websockets' assembler holds another frame it read already (the next `recv` returns at once).
    - `write(queue)`: frames a reader queued while the writer task sleeps are written by the
      reader itself once it is done with its frame and no other frame waits to be read at once
      (see SessionLoop._release_held): a lone frame at real-time pace costs no wake-up of the
      writer task (which costs more than the relay's own work on the frame), and a burst the
      reader takes in one go (the model streams audio faster than real time) becomes one socket
      write. `soon`: the same from a callback once the producing code (a handler's completion,
      the timer, a reader in the middle of a burst) yields to the event loop.
    - `send`: the writer task's path, when the socket is paused or the callback left frames:
      what waits goes in one write, inside the connection's own `send_context` (state checks,
      flow control, close handling: what websockets' `send` uses).

    Both frame the messages with the connection's sans-I/O protocol. The callback writes only
    while the connection is open and its transport neither paused nor closing; otherwise it
    wakes the writer task, which waits for the socket."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._flush_round: FlushRound | None = None   # its loop's, looked up once (the loop lookup is a system call)
        self._held_back: asyncio.Future[None] | None = None   # `hold_reading(True)` until `hold_reading(False)`
        read_in_smaller_chunks(connection)

    async def receive(self, deliver: Deliver, express: Express | None = None) -> None:
        recv = self.connection.recv
        buffered = self.connection.recv_messages.frames
        try:
            while True:
                if self._held_back is not None:   # websockets stops reading once its own queue fills
                    await self._held_back
                message = await recv()
                more = len(buffered) > 0
                if express is None or not express(message, more):
                    deliver(message, more)
        except ConnectionClosed as closed:
            raise transport_closed(closed) from None

    def hold_reading(self, held: bool) -> None:
        if held:
            if self._held_back is None:
                self._held_back = asyncio.get_running_loop().create_future()
            return
        held_back, self._held_back = self._held_back, None
        if held_back is not None and not held_back.done():
            held_back.set_result(None)

    def _frame_and_write(self, frames: Sequence[Frame]) -> None:
        protocol = self.connection.protocol
        for frame in frames:
            if isinstance(frame, str):
                protocol.send_text(frame.encode())
            else:
                protocol.send_binary(frame)
        # data frames in the OPEN state only ever add frame bytes (never the empty chunk that
        # means end of stream), so the chunks can be joined
        chunks = protocol.data_to_send()
        self.connection.transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def writable(self) -> bool:
        """The socket takes data now: open, and its transport neither paused nor closing."""
        connection = self.connection
        return not connection.paused and connection.protocol.state is State.OPEN \
            and not connection.transport.is_closing()

    def write(self, queue: FrameQueue, frame: Frame | None = None, soon: bool = False) -> bool:
        if frame is not None:   # a lone frame, unless something waits ahead of it
            if queue.frames or queue.waiter is None or not self.writable():
                return False
            self._frame_and_write((frame,))
            return True
        if soon:
            if self._flush_round is None:
                self._flush_round = flush_round(asyncio.get_running_loop())
            self._flush_round.add(self, queue)
            return True
        while self.writable():
            frames = queue.take_unsent(BATCH_BYTES)
            if not frames:
                return True
            self._frame_and_write(frames)
            if not queue.frames:
                return True
        if queue.frames:
            queue.wake()   # paused or closing: the writer task waits for the socket
        return True

    async def send(self, frames: Sequence[Frame]) -> None:
        try:
            async with self.connection.send_context():
                self._frame_and_write(frames)
        except ConnectionClosed as closed:
            raise transport_closed(closed) from None

    async def close(self, code: int | None, reason: str = "", *, abort: bool = False) -> None:
        if abort:
            self.connection.transport.abort()   # what the module's `abort` does (the parameter hides it)
        elif code is not None:
            await self.connection.close(code, reason)
        else:
            await self.connection.wait_closed()


def abort(connection: Connection) -> None:
    """Drop the TCP connection under `connection` without a closing handshake (a peer that
    does not answer the close, or a fault the mock plays)."""
    connection.transport.abort()


def read_in_smaller_chunks(connection: Connection) -> None:
    """Have asyncio read the connection's socket at most READ_BYTES at a time.

    For every read, asyncio allocates a buffer of its read size, 256 KiB, and shrinks it to what
    came. That size is over glibc's mmap threshold: whenever the heap has no such block free,
    each read maps fresh pages and unmaps them (page faults, TLB flushes). Under real-time audio
    load, with a frame or two per read, that kernel work is a large share of `relay serve`'s CPU;
    64 KiB buffers come from the heap. A message over 64 KiB takes several
    reads, as it would anyway. Transports without that setting (TLS, uvloop's) are left alone."""
    transport = connection.transport
    if isinstance(getattr(transport, "max_size", None), int):
        transport.max_size = READ_BYTES   # type: ignore[attr-defined]


# ---- the relay's connections to the provider ----------------------------------------------------

class ConnectWithoutRedirects(websockets_connect):
    """websockets' `connect`, refusing every redirect: the refusal (a 302, say) is the answer.
    Followed, a redirect to another host would carry the credential headers websockets does not
    know as such (Azure's `api-key`) there."""

    def process_redirect(self, exc: Exception) -> Exception:
        return exc


async def connect(url: str, *, headers: dict[str, str], max_frame_bytes: int, open_timeout: float,
                  user_agent: str, logger: logging.Logger | logging.LoggerAdapter) -> WebsocketsTransport:
    """`Backend.connect` (relay/session/transport.py). No redirects are followed. No
    per-message deflate: it would inflate and re-deflate every audio frame the relay only
    forwards."""
    try:
        connection = await ConnectWithoutRedirects(
            url, additional_headers=headers, max_size=max_frame_bytes, open_timeout=open_timeout,
            close_timeout=CLOSE_TIMEOUT, compression=None, user_agent_header=user_agent, logger=logger)
    except InvalidStatus as exc:
        response = exc.response
        raise HandshakeFailed(f"HTTP {response.status_code} {response.reason_phrase}".rstrip(),
                              status=response.status_code, phrase=response.reason_phrase) from None
    except InvalidURI as exc:
        raise InvalidURL(str(exc)) from None
    except InvalidHandshake as exc:
        raise HandshakeFailed(str(exc)) from None
    except EOFError:   # websockets before 14.2 does not wrap it in InvalidHandshake
        raise HandshakeFailed("it closed the connection") from None
    return WebsocketsTransport(connection)


# ---- the server clients connect to --------------------------------------------------------------

MAX_REQUEST_HEAD = 16 * 1024   # what a probe's request line and headers may take before websockets judges them
_BODY_HEADERS = (b"content-length:", b"transfer-encoding:")


def remote_address(connection: ServerConnection) -> str:
    address = connection.remote_address
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


class ProbeConnection(ServerConnection):
    """A server connection that shows every request to the relay's rules, load balancers' and
    orchestrators' probes included.

    websockets before 17 reads only `GET ... HTTP/1.1` without a body and drops anything else
    with no answer and an error-level traceback, as it does with a connection that closes before
    its request (a TCP health check); websockets 17 reads other methods but still refuses a body.
    Here a request head that is not a plain GET is rewritten, before websockets parses it, into
    the GET of the same path and headers (without the body's); the real method and version are
    kept on the connection for the `Request` the rules see, and they answer every such request
    with a status (never a WebSocket: the body, if any, is not read). A connection that brings no
    HTTP request at all is logged at debug (nothing came: a TCP probe) or info (something else
    came), and closed; so is one whose peer leaves before the answer goes out (a check that timed
    out).

    Built on websockets' `create_connection` extension point: `data_received` (asyncio's Protocol
    method) sees the bytes first; `handshake` is the coroutine websockets' server awaits before
    the handler, which closes the connection when it returns without an open WebSocket (the
    failure is read from `protocol.handshake_exc` where websockets 17 keeps it). Checked with
    websockets 14.2, 15.0.1 and 17.4 (tests/server/test_health_probes.py)."""

    request_method = "GET"
    request_version = "HTTP/1.1"
    relay_request: Request | None = None   # the request as the rules saw it (set by `serve`'s process_request)
    _head: bytes | None = b""   # the request head being read; None once decided
    _after_head: Callable[[bytes], None] | None = None   # where the bytes go once it is decided

    def data_received(self, data: bytes) -> None:
        """Reads the request head only: once it is decided, later reads go straight to
        websockets' own `data_received` (an attribute of the instance, found first), so a
        session's frames pay nothing for this class. An event loop that looked the method up once
        when the connection was made (uvloop does) still calls this one: it hands the bytes on
        where the decision sent them, never back into the head."""
        after_head = self._after_head
        if after_head is not None:
            after_head(data)
            return
        head = (self._head or b"") + data
        rewritten = _rewritten_head(head)
        if rewritten is None:   # more to come
            self._head = head
            return
        self._head = None
        if rewritten is head:   # a plain GET, or past what a probe sends: websockets decides
            self._after_head = self.data_received = super().data_received   # type: ignore[method-assign]
            super().data_received(head)
            return
        method, version, plain_get = rewritten
        self.request_method, self.request_version = method, version
        self._after_head = self.data_received = _ignore   # type: ignore[method-assign]  (the body, and after)
        super().data_received(plain_get)

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().handshake(*args, **kwargs)
        except ConnectionClosed:
            # the peer left before the answer went out: a balancer's check that timed out while
            # the relay was busy, a client that gave up
            log.info("the client left during the handshake", extra={"remote": remote_address(self)})
            return
        except InvalidMessage as exc:
            if self.request is not None:
                raise
            failure: BaseException = exc
        else:   # websockets 17 keeps the failure instead of raising it (and logs it at debug only)
            handshake_exc = getattr(self.protocol, "handshake_exc", None)
            if self.request is not None or handshake_exc is None:
                return
            failure = handshake_exc
        cause = failure.__cause__
        if isinstance(cause, EOFError) and self._head == b"":
            log.debug("connection closed before sending a request", extra={"remote": remote_address(self)})
        else:
            log.info("not an HTTP request: %s", cause or failure, extra={"remote": remote_address(self)})


def _ignore(data: bytes) -> None:
    pass


def _rewritten_head(head: bytes) -> tuple[str, str, bytes] | bytes | None:
    """For the start of a request: None when more is needed; `head` itself when websockets
    should read it as it is (a plain GET, not HTTP at all, or too long); else the method, the
    version and the head rewritten as a plain GET without body headers."""
    line_end = head.find(b"\n")
    if line_end < 0:
        return None if len(head) < MAX_REQUEST_HEAD else head
    parts = head[:line_end].rstrip(b"\r").split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/") or (parts[0] == b"GET" and parts[2] == b"HTTP/1.1"):
        return head
    lines = head.split(b"\n")
    headers: list[bytes] = []
    for line in lines[1:-1]:   # the last piece may be an unfinished line
        line = line.rstrip(b"\r")
        if not line:   # the empty line that ends the head
            method, target, version = parts
            kept = [h for h in headers if not h.lower().startswith(_BODY_HEADERS)]
            plain_get = b"\r\n".join([b"GET " + target + b" HTTP/1.1", *kept, b"", b""])
            return method.decode("ascii", "replace"), version.decode("ascii", "replace"), plain_get
        headers.append(line)
    return None if len(head) < MAX_REQUEST_HEAD else head


def request_of(connection: ServerConnection, request: WebsocketsRequest) -> Request:
    """The request as the relay's rules see it (the method and version a `ProbeConnection` kept)."""
    return Request(target=request.path, headers=Headers(request.headers.raw_items()),
                   method=getattr(connection, "request_method", "GET"),
                   version=getattr(connection, "request_version", "HTTP/1.1"),
                   remote=remote_address(connection))


def response_of(connection: ServerConnection, answer: Answer) -> Response:
    """`answer` as websockets sends it: its status, its headers (and the server's `Date` and
    `Connection: close`), its body; `Content-Length` from the body unless the answer sets it."""
    response = connection.respond(answer.status, "")
    del response.headers["Content-Type"]
    del response.headers["Content-Length"]
    for name, value in answer.headers:
        response.headers[name] = value
    if "Content-Length" not in response.headers:
        response.headers["Content-Length"] = str(len(answer.body))
    response.body = answer.body
    return response


class WebsocketsListener:
    """A websockets server as a `Listener`."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.address: tuple[str, int] = next(iter(server.sockets)).getsockname()[:2]

    def stop_accepting(self) -> None:
        self.server.server.close()

    def close(self) -> None:
        self.server.close()

    async def wait_closed(self) -> None:
        await self.server.wait_closed()


async def serve(handler: Handler, host: str, port: int, *, decide: Decide, subprotocol: ChooseSubprotocol,
                max_frame_bytes: int, server_header: str, logger: logging.Logger | logging.LoggerAdapter,
                tls: ssl.SSLContext | None = None, reuse_port: bool = False) -> WebsocketsListener:
    """`Backend.serve` (relay/session/transport.py)."""

    def process_request(connection: ServerConnection, request: WebsocketsRequest) -> Response | None:
        seen = request_of(connection, request)
        answer = decide(seen)
        if answer is not None:
            return response_of(connection, answer)
        connection.relay_request = seen   # type: ignore[attr-defined]
        return None

    async def serve_connection(connection: ServerConnection) -> None:
        await handler(WebsocketsTransport(connection), connection.relay_request)   # type: ignore[attr-defined]

    server = await websockets_serve(
        serve_connection, host, port,
        process_request=process_request,
        create_connection=ProbeConnection,
        select_subprotocol=lambda connection, offered: subprotocol(offered),
        max_size=max_frame_bytes,
        compression=None,   # see connect: no per-frame deflate on the relay
        close_timeout=CLOSE_TIMEOUT,
        server_header=server_header,
        ssl=tls,
        logger=logger,
        reuse_port=reuse_port or None,
    )
    return WebsocketsListener(server)


class WebsocketsBackend:
    """The `Backend` of the websockets library."""

    name = "websockets"
    connect = staticmethod(connect)
    serve = staticmethod(serve)


BACKEND = WebsocketsBackend()
