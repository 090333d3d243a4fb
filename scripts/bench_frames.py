"""Frames, timed audio and figures shared by the benchmark's processes (upstream, clients,
raw proxy, orchestrator).

Audio frames have the real shape and size: 20 ms of 24 kHz PCM16 is 960 bytes, 1,280 characters of
base64. A frame sent under a timed load carries its send time in its `event_id`
(`time.monotonic_ns()`: CLOCK_MONOTONIC, one clock for every process on the machine), so the
receiver measures the one-way latency without parsing the frame; the relay forwards these frames
untouched, as it forwards every audio frame.
"""

from __future__ import annotations

import asyncio
import base64
import math
import os
import random
import time
from typing import Any, Awaitable, Callable, Iterable

from websockets.asyncio.connection import Connection
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

AUDIO_B64 = base64.b64encode(os.urandom(960)).decode()   # 20 ms of 24 kHz PCM16
# Connection settings shared by every path: no per-message deflate, the relay's frame limit.
MAX_FRAME_BYTES = 16 * 1024 * 1024
CLOSE_TIMEOUT = 1.0   # as relay serve
FRAME_INTERVAL_NS = 20_000_000   # 50 audio frames per second

_DELTA_HEAD = '{"type":"response.output_audio.delta","event_id":"event_'
_DELTA_TAIL = ('","response_id":"resp_bench","item_id":"item_bench","output_index":0,"content_index":0,'
               f'"delta":"{AUDIO_B64}"}}')
_APPEND_HEAD = '{"type":"input_audio_buffer.append","event_id":"event_'
_APPEND_TAIL = f'","audio":"{AUDIO_B64}"}}'


def output_delta(stamp_ns: int) -> str:
    """A `response.output_audio.delta` whose event id holds `stamp_ns`."""
    return f"{_DELTA_HEAD}{stamp_ns}{_DELTA_TAIL}"


def input_append(stamp_ns: int) -> str:
    """An `input_audio_buffer.append` whose event id holds `stamp_ns`."""
    return f"{_APPEND_HEAD}{stamp_ns}{_APPEND_TAIL}"


# GPT-Live's audio frames, as its primary socket carries them (no event id, no timing on the model's
# track): the same audio, under the Live names
_LIVE_DELTA = f'{{"type":"session.output_audio.delta","delta":"{AUDIO_B64}"}}'
_LIVE_APPEND = f'{{"type":"session.input_audio.append","audio":"{AUDIO_B64}"}}'


def live_output_delta(stamp_ns: int = 0) -> str:
    """A GPT-Live `session.output_audio.delta` of the same audio (it has no event id to stamp)."""
    return _LIVE_DELTA


def live_input_append(stamp_ns: int = 0) -> str:
    """A GPT-Live `session.input_audio.append` of the same audio (unstamped, as `live_output_delta`)."""
    return _LIVE_APPEND


def stamp_of(frame: str | bytes) -> int | None:
    """The send time in a stamped audio frame, or None for any other frame."""
    if isinstance(frame, bytes):
        return None
    for head in (_DELTA_HEAD, _APPEND_HEAD):
        if frame.startswith(head):
            end = frame.find('"', len(head))
            return int(frame[len(head):end])
    return None


def percentile(ordered: list[int] | list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list (its last element for fraction 1)."""
    if not ordered:
        return float("nan")
    rank = math.ceil(len(ordered) * fraction - 1e-9)   # the tolerance absorbs float error (0.99 * n)
    return float(ordered[min(max(rank, 1), len(ordered)) - 1])


def latency_summary(samples_ns: Iterable[int]) -> dict[str, float]:
    """p50, p99 and max in milliseconds, and the sample count."""
    ordered = sorted(samples_ns)
    return {"count": len(ordered), "p50_ms": percentile(ordered, 0.50) / 1e6,
            "p99_ms": percentile(ordered, 0.99) / 1e6, "max_ms": percentile(ordered, 1.0) / 1e6}


async def paced_sender(connection: Connection, make_frame: Callable[[int], str], lags: list[int]) -> None:
    """Send one stamped frame every 20 ms from a random phase (sessions are not in step); a late
    frame goes out as soon as it can, and how late it was is recorded."""
    due = time.monotonic_ns() + random.randrange(FRAME_INTERVAL_NS)
    try:
        while True:
            now = time.monotonic_ns()
            if due > now:
                await asyncio.sleep((due - now) / 1e9)
                now = time.monotonic_ns()
            lags.append(now - due)
            await connection.send(make_frame(now))
            due += FRAME_INTERVAL_NS
    except ConnectionClosed:
        pass


async def exchange_timed_audio(connection: Connection, make_frame: Callable[[int], str], *, stamps: list[int],
                               latencies: list[int], lags: list[int],
                               on_first_frame: Callable[[], None] | None = None) -> None:
    """Until the connection closes: send 50 stamped frames/s, and for every stamped frame that
    arrives, record its send time and one-way latency."""
    async with asyncio.TaskGroup() as group:
        sender = group.create_task(paced_sender(connection, make_frame, lags))
        try:
            if on_first_frame is not None:
                await connection.recv()
                on_first_frame()
            async for frame in connection:
                arrived = time.monotonic_ns()
                stamp = stamp_of(frame)
                if stamp is not None:
                    stamps.append(stamp)
                    latencies.append(arrived - stamp)
        except ConnectionClosed:
            pass
        sender.cancel()


def serve_announcing(handler: Callable[[ServerConnection], Awaitable[None]], port: int, **options: Any) -> None:
    """Serve WebSockets on 127.0.0.1 with the settings every path shares, print the URL on the
    first line of stdout (how the orchestrator finds the port), and run until terminated."""
    run_announcing(lambda: serve(handler, "127.0.0.1", port, compression=None, max_size=MAX_FRAME_BYTES,
                                 close_timeout=CLOSE_TIMEOUT, **options))


def run_announcing(open_server: Callable[[], Awaitable[Any]]) -> None:
    """Run the server `open_server` opens (websockets' or asyncio's: either closes as a context
    manager), printing its URL first, until terminated."""

    async def main() -> None:
        async with await open_server() as server:
            bound = next(iter(server.sockets)).getsockname()[1]
            print(f"ws://127.0.0.1:{bound}/v1/realtime", flush=True)
            await server.serve_forever()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
