"""The async edge with in-memory sockets: frames move, handlers run off the read path,
timeouts fire on the engine's deadline, closes propagate, a round's frames are written before its
notices are told."""

from __future__ import annotations

import asyncio
import json
import threading

import anyio
import pytest

from relay.engine import OpenAIEngine, EngineConfig
from relay.session.loop import SessionLoop
from relay.session.transport import Frame, FrameQueue, QueueOverflow
from relay.tools import tool
from tests.support.clients import TIMEOUT
from tests.support.engine import DeadlineStuckInThePast
from tests.support.local_mock import LocalMock, model_call
from tests.support.peers import MemoryPeer



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
    mock = LocalMock()
    upstream, client = MemoryPeer(), MemoryPeer()
    engine = OpenAIEngine(tools, config=EngineConfig(mode=mode, strict=True, declare_tools=False))
    loop = SessionLoop(engine, upstream=upstream, client=client if mode == "proxy" else None)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        await loop.started.wait()
        await scenario(mock, upstream, client, loop)
        await upstream.feed(None)
    upstream.close_streams()
    client.close_streams()
    return loop, upstream, client


async def test_a_handler_runs_off_the_read_path_and_its_timeout_fires() -> None:
    async def scenario(mock, upstream, client, loop):
        for event in mock.connect() + mock.respond([model_call("slow", '{"seconds": 30}')]):
            await upstream.feed(json.dumps(event))
        output = await upstream.wait_for(lambda e: e["type"] == "conversation.item.create")
        assert json.loads(output["item"]["output"]) == {"error": "timed out after 0.2 s"}
        await upstream.wait_for(lambda e: e["type"] == "response.create")

    loop, upstream, _ = await run_session([slow], scenario)
    assert loop.end.by == "upstream"


async def test_a_blocking_sync_handler_does_not_stall_frames() -> None:
    release.clear()

    async def scenario(mock, upstream, client, loop):
        for event in mock.connect() + mock.respond([model_call("blocking", "")]):
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

    async def scenario(mock, upstream, client, loop):
        for event in mock.connect() + mock.respond([model_call("waiting", "")]):
            await upstream.feed(json.dumps(event))
        with anyio.fail_after(TIMEOUT):
            await waiting_started[-1].wait()
        assert loop._runner.running == 1
        await client.feed(None)
        with anyio.fail_after(TIMEOUT):
            await loop.ended.wait()

    loop, upstream, _ = await run_session([waiting], scenario, mode="proxy")
    assert loop.end.by == "client"
    assert upstream.closed == (1000, "bye")
    assert loop._runner.running == 0


async def test_a_deadline_a_tick_does_not_move_is_logged_and_ignored_not_ticked_in_a_loop(caplog) -> None:
    # without the guard the timer ticks without yielding as long as the deadline stays put (here
    # STUCK_FOR asks; with a real bug, forever: every session of the process frozen)
    upstream, client = MemoryPeer(), MemoryPeer()
    engine = DeadlineStuckInThePast([], config=EngineConfig(mode="proxy", strict=True, declare_tools=False))
    loop = SessionLoop(engine, upstream=upstream, client=client)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        await loop.started.wait()
        for event in LocalMock().connect():
            await upstream.feed(json.dumps(event))
        await upstream.feed(json.dumps({"type": "response.output_audio.delta", "delta": "AAAA"}))
        await client.wait_for(lambda e: e["type"] == "response.output_audio.delta")
        await client.feed(None)
        with anyio.fail_after(TIMEOUT):
            await loop.ended.wait()
    upstream.close_streams()
    client.close_streams()
    assert engine.ticks == 1
    assert [r.message for r in caplog.records if r.levelname == "ERROR"] == [
        "the engine kept a deadline its tick did not move; ignoring it"]


def test_frame_queue_is_bounded_by_bytes() -> None:
    queue = FrameQueue(10)
    queue.put("12345")
    queue.put("12345")
    with pytest.raises(QueueOverflow):
        queue.put("x")
    assert queue.size == 10 and len(queue) == 2


def test_a_frame_queue_says_when_it_fills_past_its_mark_and_when_it_drains_to_a_quarter() -> None:
    queue = FrameQueue(1000, high_water=400)
    events: list[str] = []

    class Watcher:
        def queue_full(self, full: FrameQueue) -> None:
            assert full is queue
            events.append("full")

        def queue_drained(self, drained: FrameQueue) -> None:
            assert drained is queue
            events.append("drained")

    queue.watcher = Watcher()
    for _ in range(3):
        queue.put("x" * 100)
    queue.hold("x" * 100)   # the reader's put fills it too
    assert events == ["full"] and queue.full
    queue.put("x" * 100)
    assert events == ["full"]   # once per crossing
    assert queue.take_batch(200) == ["x" * 100] * 2
    assert events == ["full"] and queue.takes_while_full == 1   # 300 left: over a quarter
    queue.take_batch(200)
    assert events == ["full", "drained"] and not queue.full and queue.size == 100
    queue.push_back_front(["y" * 300])   # a writer's frames put back count as well
    assert events == ["full", "drained", "full"] and queue.takes_while_full == 0


def test_a_frame_queue_marks_full_below_its_limit_so_the_relay_s_own_frames_still_fit() -> None:
    assert FrameQueue(1000, high_water=4000).high_water == 500
    assert FrameQueue(1000).high_water == 1000   # no mark asked: full only at the limit


