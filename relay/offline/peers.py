"""What the harness plugs into the relay's one driver: the relay under test is the relay's own
`SessionLoop` (relay/session/loop.py) on the harness's `VirtualLoop`, and what a test adds to a
live session is transports, a recorder, a store and a clock around it, not a driver of its own.

- `PeerTransport`: one side's socket, in memory, implementing the five methods of the `Transport`
  seam (relay/session/transport.py). What the loop writes on it goes at once to the peer behind it
  (a scripted model, a recording's upstream, which answers nothing, the caller), whose answers
  wait on the harness's wire; the harness hands each waiting frame to the loop's reader as a
  socket's read does (`arrive`: the reader's forwarding rule first, then `deliver`), one at a time
  and never nested, so that what a frame causes arrives after it.
- `KeptFrames` (the loop's recorder: every frame as it crossed, at the virtual time) and
  `Remembered` (the loop's write-ahead store: the engine's records, in order, written at once).
- `HarnessLoop`: the `SessionLoop` as the virtual loop runs it, with the harness's ports: the
  faults and the explorer's perturbations stand in for a handler (`_stand_in`), sync handlers run
  in the virtual loop's own threads, a deadline a tick leaves behind fails the step (the live loop
  logs it). What it does not start is only what the virtual loop does not need: no task group (its
  handlers and readers are plain tasks of the loop, `LoopTasks`), no writer tasks (a peer takes
  every frame the moment it is written: the queues' writers stay asleep and `write` is their
  writer) and no timer task (the engine's deadline is one loop timer, re-armed as a round moves
  it), so that a session's open and close cost what the explorer's thousands of sessions can pay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from relay.engine import Close, Outcome, StartHandler
from relay.engine.records import CallRecord
from relay.session.loop import SessionLoop
from relay.session.runner import LoopTasks, Run, TaskScope
from relay.session.transport import Deliver, Express, Frame, FrameQueue, TransportClosed


class PeerTransport:
    """One side of the relay under test's sockets (see the module docstring). `answer` is the
    peer: it is given each frame the relay writes, at once, in order. `express`: each frame read
    is offered to the reader's express lane first, as the live transports do; without it every
    frame goes to `deliver`, the engine's round (the seam allows it: the same forwarding, decided
    by the engine, at more cost per audio frame and less per other frame)."""

    def __init__(self, answer: Callable[[Frame], None], *, express: bool = True) -> None:
        self.answer = answer
        self.offers_express = express
        self.closed: tuple[int, str] | None = None   # the code and reason of the relay's close
        self._deliver: Deliver | None = None
        self._express: Express | None = None
        self._held: list[Frame] | None = None   # frames that arrived while reading was held
        self._ended: asyncio.Future[None] | None = None
        self.overheard: Callable[[Frame], None] | None = None
        """Who else is sent each frame the relay reads here, as it reads it (a sidecar's
        application, on its own connection to the same server session)."""

    def read_by(self, deliver: Deliver | None, express: Express | None = None) -> None:
        """Who reads what arrives from now on (`receive`'s two; None: nobody, the session is
        over): the harness's reading, which needs no reader task, as the harness hands each frame
        on itself (`arrive`)."""
        self._deliver, self._express = deliver, express if self.offers_express else None

    def arrive(self, frame: Frame) -> None:
        """A frame from the peer, read: handed on as a transport hands on what it reads (kept
        while reading is held; dropped once nobody reads: the session is over)."""
        if self._held is not None:
            self._held.append(frame)
            return
        if self.overheard is not None:
            self.overheard(frame)
        deliver, express = self._deliver, self._express
        if deliver is None:
            return
        if express is None or not express(frame, False):
            deliver(frame, False)

    async def receive(self, deliver: Deliver, express: Express | None = None) -> None:
        self.read_by(deliver, express)
        self._ended = ended = asyncio.get_running_loop().create_future()
        try:
            await ended
        finally:
            self.read_by(None)
        code, reason = self.closed or (1006, "")
        raise TransportClosed(code, reason, received=False, initiated_here=self.closed is not None)

    def hold_reading(self, held: bool) -> None:
        if held:
            if self._held is None:
                self._held = []
            return
        waiting, self._held = self._held or [], None
        for frame in waiting:
            self.arrive(frame)

    async def send(self, frames: Sequence[Frame]) -> None:
        if self.closed is not None:
            raise TransportClosed(*self.closed, received=False, initiated_here=True)
        for frame in frames:
            self.answer(frame)

    def write(self, queue: FrameQueue, frame: Frame | None = None, soon: bool = False) -> bool:
        """Everything, at once: the peer takes each frame as it is written, so a lone frame goes
        out unless frames wait ahead of it, and the queue is emptied (its writer stays asleep)."""
        if frame is not None:
            if queue.frames:
                return False
            self.answer(frame)
            return True
        answer, frames = self.answer, queue.frames
        while queue.full:   # (never, as every write empties it: taken as a writer takes it)
            for waiting in queue.take_batch():
                answer(waiting)
        while frames:
            waiting = frames.popleft()
            queue.size -= len(waiting)
            answer(waiting)
        return True

    async def close(self, code: int | None, reason: str = "", *, abort: bool = False) -> None:
        if code is not None or abort:
            self.closed = (code if code is not None else 1006, reason)
            self.ended()

    def ended(self) -> None:
        """The connection is over: the reader's `receive` ends."""
        ended = self._ended
        if ended is not None and not ended.done():
            ended.set_result(None)


