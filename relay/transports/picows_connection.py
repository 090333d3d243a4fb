"""One picows connection as a `Transport` (relay/session/transport.py): `PicowsTransport`, the
listener picows calls with each frame, and what it adds to picows for the session: messages
reassembled and checked, the closing handshake, batched writes. relay/transports/picows.py opens
and serves these connections (it says what this module touches of picows beyond its API). Where
the package was built with a C compiler, picows calls the compiled base of `PicowsTransport`
(relay/transports/_picows_lane.pyx) with each frame, and an audio frame goes through in C; every
other frame comes to `_on_frame` here.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import struct
from asyncio.tasks import _enter_task, _leave_task
from collections import deque
from typing import Any, Callable, Sequence

from picows import WSFrame, WSListener, WSMsgType, WSTransport
from picows import __version__ as picows_version

from relay.session.policy import NO_CLOSE_FRAME, NORMAL_CLOSURE
from relay.session.transport import BATCH_BYTES, Deliver, Express, Frame, FrameQueue, TransportClosed, flush_round

log = logging.getLogger("relay.server")


class PythonListener(WSListener):
    """`PicowsTransport`'s base without the compiled extension: the attributes the compiled base
    (`FastListener`) holds, and picows calls the transport's `_on_frame` (Python) for each frame."""

    __slots__ = ("ws", "_paused", "_held_back", "_more", "_message_type", "_fast_lane")


def compiled_lane(installed_picows: str = picows_version) -> tuple[type[WSListener], Any]:
    """The base of `PicowsTransport` and the compiled lane's class: those of
    relay/transports/_picows_lane.pyx when the extension was built (setup.py) and RELAY_COMPILED
    is not 0, else `PythonListener` and None. An extension built against another picows than
    `installed_picows` is not used: Cython refuses to import it when picows' types changed size,
    and this refuses it otherwise (it calls picows' C methods by their place in a table, which
    another release may order otherwise); the Python path then runs, with a warning that says
    how to rebuild it."""
    if os.environ.get("RELAY_COMPILED", "1") == "0":
        return PythonListener, None
    try:
        from relay.transports._picows_lane import BUILT_WITH_PICOWS, FastListener, FrameLane
    except ImportError as exc:
        log.debug("the picows transport runs its Python frame path: %s", exc)
        return PythonListener, None
    if BUILT_WITH_PICOWS != installed_picows:
        log.warning("the picows transport's compiled frame path was built against picows %s, and picows %s is "
                    "installed: it runs its Python frame path (reinstall realtime-relay to rebuild it)",
                    BUILT_WITH_PICOWS or "(unknown)", installed_picows)
        return PythonListener, None
    return FastListener, FrameLane


ListenerBase, FrameLane = compiled_lane()
COMPILED = FrameLane is not None

CLOSE_TIMEOUT = 1.0          # the peer's answer to a close of ours, as the websockets transport waits
PING_INTERVAL = 20.0         # a ping after this long without a frame from the peer (websockets' default)
PING_TIMEOUT = 20.0          # ... and the connection dropped when its pong does not come within this
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
HEADERS_KEPT = 1024   # headers a `FrameHeaders` keeps: audio frames come in a few sizes


class FrameHeaders(dict):  # type: ignore[type-arg]
    """The header of an unmasked frame of one opcode, by payload size: looked up rather than
    packed for each frame (a dict lookup costs a third of a `struct` pack). Audio frames of one
    session come in a handful of sizes, so a few entries serve nearly every frame; past
    HEADERS_KEPT sizes, a header is packed and not kept."""

    def __init__(self, first_byte: int) -> None:
        super().__init__()
        self.first_byte = first_byte

    def __missing__(self, size: int) -> bytes:
        first = self.first_byte
        if size < 126:
            header = bytes((first, size))
        elif size < 65536:
            header = _HEADER_16(first, 126, size)
        else:
            header = _HEADER_64(first, 127, size)
        if len(self) < HEADERS_KEPT:
            self[size] = header
        return header


TEXT_HEADERS = FrameHeaders(0x81)
BINARY_HEADERS = FrameHeaders(0x82)


