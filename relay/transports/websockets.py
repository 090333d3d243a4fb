"""The session's fast read and write path: the one place that reaches into websockets' and
asyncio's internals, so that the dependency pin (`websockets>=14,<18` in pyproject.toml) guards
this file alone.

Checked with CPython 3.11's asyncio against websockets 14.0, 14.1, 14.2, 15.0.1, 16.0, 16.1.1,
17.0 and 17.4: tests/test_socket_writer.py and tests/test_session_loop.py on each, the whole
suite on 14.2, 15.0.1, 16.1.1 and 17.4 (on the last two, one test of how websockets prints an
invalid UTF-8 frame in its debug log fails: it prints hex there). What it touches, beyond
websockets' documented API:

- `Connection.protocol`: the connection's sans-I/O protocol object; its `send_text`,
  `send_binary`, `data_to_send` and `state` (documented for the sans-I/O layer, not for reaching
  into a running asyncio connection) frame messages without websockets' `send`.
- `Connection.transport`: its `write`, `is_closing` and `abort` (asyncio's transport API), and
  `max_size`, an attribute of asyncio's selector socket transport (how much one read takes).
- `Connection.paused`: websockets' flow-control flag (the transport asked it to stop writing).
- `Connection.send_context()`: the async context manager websockets' own `send` writes inside
  (state checks, flow control, close handling).
- `Connection.recv_messages.frames`: the frames the assembler read from the socket but has not
  handed out yet.

Each use degrades to the plain path for a peer that lacks it (test doubles, TLS transports):
`socket_writer` gives None, the chunk size is left alone, `has_buffered_message` says False.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Sequence

from websockets.asyncio.connection import Connection as WebSocketConnection
from websockets.protocol import State as WebSocketState

if TYPE_CHECKING:
    from relay.session.loop import FrameQueue

# the most asyncio reads from a socket at once: its default (256 KiB) is over glibc's mmap
# threshold, so each read could map and unmap a fresh buffer (see read_in_smaller_chunks)
READ_BYTES = 64 * 1024
# what a writer takes from its queue at once and hands to the socket in one write (a frame bigger
# than this goes alone): the transport's own high-water mark, so a batch adds no more to the
# socket buffer than flow control already allows
BATCH_BYTES = 64 * 1024


class SocketWriter:
    """Writes frames to a websockets connection with as few socket writes and task switches as
    the moment allows; `socket_writer` gives one for a websockets connection, None for any other
    peer (test doubles), which then gets one `send` per frame from the writer task.

    - `flush`: frames a reader queued while the writer task sleeps are written by the reader
      itself once it is done with its frame and no other frame waits to be read at once (see
      SessionLoop._release_held): a lone frame at real-time pace costs no wake-up of the writer
      task (which costs more than the relay's own work on the frame), and a burst the reader
      takes in one go (the model streams audio faster than real time) becomes one socket write.
    - `flush_soon`: the same from a callback once the producing code (a handler's completion,
      the timer, a reader in the middle of a burst) yields to the event loop.
    - `send`: the writer task's path, when the socket is paused or the callback left frames:
      what waits goes in one write, inside the connection's own `send_context` (state checks,
      flow control, close handling: what websockets' `send` uses).

    Both frame the messages with the connection's sans-I/O protocol. The callback writes only
    while the connection is open and its transport neither paused nor closing; otherwise it
    wakes the writer task, which waits for the socket."""

    def __init__(self, connection: WebSocketConnection) -> None:
        self.connection = connection
        self._flush_scheduled = False
        self._loop: asyncio.AbstractEventLoop | None = None   # looked up once: each lookup is a system call

    def _frame_and_write(self, frames: Sequence[str | bytes]) -> None:
        protocol = self.connection.protocol
        for frame in frames:
            if isinstance(frame, str):
                protocol.send_text(frame.encode())
            else:
                protocol.send_binary(frame)
        # data frames in the OPEN state only ever add frame bytes (never the empty chunk that
        # means end of stream), so the chunks can be joined
        chunks = protocol.data_to_send()
        self.connection.transport.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))

    def writable(self) -> bool:
        """The socket takes data now: open, and its transport neither paused nor closing."""
        connection = self.connection
        return not connection.paused and connection.protocol.state is WebSocketState.OPEN \
            and not connection.transport.is_closing()

    def flush_soon(self, queue: FrameQueue) -> None:
        """Have what `queue` holds written once the current code yields (see the class)."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            if self._loop is None:
                self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self._scheduled_flush, queue)

    def _scheduled_flush(self, queue: FrameQueue) -> None:
        self._flush_scheduled = False
        self.flush(queue)

    def flush(self, queue: FrameQueue) -> None:
        """Write what `queue` holds now, while its writer task sleeps and the socket takes data;
        leave the rest to the writer task."""
        while queue and queue.writer_idle and self.writable():
            self._frame_and_write(queue.take_batch(BATCH_BYTES))
        if queue:
            queue.wake()   # paused or closing: the writer task waits for the socket

    async def send(self, frames: Sequence[str | bytes]) -> None:
        async with self.connection.send_context():
            self._frame_and_write(frames)


def socket_writer(peer: Any) -> SocketWriter | None:
    """A SocketWriter for a websockets connection; None for any other peer."""
    return SocketWriter(peer) if isinstance(peer, WebSocketConnection) else None


def read_in_smaller_chunks(peer: Any) -> None:
    """Have asyncio read `peer`'s socket at most READ_BYTES at a time.

    For every read, asyncio allocates a buffer of its read size, 256 KiB, and shrinks it to what
    came. That size is over glibc's mmap threshold: whenever the heap has no such block free,
    each read maps fresh pages and unmaps them (page faults, TLB flushes). Under real-time audio
    load, with a frame or two per read, that kernel work took a quarter of `relay serve`'s CPU
    (perf, 150 sessions); 64 KiB buffers come from the heap. A message over 64 KiB takes several
    reads, as it would anyway. Transports without that setting (TLS) are left alone."""
    transport = getattr(peer, "transport", None)
    if transport is not None and isinstance(getattr(transport, "max_size", None), int):
        transport.max_size = READ_BYTES


def has_buffered_message(peer: Any) -> bool:
    """Whether the next `recv` on `peer` returns at once: websockets keeps the frames it has read
    from the socket but not yet handed out in its assembler. Unknown peers: False."""
    try:
        return len(peer.recv_messages.frames) > 0
    except AttributeError:
        return False


def abort(peer: Any) -> None:
    """Drop the TCP connection under `peer` without a closing handshake (a peer that does not
    answer the close); peers without a transport (test doubles) are left as they are."""
    transport = getattr(peer, "transport", None)
    if transport is not None:
        transport.abort()
