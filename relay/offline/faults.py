"""Faults on demand: run a scripted conversation or a recording with something going wrong, and see
what the relay answers.

    from relay.testing import faults, replay_with_faults

    with script.start([book_table], faults=[faults.timeout("book_table")]) as session: ...
    run = replay_with_faults("recordings/refund.jsonl", ["tools.py"], [faults.barge_in(call=1, after=0.5)])
    print(run.report())

| fault | what happens |
|---|---|
| `timeout(tool)` | the handler never returns: the relay's timeout answers for it |
| `raises(tool, error)` | the handler raises `error` instead of running |
| `slow(tool, seconds)` | the handler starts `seconds` late (virtual seconds), then runs |
| `error_result(tool, message)` | the handler returns `ToolResult(error=message)` instead of running |
| `barge_in(call, after, text)` | the caller speaks over the assistant `after` seconds into the Nth relay call |
| `drop_upstream(call, after)` | the upstream connection drops `after` seconds into the Nth relay call |
| `duplicate_delivery(call, among)` | the upstream delivers the model's Nth call twice (`among`: of any tool, the relay's or the client's) |

`call` counts from 1: the Nth call of `tool` for the tool faults (every call when None), the Nth
call the relay runs (barge-in, drop) or the model makes (duplicate delivery: of any tool, or among
the relay's or the client's calls alone, as `relay explore` numbers them) for the others. A
recording is played to the engine at its recorded times on virtual time (no causal gating: once a
fault changes what the relay does, the recorded upstream cannot answer the new course anyway), the
tools run for real on that clock, and the result is a session like a scripted one: its timeline,
expectations, invariants, report.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

from relay.dialects import Dialect
from relay.dialects import gemini_codec as gemini
from relay.dialects import openai_codec as wire
from relay.dialects.openai import FUNCTION_CALL
from relay.engine import Outcome, StartHandler
from relay.offline.replaying import json_object as decode
from relay.tools import ToolResult

TOOL_FAULTS = ("timeout", "raises", "slow", "error_result")
SESSION_FAULTS = ("barge_in", "drop_upstream")
DELIVERY_COUNTS = ("model", "relay", "client")
"""What a `duplicate_delivery` fault's `call` counts: the model's calls, of the relay's tools, or of
the client's (a tool not the relay's)."""
_CALL_DONE = (wire.OutputItemDone, wire.ItemDone, wire.FunctionCallArgumentsDone)
"""The OpenAI family's events that complete a call (each delivers it; the relay runs it on the first)."""


class InjectedFault(RuntimeError):
    """What a `raises` fault raises unless given another error."""


@dataclass(frozen=True)
class Fault:
    """One fault (build them with the functions of this module)."""

    kind: str
    tool: str | None = None
    call: int | None = None
    seconds: float = 0.0
    error: BaseException | None = None
    message: str = ""
    text: str | None = None
    among: str = "model"   # duplicate_delivery: what `call` counts (`DELIVERY_COUNTS`)

    def describe(self) -> str:
        which = f"call {self.call}" if self.call else "every call"
        target = f"{self.tool} ({which})" if self.tool else which
        extra = {"slow": f" by {self.seconds:g} s", "error_result": f": {self.message}",
                 "raises": f": {self.error!r}"}.get(self.kind, f" after {self.seconds:g} s" if self.seconds else "")
        return f"{self.kind} at {target}{extra}"


def timeout(tool: str | None = None, *, call: int | None = None) -> Fault:
    """The tool's handler never returns, so the relay's timeout decides its answer."""
    return Fault("timeout", tool, call)


def raises(tool: str | None = None, error: BaseException | None = None, *, call: int | None = None) -> Fault:
    """The tool's handler raises `error` (an `InjectedFault` by default) instead of running."""
    return Fault("raises", tool, call, error=error or InjectedFault("injected by the harness"))


def slow(tool: str | None = None, seconds: float = 1.0, *, call: int | None = None) -> Fault:
    """The tool's handler starts `seconds` (virtual) late."""
    return Fault("slow", tool, call, seconds=seconds)


