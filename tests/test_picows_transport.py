"""The picows transport's own code (relay/transports/picows.py and picows_connection.py), on real
sockets on 127.0.0.1: what it adds to picows (messages reassembled and checked, the closing
handshake, batched writes, the request-head reader in front of picows, the client's handshake
checks) and how `--transport` chooses it. The session-level behaviour on picows is the integration suite's, run again with
RELAY_TEST_TRANSPORT=picows (.ci/run)."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("picows")

import relay.transports
import relay.transports.picows as picows_transport
import relay.transports.picows_connection as picows_connection
from relay.errors import ConfigError
from relay.session.http import Answer, Request
from relay.session.transport import FrameQueue, HandshakeFailed, InvalidURL, Transport, TransportClosed
from relay.transports import backend_named
from relay.transports.picows import BACKEND
from relay.transports.picows_connection import PicowsTransport, framed
from tests.support.clients import TIMEOUT, raw_http

LOG = logging.getLogger("relay.websocket.test")
Handler = Callable[[Transport, Request], Awaitable[None]]


@asynccontextmanager
async def server(handler: Handler, *, decide: Callable[[Request], Answer | None] = lambda request: None,
                 max_frame_bytes: int = 1 << 20,
                 subprotocol: Callable[[Any], str | None] = lambda offered: "realtime" if "realtime" in offered else None,
                 ) -> AsyncIterator[int]:
    """A picows listener on a free port running `handler` for each connection; yields the port."""
    listener = await BACKEND.serve(handler, "127.0.0.1", 0, decide=decide, subprotocol=subprotocol,
                                   max_frame_bytes=max_frame_bytes, server_header="relay/test", logger=LOG)
    try:
        yield listener.address[1]
    finally:
        listener.close()
        await asyncio.wait_for(listener.wait_closed(), TIMEOUT)


async def collect(transport: Transport, messages: list[str | bytes]) -> TransportClosed:
    """Receive into `messages` until the connection closes; how it closed."""
    return await collect_with(transport, messages.append)


async def collect_with(transport: Transport, take: Callable[[str | bytes], None]) -> TransportClosed:
    """Hand each message to `take` until the connection closes; how it closed."""
    with pytest.raises(TransportClosed) as closed:
        await transport.receive(lambda message, more: take(message))
    return closed.value


class RawClient:
    """A WebSocket client writing frames by hand (masked with a zero key), for what no library
    sends: fragments out of order, reserved bits, bad UTF-8 split over fragments."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, path: str = "/", *, extra: str = "") -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write((f"GET {path} HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n").encode())
        async with asyncio.timeout(TIMEOUT):
            head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 "), head
        return cls(reader, writer)

    def send(self, opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0) -> None:
        first = (0x80 if fin else 0) | rsv | opcode
        size = len(payload)
        header = bytes((first, 0x80 | size)) if size < 126 else struct.pack("!BBH", first, 0x80 | 126, size)
        self.writer.write(header + b"\0\0\0\0" + payload)   # a zero mask leaves the payload as it is

    async def close_code(self) -> int:
        """The code of the close frame the server sends (frames before it are skipped)."""
        async with asyncio.timeout(TIMEOUT):
            while True:
                first, second = await self.reader.readexactly(2)
                size = second & 0x7F
                if size == 126:
                    size = struct.unpack("!H", await self.reader.readexactly(2))[0]
                elif size == 127:
                    size = struct.unpack("!Q", await self.reader.readexactly(8))[0]
                payload = await self.reader.readexactly(size)
                if first & 0x0F == 0x8:
                    return int(struct.unpack("!H", payload[:2])[0])


async def echo(transport: Transport, request: Request) -> None:
    """Each message back, through a FrameQueue as the session loop writes."""
    queue = FrameQueue(1 << 24)
    queue.waiter = asyncio.get_running_loop().create_future()   # the writer task sleeps: `write` writes

    def deliver(message: str | bytes, more: bool) -> None:
        queue.put(message, wake=False)
        transport.write(queue, None, more)   # at the loop's next turn while more of the read follows

    try:
        await transport.receive(deliver)
    except TransportClosed:
        pass


# ---- messages --------------------------------------------------------------------------------

