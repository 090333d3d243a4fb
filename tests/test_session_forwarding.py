"""The session's express lane (relay/session/pipe.py `express_lane`, its pipe built by
`relay.session.loop.forwarding`): a frame the engine forwards as it came (audio,
`engine.forwards_upstream` / `forwards_client`) goes to the other side as the same text without
the engine's round, and keeps every guarantee of the general path: recorded as received and as
sent, in order; redacted for a client; counted against the client's event budget; bounded by the
queue; written once after the last frame of a burst (and still written if the burst stops short),
a lone frame with nothing queued ahead of it straight to the socket; counted by the traffic
counter on a lane of integer adds (relay.recording.taps.ForwardLane), the chain's other members
called, as members come and go."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any, Sequence

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.engine import EngineConfig, OpenAIEngine
from relay.observe.metrics import PUBLISH_EVERY, Metrics, TrafficTap
from relay.recording.format import CLIENT_TO_RELAY, RELAY_TO_CLIENT, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY
from relay.recording.redact import Redactor
from relay.recording.taps import Taps
from relay.session.loop import SessionLoop, forwarding
from relay.session.policy import INTERNAL_ERROR, POLICY_VIOLATION, RATE_LIMIT_CLOSE, EventBudget
from relay.session.transport import Deliver, Express, Frame, FrameQueue
from tests.support.clients import TIMEOUT
from tests.support.frames import ListRecorder
from tests.support.local_mock import LocalMock
from tests.support import peers
from tests.support.peers import MemoryPeer, compiled_lane_of, compiled_lane_or_skip, hand_over

SECRET = "sk-forwarded-secret"


@pytest.fixture(autouse=True, params=["python", "compiled"])
def lane(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every scenario twice: through the express lane (Python), and through the picows transport's
    compiled lane over the frames' bytes first (relay/transports/_picows_lane.pyx), as that
    transport runs it: the two must forward, record, count and refuse the same frames."""
    if request.param == "compiled":
        monkeypatch.setattr(peers, "COMPILED_LANE", compiled_lane_or_skip())
    return str(request.param)


def delta(text: str = "AAAA") -> str:
    return json.dumps({"type": "response.output_audio.delta", "response_id": "r1", "delta": text},
                      separators=(",", ":"))


def append(text: str = "AAAA") -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": text}, separators=(",", ":"))


class BurstPeer(MemoryPeer):
    """A socket whose reads come in bursts: `burst(frames)` hands them over one after the other
    from one callback (as a socket's read does), with `more` true for all but the last, unless
    the burst stops short (`cut_short`: the last frame delivered still says more follows).
    `write(queue)` writes synchronously, one write per call."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[list[Frame]] = []
        self._deliver: Deliver | None = None
        self._express: Express | None = None
        self._more = False
        self.receiving = anyio.Event()

    async def receive(self, deliver: Deliver, express: Express | None = None) -> None:
        self._deliver, self._express = deliver, express
        self.receiving.set()
        await super().receive(deliver, express)

    def burst(self, frames: Sequence[Frame], *, cut_short: bool = False) -> None:
        """`frames` handed over as one read hands them: one after the other, without waiting."""
        assert self._deliver is not None
        lane = compiled_lane_of(self._express)
        for index, frame in enumerate(frames):
            self._more = cut_short or index < len(frames) - 1
            hand_over(frame, self._more, self._deliver, self._express, lane)
        self._more = False

    def write(self, queue: FrameQueue, frame: Frame | None = None, soon: bool = False) -> bool:
        if frame is not None:
            return False   # no lone frame written at once (DirectPeer's socket takes one)
        if soon:
            asyncio.get_running_loop().call_soon(self.write, queue)
        elif queue.writer_idle and queue:
            self.writes.append(queue.take_batch())
        return True


async def run(scenario: Callable[..., Any], *, client: MemoryPeer | None = None, upstream: MemoryPeer | None = None,
              mode: str = "proxy", **options: Any) -> tuple[SessionLoop, list[str | bytes]]:
    """Run `scenario(loop, upstream, client)` in a session; the loop, and the frames the engine's
    full round saw."""
    upstream = upstream or MemoryPeer()
    client = client or MemoryPeer()
    engine = OpenAIEngine([], config=EngineConfig(mode=mode, strict=True, declare_tools=False))
    seen = spy_receive(engine)
    loop = SessionLoop(engine, upstream=upstream, client=client if mode == "proxy" else None, **options)
    try:
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as group:
                group.start_soon(loop.run)
                await loop.started.wait()
                await scenario(loop, upstream, client)
                if loop.end is None:
                    await upstream.feed(None)
    finally:
        upstream.close_streams()
        client.close_streams()
    return loop, seen


def spy_receive(engine: OpenAIEngine) -> list[str | bytes]:
    """The frames given to the engine's full round (`receive_upstream` / `receive_client`)."""
    seen: list[str | bytes] = []
    for name in ("receive_upstream", "receive_client"):
        original = getattr(engine, name)

        def spying(frame: str | bytes, now: float, original: Any = original) -> Any:
            seen.append(frame)
            return original(frame, now)

        setattr(engine, name, spying)
    return seen


