#!/usr/bin/env python3
"""The floor any Python relay can approach: a WebSocket pass-through proxy on the relay's own
stack (websockets' asyncio API, no compression, the same frame limit and close timeout) that
forwards every frame as it came, without looking at it. Each client connection gets its own
upstream connection to `--upstream` with the client's path and query.

With `--coalesce` it is that floor given the relay's own way of writing (the session's FrameQueue,
relay/transports/websockets.py's transport and 64 KiB reads): the reader writes each frame itself
when no other waits to be read, a burst in one socket write after its last frame, and a writer
task takes over while the socket is paused. The relay's cost over *that* is what its own logic costs.

Usage: python scripts/bench_rawproxy.py --upstream ws://127.0.0.1:PORT [--port 0] [--coalesce]
       (prints its ws:// URL on the first line)
"""

from __future__ import annotations

import argparse
import asyncio

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from bench_frames import CLOSE_TIMEOUT, MAX_FRAME_BYTES, serve_announcing
from relay.session.transport import BATCH_BYTES, FrameQueue, TransportClosed
from relay.transports.websockets import WebsocketsTransport


async def pipe(source: ServerConnection | ClientConnection, destination: ServerConnection | ClientConnection) -> None:
    """Forward until `source` closes, then close `destination` with the same code."""
    try:
        async for message in source:
            await destination.send(message)
    except ConnectionClosed:
        pass
    code = source.close_code
    await destination.close(1011 if code is None or code in (1005, 1006, 1015) else code, source.close_reason or "")


async def coalescing_pipe(source: ServerConnection | ClientConnection,
                          destination: ServerConnection | ClientConnection) -> None:
    """`pipe` with the relay's way of writing."""
    queue = FrameQueue(2**62)
    reader = WebsocketsTransport(source)   # reads 64 KiB at a time
    writer = WebsocketsTransport(destination)

    async def write() -> None:
        try:
            while True:
                await writer.send(await queue.get_batch(BATCH_BYTES))
        except TransportClosed:
            pass   # `source`'s loop ends too, when the other pipe closes it

    def forward(message: str | bytes, more: bool) -> None:
        if not more and writer.write(queue, message):
            return   # a lone frame, nothing queued ahead of it
        if queue.writer_idle:
            queue.put(message, wake=False)
            writer.write(queue, None, more)   # with more: one write after the burst's last frame
        else:
            queue.put(message)

    writing = asyncio.create_task(write())
    try:
        await reader.receive(forward)
    except TransportClosed:
        pass
    finally:
        writing.cancel()
    code = source.close_code
    await destination.close(1011 if code is None or code in (1005, 1006, 1015) else code, source.close_reason or "")


def proxy_handler(upstream_base: str, coalesce: bool):
    forward = coalescing_pipe if coalesce else pipe

    async def handle(client: ServerConnection) -> None:
        assert client.request is not None
        async with connect(upstream_base + client.request.path, compression=None, max_size=MAX_FRAME_BYTES,
                           close_timeout=CLOSE_TIMEOUT) as upstream:
            async with asyncio.TaskGroup() as group:
                group.create_task(forward(client, upstream))
                group.create_task(forward(upstream, client))
    return handle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, help="ws://host:port of the upstream (no path)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--coalesce", action="store_true", help="send what waits in one socket write")
    args = parser.parse_args()
    serve_announcing(proxy_handler(args.upstream.rstrip("/"), args.coalesce), args.port)


if __name__ == "__main__":
    main()