class WritingPeer(MemoryPeer):
    """A socket whose `write(queue)` writes at once, as a real one does (MemoryPeer leaves every
    frame to the loop's writer task)."""

    def write(self, queue: FrameQueue, frame: Frame | None = None, soon: bool = False) -> bool:
        if frame is not None:
            return False   # a lone frame is queued, then written as the queue is
        if soon:
            asyncio.get_running_loop().call_soon(self.write, queue)
        elif queue.writer_idle and queue:
            for queued in queue.take_batch():
                self.sent.append(queued)
            self.got_frame.set()
            self.got_frame = anyio.Event()
        return True


answered: list[anyio.Event] = []


@tool
async def streamed():
    for part in ("one", "two"):
        yield part
released: list[anyio.Event] = []


@tool
async def at_once() -> str:
    answered[-1].set()
    return "ready"


@tool
async def when_released() -> str:
    await released[-1].wait()
    return "released"


class ListRecorder:
    """A recorder that keeps what it is given, in order: frames by direction and type, relay lines
    by kind and call."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str | None]] = []

    def record(self, direction: str, frame: str | bytes) -> None:
        self.lines.append((direction, json.loads(frame).get("type")))

    def record_notice(self, kind: str, fields: dict) -> None:
        self.lines.append(("relay", f"{kind} {fields.get('call_id')} {fields.get('name')}"))

    def close(self, reason: str) -> None:
        pass


async def sent_when_told(tool_name: str, scenario, recorder: ListRecorder | None = None) -> list[str]:
    """The types of the frames written to the upstream when the loop told of the call's notice
    (`on_notice`, where the edges log the `tool call` line and count it)."""
    mock = LocalMock()
    upstream, client = WritingPeer(), MemoryPeer()
    told: list[list[str]] = []
    told_event = anyio.Event()

    def on_notice(notice) -> None:
        if notice.kind == "tool_call":
            told.append([json.loads(frame)["type"] for frame in upstream.sent])
            told_event.set()

    engine = OpenAIEngine([at_once, when_released, streamed], config=EngineConfig(mode="proxy", strict=True, declare_tools=False))
    loop = SessionLoop(engine, upstream=upstream, client=client, on_notice=on_notice, recorder=recorder)
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(loop.run)
            await loop.started.wait()
            await scenario(mock, upstream, client, [json.dumps(e) for e in mock.connect() + mock.respond(
                [model_call(tool_name, "")])])
            await told_event.wait()
            await upstream.feed(None)
    upstream.close_streams()
    client.close_streams()
    return told[0]


async def test_a_handler_done_before_the_response_has_its_output_written_before_its_notice_is_told() -> None:
    # the notice's log line, metrics and trace cost a few hundred µs that held the output back
    answered.append(anyio.Event())

    async def scenario(mock, upstream, client, frames) -> None:
        for frame in frames[:-1]:
            await upstream.feed(frame)
        await answered[-1].wait()   # the handler is done: the output goes with response.done
        await upstream.feed(frames[-1])

    written = await sent_when_told("at_once", scenario)
    assert written[-2:] == ["conversation.item.create", "response.create"], written


async def test_a_handler_done_after_the_response_has_its_output_written_before_its_notice_is_told() -> None:
    released.append(anyio.Event())

    async def scenario(mock, upstream, client, frames) -> None:
        for frame in frames:
            await upstream.feed(frame)
        await client.wait_for(lambda event: event["type"] == "response.done")
        released[-1].set()   # the output goes as the handler ends

    written = await sent_when_told("when_released", scenario)
    assert written[-2:] == ["conversation.item.create", "response.create"], written


async def test_the_recording_says_where_a_handler_finished_among_the_frames() -> None:
    """The `handler_finished` relay line comes after the frames received before the handler ended
    (here `response.done`) and before what its outcome causes (the output): a replay lands the
    finish there (relay/offline/replay_finishes.py)."""
    released.append(anyio.Event())
    recorder = ListRecorder()

    async def scenario(mock, upstream, client, frames) -> None:
        for frame in frames:
            await upstream.feed(frame)
        await client.wait_for(lambda event: event["type"] == "response.done")
        released[-1].set()

    await sent_when_told("when_released", scenario, recorder)
    finished = [index for index, line in enumerate(recorder.lines) if line[1].startswith("handler_finished ")]
    assert len(finished) == 1 and recorder.lines[finished[0]][1].endswith(" when_released")
    before, after = recorder.lines[:finished[0]], recorder.lines[finished[0] + 1:]
    assert ("upstream>relay", "response.done") in before
    assert ("relay>upstream", "conversation.item.create") in after
    assert ("relay>upstream", "conversation.item.create") not in before


async def test_the_recording_says_where_a_streaming_handler_yielded() -> None:
    recorder = ListRecorder()

    async def scenario(mock, upstream, client, frames) -> None:
        for frame in frames:
            await upstream.feed(frame)

    await sent_when_told("streamed", scenario, recorder)
    notes = [line[1].split()[0] for line in recorder.lines
             if line[0] == "relay" and line[1].endswith(" streamed") and not line[1].startswith("tool_call ")]
    assert notes == ["handler_yielded", "handler_yielded", "handler_finished"], notes
