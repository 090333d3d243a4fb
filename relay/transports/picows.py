"""The `picows` library behind the transport seam (relay/session/transport.py): its frames are
parsed and masked in C, so a forwarded audio delta costs a fraction of what websockets' Python
framing costs. This is the one module that imports picows; the pin `picows>=2.3,<2.4` (pyproject.toml's
`fast` extra) guards it alone. Its sockets are the event loop's own (uvloop's with `--loop auto`),
not those of aiofastnet, which picows installs and would use by default: on uvloop they cost the
same CPU per frame, and an idle session holds 10 KB less (scripts/bench's idle sessions).

picows hands over frames, not messages, and leaves much of the protocol to its user. What this
module adds, so that a client or a provider meets the same relay whichever transport it runs on:

- messages: fragments reassembled, the order of fragments checked (1002), reserved bits refused
  (1002: no extension is negotiated), text checked as UTF-8 once whole (1007), a message over
  the size limit refused (1009; picows checks each frame, this the message);
- the closing handshake: a peer's close is answered with its code; a close of the relay's waits
  for the peer's answer, at most CLOSE_TIMEOUT, then drops the connection;
- batched writes toward clients: the frames waiting go out framed here in one write (frames
  toward a server are masked, which picows does in C, one frame at a time);
- every request shown to the relay's rules: a request-head reader (`RequestSniffer`) sits in
  front of picows on the listening port and hands a connection over to picows only once the
  rules let a WebSocket open; every other request (HEAD, HTTP/1.0, any method, a health check, a
  refusal) is answered here, in the same words as the websockets transport answers it.

What it touches beyond picows' documented API (checked against picows 2.3.1, on asyncio's loop
and on uvloop 0.23: tests/test_picows_transport.py):

- `picows.picows.WSProtocol(...)`: the protocol `ws_create_server` builds for each connection;
  built here by keyword for a connection the sniffer hands over (`transport.set_protocol`, then
  `connection_made` and the bytes already read through `get_buffer` / `buffer_updated`: the
  sequence picows' own `ws_connect` follows for a proxied connection).
- `WSTransport.underlying_transport`: its `write` (the batched frames, after the checks picows'
  `send` makes: no close frame sent, not disconnected), `pause_reading` and `resume_reading`.
- `asyncio.tasks._enter_task` / `_leave_task`: while picows' frame callback hands a message on, the
  task that called `receive` is made the current task (and its context the current one), so that
  what the session loop does with the message (anyio's cancel scopes and task groups: a handler
  started, a close begun) runs as it does when websockets' reader task hands the message on.
- picows logs through the logger it is given; `PicowsLog` turns its per-connection INFO lines
  and a peer's protocol errors (which it logs at ERROR) into DEBUG, as websockets logs them.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import ssl
import struct
from asyncio.tasks import _enter_task, _leave_task
from collections import deque
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Callable, Sequence

from picows import (
    WSAutoPingStrategy,
    WSFrame,
    WSHandshakeError,
    WSInvalidStatusError,
    WSInvalidURL,
    WSListener,
    WSMsgType,
    WSTransport,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
    ws_connect,
)
from picows.picows import WSProtocol

from relay.session.http import Answer, Headers, Request
from relay.session.policy import GOING_AWAY, INTERNAL_ERROR, NO_CLOSE_FRAME, NORMAL_CLOSURE
from relay.session.transport import (
    BATCH_BYTES,
    ChooseSubprotocol,
    Decide,
    Frame,
    FrameQueue,
    Handler,
    HandshakeFailed,
    InvalidURL,
    TransportClosed,
)

log = logging.getLogger("relay.server")

CLOSE_TIMEOUT = 1.0          # the peer's answer to a close of ours, as the websockets transport waits
OPEN_TIMEOUT = 10.0          # a client's whole request head, then its upgrade (websockets' open_timeout)
PING_INTERVAL = 20.0         # a ping after this long without a frame from the peer (websockets' default)
PING_TIMEOUT = 20.0          # ... and the connection dropped when its pong does not come within this
MAX_REQUEST_HEAD = 16 * 1024   # what a request line and headers may take (picows' own limit)
READ_BUFFER_BYTES = 2 * 1024   # picows' first read buffer per connection, its least (it grows as messages need)
MAX_WAITING_MESSAGES = 16      # read before anyone receives them: then the socket is no longer read

PROTOCOL_ERROR = 1002
INVALID_DATA = 1007
MESSAGE_TOO_BIG = 1009
NO_STATUS = 1005             # a close frame without a code, as websockets reports it

TEXT, BINARY, CONTINUATION = WSMsgType.TEXT, WSMsgType.BINARY, WSMsgType.CONTINUATION
CLOSE, PING, PONG = WSMsgType.CLOSE, WSMsgType.PING, WSMsgType.PONG

_HEADER_16 = struct.Struct("!BBH").pack
_HEADER_64 = struct.Struct("!BBQ").pack


def framed(frames: Sequence[Frame]) -> bytes:
    """`frames` as unmasked WebSocket frames (what a server sends), one after the other: text for
    a str, binary for bytes."""
    parts: list[bytes] = []
    append = parts.append
    for frame in frames:
        if type(frame) is str:
            payload, first = frame.encode(), 0x81
        else:
            payload, first = frame, 0x82   # type: ignore[assignment]
        size = len(payload)
        if size < 126:
            append(bytes((first, size)))
        elif size < 65536:
            append(_HEADER_16(first, 126, size))
        else:
            append(_HEADER_64(first, 127, size))
        append(payload)
    return b"".join(parts)


class PicowsLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The logger picows is given: its line per connection (INFO) and a peer's protocol errors
    (ERROR: "WS parser error") become DEBUG lines, where websockets logs the same events; what
    else it logs at ERROR (a fault of the relay's in a callback) stays an error."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level == logging.INFO or (level >= logging.ERROR and isinstance(msg, str)
                                     and msg.startswith("WS parser error")):
            level = logging.DEBUG
        if self.logger.isEnabledFor(level):
            self.logger.log(level, msg, *args, **kwargs)


def closed_by(ws: WSTransport) -> TransportClosed:
    """What picows says of a closed (or closing) connection, in the seam's terms."""
    handshake = ws.close_handshake
    received = handshake.recv if handshake is not None else None
    sent = handshake.sent if handshake is not None else None
    frame = received or sent
    if frame is None:
        return TransportClosed(NO_CLOSE_FRAME, "connection lost", received=False, initiated_here=False)
    code = int(frame.code) or NO_STATUS
    return TransportClosed(code, frame.reason or "", received=received is not None,
                           initiated_here=sent is not None and not handshake.recv_then_sent)