async def test_fragments_are_handed_on_as_one_message_with_text_decoded_once_whole() -> None:
    received: list[str | bytes] = []
    ended: asyncio.Future[TransportClosed] = asyncio.get_running_loop().create_future()

    async def handler(transport: Transport, request: Request) -> None:
        ended.set_result(await collect(transport, received))

    async with server(handler) as port:
        client = await RawClient.open(port)
        word = "é".encode()   # split between two fragments
        client.send(0x1, b"caf" + word[:1], fin=False)
        client.send(0x9, b"ping between fragments")
        client.send(0x0, word[1:] + b"!", fin=True)
        client.send(0x2, b"\x00\x01", fin=False)
        client.send(0x0, b"\x02", fin=True)
        client.send(0x8, struct.pack("!H", 4000) + b"bye")
        closed = await asyncio.wait_for(ended, TIMEOUT)
        assert await client.close_code() == 4000   # the close is answered with its own code
    assert received == ["café!", b"\x00\x01\x02"]
    assert (closed.code, closed.reason, closed.received, closed.initiated_here) == (4000, "bye", True, False)


@pytest.mark.parametrize("frames, code", [
    ([(0x0, b"orphan", True, 0)], 1002),
    ([(0x1, b"first", False, 0), (0x1, b"second", True, 0)], 1002),
    ([(0x1, b"reserved", True, 0x40)], 1002),
    ([(0x1, b"\xc3", False, 0), (0x0, b"(", True, 0)], 1007),
    ([(0x1, b"\xff", True, 0)], 1007),
    ([(0x2, b"x" * 600, False, 0), (0x0, b"x" * 600, True, 0)], 1009),
    ([(0x2, b"x" * 1025, True, 0)], 1009),
], ids=["orphan continuation", "data frame inside a message", "reserved bit", "bad UTF-8 across fragments",
        "bad UTF-8", "message over the limit in fragments", "frame over the limit"])
async def test_a_broken_message_closes_with_the_code_websockets_sends(
        frames: list[tuple[int, bytes, bool, int]], code: int) -> None:
    received: list[str | bytes] = []
    first = asyncio.Event()
    ended: asyncio.Future[TransportClosed] = asyncio.get_running_loop().create_future()

    def take(message: str | bytes) -> None:
        received.append(message)
        first.set()

    async def handler(transport: Transport, request: Request) -> None:
        ended.set_result(await collect_with(transport, take))

    async with server(handler, max_frame_bytes=1024) as port:
        client = await RawClient.open(port)
        client.send(0x1, b"before")
        # read first: picows drops the frame before one it refuses when both come in one read
        await asyncio.wait_for(first.wait(), TIMEOUT)
        for opcode, payload, fin, rsv in frames:
            client.send(opcode, payload, fin=fin, rsv=rsv)
        assert await client.close_code() == code
        closed = await asyncio.wait_for(ended, TIMEOUT)
    assert received == ["before"]
    assert (closed.code, closed.initiated_here) == (code, True)


async def test_messages_read_before_anyone_receives_wait_and_then_the_socket_is_not_read() -> None:
    waiting: asyncio.Future[PicowsTransport] = asyncio.get_running_loop().create_future()

    async def handler(transport: Transport, request: Request) -> None:
        waiting.set_result(transport)   # type: ignore[arg-type]
        await transport.close(None)

    async with server(handler) as port:
        client = await RawClient.open(port)
        count = picows_connection.MAX_WAITING_MESSAGES + 5
        for index in range(count):
            client.send(0x1, str(index).encode())
        await client.writer.drain()
        transport = await asyncio.wait_for(waiting, TIMEOUT)
        async with asyncio.timeout(TIMEOUT):
            while len(transport._waiting) < picows_connection.MAX_WAITING_MESSAGES:
                await asyncio.sleep(0)
        assert transport._reading_paused
        received: list[str | bytes] = []

        def deliver(message: str | bytes, more: bool) -> None:
            received.append(message)
            if len(received) == count:
                raise LookupError("enough")

        with pytest.raises(LookupError):   # what `deliver` raises ends `receive` with it
            await asyncio.wait_for(transport.receive(deliver), TIMEOUT)
        assert received == [str(index) for index in range(count)]
        client.writer.close()


# ---- writes --------------------------------------------------------------------------------------

def test_frames_are_framed_as_a_server_sends_them() -> None:
    assert b"".join(framed(["hi", b"\x00"])) == b"\x81\x02hi\x82\x01\x00"
    assert b"".join(framed(["x" * 200]))[:4] == b"\x81\x7e\x00\xc8"
    assert b"".join(framed([b"y" * 70_000]))[:10] == b"\x82\x7f" + struct.pack("!Q", 70_000)


