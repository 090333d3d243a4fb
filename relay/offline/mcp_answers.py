"""A replay's MCP tools (relay/offline/replay.py): the tools a recording's header lists
(`mcp_tools`), answered from the recording, or by the live servers (`mcp_answers="live"`).

From the recording, each call gets the output recorded for the same tool and arguments, in order,
at the moment it was recorded in the replay's time (`Moments`), so a recorded filler or timeout
happens again as it did, and a session with MCP tools replays offline without its servers. An
answer the engine decided (a timeout, a cancellation) is left to the engine, which decides it
again. A call whose arguments the recording did not answer gets an error output, which the replay
reports. A recorded tool no live server offers is answered from the recording, with a warning.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from typing import Any

import anyio

from relay.engine.calls import CallOutcome
from relay.recording.format import Recording
from relay.tools import ToolRegistry, ToolResult
from relay.tools.mcp_tools import recorded_spec
from relay.tools.render import error_in_output

_EPSILON = 1e-6


class Moments:
    """Moments of the replay's time (seconds into the recording) that handlers wait for, on the
    replay's loop, whose clock is the recording's (`base`, its start, plus the seconds into it):
    a wait is a sleep of that loop's, virtual. A moment is reached within a microsecond: the
    recording's times and the replay's sums of them differ in their last bits."""

    def __init__(self) -> None:
        self.base = 0.0

    async def reached(self, t: float) -> None:
        delay = self.base + t - anyio.current_time()
        if delay > _EPSILON:
            await anyio.sleep(delay)


MCP_ANSWERS = ("recording", "live")


@dataclass
class _RecordedAnswer:
    t: float              # when the relay sent it, seconds into the recording
    output: str
    handler_answered: bool  # the handler's answer (ok, error); else the engine's (timeout, cancelled, ...)


class RecordedMcpAnswers:
    """What the recording's MCP calls were answered, by tool and arguments, in order."""

    def __init__(self, recording: Recording, names: set[str]) -> None:
        from relay.offline.timeline import Timeline

        self.answers: dict[tuple[str, str], list[_RecordedAnswer]] = {}
        timeline = Timeline.from_recording(recording, relay_tools=names)
        calls = {event.call_id: event for event in timeline.calls() if event.name in names}
        for output in timeline.outputs():
            call = calls.get(output.call_id)
            if call is None or output.by != "relay" or not output.final or output.text is None:
                continue
            key = (call.name or "", _arguments_key(call.arguments))
            by_handler = output.outcome in (None, CallOutcome.OK, CallOutcome.ERROR)
            self.answers.setdefault(key, []).append(_RecordedAnswer(output.t, output.text, by_handler))

    def take(self, name: str, arguments: dict[str, Any]) -> _RecordedAnswer | None:
        queue = self.answers.get((name, _arguments_key(arguments)))
        return queue.pop(0) if queue else None


def _arguments_key(arguments: Any) -> str:
    return json.dumps(arguments if arguments not in (None, "") else {}, sort_keys=True, ensure_ascii=False)


class _RecordedMcpTool:
    """A recorded MCP tool's handler in a replay: the recorded answer, at its recorded moment."""

    def __init__(self, name: str, answers: RecordedMcpAnswers, moments: Moments) -> None:
        self.name = name
        self.answers = answers
        self.moments = moments
        self.__qualname__ = f"recorded:{name}"

    async def __call__(self, **arguments: Any) -> Any:
        answer = self.answers.take(self.name, arguments)
        if answer is None:
            return ToolResult(error=f"no recorded answer to {self.name} with these arguments (the recording "
                                    "answered other ones)")
        if not answer.handler_answered:
            await anyio.sleep_forever()   # the engine decided this one (a timeout...): it will again
        await self.moments.reached(answer.t)
        is_error, error = error_in_output(answer.output)
        return ToolResult(error=error) if is_error else answer.output


def with_recorded_mcp_tools(registry: ToolRegistry, recording: Recording, moments: Moments,
                             warnings: list[str], live: bool) -> ToolRegistry:
    """`registry` and, for each MCP tool the recording's header lists that it lacks, a spec
    answering from the recording (with a warning when live answers were asked for)."""
    entries = [entry for entry in (recording.header or {}).get("mcp_tools") or ()
               if isinstance(entry, dict) and entry.get("name") not in registry]
    if not entries:
        return registry
    names = {str(entry.get("name")) for entry in entries}
    answers = RecordedMcpAnswers(recording, names)
    if live:
        warnings.append(f"no live MCP server offers {', '.join(sorted(names))}: answered from the recording")
    recorded = [recorded_spec(entry, _RecordedMcpTool(str(entry["name"]), answers, moments)) for entry in entries]
    return ToolRegistry([*registry, *recorded])


def on_the_callers_loop(registry: ToolRegistry, static: ToolRegistry) -> ToolRegistry:
    """`registry` with its MCP tools (those not in `static`) called on the caller's event loop,
    which owns the live servers' connections: the replay's handlers run on its own virtual loop,
    which waits for such a call as for a thread's work, its clock standing still."""
    caller = asyncio.get_running_loop()
    own = {spec.name for spec in static}
    return ToolRegistry([spec if spec.name in own else replace(spec, handler=_Bridged(spec.handler, caller))
                         for spec in registry])


class _Bridged:
    """An MCP tool's handler, called on `caller`'s loop from the replay's (see `on_the_callers_loop`)."""

    def __init__(self, handler: Any, caller: asyncio.AbstractEventLoop) -> None:
        self.handler = handler
        self.caller = caller
        self.__qualname__ = getattr(handler, "__qualname__", repr(handler))

    async def __call__(self, **arguments: Any) -> Any:
        call = asyncio.run_coroutine_threadsafe(self.handler(**arguments), self.caller)
        loop = asyncio.get_running_loop()
        run_in_thread = getattr(loop, "run_in_thread", None)   # the virtual loop waits for it, clock still
        try:
            if run_in_thread is not None:
                return await run_in_thread(call.result)
            return await asyncio.wrap_future(call)
        except asyncio.CancelledError:
            call.cancel()
            raise