def copied(closed: TransportClosed) -> TransportClosed:
    """A new exception saying what `closed` says (each raise gets its own traceback)."""
    return TransportClosed(closed.code, closed.reason, received=closed.received, initiated_here=closed.initiated_here)


class PicowsTransport(WSListener):
    """One picows connection (client or server side) as a `Transport`, and the listener picows
    calls with its frames.

    - `receive`: each whole message goes to `deliver` from picows' frame callback, in the read
      that completed it; messages that come before anyone receives wait (a few, then the socket
      is no longer read until someone does).
    - `more_buffered`: the frame just delivered is not the last of its read.
    - `flush`, `flush_soon`, `send`: what waits goes out in one write on a server's connection
      (framed here), one masked frame after the other on a client's (framed by picows).
    - `close`: the closing handshake, bounded by CLOSE_TIMEOUT; `abort` drops the connection."""

    __slots__ = ("ws", "server_side", "max_message_bytes", "on_open", "_loop", "_deliver", "_waiting",
                 "_reading_paused", "_more", "_message_type", "_fragments", "_message_bytes", "_paused",
                 "_resumed", "_receiving", "_failure", "_disconnected", "_flush_scheduled", "_close_timer",
                 "_reader", "_reader_context")

    def __init__(self, *, server_side: bool, max_message_bytes: int) -> None:
        super().__init__()
        self.ws: WSTransport | None = None
        self.server_side = server_side
        self.max_message_bytes = max_message_bytes
        self.on_open: Callable[[PicowsTransport], None] | None = None   # a server's: start the handler
        self._loop = asyncio.get_running_loop()
        self._deliver: Callable[[Frame], None] | None = None
        self._waiting: deque[Frame] = deque()   # messages read before anyone receives them
        self._reading_paused = False
        self._more = False
        self._message_type: WSMsgType | None = None   # of a fragmented message being read
        self._fragments: list[bytes] = []
        self._message_bytes = 0
        self._paused = False   # flow control: the socket's buffer is over its high-water mark
        self._resumed: asyncio.Future[None] | None = None
        self._receiving: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None   # what `deliver` raised
        self._disconnected: asyncio.Future[TransportClosed] = self._loop.create_future()
        self._flush_scheduled = False
        self._close_timer: asyncio.TimerHandle | None = None
        self._reader: asyncio.Task[Any] | None = None   # the task in `receive`
        self._reader_context: contextvars.Context | None = None

    # ---- picows' callbacks ---------------------------------------------------------------
    def on_ws_connected(self, ws: WSTransport) -> None:
        self.ws = ws
        if self.on_open is not None:
            self.on_open(self)

    def on_ws_frame(self, ws: WSTransport, frame: WSFrame) -> None:
        self._more = not frame.last_in_buffer
        kind = frame.msg_type
        if kind is TEXT or kind is BINARY:
            if self._message_type is not None:
                self._fail(PROTOCOL_ERROR, "expected a continuation frame")
                return
            if frame.fin and not (frame.rsv1 or frame.rsv2 or frame.rsv3) and not ws.is_close_frame_sent:
                # a whole message in one frame: the per-frame path (picows has checked its size)
                if kind is TEXT:
                    try:
                        message: Frame = frame.get_payload_as_utf8_text()
                    except UnicodeDecodeError as exc:
                        self._fail(INVALID_DATA, f"invalid UTF-8: {exc.reason} at position {exc.start}")
                        return
                else:
                    message = frame.get_payload_as_bytes()
                self._hand_on(message)
                return
        elif kind is CLOSE:
            self._close_received(ws, frame)
            return
        elif kind is not CONTINUATION:
            return   # a pong (picows answers pings itself)
        self._fragment(ws, frame, kind)

    def _fragment(self, ws: WSTransport, frame: WSFrame, kind: WSMsgType) -> None:
        """A frame of a message in several (or one that failed the fast path's checks)."""
        if ws.is_close_frame_sent:
            return   # closing: what still comes is not read (picows delivers an oversize frame's rest)
        if frame.rsv1 or frame.rsv2 or frame.rsv3:
            self._fail(PROTOCOL_ERROR, "reserved bits must be 0")
            return
        if kind is CONTINUATION:
            if self._message_type is None:
                self._fail(PROTOCOL_ERROR, "unexpected continuation frame")
                return
        else:
            self._message_type = kind
        self._message_bytes += frame.payload_size
        if self._message_bytes > self.max_message_bytes:
            self._fail(MESSAGE_TOO_BIG, f"message over {self.max_message_bytes} bytes")
            return
        self._fragments.append(frame.get_payload_as_bytes())
        if not frame.fin:
            return
        whole = b"".join(self._fragments)
        is_text = self._message_type is TEXT
        self._message_type, self._fragments, self._message_bytes = None, [], 0
        if is_text:
            try:
                message: Frame = whole.decode()
            except UnicodeDecodeError as exc:
                self._fail(INVALID_DATA, f"invalid UTF-8: {exc.reason} at position {exc.start}")
                return
        else:
            message = whole
        self._hand_on(message)

    def _hand_on(self, message: Frame) -> None:
        deliver = self._deliver
        if deliver is None:
            self._waiting.append(message)
            if len(self._waiting) >= MAX_WAITING_MESSAGES:
                self._pause_reading()
            return
        loop, reader = self._loop, self._reader
        try:
            _enter_task(loop, reader)
        except RuntimeError:   # already inside a task (picows calls back from the event loop: never)
            reader = None
        try:
            self._reader_context.run(deliver, message)   # type: ignore[union-attr]
        except BaseException as exc:   # ends `receive` with it
            self._deliver = None
            self._failure = exc
            self._pause_reading()
            self._wake_receiver()
        finally:
            if reader is not None:
                _leave_task(loop, reader)

    def _close_received(self, ws: WSTransport, frame: WSFrame) -> None:
        """The peer's close frame: answered with its code (an empty one with 1000: picows cannot
        send a close frame without a code), unless the relay's own close came first; then the
        connection is done."""
        if not ws.is_close_frame_sent:
            code = frame.get_close_code()
            ws.send_close(code if int(code) else NORMAL_CLOSURE, frame.get_close_message())
        ws.disconnect()

    def on_ws_disconnected(self, ws: WSTransport) -> None:
        if self._close_timer is not None:
            self._close_timer.cancel()
        if not self._disconnected.done():
            self._disconnected.set_result(closed_by(ws))
        self._wake_receiver()
        self._wake_writer()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writer()

    # ---- the seam ------------------------------------------------------------------------
    async def receive(self, deliver: Callable[[Frame], None]) -> None:
        self._reader = asyncio.current_task()
        self._reader_context = contextvars.copy_context()
        self._deliver = deliver
        try:
            waiting = self._waiting
            while waiting:
                deliver(waiting.popleft())
            if self._reading_paused:
                self._reading_paused = False
                self._underlying().resume_reading()
            if not self._disconnected.done() and self._failure is None:
                self._receiving = self._loop.create_future()
                await self._receiving
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure
            raise copied(self._disconnected.result())
        finally:
            self._deliver = None
            self._receiving = None
            self._reader = self._reader_context = None

    def more_buffered(self) -> bool:
        return self._more

    def _writable(self) -> bool:
        ws = self.ws
        return not self._paused and ws is not None and not ws.is_close_frame_sent and not ws.is_disconnected

    def _write(self, frames: Sequence[Frame]) -> None:
        ws = self.ws
        assert ws is not None
        if self.server_side and len(frames) > 1:
            ws.underlying_transport.write(framed(frames))
            return
        send = ws.send
        for frame in frames:
            send(TEXT if type(frame) is str else BINARY, frame)

    def flush(self, queue: FrameQueue) -> None:
        while queue and queue.writer_idle and self._writable():
            self._write(queue.take_batch(BATCH_BYTES))
        if queue:
            queue.wake()   # paused or closing: the writer task waits for the socket

    def flush_soon(self, queue: FrameQueue) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._scheduled_flush, queue)

    def _scheduled_flush(self, queue: FrameQueue) -> None:
        self._flush_scheduled = False
        self.flush(queue)

    async def send(self, frames: Sequence[Frame]) -> None:
        while not self._writable():
            ws = self.ws
            if ws is None or ws.is_close_frame_sent or ws.is_disconnected:
                raise copied(self._disconnected.result()) if self._disconnected.done() else closed_by(ws)  # type: ignore[arg-type]
            self._resumed = self._loop.create_future()
            await self._resumed
        self._write(frames)

    async def close(self, code: int, reason: str) -> None:
        ws = self.ws
        if ws is not None and not ws.is_disconnected:
            if not ws.is_close_frame_sent:
                ws.send_close(code, reason.encode())
            if self._close_timer is None:
                self._close_timer = self._loop.call_later(CLOSE_TIMEOUT, self.abort)
        await self.wait_closed()

    def abort(self) -> None:
        ws = self.ws
        if ws is not None:
            ws.disconnect(graceful=False)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._disconnected)

    # ---- helpers -------------------------------------------------------------------------
    def _fail(self, code: int, reason: str) -> None:
        """The peer broke the protocol: close with `code` at once and drop what it sends after
        (websockets fails a connection the same way)."""
        ws = self.ws
        assert ws is not None
        self._message_type, self._fragments, self._message_bytes = None, [], 0
        log.debug("closing a connection whose peer broke the protocol: %d %s", code, reason)
        if not ws.is_close_frame_sent:
            ws.send_close(code, reason.encode())
        ws.disconnect()

    def _underlying(self) -> asyncio.Transport:
        assert self.ws is not None
        return self.ws.underlying_transport

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.ws is not None and not self.ws.is_disconnected:
            self._reading_paused = True
            self._underlying().pause_reading()

    def _wake_receiver(self) -> None:
        receiving = self._receiving
        if receiving is not None and not receiving.done():
            receiving.set_result(None)

    def _wake_writer(self) -> None:
        resumed, self._resumed = self._resumed, None
        if resumed is not None and not resumed.done():
            resumed.set_result(None)