def _header(first_byte: int, size: int) -> bytes:
    """A server frame's header as RFC 6455 spells it (section 5.2), packed here independently."""
    if size <= 125:
        return struct.pack("!BB", first_byte, size)
    if size <= 0xFFFF:
        return struct.pack("!BBH", first_byte, 126, size)
    return struct.pack("!BBQ", first_byte, 127, size)


@given(st.lists(st.one_of(st.integers(0, 70_000).map(lambda size: "t" * size),
                          st.integers(0, 70_000).map(lambda size: b"b" * size)), max_size=4))
@settings(max_examples=60, deadline=None)
def test_every_size_gets_its_header_whether_looked_up_or_packed(frames: list[str | bytes]) -> None:
    expected = b"".join((_header(0x81, len(frame)) + frame.encode()) if isinstance(frame, str)
                        else (_header(0x82, len(frame)) + frame) for frame in frames)
    assert b"".join(framed(frames)) == expected
    assert b"".join(framed(frames)) == expected   # the second time from the table


def test_the_header_table_stops_growing_at_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    headers = picows_connection.FrameHeaders(0x81)
    monkeypatch.setattr(picows_connection, "TEXT_HEADERS", headers)
    for size in range(picows_connection.HEADERS_KEPT + 50):
        assert b"".join(framed(["z" * size]))[:-size or None] == _header(0x81, size)
    assert len(headers) == picows_connection.HEADERS_KEPT   # the rest were packed and not kept


async def test_a_batch_toward_a_client_is_framed_as_one_write_and_arrives_intact(
        monkeypatch: pytest.MonkeyPatch) -> None:
    frames: list[str | bytes] = ['{"type":"a"}', b"\x00\x01binary", "é ünïcode ✓", "x" * 70_000, "last"]
    writes: list[int] = []   # one socket write per framed buffer (uvloop's transports cannot be wrapped)

    def counted(batch: list[str | bytes]) -> list[bytes]:
        writes.append(len(batch))
        return framed(batch)

    monkeypatch.setattr(picows_connection, "framed", counted)

    async def handler(transport: Transport, request: Request) -> None:
        await transport.send(frames)
        await transport.close(None)

    from websockets.asyncio.client import connect

    async with server(handler) as port, connect(f"ws://127.0.0.1:{port}/", max_size=None) as client:
        received = [await asyncio.wait_for(client.recv(), TIMEOUT) for _ in frames]
    assert received == frames
    assert writes == [len(frames)]


async def test_a_paused_socket_leaves_the_frames_to_the_writer_task_and_a_closed_one_raises() -> None:
    async def check(transport: Transport, request: Request) -> None:
        queue = FrameQueue(1 << 20)
        queue.waiter = asyncio.get_running_loop().create_future()
        transport.pause_writing()   # type: ignore[attr-defined]  (what the socket calls over its high-water mark)
        queue.put("while paused", wake=False)
        transport.write(queue)
        assert len(queue) == 1 and not queue.writer_idle   # woken, not written
        sending = asyncio.ensure_future(transport.send(queue.take_batch()))
        await asyncio.sleep(0)
        assert not sending.done()
        transport.resume_writing()   # type: ignore[attr-defined]
        await asyncio.wait_for(sending, TIMEOUT)
        await transport.close(1000, "done")
        with pytest.raises(TransportClosed):
            await transport.send(["too late"])

    from websockets.asyncio.client import connect

    async with server(check) as port, connect(f"ws://127.0.0.1:{port}/") as client:
        assert await asyncio.wait_for(client.recv(), TIMEOUT) == "while paused"
        await asyncio.wait_for(client.wait_closed(), TIMEOUT)
        assert client.close_code == 1000


async def test_a_lone_frame_is_written_at_once_and_refused_while_paused_or_closing_or_behind_others() -> None:
    async def check(transport: Transport, request: Request) -> None:
        queue = FrameQueue(1 << 20)
        queue.waiter = asyncio.get_running_loop().create_future()   # the writer task sleeps
        assert transport.write(queue, "first")
        transport.pause_writing()   # type: ignore[attr-defined]  (what the socket calls over its high-water mark)
        assert not transport.write(queue, "while paused")
        transport.resume_writing()   # type: ignore[attr-defined]
        queue.put("queued", wake=False)
        assert not transport.write(queue, "behind a queued one")   # order: it queues behind
        queue.take_batch()
        assert transport.write(queue, b"\x00binary")
        await transport.close(1000, "done")
        assert not transport.write(queue, "too late")

    from websockets.asyncio.client import connect

    async with server(check) as port, connect(f"ws://127.0.0.1:{port}/") as client:
        assert [await asyncio.wait_for(client.recv(), TIMEOUT) for _ in range(2)] == ["first", b"\x00binary"]
        await asyncio.wait_for(client.wait_closed(), TIMEOUT)
        assert client.close_code == 1000


