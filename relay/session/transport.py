"""The transport seam: what the session loop and the edges need of a WebSocket library, so that
everything above it (the loop, the handshake's rules, the edges, the live inspector) is written
once whichever library carries the frames. One module per library implements it in
relay/transports/ (websockets.py): the relay's own sockets (its sessions, its port's handshakes,
the live inspector's feed) reach a WebSocket library only through it.

    Backend.connect(url, ...)   -> Transport         the relay's connection to the provider
    Backend.serve(handler, ...) -> Listener          clients in: `decide(Request)` answers or
                                                     refuses each handshake (an `Answer`), or
                                                     lets it open and calls `handler(transport,
                                                     request)`

A `Transport` is one open WebSocket, five methods: messages are handed to a callback as they
arrive (`receive`; a library that reads with `await recv()` loops over it, one that calls
listeners delivers from them), offered first to the reader's forwarding rule; reading stops and
resumes with the other side's queue (`hold_reading`); frames go out in batches, from the loop's
writer task (`send`) or straight from a reader's step, now or at the loop's next turn (`write`),
out of a `FrameQueue`, or, for a lone frame with nothing queued ahead of it, at once (`write`
with the frame); `close` closes it (or drops it, or waits for the peer's close). What closes it
comes back as `TransportClosed`: the close code and reason, whether the peer sent a close frame,
and which side began the close.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import weakref
from collections import deque
from typing import Awaitable, Callable, Protocol, Sequence

from relay.errors import RelayError
from relay.session.http import Answer, Request

log = logging.getLogger("relay.session")

Frame = str | bytes
Deliver = Callable[[Frame, bool], None]
"""A reader's step (`Transport.receive`): `deliver(message, more)`; `more`: another message of the
same read follows at once."""
Express = Callable[[Frame, bool], bool]
"""A reader's express lane (`Transport.receive`): `express(message, more)` takes a message there
and then (True) or leaves it to `deliver` (False); `more` as `deliver`'s. The session's is the
Python lane of its reader's forwarding pipe (relay/session/pipe.py), which it carries as
`express.pipe`."""


# what a writer takes from its queue at once and hands to the socket in one write (a frame bigger
# than this goes alone): asyncio's default high-water mark, so a batch adds no more to the socket
# buffer than flow control already allows
BATCH_BYTES = 64 * 1024


class TransportClosed(RelayError):
    """The connection is closed (raised by `Transport.receive` and `Transport.send`).

    `code` and `reason` are the close frame's: the peer's when it sent one, else the one this
    side sent, else 1006 (no close frame at all: the connection was lost). `received`: the peer
    sent a close frame. `initiated_here`: this side (the relay, or its library on its behalf, e.g.
    for a protocol error of the peer's) sent the first close frame."""

    def __init__(self, code: int, reason: str, *, received: bool, initiated_here: bool) -> None:
        super().__init__(f"connection closed: {code} {reason}".rstrip())
        self.code = code
        self.reason = reason
        self.received = received
        self.initiated_here = initiated_here


class QueueOverflow(RelayError):
    pass


class QueueWatcher(Protocol):
    """Who a `FrameQueue` tells that it passed its mark, and that it drained (the session's
    back-pressure, relay/session/flow.py). Called from the per-frame path, maybe outside any task."""

    def queue_full(self, queue: FrameQueue) -> None: ...

    def queue_drained(self, queue: FrameQueue) -> None: ...


class FrameQueue:
    """Frames on their way to one socket, bounded by the bytes it holds: a peer that stops
    reading is cut off, not buffered without end. The loop's writer task waits on it
    (`get_batch`); a transport's `write` empties it while that task sleeps.

    Back-pressure: once `high_water` bytes wait, it is `full` and tells its `watcher`
    (`queue_full`: the loop stops reading the side these frames come from); once a take leaves a
    quarter of that or less, `queue_drained`. `takes_while_full` counts the takes in between: a
    peer that takes nothing for long is not reading.

    Under audio load the writer empties the queue after nearly every frame, so the wake-up is on
    the per-frame path: it is a bare asyncio future (every backend runs on an asyncio loop), not a
    new `anyio.Event` each time (whose backend lookup costs more than the rest of the hand-off)."""

    __slots__ = ("max_bytes", "frames", "size", "waiter", "high_water", "low_water", "full", "takes_while_full",
                 "watcher", "_fills_at")

    def __init__(self, max_bytes: int, high_water: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.frames: deque[Frame] = deque()   # read by a transport's `write` (anything left?); changed only here
        self.size = 0
        # the writer task's wake-up while it sleeps (None while it is awake): read by the compiled
        # forwarding lane (relay/transports/_picows_lane.pyx) as `writer_idle`
        self.waiter: asyncio.Future[None] | None = None
        # under the limit, so that the relay's own frames still fit once its source is paused (no
        # mark asked: full only at the limit, where `put` refuses)
        self.high_water = max_bytes if high_water is None else min(high_water, max_bytes // 2)
        self.low_water = self.high_water // 4
        self.full = False
        self.takes_while_full = 0
        self.watcher: QueueWatcher | None = None
        self._fills_at = self.high_water   # `size` that makes it full; past any size once it is

    def _filled(self) -> None:
        self.full = True
        self.takes_while_full = 0
        self._fills_at = 1 << 62
        if self.watcher is not None:
            self.watcher.queue_full(self)

    def _drained(self) -> None:
        self.full = False
        self._fills_at = self.high_water
        if self.watcher is not None:
            self.watcher.queue_drained(self)

    def __len__(self) -> int:
        return len(self.frames)

    def put(self, frame: Frame, *, wake: bool = True) -> None:
        """Queue `frame`; `wake=False` leaves the writer asleep (whoever put it sends it, or calls
        `wake`)."""
        size = self.size + len(frame)
        if size > self.max_bytes:
            raise QueueOverflow(f"{size} bytes queued, over the limit of {self.max_bytes}")
        self.frames.append(frame)
        self.size = size
        if size >= self._fills_at:
            self._filled()
        if wake:
            self.wake()

    def fits(self, frame: Frame) -> bool:
        """`frame` can be queued now (`put` and `hold` would not refuse it)."""
        return self.size + len(frame) <= self.max_bytes

    def hold(self, frame: Frame) -> int:
        """Queue `frame` without waking the writer: how many frames wait for a `write` while it
        sleeps (whoever queued them writes them), 0 when it is awake (it takes them itself). The
        reader's per-frame `put`."""
        size = self.size + len(frame)
        if size > self.max_bytes:
            raise QueueOverflow(f"{size} bytes queued, over the limit of {self.max_bytes}")
        frames = self.frames
        frames.append(frame)
        self.size = size
        if size >= self._fills_at:
            self._filled()
        return len(frames) if self.waiter is not None else 0

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    @property
    def writer_idle(self) -> bool:
        """The writer sleeps until it is woken: it holds no frame on its way to the socket."""
        return self.waiter is not None

    def push_back_front(self, frames: Sequence[Frame]) -> None:
        """Put back, in their order, frames a writer took but could not send."""
        self.frames.extendleft(reversed(frames))
        self.size += sum(len(frame) for frame in frames)
        if self.size >= self._fills_at:
            self._filled()
        if frames:
            self.wake()

    def take_batch(self, max_bytes: int = BATCH_BYTES) -> list[Frame]:
        """The frames waiting, oldest first, as many as fit in `max_bytes` (at least one, if any):
        what has piled up goes to the socket in one write."""
        frames = self.frames
        if self.size <= max_bytes:   # all of them (a flooded reader's burst, one write)
            batch = list(frames)
            frames.clear()
            self.size = 0
        else:
            first = frames.popleft()
            taken = len(first)
            batch = [first]
            while frames and taken + len(frames[0]) <= max_bytes:
                frame = frames.popleft()
                batch.append(frame)
                taken += len(frame)
            self.size -= taken
        if self.full and batch:
            self.takes_while_full += 1
            if self.size <= self.low_water:
                self._drained()
        return batch

    def take_unsent(self, max_bytes: int = BATCH_BYTES) -> list[Frame]:
        """What a `Transport.write` writes: `take_batch` while the writer task sleeps; nothing while it is
        awake (it sends what waits itself, after the batch it holds)."""
        return self.take_batch(max_bytes) if self.waiter is not None else []

    async def get_batch(self, max_bytes: int = BATCH_BYTES) -> list[Frame]:
        """`take_batch`, once there is something to take (the writer task's wait)."""
        while not self.frames:
            self.waiter = asyncio.get_running_loop().create_future()
            await self.waiter
        return self.take_batch(max_bytes)


class Writable(Protocol):
    """What a `FlushRound` writes: a transport (its `Transport.write`)."""

    def write(self, queue: FrameQueue, frame: Frame | None = None, soon: bool = False) -> bool: ...


class FlushRound:
    """The `write(queue, soon=True)`s asked for on one event loop, carried out together in one callback at the
    loop's next turn. A flooded reader asks for one per read (its burst's safety net: the write
    after its last frame covers it, should the burst stop short); one loop callback per read cost
    more than the rest of the read's Python, so asking is a dict insert, and one callback serves
    every session that asked in the same turn. A transport has one flush pending at most (asked
    again before it runs: nothing more); they run in the order they were asked for, each only if
    its queue still holds frames; one that fails is logged and the others still run, as separate
    callbacks would."""

    __slots__ = ("_loop", "_pending")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)   # the loop keeps its round (in _ROUNDS), not the other way
        self._pending: dict[Writable, FrameQueue] = {}

    def add(self, transport: Writable, queue: FrameQueue) -> None:
        """`transport.write(queue)` at the loop's next turn, unless one is pending already."""
        pending = self._pending
        if transport in pending:
            return
        pending[transport] = queue
        if len(pending) == 1:
            loop = self._loop()
            if loop is not None:
                loop.call_soon(self._run)

    def _run(self) -> None:
        pending, self._pending = self._pending, {}
        for transport, queue in pending.items():
            if queue.frames:   # mostly not: the write after the burst's last frame took them
                try:
                    transport.write(queue)
                except Exception:   # one transport's fault is not the others'
                    log.exception("a scheduled flush failed")


_ROUNDS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FlushRound] = weakref.WeakKeyDictionary()


def flush_round(loop: asyncio.AbstractEventLoop) -> FlushRound:
    """The `FlushRound` of `loop` (one per loop, made on first use)."""
    round_ = _ROUNDS.get(loop)
    if round_ is None:
        round_ = _ROUNDS[loop] = FlushRound(loop)
    return round_


class Transport(Protocol):
    """One open WebSocket, whichever library holds it: what the session loop, the edges and the
    live inspector's feed do with a connection. Five methods, what every transport must do: read
    (`receive`, with the reader's forwarding rule), stop reading (`hold_reading`, back-pressure),
    write from a task (`send`, which waits for the socket) and from a reader's step (`write`, which
    never waits), and close (`close`: the handshake, an abort, or waiting for the peer's)."""

    async def receive(self, deliver: Deliver, express: Express | None = None) -> None:
        """Hand every message (text as str, binary as bytes) to `deliver(message, more)`, in
        order, as it arrives, until the connection closes; then raise TransportClosed (it never
        returns). `more`: another message of the same read is delivered at once, without waiting
        for the socket (a burst), so the reader's step can leave its writes to one `write` after
        the last of them. On its per-frame path a transport offers the message to `express`
        first (the reader's forwarding rule, `relay.session.pipe.express_lane`; its `Pipe` is
        `express.pipe`, which a transport that reads raw payloads may run itself), and `deliver`
        gets it only if that did not take it (returned False); a message `express` is not offered
        (a fragmented one, say) goes to `deliver`, which handles every message alike, only at more
        cost. What either raises ends `receive` with it. Both are synchronous: they run on the
        per-frame path. `deliver` runs in the context of the task that called `receive` (a library
        that reads in its own callbacks makes that task the current one); `express` needs no task
        context, so a library may call it straight from its read callback, the cheapest path an
        audio frame can take."""

    def hold_reading(self, held: bool) -> None:
        """`held`: hand no more messages on until `hold_reading(False)` (back-pressure: the other
        side's queue is full): the socket is no longer read, and TCP slows the peer down; what
        the library has read already waits in the transport (or the library) and comes once
        reading resumes, in order. Only the transport can stop its socket's reads, so this stays
        on the seam (the loop's `BackPressure` calls it from the queue's per-frame path)."""

    async def send(self, frames: Sequence[Frame]) -> None:
        """Send `frames` in order, in one write when the library allows, once the socket takes
        data (waiting while flow control holds it): the loop's writer task. TransportClosed: the
        connection is closed and none of `frames` went out."""

    def write(self, queue: FrameQueue, frame: Frame | None = None, soon: bool = False) -> bool:
        """Now, synchronously, what `queue`'s writer task would send while it sleeps, so that a
        reader's step (or an event-loop callback) writes instead of waking that task; the queue
        says what is pending.

        - `write(queue)`: the frames `queue` holds while its writer task sleeps
          (`queue.writer_idle`), as far as the socket takes data; what cannot be written now is
          left to the writer task, woken (`queue.wake()`). A transport that cannot write
          synchronously just wakes it.
        - `write(queue, soon=True)`: the same once the code running now yields to the event loop
          (one pending per transport: `FlushRound`), the safety net of a burst's writes.
        - `write(queue, frame)`: `frame`, on its way to the end of `queue`, written alone at once
          if nothing waits ahead of it (the queue empty, its writer asleep) and the socket takes
          data now: a lone frame at realtime pace goes out without the queue's round trip.
          False: nothing was written (queue it instead).

        True otherwise."""

    async def close(self, code: int | None, reason: str = "", *, abort: bool = False) -> None:
        """The closing handshake with `code` and `reason` (what policy.sendable_close_code and
        short_close_reason allow); returns once the connection is closed. `abort`: drop the TCP
        connection at once, without a handshake, and return (a peer that does not answer, or
        cannot). `code` None, without `abort`: begin no close, and return once the connection is
        closed by either side, whether or not anyone reads."""


# ---- opening and serving connections ----------------------------------------------------------

class HandshakeFailed(RelayError):
    """Opening a connection failed in its WebSocket handshake: `status` is the HTTP status of a
    refusal (with its `phrase`), None when the server answered with something else or nothing."""

    def __init__(self, message: str, *, status: int | None = None, phrase: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.phrase = phrase


class InvalidURL(RelayError):
    """The URL to connect to is not a WebSocket URL the library can use."""


Handler = Callable[[Transport, Request], Awaitable[None]]
"""Serves one accepted connection; the connection is closed when it returns."""

Decide = Callable[[Request], Answer | None]
"""A handshake's verdict: an HTTP answer (a refusal, or an endpoint's reply), or None to open
the WebSocket."""

ChooseSubprotocol = Callable[[Sequence[str]], str | None]
"""The subprotocol to answer from those a client offers (None: none)."""


class Listener(Protocol):
    """A listening server (what `Backend.serve` returns)."""

    @property
    def address(self) -> tuple[str, int]:
        """The host and port it listens on (the port chosen when 0 was asked)."""

    def stop_accepting(self) -> None:
        """Close the listening socket; open connections go on."""

    def close(self) -> None:
        """Stop accepting and close every open connection (1001)."""

    async def wait_closed(self) -> None:
        """Return once `close` has closed everything and the handlers have returned."""


class Backend(Protocol):
    """One WebSocket library behind the seam (relay/transports/)."""

    name: str

    async def connect(self, url: str, *, headers: dict[str, str], max_frame_bytes: int, open_timeout: float,
                      user_agent: str, logger: logging.Logger | logging.LoggerAdapter) -> Transport:
        """Open a client connection. Raises HandshakeFailed (refused, or no WebSocket answer),
        InvalidURL, TimeoutError (no handshake within `open_timeout`), OSError (unreachable)."""

    async def serve(self, handler: Handler, host: str, port: int, *, decide: Decide,
                    subprotocol: ChooseSubprotocol, max_frame_bytes: int, server_header: str,
                    logger: logging.Logger | logging.LoggerAdapter, tls: ssl.SSLContext | None = None,
                    reuse_port: bool = False) -> Listener:
        """Listen on `host`:`port`. Every request is shown to `decide` as a `Request` (whatever
        its method or HTTP version: health checks and probes get their answers too); an Answer
        is sent as the reply, None opens the WebSocket, with `subprotocol`'s choice, and runs
        `handler`. Raises OSError when the address cannot be had."""