async def test_audio_goes_on_as_it_came_recorded_both_ways_and_redacted_for_the_client() -> None:
    recorder = ListRecorder()
    echoed = delta(f"{SECRET}AAAA")
    plain = delta()

    async def scenario(loop: SessionLoop, upstream: MemoryPeer, client: MemoryPeer) -> None:
        for event in LocalMock().connect():
            await upstream.feed(json.dumps(event))
        await client.wait_for(lambda event: event["type"] == "session.created")
        await upstream.feed(echoed)
        await upstream.feed(plain)
        await client.feed(append())
        await client.wait_for(lambda event: event.get("delta") == "AAAA")
        with anyio.fail_after(TIMEOUT):
            while append() not in upstream.sent:
                await upstream.got_frame.wait()

    _, seen = await run(scenario, recorder=recorder, redactor=Redactor([SECRET]))
    redacted = echoed.replace(SECRET, "[redacted]")
    audio = [(direction, frame) for direction, frame in recorder.frames if frame in (echoed, redacted, plain, append())]
    assert audio == [(UPSTREAM_TO_RELAY, echoed), (RELAY_TO_CLIENT, redacted), (UPSTREAM_TO_RELAY, plain),
                     (RELAY_TO_CLIENT, plain), (CLIENT_TO_RELAY, append()), (RELAY_TO_UPSTREAM, append())]
    assert not {echoed, plain, append()} & set(seen)   # the engine's round was skipped
    assert seen   # ... and not for the events it reads (session.created)


# what keys and tokens are made of, '-' and '.' (a redactor's anchors) and '/' included
SECRET_CHARACTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._/+="


@settings(max_examples=150, deadline=None)
@given(secrets=st.lists(st.text(SECRET_CHARACTERS, min_size=8, max_size=24), min_size=1, max_size=3),
       pieces=st.lists(st.one_of(st.integers(0, 2), st.sampled_from(["AAAA", "sk", "-", ".", "/", "+=="])),
                       max_size=12))
def test_the_express_lane_redacts_an_audio_frame_as_the_redactor_does(secrets: list[str],
                                                                       pieces: list[int | str]) -> None:
    """The express lane runs the redactor's loop inline (a call costs as much): what it queues for
    the client is what `Redactor.frame` makes of the frame, for any secrets and any audio holding
    them, whole, in part or next to each other."""
    redactor = Redactor(secrets)
    frame = delta("".join(secrets[piece % len(secrets)] if isinstance(piece, int) else piece for piece in pieces))

    async def forwarded() -> list[Frame]:
        engine = OpenAIEngine([], config=EngineConfig(mode="proxy", strict=True, declare_tools=False))
        loop = SessionLoop(engine, upstream=MemoryPeer(), client=MemoryPeer(), redactor=redactor)
        express = forwarding(loop, UPSTREAM_TO_RELAY, engine.forwards_upstream)
        hand_over(frame, True, pytest.fail, express, compiled_lane_of(express))   # more follow: queued
        return list(loop.to_client.frames)

    assert anyio.run(forwarded) == [redactor.frame(frame)]