async def test_holding_reading_holds_back_the_rest_of_a_read_until_released_in_order_even_past_a_close() -> None:
    burst = [f"message {n}" for n in range(6)]
    received: list[str | bytes] = []
    resuming: list[asyncio.Task[None]] = []
    at_pause: list[list[str | bytes]] = []
    everything: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def handler(transport: Transport, request: Request) -> None:
        loop = asyncio.get_running_loop()

        async def resume() -> None:
            await transport.close(None)   # the close is in: it is reported only after the rest
            at_pause.append(list(received))
            transport.hold_reading(False)

        def take(message: str | bytes) -> None:
            received.append(message)
            if len(received) == 2:   # the other side's queue is full, say
                transport.hold_reading(True)
                resuming.append(loop.create_task(resume()))
            if len(received) == len(burst):
                everything.set_result(None)

        closed.set_result(await collect_with(transport, take))

    closed: asyncio.Future[TransportClosed] = asyncio.get_running_loop().create_future()
    async with server(handler) as port:
        client = await RawClient.open(port)
        for message in burst:   # written together: the server reads them in one go ...
            client.send(0x1, message.encode())
        client.send(0x8, struct.pack("!H", 1000))   # ... and the close right behind them
        await asyncio.wait_for(everything, TIMEOUT)
        code = await asyncio.wait_for(closed, TIMEOUT)
        client.writer.close()
    assert at_pause == [burst[:2]]
    assert received == burst   # every message came before the close was reported
    assert code.code == 1000 and code.received


async def test_a_close_the_peer_never_answers_drops_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(picows_connection, "CLOSE_TIMEOUT", 0.05)
    closed: asyncio.Future[TransportClosed] = asyncio.get_running_loop().create_future()

    async def handler(transport: Transport, request: Request) -> None:
        await transport.close(1001, "going")
        with pytest.raises(TransportClosed) as ended:
            await transport.receive(lambda message, more: None)
        closed.set_result(ended.value)

    async with server(handler) as port:
        client = await RawClient.open(port)   # reads nothing, answers nothing
        ended = await asyncio.wait_for(closed, TIMEOUT)
        client.writer.close()
    assert (ended.code, ended.received, ended.initiated_here) == (1001, False, True)


# ---- the port --------------------------------------------------------------------------------

async def test_the_rules_see_every_request_and_their_answers_go_out_as_written() -> None:
    seen: list[Request] = []

    def decide(request: Request) -> Answer | None:
        seen.append(request)
        if request.path == "/healthz":
            answer = Answer(200, (("Content-Type", "application/json"),), b'{"status": "ok"}')
            return answer.for_head() if request.method == "HEAD" else answer
        return Answer.error(__import__("http").HTTPStatus.METHOD_NOT_ALLOWED, "no", Allow="GET")

    async with server(echo, decide=decide) as port:
        head = b"HEAD /healthz HTTP/1.0\r\n\r\n"
        status, headers, body = await raw_http(port, head[:3], head[3:])
        assert (status, headers["content-length"], body) == (200, "16", b"")
        status, headers, body = await raw_http(port, b"OPTIONS / HTTP/1.0\r\n\r\n")
        assert (status, headers["allow"], headers["server"], headers["connection"]) == (405, "GET", "relay/test", "close")
    assert [(r.method, r.version, r.target) for r in seen] == [("HEAD", "HTTP/1.0", "/healthz"),
                                                              ("OPTIONS", "HTTP/1.0", "/")]


