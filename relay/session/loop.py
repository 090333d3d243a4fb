"""The async edge of one session: move frames between sockets and the engine, run handlers.

One task group per session (anyio): a reader per socket, a writer per socket fed by a bounded
queue, a timer that calls `engine.tick` when the engine's next deadline comes, and one task per
running handler (via HandlerRunner). Every decision is the engine's; this module only carries
out its actions. Cancellation flows down the tree; nothing is spawned without an owner. (While a
writer task sleeps, its queue is written by the reader's step or an event-loop callback instead,
see `Transport.write`: a synchronous step, not a task, that only ever writes to the socket or
wakes the writer.) The sockets are `Transport`s (relay/session/transport.py), whichever library
holds them: the edges open them and hand them over. What the loop tolerates and which close
codes it sends are `relay.session.policy`'s; the error event a client gets is its dialect's.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import anyio
import anyio.abc

from relay.engine import (
    Close,
    Engine,
    Notice,
    Outcome,
    SendClient,
    SendUpstream,
)
from relay.engine.actions import TOOL_CALL
from relay.recording.format import (
    CLIENT_TO_RELAY,
    HANDLER_FINISHED_NOTE,
    HANDLER_YIELDED_NOTE,
    RELAY_TO_CLIENT,
    RELAY_TO_UPSTREAM,
    UPSTREAM_TO_RELAY,
)
from relay.recording.redact import Echoes, Redactor
from relay.recording.taps import Recorder
from relay.session.driver import LOOP_BLOCKED, DriverCore
from relay.session.flow import BackPressure
from relay.session.policy import (
    BAD_GATEWAY,
    DEFAULT_HOLD_BACK_BYTES,
    DEFAULT_QUEUE_BYTES,
    DEFAULT_STALL_SECONDS,
    INTERNAL_ERROR,
    NORMAL_CLOSURE,
    POLICY_VIOLATION,
    EventBudget,
    closed_for_peer_fault,
    sendable_close_code,
    short_close_reason,
)
from relay.session.runner import DEFAULT_BLOCK_SECONDS, HandlerScope
from relay.session.pipe import Pipe, express_lane, pipe_for
from relay.session.transport import (
    BATCH_BYTES,
    Deliver,
    Express,
    Frame,
    FrameQueue,
    QueueOverflow,
    Transport,
    TransportClosed,
)
from relay.store.writeahead import WriteAhead

log = logging.getLogger("relay.session")



class _Signal:
    """A loop's `anyio.Event` (`started`, `ended`), made when first asked for (set if what it
    signals has happened): a session nobody waits on (the harness's, by thousands) makes none."""

    def __init__(self, happened: Callable[[Any], bool]) -> None:
        self.happened, self.slot = happened, ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, loop: Any, owner: type | None = None) -> Any:
        if loop is None:
            return self
        event = getattr(loop, self.slot)
        if event is None:
            event = anyio.Event()
            if self.happened(loop):
                event.set()
            setattr(loop, self.slot, event)
        return event


@dataclass
class SessionEnd:
    """Why a session ended: who closed, with which code and reason."""

    by: str
    code: int
    reason: str


