"""Runs tool handlers for one session's engine.

Each handler is its own task in the session's task group, never on a socket's read path, so a
slow tool cannot stall audio. Sync handlers run in worker threads (a per-session limiter, so a
session whose handlers block cannot starve the others); async generators are streaming tools
whose every value is reported as it comes. Timeouts are the engine's decision (it has the fake
clock in tests); the runner only obeys `CancelHandler`. With tracing on, each handler runs inside
`handler_scope(call_id)` (its call's span made current), in its own task or thread.

A tool cannot end anything but its own call: whatever its handler raises, `SystemExit`,
`KeyboardInterrupt` and other `BaseException`s included, is that call's error output. Only a
cancellation the relay asked for (`CancelHandler`, the session or the process ending) goes on as a
cancellation; a `CancelledError` the handler raises of its own accord is its error like any other.

A handler that blocks the event loop (`time.sleep` in an `async def`) stalls every session of the
process. Each step of an async handler (from one `await` that suspends to the next) is timed, and
one that held the loop for `block_seconds` or more is reported (`LoopWatch`) with the tool's name.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import types
from contextlib import AbstractContextManager, nullcontext
from collections.abc import Coroutine, Generator
from typing import Any, Awaitable, Callable, Protocol

import anyio
import anyio.abc

from relay.engine import Outcome, StartHandler
from relay.tools.result import IdempotencyKey
from relay.tools.spec import HandlerKind

log = logging.getLogger("relay.runner")

Report = Callable[[str, Outcome], None]
YieldReport = Callable[[str, Any], None]
HandlerScope = Callable[[str], AbstractContextManager[Any]]
BlockReport = Callable[[str, str, float], None]
Run = Callable[[], Awaitable[Outcome]]
"""A call's handler run to its outcome: the tool's own (`HandlerRunner.call_handler`), or a
stand-in the harness puts in its place (a fault, the explorer's perturbation) around it."""
RunSync = Callable[[Callable[[], Outcome]], Awaitable[Outcome]]


def failed(error: BaseException) -> Outcome:
    """The runner's error-output policy: what a handler raises, whatever it is (`SystemExit`,
    `KeyboardInterrupt`, a `CancelledError` of its own), is its call's outcome, never the session's
    end. The one place it is decided, for every driver."""
    return Outcome.raised(error)

DEFAULT_BLOCK_SECONDS = 0.1
"""How long one step of an async handler may hold the event loop before it is reported: a
realtime audio frame is 20 to 100 ms, and every session of the process waits for the step."""


class LoopWatch:
    """Tells which handler holds the event loop too long. Sans-I/O: fed the clock readings around
    each step of a handler (`step`), it calls `on_blocked(call_id, tool, seconds)` for a step
    that took `threshold` seconds or more."""

    def __init__(self, on_blocked: BlockReport, threshold: float = DEFAULT_BLOCK_SECONDS) -> None:
        self.on_blocked = on_blocked
        self.threshold = threshold

    def step(self, call_id: str, tool: str, started: float, ended: float) -> None:
        held = ended - started
        if held >= self.threshold:
            self.on_blocked(call_id, tool, held)


@types.coroutine
def timed_steps(coroutine: Coroutine[Any, Any, Any], clock: Callable[[], float],
                report: Callable[[float, float], None]) -> Generator[Any, Any, Any]:
    """Await `coroutine` as the event loop would, calling `report(started, ended)` with the clock
    readings around each of its steps (each `send` or `throw` up to its next suspension)."""
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        started = clock()
        try:
            if thrown is None:
                suspended_on = coroutine.send(sent)
            else:
                error, thrown = thrown, None
                try:
                    suspended_on = coroutine.throw(error)
                finally:
                    del error
        except StopIteration as stop:
            return stop.value
        finally:
            report(started, clock())
        try:
            sent = yield suspended_on
        except GeneratorExit:
            coroutine.close()
            raise
        except BaseException as exc:   # a cancellation, or whatever the loop throws in: passed on
            sent, thrown = None, exc
        finally:
            del suspended_on


class Tasks(Protocol):
    """Where handlers run: the session's anyio task group, or `LoopTasks` on a loop that no task
    group runs (the harness's virtual loop)."""

    @property
    def cancel_scope(self) -> Any: ...   # its `cancel_called`: the session is ending
    def start_soon(self, func: Callable[..., Awaitable[Any]], *args: Any, name: object = None) -> None: ...


class HandlerRunner:
    """Runs the handlers of one session: the one runner of every driver (the live session loop,
    the scripted harness on its virtual loop, the replay). `tasks` is where each handler's task
    runs and `cancel_scope` what cancels it (anyio's, or `TaskScope` on the virtual loop);
    `run_sync` where a sync handler runs (default: a worker thread under the session's limiter;
    the harness's loop waits for its own threads with its clock standing still)."""

    def __init__(
        self,
        task_group: Tasks,
        *,
        on_finished: Report,
        on_yield: YieldReport,
        thread_limit: int = 8,
        handler_scope: HandlerScope | None = None,
        on_blocked: BlockReport | None = None,
        block_seconds: float = DEFAULT_BLOCK_SECONDS,
        clock: Callable[[], float] = time.perf_counter,
        run_sync: RunSync | None = None,
        cancel_scope: Callable[[], Any] = anyio.CancelScope,
    ) -> None:
        self._task_group = task_group
        self._on_finished = on_finished
        self._on_yield = on_yield
        self._handler_scope = handler_scope
        self._watch = LoopWatch(on_blocked, block_seconds) if on_blocked is not None else None
        self._clock = clock
        self._thread_limit = thread_limit
        self._limiter: anyio.CapacityLimiter | None = None   # made on first use, inside the loop
        if run_sync is not None:
            self._run_sync = run_sync   # type: ignore[method-assign]
        self._new_scope = cancel_scope
        self._scopes: dict[str, Any] = {}

    @property
    def running(self) -> int:
        return len(self._scopes)

    @property
    def calls(self) -> Any:
        """The ids of the calls whose handler runs (a live view)."""
        return self._scopes.keys()

    def start(self, action: StartHandler, run: Run | None = None) -> None:
        """Run the call's handler (or `run`, a stand-in for it) as a task; its outcome goes to
        `on_finished` unless the relay cancelled it first."""
        scope = self._new_scope()
        self._scopes[action.call_id] = scope
        self._task_group.start_soon(self._run, action, scope, run, name=f"tool {action.tool.name} {action.call_id}")

    def cancel(self, call_id: str) -> None:
        scope = self._scopes.pop(call_id, None)
        if scope is not None:
            scope.cancel()

    def cancel_all(self) -> None:
        for call_id in list(self._scopes):
            self.cancel(call_id)

    async def _run(self, action: StartHandler, scope: Any, run: Run | None) -> None:
        outcome: Outcome | None = None
        try:
            with scope:
                try:
                    with self._handler_scope(action.call_id) if self._handler_scope else nullcontext():
                        outcome = await (run() if run is not None else self.call_handler(action))
                except BaseException as exc:  # a handler's failure is an output, not a crash
                    if self._cancelled_by_relay(exc, scope):
                        raise
                    outcome = failed(exc)
        finally:
            if self._scopes.get(action.call_id) is scope:
                del self._scopes[action.call_id]
        if scope.cancel_called or outcome is None:
            return  # the engine decided this call's output when it asked for the cancel
        self._on_finished(action.call_id, outcome)

    def _cancelled_by_relay(self, exc: BaseException, scope: Any) -> bool:
        """Whether `exc` is a cancellation the relay asked for (this call's, the session's, or the
        task's own, as when the process stops), not one the handler raised by itself."""
        if not isinstance(exc, anyio.get_cancelled_exc_class()):
            return False
        if scope.cancel_called or self._task_group.cancel_scope.cancel_called:
            return True
        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0

    def _timed(self, action: StartHandler, awaitable: Awaitable[Any]) -> Awaitable[Any]:
        """`awaitable` with each of its steps timed against the loop watch (when there is one)."""
        watch = self._watch
        if watch is None or not isinstance(awaitable, Coroutine):
            return awaitable
        call_id, tool, clock = action.call_id, action.tool.name, self._clock
        return timed_steps(awaitable, clock, lambda started, ended: watch.step(call_id, tool, started, ended))

    def call_handler(self, action: StartHandler) -> Awaitable[Outcome]:
        """The tool's own handler run to its outcome, as `run_handler` runs it (its values to
        `on_yield`, its steps timed against the loop watch, a sync one through `run_sync`): what a
        stand-in wraps."""
        return run_handler(action, self._on_yield, run_sync=self._run_sync,
                           timed=functools.partial(self._timed, action))

    async def _run_sync(self, work: Callable[[], Outcome]) -> Outcome:
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self._thread_limit)
        return await anyio.to_thread.run_sync(
            work,
            abandon_on_cancel=True,   # a blocked thread cannot be killed; stop waiting for it
            limiter=self._limiter,
        )