class KeptFrames:
    """The loop's recorder: every frame that crossed, given to `keep(direction, frame)` as it
    crossed, and every relay line (a tool call's notice, a handler's finish) to `note(kind,
    fields)` (the harness numbers and times them)."""

    def __init__(self, keep: Callable[[str, Frame], None], note: Callable[[str, dict[str, Any]], None]) -> None:
        self.record = keep
        self.record_notice = note

    def close(self, reason: str) -> None:
        """Nothing to close."""


class Remembered:
    """The loop's write-ahead store: the engine's records, kept in order, written at once."""

    def __init__(self, records: list[CallRecord]) -> None:
        self.records = records

    def write_now(self, record: CallRecord) -> bool:
        self.records.append(record)
        return True

    async def write(self, record: CallRecord) -> None:
        self.write_now(record)

    def session_ended(self, session_id: str) -> None:
        """The records stay: the harness's session is looked at after it ended."""


class HarnessLoop(SessionLoop):
    """The relay's `SessionLoop` as the harness runs it on its virtual loop (see the module
    docstring). `harness` is the `relay.offline.harness.HarnessSession` it tells of a handler's
    start and report, of each round's end and of a relay close; the rest as the loop's."""

    def __init__(self, harness: Any, loop: asyncio.AbstractEventLoop, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.harness = harness
        self._loop = loop
        self._timer_handle: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None

    def open(self) -> None:
        """Start the session on the virtual loop: its handler runner on the loop's tasks (sync
        handlers in its threads), each socket read by the loop's reader (its express lane and
        `deliver`) as the harness hands frames on, the writers asleep."""
        # what a task raises fails the harness's step, as a task group would fail the session
        loop, tasks = self._loop, LoopTasks(self._loop, on_error=self.harness.task_failed)
        self._task_group = tasks   # type: ignore[assignment]   # what `act_close` and write-aheads start on
        self._run_handlers(tasks, cancel_scope=TaskScope, run_sync=loop.run_in_thread,   # type: ignore[arg-type]
                           block_seconds=self.block_seconds, handler_scope=self.handler_scope)
        for queue in (self.to_upstream, self.to_client):
            queue.waiter = loop.create_future()   # asleep for good: the peer's `write` takes every frame
        self.upstream.read_by(*self._upstream_reader())   # type: ignore[attr-defined]
        if self.client is not None:
            self.client.read_by(*self._client_reader())   # type: ignore[attr-defined]

    async def finish(self, by: str, code: int, reason: str) -> None:
        """The session's end (a relay close, a socket's close): at once, as `stop`."""
        self.stop(by, code, reason)

    def stop(self, by: str, code: int, reason: str) -> bool:
        """End the session now (False: it had ended): the engine told, handlers cancelled, both
        sockets closed, the readers and the timer stopped."""
        if self.end is not None:
            return False
        self.harness.closed = True   # what the engine sends as it closes still goes out; nothing comes in
        self.end_now(by, code, reason)
        for peer in (self.upstream, self.client):
            if peer is not None:   # closed: nothing more is read or taken
                peer.closed = peer.closed or (code, reason)   # type: ignore[union-attr]
                peer.read_by(None)   # type: ignore[union-attr]
                peer.ended()   # type: ignore[union-attr]
        if self._timer_handle is not None:
            self._timer_handle.cancel()
            self._timer_handle = self._timer_at = None
        if self.write_ahead is not None:
            self.write_ahead.session_ended(self.engine.session_id)
        return True

    # ---- the harness's ports ---------------------------------------------------------------------
    def act_start_handler(self, action: StartHandler) -> None:
        self.harness.act_start_handler(action)

    def start_handler(self, action: StartHandler) -> None:
        """The runner starts the call's handler (or what stands in for it: `_stand_in`)."""
        super().act_start_handler(action)

    def _stand_in(self, action: StartHandler) -> Run | None:
        return self.harness._stand_in(action)   # type: ignore[no-any-return]

    def _handler_finished(self, call_id: str, outcome: Outcome) -> None:
        self.harness._handler_finished(call_id, outcome)

    def report_finished(self, call_id: str, outcome: Outcome) -> None:
        """A handler's outcome to the engine, as every driver gives it."""
        super()._handler_finished(call_id, outcome)

    def act_close(self, action: Close) -> None:
        self.harness.relay_closes(action)
        super().act_close(action)

    def _round_over(self, outermost: bool, more: bool) -> None:
        """The loop's writes and notices, the harness's look, then what the round's frames
        caused handed on (unless a pump under way carries on with it)."""
        SessionLoop._round_over(self, outermost, more)
        harness = self.harness
        harness._round_over(outermost, more)
        if outermost and not harness._pumping and harness._inbox:
            harness._pump()

    # ---- the timer: one loop timer ------------------------------------------------------------
    def _wake_timer(self) -> None:
        """The back-pressure's next check moved: the loop timer re-armed for it."""
        self._deadline_moved(self.engine.next_deadline())

    def _deadline_moved(self, deadline: float | None) -> None:
        """The engine's deadline moved (or the back-pressure's next check): the loop timer
        re-armed for the nearer (a deadline a tick left behind is not fired again)."""
        if self.end is not None:
            return
        self._armed_deadline = deadline
        due, check = (None if deadline == self._stuck_deadline else deadline), self.flow.next_check()
        if check is not None:
            due = check if due is None else min(due, check)
        if due == self._timer_at:
            return
        if self._timer_handle is not None:
            self._timer_handle.cancel()
        self._timer_at = due
        self._timer_handle = None if due is None else self._loop.call_at(due, self._timer_fires)

    def _timer_fires(self) -> None:
        self._timer_handle = self._timer_at = None
        if self.end is not None:
            return
        now = self.clock()
        if self.flow.next_check() is not None:
            self.flow.check(now)
        deadline = self._next_due()
        if deadline is not None and deadline <= now:
            self._fire_deadline(now)
        self._wake_timer()

    def _deadline_left_behind(self, now: float, after: float) -> None:
        # firing that deadline again would never move virtual time, and the step would hang: it
        # fails instead, and the deadline is not fired again
        self.harness.fail("a deadline ahead after the engine's timer fired",
                          f"a deadline its tick did not move ({now - after:.3f} s in the past)")
