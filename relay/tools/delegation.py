"""GPT-Live's client delegation, as a tool author writes it: `@delegate` and the `Delegation` it
receives.

In GPT-Live's default mode the model calls no functions: it hands the work to the application
with `session.delegation.created`, which carries an id and the position on the session's
timeline, never the task text. The application works the request out from the transcripts and
answers with appends. A delegate is the one handler that does this for the relay, beside the
`@tool`s of the same module:

    from relay.tools import ToolResult, delegate

    @delegate(timeout=20, on_failure="I could not look that up.")
    async def assistant(delegation: Delegation) -> ToolResult:
        question = delegation.last_user_text()
        return ToolResult(result=facts, message="Tell the caller it is sunny in Paris.")

It is called once per delegation with a `Delegation` (its id, its offset, the transcript so far
on both sides) and answers with what a tool answers: `message` is spoken (a commentary append),
`result` is silent context (a thinking append), an `error` or a raised exception becomes a spoken,
honest failure, and so does a timeout. The engine's rules (relay/engine/delegations.py) make it
one answer per delegation, split into appends of at most 500 tokens.

The delegate is not a tool: the registry keeps it beside its tools (`ToolRegistry.delegate`), it
is never declared to a model, and a Realtime or Gemini session does not use it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar, overload

from relay.tools.errors import ToolDefinitionError
from relay.tools.result import Interruption
from relay.tools.spec import ToolSpec, build_spec

Speaker = Literal["user", "assistant"]

# what a delegate does when the caller speaks again while it runs: GPT-Live itself cancels
# nothing and speaks a late result, so the delegate does too unless its author says otherwise
DEFAULT_INTERRUPTION = Interruption.FINISH_AND_SPEAK


@dataclass(frozen=True, slots=True)
class Turn:
    """What one side said, as the session's transcript deltas joined it (`user`: the caller's
    input transcript; `assistant`: the model's output transcript)."""

    speaker: Speaker
    text: str


@dataclass(frozen=True, slots=True)
class Delegation:
    """One piece of work the Live model handed to the application: `id` (what every append of
    the answer names), `offset_ms` (where on the session's timeline it was delegated) and the
    transcript so far on both sides, oldest first (the relay keeps the recent past)."""

    id: str
    offset_ms: int | None = None
    transcript: tuple[Turn, ...] = ()

    def last_user_text(self) -> str:
        """What the caller said last: most often the request itself."""
        return next((turn.text for turn in reversed(self.transcript) if turn.speaker == "user"), "")

    def text(self) -> str:
        """The transcript as lines `user: ...` / `assistant: ...` (for a prompt)."""
        return "\n".join(f"{turn.speaker}: {turn.text}" for turn in self.transcript)


_F = TypeVar("_F", bound=Callable[..., Any])
_SETTINGS = frozenset({"timeout", "interruption", "on_failure", "on_delay", "idempotent"})


def delegate_spec(fn: Callable[..., Any], **settings: Any) -> ToolSpec:
    """The spec of a delegate: `fn` takes exactly one parameter (any name), the `Delegation`.
    `settings`: timeout (seconds), interruption, on_failure (what is said when it fails or times
    out), on_delay ((milliseconds, text): a spoken progress filler while it still runs),
    idempotent."""
    unknown = sorted(set(settings) - _SETTINGS)
    name = getattr(fn, "__name__", None) or "delegate"
    if unknown:
        raise ToolDefinitionError(f"delegate {name}: unknown option {', '.join(unknown)}")
    try:
        parameters = [p for p in inspect.signature(fn).parameters.values()]
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"delegate {name}: cannot read the signature: {exc}") from exc
    if len(parameters) != 1:
        raise ToolDefinitionError(f"delegate {name}: takes exactly one parameter, the Delegation "
                                  f"(it has {len(parameters)})")
    if parameters[0].annotation is inspect.Parameter.empty:
        raise ToolDefinitionError(f"delegate {name}: annotate its parameter as relay.tools.Delegation")
    settings.setdefault("interruption", DEFAULT_INTERRUPTION)
    spec = build_spec(fn, **{key: value for key, value in settings.items() if value is not None})
    return replace(spec, delegate=True)


def delegation_parameter(spec: ToolSpec) -> str:
    """The name of the parameter a delegate receives its `Delegation` by."""
    return next(iter(spec.parameters.get("properties", {})), "delegation")


@overload
def delegate(fn: _F, /) -> _F: ...


@overload
def delegate(fn: None = None, /, *, timeout: float = 30.0, interruption: Interruption | str | None = None,
             on_failure: str | None = None, on_delay: tuple[float, str] | None = None,
             idempotent: bool = False) -> Callable[[_F], _F]: ...


def delegate(fn: Callable[..., Any] | None = None, /, **settings: Any) -> Any:
    """Mark the function that answers GPT-Live's client delegations: `@delegate` or
    `@delegate(timeout=..., on_failure=...)`. The function comes back unchanged; its spec is
    attached as a tool's is, so `--tools` finds it beside the tools. One per registry."""

    def decorate(function: _F) -> _F:
        function.__relay_tool__ = delegate_spec(function, **settings)  # type: ignore[attr-defined]
        return function

    if fn is None:
        return decorate
    if not callable(fn):
        raise ToolDefinitionError(f"delegate() got {fn!r} instead of a function")
    return decorate(fn)


__all__ = ["DEFAULT_INTERRUPTION", "Delegation", "Turn", "delegate", "delegate_spec", "delegation_parameter"]
