"""The core every session engine shares, whatever the wire: the entry points, the plumbing that
turns each input into a list of actions, and the rules of a relay call's life.

The session's clock, ids, outbox, conversation and call book are its context (`context`), built
here once and given to the dialect's helpers, which report call facts through `CallRules`. A
dialect's engine (`openai.OpenAIEngine`, `gemini.GeminiEngine`) translates its wire into facts
about calls ("the model finished call X", "the caller barged in", "the server withdrew call Y")
and calls the methods here, which decide: a call becomes ready in `_call_complete` only, starts
in `_start`, gets its output decided in `_decide` (result, error, bad arguments, unknown tool,
timeout, interruption), and counts as delivered in `_injected` only; every state change goes
through the call book (`calls.CallLedger.move`). What differs per wire comes back through a few
hooks: `_deliver` (send a decided output: OpenAI waits for the response to end, Gemini answers
at once), `_streamed` (a streaming tool's values), `_after_output` (news from a tool whose output
is already out), `_scheduling_of`, `_stream_final`, `_handler_started`, `_drop_fillers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Callable, Iterable, Literal

from relay.engine.actions import (
    TOOL_CALL,
    Action,
    CancelHandler,
    Outcome,
    StartHandler,
)
from relay.engine.calls import (
    CallEntry,
    CallOutcome,
    CallState,
    Owner,
    RunningHandlers,
    seconds_text,
    tool_call_fields,
)
from relay.engine.context import Anomaly, CallRules, SessionContext, Source
from relay.engine.conversation import ABSENT
from relay.tools import Interruption, Scheduling, ToolRegistry
from relay.tools.errors import ArgumentsError
from relay.tools.mcp_config import ApprovalPolicy
from relay.tools.mcp_tools import recorded_tools
from relay.tools.render import (
    RenderedOutput,
    render_error,
    render_exception,
    render_value,
)
from relay.tools.spec import ToolSpec



class Mode(StrEnum):
    """Who else is in a session: a client the relay proxies (`proxy`), none (`sidecar`, attached
    beside the call), or a recording played again (`replay`). The value is what headers record."""

    PROXY = "proxy"
    SIDECAR = "sidecar"
    REPLAY = "replay"


_UNKNOWN: Any = object()
_S = CallState

# What `relay serve` and `relay attach` keep of a live session: the last 16 items (three
# tool-call turns or so), responses and finished calls. The engine's rules only ever look at the
# recent past; the recording keeps the whole session.
DEFAULT_HISTORY_LIMIT = 16

# How long a client's response.create waits for the relay's running tools at the most (seconds):
# well under the 10 s a client such as LiveKit Agents waits for its own create before giving up.
DEFAULT_HOLD_LIMIT = 5.0


@dataclass(frozen=True)
class EngineConfig:
    """Per-session behaviour. `mode` decides whether there is a client to talk to; the rest are
    the knobs the CLI exposes."""

    mode: Mode = Mode.PROXY             # given as a value too ("sidecar"): made a Mode
    hide_tool_events: bool = True       # proxy: the client never sees relay tools and their calls
    declare_tools: bool = True          # add the relay's tools to the session
    # proxy: a client's response.create is held while the relay's calls run, for this many seconds
    # at the most (None: until their outputs are in)
    hold_limit: float | None = DEFAULT_HOLD_LIMIT
    # fillers join the provider's conversation (where a client that keeps what it hears, as the
    # voice frameworks do, has them too) instead of staying out of band
    fillers_in_conversation: bool = False
    output_limit: int = 32_768
    unknown_tools: Literal["client", "error"] = "client"
    strict: bool = False                # re-raise internal errors (tests) instead of recording them
    # keep this many recent items, responses and finished calls (None: all); a live session's
    # memory then stays flat however long it runs
    history_limit: int | None = None
    # how the provider's own MCP approval requests are answered (None: all left to the client)
    mcp_approvals: ApprovalPolicy | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", Mode(self.mode))

    @property
    def has_client(self) -> bool:
        return self.mode is Mode.PROXY


def _nearest(deadlines: Iterable[float], others: Iterable[float]) -> float | None:
    """The earliest of two sets of deadlines (None: neither has one), with no tuple of them built:
    the loop asks for the next deadline after every round."""
    nearest = min(deadlines, default=None)
    for deadline in others:
        if nearest is None or deadline < nearest:
            nearest = deadline
    return nearest


class SessionEngine:
    """One session's state and the sans-I/O plumbing around its rules."""

    default_dialect: Any = None
    """The dialect a dialect engine speaks unless told (OPENAI, GEMINI)."""
    context_class: type[SessionContext] = SessionContext
    """What the dialect's helpers are given (see `context`)."""

    def __init__(
        self,
        tools: ToolRegistry | Iterable[ToolSpec | Callable[..., Any]] = (),
        *,
        dialect: Any = None,
        config: EngineConfig | None = None,
        session_id: str = "session",
        id_prefix: str = "relay",
    ) -> None:
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.dialect = dialect if dialect is not None else self.default_dialect
        self.config = config or EngineConfig()
        self.session_id = session_id
        rules = CallRules(owner_of=self._owner_of, complete=self._call_complete, skip=self._skip,
                          client_answered=self._client_answered, output_sent=self._injected)
        self.ctx = self.context_class(config=self.config, tools=self.tools, dialect=self.dialect,
                                      id_prefix=id_prefix, rules=rules, session_id=session_id)
        self.conversation = self.ctx.conversation
        self.ledger = self.ctx.ledger
        self.anomalies: list[Anomaly] = self.ctx.anomalies
        self.running = RunningHandlers()               # the calls whose handler runs
        self._deadline: Any = _UNKNOWN                 # next_deadline(), until the state changes
        self.ended_by_provider: str | None = None   # why the provider said it is over (GPT-Live's session.closed)

    # ==== public entry points ===========================================================
    def forwards_upstream(self, frame: str | bytes) -> bool:
        """Whether `frame` from the upstream goes on to the client as it came and is nothing else
        to the engine (audio, by the dialect's pass-through set): an edge may then forward it
        without `receive_upstream` (which would answer `[SendClient(frame)]`, or nothing without a
        client). The per-frame path asks this of every frame: a dialect's engine sets it to one
        cheap function of the frame; here no frame is."""
        return False

    def forwards_client(self, frame: str | bytes) -> bool:
        """`forwards_upstream` for the client's frames (which then go up as they came)."""
        return False

    def receive_upstream(self, frame: str | bytes, now: float) -> list[Action]:
        return self._run(now, Source.UPSTREAM, self._upstream_frame, frame)

    def receive_client(self, frame: str | bytes, now: float) -> list[Action]:
        return self._run(now, Source.CLIENT, self._client_frame, frame)

    def handler_yielded(self, call_id: str, value: Any, now: float) -> list[Action]:
        return self._run(now, Source.HANDLER, self._handler_yielded, call_id, value)

    def handler_finished(self, call_id: str, outcome: Outcome, now: float) -> list[Action]:
        return self._run(now, Source.HANDLER, self._handler_finished, call_id, outcome)

    def tick(self, now: float) -> list[Action]:
        return self._run(now, Source.TIMER, self._tick)

    def upstream_disconnected(self, now: float) -> list[Action]:
        """The upstream socket dropped but the session may come back (sidecar reconnect):
        handlers keep running, outputs wait for `upstream_reconnected`."""
        return self._run(now, Source.UPSTREAM, self._on_disconnect)

    def upstream_reconnected(self, now: float) -> list[Action]:
        return self._run(now, Source.UPSTREAM, self._on_reconnect)

    def close(self, now: float, reason: str = "session closed") -> list[Action]:
        """The session is over: cancel running handlers; unanswered calls are recorded as
        abandoned (there is nobody left to send their output to)."""
        return self._run(now, Source.TIMER, self._close, reason)

    def next_deadline(self) -> float | None:
        """When `tick` must be called next (None: no timer pending, or closed). Asked after every
        frame by the edge, so computed once per change of state. After `tick(now)` it is None or
        later than `now`: the edge's timer would otherwise call `tick` again at once."""
        if self._deadline is _UNKNOWN:
            self._deadline = None if self.ctx.closed else _nearest(self.running.deadlines(), self._other_deadlines())
        return self._deadline

    @property
    def calls(self) -> list[CallEntry]:
        return list(self.ledger)

    @property
    def id_prefix(self) -> str:
        return self.ctx.id_prefix

    @property
    def upstream_connected(self) -> bool:
        return self.ctx.upstream_connected

    @property
    def closed(self) -> bool:
        return self.ctx.closed

    def recording_header(self) -> dict[str, Any]:
        """What a replay needs to rebuild this engine: recorded in the recording's header."""
        header = {"id_prefix": self.ctx.id_prefix, "hide_tool_events": self.config.hide_tool_events,
                  "declare_tools": self.config.declare_tools, "unknown_tools": self.config.unknown_tools}
        mcp_tools = recorded_tools(self.tools)
        if mcp_tools:   # what a replay declares and answers in their place (relay.tools.mcp_tools)
            header["mcp_tools"] = mcp_tools
        approvals = self.config.mcp_approvals
        if approvals:
            header["mcp_approvals"] = {"allow": list(approvals.allow), "deny": list(approvals.deny)}
        if self.config.history_limit is not None:   # a replay forgets as the session did
            header["history_limit"] = self.config.history_limit
        return header

    def dump(self) -> str:
        from relay.engine.dump import dump_engine

        return dump_engine(self)

    # ==== plumbing ======================================================================
    def _run(self, now: float, source: Source, fn: Callable[..., None], *args: Any) -> list[Action]:
        ctx = self.ctx
        ctx.now = now
        ctx.source = source
        self._deadline = _UNKNOWN
        out = ctx.out = []
        try:
            fn(*args)
            if not ctx.closed:
                self._after_input()
        except Exception as exc:  # the engine must never take a session down
            if self.config.strict:
                raise
            ctx.anomaly(f"internal error: {type(exc).__name__}: {exc}", None, internal=True)
        ctx.out = []
        return out

    # ==== a call's life ==================================================================
    def _owner_of(self, name: str, *, client_made: bool = False) -> Owner:
        """Who answers a new call of `name`: the relay for its own tools and, with
        `unknown_tools = error`, for any name the client did not declare; the client for the rest
        and for every call it made itself."""
        if client_made:
            return Owner.CLIENT
        if name in self.tools or (self.config.unknown_tools == "error" and not self._client_declares(name)):
            return Owner.RELAY
        return Owner.CLIENT

    def _call_complete(self, entry: CallEntry, arguments: Any = ABSENT) -> None:
        """The model finished the call (the dialect checked it may run): a client's call waits
        for the client; a relay call becomes ready and starts. The one place a call is ready."""
        if entry.owner is Owner.CLIENT:
            self.ledger.move(entry, _S.COMPLETE, self.ctx.now)
        elif self.ledger.move(entry, _S.READY, self.ctx.now):
            self._start(entry, arguments)

    def _start(self, entry: CallEntry, arguments: Any = ABSENT) -> None:
        """Run the call's handler, or decide its output at once when it cannot run. `arguments`
        is the decoded object where the wire carries one (Gemini), else the JSON text is parsed."""
        tool = self.tools.get(entry.name)
        limit = self.config.output_limit
        if tool is None:
            self._decide(entry, render_error(f"unknown tool {entry.name!r}", limit=limit), CallOutcome.UNKNOWN_TOOL)
            return
        try:
            if arguments is ABSENT:
                parsed = tool.parse_arguments(entry.arguments)
            else:
                parsed = tool.validate_arguments({} if arguments is None else arguments)
        except ArgumentsError as exc:
            self._decide(entry, render_error(str(exc), limit=limit), CallOutcome.BAD_ARGUMENTS, tool)
            return
        self.ledger.move(entry, _S.RUNNING, self.ctx.now)
        self.running.start(entry.call_id, self.ctx.now + tool.timeout)
        self.ctx.emit(StartHandler(entry.call_id, tool, parsed, entry.idempotency_key))
        self.ctx.notice("tool_started", {"call_id": entry.call_id, "name": entry.name,
                                         "arguments": entry.arguments, "response_id": entry.response_id})
        self._handler_started(entry, tool)

    def _skip(self, entry: CallEntry, reason: str) -> None:
        """The call will never be answered: its response was cancelled or failed, its item is
        incomplete, or the server withdrew it."""
        self.ledger.move(entry, _S.SKIPPED, self.ctx.now)
        entry.skip_reason = reason
        if entry.owner is Owner.RELAY:
            self.ctx.notice(TOOL_CALL, tool_call_fields(entry) | {"outcome": CallOutcome.SKIPPED, "reason": reason})

    def _active_call(self, call_id: str) -> CallEntry | None:
        """The call whose handler reports, unless its output was decided without it (cancelled,
        timed out): then the report is late and ignored."""
        return self.ledger.get(call_id) if call_id in self.running else None

    def _handler_yielded(self, call_id: str, value: Any) -> None:
        entry = self._active_call(call_id)
        if entry is not None:
            self._streamed(entry, value, render_value(value, limit=self.config.output_limit))

    def _handler_finished(self, call_id: str, outcome: Outcome) -> None:
        entry = self._active_call(call_id)
        if entry is None:
            return
        limit = self.config.output_limit
        if entry.state not in (_S.RUNNING, _S.SKIPPED):
            # a streaming tool whose first value already is the output: its end is news
            self._stop_handler(call_id)
            if outcome.error is not None:
                self._after_output(entry, f"update from {entry.name}: failed: "
                                          f"{type(outcome.error).__name__}: {outcome.error}")
            elif not outcome.stream_end:
                self._after_output(entry, f"update from {entry.name}: "
                                          f"{render_value(outcome.value, limit=limit).output}")
            return
        scheduling: Scheduling | None = None
        if outcome.error is not None:
            rendered = render_exception(outcome.error, limit=limit)
        elif outcome.stream_end:
            rendered, scheduling = self._stream_final(entry)
        else:
            rendered = render_value(outcome.value, limit=limit)
        self._decide(entry, rendered, CallOutcome.ERROR if rendered.is_error else CallOutcome.OK,
                     self.tools.get(entry.name), scheduling=scheduling)

    def _decide(self, entry: CallEntry, rendered: RenderedOutput, outcome: CallOutcome, tool: ToolSpec | None = None,
                *, handler_done: bool = True, speak: bool | None = None,
                scheduling: Scheduling | None = None) -> None:
        """The call's output is known (`handler_done=False`: a streaming tool's first value, its
        handler goes on). A call the server withdrew meanwhile keeps its outcome and sends
        nothing; any other is finished and handed to the dialect to deliver."""
        if handler_done:
            self._stop_handler(entry.call_id)
        else:
            self._stop_timers(entry.call_id)
        entry.output = rendered.output
        entry.output_status = rendered.status
        entry.is_error = rendered.is_error
        entry.outcome = outcome
        entry.finished_at = self.ctx.now
        message = rendered.message
        if tool is not None and message is None:
            message = tool.on_failure if rendered.is_error else tool.on_complete
        if tool is not None or message is not None:
            entry.message = message
        if entry.state is _S.SKIPPED:
            return
        chosen = scheduling or self._scheduling_of(tool, rendered)
        entry.scheduling = chosen.value if chosen is not None else None
        if speak is not None:
            entry.speak = speak
        if self.ledger.move(entry, _S.FINISHED, self.ctx.now):
            self._deliver(entry, rendered)

    def _injected(self, entry: CallEntry) -> None:
        """The call's output went upstream: the one place a relay call counts as answered."""
        if self.ledger.move(entry, _S.ANSWERED, self.ctx.now):
            self.ctx.notice(TOOL_CALL, tool_call_fields(entry))

    def _client_answered(self, entry: CallEntry) -> None:
        """The client's own answer to its call was seen (repeats change nothing)."""
        if entry.state is not _S.ANSWERED:
            self.ledger.move(entry, _S.ANSWERED, self.ctx.now)

    def _barge_in(self, cause: str) -> None:
        """The user spoke over the assistant: apply each running tool's interruption policy."""
        for call_id in self.running.call_ids():
            entry = self.ledger.get(call_id)
            if entry is None or entry.interrupted or (entry.started_at or 0) > self.ctx.now:
                continue
            self._interrupt(entry, cause)

    def _interrupt(self, entry: CallEntry, cause: str) -> None:
        """`cancel`: the handler stops and the output says so; `finish_silently`: it finishes,
        unspoken; `finish_and_speak`: as if nothing happened."""
        entry.interrupted = True
        self._drop_fillers(entry.call_id)
        tool = self.tools.get(entry.name)
        policy = tool.interruption if tool is not None else Interruption.FINISH_SILENTLY
        if policy is Interruption.CANCEL:
            self.ctx.emit(CancelHandler(entry.call_id, f"interrupted: {cause}"))
            entry.speak = False
            if entry.state is _S.RUNNING:
                self._decide(entry, render_error("cancelled: the user interrupted", status="incomplete",
                                                 limit=self.config.output_limit),
                             CallOutcome.CANCELLED, None, speak=False)
            else:
                self._stop_handler(entry.call_id)
        elif policy is Interruption.FINISH_SILENTLY:
            entry.speak = False

    def _withdrawn(self, entry: CallEntry, cause: str) -> None:
        """The server withdrew the call (`cause`: Gemini's toolCallCancellation): no answer may
        follow. The handler stops if its tool's interruption policy is `cancel`; other policies
        let it finish unheard."""
        if entry.state in (_S.ANSWERED, _S.SKIPPED):
            return   # answered before the cancellation crossed it, or withdrawn already
        if entry.owner is Owner.CLIENT:
            self._skip(entry, cause)
            return
        entry.interrupted = True
        tool = self.tools.get(entry.name)
        policy = tool.interruption if tool is not None else Interruption.CANCEL
        if entry.call_id in self.running and policy is Interruption.CANCEL:
            self.ctx.emit(CancelHandler(entry.call_id, cause))
            self._stop_handler(entry.call_id)
            entry.outcome = CallOutcome.CANCELLED
            entry.finished_at = self.ctx.now
        reason = f"{cause}: no answer is sent"
        self.ledger.move(entry, _S.SKIPPED, self.ctx.now)
        entry.skip_reason = reason
        self.ctx.notice(TOOL_CALL, tool_call_fields(entry) | {"outcome": CallOutcome.CANCELLED, "reason": reason})

    # ---- timers ----
    def _tick(self) -> None:
        for call_id in self.running.due(self.ctx.now):
            self._timed_out(call_id)

    def _timed_out(self, call_id: str) -> None:
        entry = self.ledger.get(call_id)
        self.running.stop_timer(call_id)
        if entry is None:
            return
        tool = self.tools.get(entry.name)
        seconds = seconds_text(tool.timeout if tool else 0)
        self.ctx.emit(CancelHandler(call_id, f"timed out after {seconds} s"))
        if entry.state in (_S.RUNNING, _S.SKIPPED):
            self._decide(entry, render_error(f"timed out after {seconds} s", status="incomplete",
                                             limit=self.config.output_limit), CallOutcome.TIMEOUT, tool)
        else:
            self._stop_handler(call_id)
            self._after_output(entry, f"update from {entry.name}: stopped after {seconds} s (timeout)")

    def _stop_handler(self, call_id: str) -> None:
        """The call's handler is over (finished, cancelled, timed out): forget its timers."""
        self.running.stop(call_id)
        self._drop_fillers(call_id)

    def _stop_timers(self, call_id: str) -> None:
        """The handler's timeout, and its fillers still to come."""
        self.running.stop_timer(call_id)
        self._drop_fillers(call_id)

    def _close(self, reason: str) -> None:
        for call_id in self.running.call_ids():
            self.ctx.emit(CancelHandler(call_id, reason))
            self._stop_handler(call_id)
        for entry in self.ledger.unanswered():
            if entry.outcome is None:
                entry.outcome = CallOutcome.ABANDONED
            self.ledger.move(entry, _S.ABANDONED, self.ctx.now)
            self.ctx.notice(TOOL_CALL, tool_call_fields(entry) | {"outcome": CallOutcome.ABANDONED, "reason": reason})
        self._on_close()
        self.ctx.closed = True

    # ==== what each dialect supplies ====================================================
    def _upstream_frame(self, frame: str | bytes) -> None:
        raise NotImplementedError

    def _client_frame(self, frame: str | bytes) -> None:
        raise NotImplementedError

    def _deliver(self, entry: CallEntry, rendered: RenderedOutput) -> None:
        """Send the output just decided for `entry` (or keep it until it may be sent)."""
        raise NotImplementedError

    def _streamed(self, entry: CallEntry, value: Any, rendered: RenderedOutput) -> None:
        """A streaming tool yielded `value` (rendered as `rendered`)."""
        raise NotImplementedError

    def _after_output(self, entry: CallEntry, text: str) -> None:
        """News about a tool whose output is already decided (a streaming tool going on)."""

    def _stream_final(self, entry: CallEntry) -> tuple[RenderedOutput, Scheduling | None]:
        """The output of a streaming tool that ended without a value counting as its result."""
        return render_error(f"{entry.name} finished without producing a result",
                            limit=self.config.output_limit), None

    def _scheduling_of(self, tool: ToolSpec | None, rendered: RenderedOutput) -> Scheduling | None:
        """When the model is to speak about the output: the result's choice, else the tool's."""
        return rendered.scheduling or (tool.scheduling if tool is not None else None) or Scheduling.WHEN_IDLE

    def _client_declares(self, name: str) -> bool:
        """Whether the client declared a function of this name itself."""
        return False

    def _handler_started(self, entry: CallEntry, tool: ToolSpec) -> None:
        """A handler started (OpenAI schedules its fillers here)."""

    def _drop_fillers(self, call_id: str) -> None:
        """The call's output is decided: a filler still to be said would come too late."""

    def _after_input(self) -> None:
        """Runs after every input unless the session is closed (the sequencer's turn)."""

    def _other_deadlines(self) -> Iterable[float]:
        return ()

    def _on_disconnect(self) -> None:
        self.ctx.upstream_connected = False

    def _on_reconnect(self) -> None:
        self.ctx.upstream_connected = True

    def _on_close(self) -> None:
        """Drop what waits to be sent: there is nobody to send it to any more."""

