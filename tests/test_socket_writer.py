"""How frames reach a websockets connection (relay/transports/websockets.py): frames queued while
the writer task sleeps are written by a callback once the producing code yields, in one socket
write, unless the socket is paused or closed (then the writer task is woken); the writer task
sends what waits (bounded in bytes) in one write too; frames stay intact, in order, text as text
and binary as binary; a closed connection raises TransportClosed."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import weakref

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from relay.session.transport import FlushRound, FrameQueue, TransportClosed, flush_round
from relay.transports.websockets import WebsocketsTransport
from tests.support.clients import TIMEOUT
from tests.support.processes import TEST_LOOP



async def test_a_batch_takes_the_oldest_frames_that_fit() -> None:
    queue = FrameQueue(1000)
    for frame in ("aaaa", b"bbbb", "cccc", "dd"):
        queue.put(frame)
    assert await queue.get_batch(9) == ["aaaa", b"bbbb"]
    assert queue.size == 6 and len(queue) == 2
    assert await queue.get_batch(100) == ["cccc", "dd"]
    assert queue.size == 0


async def test_a_frame_bigger_than_a_batch_goes_alone() -> None:
    queue = FrameQueue(1000)
    queue.put("x" * 50)
    queue.put("y")
    assert await queue.get_batch(10) == ["x" * 50]
    assert await queue.get_batch(10) == ["y"]


async def test_frames_put_back_come_first_in_their_order() -> None:
    queue = FrameQueue(1000)
    queue.put("later")
    queue.push_back_front(["first", "second"])
    assert queue.size == len("firstsecondlater")
    assert await queue.get_batch(1000) == ["first", "second", "later"]


async def test_a_waiting_writer_is_idle_until_the_first_frame_wakes_it() -> None:
    queue = FrameQueue(1000)
    got: list[list[str | bytes]] = []
    assert not queue.writer_idle   # no writer has asked yet

    async def writer() -> None:
        got.append(await queue.get_batch(1000))

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as group:
            group.start_soon(writer)
            await anyio.wait_all_tasks_blocked()
            assert queue.writer_idle
            queue.put("hello")
            assert not queue.writer_idle   # woken: the frame is on its way
    assert got == [["hello"]]


async def test_a_flush_takes_nothing_while_the_writer_is_awake() -> None:
    queue = FrameQueue(1000)
    queue.put("first")
    assert queue.take_unsent() == []   # no writer asleep: one that is awake sends it itself
    got: list[list[str | bytes]] = []

    async def writer() -> None:
        got.append(await queue.get_batch(1000))
        got.append(await queue.get_batch(1000))

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as group:
            group.start_soon(writer)
            await anyio.wait_all_tasks_blocked()   # it took "first" and sleeps again
            queue.put("second", wake=False)
            queue.put("third", wake=False)
            assert queue.take_unsent() == ["second", "third"] and queue.size == 0
            queue.put("last")
    assert got == [["first"], ["last"]]


async def test_a_flush_takes_a_bounded_batch_oldest_first_and_leaves_the_rest() -> None:
    queue = FrameQueue(1000)
    got: list[list[str | bytes]] = []

    async def writer() -> None:
        got.append(await queue.get_batch(1000))

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as group:
            group.start_soon(writer)
            await anyio.wait_all_tasks_blocked()   # asleep: a flush takes what waits
            for frame in ("aaaa", b"bbbb", "cccc", "dd"):
                queue.put(frame, wake=False)
            assert queue.take_unsent(12) == ["aaaa", b"bbbb", "cccc"] and queue.size == 2
            assert queue.take_unsent(12) == ["dd"] and queue.size == 0
            queue.put("x" * 20, wake=False)
            assert queue.take_unsent(12) == ["x" * 20] and queue.size == 0   # too big: alone
            assert queue.take_unsent(12) == []
            queue.put("last")
    assert got == [["last"]]


class CallbacksHeld:
    """An event loop's `call_soon`, held: the test runs the callbacks when it chooses."""

    def __init__(self) -> None:
        self.callbacks: list[object] = []

    def call_soon(self, callback, *args):  # type: ignore[no-untyped-def]
        self.callbacks.append(callback)

    def run(self) -> None:
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback()   # type: ignore[operator]


