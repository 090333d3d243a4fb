"""One tool as the relay knows it (`ToolSpec`), and `@tool`, which builds it from a function.

A spec is checked whole when it is made, so a tool that cannot work fails at decoration time,
in the author's hands, and never mid-call. The engine asks a spec for the definition it lists
to the model and to parse a call's arguments; the runner asks it how to call the handler.
pydantic (`relay.tools.schema`) is imported where a spec is made or checks arguments, never at
import: the engine, which holds specs, loads it only once a tool is defined.
"""

from __future__ import annotations

import enum
import inspect
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

from relay.tools.errors import ToolDefinitionError
from relay.tools.render import json_copy
from relay.tools.result import IdempotencyKey, Interruption, Scheduling, coerce_choice

if TYPE_CHECKING:
    from pydantic import BaseModel

TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class HandlerKind(str, enum.Enum):
    """How the runner calls a handler. STREAM handlers are async generator functions: each
    yield is an interim result and the last one is the result."""

    SYNC = "sync"
    ASYNC = "async"
    STREAM = "stream"


def handler_kind(handler: Callable[..., Any]) -> HandlerKind:
    """The kind of a handler, looking through callable objects to their `__call__`."""
    candidates = [handler, getattr(handler, "__call__", None)]
    if any(inspect.isasyncgenfunction(candidate) for candidate in candidates):
        return HandlerKind.STREAM
    if any(inspect.iscoroutinefunction(candidate) for candidate in candidates):
        return HandlerKind.ASYNC
    if any(inspect.isgeneratorfunction(candidate) for candidate in candidates):
        raise ToolDefinitionError(
            f"{handler_name(handler)} is a generator function, which cannot stream results without "
            "blocking the event loop: make it an async generator (`async def` with `yield`)"
        )
    return HandlerKind.SYNC


def handler_name(handler: Callable[..., Any]) -> str:
    """The handler's qualified name, or its repr for callables without one (partials)."""
    return getattr(handler, "__qualname__", None) or repr(handler)