async def test_the_express_lane_redacts_a_binary_frame_an_engine_forwards() -> None:
    """No engine forwards a binary frame unparsed today (the OpenAI family's test refuses bytes),
    but one that did would have it redacted too, as bytes, not fail the session."""
    engine = OpenAIEngine([], config=EngineConfig(mode="proxy", strict=True, declare_tools=False))
    redactor = Redactor([SECRET])
    loop = SessionLoop(engine, upstream=MemoryPeer(), client=MemoryPeer(), redactor=redactor)
    express = forwarding(loop, UPSTREAM_TO_RELAY, lambda frame: True)
    frame = delta(f"{SECRET}AAAA").encode()
    assert express(frame, True)
    assert list(loop.to_client.frames) == [frame.replace(SECRET.encode(), b"[redacted]")]


async def reading_with_writers_asleep(upstream: BurstPeer) -> None:
    """Once the loop reads `upstream` and its writer tasks sleep (a burst is then written by the
    reader's step)."""
    await upstream.receiving.wait()
    await anyio.wait_all_tasks_blocked()


async def test_a_burst_is_written_once_after_its_last_frame_and_a_burst_cut_short_still_goes_out() -> None:
    client = BurstPeer()
    upstream = BurstPeer()

    async def scenario(loop: SessionLoop, upstream: BurstPeer, client: BurstPeer) -> None:   # type: ignore[override]
        await reading_with_writers_asleep(upstream)
        upstream.burst([delta("A1"), delta("A2"), delta("A3")])
        assert client.writes == [[delta("A1"), delta("A2"), delta("A3")]]
        upstream.burst([delta("B1"), delta("B2")], cut_short=True)
        assert len(client.writes) == 1   # waits for a frame that does not come ...
        await anyio.wait_all_tasks_blocked()
        assert client.writes[1:] == [[delta("B1"), delta("B2")]]   # ... until the loop's turn

    await run(scenario, client=client, upstream=upstream)


class DirectPeer(BurstPeer):
    """A BurstPeer whose socket takes a lone frame at once (`write(queue, frame)`) while
    `accepting` and nothing waits ahead of it."""

    def __init__(self) -> None:
        super().__init__()
        self.accepting = True
        self.sent_now: list[Frame] = []

    def write(self, queue: FrameQueue, frame: Frame | None = None, soon: bool = False) -> bool:
        if frame is None:
            return super().write(queue, None, soon)
        if not self.accepting or queue.frames or not queue.writer_idle:
            return False
        self.sent_now.append(frame)
        self.writes.append([frame])
        return True


async def test_a_lone_frame_goes_to_the_socket_unqueued_unless_a_frame_waits_ahead_or_the_socket_holds_it() -> None:
    client = DirectPeer()
    upstream = BurstPeer()

    async def scenario(loop: SessionLoop, upstream: BurstPeer, client: DirectPeer) -> None:   # type: ignore[override]
        await reading_with_writers_asleep(upstream)
        upstream.burst([delta("A")])
        assert client.sent_now == [delta("A")] and len(loop.to_client) == 0   # never queued
        # a burst cut short leaves its frames queued until the loop's turn: a lone frame that
        # comes before it goes behind them, in the same write
        upstream.burst([delta("B1"), delta("B2")], cut_short=True)
        upstream.burst([delta("C")])
        assert client.writes[1:] == [[delta("B1"), delta("B2"), delta("C")]]
        client.accepting = False   # flow control holds the socket: queued, and flushed
        upstream.burst([delta("D")])
        assert client.writes[2:] == [[delta("D")]]
        client.accepting = True
        upstream.burst([delta("E")])
        await anyio.wait_all_tasks_blocked()
        assert client.sent_now == [delta("A"), delta("E")]
        assert client.writes == [[delta("A")], [delta("B1"), delta("B2"), delta("C")], [delta("D")], [delta("E")]]

    await run(scenario, client=client, upstream=upstream)


