"""One attached call: the relay's tools beside a live call, on its sideband (what `relay attach`
and `relay sidecar` both run: relay/edges/attach.py, relay/edges/sidecar.py).

Many voice agents carry their audio over WebRTC (browser to provider) or SIP (phone to provider):
no audio passes through a server. OpenAI (and Azure, GA) let a server open a second WebSocket on
the same session with `?call_id=<id>`, the sideband: it receives every server event and may send
client events. The sidecar attaches there, so tools run on the server, next to the application's
secrets and databases, while the call flows elsewhere.

    browser / phone <==audio==> provider <==ws ?call_id==> Sidecar (Engine + SidebandLoop)

The call has another writer (the browser or the SIP gateway) whose events the sidecar never sees.
The engine (mode `sidecar`) copes with that: it answers only the calls of its own tools, never
sends `response.create` while a response is active, and retries one refused as "already active"
after the next `response.done`. This module only connects, reconnects when the sideband drops
while the call lives, logs and records. `relay attach` attaches to one call given by its id;
`relay sidecar` to every incoming SIP call its webhooks announce. The configuration
(`SidecarConfig`) is relay/edges/config.py's, the command lines relay/cli/attach.py's and
relay/cli/sidecar.py's.

With a shared store (`--store redis://`), the session is the call: its records are kept under the
call's id, and once attached it is held under a lease (relay/store/lease.py) that its owner
renews. An owner that loses the lease stops the call's tool work at once (no output sent, no
handler started: its writes are fenced, and the loop drops what they guarded) and detaches. A
replica that takes a call over (`takeover=True`) attaches, then takes the lease, then reads the
old owner's records and finishes every owed call once (relay/edges/takeover.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import anyio

from relay.dialects import live
from relay.dialects.live import LiveDialect
from relay.dialects.openai import OpenAIFamily
from relay.edges.config import EdgeRuntime, SidecarConfig
from relay.edges.takeover import (RUN, Adoption, Handovers, adopt, adopt_live, kept_records, output_of,
                                  resend_if_lost)
from relay.edges.upstream import UpstreamUnavailable
from relay.engine import CallState, Engine, LiveEngine, Notice, OpenAIEngine, Outcome, SendUpstream, StartHandler, new_engine
from relay.engine.actions import TOOL_CALL
from relay.engine.calls import CallOutcome
from relay.observe.logs import log_notice
from relay.observe.tracing import SessionTrace, Tracing, tracing_for
from relay.recording.taps import FrameTap, Taps
from relay.recording.writer import RecordingWriter
from relay.session.loop import SessionEnd, SessionLoop, close_quietly
from relay.session.policy import (
    DETACHED_CODE,
    INTERNAL_ERROR,
    NORMAL_CLOSURE,
    ended_in_failure,
)
from relay.session.transport import Transport, TransportClosed
from relay.store.lease import SessionLease

if TYPE_CHECKING:   # the live inspector is imported only by a command that serves it (startup)
    from relay.inspector.live import LiveHub, LiveTap

__all__ = ["CallEnded", "Sidecar", "call_field", "SidecarConfig", "SidecarRuntime", "SidebandLoop"]

log = logging.getLogger("relay.sidecar")

Sleep = Callable[[float], Awaitable[None]]
HANDED_TO_PEER = "handed_to_peer"   # a stopped call's outcome once another replica owns its session
HANDLER_POLL_SECONDS = 0.05   # how often a handoff looks whether the call's handlers are done
Tap = Callable[[str, str | bytes], None]


class CallEnded(UpstreamUnavailable):
    """The provider does not know the call (the sideband handshake got HTTP 404): it has ended,
    or it never existed."""


class SidecarRuntime(EdgeRuntime):
    """What the sidecars of one configuration share (see EdgeRuntime), and their engine settings.
    A webhook server builds it once and attaches every incoming call with it; each call still
    gets its own engine. Raises ConfigError for a configuration that cannot work."""

    config: SidecarConfig

    def __init__(self, config: SidecarConfig) -> None:
        super().__init__(config)
        self.engine_config = self.engine_settings(
            mode="sidecar",
            hide_tool_events=False,      # there is no client to hide anything from
            declare_tools=config.declare_tools,
        )
        self._tracing: Tracing | None | bool = False   # decided at the first call (False: not yet)
        # this process among the replicas sharing a store: who holds a lease
        self.replica = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.handovers = Handovers()   # takeovers, handoffs and what they did with owed calls

    @property
    def leases(self) -> bool:
        """Attached calls are held under leases: the store is shared with other replicas."""
        return self.write_ahead.store.shared

    @property
    def tracing(self) -> Tracing | None:
        """The calls' tracing (relay/observe/tracing.py), decided once, in the process that attaches."""
        if self._tracing is False:
            self._tracing = tracing_for(self.config.tracer_provider)
        return self._tracing or None


