"""The async edge with in-memory sockets: frames move, handlers run off the read path,
timeouts fire on the engine's deadline, closes propagate."""

from __future__ import annotations

import json
import threading

import anyio
import pytest
from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Close

from relay.engine import OpenAIEngine, EngineConfig
from relay.session import FrameQueue, QueueOverflow, SessionLoop
from relay.tools import tool
from tests.fakeserver import Call, FakeServer


class MemoryPeer:
    """One side of a socket: what the loop sends lands in `sent`; `feed` makes frames arrive."""

    def __init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[str | bytes | None](100)
        self.sent: list[str] = []
        self.closed: tuple[int, str] | None = None
        self.got_frame = anyio.Event()

    def close_streams(self) -> None:
        self._send.close()
        self._receive.close()

    async def feed(self, frame: str | None) -> None:
        await self._send.send(frame)
        if frame is None:
            self._send.close()

    async def recv(self) -> str | bytes:
        frame = await self._receive.receive()
        if frame is None:
            self._receive.close()
            raise ConnectionClosedOK(Close(1000, "bye"), None)
        return frame

    async def send(self, message: str | bytes) -> None:
        self.sent.append(message)
        self.got_frame.set()
        self.got_frame = anyio.Event()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)

    async def wait_for(self, predicate, timeout: float = 5.0) -> dict:
        with anyio.fail_after(timeout):
            while True:
                for frame in self.sent:
                    event = json.loads(frame)
                    if predicate(event):
                        return event
                await self.got_frame.wait()


@tool(timeout=0.2)
async def slow(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "done"


release = threading.Event()
waiting_started: list[anyio.Event] = []


@tool
async def waiting() -> str:
    waiting_started[-1].set()
    await anyio.sleep_forever()


@tool
def blocking() -> str:
    release.wait(5)
    return "unblocked"


async def run_session(tools, scenario, *, mode="sidecar"):
    server = FakeServer()
    upstream, client = MemoryPeer(), MemoryPeer()
    engine = OpenAIEngine(tools, config=EngineConfig(mode=mode, strict=True, declare_tools=False))
    loop = SessionLoop(engine, upstream=upstream, client=client if mode == "proxy" else None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        await loop.started.wait()
        await scenario(server, upstream, client, loop)
        await upstream.feed(None)
    upstream.close_streams()
    client.close_streams()
    return loop, upstream, client


async def test_a_handler_runs_off_the_read_path_and_its_timeout_fires() -> None:
    async def scenario(server, upstream, client, loop):
        for event in server.connect() + server.start_response([Call("slow", '{"seconds": 30}')]):
            await upstream.feed(json.dumps(event))
        output = await upstream.wait_for(lambda e: e["type"] == "conversation.item.create")
        assert json.loads(output["item"]["output"]) == {"error": "timed out after 0.2 s"}
        await upstream.wait_for(lambda e: e["type"] == "response.create")

    loop, upstream, _ = await run_session([slow], scenario)
    assert loop.end.by == "upstream"


async def test_a_blocking_sync_handler_does_not_stall_frames() -> None:
    release.clear()

    async def scenario(server, upstream, client, loop):
        for event in server.connect() + server.start_response([Call("blocking", "")]):
            await upstream.feed(json.dumps(event))
        # the handler blocks its thread; audio still flows to the client meanwhile
        await upstream.feed(json.dumps({"type": "response.output_audio.delta", "delta": "AAAA"}))
        audio = await client.wait_for(lambda e: e["type"] == "response.output_audio.delta")
        assert audio["delta"] == "AAAA"
        release.set()
        output = await upstream.wait_for(lambda e: e["type"] == "conversation.item.create")
        assert output["item"]["output"] == "unblocked"

    await run_session([blocking], scenario, mode="proxy")


async def test_client_close_closes_upstream_and_cancels_handlers() -> None:
    waiting_started.append(anyio.Event())

    async def scenario(server, upstream, client, loop):
        for event in server.connect() + server.start_response([Call("waiting", "")]):
            await upstream.feed(json.dumps(event))
        with anyio.fail_after(5):
            await waiting_started[-1].wait()
        assert loop._runner.running == 1
        await client.feed(None)
        with anyio.fail_after(2):
            await loop.ended.wait()

    loop, upstream, _ = await run_session([waiting], scenario, mode="proxy")
    assert loop.end.by == "client"
    assert upstream.closed == (1000, "bye")
    assert loop._runner.running == 0


def test_frame_queue_is_bounded_by_bytes() -> None:
    queue = FrameQueue(10)
    queue.put("12345")
    queue.put("12345")
    with pytest.raises(QueueOverflow):
        queue.put("x")
    assert queue.size == 10 and len(queue) == 2