# ---- the relay's connections to the provider ----------------------------------------------------

async def connect(url: str, *, headers: dict[str, str], max_frame_bytes: int, open_timeout: float,
                  user_agent: str, logger: logging.Logger | logging.LoggerAdapter) -> PicowsTransport:
    """`Backend.connect` (relay/session/transport.py). No redirects are followed, and a
    subprotocol the server chose must be one offered, as websockets checks."""

    def listener(request: WSUpgradeRequest, response: WSUpgradeResponse) -> PicowsTransport:
        return PicowsTransport(server_side=False, max_message_bytes=max_frame_bytes)

    try:
        async with asyncio.timeout(open_timeout):
            ws, transport = await ws_connect(
                listener, url, extra_headers={"User-Agent": user_agent, **headers},
                websocket_handshake_timeout=open_timeout, max_redirects=0, max_frame_size=max_frame_bytes,
                logger_name=PicowsLog(logger, {}), enable_auto_ping=True, auto_ping_idle_timeout=PING_INTERVAL,
                auto_ping_reply_timeout=PING_TIMEOUT, auto_ping_strategy=WSAutoPingStrategy.PING_WHEN_IDLE,
                read_buffer_init_size=READ_BUFFER_BYTES, use_aiofastnet=False)
    except WSInvalidStatusError as exc:
        status = int(exc.response.status) if exc.response is not None else None
        phrase = exc.response.status.phrase if exc.response is not None else ""
        raise HandshakeFailed(f"HTTP {status} {phrase}".rstrip(), status=status, phrase=phrase) from None
    except WSInvalidURL as exc:
        raise InvalidURL(str(exc)) from None
    except WSHandshakeError as exc:
        raise HandshakeFailed(str(exc)) from None
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
        while read:
            buffer = protocol.get_buffer(-1)
            size = min(len(buffer), len(read))
            buffer[:size] = read[:size]
            read = read[size:]
            protocol.buffer_updated(size)

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
        while self.handlers or self._closing:
            await asyncio.gather(*self.handlers, *self._closing, return_exceptions=True)
            self._closing = [task for task in self._closing if not task.done()]


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
