"""In-memory sockets for the async edge (`relay.session.loop.SessionLoop` and what builds on it):
the `Transport` interface (relay/session/transport.py) without a network; and a relay recording
made through them (`record_session`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Sequence

import anyio
import pytest

from relay.dialects import OPENAI, OpenAIFamily
from relay.engine import EngineConfig, OpenAIEngine
from relay.mock.quirks import Quirks
from relay.recording.writer import RecordingWriter
from relay.session.loop import SessionLoop
from relay.session.transport import Deliver, Express, Frame, FrameQueue, TransportClosed
from tests.support.local_mock import LocalMock, model_call


def closed_by_peer(code: int = 1000, reason: str = "") -> TransportClosed:
    """What a transport raises when its peer closed the connection."""
    return TransportClosed(code, reason, received=True, initiated_here=False)


# The picows transport's compiled lane (relay.transports._picows_lane.FrameLane) when a test runs
# the in-memory peers' frames through it (tests/test_session_forwarding.py's `lane` fixture).
COMPILED_LANE: Any = None


def compiled_lane_or_skip() -> Any:
    """The compiled lane's class (relay/transports/_picows_lane.pyx); where it was not built the
    test skips, saying how to build it, except in CI, whose install builds it."""
    try:
        from relay.transports._picows_lane import FrameLane
    except ImportError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the picows transport's compiled lane is not built ({exc}): "
                    "`.venv/bin/pip install -e '.[dev]'` builds it, with a C compiler and the Python headers")
    return FrameLane


def compiled_lane_of(express: Express | None) -> Any:
    """The compiled lane a picows transport would build for `express`, when a test asks for it."""
    pipe = getattr(express, "pipe", None)
    return COMPILED_LANE(pipe) if COMPILED_LANE is not None and pipe is not None and pipe.raw else None


def hand_over(message: Frame, more: bool, deliver: Deliver, express: Express | None, lane: Any = None) -> None:
    """What a transport does with a message it read: the compiled lane first (as the picows
    transport offers it the payload's bytes), then the express lane, then `deliver`."""
    if lane is not None and type(message) is str:
        taken = lane.offer_bytes(message.encode(), more)
        if taken > 0:
            return
        if taken < 0:   # the lane would leave it to `deliver` and has spent the budget already
            deliver(message, more)
            return
    if express is None or not express(message, more):
        deliver(message, more)


class InMemoryTransport:
    """What a socket without a network does like any other: messages come from `recv` (which
    the subclass defines), each frame sent goes to `send_one`, and the frames queued for it are
    left to the loop's writer task (no synchronous write)."""

    aborted = False
    closed: tuple[int, str] | None = None   # the code and reason of the last `close`
    _ended: anyio.Event | None = None   # set by a close or an abort
    reading_paused: anyio.Event | None = None   # set by `hold_reading(False)`
    more = False   # what `receive` says of each message: another follows at once (a burst)

    async def recv(self) -> Frame:
        raise NotImplementedError

    async def send_one(self, message: Frame) -> None:
        raise NotImplementedError

    async def receive(self, deliver: Deliver, express: Express | None = None) -> None:
        lane = compiled_lane_of(express)
        while True:
            if self.reading_paused is not None:
                await self.reading_paused.wait()
            message = await self.recv()
            hand_over(message, self.more, deliver, express, lane)

    def hold_reading(self, held: bool) -> None:
        if held:
            if self.reading_paused is None:
                self.reading_paused = anyio.Event()
            return
        paused, self.reading_paused = self.reading_paused, None
        if paused is not None:
            paused.set()

    async def send(self, frames: Sequence[Frame]) -> None:
        for frame in frames:
            await self.send_one(frame)

    def write(self, queue: FrameQueue, frame: Frame | None = None, soon: bool = False) -> bool:
        """No synchronous write: a lone frame is refused (queued instead), and the writer task
        sends what is queued."""
        if frame is not None:
            return False
        queue.wake()
        return True

    async def close(self, code: int | None, reason: str = "", *, abort: bool = False) -> None:
        """A close (`closed`: its code and reason) or an abort (`aborted`) ends at
        once; `close(None)` waits for either."""
        if abort:
            self.aborted = True
        elif code is not None:
            self.closed = (code, reason)
        else:
            while self.closed is None and not self.aborted:
                await self._ending().wait()
            return
        self._ending().set()

    def _ending(self) -> anyio.Event:
        if self._ended is None:
            self._ended = anyio.Event()
        return self._ended


class MemoryPeer(InMemoryTransport):
    """One side of a socket: what the loop sends lands in `sent`; `feed` makes frames arrive."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[str | bytes | None](100)
        self.sent: list[str | bytes] = []
        self.got_frame = anyio.Event()

    def close_streams(self) -> None:
        self._send.close()
        self._receive.close()

    async def feed(self, frame: str | bytes | None) -> None:
        """A frame arrives; None closes the socket (1000)."""
        await self._send.send(frame)
        if frame is None:
            self._send.close()

    async def recv(self) -> str | bytes:
        frame = await self._receive.receive()
        if frame is None:
            self._receive.close()
            raise closed_by_peer(1000, "bye")
        return frame

    async def send_one(self, message: str | bytes) -> None:
        self.sent.append(message)
        self.got_frame.set()
        self.got_frame = anyio.Event()

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0) -> dict[str, Any]:
        """The first frame sent that satisfies `predicate`, waiting (on the sends) until there is one."""
        with anyio.fail_after(timeout):
            while True:
                for frame in self.sent:
                    event = json.loads(frame)
                    if predicate(event):
                        return event
                await self.got_frame.wait()


class MockPeer(InMemoryTransport):
    """The in-process mock upstream behind the `Transport` interface: what the relay sends is answered
    at once, and the test makes the server speak with `emit` (e.g. `emit(mock.respond(...))`)."""

    def __init__(self, mock: LocalMock) -> None:
        self.mock = mock
        self._send, self._receive = anyio.create_memory_object_stream[str | None](10_000)
        self.frames: list[dict[str, Any]] = []
        """Every frame the relay sent, parsed."""
        self._changed = anyio.Event()

    def emit(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            try:
                self._send.send_nowait(json.dumps(event))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # hung up: the server's answers go nowhere, as on a closed socket

    def hang_up(self) -> None:
        self._send.send_nowait(None)
        self._send.close()

    async def recv(self) -> str:
        frame = await self._receive.receive()
        if frame is None:
            self._receive.close()
            raise closed_by_peer(1000, "done")
        return frame

    async def send_one(self, message: str | bytes) -> None:
        self.frames.append(json.loads(message))
        self.emit(self.mock.receive(message))
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_until(self, predicate: Callable[[MockPeer], bool], timeout: float = 5.0) -> None:
        """Wait (on the relay's own sends, not a clock) until predicate(self) holds."""
        with anyio.fail_after(timeout):
            while not predicate(self):
                await self._changed.wait()


async def record_session(directory: Path, tools, *, mode: str = "sidecar", creates: int = 1,
                         dialect: OpenAIFamily = OPENAI, quirks: Quirks | None = None) -> Path:
    """A session through SessionLoop, on an upstream of `dialect` (with its provider's quirks unless
    others are given): parallel calls and a handler error, recorded."""
    mock = LocalMock(dialect, quirks=quirks)
    peer = MockPeer(mock)
    engine = OpenAIEngine(tools, dialect=dialect, config=EngineConfig(mode=mode, declare_tools=False), id_prefix="rec1")
    writer = RecordingWriter(directory, session_id="sess_test", dialect=dialect.name, upstream="ws://127.0.0.1:1/v1",
                             tools=[t.__relay_tool__.name for t in tools], mode=mode,
                             extra_header=engine.recording_header())
    loop = SessionLoop(engine, upstream=peer, recorder=writer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        peer.emit(mock.connect() + mock.user_turn("weather in Paris and Rome, and my order?") +
                  mock.respond([model_call("get_weather", '{"city":"Paris"}'),
                                model_call("get_weather", '{"city":"Rome"}'),
                                model_call("lookup_order", '{"order_id":"missing"}')]))
        await peer.wait_until(lambda p: mock.active is None and not engine.ledger.unanswered() and sum(
            1 for f in p.frames if f["type"] == "response.create") == creates and len(mock.responses) == 1 + creates)
        peer.hang_up()
    writer.close("test done")
    return writer.path


class MarkSeen:
    """A `FrameQueue`'s watcher wrapped (the session's back-pressure): `event` is set, and `size`
    and `socket_buffer` (of `transport`, an asyncio transport, when given) taken, when the queue
    first passes its mark; the wrapped watcher is then told as before."""

    def __init__(self, queue: FrameQueue, transport: Any = None) -> None:
        self.queue, self.transport, self.wrapped = queue, transport, queue.watcher
        self.event = anyio.Event()
        self.size = self.socket_buffer = 0
        queue.watcher = self
        if queue.full:   # passed it already
            self.size = queue.size
            self.event.set()

    def queue_full(self, queue: FrameQueue) -> None:
        if not self.event.is_set():
            self.size = queue.size
            self.socket_buffer = self.transport.get_write_buffer_size() if self.transport is not None else 0
            self.event.set()
        if self.wrapped is not None:
            self.wrapped.queue_full(queue)

    def queue_drained(self, queue: FrameQueue) -> None:
        if self.wrapped is not None:
            self.wrapped.queue_drained(queue)