class Flushed:
    def __init__(self, name: str, log: list[str], fails: bool = False) -> None:
        self.name, self.log, self.fails = name, log, fails

    def write(self, queue: FrameQueue, frame: str | bytes | None = None, soon: bool = False) -> bool:
        self.log.append(self.name)
        if self.fails:
            raise RuntimeError("broken transport")
        return True


def test_flushes_asked_for_in_one_turn_run_in_one_callback_in_their_order(
        caplog: pytest.LogCaptureFixture) -> None:
    loop = CallbacksHeld()
    flushes = FlushRound(loop)   # type: ignore[arg-type]
    done: list[str] = []
    queue = FrameQueue(1000)
    queue.put("waiting", wake=False)   # a flush is made only for a queue that still holds frames
    for name in ("first", "broken", "third"):
        flushes.add(Flushed(name, done, fails=name == "broken"), queue)
    assert len(loop.callbacks) == 1 and done == []   # asked for, not made yet
    with caplog.at_level(logging.ERROR, logger="relay.session"):
        loop.run()
    assert done == ["first", "broken", "third"]   # one that fails does not stop the others
    assert "a scheduled flush failed" in caplog.text and "broken transport" in caplog.text
    flushes.add(Flushed("next turn", done), queue)
    assert len(loop.callbacks) == 1   # a new turn, a new callback
    loop.run()
    assert done[-1] == "next turn"


def test_a_transport_asked_twice_in_a_turn_flushes_once_and_not_at_all_once_its_queue_is_empty() -> None:
    loop = CallbacksHeld()
    flushes = FlushRound(loop)   # type: ignore[arg-type]
    done: list[str] = []
    twice, emptied = Flushed("twice", done), Flushed("emptied", done)
    waiting, taken = FrameQueue(1000), FrameQueue(1000)
    waiting.put("frame", wake=False)
    taken.put("frame", wake=False)
    flushes.add(twice, waiting)
    flushes.add(emptied, taken)
    flushes.add(twice, waiting)
    taken.take_batch()   # the write after the burst's last frame took it before the turn came
    loop.run()
    assert done == ["twice"]


def test_each_loop_has_one_flush_round_that_does_not_keep_it_alive() -> None:
    first, second = CallbacksHeld(), CallbacksHeld()
    assert flush_round(first) is flush_round(first)   # type: ignore[arg-type]
    assert flush_round(first) is not flush_round(second)   # type: ignore[arg-type]
    kept, gone = flush_round(first), weakref.ref(first)   # type: ignore[arg-type]
    del first
    gc.collect()
    assert gone() is None   # neither the round nor the table of rounds kept the loop
    kept.add(Flushed("late", []), FrameQueue(10))   # its loop is gone: nothing to schedule on, no error


async def _with_echo_server(check) -> list[str | bytes]:  # type: ignore[no-untyped-def]
    """Run `check(connection)` on a client connected to a loopback server; return what the
    server received before the client closed."""
    received: list[str | bytes] = []
    done = anyio.Event()

    async def handler(connection: ServerConnection) -> None:
        try:
            async for message in connection:
                received.append(message)
        finally:
            done.set()

    with anyio.fail_after(TIMEOUT):
        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{port}", compression=None) as client:
                await check(client)
            await done.wait()
    return received