class SessionLoop(DriverCore):
    """Runs one engine between an upstream socket and, in proxy mode, a client socket: the live
    driver of the engine (relay/session/driver.py), whose ports are the sockets' queues."""

    def __init__(
        self,
        engine: Engine,
        *,
        upstream: Transport,
        client: Transport | None = None,
        clock: Callable[[], float] = time.time,
        recorder: Recorder | None = None,
        on_notice: Callable[[Notice], None] | None = None,
        max_queue_bytes: int = DEFAULT_QUEUE_BYTES,
        hold_back_bytes: int | None = DEFAULT_HOLD_BACK_BYTES,
        stall_seconds: float = DEFAULT_STALL_SECONDS,
        close_timeout: float = 1.0,
        thread_limit: int = 8,
        client_budget: EventBudget | None = None,
        redactor: Redactor | None = None,
        handler_scope: HandlerScope | None = None,
        block_seconds: float = DEFAULT_BLOCK_SECONDS,
        write_ahead: WriteAhead | None = None,
    ) -> None:
        self._init_driver(engine, write_ahead=write_ahead)   # where the engine's records go (None: nowhere)
        self.upstream = upstream
        self.client = client
        self.clock = clock
        self.recorder = recorder
        self.on_notice = on_notice
        self.close_timeout = close_timeout
        self.thread_limit = thread_limit
        self.to_upstream = FrameQueue(max_queue_bytes, hold_back_bytes)
        self.to_client = FrameQueue(max_queue_bytes, hold_back_bytes)
        # a full queue pauses the reading of the side its frames come from; the timer watches it
        self.flow = BackPressure(self.to_client, self.to_upstream, self._source_of, clock=clock,
                                 stall_seconds=stall_seconds, on_watch=self._wake_timer, on_stalled=self._overflow)
        self._held: list[str] = []      # sides whose frames wait for the round to end
        self._untold: list[Notice] = []   # notices told once the frames of their actions are written
        self._to_upstream: Pipe | None = None   # the client reader's pipe (its peer follows `upstream`)
        self.client_budget = client_budget   # None: the client may send as fast as it likes
        self.redactor = redactor   # applied to every frame for the client: the provider may echo a secret
        self._echoes = Echoes(redactor) if redactor is not None else None   # ... split across its deltas too
        self.handler_scope = handler_scope   # what each handler runs in (its tracing span)
        self.block_seconds = block_seconds   # a handler step holding the event loop this long is told
        self.end: SessionEnd | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        # the events are made when first needed (by `run`, or by whoever waits: `_Signal`)
        self._timer_wake: anyio.Event | None = None
        self._armed_deadline: float | None = None
        self._overflowed_sides: set[str] = set()
        self._peer_replaced: anyio.Event | None = None
        self._started: anyio.Event | None = None
        self._ended: anyio.Event | None = None

    # ---- lifecycle ---------------------------------------------------------------------
    started = _Signal(lambda loop: loop._task_group is not None)   # the session's tasks are started
    ended = _Signal(lambda loop: loop.end is not None)   # the session has ended (`end`)

    async def run(self, on_end: Callable[[str], None] | None = None) -> SessionEnd:
        """Run the session until it ends; how it ended. With `on_end`, the edge's: it is called
        with the reason however the loop ended, and a loop that failed or was cancelled closes the
        upstream itself (INTERNAL_ERROR), so that no provider connection is left open."""
        try:
            async with anyio.create_task_group() as task_group:
                self._task_group = task_group
                self._run_handlers(task_group, thread_limit=self.thread_limit, handler_scope=self.handler_scope,
                                   block_seconds=self.block_seconds)
                task_group.start_soon(self._read_upstream, name="upstream reader")
                task_group.start_soon(self._write, self.to_upstream, "upstream", name="upstream writer")
                if self.client is not None:
                    task_group.start_soon(self._read_client, name="client reader")
                    task_group.start_soon(self._write, self.to_client, "client", name="client writer")
                task_group.start_soon(self._timer, name="timer")
                self.started.set()
        finally:
            if self.write_ahead is not None:
                self.write_ahead.session_ended(self.engine.session_id)
            if on_end is not None:
                on_end(self.end.reason if self.end is not None else "relay error")
                if self.end is None:
                    await close_quietly(self.upstream, INTERNAL_ERROR, "relay error", self.close_timeout)
        assert self.end is not None
        return self.end

    def end_now(self, by: str, code: int, reason: str) -> bool:
        """`finish`'s first step, at once: the session's end said, the engine told (what it sends
        as it closes still goes out), every handler cancelled. False: it had ended already."""
        if self.end is not None:
            return False
        self.end = SessionEnd(by, code, reason)
        if self._ended is not None:
            self._ended.set()
        self._apply(self.engine.close(self.clock(), reason or f"{by} closed"))
        if self._runner is not None:
            self._runner.cancel_all()
        return True

    async def finish(self, by: str, code: int, reason: str) -> None:
        """End the session: tell the engine, close both sockets, stop every task."""
        if not self.end_now(by, code, reason):
            return
        with anyio.CancelScope(shield=True):   # each close is bounded by close_timeout
            async with anyio.create_task_group() as closers:
                if by != "upstream":
                    closers.start_soon(close_quietly, self.upstream, NORMAL_CLOSURE if by == "client" else code, reason,
                                       self.close_timeout)
                if self.client is not None and by != "client":
                    # the upstream's reason, perhaps cut short, may hold a secret it echoes
                    client_reason = self.redactor.cut(reason) if self.redactor is not None else reason
                    closers.start_soon(close_quietly, self.client, code, client_reason, self.close_timeout)
        if self._task_group is not None:
            self._task_group.cancel_scope.cancel()

    # ---- readers -----------------------------------------------------------------------
    async def _read_upstream(self) -> None:
        upstream = self.upstream
        try:
            await upstream.receive(*self._upstream_reader())
        except TransportClosed as closed:
            if upstream is self.upstream:   # not a socket the session moved off (`replace_upstream`)
                await self.upstream_lost(closed)

    def _upstream_reader(self) -> tuple[Deliver, Express]:
        """What the upstream's reader hands each frame to (`Transport.receive`'s two): the express
        lane, and `deliver` (recorded, then the engine's round)."""
        recorder, apply, clock, receive = self.recorder, self._apply, self.clock, self.engine.receive_upstream
        express = forwarding(self, UPSTREAM_TO_RELAY, self.engine.forwards_upstream)

        def deliver(frame: Frame, more: bool) -> None:
            if recorder is not None:
                recorder.record(UPSTREAM_TO_RELAY, frame)
            apply(receive(frame, clock()), more)   # what it queues is written as the round ends

        return deliver, express

    async def upstream_lost(self, closed: TransportClosed) -> None:
        """The upstream socket closed. The proxy ends the session and passes the code on; the
        sidecar overrides this to reconnect (and then calls `replace_upstream`)."""
        code, reason = closed.code, closed.reason
        if self.end is None and closed_for_peer_fault(closed):
            # the transport closed the upstream for what it sent: passed on as is, the code would
            # tell the client that *its* data was bad
            log.warning("the upstream sent an invalid frame; closing the session", extra={
                "session_id": self.engine.session_id, "code": code, "reason": reason})
            await self.finish("upstream", BAD_GATEWAY, f"the upstream sent an invalid frame ({code} {reason})")
            return
        if self.end is None:   # not the echo of a close the session itself started
            log.info("upstream closed the session", extra={"session_id": self.engine.session_id,
                                                           "code": code, "reason": reason})
        await self.finish("upstream", sendable_close_code(code), reason)

    async def _read_client(self) -> None:
        assert self.client is not None
        try:
            await self.client.receive(*self._client_reader())
        except TransportClosed as closed:
            await self.finish("client", closed.code, closed.reason)

    def _client_reader(self) -> tuple[Deliver, Express]:
        """`_upstream_reader`'s for the client: its frames within its budget (`client_budget`);
        one over it cuts the client off (nothing more of it forwarded, `_client_too_fast`)."""
        recorder, apply, clock, receive = self.recorder, self._apply, self.clock, self.engine.receive_client
        budget = self.client_budget
        express = forwarding(self, CLIENT_TO_RELAY, self.engine.forwards_client, budget)
        pipe = self._to_upstream = express.pipe   # type: ignore[attr-defined]
        rule = pipe.rule

        def deliver(frame: Frame, more: bool) -> None:
            if not rule.cut_off and (budget is None or budget.take()):
                if recorder is not None:
                    recorder.record(CLIENT_TO_RELAY, frame)
                apply(receive(frame, clock()), more)
                return
            if recorder is not None:
                recorder.record(CLIENT_TO_RELAY, frame)
            if rule.cut_off:
                return   # read on, so that the client's answer to the close is seen
            rule.cut_off = True
            assert self._task_group is not None
            self._task_group.start_soon(self._client_too_fast, budget)

        return deliver, express

    async def _client_too_fast(self, budget: EventBudget) -> None:
        """Tell the client why it is closed (an `error` event where its protocol has one; the
        close reason in any case), then close it."""
        assert self.client is not None
        message = budget.refusal()
        log.warning("client sends events too fast; closing it",
                    extra={"session_id": self.engine.session_id, "limit": budget.per_second})
        if self.on_notice is not None:
            self.on_notice(Notice("client_error", {"code": budget.code, "message": message}))
        event = self.engine.dialect.client_error_event(f"{self.engine.id_prefix}_e0", budget.code, message)
        if event is not None:
            frame = json.dumps(event)
            if self.recorder is not None:
                self.recorder.record(RELAY_TO_CLIENT, frame)
            with anyio.move_on_after(self.close_timeout):
                try:
                    await self.client.send([frame])
                except TransportClosed:
                    pass
        await self.finish("relay", *budget.close)

    # ---- writers -----------------------------------------------------------------------
    async def _write(self, queue: FrameQueue, side: str) -> None:
        while True:
            frames = await queue.get_batch(BATCH_BYTES)
            peer = self.upstream if side == "upstream" else self.client
            assert peer is not None
            try:
                await peer.send(frames)
            except TransportClosed:
                queue.push_back_front(frames)  # the reader sees the close and decides what follows
                await self.wait_for_peer(side, peer)

    async def wait_for_peer(self, side: str, failed: Transport) -> None:
        """A send on `failed` failed because the socket closed: wait until `replace_upstream`
        puts another socket on that side. In the proxy that never happens: the session ends
        and cancels this wait."""
        while (self.upstream if side == "upstream" else self.client) is failed:
            if self._peer_replaced is None:
                self._peer_replaced = anyio.Event()
            await self._peer_replaced.wait()

    def replace_upstream(self, upstream: Transport) -> None:
        """Carry on over a new upstream socket (the sidecar's reconnect). A new reader starts;
        the writer resends the frame the old socket failed to take, then the rest of its queue,
        so nothing queued for the old socket is lost."""
        assert self._task_group is not None, "the loop is not running"
        self.upstream = upstream
        if self._to_upstream is not None:
            self._to_upstream.peer = upstream
        replaced, self._peer_replaced = self._peer_replaced, None
        if replaced is not None:
            replaced.set()
        self._task_group.start_soon(self._read_upstream, name="upstream reader")

    # ---- timer -------------------------------------------------------------------------
    def _wake_timer(self) -> None:
        if self._timer_wake is not None:
            self._timer_wake.set()

    def _deadline_moved(self, deadline: float | None) -> None:
        """A round moved the engine's next deadline (to `deadline`) from the one the timer waits for."""
        self._wake_timer()

    def _source_of(self, side: str) -> Transport | None:
        """The socket whose frames fill `side`'s queue (none once the session is over)."""
        if self.end is not None:
            return None
        return self.upstream if side == "client" else self.client

    async def _timer(self) -> None:
        """The engine's deadlines, and the back-pressure's stall checks while a queue is full.
        A deadline that a tick leaves in the past (the engine's fault) is logged and ignored:
        ticking again at once would never yield, freezing every session of the process."""
        while True:
            self._armed_deadline = self.engine.next_deadline()
            deadline = self._next_due()
            self._timer_wake = anyio.Event()
            due, check = deadline, self.flow.next_check()
            if check is not None:
                due = check if deadline is None else min(deadline, check)
            if due is None:
                await self._timer_wake.wait()
                continue
            delay = due - self.clock()
            if delay > 0:
                with anyio.move_on_after(delay):
                    await self._timer_wake.wait()
                    continue
            now = self.clock()
            if check is not None:
                self.flow.check(now)
            if deadline is not None and deadline <= now:
                self._fire_deadline(now)

    # ---- the driver's ports (relay/session/driver.py) -------------------------------------
    def _moment(self) -> float:
        return self.clock()

    def _start_task(self, work: Callable[..., Awaitable[Any]], *args: Any, name: str) -> bool:
        if self._task_group is None or self.end is not None:
            return False
        self._task_group.start_soon(work, *args, name=name)
        return True

    def _handler_blocked(self, call_id: str, tool: str, seconds: float) -> None:
        """A step of a handler held the event loop (every session of the process) `seconds`: a
        `loop_blocked` notice, told at once, for the edge's log line and metric."""
        if self.on_notice is not None:
            self.on_notice(Notice(LOOP_BLOCKED, {"call_id": call_id, "name": tool, "seconds": round(seconds, 3)}))

    def _round_over(self, outermost: bool, more: bool) -> None:
        """After the engine's actions: write what they queued, one write per side (for a reader's
        frame with `more` of its read to come, after the last frame of its burst:
        `_release_held`), then tell their notices: a notice's log line, metrics and trace span
        come after the writes, so they never hold a tool's output back from the model. A round
        started while another is under way leaves the writes and the notices to that one."""
        deadline = self.engine.next_deadline()
        if deadline != self._armed_deadline:
            self._deadline_moved(deadline)
        if outermost:
            if self._held:
                self._release_held(more)
            if self._untold:
                self._tell_untold()

    def _tell_untold(self) -> None:
        """The notices of the frames just written, to `on_notice`."""
        while self._untold:
            untold, self._untold = self._untold, []
            if self.on_notice is not None:
                for notice in untold:
                    self.on_notice(notice)

    # ---- the engine's actions: where frames, notices and closes go (the rest: DriverCore) ----
    def act_send_client(self, action: SendClient) -> None:
        self._enqueue(self.to_client, "client", action.frame)

    def act_send_upstream(self, action: SendUpstream) -> None:
        self._enqueue(self.to_upstream, "upstream", action.frame)

    def _handler_finished(self, call_id: str, outcome: Outcome) -> None:
        """The recording says where the handler finished, among the frames, before what it causes."""
        if self.recorder is not None:
            self.recorder.record_notice(HANDLER_FINISHED_NOTE, self._finish_note(call_id))
        super()._handler_finished(call_id, outcome)

    def _handler_yielded(self, call_id: str, value: Any) -> None:
        """As a finish: where a streaming handler's value came, among the frames."""
        if self.recorder is not None:
            self.recorder.record_notice(HANDLER_YIELDED_NOTE, self._finish_note(call_id))
        super()._handler_yielded(call_id, value)

    def act_notice(self, action: Notice) -> None:
        if action.kind == TOOL_CALL and self.recorder is not None:
            self.recorder.record_notice(action.kind, action.fields)
        self._untold.append(action)

    def act_close(self, action: Close) -> None:
        if self._task_group is not None:
            self._task_group.start_soon(self.finish, "relay", action.code, action.reason)

    def _enqueue(self, queue: FrameQueue, side: str, frame: Frame) -> None:
        if side == "client":
            if self.client is None:
                return
            if self._echoes is not None:
                frame = self._echoes.frame(frame)
        if self.recorder is not None:
            self.recorder.record(RELAY_TO_CLIENT if side == "client" else RELAY_TO_UPSTREAM, frame)
        try:
            if queue.waiter is not None:   # the writer sleeps (`writer_idle`)
                queue.put(frame, wake=False)   # written as the round ends (`_release_held`)
                if side not in self._held:
                    self._held.append(side)
            else:
                queue.put(frame)
        except QueueOverflow as overflow:
            self._overflow(side, overflow)

    def _overflow(self, side: str, overflow: QueueOverflow) -> None:
        """`side` does not read what it is sent: closed, once (the frames that keep coming until
        the close are dropped)."""
        if self.end is None and self._task_group is not None and side not in self._overflowed_sides:
            self._overflowed_sides.add(side)
            log.warning("%s is not reading: %s; closing it", side, overflow,
                        extra={"session_id": self.engine.session_id})
            self._task_group.start_soon(self._overflowed, side)

    def _release_held(self, more_to_read: bool) -> None:
        """After the reader's frame: write what it queued now, unless more frames of its read
        wait to be handed on at once (`more_to_read`: a burst), in which case one write after the
        last of them covers them all (the callback stays as a safety net, should the next frame
        wait after all). Not a reader's frame: now."""
        for side in self._held:
            if side == "client":
                peer, queue = self.client, self.to_client
            else:
                peer, queue = self.upstream, self.to_upstream
            assert peer is not None
            peer.write(queue, None, more_to_read)
        self._held.clear()

    async def _overflowed(self, side: str) -> None:
        peer = self.client if side == "client" else self.upstream
        if peer is not None:
            await close_quietly(peer, POLICY_VIOLATION, f"{side} is not reading its frames", self.close_timeout)
        await self.finish("relay", POLICY_VIOLATION if side == "client" else INTERNAL_ERROR,
                          f"{side} is not reading its frames")