async def test_a_client_over_its_event_budget_is_cut_off_on_audio_too() -> None:
    now = [0.0]
    recorder = ListRecorder()

    async def scenario(loop: SessionLoop, upstream: MemoryPeer, client: MemoryPeer) -> None:
        for _ in range(5):
            await client.feed(append())
        with anyio.fail_after(TIMEOUT):
            await loop.ended.wait()

    loop, _ = await run(scenario, client_budget=EventBudget(1.0, clock=lambda: now[0]), recorder=recorder)
    assert (loop.end.code, loop.end.reason) == RATE_LIMIT_CLOSE   # type: ignore[union-attr]
    # two events within the budget (a burst of two seconds' worth) went up; every one was recorded
    assert [direction for direction, frame in recorder.frames if frame == append()].count(RELAY_TO_UPSTREAM) == 2
    assert [direction for direction, frame in recorder.frames if frame == append()].count(CLIENT_TO_RELAY) >= 3


class StuckPeer(MemoryPeer):
    """A client that never takes what it is sent: the first send never returns."""

    async def send(self, frames: Sequence[Frame]) -> None:
        await anyio.sleep_forever()


async def test_a_client_that_does_not_read_is_closed_when_audio_fills_its_queue() -> None:
    client = StuckPeer()

    async def scenario(loop: SessionLoop, upstream: MemoryPeer, client: MemoryPeer) -> None:
        for index in range(20):
            await upstream.feed(delta(f"{index:04d}" * 10))
        with anyio.fail_after(TIMEOUT):
            await loop.ended.wait()

    # without back-pressure (the relay never runs so: its queue limit alone)
    loop, _ = await run(scenario, client=client, max_queue_bytes=500, hold_back_bytes=None)
    assert (loop.end.by, loop.end.code) == ("relay", POLICY_VIOLATION)   # type: ignore[union-attr]


async def test_audio_a_full_upstream_queue_refuses_spends_the_client_s_budget_once() -> None:
    upstream, budget, recorder = StuckPeer(), EventBudget(1000.0, clock=lambda: 0.0), ListRecorder()

    async def scenario(loop: SessionLoop, upstream: MemoryPeer, client: MemoryPeer) -> None:
        for index in range(20):
            await client.feed(append(f"{index:04d}" * 10))
        with anyio.fail_after(TIMEOUT):
            await loop.ended.wait()

    loop, _ = await run(scenario, upstream=upstream, client_budget=budget, max_queue_bytes=500, hold_back_bytes=None,
                        recorder=recorder)
    assert (loop.end.by, loop.end.code) == ("relay", INTERNAL_ERROR)   # type: ignore[union-attr]
    read = [frame for direction, frame in recorder.frames if direction == CLIENT_TO_RELAY]
    assert len(read) > 500 // len(append("0000" * 10))   # the queue filled up
    assert budget._tokens == budget.burst - len(read)   # every frame read took one token, the refused one too