async def test_a_websocket_opens_with_a_browsers_connection_header_and_a_frame_in_the_heads_segment() -> None:
    async with server(echo) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        key = base64.b64encode(os.urandom(16)).decode()
        head = (f"GET /feed HTTP/1.1\r\nHost: relay\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Protocol: other, realtime\r\n\r\n").encode()
        writer.write(head[:20])
        await writer.drain()
        writer.write(head[20:] + b"\x81\x84\0\0\0\0ping")   # the end of the head and a frame in one segment
        async with asyncio.timeout(TIMEOUT):
            answer = await reader.readuntil(b"\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 101 ") and b"Sec-WebSocket-Protocol: realtime" in answer
            assert await reader.readexactly(6) == b"\x81\x04ping"
        writer.close()


async def test_a_probe_that_stalls_after_the_answer_or_never_finishes_its_head_is_not_an_error(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(picows_transport, "OPEN_TIMEOUT", 0.05)
    caplog.set_level(logging.DEBUG, "relay")
    async with server(echo, decide=lambda request: Answer(200, (), b"ok")) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /healthz HTTP/1.1\r\n\r\n")
        async with asyncio.timeout(TIMEOUT):
            assert (await reader.read()).startswith(b"HTTP/1.1 200 ")   # the answer, then the relay's EOF
        slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", port)
        slow_writer.write(b"GET /healthz HT")
        async with asyncio.timeout(TIMEOUT):
            assert await slow_reader.read() == b""   # dropped after OPEN_TIMEOUT
        writer.close()
        slow_writer.close()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any(r.getMessage().startswith("no request head within") for r in caplog.records)


# ---- the relay's connections to the provider -----------------------------------------------------

async def test_connect_refuses_what_websockets_refuses() -> None:
    refuse = lambda request: Answer(401, (), b"no") if request.path == "/refused" else None   # noqa: E731
    options: dict[str, Any] = {"max_frame_bytes": 1024, "open_timeout": TIMEOUT, "user_agent": "relay/test",
                               "logger": LOG}
    async with server(echo, decide=refuse) as port:
        with pytest.raises(HandshakeFailed) as refused:
            await BACKEND.connect(f"ws://127.0.0.1:{port}/refused", headers={}, **options)
        assert (refused.value.status, refused.value.phrase) == (401, "Unauthorized")
        async with server(echo, subprotocol=lambda offered: "realtime") as eager:   # chooses what was not offered
            with pytest.raises(HandshakeFailed, match="not offered"):
                await BACKEND.connect(f"ws://127.0.0.1:{eager}/", headers={"Sec-WebSocket-Protocol": "other"},
                                      **options)
        upstream = await BACKEND.connect(f"ws://127.0.0.1:{port}/", headers={"Sec-WebSocket-Protocol": "realtime"},
                                         **options)
        await upstream.send(["one", b"two"])
        received: list[str | bytes] = []
        both = asyncio.Event()

        def take(message: str | bytes) -> None:
            received.append(message)
            if len(received) == 2:
                both.set()

        reading = asyncio.ensure_future(collect_with(upstream, take))
        await asyncio.wait_for(both.wait(), TIMEOUT)
        await upstream.close(1000, "")
        assert (await asyncio.wait_for(reading, TIMEOUT)).code == 1000
        assert received == ["one", b"two"]
    with pytest.raises(InvalidURL):
        await BACKEND.connect("http://127.0.0.1:1/", headers={}, **options)
    # a server that accepts and never answers; it keeps its writers (Python 3.13 closes the
    # connection of a StreamWriter it collects)
    held: list[asyncio.StreamWriter] = []
    silent = await asyncio.start_server(lambda reader, writer: held.append(writer), "127.0.0.1", 0)
    async with silent:
        port = silent.sockets[0].getsockname()[1]
        with pytest.raises(TimeoutError):
            await BACKEND.connect(f"ws://127.0.0.1:{port}/", headers={}, **{**options, "open_timeout": 0.1})
        for writer in held:   # the server's close waits for its connections (Python 3.12+)
            writer.close()


# ---- choosing it -------------------------------------------------------------------------------

def test_auto_is_picows_when_installed_and_a_missing_picows_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay.transports, "AUTO_ORDER", ("picows", "websockets"))
    assert backend_named("auto").name == "picows"
    assert backend_named("websockets").name == "websockets"
    monkeypatch.setattr(relay.transports, "PICOWS_SERIES", "9.9.")   # another series than the one installed
    assert backend_named("auto").name == "websockets"
    with pytest.raises(ConfigError, match="pip install 'realtime-relay\\[fast\\]'"):
        backend_named("picows")
    with pytest.raises(ConfigError, match="--transport takes"):
        backend_named("libwebsockets")
