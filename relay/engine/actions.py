"""What the engine asks its edge to do. Small immutable values; the edge carries them out in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol

from relay.engine.records import CallRecord
from relay.tools.spec import ToolSpec


@dataclass(frozen=True, slots=True)
class SendUpstream:
    """Send this frame to the provider: text for `str`, binary for `bytes` (Gemini Live sends
    JSON in binary frames, and a forwarded frame keeps its kind)."""

    frame: str | bytes


@dataclass(frozen=True, slots=True)
class SendClient:
    """Send this frame to the connected client (proxy mode only); `str` text, `bytes` binary."""

    frame: str | bytes


@dataclass(frozen=True, slots=True)
class StartHandler:
    """Run `tool`'s handler with these validated keyword arguments; report back with
    `Engine.handler_finished` (and `Engine.handler_yielded` for streaming tools)."""

    call_id: str
    tool: ToolSpec
    arguments: dict[str, Any]
    idempotency_key: str = ""   # the call's stable key, for a handler that asks for it


@dataclass(frozen=True, slots=True)
class CancelHandler:
    """Cancel the running handler of `call_id`. The engine has already decided its output; a
    late `handler_finished` for it is ignored."""

    call_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Close:
    """Close a side of the session (`client`, `upstream` or `both`) with a WebSocket close code."""

    target: Literal["client", "upstream", "both"]
    code: int
    reason: str


TOOL_CALL = "tool_call"
"""The kind of the notice of a relay call's end (answered, skipped, abandoned): what logs, metrics,
traces, the recording and the demo follow calls by."""


@dataclass(frozen=True, slots=True)
class Notice:
    """Something worth a log line, a metric or a span: `tool_started` (a handler starts),
    `tool_call` (a call answered, or skipped/abandoned), `follow_up` / `filler` (a response.create
    sent), `response` (a response created or done: `phase`, `response_id`, `creator`, and the
    relay's `event_id`/`purpose` or the final `status`/`reason`), `anomaly`, `client_error` (an
    error event sent to the client), `upstream_error` (an error the upstream aimed at the relay),
    `limit` (a client reached a limit of `relay.engine.limits`: once per session and limit).
    The session loop adds `loop_blocked` (a step of a tool's handler held the event loop: `name`,
    `call_id`, `seconds`)."""

    kind: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Remember:
    """Keep this record of a relay call before carrying out the actions that follow it: the
    engine emits it ahead of what it guards (the handler's start, the output's send, the
    follow-up's create). A driver with a store writes it there first; one without keeps it or
    drops it. Never emitted on the audio path."""

    record: CallRecord


Action = SendUpstream | SendClient | StartHandler | CancelHandler | Close | Notice | Remember


class ActionSink(Protocol):
    """What a driver of the engine does for each kind of action: the live session loop, the
    scripted harness and the replay each are one. Each method takes the action itself."""

    def act_send_upstream(self, action: SendUpstream) -> None: ...
    def act_send_client(self, action: SendClient) -> None: ...
    def act_start_handler(self, action: StartHandler) -> None: ...
    def act_cancel_handler(self, action: CancelHandler) -> None: ...
    def act_notice(self, action: Notice) -> None: ...
    def act_close(self, action: Close) -> None: ...
    def act_remember(self, action: Remember) -> None: ...


# what a record written ahead guards: while its write is under way (`ActionInterpreter.hold`),
# these wait in the engine's order; frames to the client and notices go on (audio never waits)
GUARDED = frozenset({SendUpstream, StartHandler, CancelHandler, Close, Remember})


class ActionInterpreter:
    """The one place the engine's actions become a driver's steps, in the order the engine gave
    them. Built once per session over its sink: each action costs one table look-up by its exact
    type and one call, whichever driver runs the engine. A sink whose `act_remember` must wait
    for a store calls `hold`: the `GUARDED` actions after it wait until `release` hands them back
    (the sink then carries them out, and a record among them may hold them again)."""

    __slots__ = ("_steps", "_held")

    def __init__(self, sink: ActionSink) -> None:
        self._steps: dict[type, Callable[[Any], None]] = {
            SendUpstream: sink.act_send_upstream,
            SendClient: sink.act_send_client,
            StartHandler: sink.act_start_handler,
            CancelHandler: sink.act_cancel_handler,
            Notice: sink.act_notice,
            Close: sink.act_close,
            Remember: sink.act_remember,
        }

        self._held: list[Action] | None = None

    def __call__(self, actions: list[Action]) -> None:
        steps = self._steps
        for action in actions:
            step = steps.get(type(action))
            if step is None:
                raise TypeError(f"not an engine action: {action!r}")
            if self._held is not None and type(action) in GUARDED:
                self._held.append(action)
                continue
            step(action)

    @property
    def holding(self) -> bool:
        return self._held is not None

    def hold(self) -> None:
        """From now on the guarded actions wait (a record's write is under way)."""
        if self._held is None:
            self._held = []

    def release(self) -> list[Action]:
        """The write is over: what waited, for the sink to carry out now."""
        held, self._held = self._held or [], None
        return held


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a handler ended, as the runner reports it: a returned `value`, a raised `error`, or
    (`stream_end`) a streaming handler that finished after its last yield."""

    value: Any = None
    error: BaseException | None = None
    stream_end: bool = False

    @classmethod
    def returned(cls, value: Any) -> "Outcome":
        return cls(value=value)

    @classmethod
    def raised(cls, error: BaseException) -> "Outcome":
        return cls(error=error)

    @classmethod
    def ended(cls) -> "Outcome":
        return cls(stream_end=True)