class GatedPeer(MemoryPeer):
    """A peer that takes nothing until `gate` is set (a slow reader)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = anyio.Event()

    async def send_one(self, message: str | bytes) -> None:
        await self.gate.wait()
        await super().send_one(message)


class HeldBackPeer(MemoryPeer):
    """A peer whose reading the loop pauses and resumes, counted."""

    def __init__(self) -> None:
        super().__init__()
        self.pauses = self.resumes = 0
        self.paused = anyio.Event()

    def hold_reading(self, held: bool) -> None:
        if held:
            self.pauses += 1
            self.paused.set()
        else:
            self.resumes += 1
        super().hold_reading(held)


async def test_a_slow_client_holds_the_upstream_back_and_then_gets_every_frame_in_order() -> None:
    client, upstream = GatedPeer(), HeldBackPeer()
    frames = [delta(f"{index:04d}" * 10) for index in range(60)]   # 6 KB: six times the mark

    async def scenario(loop: SessionLoop, upstream: HeldBackPeer, client: GatedPeer) -> None:   # type: ignore[override]
        for frame in frames:   # the peer's stream holds 100 frames: these all go in at once
            await upstream.feed(frame)
        with anyio.fail_after(TIMEOUT):
            await upstream.paused.wait()
        await anyio.wait_all_tasks_blocked()
        # the queue stops at the mark (1,000 bytes) and a frame; the rest waits in the socket
        assert loop.to_client.full and loop.to_client.size < 1000 + len(frames[0])
        client.gate.set()
        with anyio.fail_after(TIMEOUT):
            while frames[-1] not in client.sent:
                await client.got_frame.wait()

    loop, _ = await run(scenario, client=client, upstream=upstream, hold_back_bytes=1000, stall_seconds=30.0)
    assert [frame for frame in client.sent if frame in frames] == frames
    assert loop.end is not None and loop.end.by == "upstream"   # ended by the scenario's close, not cut off
    assert upstream.pauses >= 1 and upstream.resumes == upstream.pauses


@pytest.mark.parametrize("stuck, frame, code", [("client", delta, POLICY_VIOLATION), ("upstream", append, INTERNAL_ERROR)])
async def test_a_side_that_takes_nothing_holds_the_other_back_and_is_closed_after_the_stall_time(
        stuck: str, frame: Callable[[str], str], code: int, caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="relay")
    source = HeldBackPeer()   # the side whose frames fill the stuck side's queue
    peers = {"client": StuckPeer(), "upstream": source} if stuck == "client" else {"upstream": StuckPeer(), "client": source}

    async def scenario(loop: SessionLoop, upstream: MemoryPeer, client: MemoryPeer) -> None:
        for index in range(60):
            await source.feed(frame(f"{index:04d}" * 10))
        with anyio.fail_after(TIMEOUT):
            await loop.ended.wait()

    loop, _ = await run(scenario, **peers, hold_back_bytes=1000, stall_seconds=0.2)
    assert (loop.end.by, loop.end.code) == ("relay", code)   # type: ignore[union-attr]
    assert source.pauses == 1 and source.resumes == 0   # never read again
    queue = loop.to_client if stuck == "client" else loop.to_upstream
    assert queue.size < 1000 + len(frame("0000" * 10))
    [warning] = [r.getMessage() for r in caplog.records if "not reading" in r.getMessage()]
    assert warning.startswith(f"{stuck} is not reading: nothing taken for 0.2 s with ")


async def test_without_a_client_audio_is_recorded_as_received_and_goes_nowhere() -> None:
    recorder = ListRecorder()

    async def scenario(loop: SessionLoop, upstream: MemoryPeer, client: MemoryPeer) -> None:
        await upstream.feed(delta())
        await upstream.feed(None)
        with anyio.fail_after(TIMEOUT):
            await loop.ended.wait()

    await run(scenario, mode="sidecar", recorder=recorder)
    assert [(direction, frame) for direction, frame in recorder.frames if frame == delta()] == [
        (UPSTREAM_TO_RELAY, delta())]


async def test_the_traffic_counter_counts_audio_on_a_lane_and_the_other_recorders_see_every_frame(
        caplog: Any) -> None:
    metrics, early, late = Metrics(), ListRecorder(), ListRecorder()

    class BrokenWriter(ListRecorder):
        def record(self, direction: str, frame: str | bytes) -> None:
            raise RuntimeError("disk on fire")

    taps = Taps(TrafficTap(metrics), early)
    echoed = delta(f"{SECRET}AAAA")
    batch = PUBLISH_EVERY // 2   # each forwarded frame crosses twice

    async def scenario(loop: SessionLoop, upstream: MemoryPeer, client: MemoryPeer) -> None:
        for event in LocalMock().connect():
            await upstream.feed(json.dumps(event))
        await client.wait_for(lambda event: event["type"] == "session.created")
        published = metrics._families.frames[RELAY_TO_CLIENT]._value.get()
        for _ in range(batch - 1):
            await upstream.feed(delta())
        await client.wait_for(lambda event: event.get("delta") == "AAAA")
        with anyio.fail_after(TIMEOUT):
            while len([f for f in client.sent if f == delta()]) < batch - 1:
                await client.got_frame.wait()
        assert metrics._families.frames[RELAY_TO_CLIENT]._value.get() == published   # counted, not yet published
        taps.add(late)
        taps.add(BrokenWriter())   # dropped at its first frame; audio goes on
        await upstream.feed(echoed)   # the lane's batch is full: published
        await client.feed(append())
        with anyio.fail_after(TIMEOUT):
            while append() not in upstream.sent:
                await upstream.got_frame.wait()
        assert metrics._families.frames[RELAY_TO_CLIENT]._value.get() >= published + batch
        taps.remove(late)
        await upstream.feed(delta("BBBB"))
        await client.wait_for(lambda event: event.get("delta") == "BBBB")

    await run(scenario, recorder=taps, redactor=Redactor([SECRET]))
    taps.close("done")
    redacted = echoed.replace(SECRET, "[redacted]")
    audio = [(d, f) for d, f in early.frames if f in (delta(), echoed, redacted, append(), delta("BBBB"))]
    assert audio == [(UPSTREAM_TO_RELAY, delta()), (RELAY_TO_CLIENT, delta())] * (batch - 1) + [
        (UPSTREAM_TO_RELAY, echoed), (RELAY_TO_CLIENT, redacted), (CLIENT_TO_RELAY, append()),
        (RELAY_TO_UPSTREAM, append()), (UPSTREAM_TO_RELAY, delta("BBBB")), (RELAY_TO_CLIENT, delta("BBBB"))]
    assert [(d, f) for d, f in late.frames if f in (echoed, redacted, append(), delta("BBBB"))] == [
        (UPSTREAM_TO_RELAY, echoed), (RELAY_TO_CLIENT, redacted), (CLIENT_TO_RELAY, append()),
        (RELAY_TO_UPSTREAM, append())]   # from its joining to its leaving
    # every frame counted once each way, with the bytes as they crossed (redaction changes them)
    counted = {direction: [f for d, f in early.frames if d == direction] for direction in metrics.frames}
    assert metrics.frames == {direction: len(frames) for direction, frames in counted.items()}
    assert metrics.frame_bytes == {direction: sum(len(f) for f in frames) for direction, frames in counted.items()}
    assert [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()] == [
        "a session recorder (BrokenWriter) failed recording a frame; it is dropped, the session goes on"]


def test_a_lane_keeps_its_counts_as_its_counter_leaves_and_a_new_one_comes() -> None:
    first, second = Metrics(), Metrics()
    counter = TrafficTap(first)
    taps = Taps(ListRecorder())
    lane = taps.lane(UPSTREAM_TO_RELAY, RELAY_TO_CLIENT)
    assert lane.counter is None and lane.settle_at > 10**9   # nobody counts: never settled
    lane.frames, lane.bytes = 1, 10
    taps.add(counter)   # takes what the lane counted so far too
    assert (lane.counter, lane.settle_at) == (counter, PUBLISH_EVERY // 2)
    lane.frames += 1
    lane.bytes += 10
    lane.resized += 4
    taps.remove(counter)   # what it counted so far is its own
    assert lane.counter is None and (lane.frames, lane.bytes, lane.resized) == (0, 0, 0)
    counter.close("done")
    assert first.frames[UPSTREAM_TO_RELAY] == 2 and first.frame_bytes[RELAY_TO_CLIENT] == 24
    taps.add(TrafficTap(second))
    lane.frames, lane.bytes = 1, 10
    lane.settle()
    assert second._families.frames[RELAY_TO_CLIENT]._value.get() == 1
    assert lane.others is not None   # the ListRecorder is called for every frame
