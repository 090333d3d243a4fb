"""The `picows` library behind the transport seam (relay/session/transport.py): its frames are
parsed and masked in C, so a forwarded audio delta costs a fraction of what websockets' Python
framing costs. This is the one module that imports picows; the pin `picows>=2.3,<2.4` (pyproject.toml's
`fast` extra) guards it alone. Its sockets are the event loop's own (uvloop's with `--loop auto`),
not those of aiofastnet, which picows installs and would use by default: on uvloop they cost the
same CPU per frame, and an idle session holds less memory on them.

picows hands over frames, not messages, and leaves much of the protocol to its user. What this
module adds, so that a client or a provider meets the same relay whichever transport it runs on:

- messages (relay/transports/picows_connection.py: `PicowsTransport`): fragments reassembled, the order of fragments checked (1002), reserved bits refused
  (1002: no extension is negotiated), text checked as UTF-8 once whole (1007), a message over
  the size limit refused (1009; picows checks each frame, this the message);
- the closing handshake: a peer's close is answered with its code; a close of the relay's waits
  for the peer's answer, at most CLOSE_TIMEOUT, then drops the connection;
- batched writes: the frames waiting for a client go out framed here in one write (frames
  toward a server are masked, which picows does in C, one frame at a time); with the compiled
  lane, the audio frames of one read go out in one write on either side (masked there toward a
  server);
- every request shown to the relay's rules: a request-head reader (`RequestSniffer`) sits in
  front of picows on the listening port and hands a connection over to picows only once the
  rules let a WebSocket open; every other request (HEAD, HTTP/1.0, any method, a health check, a
  refusal) is answered here, in the same words as the websockets transport answers it.

What it touches beyond picows' documented API (checked against picows 2.3.1, on asyncio's loop
and on uvloop 0.23: tests/test_picows_transport.py):

- `picows.picows.WSProtocol(...)`: the protocol `ws_create_server` builds for each connection;
  built here by keyword for a connection the sniffer hands over (`transport.set_protocol`, then
  `connection_made` and the bytes already read through `get_buffer` / `buffer_updated`: the
  sequence picows' own `ws_connect` follows for a proxied connection), and for each connection
  to the provider, whose socket the relay opens itself (`create_connection`, then the protocol's
  `wait_until_handshake_complete`, `transport` and `listener`: what `ws_connect` does, minus
  its redirects and its proxies), so that a connection cancelled mid-handshake is dropped;
  `picows.url.parse_url` reads its URL as `ws_connect` does.
- `WSTransport.underlying_transport`: its `writelines` (the batched frames, after the checks picows'
  `send` makes: no close frame sent, not disconnected), `pause_reading` and `resume_reading`.
- `asyncio.tasks._enter_task` / `_leave_task`: while picows' frame callback hands a message to
  `deliver`, the task that called `receive` is made the current task (and its context the current
  one), so that what the session loop does with the message (anyio's cancel scopes and task
  groups: a handler started, a close begun) runs as it does when websockets' reader task hands the
  message on. The reader's express lane, offered the message first, needs no task: an audio frame
  taken there skips the switch.
- picows' Cython declarations (`picows/picows.pxd`), in the compiled lane
  (relay/transports/_picows_lane.pyx): `WSListener.on_ws_frame` overridden in C, `WSFrame`'s
  fields (`payload_ptr` among them: a pointer into picows' read buffer, valid during the callback
  only), `WSTransport`'s state flags and its C methods `_get_header_size`, `_prepare_header`
  (a frame's header, with its masking key on a client's side) and `_fast_write` (picows' own
  write: one `send` from the buffer while the socket's buffer is empty, else the transport's
  `write`). And one fact of picows' parser: it reads a frame ahead, so a frame not
  `last_in_buffer` has the next one whole after its payload, and it answers a ping without
  showing it to the listener. Built against the picows it runs with (the build requirements'
  series); an extension built against another release is not used (picows_connection.py's
  `compiled_lane` compares the versions: Cython checks the types' sizes, not the methods' order).
- picows logs through the logger it is given; `PicowsLog` turns its per-connection INFO lines
  and a peer's protocol errors (which it logs at ERROR) into DEBUG, as websockets logs them.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

from picows import (
    WSAutoPingStrategy,
    WSHandshakeError,
    WSInvalidStatusError,
    WSInvalidURL,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
)
from picows.picows import WSProtocol
from picows.url import parse_url

from relay.session.http import Answer, Headers, Request
from relay.session.policy import GOING_AWAY, INTERNAL_ERROR, NORMAL_CLOSURE
from relay.session.transport import ChooseSubprotocol, Decide, Handler, HandshakeFailed, InvalidURL
from relay.transports.picows_connection import (
    PING_INTERVAL,
    PING_TIMEOUT,
    READ_BUFFER_BYTES,
    PicowsLog,
    PicowsTransport,
)

log = logging.getLogger("relay.server")

OPEN_TIMEOUT = 10.0          # a client's whole request head, then its upgrade (websockets' open_timeout)
MAX_REQUEST_HEAD = 16 * 1024   # what a request line and headers may take (picows' own limit)


# ---- the relay's connections to the provider ----------------------------------------------------

async def connect(url: str, *, headers: dict[str, str], max_frame_bytes: int, open_timeout: float,
                  user_agent: str, logger: logging.Logger | logging.LoggerAdapter) -> PicowsTransport:
    """`Backend.connect` (relay/session/transport.py). No redirects are followed, and a
    subprotocol the server chose must be one offered, as websockets checks.

    The connection is this call's from the moment its socket exists: cancelled, timed out or
    failed at any point of the handshake (the session's client left, say), it is dropped before
    the exception goes on. picows' `ws_connect` leaves a connection it was cancelled on open,
    its handshake still running, with no owner; so the socket is opened here, with the protocol
    `ws_connect` would give it."""
    try:
        parsed = parse_url(url)
    except WSInvalidURL as exc:
        raise InvalidURL(str(exc)) from None

    def listener(request: WSUpgradeRequest, response: WSUpgradeResponse) -> PicowsTransport:
        return PicowsTransport(server_side=False, max_message_bytes=max_frame_bytes)

    def protocol() -> WSProtocol:
        return WSProtocol(
            host_port=parsed.netloc, ws_path=parsed.resource_name, is_client_side=True, ws_listener_factory=listener,
            logger=PicowsLog(logger, {}), disconnect_on_exception=True, websocket_handshake_timeout=open_timeout,
            enable_auto_ping=True, auto_ping_idle_timeout=PING_INTERVAL, auto_ping_reply_timeout=PING_TIMEOUT,
            auto_ping_strategy=WSAutoPingStrategy.PING_WHEN_IDLE, enable_auto_pong=True,
            max_frame_size=max_frame_bytes, extra_headers={"User-Agent": user_agent, **headers},
            read_buffer_init_size=READ_BUFFER_BYTES)

    try:
        async with asyncio.timeout(open_timeout):
            # asyncio's create_connection closes the socket itself when it fails or is cancelled
            stream, opened = await asyncio.get_running_loop().create_connection(
                protocol, parsed.host, parsed.port, ssl=True if parsed.is_secure else None)
            try:
                await opened.wait_until_handshake_complete()
            except BaseException:
                stream.abort()
                raise
    except WSInvalidStatusError as exc:   # a redirect among them: never followed
        status = int(exc.response.status) if exc.response is not None else None
        phrase = exc.response.status.phrase if exc.response is not None else ""
        raise HandshakeFailed(f"HTTP {status} {phrase}".rstrip(), status=status, phrase=phrase) from None
    except WSHandshakeError as exc:
        raise HandshakeFailed(str(exc)) from None
    ws, transport = opened.transport, opened.listener
    if transport is None:   # the server closed the connection instead of answering
        raise HandshakeFailed("it closed the connection")
    if logger.isEnabledFor(logging.DEBUG):   # as websockets logs a handshake (through the edge's redactor)
        request, response = ws.request, ws.response
        logger.debug("> %s %s %s\n%s", request.method.decode(), request.path.decode(), request.version.decode(),
                     "\n".join(f"> {name}: {value}" for name, value in request.headers.items()))
        logger.debug("< HTTP/1.1 %d\n%s", int(response.status),
                     "\n".join(f"< {name}: {value}" for name, value in response.headers.items()))
    offered = [name.strip() for value in (v for k, v in headers.items() if k.lower() == "sec-websocket-protocol")
               for name in value.split(",")]
    chosen = ws.response.headers.get("Sec-WebSocket-Protocol")
    if chosen is not None and chosen not in offered:
        ws.disconnect(graceful=False)
        raise HandshakeFailed(f"the server chose the subprotocol {chosen!r}, which was not offered")
    return transport


# ---- the server clients connect to --------------------------------------------------------------

def response_bytes(answer: Answer, server_header: str) -> bytes:
    """`answer` as the websockets transport sends it: its status, the server's `Date`, `Server`
    and `Connection: close`, its headers, `Content-Length` from the body unless they set it."""
    try:
        phrase = HTTPStatus(answer.status).phrase
    except ValueError:
        phrase = ""
    lines = [f"HTTP/1.1 {answer.status} {phrase}", f"Date: {formatdate(usegmt=True)}", f"Server: {server_header}",
             "Connection: close", *(f"{name}: {value}" for name, value in answer.headers)]
    if not any(name.lower() == "content-length" for name, _ in answer.headers):
        lines.append(f"Content-Length: {len(answer.body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + answer.body


def parsed_head(head: bytes, remote: str) -> Request | None:
    """The request line and headers of a request head (without its blank line), or None when it
    is not an HTTP request."""
    line, *header_lines = head.decode("latin-1").split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/") or not parts[0].isalpha():
        return None
    headers = []
    for header_line in header_lines:
        name, colon, value = header_line.partition(":")
        if not colon or not name or name != name.strip():
            return None
        headers.append((name, value.strip()))
    method, target, version = parts
    return Request(target=target, headers=Headers(headers), method=method, version=version, remote=remote)


class RequestSniffer(asyncio.Protocol):
    """The first protocol of every connection to the port: reads the request head, shows the
    request to the relay's rules, and either answers it (then closes) or hands the connection and
    the bytes read so far to picows' protocol, which reads the head again, answers 101 and goes on
    with the frames (this class then costs nothing more per frame)."""

    def __init__(self, server: PicowsListener) -> None:
        self.server = server
        self.head = bytearray()
        self.transport: asyncio.Transport | None = None
        self.remote = "?"
        self._timer: asyncio.TimerHandle | None = None
        self.done = False   # answered, or handed over

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport   # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.remote = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)
        self._timer = asyncio.get_running_loop().call_later(OPEN_TIMEOUT, self._too_slow)
        self.server.sniffers.add(self)

    def data_received(self, data: bytes) -> None:
        if self.done:
            return   # what a refused request sent after its head (a body)
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if end < 0:
            if len(self.head) >= MAX_REQUEST_HEAD:
                self._give_up("not an HTTP request: the request head is over %d bytes", MAX_REQUEST_HEAD)
            return
        request = parsed_head(bytes(self.head[:end]), self.remote)
        logger = self.server.logger
        if request is not None and logger.isEnabledFor(logging.DEBUG):   # as websockets logs it
            logger.debug("< %s", bytes(self.head[:end]).decode("latin-1").replace("\r\n", "\n< "))
        if request is None:
            self._give_up("not an HTTP request: %r", bytes(self.head[:60]))
            return
        try:
            answer = self.server.decide(request)
        except Exception:
            log.exception("the handshake failed", extra={"remote": self.remote})
            answer = Answer.error(HTTPStatus.INTERNAL_SERVER_ERROR, "the relay failed to handle the request")
        if answer is not None:
            self._answer(answer)
        else:
            self._hand_over(request)

    def eof_received(self) -> bool:
        return False   # the transport closes; connection_lost says what it was

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop()
        if not self.done:
            self.done = True
            if self.head:
                log.info("not an HTTP request: the connection closed in its head", extra={"remote": self.remote})
            else:
                log.debug("connection closed before sending a request", extra={"remote": self.remote})

    def close(self) -> None:
        """The server closes: a connection still in its head is dropped."""
        if not self.done and self.transport is not None:
            self.done = True
            self.transport.abort()

    def _answer(self, answer: Answer) -> None:
        assert self.transport is not None
        self.done = True
        self._stop()
        self.transport.write(response_bytes(answer, self.server.server_header))
        self.transport.close()

    def _give_up(self, message: str, *args: object) -> None:
        assert self.transport is not None
        self.done = True
        self._stop()
        log.info(message, *args, extra={"remote": self.remote})
        self.transport.close()

    def _too_slow(self) -> None:
        self._timer = None
        if not self.done:
            self._give_up("no request head within %g s", OPEN_TIMEOUT)

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.server.sniffers.discard(self)

    def _hand_over(self, request: Request) -> None:
        assert self.transport is not None
        self.done = True
        self._stop()
        self.server.open(self.transport, request, bytes(self.head))


class PicowsListener:
    """The listening port (a `Listener`): its sniffers, its open connections and their
    handlers."""

    def __init__(self, handler: Handler, *, decide: Decide, subprotocol: ChooseSubprotocol, max_frame_bytes: int,
                 server_header: str, logger: logging.Logger | logging.LoggerAdapter) -> None:
        self.handler = handler
        self.decide = decide
        self.subprotocol = subprotocol
        self.max_frame_bytes = max_frame_bytes
        self.server_header = server_header
        self.logger = PicowsLog(logger, {})
        self.sniffers: set[RequestSniffer] = set()
        self.connections: set[PicowsTransport] = set()
        self.handlers: set[asyncio.Task[None]] = set()
        self.address: tuple[str, int] = ("", 0)
        self._server: Any = None
        self._closing: list[asyncio.Task[None]] = []

    def open(self, stream: asyncio.Transport, request: Request, read: bytes) -> None:
        """Hand a connection whose request the rules let through to picows, with the bytes read."""
        transport = PicowsTransport(server_side=True, max_message_bytes=self.max_frame_bytes)
        chosen = self.subprotocol(request.subprotocols)
        answer_headers = [("Server", self.server_header)]
        if chosen is not None:
            answer_headers.append(("Sec-WebSocket-Protocol", chosen))

        def upgrade(upgrade_request: WSUpgradeRequest) -> WSUpgradeResponseWithListener:
            # browsers send `Connection: keep-alive, Upgrade`; picows takes `Upgrade` alone
            tokens = [token.strip().lower() for token in upgrade_request.headers.get("Connection", "").split(",")]
            if "upgrade" in tokens:
                upgrade_request.headers["Connection"] = "Upgrade"
            return WSUpgradeResponseWithListener(WSUpgradeResponse.create_101_response(answer_headers), transport)

        transport.on_open = lambda opened: self._start(opened, request)
        protocol = WSProtocol(
            host_port=None, ws_path=None, is_client_side=False, ws_listener_factory=upgrade, logger=self.logger,
            disconnect_on_exception=True, websocket_handshake_timeout=OPEN_TIMEOUT, enable_auto_ping=True,
            auto_ping_idle_timeout=PING_INTERVAL, auto_ping_reply_timeout=PING_TIMEOUT,
            auto_ping_strategy=WSAutoPingStrategy.PING_WHEN_IDLE, enable_auto_pong=True,
            max_frame_size=self.max_frame_bytes, extra_headers=None, read_buffer_init_size=READ_BUFFER_BYTES)
        stream.set_protocol(protocol)
        protocol.connection_made(stream)
        feed(protocol, read)

    def _start(self, transport: PicowsTransport, request: Request) -> None:
        self.connections.add(transport)
        task = asyncio.get_running_loop().create_task(self._serve(transport, request))
        self.handlers.add(task)
        task.add_done_callback(self.handlers.discard)

    async def _serve(self, transport: PicowsTransport, request: Request) -> None:
        """Run the handler; close the connection when it returns (1011 when it failed), as a
        websockets server does."""
        try:
            await self.handler(transport, request)
        except Exception:
            log.exception("connection handler failed", extra={"remote": request.remote})
            await transport.close(INTERNAL_ERROR, "")
        else:
            await transport.close(NORMAL_CLOSURE, "")
        finally:
            self.connections.discard(transport)

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    def close(self) -> None:
        self.stop_accepting()
        for sniffer in list(self.sniffers):
            sniffer.close()
        loop = asyncio.get_running_loop()
        self._closing += [loop.create_task(transport.close(GOING_AWAY, "")) for transport in self.connections]

    async def wait_closed(self) -> None:
        # waits on the unfinished tasks only: a finished handler stays in `handlers` until its
        # done-callback runs, and gather over finished tasks completes without yielding (Python
        # 3.12+), which would spin here forever
        while pending := [task for task in (*self.handlers, *self._closing) if not task.done()]:
            await asyncio.wait(pending)
        for task in self._closing:   # a close that failed is the connection's end, said by its handler
            if not task.cancelled():
                task.exception()
        self._closing = []


def feed(protocol: WSProtocol, data: bytes) -> None:
    """`data` into picows' protocol as the event loop hands it a socket's read, in the pieces its
    buffer takes (the request head the sniffer read before picows had the socket;
    scripts/bench_session_picows.py's reads)."""
    view = memoryview(data)
    while view:
        buffer = protocol.get_buffer(-1)
        size = min(len(buffer), len(view))
        buffer[:size] = view[:size]
        view = view[size:]
        protocol.buffer_updated(size)


async def serve(handler: Handler, host: str, port: int, *, decide: Decide, subprotocol: ChooseSubprotocol,
                max_frame_bytes: int, server_header: str, logger: logging.Logger | logging.LoggerAdapter,
                tls: ssl.SSLContext | None = None, reuse_port: bool = False) -> PicowsListener:
    """`Backend.serve` (relay/session/transport.py)."""
    listener = PicowsListener(handler, decide=decide, subprotocol=subprotocol, max_frame_bytes=max_frame_bytes,
                              server_header=server_header, logger=logger)
    server = await asyncio.get_running_loop().create_server(lambda: RequestSniffer(listener), host, port, ssl=tls,
                                                            reuse_port=reuse_port or None)
    listener._server = server
    listener.address = server.sockets[0].getsockname()[:2]
    return listener


class PicowsBackend:
    """The `Backend` of the picows library."""

    name = "picows"
    connect = staticmethod(connect)
    serve = staticmethod(serve)


BACKEND = PicowsBackend()