def forwarding(session: SessionLoop, received: str, passes: Callable[[Frame], bool],
               budget: EventBudget | None = None) -> Express:
    """The express lane of `session`'s reader of `received`'s frames (`Transport.receive`): its
    forwarding pipe (relay/session/pipe.py) to the other side, built here, once, of the engine's
    frame kinds (`passes`: `engine.forwards_upstream` / `forwards_client`) and the session's
    parts (the other side's socket and queue, the recorder, the redactor of a client's frames,
    the client's budget). This is all the forwarding reads of the session: the lane reads its
    pipe."""
    up = received == UPSTREAM_TO_RELAY
    return express_lane(pipe_for(passes, received, peer=session.client if up else session.upstream,
                                 queue=session.to_client if up else session.to_upstream, recorder=session.recorder,
                                 redactor=session.redactor if up else None, budget=budget))


async def close_quietly(peer: Transport, code: int, reason: str, timeout: float = 1.0) -> None:
    """Close with the closing handshake when the peer answers within `timeout`; otherwise drop the
    TCP connection, so that a peer that never answers (or cannot: it stopped reading) does not keep
    a socket, and a provider session, open."""
    code, reason = sendable_close_code(code), short_close_reason(reason)
    with anyio.move_on_after(timeout, shield=True):
        try:
            await peer.close(code, reason)
            return
        except Exception as exc:  # closing an already broken socket is not worth a crash
            log.debug("close failed: %r", exc)
    await peer.close(code, reason, abort=True)
