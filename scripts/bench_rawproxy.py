#!/usr/bin/env python3
"""The floor any Python relay can approach: a WebSocket pass-through proxy on the relay's own
stack (websockets' asyncio API, no compression, the same frame limit and close timeout) that
forwards every frame as it came, without looking at it. Each client connection gets its own
upstream connection to `--upstream` with the client's path and query.

Usage: python scripts/bench_rawproxy.py --upstream ws://127.0.0.1:PORT [--port 0]
       (prints its ws:// URL on the first line)
"""

from __future__ import annotations

import argparse
import asyncio

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from bench_frames import CLOSE_TIMEOUT, MAX_FRAME_BYTES, serve_announcing


async def pipe(source: ServerConnection | ClientConnection, destination: ServerConnection | ClientConnection) -> None:
    """Forward until `source` closes, then close `destination` with the same code."""
    try:
        async for message in source:
            await destination.send(message)
    except ConnectionClosed:
        pass
    code = source.close_code
    await destination.close(1011 if code is None or code in (1005, 1006, 1015) else code, source.close_reason or "")


def proxy_handler(upstream_base: str):
    async def handle(client: ServerConnection) -> None:
        assert client.request is not None
        async with connect(upstream_base + client.request.path, compression=None, max_size=MAX_FRAME_BYTES,
                           close_timeout=CLOSE_TIMEOUT) as upstream:
            async with asyncio.TaskGroup() as group:
                group.create_task(pipe(client, upstream))
                group.create_task(pipe(upstream, client))
    return handle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, help="ws://host:port of the upstream (no path)")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    serve_announcing(proxy_handler(args.upstream.rstrip("/")), args.port)


if __name__ == "__main__":
    main()
