#!/usr/bin/env python3
"""The benchmark's clients: one process holding every client connection of a trial, pointed at
the upstream directly, at the raw pass-through proxy or at the relay (the URL says which).

    throughput --url U --sessions N --warmup W --seconds S
        N sessions that each send response.create once all are open, and are then flooded with output
        deltas; events/s received by all of them together over S seconds after W.
    realtime --url U --control C --sessions N --warmup W --seconds S
        N sessions that each send 50 stamped input_audio_buffer.append/s while the upstream sends
        them 50 stamped output deltas/s; one-way latency of both directions over S seconds after W.
        These sessions are picows connections (scripts/bench_timed.py: a cheaper load generator).
    tool --url U --control C --calls K --tool NAME
        one session through the relay while the upstream makes K calls of NAME; the turnarounds.
    idle --url U --sessions N --expect-frames F
        N sessions that wait for F frames each, print `ready`, and close on a line on stdin.
    watch --url U
        a page of the live inspector (U: the relay's /inspector/feed): prints `connected` once it has
        the session list, watches the first session that starts after that (`watching`), counts
        what it is sent, and stops on a line on stdin.

Progress lines and the result are JSON lines on stdout: `{"event": "measuring"}` and
`{"event": "measured"}` bracket the window the orchestrator samples CPU and memory over, then
`{"event": "result", ...}`.

Usage: python scripts/bench_clients.py MODE [options]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from typing import Any, Awaitable, Callable
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from picows import ws_connect

from bench_frames import CLOSE_TIMEOUT, MAX_FRAME_BYTES, input_append, latency_summary
from bench_timed import TimedAudio

CONNECT_CONCURRENCY = 50   # under the listen backlog of the servers (asyncio's default is 100)


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def session_url(base: str, **query: Any) -> str:
    return f"{base}?{urlencode({'model': 'bench', **query})}"


async def connect_all(url: str, sessions: int, on_open: Callable[[int, ClientConnection], Awaitable[None]],
                      group: asyncio.TaskGroup) -> list[ClientConnection]:
    """Open `sessions` connections (a bounded number at a time) and start `on_open` for each in
    `group` as soon as it is open."""
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)
    connections: list[ClientConnection | None] = [None] * sessions

    async def open_one(index: int) -> None:
        async with gate:
            connection = await connect(url, compression=None, max_size=MAX_FRAME_BYTES,
                                       close_timeout=CLOSE_TIMEOUT, open_timeout=60)
        connections[index] = connection
        group.create_task(on_open(index, connection))

    async with asyncio.TaskGroup() as opening:
        for index in range(sessions):
            opening.create_task(open_one(index))
    return [c for c in connections if c is not None]


async def all_released(semaphore: asyncio.Semaphore, sessions: int) -> None:
    """Wait until every session has released `semaphore` once (had its first frame: through a
    proxy, the upstream side of a session opens after the client's handshake)."""
    for _ in range(sessions):
        await semaphore.acquire()


async def close_all(connections: list[ClientConnection]) -> None:
    async with asyncio.TaskGroup() as closing:
        for connection in connections:
            closing.create_task(connection.close())


async def throughput(args: argparse.Namespace) -> dict[str, Any]:
    counts = [0] * args.sessions
    cut_off = [False] * args.sessions   # closed by the proxy before the measurement ended
    measured = False
    flowing = asyncio.Semaphore(0)

    async def count(index: int, connection: ClientConnection) -> None:
        try:
            await connection.recv()
            flowing.release()
            async for _ in connection:
                counts[index] += 1
        except ConnectionClosed:
            pass
        cut_off[index] = not measured

    async with asyncio.TaskGroup() as group:
        connections = await connect_all(session_url(args.url, mode="flood"), args.sessions, count, group)
        await all_released(flowing, args.sessions)
        for connection in connections:
            await connection.send('{"type":"response.create"}')
        await asyncio.sleep(args.warmup)
        emit("measuring")
        start, before = time.perf_counter(), list(counts)
        await asyncio.sleep(args.seconds)
        elapsed, after = time.perf_counter() - start, list(counts)
        measured = True
        emit("measured")
        await close_all(connections)
    per_session = [(a - b) / elapsed for a, b in zip(after, before)]
    return {"sessions": args.sessions, "seconds": elapsed, "events_per_s": sum(per_session),
            "slowest_session_events_per_s": min(per_session), "fastest_session_events_per_s": max(per_session),
            "sessions_cut_off": sum(cut_off)}


async def realtime(args: argparse.Namespace) -> dict[str, Any]:
    trial = uuid.uuid4().hex
    stamps: list[int] = []
    latencies: list[int] = []
    lags: list[int] = []
    flowing = asyncio.Semaphore(0)
    url = session_url(args.url, mode="realtime", trial=trial)
    gate = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def open_one() -> TimedAudio:
        async with gate:
            _, session = await ws_connect(
                lambda: TimedAudio(input_append, stamps=stamps, latencies=latencies, lags=lags,
                                   on_first_frame=flowing.release),
                url, websocket_handshake_timeout=60, max_frame_size=MAX_FRAME_BYTES)
        return session   # type: ignore[return-value]

    async with asyncio.TaskGroup() as opening:
        opened = [opening.create_task(open_one()) for _ in range(args.sessions)]
    sessions = [task.result() for task in opened]
    await all_released(flowing, args.sessions)
    await asyncio.sleep(args.warmup)
    emit("measuring")
    since, cpu_since = time.monotonic_ns(), time.process_time()
    lags_from = len(lags)
    await asyncio.sleep(args.seconds)
    until, cpu_until = time.monotonic_ns(), time.process_time()
    emit("measured")
    window_lags = lags[lags_from:]
    async with asyncio.TaskGroup() as closing:
        for session in sessions:
            closing.create_task(session.close(CLOSE_TIMEOUT))
    upstream = await control(args.control, trial, since, until)
    down = [latency for stamp, latency in zip(stamps, latencies) if since <= stamp <= until]
    up = upstream["latencies_ns"]
    expected = args.sessions * 50 * (until - since) / 1e9
    return {
        "sessions": args.sessions, "seconds": (until - since) / 1e9,
        "latency": latency_summary(up + down), "upstream_to_client": latency_summary(down),
        "client_to_upstream": latency_summary(up),
        # below 1: the path (or the load generators) could not keep 50 frames/s per direction
        "delivered_ratio": min(len(up), len(down)) / expected,
        "client_send_lag_p99_ms": latency_summary(window_lags)["p99_ms"],
        "upstream_send_lag_p99_ms": latency_summary(upstream["lags_ns"])["p99_ms"],
        # this process's own CPU over the window: half the load generator (the upstream is the other)
        "clients_cpu_percent": 100 * (cpu_until - cpu_since) * 1e9 / (until - since),
    }


async def tool(args: argparse.Namespace) -> dict[str, Any]:
    trial = uuid.uuid4().hex
    url = session_url(args.url, mode="tool", trial=trial, calls=args.calls, tool=args.tool)
    async with connect(url, compression=None, max_size=MAX_FRAME_BYTES, close_timeout=CLOSE_TIMEOUT) as connection:
        try:
            async for _ in connection:
                pass
        except ConnectionClosed:
            pass
    turnarounds = (await control(args.control, trial))["turnarounds_ns"]
    if len(turnarounds) != args.calls:
        raise SystemExit(f"the upstream saw {len(turnarounds)} of {args.calls} turnarounds")
    return {"calls": args.calls, "tool": args.tool, **latency_summary(turnarounds)}


async def idle(args: argparse.Namespace) -> dict[str, Any]:
    settled = asyncio.Semaphore(0)

    async def wait_settled(index: int, connection: ClientConnection) -> None:
        for _ in range(args.expect_frames):
            await connection.recv()
        settled.release()
        try:
            async for _ in connection:
                pass
        except ConnectionClosed:
            pass

    async with asyncio.TaskGroup() as group:
        connections = await connect_all(session_url(args.url, mode="idle"), args.sessions, wait_settled, group)
        await all_released(settled, args.sessions)
        emit("ready")
        await asyncio.to_thread(sys.stdin.readline)
        await close_all(connections)
    return {"sessions": args.sessions}


async def watch(args: argparse.Namespace) -> dict[str, Any]:
    counts: dict[str, Any] = {"snapshots": 0, "deltas": 0, "bytes": 0, "errors": []}
    async with connect(args.url, subprotocols=["relay-inspector"], compression=None,  # type: ignore[list-item]
                       max_size=None, close_timeout=CLOSE_TIMEOUT) as feed:
        known = {s["id"] for s in json.loads(await feed.recv())["live"]}
        emit("connected")
        watching = None

        async def read() -> None:
            nonlocal watching
            async for message in feed:
                counts["bytes"] += len(message)
                if message.startswith('{"type": "delta"'):
                    counts["deltas"] += 1
                    continue
                parsed = json.loads(message)
                if parsed["type"] == "sessions" and watching is None:
                    started = [s["id"] for s in parsed["live"] if s["id"] not in known]
                    if started:
                        watching = started[-1]
                        await feed.send(json.dumps({"type": "watch", "session": watching}))
                elif parsed["type"] == "snapshot":
                    counts["snapshots"] += 1
                    emit("watching", session=parsed["session"])
                elif parsed["type"] == "error":
                    counts["errors"].append(parsed["message"])

        reader = asyncio.create_task(read())
        await asyncio.to_thread(sys.stdin.readline)
        reader.cancel()
    return counts


async def control(url: str, trial: str, since_ns: int = 0, until_ns: int = 2**63) -> dict[str, Any]:
    async with connect(url, compression=None, max_size=MAX_FRAME_BYTES) as connection:
        await connection.send(json.dumps({"op": "report", "trial": trial, "since_ns": since_ns, "until_ns": until_ns}))
        return json.loads(await connection.recv())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("throughput", "realtime", "tool", "idle", "watch"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--control", help="the upstream's /control URL")
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--tool", default="instant")
    parser.add_argument("--expect-frames", type=int, default=1)
    args = parser.parse_args()
    runner = {"throughput": throughput, "realtime": realtime, "tool": tool, "idle": idle, "watch": watch}[args.mode]
    emit("result", **asyncio.run(runner(args)))


if __name__ == "__main__":
    main()