class LoopTasks:
    """`Tasks` on a plain asyncio loop stepped from outside (the harness's virtual loop, which no
    anyio task group runs): each handler is one task of the loop's. Nothing cancels them as a
    group; the driver cancels each handler when the session ends. What a task raises (not a
    handler's failure, which its runner makes an outcome: the engine's own, in strict mode) goes
    to `on_error`, as a task group would raise it, rather than to the loop's log when the task is
    collected."""

    cancel_called = False

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 on_error: Callable[[BaseException], None] | None = None) -> None:
        self._loop = loop
        self._tasks: set[asyncio.Task[Any]] = set()   # held until done: a loop keeps only weak references
        self._on_error = on_error

    @property
    def cancel_scope(self) -> LoopTasks:
        return self

    def start_soon(self, func: Callable[..., Awaitable[Any]], *args: Any, name: object = None) -> None:
        task = self._loop.create_task(func(*args), name=None if name is None else str(name))   # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if self._on_error is None or task.cancelled():
            return
        error = task.exception()
        if error is not None:
            self._on_error(error)


class TaskScope:
    """A cancel scope for `LoopTasks`: cancelling it cancels the task it is entered in, and can be
    done from outside the running loop (the harness carries out the engine's `CancelHandler`
    between the loop's steps, where anyio's scopes cannot be reached). A scope cancelled before its
    task began cancels the task as it enters."""

    __slots__ = ("cancel_called", "_task")

    def __init__(self) -> None:
        self.cancel_called = False
        self._task: asyncio.Task[Any] | None = None

    def __enter__(self) -> TaskScope:
        if self.cancel_called:
            raise asyncio.CancelledError("cancelled before it began")
        self._task = asyncio.current_task()
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        self._task = None
        return False

    def cancel(self) -> None:
        self.cancel_called = True
        if self._task is not None:
            self._task.cancel()


