#!/usr/bin/env python3
"""The relay's own cost per forwarded audio frame, without sockets: output-audio deltas pushed
through a real SessionLoop and Engine (with the server's metrics tap) from an in-memory upstream
to a client that is a real websockets connection over an in-memory transport (so the frames are
framed and written as on a socket, by relay/transports/websockets.py), beside the same peers
forwarding inline (`await client.send(await upstream.recv())`, what a pass-through does). The
difference is what the relay adds to every frame on top of websockets' own work; it is the figure
to watch when changing the per-frame path (relay/session/, relay/transports/, relay/engine/),
steadier than socket benchmarks on a shared machine.

The upstream peer yields to the event loop every `--burst` frames, as a socket's reader does when
it has handed over what one read brought (websockets queues up to 16 frames per connection), and
tells, as websockets does, how many frames it still holds before it will wait.

With `--inspector`, the same loop three ways instead: without the live inspector, with it and
nobody watching (the loop's recorder is then the inspector's tap, whose `record` is the session's
recorders' own, the metrics tap alone in them), and with one page watching the session (every frame also kept for the model,
fed in batches in a worker thread, the page's messages dropped).

Usage: .venv/bin/python scripts/bench_session.py [--frames N] [--burst N] [--json FILE] [--inspector]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from websockets.asyncio.connection import Connection
from websockets.frames import Frame as WireFrame
from websockets.frames import Opcode
from websockets.protocol import OPEN
from websockets.server import ServerProtocol

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_frames import input_append, live_input_append, live_output_delta, output_delta  # noqa: E402

from relay.dialects import LIVE, OPENAI, Dialect  # noqa: E402
from relay.edges.config import ServerConfig  # noqa: E402
from relay.edges.serve import RelayServer  # noqa: E402
from relay.engine import EngineConfig, new_engine  # noqa: E402
from relay.inspector.live import FeedConnection, LiveHub, LiveSession  # noqa: E402
from relay.observe.metrics import Metrics, TrafficTap  # noqa: E402
from relay.recording.taps import Taps  # noqa: E402
from relay.session.loop import SessionLoop  # noqa: E402
from relay.session.transport import Deliver, Express, Frame, FrameQueue, TransportClosed  # noqa: E402
from relay.tools import ToolRegistry  # noqa: E402
from relay.tools.loading import load_tools  # noqa: E402
from relay.transports.websockets import WebsocketsTransport  # noqa: E402

REPEATS = 5
AUDIO_FRAMES: dict[str, Callable[[], str]] = {OPENAI.name: lambda: output_delta(time.monotonic_ns()),
                                              LIVE.name: live_output_delta}
"""Each dialect's output-audio frame, 20 ms of the same audio."""
INPUT_FRAMES: dict[str, Callable[[], str]] = {OPENAI.name: lambda: input_append(time.monotonic_ns()),
                                              LIVE.name: live_input_append}
"""Each dialect's input-audio frame (the caller's), 20 ms of the same audio."""
# what the live inspector's hub needs of an edge (tools, redactor, upstream URL); never started
EDGE = RelayServer(ServerConfig(upstream="ws://127.0.0.1:9/v1/realtime", dialect="openai", api_key="sk-bench",
                                inspector=True))


class FloodingUpstream:
    """A transport that hands out `frames` audio deltas, then closes once the client has had them
    all; it tells, as websockets does, whether the next frame comes without waiting (the rest of
    the current burst)."""

    def __init__(self, frames: int, burst: int, frame: str | None = None) -> None:
        self.remaining = frames
        self.burst = burst
        self.frame = frame or output_delta(time.monotonic_ns())
        self.drained = asyncio.Event()

    async def recv(self) -> str:
        self.remaining -= 1
        if self.remaining % self.burst == 0:
            await asyncio.sleep(0)
        if self.remaining < 0:
            await self.drained.wait()
            raise TransportClosed(1000, "", received=True, initiated_here=False)
        return self.frame

    async def receive(self, deliver: Deliver, express: Express | None = None) -> None:
        recv, more_buffered = self.recv, self.more_buffered
        while True:
            message = await recv()
            more = more_buffered()
            if express is None or not express(message, more):
                deliver(message, more)

    def more_buffered(self) -> bool:
        remaining = self.remaining
        return remaining > 0 and (remaining - 1) % self.burst > 0

    def hold_reading(self, held: bool) -> None:
        pass   # its queue never fills: the writer task sends nothing, the frames are counted

    async def send(self, frames: Sequence[Frame]) -> None:
        pass

    def write(self, queue: FrameQueue, frame: Frame | None = None, soon: bool = False) -> bool:
        if frame is not None:
            return False   # the writer task sends it (it sends nothing: the session forwards audio only)
        queue.wake()
        return True

    async def close(self, code: int | None, reason: str = "", *, abort: bool = False) -> None:
        if code is None and not abort:
            await self.drained.wait()


