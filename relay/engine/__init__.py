"""The sans-I/O engine: one object per session, given what happened, answering with what to do.

    engine = new_engine(tools, dialect=...)        # OpenAIEngine, GeminiEngine or LiveEngine
    engine.receive_upstream(frame, now)  -> actions
    engine.receive_client(frame, now)    -> actions
    engine.handler_finished(call_id, outcome, now) -> actions
    engine.tick(now)                     -> actions

`Engine` is the type every edge holds (the shared core, `core.SessionEngine`); `new_engine` picks
the dialect's engine. docs/architecture.md maps the modules.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from relay.dialects import OPENAI, Dialect, GeminiDialect, LiveDialect, OpenAIFamily
from relay.engine.actions import (
    Action,
    ActionInterpreter,
    ActionSink,
    CancelHandler,
    Close,
    Notice,
    Outcome,
    Remember,
    SendClient,
    SendUpstream,
    StartHandler,
)
from relay.engine.calls import CallEntry, CallLedger, CallState, Owner
from relay.engine.core import (
    DEFAULT_HISTORY_LIMIT,
    DEFAULT_HOLD_LIMIT,
    Anomaly,
    EngineConfig,
    SessionEngine,
)
from relay.engine.delegations import LiveEngine
from relay.engine.immediate import GeminiEngine
from relay.engine.itembased import OpenAIEngine
from relay.tools import ToolRegistry
from relay.tools.spec import ToolSpec

Engine = SessionEngine
"""The type of any session's engine, whatever its dialect."""


def new_engine(tools: ToolRegistry | Iterable[ToolSpec | Callable[..., Any]] = (), *, dialect: Dialect = OPENAI,
               **options: Any) -> Engine:
    """The engine for a dialect: `OpenAIEngine` for the OpenAI family (GA, beta, Azure, Foundry),
    `GeminiEngine` for Gemini Live, `LiveEngine` for GPT-Live. `options`: `config`, `session_id`,
    `id_prefix`."""
    if isinstance(dialect, OpenAIFamily):
        return OpenAIEngine(tools, dialect=dialect, **options)
    if isinstance(dialect, GeminiDialect):
        return GeminiEngine(tools, dialect=dialect, **options)
    if isinstance(dialect, LiveDialect):
        return LiveEngine(tools, dialect=dialect, **options)
    raise TypeError(f"no engine speaks the {dialect.name} dialect's family ({type(dialect).__name__})")


__all__ = [
    "DEFAULT_HISTORY_LIMIT", "DEFAULT_HOLD_LIMIT", "Action", "ActionInterpreter", "ActionSink", "Anomaly", "CallEntry", "CallLedger", "CallState", "CancelHandler",
    "Close", "Engine", "EngineConfig", "GeminiEngine", "LiveEngine", "Notice", "OpenAIEngine", "Outcome", "Owner",
    "Remember", "SendClient", "SendUpstream", "SessionEngine", "StartHandler", "new_engine",
]
