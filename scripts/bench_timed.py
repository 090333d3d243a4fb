"""Timed audio on picows: the load generator of the benchmark's realtime scenario, on both ends
(scripts/bench_clients.py realtime, scripts/bench_upstream.py --transport picows).

At a few hundred sessions, 50 frames/s each way, a generator written on websockets (an asyncio
task per session waking every 20 ms, websockets' framing in Python) takes most of a small
machine's cores, and the figures then measure the generator rather than the proxies. Here a
session is a picows listener (framing in C) and its 20 ms schedule a loop timer, a fraction of
that cost, so the proxies are what runs out first.

The frames and their stamps are bench_frames.py's: the same bytes, whichever generator sends them.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Callable

from picows import WSFrame, WSListener, WSMsgType, WSTransport

from bench_frames import FRAME_INTERVAL_NS, stamp_of

TEXT, CLOSE = WSMsgType.TEXT, WSMsgType.CLOSE


class TimedAudio(WSListener):
    """One session's timed audio: a stamped frame sent every 20 ms from a random phase (sessions
    are not in step; a late frame goes out as soon as the loop gets to it, and how late it was
    is recorded), and, for every stamped frame that arrives, its send time and one-way latency.

    With `on_first_frame` (a client going through a proxy, whose upstream side opens after the
    client's handshake), the schedule starts once the first frame has arrived; without it, once
    the connection opens (after `greeting`, sent first)."""

    def __init__(self, make_frame: Callable[[int], str], *, stamps: list[int], latencies: list[int],
                 lags: list[int], on_first_frame: Callable[[], None] | None = None, greeting: str | None = None) -> None:
        super().__init__()
        self.make_frame = make_frame
        self.stamps, self.latencies, self.lags = stamps, latencies, lags
        self.on_first_frame = on_first_frame
        self.greeting = greeting
        self.ws: WSTransport | None = None
        self._loop = asyncio.get_running_loop()
        self._due = 0
        self._timer: asyncio.TimerHandle | None = None

    def on_ws_connected(self, ws: WSTransport) -> None:
        self.ws = ws
        if self.greeting is not None:
            ws.send(TEXT, self.greeting.encode())
        if self.on_first_frame is None:
            self._start()

    def _start(self) -> None:
        self._due = time.monotonic_ns() + random.randrange(FRAME_INTERVAL_NS)
        self._timer = self._loop.call_later(max(0, self._due - time.monotonic_ns()) / 1e9, self._send)

    def _send(self) -> None:
        ws = self.ws
        if ws is None or ws.is_close_frame_sent or ws.is_disconnected:
            return
        now = time.monotonic_ns()
        self.lags.append(now - self._due)
        ws.send(TEXT, self.make_frame(now).encode())
        self._due += FRAME_INTERVAL_NS
        self._timer = self._loop.call_later(max(0, self._due - time.monotonic_ns()) / 1e9, self._send)

    def on_ws_frame(self, ws: WSTransport, frame: WSFrame) -> None:
        kind = frame.msg_type
        if kind is TEXT:
            arrived = time.monotonic_ns()
            if self.on_first_frame is not None:
                first, self.on_first_frame = self.on_first_frame, None
                first()
                self._start()
                return
            stamp = stamp_of(frame.get_payload_as_utf8_text())
            if stamp is not None:
                self.stamps.append(stamp)
                self.latencies.append(arrived - stamp)
        elif kind is CLOSE:
            if not ws.is_close_frame_sent:   # answered with its code (1000 for none: picows needs one)
                code = frame.get_close_code()
                ws.send_close(code if int(code) else 1000, frame.get_close_message())
            ws.disconnect()

    def on_ws_disconnected(self, ws: WSTransport) -> None:
        if self._timer is not None:
            self._timer.cancel()

    async def close(self, timeout: float) -> None:
        """The closing handshake, the connection dropped if the peer has not answered within
        `timeout`."""
        ws = self.ws
        if ws is None or ws.is_disconnected:
            return
        if self._timer is not None:
            self._timer.cancel()
        if not ws.is_close_frame_sent:
            ws.send_close(1000)
        try:
            await asyncio.wait_for(ws.wait_disconnected(), timeout)
        except TimeoutError:
            ws.disconnect(graceful=False)