async def test_a_lone_frame_is_written_at_once_and_refused_while_paused_or_closed_or_behind_others() -> None:
    async def check(client) -> None:  # type: ignore[no-untyped-def]
        transport = WebsocketsTransport(client)
        counted = _counting_writes(client)
        queue = FrameQueue(1 << 20)
        queue.waiter = asyncio.get_running_loop().create_future()   # the writer task sleeps
        assert transport.write(queue, "first")
        assert counted == [len("first") + 6]   # written in the call: one masked frame
        client.pause_writing()   # what asyncio calls over the socket's high-water mark
        assert not transport.write(queue, "while paused")
        client.resume_writing()
        queue.put("queued", wake=False)
        assert not transport.write(queue, "behind a queued one")   # order: it queues behind
        queue.take_batch()
        assert transport.write(queue, b"\x00binary")
        await client.close()
        assert not transport.write(queue, "too late")

    assert await _with_echo_server(check) == ["first", b"\x00binary"]


class CountingTransport:
    """A connection's event-loop transport, recording the size of every write through it (in
    front of it: uvloop's transports take no new attributes)."""

    def __init__(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.transport = transport
        self.writes: list[int] = []

    def write(self, data: bytes) -> None:
        self.writes.append(len(data))
        self.transport.write(data)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.transport, name)


def _counting_writes(client) -> list[int]:  # type: ignore[no-untyped-def]
    """Record the size of every write to the client's transport."""
    counting = CountingTransport(client.transport)
    client.transport = counting
    return counting.writes


async def test_a_batch_is_one_socket_write_and_arrives_intact() -> None:
    frames: list[str | bytes] = ['{"type":"a"}', b"\x00\x01binary", "é ünïcode ✓", "x" * 70_000, "last"]
    writes: list[int] = []

    async def check(client) -> None:  # type: ignore[no-untyped-def]
        counted = _counting_writes(client)
        await WebsocketsTransport(client).send(frames)
        writes.extend(counted)

    received = await _with_echo_server(check)
    assert received == frames
    assert [type(message) for message in received] == [type(frame) for frame in frames]
    assert len(writes) == 1


class WriterTask:
    """The session loop's writer task for one queue: sleeps until woken, then sends what waits."""

    def __init__(self, client) -> None:  # type: ignore[no-untyped-def]
        self.queue = FrameQueue(10_000_000)
        self.writer = WebsocketsTransport(client)
        self.sent_by_task: list[str | bytes] = []

    async def run(self) -> None:
        while True:
            frames = await self.queue.get_batch(64 * 1024)
            await self.writer.send(frames)
            self.sent_by_task.extend(frames)

    def enqueue(self, frame: str | bytes) -> None:
        """What SessionLoop._enqueue does."""
        if self.queue.writer_idle:
            self.queue.put(frame, wake=False)
            self.writer.write(self.queue, soon=True)
        else:
            self.queue.put(frame)


async def test_frames_queued_while_the_code_runs_go_in_one_write_once_it_yields() -> None:
    async def check(client) -> None:  # type: ignore[no-untyped-def]
        writes = _counting_writes(client)
        task = WriterTask(client)
        async with anyio.create_task_group() as group:
            group.start_soon(task.run)
            await anyio.wait_all_tasks_blocked()
            for frame in ('{"type":"one"}', b"\x01\x02", '{"type":"three"}'):
                task.enqueue(frame)
            assert writes == []   # nothing is written while the producing code runs
            await anyio.wait_all_tasks_blocked()   # the loop runs the callback
            assert len(writes) == 1   # one write for the three
            assert task.queue.writer_idle and task.sent_by_task == []   # the task never woke
            group.cancel_scope.cancel()

    assert await _with_echo_server(check) == ['{"type":"one"}', b"\x01\x02", '{"type":"three"}']


