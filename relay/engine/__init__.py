"""The sans-I/O engine: one object per session, given what happened, answering with what to do.

    engine = new_engine(tools, dialect=...)        # OpenAIEngine, GeminiEngine or LiveEngine
    engine.receive_upstream(frame, now)  -> actions
    engine.receive_client(frame, now)    -> actions
    engine.handler_finished(call_id, outcome, now) -> actions
    engine.tick(now)                     -> actions

`Engine` is the type every edge holds (the shared core, `core.SessionEngine`); `new_engine` picks
the engine of the tool flow the dialect's family registers (`Dialect.flow`, `ENGINES`). docs/architecture.md maps the modules.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from relay.dialects import OPENAI, Dialect
from relay.dialects.base import ToolFlow
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


ENGINES: dict[ToolFlow, type[SessionEngine]] = {
    ToolFlow.ITEMS: OpenAIEngine,        # the OpenAI Realtime family (GA, beta, Azure, Foundry, xAI, Voice Live)
    ToolFlow.TURNS: GeminiEngine,        # Gemini Live, and any wire whose calls come whole (`dialect.codec`)
    ToolFlow.DELEGATIONS: LiveEngine,    # GPT-Live
}
"""The engine of each tool flow: a family's dialect names its flow (`Dialect.flow`), and the
engine of that flow runs it, reading and writing its wire through the family's codec."""


def new_engine(tools: ToolRegistry | Iterable[ToolSpec | Callable[..., Any]] = (), *, dialect: Dialect = OPENAI,
               **options: Any) -> Engine:
    """The engine for a dialect: the one of the tool flow its family registers (`ENGINES` by
    `dialect.flow`). `options`: `config`, `session_id`, `id_prefix`."""
    engine = ENGINES.get(getattr(dialect, "flow", None))   # type: ignore[arg-type]
    if engine is None:
        raise TypeError(f"no engine runs the {dialect.name} dialect's tool flow ({getattr(dialect, 'flow', None)!r})")
    return engine(tools, dialect=dialect, **options)


__all__ = [
    "DEFAULT_HISTORY_LIMIT", "DEFAULT_HOLD_LIMIT", "ENGINES", "Action", "ActionInterpreter", "ActionSink", "Anomaly", "CallEntry", "CallLedger", "CallState", "CancelHandler",
    "Close", "Engine", "EngineConfig", "GeminiEngine", "LiveEngine", "Notice", "OpenAIEngine", "Outcome", "Owner",
    "Remember", "SendClient", "SendUpstream", "SessionEngine", "StartHandler", "new_engine",
]
