"""What every session engine shares, whatever the wire: the entry points, the plumbing that
turns each input into a list of actions, anomalies, ids, the conversation and the call ledger.

A dialect's engine (`core.Engine` for the OpenAI family, `gemini.GeminiEngine`) subclasses this
and supplies the hooks: `_upstream_frame`, `_client_frame`, `_handler_yielded`,
`_handler_finished`, `_tick`, `_on_disconnect`, `_on_reconnect`, `_close`, and optionally
`_after_input` and `_other_deadlines`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal

from relay.engine.actions import Action, CancelHandler, Notice, Outcome
from relay.engine.calls import tool_call_fields
from relay.engine.conversation import Conversation
from relay.engine.calls import OUTCOME_ABANDONED, CallEntry, CallLedger
from relay.tools import ToolRegistry
from relay.tools.spec import ToolSpec

Mode = Literal["proxy", "sidecar", "replay"]
_UNKNOWN: Any = object()

# What `relay serve` and `relay attach` keep of a live session: the last 16 items (three
# tool-call turns or so), responses and finished calls. The engine's rules only ever look at the
# recent past; the recording keeps the whole session.
DEFAULT_HISTORY_LIMIT = 16


@dataclass(frozen=True)
class EngineConfig:
    """Per-session behaviour. `mode` decides whether there is a client to talk to; the rest are
    the knobs the CLI exposes."""

    mode: Mode = "proxy"
    hide_tool_events: bool = True       # proxy: the client never sees relay tools and their calls
    declare_tools: bool = True          # add the relay's tools to the session
    hold_client_creates: bool = True    # proxy: hold a client response.create while our calls run
    output_limit: int = 32_768
    unknown_tools: Literal["client", "error"] = "client"
    strict: bool = False                # re-raise internal errors (tests) instead of recording them
    # keep this many recent items, responses and finished calls (None: all); a live session's
    # memory then stays flat however long it runs
    history_limit: int | None = None

    @property
    def has_client(self) -> bool:
        return self.mode == "proxy"


@dataclass(frozen=True, slots=True)
class Anomaly:
    at: float
    message: str
    event_type: str | None = None
    source: str = "upstream"


class SessionEngine:
    """One session's state and the sans-I/O plumbing around its rules."""

    def __init__(
        self,
        tools: ToolRegistry | Iterable[ToolSpec | Callable[..., Any]],
        *,
        dialect: Any,
        config: EngineConfig | None,
        session_id: str,
        id_prefix: str,
    ) -> None:
        self.tools = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        self.dialect = dialect
        self.config = config or EngineConfig()
        self.session_id = session_id
        self.anomalies: list[Anomaly] = []
        self.conversation = Conversation(self._record_anomaly)
        self.ledger = CallLedger()
        self.upstream_connected = True
        self.closed = False
        self.frames_in = {"upstream": 0, "client": 0}
        self._id_prefix = id_prefix[:16]
        self._counter = 0
        self._now = 0.0
        self._out: list[Action] = []
        self._source = "upstream"
        self._handlers_active: set[str] = set()        # call ids whose handler runs
        self._deadlines: dict[str, float] = {}         # call_id -> handler timeout
        self._deadline: Any = _UNKNOWN                 # next_deadline(), until the state changes

    # ==== public entry points ===========================================================
    def receive_upstream(self, frame: str | bytes, now: float) -> list[Action]:
        return self._run(now, "upstream", self._upstream_frame, frame)

    def receive_client(self, frame: str | bytes, now: float) -> list[Action]:
        return self._run(now, "client", self._client_frame, frame)

    def handler_yielded(self, call_id: str, value: Any, now: float) -> list[Action]:
        return self._run(now, "handler", self._handler_yielded, call_id, value)

    def handler_finished(self, call_id: str, outcome: Outcome, now: float) -> list[Action]:
        return self._run(now, "handler", self._handler_finished, call_id, outcome)

    def tick(self, now: float) -> list[Action]:
        return self._run(now, "timer", self._tick)

    def upstream_disconnected(self, now: float) -> list[Action]:
        """The upstream socket dropped but the session may come back (sidecar reconnect):
        handlers keep running, outputs wait for `upstream_reconnected`."""
        return self._run(now, "upstream", self._on_disconnect)

    def upstream_reconnected(self, now: float) -> list[Action]:
        return self._run(now, "upstream", self._on_reconnect)

    def close(self, now: float, reason: str = "session closed") -> list[Action]:
        """The session is over: cancel running handlers; unanswered calls are recorded as
        abandoned (there is nobody left to send their output to)."""
        return self._run(now, "timer", self._close, reason)

    def next_deadline(self) -> float | None:
        """When `tick` must be called next (None: no timer pending). Asked after every frame by
        the edge, so it is computed once per change of state (every input but a forwarded one)."""
        if self._deadline is _UNKNOWN:
            self._deadline = min((*self._deadlines.values(), *self._other_deadlines()), default=None)
        return self._deadline

    @property
    def calls(self) -> list[CallEntry]:
        return list(self.ledger)

    @property
    def id_prefix(self) -> str:
        return self._id_prefix

    def recording_header(self) -> dict[str, Any]:
        """What a replay needs to rebuild this engine: recorded in the recording's header."""
        return {
            "id_prefix": self._id_prefix,
            "hide_tool_events": self.config.hide_tool_events,
            "declare_tools": self.config.declare_tools,
            "unknown_tools": self.config.unknown_tools,
        }

    def dump(self) -> str:
        from relay.engine.dump import dump_engine

        return dump_engine(self)

    # ==== plumbing ======================================================================
    def _run(self, now: float, source: str, fn: Callable[..., None], *args: Any) -> list[Action]:
        self._now = now
        self._source = source
        self._deadline = _UNKNOWN
        out = self._out = []
        try:
            fn(*args)
            if not self.closed:
                self._after_input()
        except Exception as exc:  # the engine must never take a session down
            if self.config.strict:
                raise
            self._record_anomaly(f"internal error: {type(exc).__name__}: {exc}", None)
        self._out = []
        return out

    def _new_id(self, kind: str) -> str:
        self._counter += 1
        return f"{self._id_prefix}_{kind}{self._counter}"

    def _record_anomaly(self, message: str, event_type: str | None) -> None:
        self.anomalies.append(Anomaly(self._now, message, event_type, self._source))
        self._out.append(Notice("anomaly", {"message": message, "event_type": event_type,
                                            "source": self._source}))

    def _forget_old(self) -> None:
        """Bounded history (EngineConfig.history_limit): called at the end of each turn."""
        if self.config.history_limit is not None:
            self.conversation.forget_old(self.config.history_limit)
            self.ledger.forget_old(self.config.history_limit)

    # ==== hooks ==========================================================================
    def _after_input(self) -> None:
        """Runs after every input unless the session is closed (the sequencer's turn)."""

    def _other_deadlines(self) -> Iterable[float]:
        return ()

    def _upstream_frame(self, frame: str | bytes) -> None:
        raise NotImplementedError

    def _client_frame(self, frame: str | bytes) -> None:
        raise NotImplementedError

    def _handler_yielded(self, call_id: str, value: Any) -> None:
        raise NotImplementedError

    def _handler_finished(self, call_id: str, outcome: Outcome) -> None:
        raise NotImplementedError

    def _tick(self) -> None:
        raise NotImplementedError

    def _on_disconnect(self) -> None:
        self.upstream_connected = False

    def _on_reconnect(self) -> None:
        self.upstream_connected = True

    def _stop_handler(self, call_id: str) -> None:
        """The call's handler is over (finished, cancelled, timed out): forget its timers."""
        self._handlers_active.discard(call_id)
        self._deadlines.pop(call_id, None)

    def _close(self, reason: str) -> None:
        for call_id in list(self._handlers_active):
            self._out.append(CancelHandler(call_id, reason))
            self._stop_handler(call_id)
        for entry in self.ledger.unanswered():
            if entry.outcome is None:
                entry.outcome = OUTCOME_ABANDONED
            self._out.append(Notice("tool_call", tool_call_fields(entry) | {
                "outcome": OUTCOME_ABANDONED, "reason": reason}))
        self._on_close()
        self.closed = True

    def _on_close(self) -> None:
        """Drop what waits to be sent: there is nobody to send it to any more."""