def call_field(dialect: Any) -> str:
    """The log field that names an attached call: `live_session_id` for a GPT-Live session,
    `realtime_call_id` for a Realtime call (docs/observability.md)."""
    return "live_session_id" if isinstance(dialect, LiveDialect) else "realtime_call_id"


def _may_pass(failure: UpstreamUnavailable) -> bool:
    """Worth another attempt: no answer at all, a server error or rate limiting. A refusal
    (401, 403, 400) stays a refusal."""
    return failure.status is None or failure.status == 429 or failure.status >= 500


class SidebandLoop(SessionLoop):
    """The session loop of a sideband: when the socket drops while the call lives, the engine is
    told (outputs decided meanwhile wait), the socket is reopened, and the loop carries on over
    the new one with what was queued for the old."""

    def __init__(self, engine: Engine, *, reopen: Callable[[], Awaitable[Transport]],
                 context: dict[str, Any], **options: Any) -> None:
        super().__init__(engine, **options)
        self._reopen = reopen
        self._context = context
        self.lease_lost: str | None = None   # why the session's lease was lost: it acts no more
        self.lease: SessionLease | None = None   # the call's lease, with a shared store
        self._family = engine.dialect
        self._marked: set[int] = set()       # outputs whose record is marked sent: they go up now
        self._sent_calls: set[str] = set()   # calls marked sent (a delegation's answer: several appends)
        self._adopted: dict[str, Any] = {}   # call_id -> Decision, for calls taken over

    def lose_lease(self, reason: str, *, handed_off: bool = False) -> None:
        """Another replica owns the call now (`handed_off`: the peer it was offered to): drop
        every output and handler from here on, stop the running handlers, and detach (one log
        line)."""
        if self.lease_lost is not None or self.end is not None:
            return
        self.lease_lost = reason
        if handed_off:
            log.info("call handed off to a peer: detaching", extra=self._context)
        else:
            log.warning("lease lost (%s): this replica stops the call's tool work; another owns the call",
                        reason, extra=self._context)
        if self._runner is not None:
            self._runner.cancel_all()
        if self._task_group is not None:
            self._task_group.start_soon(self.finish, "relay", DETACHED_CODE,
                                        "handed off" if handed_off else "lease lost")

    def act_send_upstream(self, action: SendUpstream) -> None:
        """With a lease, a call's output (GPT-Live: a backend call's output, or the appends that
        answer a delegation) waits, with what follows it, until its record is marked sent under
        the lease: an answer never goes up from two replicas. The further appends of an answer
        already marked go up behind the first."""
        if self.lease_lost is not None:
            return
        if self.lease is not None and id(action) not in self._marked and self._task_group is not None:
            output = self._answers(action.frame)
            if output is not None:
                self._carry_out.hold()
                self._task_group.start_soon(self._send_marked, action, *output, name="mark sent")
                return
        self._marked.discard(id(action))
        super().act_send_upstream(action)

    def _answers(self, frame: str | bytes) -> tuple[str, str] | None:
        """The relay call a frame going up answers and whose record is not yet marked sent, with
        what the provider echoes once it has it: the output item's id (the OpenAI family's), the
        event id of the answer's last frame (GPT-Live's: relay/engine/delegation_records.py)."""
        if not isinstance(self._family, LiveDialect):
            return output_of(frame, self._family)
        event = live.decode(frame)
        if isinstance(event, live.ResponseItemCreate):
            item = event.item if isinstance(event.item, dict) else {}
            call_id = item.get("call_id") if item.get("type") == live.FUNCTION_CALL_OUTPUT else None
        elif isinstance(event, live.APPENDS) and isinstance(event.delegation_id, str):
            entry = self.engine.ledger.get(event.delegation_id)
            # a filler while the delegate runs is progress, not the answer: never marked sent
            call_id = event.delegation_id if entry is not None and entry.state is not CallState.RUNNING else None
        else:
            return None
        if not isinstance(call_id, str) or call_id in self._sent_calls:
            return None
        answered = self.engine.ledger.get(call_id)
        return call_id, (answered.output_item_id or "") if answered is not None else ""

    async def _send_marked(self, action: SendUpstream, call_id: str, item_id: str) -> None:
        assert self.lease is not None
        kept = await self.lease.mark_sent(call_id, item_id)
        held = self._carry_out.release()
        if not kept or self.lease_lost is not None:
            return   # the lease was lost: `lose_lease` stopped the session's work
        self._marked.add(id(action))
        self._sent_calls.add(call_id)
        self._apply([action, *held])

    def act_notice(self, action: Notice) -> None:
        """A call this replica stops because another replica owns the session now is not
        abandoned: that replica answers it (relay/edges/takeover.py). Said so in its line."""
        if (self.lease_lost is not None and action.kind == TOOL_CALL
                and action.fields.get("outcome") == CallOutcome.ABANDONED):
            action = Notice(action.kind, {**action.fields, "outcome": HANDED_TO_PEER,
                                          "reason": f"{action.fields.get('reason')}: another replica answers it"})
        super().act_notice(action)

    def act_start_handler(self, action: StartHandler) -> None:
        if self.lease_lost is not None:
            return
        decision = self._adopted.pop(action.call_id, None)
        if decision is None or decision.how == RUN:
            super().act_start_handler(action)
        elif self._task_group is not None:
            resend_if_lost(self.engine, action.call_id, decision)
            self._task_group.start_soon(self._answer_adopted, action.call_id, decision.outcome)

    def handlers_running(self) -> int:
        return self._runner.running if self._runner is not None else 0

    def mid_call(self) -> bool:
        """A step of a call is under way that a peer taking the session now would have to guess
        at: a handler runs, a record is being written, or a create of the relay's waits or awaits
        its response (a follow-up recorded neither owed nor sent for sure)."""
        sequencer = getattr(self.engine, "sequencer", None)
        return bool(self.handlers_running() or self._carry_out.holding
                    or (sequencer is not None and (sequencer.pending() or sequencer.in_flight())))

    async def _answer_adopted(self, call_id: str, outcome: Outcome) -> None:
        self._handler_finished(call_id, outcome)

    async def adopt(self, adoption: Adoption) -> None:
        """Tell the engine of the calls taken over (relay/edges/takeover.py), once the loop runs."""
        await self.started.wait()
        self._adopted.update(adoption.decisions)
        for frame in adoption.frames:
            if self.end is not None or self.lease_lost is not None:
                return
            self._apply(kept_records(self.engine.receive_upstream(frame, self.clock()), adoption.decisions))
        engine = self.engine
        if self.end is not None or self.lease_lost is not None:
            return
        if isinstance(engine, LiveEngine) and (adoption.records or adoption.follow_ups):
            self._apply(engine.adopt_records(adoption.records, adoption.follow_ups, self.clock()))
        elif adoption.follow_ups and isinstance(engine, OpenAIEngine):
            self._apply(engine.adopt_follow_ups(adoption.follow_ups, self.clock()))

    async def upstream_lost(self, closed: TransportClosed) -> None:
        if self.end is not None:
            return   # the session closed the socket itself
        ended = self.engine.ended_by_provider
        if ended is not None:   # the provider said the session is over (GPT-Live): an end, not a drop
            log.info("call ended", extra={**self._context, "reason": ended, "code": closed.code})
            await self.finish("upstream", NORMAL_CLOSURE, "call ended")
            return
        log.warning("sideband lost; reconnecting", extra={**self._context, "code": closed.code,
                                                            "reason": closed.reason})
        self._apply(self.engine.upstream_disconnected(self.clock()))
        try:
            upstream = await self._reopen()
        except CallEnded:
            log.info("call ended", extra=self._context)
            await self.finish("upstream", NORMAL_CLOSURE, "call ended")
            return
        except UpstreamUnavailable as exc:
            log.error("sideband lost for good: %s", exc, extra=self._context)
            await self.finish("relay", INTERNAL_ERROR, "sideband lost")
            return
        if self.end is not None:   # stopped while reconnecting
            await close_quietly(upstream, DETACHED_CODE, self.end.reason)
            return
        self.replace_upstream(upstream)
        log.info("sideband reconnected", extra=self._context)
        self._apply(self.engine.upstream_reconnected(self.clock()))