@dataclass(frozen=True, eq=False)
class ToolSpec:
    """Everything the relay knows about one tool. Built by `@tool`; may also be built directly,
    in which case `arguments_model` is derived from the handler's signature when not given.

    Specs compare and hash by identity: each one is a registration, not a value.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[..., Any]
    kind: HandlerKind
    timeout: float = 30.0
    scheduling: Scheduling = Scheduling.WHEN_IDLE
    interruption: Interruption = Interruption.FINISH_SILENTLY
    on_start: str | None = None
    on_complete: str | None = None
    on_failure: str | None = None
    on_delay: tuple[float, str] | None = None
    """(milliseconds, text): say `text` if the handler is still running after that long."""
    arguments_model: type[BaseModel] | None = field(default=None, repr=False)
    """The pydantic model `parse_arguments` validates with."""
    idempotent: bool = False
    """The tool's author says a second run of the same call has no second effect."""
    key_parameter: str | None = None
    """The handler's parameter the runner gives the call's idempotency key (`IdempotencyKey`)."""
    delegate: bool = False
    """GPT-Live's delegate (relay/tools/delegation.py), not a tool: never declared to a model."""

    def __post_init__(self) -> None:
        def set_field(name: str, value: Any) -> None:  # normalising a frozen instance's fields
            object.__setattr__(self, name, value)

        _check_name(self.name)
        if not isinstance(self.description, str):
            raise ToolDefinitionError(f"tool {self.name}: description must be a string")
        if not isinstance(self.parameters, dict):
            raise ToolDefinitionError(f"tool {self.name}: parameters must be a JSON Schema object")
        if not callable(self.handler):
            raise ToolDefinitionError(f"tool {self.name}: handler is not callable")
        for choice_field, choices in (
            ("kind", HandlerKind),
            ("scheduling", Scheduling),
            ("interruption", Interruption),
        ):
            value = getattr(self, choice_field)
            set_field(choice_field, coerce_choice(choices, value, choice_field, ToolDefinitionError))
        set_field("timeout", _checked_timeout(self.name, self.timeout))
        for message_field in ("on_start", "on_complete", "on_failure"):
            text = getattr(self, message_field)
            if text is not None and (not isinstance(text, str) or not text.strip()):
                raise ToolDefinitionError(
                    f"tool {self.name}: {message_field} must be a non-empty string or None"
                )
        if self.on_delay is not None:
            set_field("on_delay", _checked_delay(self.name, self.on_delay))
        if not isinstance(self.idempotent, bool):
            raise ToolDefinitionError(f"tool {self.name}: idempotent must be True or False")
        if self.arguments_model is None:
            from relay.tools.schema import arguments_model, key_parameter
            set_field("arguments_model", arguments_model(self.handler, self.name))
            if self.key_parameter is None:
                set_field("key_parameter", key_parameter(self.handler))

    @property
    def non_blocking(self) -> bool:
        """Whether the conversation goes on while the tool runs (Gemini's NON_BLOCKING)."""
        return self.scheduling is not Scheduling.WHEN_IDLE or self.kind is HandlerKind.STREAM

    def definition(self) -> dict[str, Any]:
        """The tool as a realtime session lists it (flat, no `function` wrapper). A copy: the
        caller may change it freely."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": json_copy(self.parameters),
        }

    def parse_arguments(self, arguments: str) -> dict[str, Any]:
        """The model's JSON arguments as keyword arguments for the handler, validated.

        An empty or blank string means no arguments (what models send for no-parameter tools).
        Nested models arrive as model instances and enums as members; defaults are filled in.
        Fields the tool does not declare are ignored, because models sometimes add some.
        Raises ArgumentsError with a message the model can act on.
        """
        from relay.tools.schema import decode_arguments
        return self.validate_arguments(decode_arguments(self.name, arguments))

    def validate_arguments(self, data: Any) -> dict[str, Any]:
        """Like `parse_arguments`, for arguments that arrive already decoded (Gemini's `args`)."""
        from relay.tools.schema import validated_arguments
        assert self.arguments_model is not None  # set in __post_init__
        return validated_arguments(self.arguments_model, self.name, data)


def _check_name(name: Any) -> None:
    if not isinstance(name, str) or not TOOL_NAME_PATTERN.fullmatch(name):
        raise ToolDefinitionError(
            f"invalid tool name {name!r}: use 1 to 64 characters from a-z, A-Z, 0-9, _ and -"
        )


def _checked_timeout(tool_name: str, timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ToolDefinitionError(f"tool {tool_name}: timeout must be a number of seconds")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ToolDefinitionError(f"tool {tool_name}: timeout must be a positive number of seconds")
    return float(timeout)


def _checked_delay(tool_name: str, on_delay: Any) -> tuple[float, str]:
    problem = f"tool {tool_name}: on_delay must be (milliseconds > 0, non-empty text), got {on_delay!r}"
    if not isinstance(on_delay, (tuple, list)) or len(on_delay) != 2:
        raise ToolDefinitionError(problem)
    milliseconds, text = on_delay
    if isinstance(milliseconds, bool) or not isinstance(milliseconds, (int, float)):
        raise ToolDefinitionError(problem)
    if not (milliseconds > 0 and math.isfinite(milliseconds)):
        raise ToolDefinitionError(problem)
    if not isinstance(text, str) or not text.strip():
        raise ToolDefinitionError(problem)
    return (float(milliseconds), text)


_F = TypeVar("_F", bound=Callable[..., Any])


_TOOL_SETTINGS = frozenset(
    {"timeout", "scheduling", "interruption", "on_start", "on_complete", "on_failure", "on_delay", "idempotent"}
)


def build_spec(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    **settings: Any,
) -> ToolSpec:
    """The `ToolSpec` for `fn`, without touching `fn` (what `@tool` attaches to it).

    `settings` are the remaining `ToolSpec` fields (timeout, scheduling, ...); None means the
    field's default."""
    if name is None:
        name = getattr(fn, "__name__", None)
        if name is None:
            raise ToolDefinitionError(f"{fn!r} has no __name__: pass name= to tool()")
    _check_name(name)
    unknown = sorted(set(settings) - _TOOL_SETTINGS)
    if unknown:
        raise ToolDefinitionError(f"tool {name}: unknown option {', '.join(unknown)}")
    if description is None:
        docstring = getattr(fn, "__doc__", None)
        description = inspect.cleandoc(docstring) if isinstance(docstring, str) else ""
    from relay.tools.schema import arguments_model, flat_schema, key_parameter
    model = arguments_model(fn, name)
    return ToolSpec(
        key_parameter=key_parameter(fn),
        name=name,
        description=description,
        parameters=flat_schema(model, name),
        handler=fn,
        kind=handler_kind(fn),
        arguments_model=model,
        **{setting: value for setting, value in settings.items() if value is not None},
    )


@overload
def tool(fn: _F, /) -> _F: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = 30.0,
    scheduling: Scheduling | str | None = None,
    interruption: Interruption | str | None = None,
    on_start: str | None = None,
    on_complete: str | None = None,
    on_failure: str | None = None,
    on_delay: tuple[float, str] | None = None,
    idempotent: bool = False,
) -> Callable[[_F], _F]: ...


def tool(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Mark a function as a tool the relay runs: `@tool` or `@tool(name=..., timeout=...)`.

    The function comes back unchanged and still directly callable; its `ToolSpec` is attached
    as `__relay_tool__`. Definition errors surface here, at decoration time, not mid-call.
    Sync functions, async functions and async generator functions (streaming) are supported.
    """

    def decorate(function: _F) -> _F:
        function.__relay_tool__ = build_spec(function, **options)  # type: ignore[attr-defined]
        return function

    if fn is None:
        return decorate
    if not callable(fn):
        raise ToolDefinitionError(
            f"tool() got {fn!r} instead of a function: pass a name as tool(name=...)"
        )
    return decorate(fn)


def spec_of(candidate: Any) -> ToolSpec | None:
    """The spec a decorated function carries, or None."""
    spec = getattr(candidate, "__relay_tool__", None)
    return spec if isinstance(spec, ToolSpec) else None