def error_result(tool: str | None = None, message: str = "injected error", *, call: int | None = None) -> Fault:
    """The tool returns `ToolResult(error=message)` instead of running."""
    return Fault("error_result", tool, call, message=message)


def barge_in(call: int = 1, *, after: float = 0.0, text: str | None = None) -> Fault:
    """The caller speaks over the assistant `after` seconds into the Nth call the relay runs (with
    `text`, in a scripted session: a whole turn the model answers; a recording played with faults
    has no model to answer, and plays the barge-in alone)."""
    return Fault("barge_in", None, call, seconds=after, text=text)


def drop_upstream(call: int = 1, *, after: float = 0.0) -> Fault:
    """The upstream connection drops `after` seconds into the Nth call the relay runs."""
    return Fault("drop_upstream", None, call, seconds=after)


def duplicate_delivery(call: int = 1, *, among: str = "model") -> Fault:
    """The frames that complete the model's Nth call arrive twice: its Nth call of any tool
    (`among="model"`), of the relay's tools (`"relay"`) or of the client's (`"client"`)."""
    if among not in DELIVERY_COUNTS:
        raise ValueError(f"among must be one of {', '.join(DELIVERY_COUNTS)}, not {among!r}")
    return Fault("duplicate_delivery", None, call, among=among)


class FaultTarget(Protocol):
    """What a fault plan acts on: a harness session (relay.offline.harness.HarnessSession)."""

    dialect: Dialect
    gemini: bool
    tools: Any   # the relay's tools (their `name`s)
    loop: asyncio.AbstractEventLoop
    closed: bool

    def mark(self, kind: str, label: str) -> None: ...
    def _handler(self, action: StartHandler) -> Callable[[], Any]: ...
    def barge_in_now(self, text: str | None = None) -> None: ...
    def end(self, reason: str) -> None: ...