async def test_a_paused_or_closed_socket_leaves_the_frames_to_the_writer_task() -> None:
    async def check(client) -> None:  # type: ignore[no-untyped-def]
        task = WriterTask(client)
        async with anyio.create_task_group() as group:
            group.start_soon(task.run)
            await anyio.wait_all_tasks_blocked()
            assert task.writer.writable()
            client.pause_writing()   # what the transport calls over its high-water mark
            assert not task.writer.writable()
            task.enqueue("while paused")
            await anyio.wait_all_tasks_blocked()
            # the callback woke the task instead of writing; the task waits in `send` for the socket
            assert not task.queue.writer_idle and task.sent_by_task == []
            client.resume_writing()
            await anyio.wait_all_tasks_blocked()
            assert task.sent_by_task == ["while paused"] and task.queue.writer_idle
            group.cancel_scope.cancel()
        await client.close()
        assert not task.writer.writable()

    assert await _with_echo_server(check) == ["while paused"]


async def test_a_batch_on_a_closed_connection_raises_connection_closed() -> None:
    async def check(client) -> None:  # type: ignore[no-untyped-def]
        await client.close()
        with pytest.raises(TransportClosed):
            await WebsocketsTransport(client).send(["too late"])

    assert await _with_echo_server(check) == []


async def test_frames_stay_in_order_through_a_session_whose_client_falls_behind() -> None:
    """A session over real sockets, its client reading nothing until the upstream has sent
    everything: the first frames are written by the callback, then the socket pauses and the
    writer task sends the rest as the client reads. The client gets every frame, once, in order."""
    from relay.engine import OpenAIEngine, EngineConfig
    from relay.session.loop import SessionLoop

    count, padding = 600, "A" * 8_000
    all_sent = anyio.Event()
    by_task: list[int] = []

    async def upstream_handler(connection: ServerConnection) -> None:
        for index in range(count):
            await connection.send(json.dumps({"type": "response.output_audio.delta", "item_id": f"item_{index}",
                                              "delta": padding}))
        all_sent.set()
        await connection.wait_closed()

    async def relay_handler(client: ServerConnection) -> None:
        async with connect(f"ws://127.0.0.1:{upstream_port}", compression=None) as upstream:
            engine = OpenAIEngine([], config=EngineConfig(mode="proxy", declare_tools=False))
            loop = SessionLoop(engine, upstream=WebsocketsTransport(upstream), client=WebsocketsTransport(client))
            writer = loop.client
            assert writer is not None
            send = writer.send

            async def counted_send(frames) -> None:  # type: ignore[no-untyped-def]
                by_task.append(len(frames))
                await send(frames)

            writer.send = counted_send  # type: ignore[method-assign]
            await loop.run()

    with anyio.fail_after(20):
        async with serve(upstream_handler, "127.0.0.1", 0, compression=None) as upstream_server, \
                serve(relay_handler, "127.0.0.1", 0, compression=None) as relay_server:
            upstream_port = upstream_server.sockets[0].getsockname()[1]
            relay_port = relay_server.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{relay_port}", compression=None, max_queue=1) as client:
                await all_sent.wait()
                received = [json.loads(await client.recv())["item_id"] for _ in range(count)]
    assert received == [f"item_{index}" for index in range(count)]
    # some went by the callback, the rest by the writer task while the socket was paused
    assert 0 < sum(by_task) < count, by_task


async def test_websockets_tells_whether_a_message_waits_to_be_read() -> None:
    async def check(client) -> None:  # type: ignore[no-untyped-def]
        transport = WebsocketsTransport(client)
        await client.send("go")
        delivered: list[tuple[str | bytes, bool]] = []

        def deliver(message: str | bytes, more: bool) -> None:
            delivered.append((message, more))
            if len(delivered) == 3:
                raise LookupError("all three")   # ends `receive`

        with pytest.raises(LookupError):
            await transport.receive(deliver)
        # the three came in one write: the rest wait, and `more` says so
        assert delivered == [("first", True), ("second", True), ("third", False)]

    async def handler(connection: ServerConnection) -> None:
        await connection.recv()
        await WebsocketsTransport(connection).send(["first", "second", "third"])
        await connection.wait_closed()

    with anyio.fail_after(TIMEOUT):
        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{port}", compression=None) as client:
                await check(client)