class CountingTransport(asyncio.Transport):
    """Where the client connection's bytes go: counted, then dropped, as a socket that always
    takes everything would. Sets `drained` once `expected` bytes have come."""

    def __init__(self, expected: int, drained: asyncio.Event) -> None:
        super().__init__()
        self.expected = expected
        self.written = 0
        self.drained = drained
        self.writes = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.drained.is_set():
            return   # the close frame, once the session ends
        self.written += len(data)
        self.writes += 1
        if self.written >= self.expected:
            self.drained.set()

    def is_closing(self) -> bool:
        return False

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def can_write_eof(self) -> bool:
        return False

    def abort(self) -> None:
        pass

    def close(self) -> None:
        pass


def counting_client(upstream: FloodingUpstream, frames: int) -> tuple[Connection, CountingTransport]:
    """A server-side websockets connection, open, whose transport counts the bytes of `frames`
    frames like the upstream's (a server frame's header is 2 bytes, 4 from 126 bytes, 10 from 64 KiB)."""
    payload = len(upstream.frame.encode())
    header = 2 if payload < 126 else 4 if payload < 65536 else 10
    transport = CountingTransport(frames * (header + payload), upstream.drained)
    connection = Connection(ServerProtocol(state=OPEN), close_timeout=0)
    connection.connection_made(transport)
    return connection, transport


STOPPED: list[bool] = []   # per watched pass: whether the view fell behind and stopped


async def relay_pass(tools: ToolRegistry, frames: int, burst: int, inspector: str = "off",
                     clock: Callable[[], float] = time.perf_counter, dialect: Dialect = OPENAI) -> float:
    """The relay's time for `frames` frames (by `clock`); `inspector`: `off` (relay serve), `on`
    (--inspector, nobody watching), `watched` (one page watching this session, its feed's
    messages dropped); `dialect`: the session's (its engine, and its audio frames: `OPENAI`'s
    Realtime deltas or `LIVE`'s GPT-Live deltas, the same audio)."""
    upstream = FloodingUpstream(frames, burst, AUDIO_FRAMES[dialect.name]())
    client, transport = counting_client(upstream, frames)
    engine = new_engine(tools, dialect=dialect, config=EngineConfig(mode="proxy"))
    recorders = Taps(TrafficTap(Metrics()))   # as `relay serve` builds them, without a recording
    hub = LiveHub()
    header = EDGE.session_header(session_id="rs_bench", dialect=OPENAI, mode="proxy", extra_header={})
    tap = hub.open_session("rs_bench", header=header, as_recorded=EDGE.recording_filter(None), recording=None,
                           taps=recorders) if inspector != "off" else recorders
    loop = SessionLoop(engine, upstream=upstream, client=WebsocketsTransport(client), recorder=tap,
                       close_timeout=0.0)   # the pass is timed before the close: no wait for it
    page = DroppingPage()
    page.session = hub.find("rs_bench")
    start = clock()
    async with asyncio.TaskGroup() as group:
        if inspector == "watched":
            group.create_task(FeedConnection(hub, page).run())
            await page.watching.wait()
            start = clock()
        running = group.create_task(loop.run())
        await upstream.drained.wait()
        if inspector == "watched":
            await page.caught_up()   # the model's work on these frames counts too
        elapsed = clock() - start
        running.cancel()
        page.leave.set()
    assert transport.written == transport.expected
    if inspector == "watched":
        STOPPED.append(page.view_stopped)
    return elapsed


class CountingUpstream(FloodingUpstream):
    """An upstream that only takes: it counts the frames the session sends it, and is done once
    `frames` have come (`progress` is set on every write, for the feeder)."""

    def __init__(self, frames: int) -> None:
        super().__init__(frames, 1)
        self.taken = 0
        self.progress = asyncio.Event()

    async def recv(self) -> str:
        await self.drained.wait()
        raise TransportClosed(1000, "", received=True, initiated_here=False)

    async def send(self, frames: Sequence[Frame]) -> None:
        self.taken += len(frames)
        self.progress.set()
        if self.taken >= self.remaining:
            self.drained.set()


