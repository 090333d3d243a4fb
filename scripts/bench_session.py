#!/usr/bin/env python3
"""The relay's own cost per forwarded audio frame, without sockets: output-audio deltas pushed
through a real SessionLoop and Engine (with the server's metrics tap) between in-memory peers,
beside the same peers forwarding inline (`await client.send(await upstream.recv())`). The
difference is what the relay adds to every frame on top of websockets' own work; it is the figure
to watch when changing the per-frame path (relay/session.py, relay/engine/), steadier than
socket benchmarks on a shared machine.

The upstream peer yields to the event loop every `--burst` frames, as a socket's reader does when
it has handed over what one read brought (websockets queues up to 16 frames per connection).

Usage: .venv/bin/python scripts/bench_session.py [--frames N] [--burst N] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Close

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_frames import output_delta  # noqa: E402
from relay.engine import Engine, EngineConfig  # noqa: E402
from relay.metrics import Metrics, TrafficTap  # noqa: E402
from relay.session import SessionLoop  # noqa: E402
from relay.tools import ToolRegistry, load_tools  # noqa: E402

REPEATS = 5


class FloodingUpstream:
    """Hands out `frames` audio deltas, then closes once the client has had them all."""

    def __init__(self, frames: int, burst: int) -> None:
        self.remaining = frames
        self.burst = burst
        self.frame = output_delta(time.monotonic_ns())
        self.drained = asyncio.Event()

    async def recv(self) -> str:
        self.remaining -= 1
        if self.remaining % self.burst == 0:
            await asyncio.sleep(0)
        if self.remaining < 0:
            await self.drained.wait()
            raise ConnectionClosedOK(Close(1000, ""), None)
        return self.frame

    async def send(self, message: str | bytes) -> None:
        pass

    async def close(self, code: int = 1000, reason: str = "") -> None:
        pass


class CountingClient:
    def __init__(self, upstream: FloodingUpstream, frames: int) -> None:
        self.upstream = upstream
        self.expected = frames
        self.received = 0
        self.closed = asyncio.Event()

    async def recv(self) -> str:
        await self.closed.wait()
        raise ConnectionClosedOK(Close(1000, ""), None)

    async def send(self, message: str | bytes) -> None:
        self.received += 1
        if self.received == self.expected:
            self.upstream.drained.set()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed.set()


async def relay_pass(tools: ToolRegistry, frames: int, burst: int) -> float:
    upstream = FloodingUpstream(frames, burst)
    client = CountingClient(upstream, frames)
    engine = Engine(tools, config=EngineConfig(mode="proxy"))
    loop = SessionLoop(engine, upstream=upstream, client=client, recorder=TrafficTap(Metrics(), None))
    start = time.perf_counter()
    await loop.run()
    assert client.received == frames
    return time.perf_counter() - start


async def inline_pass(frames: int, burst: int) -> float:
    upstream = FloodingUpstream(frames, burst)
    client = CountingClient(upstream, frames)
    start = time.perf_counter()
    try:
        while True:
            await client.send(await upstream.recv())
    except ConnectionClosedOK:
        pass
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=200_000)
    parser.add_argument("--burst", type=int, default=16, help="frames per wake-up of the upstream reader")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    figures = measure(args.frames, args.burst)
    print(f"relay per frame, without sockets: {figures['relay_us_per_frame']:.2f} us "
          f"(inline forwarding {figures['inline_us_per_frame']:.2f} us; the relay adds "
          f"{figures['relay_added_us_per_frame']:.2f} us), bursts of {args.burst}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