async def test_a_burst_read_in_one_go_is_relayed_in_fewer_writes_than_frames() -> None:
    """The upstream's frames arrive in one TCP write; the relay's reader takes them one by one
    without waiting and writes to the client once it has read the last of them."""
    from relay.engine import OpenAIEngine, EngineConfig
    from relay.session.loop import SessionLoop

    count = 40
    frames = [json.dumps({"type": "response.output_audio.delta", "item_id": f"item_{index}", "delta": "AAAA"})
              for index in range(count)]
    writes: list[int] = []

    async def upstream_handler(connection: ServerConnection) -> None:
        await connection.recv()   # the client is there: send the burst
        await WebsocketsTransport(connection).send(frames)
        await connection.wait_closed()

    async def relay_handler(client: ServerConnection) -> None:
        counted = _counting_writes(client)
        async with connect(f"ws://127.0.0.1:{upstream_port}", compression=None) as upstream:
            engine = OpenAIEngine([], config=EngineConfig(mode="proxy", declare_tools=False))
            loop = SessionLoop(engine, upstream=WebsocketsTransport(upstream), client=WebsocketsTransport(client))
            try:
                await loop.run()
            finally:
                writes.extend(counted)

    with anyio.fail_after(TIMEOUT):
        async with serve(upstream_handler, "127.0.0.1", 0, compression=None) as upstream_server, \
                serve(relay_handler, "127.0.0.1", 0, compression=None) as relay_server:
            upstream_port = upstream_server.sockets[0].getsockname()[1]
            relay_port = relay_server.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{relay_port}", compression=None) as client:
                await client.send(json.dumps({"type": "input_audio_buffer.clear"}))
                received = [await client.recv() for _ in range(count)]
    assert received == frames
    data_writes = writes[:-1]   # the last write is the close frame
    assert 1 <= len(data_writes) < count / 4, writes


async def test_the_session_reads_sockets_in_64_kib_chunks_and_bigger_frames_still_arrive_whole() -> None:
    from relay.engine import OpenAIEngine, EngineConfig
    from relay.session.loop import SessionLoop
    from relay.transports.websockets import READ_BYTES

    big = json.dumps({"type": "response.output_audio.delta", "item_id": "item_big", "delta": "B" * 300_000})
    read_sizes: dict[str, int] = {}

    async def upstream_handler(connection: ServerConnection) -> None:
        await connection.recv()
        await connection.send(big)
        await connection.wait_closed()

    async def relay_handler(client: ServerConnection) -> None:
        async with connect(f"ws://127.0.0.1:{upstream_port}", compression=None, max_size=2**20) as upstream:
            engine = OpenAIEngine([], config=EngineConfig(mode="proxy", declare_tools=False))
            loop = SessionLoop(engine, upstream=WebsocketsTransport(upstream), client=WebsocketsTransport(client))
            read_sizes.update(upstream=getattr(upstream.transport, "max_size", None),
                              client=getattr(client.transport, "max_size", None))
            await loop.run()

    with anyio.fail_after(TIMEOUT):
        async with serve(upstream_handler, "127.0.0.1", 0, compression=None) as upstream_server, \
                serve(relay_handler, "127.0.0.1", 0, compression=None, max_size=2**20) as relay_server:
            upstream_port = upstream_server.sockets[0].getsockname()[1]
            relay_port = relay_server.sockets[0].getsockname()[1]
            async with connect(f"ws://127.0.0.1:{relay_port}", compression=None, max_size=2**20) as client:
                await client.send(json.dumps({"type": "input_audio_buffer.clear"}))
                assert await client.recv() == big
    # asyncio's transports read 256 KiB at a time unless told; uvloop's have no such setting
    expected = None if TEST_LOOP == "uvloop" else READ_BYTES
    assert read_sizes == {"upstream": expected, "client": expected} and READ_BYTES == 64 * 1024
