"""Runs tool handlers for one session's engine.

Each handler is its own task in the session's task group, never on a socket's read path, so a
slow tool cannot stall audio. Sync handlers run in worker threads (a per-session limiter, so a
session whose handlers block cannot starve the others); async generators are streaming tools
whose every value is reported as it comes. Timeouts are the engine's decision (it has the fake
clock in tests); the runner only obeys `CancelHandler`. With tracing on, each handler runs inside
`handler_scope(call_id)` (its call's span made current), in its own task or thread.
"""

from __future__ import annotations

import functools
import logging
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Awaitable, Callable

import anyio
import anyio.abc

from relay.engine import Outcome, StartHandler
from relay.tools.spec import HandlerKind

log = logging.getLogger("relay.runner")

Report = Callable[[str, Outcome], None]
YieldReport = Callable[[str, Any], None]
HandlerScope = Callable[[str], AbstractContextManager[Any]]


class HandlerRunner:
    def __init__(
        self,
        task_group: anyio.abc.TaskGroup,
        *,
        on_finished: Report,
        on_yield: YieldReport,
        thread_limit: int = 8,
        handler_scope: HandlerScope | None = None,
    ) -> None:
        self._task_group = task_group
        self._on_finished = on_finished
        self._on_yield = on_yield
        self._handler_scope = handler_scope
        self._limiter = anyio.CapacityLimiter(thread_limit)
        self._scopes: dict[str, anyio.CancelScope] = {}

    @property
    def running(self) -> int:
        return len(self._scopes)

    def start(self, action: StartHandler) -> None:
        scope = anyio.CancelScope()
        self._scopes[action.call_id] = scope
        self._task_group.start_soon(self._run, action, scope, name=f"tool {action.tool.name} {action.call_id}")

    def cancel(self, call_id: str) -> None:
        scope = self._scopes.pop(call_id, None)
        if scope is not None:
            scope.cancel()

    def cancel_all(self) -> None:
        for call_id in list(self._scopes):
            self.cancel(call_id)

    async def _run(self, action: StartHandler, scope: anyio.CancelScope) -> None:
        outcome: Outcome | None = None
        with scope:
            try:
                with self._handler_scope(action.call_id) if self._handler_scope else nullcontext():
                    outcome = await self._call(action)
            except Exception as exc:  # a handler's failure is an output, not a crash
                outcome = Outcome.raised(exc)
        if self._scopes.get(action.call_id) is scope:
            del self._scopes[action.call_id]
        if scope.cancel_called or outcome is None:
            return  # the engine decided this call's output when it asked for the cancel
        self._on_finished(action.call_id, outcome)

    async def _call(self, action: StartHandler) -> Outcome:
        tool = action.tool
        handler = tool.handler
        if tool.kind is HandlerKind.SYNC:
            value = await anyio.to_thread.run_sync(
                functools.partial(handler, **action.arguments),
                abandon_on_cancel=True,   # a blocked thread cannot be killed; stop waiting for it
                limiter=self._limiter,
            )
            return Outcome.returned(value)
        if tool.kind is HandlerKind.ASYNC:
            coroutine: Awaitable[Any] = handler(**action.arguments)
            return Outcome.returned(await coroutine)
        stream = handler(**action.arguments)
        try:
            async for value in stream:
                self._on_yield(action.call_id, value)
        finally:
            await stream.aclose()
        return Outcome.ended()
