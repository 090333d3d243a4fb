"""What a handler may answer (`ToolResult`) and the choices that shape what the answer does to
the conversation (`Scheduling`, `Interruption`), and the type of a parameter that asks for the
call's idempotency key (`IdempotencyKey`): the words a tool author writes."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, TypeVar


class Scheduling(str, enum.Enum):
    """What a tool's answer does to the conversation (Gemini's `FunctionResponse.scheduling`)."""

    WHEN_IDLE = "when_idle"
    """The follow-up response waits until no response is active."""
    INTERRUPT = "interrupt"
    """Cancel the active response, then follow up."""
    SILENT = "silent"
    """Inject the output and send no `response.create`."""


class Interruption(str, enum.Enum):
    """What happens to a running handler when the user barges in."""

    CANCEL = "cancel"
    FINISH_SILENTLY = "finish_silently"
    FINISH_AND_SPEAK = "finish_and_speak"


class _Missing(enum.Enum):
    """Type of the `MISSING` sentinel: `None` is a legitimate tool result, so "not given" needs
    its own value."""

    MISSING = "MISSING"

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing.MISSING


_EnumT = TypeVar("_EnumT", bound=enum.Enum)


def coerce_choice(
    enum_type: type[_EnumT], value: Any, what: str, error: type[Exception] = ValueError
) -> _EnumT:
    """Accept an enum member or its string value; anything else names the valid choices."""
    if isinstance(value, enum_type):
        return value
    try:
        return enum_type(value)
    except ValueError:
        choices = ", ".join(repr(member.value) for member in enum_type)
        raise error(f"unknown {what} {value!r}: choose one of {choices}") from None


@dataclass(frozen=True)
class ToolResult:
    """A handler's answer with more to say than a bare return value.

    Exactly one of `result` and `error` is given (`result=None` counts as given). `message` is
    what the assistant should say about it; `scheduling` overrides the tool's scheduling for this
    one answer.
    """

    result: Any = MISSING
    error: Any = MISSING
    message: str | None = None
    scheduling: Scheduling | None = None

    def __post_init__(self) -> None:
        has_result = self.result is not MISSING
        has_error = self.error is not MISSING
        if has_result == has_error:
            given = "both" if has_result else "neither"
            raise ValueError(f"ToolResult needs exactly one of result= or error=, got {given}")
        if self.message is not None and not isinstance(self.message, str):
            raise ValueError(f"ToolResult message must be a string, got {type(self.message).__name__}")
        if self.scheduling is not None:
            scheduling = coerce_choice(Scheduling, self.scheduling, "scheduling")
            object.__setattr__(self, "scheduling", scheduling)

    @property
    def is_error(self) -> bool:
        return self.error is not MISSING


class IdempotencyKey(str):
    """The type of a handler parameter that asks for the call's idempotency key: its session, its
    call id and a hash of its arguments, the same for every run of the same call (on any replica
    that shares a store). The relay gives it; the model never sees the parameter:

        @tool
        def refund(order: int, key: IdempotencyKey) -> str: ...
    """