class Sidecar:
    """One attached call. `end = await Sidecar(call_id, config).run()` attaches, runs the tools
    until the call ends, and says how it ended; `await sidecar.stop()` detaches earlier.
    `attached` and `ended` are events to wait for.

    `tap(direction, frame)` sees every frame on the sideband (`upstream>relay`,
    `relay>upstream`), e.g. for transcripts (one that raises is dropped, never the session);
    `sleep` waits between reconnect attempts; `live`
    lists the session in a live inspector's hub (`relay attach --inspector`)."""

    def __init__(
        self,
        call_id: str,
        setup: SidecarConfig | SidecarRuntime,
        *,
        tap: Tap | None = None,
        sleep: Sleep = anyio.sleep,
        live: LiveHub | None = None,
        takeover: bool = False,
    ) -> None:
        self.call_id = call_id
        self.runtime = setup if isinstance(setup, SidecarRuntime) else SidecarRuntime(setup)
        self.id = "sc_" + secrets.token_hex(6)
        # the engine's and the store's name of the session: the call's own, where replicas share it
        self.session_id = call_id if self.runtime.leases else self.id
        self.takeover = takeover   # taking the call over from a replica that lost or offered it
        self.lease: SessionLease | None = None
        self.adoption: Adoption | None = None
        self.handing_off = False   # offered to a peer: the lease is the peer's to end
        self.tap = tap
        self.live = live
        self.loop: SidebandLoop | None = None
        self.trace: SessionTrace | None = None   # its spans, when tracing is on
        self.end: SessionEnd | None = None
        self.attached_at: float | None = None
        self.reconnects = 0
        self.attached = asyncio.Event()
        self.ended = asyncio.Event()
        self._sleep = sleep
        self._running = False
        self._stopping: str | None = None
        self._connect_scope: anyio.CancelScope | None = None

    @property
    def engine(self) -> Engine | None:
        return self.loop.engine if self.loop is not None else None

    @property
    def context(self) -> dict[str, str]:
        """The fields that name this session in its log lines."""
        return {"session_id": self.id, call_field(self.runtime.dialect): self.call_id}

    async def run(self) -> SessionEnd:
        """Attach and serve the call until it ends or `stop()`; returns how the session ended.
        Raises `UpstreamUnavailable` (`CallEnded` for an unknown call) when it cannot attach,
        `ConfigError` when its tools cannot be had (an MCP server out of reach, two tools of one
        name), `RuntimeError` when it is run a second time."""
        if self._running:
            raise RuntimeError("a Sidecar runs once; make a new one")
        self._running = True
        await self.runtime.start_tools()   # the MCP servers' tools (held by the webhook server already, if any)
        try:
            upstream = await self._attach()
            if upstream is None:
                self.end = SessionEnd("relay", DETACHED_CODE, self._stopping or "stopped")
            elif not await self._hold(upstream):
                self.end = SessionEnd("relay", DETACHED_CODE, "held by another replica")
            else:
                self.end = await self._serve(upstream)
        except UpstreamUnavailable as exc:
            log.error("cannot attach to the call: %s", exc, extra=self.context)
            self.end = SessionEnd("relay", INTERNAL_ERROR, str(exc))
            if isinstance(exc, CallEnded) and self.takeover and await self._hold(None) and self.lease:
                await self.lease.end()   # nothing left to take over: unlisted
            raise
        finally:
            self.end = self.end or SessionEnd("relay", INTERNAL_ERROR, "interrupted")
            with anyio.CancelScope(shield=True):
                await self._let_go(self.end)
                await self.runtime.close_tools()
            self.ended.set()
        return self.end

    async def _hold(self, upstream: Transport | None) -> bool:
        """With a shared store, take the call's lease once attached (make before break: a peer
        offering the call keeps it until then); a takeover then reads what the old owner left.
        False when another replica holds the call (the sideband is closed)."""
        runtime = self.runtime
        if not runtime.leases:
            return True
        lease = SessionLease(runtime.write_ahead, self.session_id, owner=runtime.replica, target=self.call_id,
                             ttl=runtime.config.lease_seconds, on_lost=self._lease_lost)
        held = await lease.hold()
        if held is False:
            log.info("the call is held by another replica: not attached", extra=self.context)
            if upstream is not None:
                await close_quietly(upstream, DETACHED_CODE, "held by another replica")
            return False
        if held:
            self.lease = lease
        if held and self.takeover and upstream is not None:
            records = await runtime.write_ahead.read(self.session_id)
            if isinstance(runtime.dialect, LiveDialect):
                self.adoption = adopt_live(records, runtime.tools)
            elif isinstance(runtime.dialect, OpenAIFamily):
                self.adoption = adopt(records, runtime.tools, family=runtime.dialect, id_prefix=self.id)
            else:
                log.warning("call taken over, but its owed calls are not finished: taking over a %s "
                            "session's calls is not supported", runtime.dialect.name, extra=self.context)
                return True
            runtime.handovers.took_over(self.adoption)
            log.info("call taken over", extra={**self.context, **self.adoption.counts()})
            if self.adoption.unconfirmed and isinstance(runtime.dialect, LiveDialect):
                log.warning("%d answers the old owner sent were never shown delivered: not sent again (GPT-Live "
                            "cannot refuse a duplicate)", self.adoption.unconfirmed, extra=self.context)
        return True

    def _lease_lost(self, reason: str) -> None:
        if not self.handing_off:
            self.runtime.handovers.lease_lost()
        if self.loop is not None:
            self.loop.lose_lease(reason, handed_off=self.handing_off)

    async def hand_off(self) -> bool:
        """Hand the call to a peer (a drain, make before break): once no handler of it runs,
        offer the lease; a peer attaches and takes it; then this sideband closes. True once
        handed off (the caller bounds the wait)."""
        lease, loop = self.lease, self.loop
        if lease is None or loop is None or lease.lost.is_set():
            return False
        while loop.mid_call():   # a tool call takes seconds; the call may go on for minutes
            await anyio.sleep(HANDLER_POLL_SECONDS)
        self.handing_off = True
        offered_at = time.monotonic()
        if not await lease.offer():
            self.handing_off = False
            return False
        log.info("call offered to a peer", extra=self.context)
        await lease.lost.wait()
        self.runtime.handovers.handed_off(time.monotonic() - offered_at)
        await self.ended.wait()
        return True

    async def _let_go(self, end: SessionEnd) -> None:
        """After the session: a call that ended is unlisted; one this replica detached from (a
        stop, a sideband lost for good) is offered to a peer; one whose lease moved is left."""
        lease = self.lease
        if lease is None or lease.lost.is_set() or self.handing_off:
            return
        if end.by == "upstream":
            await lease.end()
        elif await lease.offer():
            log.info("call offered to another replica", extra=self.context)

    async def stop(self, reason: str = "detached") -> None:
        """Detach: close the sideband (the call goes on, without the relay's tools); calls not
        yet answered are abandoned. `run()` returns."""
        self._stopping = reason
        if self.loop is not None:
            await self.loop.started.wait()
            await self.loop.finish("relay", DETACHED_CODE, reason)
        elif self._connect_scope is not None:
            self._connect_scope.cancel()

    async def _attach(self) -> Transport | None:
        """The sideband, or None when `stop()` came first."""
        upstream: Transport | None = None
        with anyio.CancelScope() as self._connect_scope:
            if self._stopping is None:
                upstream = await self._open(reconnecting=False)
        self._connect_scope = None
        if upstream is not None and self._stopping is not None:
            await close_quietly(upstream, DETACHED_CODE, self._stopping)
            return None
        return upstream

    async def _serve(self, upstream: Transport) -> SessionEnd:
        runtime = self.runtime
        engine = new_engine(runtime.tools, dialect=runtime.dialect, config=runtime.engine_config,
                            session_id=self.session_id, id_prefix=self.id)
        recording = self._recording(engine)
        tracing = runtime.tracing
        self.trace = None if tracing is None else tracing.session(
            session_id=self.id, mode="sidecar", dialect=runtime.dialect.name, upstream=runtime.upstream.host,
            **{"relay.call.id": self.call_id})
        taps = Taps(recording, FrameTap(self.tap) if self.tap is not None else None)
        recorder: Taps | LiveTap | None = taps if taps else None
        if self.live is not None:   # the live inspector (relay attach --inspector)
            header = runtime.session_header(session_id=self.id, dialect=runtime.dialect, mode="sidecar",
                                            extra_header={**engine.recording_header(), "call_id": self.call_id})
            recorder = self.live.open_session(self.id, header=header, as_recorded=runtime.recording_filter(recording),
                                              recording=recording, taps=taps, call_id=self.call_id)
        on_end: Callable[[str], None] = recorder.close if recorder is not None else lambda reason: None
        loop = self.loop = SidebandLoop(
            engine,
            reopen=self._reopen,
            context=self.context,
            upstream=upstream,
            recorder=recorder,
            on_notice=self._on_notice,
            max_queue_bytes=runtime.config.max_queue_bytes,
            stall_seconds=runtime.config.stall_seconds,
            handler_scope=self.trace.handler_scope if self.trace is not None else None,
            write_ahead=runtime.write_ahead,
        )
        loop.lease = self.lease
        self.attached_at = time.time()
        log.info("session start", extra={**self.context, "mode": "sidecar", "upstream": runtime.upstream.host,
                                         "dialect": runtime.dialect.name, "tools": runtime.tools.names})
        self.attached.set()
        end: SessionEnd | None = None
        try:
            async with anyio.create_task_group() as beside:
                if self.lease is not None:
                    beside.start_soon(self.lease.keep, name="lease")
                if self.adoption is not None:
                    beside.start_soon(loop.adopt, self.adoption, name="adoption")
                end = await loop.run(on_end=on_end)
                beside.cancel_scope.cancel()
            return end
        finally:
            final = end or SessionEnd("relay", INTERNAL_ERROR, "interrupted")
            if self.trace is not None:
                self.trace.end(by=final.by, code=final.code, reason=final.reason,
                               failed=ended_in_failure(final.by, final.code), tool_calls=len(engine.calls))
            log.info("session end", extra={
                **self.context, "by": final.by, "code": final.code, "reason": final.reason,
                "seconds": round(time.time() - self.attached_at, 3), "reconnects": self.reconnects,
                "tool_calls": len(engine.calls)})

    async def _reopen(self) -> Transport:
        self.reconnects += 1
        return await self._open(reconnecting=True)

    async def _open(self, *, reconnecting: bool) -> Transport:
        """Connect to the call, again while the failure may pass. The first attach tries at
        once, then backs off; a reconnect backs off before every attempt. Raises `CallEnded` on a
        404, `UpstreamUnavailable` when the failure is final or the attempts run out."""
        runtime = self.runtime
        waits: list[float | None] = list(runtime.config.reconnect_waits())
        if not reconnecting:
            waits.insert(0, None)
        failure = UpstreamUnavailable("reconnecting is turned off (--reconnect-attempts 0)")
        for attempt, wait in enumerate(waits, 1):
            if wait is not None:
                await self._sleep(wait)
            try:
                return await runtime.upstream.connect_call(runtime.dialect, self.call_id)
            except UpstreamUnavailable as exc:
                if exc.status == 404:
                    raise CallEnded(f"the upstream {runtime.upstream.host} has no live call {self.call_id} "
                                    "(HTTP 404): it ended or never existed", 404) from None
                if not _may_pass(exc):
                    raise
                failure = exc
                log.warning("sideband connection failed: %s", exc,
                            extra={**self.context, "attempt": attempt, "attempts": len(waits)})
        raise failure

    def _recording(self, engine: Engine) -> RecordingWriter | None:
        return self.runtime.recording(session_id=self.id, dialect=self.runtime.dialect, mode="sidecar",
                                      extra_header={**engine.recording_header(), "call_id": self.call_id})

    def _on_notice(self, notice: Notice) -> None:
        if self.trace is not None:
            self.trace.notice(notice)
        on_notice = self.runtime.config.on_notice
        if on_notice is not None:
            on_notice(self.id, notice)
        log_notice(log, notice, **self.context)
