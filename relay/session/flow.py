"""Back-pressure between the two sides of a session: when the frames waiting for one side pass
its queue's mark (`FrameQueue.high_water`), the other side's socket is no longer read, so TCP
slows its sender down as it would without the relay in between, and the session holds a bounded
amount for a slow reader instead of cutting it off; reading resumes once a quarter is left. A side
that takes nothing at all while its queue is full is not reading: after `stall_seconds` it is
closed as one whose queue overflowed (`SessionLoop._overflow`).

The queue calls in from the reader's per-frame path, maybe from a transport's read callback,
outside any task: nothing here starts a task. The session's timer task looks at the full queues
(`next_check`, `check`) beside the engine's deadlines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from relay.session.transport import FrameQueue, QueueOverflow, Transport


@dataclass(slots=True)
class Stall:
    """A full queue being watched: its takes when last seen to change, since when, and when to
    look again."""

    takes: int
    since: float
    next_check: float


class BackPressure:
    """The back-pressure of one session's two queues, the `QueueWatcher` of both (one object per
    session, and a dict of stalls only while a queue is full: sessions are many, full queues few)."""

    __slots__ = ("to_client", "to_upstream", "source_of", "clock", "stall_seconds", "on_watch", "on_stalled",
                 "stalls")

    def __init__(self, to_client: FrameQueue, to_upstream: FrameQueue, source_of: Callable[[str], Transport | None],
                 *, clock: Callable[[], float], stall_seconds: float, on_watch: Callable[[], None],
                 on_stalled: Callable[[str, QueueOverflow], None]) -> None:
        """`source_of(side)`: the socket whose frames fill `side`'s queue ("client": the
        upstream's; None: none to pause, e.g. a sidecar's, or the session is over); `on_watch`: a
        queue is newly watched (the timer looks again); `on_stalled(side, why)`: `side` stopped
        reading."""
        self.to_client, self.to_upstream = to_client, to_upstream
        self.source_of = source_of
        self.clock = clock
        self.stall_seconds = stall_seconds
        self.on_watch = on_watch
        self.on_stalled = on_stalled
        self.stalls: dict[str, Stall] | None = None
        to_client.watcher = to_upstream.watcher = self

    def _side(self, queue: FrameQueue) -> str:
        return "client" if queue is self.to_client else "upstream"

    def _queue(self, side: str) -> FrameQueue:
        return self.to_client if side == "client" else self.to_upstream

    def queue_full(self, queue: FrameQueue) -> None:
        """A queue passed its mark: stop reading the side that fills it, and watch the queue."""
        side = self._side(queue)
        source = self.source_of(side)
        if source is None:
            return   # a sidecar's upstream queue (filled by handlers alone, bounded by its limit)
        source.hold_reading(True)
        now = self.clock()
        if self.stalls is None:
            self.stalls = {}
        self.stalls[side] = Stall(queue.takes_while_full, now, now + self.stall_seconds / 4)
        self.on_watch()

    def queue_drained(self, queue: FrameQueue) -> None:
        """A queue is down to a quarter of its mark: read the side that fills it again."""
        side = self._side(queue)
        if self.stalls is not None:
            self.stalls.pop(side, None)
        source = self.source_of(side)
        if source is not None:
            source.hold_reading(False)

    def next_check(self) -> float | None:
        """When the timer should call `check` next (None: no queue is full)."""
        if not self.stalls:
            return None
        return min(stall.next_check for stall in self.stalls.values())

    def check(self, now: float) -> None:
        """Every quarter of `stall_seconds` while a queue is full: a side that has taken nothing
        from it for `stall_seconds` is not reading."""
        for side, stall in list((self.stalls or {}).items()):
            if now < stall.next_check:
                continue
            queue = self._queue(side)
            if queue.takes_while_full != stall.takes:
                stall.takes, stall.since = queue.takes_while_full, now
            elif now - stall.since >= self.stall_seconds:
                del self.stalls[side]   # type: ignore[union-attr]
                self.on_stalled(side, QueueOverflow(f"nothing taken for {self.stall_seconds:g} s with "
                                                    f"{queue.size} bytes queued"))
                continue
            stall.next_check = now + self.stall_seconds / 4
