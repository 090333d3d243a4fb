#!/usr/bin/env python3
"""The benchmark's upstream: a minimal realtime server, the same for the direct path, the raw
pass-through proxy and the relay. The mock paces its audio like the real service; this one is
built to flood and to keep timed loads, so the upstream is never what limits a figure. What it
says besides (session.created, answers to the relay's frames, tool-call responses) comes from the
mock's sans-I/O core run in-process (tests/support/local_mock.py), without its pacing.

A connection's query says what it does (the relay and the raw proxy pass the query on):

    mode=flood                  session.created; after the client's response.create, output-audio
                                deltas as fast as the socket takes them
    mode=realtime&trial=T       50 stamped output deltas/s; the latency of every stamped
                                input_audio_buffer.append that arrives is kept for trial T
    mode=tool&trial=T&calls=K&tool=NAME
                                K responses that each call NAME (a relay-owned tool); for each, the
                                time from sending response.done until both the call's output and
                                the follow-up response.create have arrived is kept for trial T
    mode=idle                   session.created, then answers session.update (the relay declaring
                                its tools) and otherwise waits

`/control` is the benchmark's own channel: `{"op": "report", "trial": T, "since_ns": a,
"until_ns": b}` answers with (and forgets) trial T's latencies of frames stamped in [a, b], the
sender's lag behind its 20 ms schedule, and the tool turnarounds.

`--transport picows` serves `mode=realtime`, `mode=idle` and `/control` alone, on picows (scripts/bench_timed.py):
the realtime scenario's upstream, cheap enough that the proxies, not it, run out of CPU first.

Usage: python scripts/bench_upstream.py [--port 0] [--transport websockets|picows]
       (prints its ws:// URL on the first line)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qsl, urlsplit

from picows import WSFrame, WSListener, WSMsgType, WSTransport, WSUpgradeRequest, ws_create_server
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_frames import MAX_FRAME_BYTES, exchange_timed_audio, output_delta, run_announcing, serve_announcing  # noqa: E402
from bench_timed import TimedAudio  # noqa: E402
from tests.support.local_mock import LocalMock, model_call  # noqa: E402


def frames(events: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(event, separators=(",", ":")) for event in events]


@dataclass
class Trial:
    """What one timed run measured on the upstream side."""

    stamps: list[int] = field(default_factory=list)        # send time of each frame received
    latencies: list[int] = field(default_factory=list)     # its one-way latency
    lags: list[int] = field(default_factory=list)          # our own sends: how late against schedule
    turnarounds: list[int] = field(default_factory=list)

    def report(self, since_ns: int, until_ns: int) -> dict[str, Any]:
        latencies = [latency for stamp, latency in zip(self.stamps, self.latencies) if since_ns <= stamp <= until_ns]
        return {"latencies_ns": latencies, "lags_ns": self.lags, "turnarounds_ns": self.turnarounds}


TRIALS: dict[str, Trial] = {}


async def _discard(connection: ServerConnection) -> None:
    try:
        async for _ in connection:
            pass
    except ConnectionClosed:
        pass


async def flood(connection: ServerConnection, query: dict[str, str]) -> None:
    await connection.send(frames(LocalMock(seed=None).connect())[0])
    # the client starts the flood once all its sessions are open (a flooded session slows the others' handshakes)
    while json.loads(await connection.recv())["type"] != "response.create":
        pass
    delta = output_delta(0).encode()
    async with asyncio.TaskGroup() as group:
        group.create_task(_discard(connection))
        try:
            while True:
                await connection.send(delta, text=True)
        except ConnectionClosed:
            pass


async def realtime(connection: ServerConnection, query: dict[str, str]) -> None:
    trial = TRIALS.setdefault(query["trial"], Trial())
    await connection.send(frames(LocalMock(seed=None).connect())[0])
    await exchange_timed_audio(connection, output_delta, stamps=trial.stamps, latencies=trial.latencies,
                               lags=trial.lags)


async def tool_calls(connection: ServerConnection, query: dict[str, str]) -> None:
    """Calls of a relay-owned tool, one at a time, as the real server streams them."""
    trial = TRIALS.setdefault(query["trial"], Trial())
    mock = LocalMock(seed=None)
    for frame in frames(mock.connect()):
        await connection.send(frame)
    # The relay declares its tools with session.update before anything else.
    for frame in frames(mock.receive(await connection.recv())):
        await connection.send(frame)
    for n in range(int(query["calls"])):
        response = frames(mock.respond([model_call(query["tool"], json.dumps({"n": n}))]))
        for frame in response[:-1]:
            await connection.send(frame)
        sent_done = time.monotonic_ns()
        await connection.send(response[-1])   # response.done
        received: list[str] = []
        has_output = has_create = False
        while not (has_output and has_create):
            frame = str(await connection.recv())
            received.append(frame)
            event = json.loads(frame)
            if event["type"] == "response.create":
                has_create = True
            elif event["type"] == "conversation.item.create" and event["item"]["type"] == "function_call_output":
                has_output = True
        trial.turnarounds.append(time.monotonic_ns() - sent_done)
        for frame in received:   # the server's answers: the output item, the follow-up response
            for answer in frames(mock.receive(frame)):
                await connection.send(answer)
    await connection.close(1000, "calls done")


async def idle(connection: ServerConnection, query: dict[str, str]) -> None:
    mock = LocalMock(seed=None)
    await connection.send(frames(mock.connect())[0])
    try:
        async for frame in connection:
            for answer in frames(mock.receive(str(frame))):
                await connection.send(answer)
    except ConnectionClosed:
        pass


def control_answer(message: str) -> str:
    """The answer to a `/control` request (and trial T forgotten)."""
    request = json.loads(message)
    trial = TRIALS.pop(request["trial"], Trial())
    return json.dumps(trial.report(request.get("since_ns", 0), request.get("until_ns", 2**63)))


async def control(connection: ServerConnection) -> None:
    async for message in connection:
        await connection.send(control_answer(str(message)))


MODES: dict[str, Callable[[ServerConnection, dict[str, str]], Awaitable[None]]] = {
    "flood": flood, "realtime": realtime, "tool": tool_calls, "idle": idle,
}


async def handle(connection: ServerConnection) -> None:
    assert connection.request is not None
    target = urlsplit(connection.request.path)
    if target.path == "/control":
        await control(connection)
        return
    query = dict(parse_qsl(target.query))
    mode = MODES.get(query.get("mode", ""))
    if mode is None:
        await connection.close(1008, f"unknown mode {query.get('mode')!r}")
        return
    await mode(connection, query)


# ---- on picows: the realtime scenario's upstream (scripts/bench_timed.py says why) ---------------

class ControlListener(WSListener):
    """`/control` on picows: each request answered as `control` answers it."""

    def on_ws_frame(self, ws: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type is WSMsgType.TEXT:
            ws.send(WSMsgType.TEXT, control_answer(frame.get_payload_as_utf8_text()).encode())
        elif frame.msg_type is WSMsgType.CLOSE:
            ws.send_close(1000)
            ws.disconnect()


class IdleListener(WSListener):
    """`mode=idle` on picows, as `idle` serves it: session.created, then the mock's answers."""

    def __init__(self) -> None:
        super().__init__()
        self.mock = LocalMock(seed=None)

    def on_ws_connected(self, ws: WSTransport) -> None:
        ws.send(WSMsgType.TEXT, frames(self.mock.connect())[0].encode())

    def on_ws_frame(self, ws: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type is WSMsgType.TEXT:
            for answer in frames(self.mock.receive(frame.get_payload_as_utf8_text())):
                ws.send(WSMsgType.TEXT, answer.encode())
        elif frame.msg_type is WSMsgType.CLOSE:
            ws.send_close(1000)
            ws.disconnect()


class RefusingListener(WSListener):
    """A mode this upstream does not serve: closed with 1008, as the websockets upstream does."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason

    def on_ws_connected(self, ws: WSTransport) -> None:
        ws.send_close(1008, self.reason.encode())
        ws.disconnect()


def picows_listener(request: WSUpgradeRequest) -> WSListener:
    target = urlsplit(request.path.decode() if isinstance(request.path, bytes) else request.path)
    if target.path == "/control":
        return ControlListener()
    query = dict(parse_qsl(target.query))
    if query.get("mode") == "idle":   # what the benchmark measures a proxy's idle RSS with
        return IdleListener()
    if query.get("mode") != "realtime":
        return RefusingListener(f"mode {query.get('mode')!r} is served on websockets only")
    trial = TRIALS.setdefault(query["trial"], Trial())
    return TimedAudio(output_delta, stamps=trial.stamps, latencies=trial.latencies, lags=trial.lags,
                      greeting=frames(LocalMock(seed=None).connect())[0])


def serve_picows(port: int) -> None:
    run_announcing(lambda: ws_create_server(picows_listener, "127.0.0.1", port, max_frame_size=MAX_FRAME_BYTES,
                                            websocket_handshake_timeout=60, backlog=1024))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--transport", choices=("websockets", "picows"), default="websockets",
                        help="picows: mode=realtime, mode=idle and /control only, at a fraction of the CPU")
    args = parser.parse_args()
    if args.transport == "picows":
        serve_picows(args.port)
    else:
        serve_announcing(handle, args.port, backlog=1024)


if __name__ == "__main__":
    main()