class FaultPlan:
    """The faults of one session, applied as it runs (`HarnessSession` asks it)."""

    def __init__(self, faults: Iterable[Fault], session: FaultTarget) -> None:
        self.faults = list(faults)
        for fault in self.faults:
            if not isinstance(fault, Fault):
                raise TypeError(f"not a fault: {fault!r} (build faults with relay.testing.faults)")
        self.session = session
        self._per_tool: dict[str, int] = {}
        self._started = 0
        self._calls: dict[str, list[str]] = {among: [] for among in DELIVERY_COUNTS}   # the model's, in order
        self._relay_tools = frozenset(spec.name for spec in session.tools)
        self._repeated: set[str] = set()
        self._scheduled = 0
        # the calls as the session numbers them, where it does (the explorer: the relay's call
        # book, which also holds calls a reconnect learnt back by their items); else as delivered
        self._numbering: Callable[[str], list[str] | None] = getattr(session, "numbered_calls", lambda among: None)

    def pending(self) -> bool:
        """A fault is scheduled and has not happened yet."""
        return self._scheduled > 0

    def _matches(self, fault: Fault, number: int, tool: str | None = None) -> bool:
        return (fault.tool is None or fault.tool == tool) and (fault.call is None or fault.call == number)

    def handler(self, action: StartHandler) -> Callable[[], Any] | None:
        """A stand-in for the handler of this call, when a tool fault hits it."""
        name = action.tool.name
        self._per_tool[name] = number = self._per_tool.get(name, 0) + 1
        fault = next((f for f in self.faults if f.kind in TOOL_FAULTS and self._matches(f, number, name)), None)
        if fault is None:
            return None
        original = self.session._handler(action)
        self.session.mark("fault", f"{fault.describe()}: {action.call_id}")

        async def faulty() -> Any:
            if fault.kind == "timeout":
                await asyncio.Event().wait()
            if fault.kind == "raises":
                raise fault.error   # type: ignore[misc]
            if fault.kind == "error_result":
                return Outcome.returned(ToolResult(error=fault.message))
            await asyncio.sleep(fault.seconds)
            return await original()

        return faulty

    def started(self, action: StartHandler) -> None:
        """The relay started a handler: a session fault may be due some time into it."""
        self._started += 1
        for fault in self.faults:
            if fault.kind in SESSION_FAULTS and fault.call == self._started:
                self._scheduled += 1
                self.session.loop.call_later(fault.seconds, self._happen, fault)

    def _happen(self, fault: Fault) -> None:
        self._scheduled -= 1
        session = self.session
        if session.closed:
            return
        if fault.kind == "barge_in":
            session.mark("fault", "the caller barges in")
            session.barge_in_now(fault.text)
        else:
            session.mark("fault", "the upstream connection dropped")
            session.end("upstream closed the session")

    def deliveries(self, frame: str | bytes) -> list[str | bytes]:
        """The frames delivered for one the upstream sent: twice when it completes a call a
        `duplicate_delivery` fault names."""
        wanted = [f for f in self.faults if f.kind == "duplicate_delivery"]
        if not wanted:
            return [frame]
        event = decode(frame)
        if event is None:
            return [frame]
        if self.session.gemini:
            return self._gemini_deliveries(frame, event, wanted)
        typed = wire.event_of(event, self.session.dialect)
        carried = typed.item if isinstance(typed, (wire.OutputItemAdded, wire.OutputItemDone, wire.ItemDone)) else None
        item = carried if isinstance(carried, dict) else {}
        if isinstance(typed, wire.OutputItemAdded) and item.get("type") == FUNCTION_CALL:
            self._seen(item.get("call_id"), item.get("name"))
        if isinstance(typed, _CALL_DONE):
            call_id = (typed.call_id if isinstance(typed, wire.FunctionCallArgumentsDone) else None) or item.get("call_id")
            if item.get("type", FUNCTION_CALL) == FUNCTION_CALL and self._wanted(call_id, wanted):
                self._duplicated(str(call_id))
                return [frame, frame]
        return [frame]

    def _gemini_deliveries(self, frame: str | bytes, event: dict[str, Any], wanted: list[Fault]) -> list[str | bytes]:
        again = []
        for message in gemini.messages_of(event):
            if not isinstance(message, gemini.ToolCall):
                continue
            for call in gemini.entries(message.function_calls, gemini.FunctionCall):
                self._seen(gemini.given(call.id), gemini.given(call.name))
                if self._wanted(gemini.given(call.id), wanted):
                    again.append(call)
        if not again:
            return [frame]
        for repeated in again:
            self._duplicated(str(gemini.given(repeated.id)))
        repeat = gemini.encode(gemini.ToolCall(function_calls=again))
        return [frame, repeat.encode() if isinstance(frame, bytes) else repeat]

    def _duplicated(self, call_id: str) -> None:
        if call_id not in self._repeated:
            self._repeated.add(call_id)
            self.session.mark("fault", f"the upstream delivers call {call_id} twice", ahead=1)

    def _seen(self, call_id: Any, name: Any) -> None:
        calls = self._calls
        if isinstance(call_id, str) and call_id not in calls["model"]:
            calls["model"].append(call_id)
            calls["relay" if name in self._relay_tools else "client"].append(call_id)

    def _wanted(self, call_id: Any, wanted: list[Fault]) -> bool:
        """Whether a `duplicate_delivery` fault names the call (by its place among those it counts)."""
        return any(call_id in (calls := self._numbered(fault.among)) and calls.index(call_id) + 1 == fault.call
                   for fault in wanted)

    def _numbered(self, among: str) -> list[str]:
        """The calls `among` counts, in order: the session's numbering, then those the frame being
        delivered brings that it has not numbered yet; else the order they were delivered in."""
        delivered = self._calls[among]
        numbered = self._numbering(among)
        if numbered is None:
            return delivered
        return numbered + [call_id for call_id in delivered if call_id not in numbered]

    def client_calls(self) -> list[str]:
        """The model's calls of the client's tools, in order (seen while a duplicate was wanted)."""
        return list(self._calls["client"])


# ---- a recording, played with faults ------------------------------------------------------------