def framed(frames: Sequence[Frame]) -> list[bytes]:
    """`frames` as unmasked WebSocket frames (what a server sends), one after the other: text for
    a str, binary for bytes; as the buffers of one write (`writelines`: uvloop writes them with
    one writev, without joining them into a copy first)."""
    parts: list[bytes] = []
    append = parts.append
    text_headers = TEXT_HEADERS
    for frame in frames:
        if type(frame) is str:
            payload = frame.encode()
            append(text_headers[len(payload)])
        else:
            payload = frame   # type: ignore[assignment]
            append(BINARY_HEADERS[len(payload)])
        append(payload)
    return parts


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


class PicowsTransport(ListenerBase):  # type: ignore[valid-type, misc]
    """One picows connection (client or server side) as a `Transport`, and the listener picows
    calls with its frames.

    - `receive`: each whole message goes to `deliver` from picows' frame callback, in the read
      that completed it, with `more` when it is not the last frame of its read; messages that
      come before anyone receives wait (a few, then the socket is no longer read until someone
      does).
    - `write`, `send`: what waits goes out in one write on a server's connection (framed here),
      one masked frame after the other on a client's (framed by picows); `write` with a frame: a
      lone frame, framed by picows.
    - `close`: the closing handshake, bounded by CLOSE_TIMEOUT; with `abort`, the connection
      dropped."""

    __slots__ = ("server_side", "max_message_bytes", "on_open", "_loop", "_deliver", "_waiting", "_express",
                 "_reading_paused", "_fragments", "_message_bytes", "_resumed", "_receiving", "_failure",
                 "_disconnected", "_flush_round", "_close_timer", "_reader", "_reader_context")

    def __init__(self, *, server_side: bool, max_message_bytes: int) -> None:
        super().__init__()
        self.ws: WSTransport | None = None
        self.server_side = server_side
        self.max_message_bytes = max_message_bytes
        self.on_open: Callable[[PicowsTransport], None] | None = None   # a server's: start the handler
        self._loop = asyncio.get_running_loop()
        self._deliver: Deliver | None = None
        self._express: Express | None = None   # the reader's express lane, tried first
        self._fast_lane = None   # ... and before it, its compiled lane (the compiled base's)
        self._waiting: deque[Frame] = deque()   # messages read before anyone receives them
        self._reading_paused = False
        self._held_back = False   # `hold_reading(True)`: the other side's queue is full
        self._more = False
        self._message_type: WSMsgType | None = None   # of a fragmented message being read
        self._fragments: list[bytes] = []
        self._message_bytes = 0
        self._paused = False   # flow control: the socket's buffer is over its high-water mark
        self._resumed: asyncio.Future[None] | None = None
        self._receiving: asyncio.Future[None] | None = None
        self._failure: BaseException | None = None   # what `deliver` raised
        self._disconnected: asyncio.Future[TransportClosed] = self._loop.create_future()
        self._flush_round = flush_round(self._loop)   # where `write(queue, soon=True)` asks
        self._close_timer: asyncio.TimerHandle | None = None
        self._reader: asyncio.Task[Any] | None = None   # the task in `receive`
        self._reader_context: contextvars.Context | None = None

    # ---- picows' callbacks ---------------------------------------------------------------
    def on_ws_connected(self, ws: WSTransport) -> None:
        self.ws = ws
        if self.on_open is not None:
            self.on_open(self)

    def _on_frame(self, ws: WSTransport, frame: WSFrame, express_declined: bool = False) -> None:
        """picows' `on_ws_frame`: called by picows (on the Python base) or by the compiled base
        for a frame its lane did not take (`express_declined`: it would have gone to `deliver`
        and the lane has done what the express lane does before that, so it goes there now)."""
        self._more = not frame.last_in_buffer
        kind = frame.msg_type
        if kind is TEXT or kind is BINARY:
            if self._message_type is not None:
                self._fail(PROTOCOL_ERROR, "expected a continuation frame")
                return
            if frame.fin and not (frame.rsv1 or frame.rsv2 or frame.rsv3) and not ws.is_close_frame_sent:
                # a whole message in one frame, the per-frame path (picows has checked its size):
                # `_text` and `_hand_on` inline for the common case of a reader that receives; the
                # reader's express lane straight from here, without making its task the current one
                if kind is TEXT:
                    try:
                        message: Frame = frame.get_payload_as_utf8_text()
                    except UnicodeDecodeError as exc:
                        self._fail(INVALID_DATA, f"invalid UTF-8: {exc.reason} at position {exc.start}")
                        return
                else:
                    message = frame.get_payload_as_bytes()
                if self._held_back:   # back-pressure: what the read still holds waits here
                    self._waiting.append(message)
                    return
                express = None if express_declined else self._express   # set (and cleared) by `receive`
                if express is not None:
                    try:
                        if express(message, self._more):
                            return
                    except BaseException as exc:   # ends `receive` with it
                        self._delivery_failed(exc)
                        return
                deliver, reader = self._deliver, self._reader
                if deliver is None or reader is None:
                    self._hand_on(message)
                    return
                loop = self._loop
                try:
                    _enter_task(loop, reader)
                except RuntimeError:   # already inside a task (picows calls back from the event loop: never)
                    reader = None
                try:
                    self._reader_context.run(deliver, message, self._more)   # type: ignore[union-attr]
                except BaseException as exc:   # ends `receive` with it
                    self._delivery_failed(exc)
                finally:
                    if reader is not None:
                        _leave_task(loop, reader)
                return
        elif kind is CLOSE:
            self._close_received(ws, frame)
            return
        elif kind is not CONTINUATION:
            return   # a pong (picows answers pings itself)
        self._fragment(ws, frame, kind)

    if not COMPILED:
        on_ws_frame = _on_frame

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
        message = self._text(whole.decode) if is_text else whole
        if message is not None:
            self._hand_on(message)

    def _text(self, decode: Callable[[], str]) -> str | None:
        """A text message, decoded as UTF-8; None when it is not UTF-8 (the connection is then
        closed with 1007, as websockets closes it)."""
        try:
            return decode()
        except UnicodeDecodeError as exc:
            self._fail(INVALID_DATA, f"invalid UTF-8: {exc.reason} at position {exc.start}")
            return None

    def _hand_on(self, message: Frame) -> None:
        deliver = self._deliver
        if deliver is None or self._held_back:
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
            self._reader_context.run(deliver, message, self._more)   # type: ignore[union-attr]
        except BaseException as exc:   # ends `receive` with it
            self._delivery_failed(exc)
        finally:
            if reader is not None:
                _leave_task(loop, reader)

    def _delivery_failed(self, exc: BaseException) -> None:
        """What `deliver` (or `express`) raised ends `receive` with it: nothing more is read or
        delivered."""
        self._deliver = self._express = self._fast_lane = None
        self._failure = exc
        self._pause_reading()
        self._wake_receiver()

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
    async def receive(self, deliver: Deliver, express: Express | None = None) -> None:
        self._reader = asyncio.current_task()
        self._reader_context = contextvars.copy_context()
        self._deliver, self._express = deliver, express
        pipe = getattr(express, "pipe", None)
        if pipe is not None and pipe.raw and FrameLane is not None:
            self._fast_lane = FrameLane(pipe)
        try:
            self._release_waiting()   # what came before anyone received, in order; then the socket
            if not self._disconnected.done() and self._failure is None:
                self._receiving = self._loop.create_future()
                await self._receiving
            while self._waiting and self._failure is None:
                # closed while messages were held back: they are handed on first, in order
                if self._held_back:
                    self._receiving = self._loop.create_future()
                    await self._receiving   # until `hold_reading(False)`
                else:
                    self._release_waiting()
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure
            raise copied(self._disconnected.result())
        finally:
            self._deliver = self._express = self._fast_lane = None
            self._receiving = None
            self._reader = self._reader_context = None

    def hold_reading(self, held: bool) -> None:
        """Held: the socket is paused at once; the messages of the read in progress wait in
        `_waiting` (picows parses a whole read in one go, and one read can bring megabytes), so
        what is handed on stops here."""
        if held:
            self._held_back = True
            self._pause_reading()
            return
        self._held_back = False
        if self._waiting and self._deliver is not None:
            if self._disconnected.done():
                self._wake_receiver()   # `receive` hands them on before it says the connection closed
            else:
                self._loop.call_soon(self._release_waiting)   # not inside the caller's take from its queue
        else:
            self._resume_socket()

    def _release_waiting(self) -> None:
        """The messages waiting (read before `receive`, or held back by `hold_reading`), in order
        until held back again, then the socket. What `express` or `deliver` raises ends `receive`
        with it."""
        waiting = self._waiting
        while waiting and not self._held_back and self._deliver is not None:
            message = waiting.popleft()
            express = self._express
            if express is not None:
                try:
                    if express(message, bool(waiting)):
                        continue
                except BaseException as exc:   # ends `receive` with it
                    self._delivery_failed(exc)
                    return
            self._hand_on(message)
        if not waiting and not self._held_back:
            self._resume_socket()

    def _resume_socket(self) -> None:
        """Read the socket again: only while `receive` hands messages on (before it, the waiting
        messages keep it paused; after a failed delivery nothing more is read)."""
        ws = self.ws
        if self._reading_paused and self._deliver is not None and ws is not None and not ws.is_disconnected:
            self._reading_paused = False
            self._underlying().resume_reading()

    def _writable(self) -> bool:
        ws = self.ws
        return not self._paused and ws is not None and not ws.is_close_frame_sent and not ws.is_disconnected

    def _write(self, frames: Sequence[Frame]) -> None:
        ws = self.ws
        assert ws is not None
        if self.server_side and len(frames) > 1:
            ws.underlying_transport.writelines(framed(frames))
            return
        send = ws.send
        for frame in frames:
            send(TEXT if type(frame) is str else BINARY, frame)

    def write(self, queue: FrameQueue, frame: Frame | None = None, soon: bool = False) -> bool:
        # once per read on the per-frame path: `_writable` and `_write` inline, one frame (paced
        # audio) sent by picows, several framed here and written at once (a server's burst)
        ws = self.ws
        if frame is not None:   # a lone frame, unless something waits ahead of it
            if queue.frames or queue.waiter is None or self._paused or ws is None or ws.is_close_frame_sent \
                    or ws.is_disconnected:
                return False
            ws.send(TEXT if type(frame) is str else BINARY, frame)
            return True
        if soon:
            self._flush_round.add(self, queue)
            return True
        while not self._paused and ws is not None and not ws.is_close_frame_sent and not ws.is_disconnected:
            frames = queue.take_unsent(BATCH_BYTES)
            if len(frames) == 1:
                frame = frames[0]
                ws.send(TEXT if type(frame) is str else BINARY, frame)
            elif not frames:
                return True
            elif self.server_side:
                ws.underlying_transport.writelines(framed(frames))
            else:
                send = ws.send
                for frame in frames:
                    send(TEXT if type(frame) is str else BINARY, frame)
            if not queue.frames:
                return True
        if queue.frames:
            queue.wake()   # paused or closing: the writer task waits for the socket
        return True

    async def send(self, frames: Sequence[Frame]) -> None:
        while not self._writable():
            ws = self.ws
            if ws is None or ws.is_close_frame_sent or ws.is_disconnected:
                raise copied(self._disconnected.result()) if self._disconnected.done() else closed_by(ws)  # type: ignore[arg-type]
            self._resumed = self._loop.create_future()
            await self._resumed
        self._write(frames)

    async def close(self, code: int | None, reason: str = "", *, abort: bool = False) -> None:
        if abort:
            self._abort()
            return
        ws = self.ws
        if code is not None and ws is not None and not ws.is_disconnected:
            if not ws.is_close_frame_sent:
                ws.send_close(code, reason.encode())
            if self._close_timer is None:
                self._close_timer = self._loop.call_later(CLOSE_TIMEOUT, self._abort)
        await asyncio.shield(self._disconnected)

    def _abort(self) -> None:
        """Drop the connection at once, without a closing handshake."""
        ws = self.ws
        if ws is not None:
            ws.disconnect(graceful=False)

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
