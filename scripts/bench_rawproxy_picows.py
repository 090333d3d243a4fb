#!/usr/bin/env python3
"""The floor of the relay's fast transport: a WebSocket pass-through proxy on picows alone, on
the event loop the relay runs on (uvloop where it is installed). Each frame is forwarded from
picows' frame callback with one `send` of its payload's memoryview, as it came (its opcode and
fin bit): nothing is decoded, looked at, checked, queued or batched. Each client connection gets
its own upstream connection to `--upstream` with the client's path and query; what a client
sends before that connection is open waits in a list. A close frame is answered and passed on
with its code; a dropped connection drops the other.

`scripts/bench` runs it beside the relay (the `raw_picows` path of the throughput scenario): the
relay on picows against it is what the relay's own work costs over the library it stands on,
measured in the same run as HAProxy.

Usage: python scripts/bench_rawproxy_picows.py --upstream ws://127.0.0.1:PORT [--port 0]
       (prints its ws:// URL on the first line)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from typing import Any

from picows import WSFrame, WSListener, WSMsgType, WSTransport, WSUpgradeRequest, ws_connect, ws_create_server

from bench_frames import MAX_FRAME_BYTES

CLOSE, PING, PONG = WSMsgType.CLOSE, WSMsgType.PING, WSMsgType.PONG


class Half(WSListener):
    """One connection of a proxied session: what it receives goes to `peer`'s connection."""

    def __init__(self) -> None:
        super().__init__()
        self.ws: WSTransport | None = None
        self.peer: Half | None = None
        self.early: list[tuple[WSMsgType, bytes, bool]] = []   # received before the peer was open

    def on_ws_connected(self, ws: WSTransport) -> None:
        self.ws = ws

    def on_ws_frame(self, ws: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        peer = self.peer.ws if self.peer is not None else None
        if kind is CLOSE:
            code, reason = frame.get_close_code(), frame.get_close_message()
            ws.send_close(code, reason)
            ws.disconnect()
            if peer is not None and not peer.is_close_frame_sent:
                peer.send_close(code, reason)
                peer.disconnect()
        elif kind is PING or kind is PONG:
            return   # picows answers pings itself
        elif peer is not None:
            peer.send(kind, frame.get_payload_as_memoryview(), frame.fin)
        else:
            self.early.append((kind, frame.get_payload_as_bytes(), frame.fin))

    def on_ws_disconnected(self, ws: WSTransport) -> None:
        peer = self.peer.ws if self.peer is not None else None
        if peer is not None and not peer.is_disconnected:
            peer.disconnect()

    # flow control, as any proxy needs: while this connection's socket is over its high-water
    # mark, the peer's is not read (else one flooded session takes the whole event loop)
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.ws is not None:
            self.peer.ws.underlying_transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.ws is not None:
            self.peer.ws.underlying_transport.resume_reading()

    def opened(self, peer: Half) -> None:
        """`peer`'s connection is open: what waited for it goes now, in order."""
        self.peer = peer
        assert peer.ws is not None
        if self.ws is None or self.ws.is_disconnected:   # gone while the upstream opened
            peer.ws.disconnect()
            return
        for kind, payload, fin in self.early:
            peer.ws.send(kind, payload, fin)
        self.early.clear()


async def open_upstream(client: Half, url: str) -> None:
    upstream = Half()
    upstream.peer = client   # its first frames (session.created) may come before ws_connect returns
    try:
        await ws_connect(lambda: upstream, url, max_frame_size=MAX_FRAME_BYTES, websocket_handshake_timeout=60)
    except Exception:   # the upstream refused or is gone: so is the client
        if client.ws is not None:
            client.ws.send_close(1011, b"upstream unreachable")
            client.ws.disconnect()
        return
    client.opened(upstream)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, help="ws://host:port of the upstream (no path)")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    upstream_base = args.upstream.rstrip("/")
    logging.getLogger("picows").setLevel(logging.ERROR)   # its line per pause and resume of a socket
    tasks: set[asyncio.Task[Any]] = set()   # the upstream connections being opened (kept from the GC)

    def on_upgrade(request: WSUpgradeRequest) -> WSListener:
        client = Half()
        path = request.path.decode() if isinstance(request.path, bytes) else request.path
        task = asyncio.get_running_loop().create_task(open_upstream(client, upstream_base + path))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return client

    async def serve() -> None:
        server = await ws_create_server(on_upgrade, "127.0.0.1", args.port, max_frame_size=MAX_FRAME_BYTES,
                                        websocket_handshake_timeout=60, backlog=1024)
        async with server:
            print(f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/realtime", flush=True)
            await server.serve_forever()

    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        runner(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