async def relay_input_pass(tools: ToolRegistry, frames: int, burst: int, dialect: Dialect,
                           clock: Callable[[], float] = time.process_time) -> float:
    """The relay's time (by `clock`) for `frames` input-audio frames of `dialect`'s, from a client
    (a real websockets connection fed masked frames, `burst` per read, as a socket's reader hands
    them over) to the upstream, through the session loop and engine."""
    upstream = CountingUpstream(frames)
    client = Connection(ServerProtocol(state=OPEN), close_timeout=0)
    client.connection_made(CountingTransport(1 << 62, upstream.drained))
    payload = INPUT_FRAMES[dialect.name]().encode()
    read = WireFrame(Opcode.TEXT, payload).serialize(mask=True) * burst
    engine = new_engine(tools, dialect=dialect, config=EngineConfig(mode="proxy"))
    loop = SessionLoop(engine, upstream=upstream, client=WebsocketsTransport(client),
                       recorder=Taps(TrafficTap(Metrics())), close_timeout=0.0)
    start = clock()
    async with asyncio.TaskGroup() as group:
        running = group.create_task(loop.run())
        for fed in range(burst, frames + burst, burst):
            client.data_received(read)
            while upstream.taken < min(fed, frames):   # the session forwarded this read's frames
                upstream.progress.clear()
                await upstream.progress.wait()
        elapsed = clock() - start
        running.cancel()
    assert upstream.taken >= frames
    return elapsed


class DroppingPage:
    """A page's feed connection that watches the bench session and drops what it is sent."""

    def __init__(self) -> None:
        self.watching = asyncio.Event()
        self.leave = asyncio.Event()
        self.view_stopped = False
        self.session: LiveSession | None = None
        self._asked = False
        self._sent = asyncio.Event()

    async def send(self, text: str) -> None:
        if text.startswith('{"type": "snapshot"'):
            self.watching.set()
        elif text.startswith('{"type": "error"'):
            self.view_stopped = True   # it fell behind: the rest of the pass ran unwatched
        self._sent.set()

    async def caught_up(self) -> None:
        """Wait until the session's frames have all gone to the model (or the view stopped)."""
        while not self.view_stopped and self.session is not None and self.session.has_news:
            self._sent = asyncio.Event()
            await self._sent.wait()

    async def receive(self) -> str | None:
        if not self._asked:
            self._asked = True
            return json.dumps({"type": "watch", "session": "rs_bench"})
        await self.leave.wait()
        return None

    async def close(self, code: int, reason: str) -> None:
        pass


async def inline_pass(frames: int, burst: int) -> float:
    upstream = FloodingUpstream(frames, burst)
    client, transport = counting_client(upstream, frames)
    start = time.perf_counter()
    try:
        while True:
            await client.send(await upstream.recv())
    except TransportClosed:
        pass
    assert transport.written == transport.expected
    return time.perf_counter() - start


async def measure_async(frames: int, burst: int) -> dict[str, float]:
    tools = ToolRegistry(load_tools(str(ROOT / "scripts" / "bench_tools.py")))
    relay = min([await relay_pass(tools, frames, burst) for _ in range(REPEATS)])
    inline = min([await inline_pass(frames, burst) for _ in range(REPEATS)])
    return {"frames": frames, "burst": burst, "relay_us_per_frame": relay / frames * 1e6,
            "inline_us_per_frame": inline / frames * 1e6, "relay_added_us_per_frame": (relay - inline) / frames * 1e6}


def measure(frames: int, burst: int) -> dict[str, float]:
    """Best of five runs of each (the least disturbed by other work on the machine)."""
    return asyncio.run(measure_async(frames, burst))


async def measure_inspector_async(frames: int, burst: int, repeats: int) -> dict[str, float]:
    tools = ToolRegistry(load_tools(str(ROOT / "scripts" / "bench_tools.py")))
    variants = ["off", "on", "watched"]
    passes: dict[str, list[float]] = {variant: [] for variant in variants}
    STOPPED.clear()
    await relay_pass(tools, frames, burst)   # warm: the first pass pays for first uses
    for repeat in range(repeats):
        # one pass of each, back to back (a busy spell of the machine hits all three), in turns of
        # order so that none always runs first
        for variant in variants[repeat % 3:] + variants[:repeat % 3]:
            passes[variant].append(await relay_pass(tools, frames, burst, variant, time.process_time))
    figures: dict[str, float] = {"frames": frames, "burst": burst, "repeats": repeats}
    for variant, seconds in passes.items():
        figures[f"{variant}_cpu_us_per_frame"] = statistics.median(seconds) / frames * 1e6
    # the ratio within each repeat, then their median: steadier than a ratio of two medians
    for variant in ("on", "watched"):
        figures[f"{variant}_vs_off"] = statistics.median(a / b for a, b in zip(passes[variant], passes["off"]))
    figures["watched_view_stopped"] = any(STOPPED)
    return figures


