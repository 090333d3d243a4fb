"""What the engine asks its edge to do. Small immutable values; the edge carries them out in order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Protocol

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


Action = SendUpstream | SendClient | StartHandler | CancelHandler | Close | Notice


class ActionSink(Protocol):
    """What a driver of the engine does for each kind of action: the live session loop, the
    scripted harness and the replay each are one. Each method takes the action itself."""

    def act_send_upstream(self, action: SendUpstream) -> None: ...
    def act_send_client(self, action: SendClient) -> None: ...
    def act_start_handler(self, action: StartHandler) -> None: ...
    def act_cancel_handler(self, action: CancelHandler) -> None: ...
    def act_notice(self, action: Notice) -> None: ...
    def act_close(self, action: Close) -> None: ...


class ActionInterpreter:
    """The one place the engine's actions become a driver's steps, in the order the engine gave
    them. Built once per session over its sink: each action costs one table look-up by its exact
    type and one call, whichever driver runs the engine."""

    __slots__ = ("_steps",)

    def __init__(self, sink: ActionSink) -> None:
        self._steps: dict[type, Callable[[Any], None]] = {
            SendUpstream: sink.act_send_upstream,
            SendClient: sink.act_send_client,
            StartHandler: sink.act_start_handler,
            CancelHandler: sink.act_cancel_handler,
            Notice: sink.act_notice,
            Close: sink.act_close,
        }

    def __call__(self, actions: list[Action]) -> None:
        steps = self._steps
        for action in actions:
            step = steps.get(type(action))
            if step is None:
                raise TypeError(f"not an engine action: {action!r}")
            step(action)


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