async def run_handler(action: StartHandler, on_yield: YieldReport, *,
                      run_sync: Callable[[Callable[[], Outcome]], Awaitable[Outcome]],
                      timed: Callable[[Awaitable[Any]], Awaitable[Any]] = lambda awaitable: awaitable) -> Outcome:
    """Run one tool's handler to its outcome: the one way a handler runs, live, replayed or in
    the scripted harness. A sync handler runs through `run_sync` (a worker thread) and decides
    its outcome there; an async one is awaited; a streaming one reports each value to
    `on_yield(call_id, value)` as it comes and ends with `Outcome.ended()`. `timed` wraps each
    awaitable of the handler's own (the loop watch). What an async handler raises propagates:
    the caller tells a cancellation it asked for from the handler's failure."""
    tool = action.tool
    handler = tool.handler
    arguments = action.arguments
    if tool.key_parameter is not None:   # it asks for the call's idempotency key
        arguments = {**arguments, tool.key_parameter: IdempotencyKey(action.idempotency_key)}
    if tool.kind is HandlerKind.SYNC:
        return await run_sync(functools.partial(_outcome_in_thread, handler, arguments))
    if tool.kind is HandlerKind.ASYNC:
        coroutine: Awaitable[Any] = handler(**arguments)
        return Outcome.returned(await timed(coroutine))
    stream = handler(**arguments)
    try:
        while True:
            try:
                value = await timed(stream.__anext__())
            except StopAsyncIteration:
                break
            on_yield(action.call_id, value)
    finally:
        await timed(stream.aclose())
    return Outcome.ended()


def _outcome_in_thread(handler: Callable[..., Any], arguments: dict[str, Any]) -> Outcome:
    """A sync handler's outcome, decided in its worker thread: what it raises (`SystemExit`,
    `GeneratorExit` included) stays a value and never crosses into the event loop as an
    exception."""
    try:
        return Outcome.returned(handler(**arguments))
    except BaseException as exc:   # the tool's failure, whatever it is, is its call's output
        return failed(exc)