def measure_inspector(frames: int, burst: int, repeats: int = 3 * REPEATS) -> dict[str, float]:
    """The relay's CPU time per frame (the process's, every thread: other work on the machine
    counts less than in wall time) without the live inspector, with it and nobody watching, and
    with one page watching the session (the model fed in batches in a worker thread, its work on
    the frames included): medians over `repeats` rounds of one pass each."""
    return asyncio.run(measure_inspector_async(frames, burst, repeats))


async def measure_dialects_async(frames: int, burst: int, repeats: int) -> dict[str, Any]:
    tools = ToolRegistry(load_tools(str(ROOT / "scripts" / "bench_tools.py")))
    dialects = [OPENAI, LIVE]
    passes: dict[str, list[float]] = {dialect.name: [] for dialect in dialects}
    inputs: dict[str, list[float]] = {dialect.name: [] for dialect in dialects}
    for dialect in dialects:   # warm: the first pass pays for first uses
        await relay_pass(tools, frames, burst, dialect=dialect)
        await relay_input_pass(tools, frames, burst, dialect)
    for repeat in range(repeats):
        # one pass of each, back to back, in turns of order (as measure_inspector)
        for dialect in dialects[repeat % 2:] + dialects[:repeat % 2]:
            passes[dialect.name].append(await relay_pass(tools, frames, burst, clock=time.process_time,
                                                         dialect=dialect))
            inputs[dialect.name].append(await relay_input_pass(tools, frames, burst, dialect))
    figures: dict[str, Any] = {"frames": frames, "burst": burst, "repeats": repeats}
    for direction, measured in (("output", passes), ("input", inputs)):
        for name, seconds in measured.items():
            figures[f"{name}_{direction}_cpu_us_per_frame"] = statistics.median(seconds) / frames * 1e6
        ratios = [live / realtime for live, realtime in zip(measured[LIVE.name], measured[OPENAI.name])]
        figures[f"live_vs_openai_{direction}"] = statistics.median(ratios)
        figures[f"live_vs_openai_{direction}_range"] = [min(ratios), max(ratios)]
    return figures


def measure_dialects(frames: int, burst: int, repeats: int = 3 * REPEATS) -> dict[str, Any]:
    """The relay's CPU time per forwarded audio frame (the process's, every thread), the model's
    (`output`) and the caller's (`input`), in a Realtime session (`openai`) and in a GPT-Live
    session (`live`), through the same transport and session loop, one pass of each per round:
    medians over `repeats` rounds, and the median (and range) of the per-round ratio Live /
    Realtime."""
    return asyncio.run(measure_dialects_async(frames, burst, repeats))


def machine() -> dict[str, Any]:
    """Where the figures were measured: cores, Python, the load average before, the commit."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=False).stdout.strip()
    except OSError:
        commit = ""
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "load_average": os.getloadavg()[0],
            "commit": commit}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--burst", type=int, default=16, help="frames per wake-up of the upstream reader")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--inspector", action="store_true",
                        help="the relay without the live inspector, with it, and watched (not inline forwarding)")
    parser.add_argument("--dialects", action="store_true",
                        help="a Realtime session's audio frames beside a GPT-Live session's (not inline forwarding)")
    args = parser.parse_args()
    if args.dialects:
        written: dict[str, Any] = {"machine": machine()}
        for burst in (args.burst, 1):
            figures = written[f"burst_{burst}"] = measure_dialects(args.frames, burst)
            for direction in ("output", "input"):
                low, high = figures[f"live_vs_openai_{direction}_range"]
                print(f"relay CPU per {direction}-audio frame, without sockets, bursts of {burst}: Realtime "
                      f"{figures[f'openai_{direction}_cpu_us_per_frame']:.2f} us, GPT-Live "
                      f"{figures[f'live_{direction}_cpu_us_per_frame']:.2f} us (Live / Realtime "
                      f"x{figures[f'live_vs_openai_{direction}']:.3f}, rounds x{low:.3f} to x{high:.3f})")
        if args.json:
            Path(args.json).write_text(json.dumps(written, indent=2) + "\n")
        return 0
    if args.inspector:
        figures = measure_inspector(args.frames, args.burst)
        print(f"relay CPU per frame, without sockets: {figures['off_cpu_us_per_frame']:.2f} us without the inspector; "
              f"with it x{figures['on_vs_off']:.3f} (nobody watching), x{figures['watched_vs_off']:.3f} "
              f"(one page watching{': its view fell behind and stopped' if figures['watched_view_stopped'] else ''}),"
              f" bursts of {args.burst}")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
        return 0
    figures = measure(args.frames, args.burst)
    print(f"relay per frame, without sockets: {figures['relay_us_per_frame']:.2f} us "
          f"(inline forwarding {figures['inline_us_per_frame']:.2f} us; the relay adds "
          f"{figures['relay_added_us_per_frame']:.2f} us), bursts of {args.burst}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
