"""Virtual time for the test harness: an asyncio event loop whose clock moves only when the test
moves it, so that a 3-second tool and a 0.8-second filler take no real time and always happen in
the same order.

    loop = VirtualLoop()
    loop.run_until(loop.time() + 0.8)    # every timer due by then fires, in order; then it stops

The loop is asyncio's own selector loop with two public seams used: `time()` reads the virtual
clock, and the selector it is given (`SelectorEventLoop(selector=...)`) never sleeps. When the
loop has nothing ready and would wait for its next timer, the clock jumps to that timer instead,
up to the horizon `run_until` set; at the horizon, with nothing ready, the loop stops. I/O that is
ready (a thread handing back its result) is served first, at the current virtual time.

What cannot be virtual is work done outside the loop: a sync tool runs in a worker thread (as the
relay runs it) and a tool may hand work to `asyncio.to_thread` / `loop.run_in_executor`. While such
work is pending the clock stands still and the loop waits for it in real time (it takes no
virtual time at all), for at most `thread_limit` real seconds (a sync tool's thread is first waited
for where the loop stands, so that a quick tool's answer comes at the same place on every run): a sync tool blocking in
`time.sleep(3)` costs three real seconds and no virtual one, and one that blocks for longer than the
limit stops the run with `VirtualTimeError`. Threads the loop is not told about (anyio's worker
threads) are not waited for: their results arrive whenever real time brings them.

Called from an async test (inside the test's own loop), the loop runs in a thread of its own for
each step, the test's loop waiting: the harness's API is synchronous either way.

Why not the `looptime` package: it fast-forwards a whole test's loop whenever it idles and moves
its clock in steps of real time while executor work is pending, so a sync tool's real duration
leaks into virtual time; the harness needs a clock stepped to an exact target by the test, with
threads at a frozen instant, and no extra dependency for `relay.testing` users.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import queue
import selectors
import threading
import time
from typing import Any, Callable

from relay.errors import UnusableInput

DEFAULT_THREAD_LIMIT = 10.0
_FREE_WORKERS: list[queue.SimpleQueue[Any]] = []
"""Idle worker threads' inboxes, shared by every virtual loop of the process: a run of many short
sessions (the explorer's schedules) starts a thread once, not once a session."""
MAX_FREE_WORKERS = 4
"""Idle workers kept for the next work; one freed beyond them ends."""
PROMPT_WAIT = 1.0   # or the loop's `thread_limit`, if less
"""Real seconds the loop waits for a thread's work where it stands, before going on at the same
virtual instant and waiting when it idles (see `VirtualLoop.run_in_thread`)."""


class _Handoff:
    """A worker's outcome handed to the loop that waits for it, or, once the loop stopped waiting,
    left for the worker to post (`give` says which)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._given = threading.Event()
        self._outcome: Callable[[], None] | None = None
        self._waiting = True

    def give(self, outcome: Callable[[], None]) -> bool:
        with self._lock:
            if not self._waiting:
                return False
            self._outcome = outcome
        self._given.set()
        return True

    def take(self, timeout: float, giving_up: Callable[[], None]) -> Callable[[], None] | None:
        """The outcome, if given within `timeout`; else None, `giving_up` called first (before
        the worker can see that nobody waits and post its outcome to the loop instead)."""
        self._given.wait(timeout)
        with self._lock:
            if self._outcome is None:
                giving_up()
            self._waiting = False
            return self._outcome


def _free(jobs: queue.SimpleQueue[Any]) -> None:
    """A worker's work is done: it waits for the next (any loop's), or ends when enough wait."""
    if len(_FREE_WORKERS) < MAX_FREE_WORKERS:
        _FREE_WORKERS.append(jobs)
    else:
        jobs.put(None)


class VirtualTimeError(UnusableInput, RuntimeError):
    """The harness cannot keep virtual time: work outside the loop (a sync tool, a thread) did not
    end within the real-time limit, or the harness was driven from inside its own loop (from a
    tool). The tools, as given, cannot run on virtual time: input the command cannot use (one
    line, exit 2), not a bug of the relay's."""


class _NeverSleeps(selectors.BaseSelector):
    """The real selector, polled without waiting; the waiting is turned into a jump of the
    virtual clock (`VirtualLoop._idle`)."""

    def __init__(self) -> None:
        self._real: selectors.BaseSelector | None = None   # made when first needed (most loops never do)
        self.on_idle: Callable[[float | None], list[Any]] = lambda timeout: []
        self.threads: Any = (None,)   # the loop's work in threads it waits for (set by the loop)
        self._registered = 0   # what is registered with `real` (the loop's own wake-up pipe: 1)

    @property
    def real(self) -> selectors.BaseSelector:
        if self._real is None:
            self._real = selectors.DefaultSelector()
        return self._real

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = self.real.register(fileobj, events, data)
        self._registered += 1
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        key = self.real.unregister(fileobj)
        self._registered -= 1
        return key

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self.real.modify(fileobj, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if self._registered <= 1 and not self.threads:   # `quiet()`, without its call: once a loop step
            # nothing can be ready: no work in a thread is awaited and no socket but the loop's
            # own wake-up pipe is registered (the poll would be a system call per step for nothing)
            return [] if timeout == 0 else self.on_idle(timeout)
        ready = self.real.select(0)
        if ready or timeout == 0:
            return ready
        return self.on_idle(timeout)

    def quiet(self) -> bool:
        return self._registered <= 1 and not self.threads

    def get_map(self) -> Any:
        return self.real.get_map()

    def close(self) -> None:
        if self._real is not None:
            self._real.close()


class VirtualLoop(asyncio.SelectorEventLoop):
    """An asyncio loop on a virtual clock (see the module docstring). Not for production: it
    never waits for sockets."""

    def __init__(self, *, start: float = 0.0, thread_limit: float = DEFAULT_THREAD_LIMIT) -> None:
        selector = _NeverSleeps()
        super().__init__(selector)
        selector.on_idle = self._idle
        self._never_sleeps = selector
        self._now = start
        self._horizon = start
        self.thread_limit = thread_limit
        self._threads: set[asyncio.Future[Any]] = set()
        selector.threads = self._threads

    def time(self) -> float:
        return self._now

    def close(self) -> None:
        """Close the loop, its tasks ended first, cancelled, as `asyncio.run` ends a loop's: no task
        group owns what runs here (a harness's handlers are the loop's own tasks: `LoopTasks`), and
        a task the runner lost track of (an engine broken on purpose starts a call twice) would
        otherwise be collected unfinished. Unless work in a thread still holds the loop (the run
        stopped with `VirtualTimeError`): its tasks are then dropped without a word."""
        if not self.is_closed() and not self.is_running():
            left = [task for task in asyncio.all_tasks(self) if not task.done()]
            for task in left:
                if self._threads:
                    task._log_destroy_pending = False   # type: ignore[attr-defined]
                else:
                    task.cancel()
            if left and not self._threads:
                self.run_until(self._now)
        super().close()

    def _make_self_pipe(self) -> None:
        """The loop's wake-up pipe (what a thread writes to when it hands the loop a callback) is
        made only once a thread's work is waited for (`_wakeable`): a session whose tools never
        leave the loop opens no socket, and the explorer runs thousands of them."""
        self._ssock = self._csock = None

    def _wakeable(self) -> None:
        """The wake-up pipe, made before a thread may need it (in the loop's thread)."""
        if self._ssock is None:
            super()._make_self_pipe()   # type: ignore[misc]

    def _close_self_pipe(self) -> None:
        if self._ssock is not None:
            super()._close_self_pipe()   # type: ignore[misc]

    def run_in_executor(self, executor: concurrent.futures.Executor | None, func: Callable[..., Any],
                        *args: Any) -> asyncio.Future[Any]:
        """As asyncio's, and the loop waits for the work (in real time, its clock standing still)."""
        self._wakeable()
        future = super().run_in_executor(executor, func, *args)
        self._threads.add(future)
        future.add_done_callback(self._threads.discard)
        return future

    def run_in_thread(self, func: Callable[[], Any]) -> asyncio.Future[Any]:
        """Run `func` in a daemon worker thread of this loop (a sync tool: one that never returns
        must not keep the test process alive, and keeps its thread: the next work gets another).
        The loop first waits for it where it stands, at most `PROMPT_WAIT` real seconds, so a quick
        tool's answer takes the same place in the loop's order on every run; work that takes longer
        is waited for as executor work. A free worker takes the next work, so a session's sync
        tools, one after the other, start one thread, not one each (and the sessions after it
        none: the free workers are the process's, `_FREE_WORKERS`)."""
        future: asyncio.Future[Any] = self.create_future()
        handoff = _Handoff()

        def report(outcome: Callable[[], None]) -> None:
            if not future.done():
                outcome()

        def work(jobs: queue.SimpleQueue[Any]) -> None:
            try:
                value = func()
            except BaseException as exc:  # handed to the awaiting task, whatever it is
                error = exc
                outcome = lambda: future.set_exception(error)  # noqa: E731
            else:
                outcome = lambda: future.set_result(value)  # noqa: E731
            _free(jobs)   # free before the loop hears: its next work comes here
            if handoff.give(outcome):
                return   # the loop waited for it and reports it
            try:
                self.call_soon_threadsafe(report, outcome)
            except RuntimeError:
                pass   # the loop was closed meanwhile: nobody waits for this thread any more

        try:
            _FREE_WORKERS.pop().put(work)
        except IndexError:
            jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
            jobs.put(work)
            threading.Thread(target=self._worker, args=(jobs,), name="relay-harness-tool", daemon=True).start()
        outcome = handoff.take(min(PROMPT_WAIT, self.thread_limit), self._wakeable)
        if outcome is not None:
            self.call_soon(report, outcome)
        else:
            self._threads.add(future)
            future.add_done_callback(self._threads.discard)
        return future

    @staticmethod
    def _worker(jobs: queue.SimpleQueue[Any]) -> None:
        """A worker thread: runs the work any loop gives it until it is told to end (None)."""
        while True:
            job = jobs.get()
            if job is None:
                return
            job(jobs)

    def skip_to(self, moment: float) -> bool:
        """Move the clock to `moment` at once when the loop has nothing to do before it (nothing
        ready, no timer due by then, no thread or socket to wait for, within the horizon), as its
        idle step would, without a round of the loop; False, the clock unmoved, otherwise. The
        explorer releases its paced frames this way (a loop round a frame was a tenth of its cost)."""
        scheduled = self._scheduled   # cancelled timers at its head are dropped, as a round does
        while scheduled and scheduled[0]._cancelled:
            self._timer_cancelled_count -= 1
            heapq.heappop(scheduled)._scheduled = False
        timeout = max(0.0, moment - self._now)
        if (self._ready or self._stopping or not self._never_sleeps.quiet() or self._now >= self._horizon
                or self._now + timeout > self._horizon
                or (scheduled and scheduled[0]._when <= moment + self._clock_resolution)):
            return False
        self._now += timeout
        return True

    def run_until(self, moment: float) -> None:
        """Run everything due up to `moment` (the clock ends there), and what that causes at once."""
        if self.is_running():
            raise VirtualTimeError("the harness was called from inside its own loop (from a tool?)")
        self._horizon = max(moment, self._now)
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.run_forever()
            return
        # called from an async test, inside its loop: this loop runs in a thread of its own
        # meanwhile (one thread at a time runs it), the test's loop waiting
        failures: list[BaseException] = []

        def run() -> None:
            try:
                self.run_forever()
            except BaseException as exc:  # raised in the caller's thread below
                failures.append(exc)

        runner = threading.Thread(target=run, name="relay-harness-loop")
        runner.start()
        runner.join()
        if failures:
            raise failures[0]

    def _idle(self, timeout: float | None) -> list[Any]:
        """The loop has nothing ready and would wait `timeout` (None: no timer at all)."""
        if self._threads:
            return self._wait_for_threads()
        if self._now >= self._horizon:
            self.stop()
        elif timeout is None or self._now + timeout > self._horizon:
            self._now = self._horizon
        else:
            self._now += timeout
        return []

    def _wait_for_threads(self) -> list[Any]:
        deadline = time.monotonic() + self.thread_limit
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise VirtualTimeError(
                    f"work outside the loop (a sync tool, or what a tool handed to a thread) ran for more "
                    f"than {self.thread_limit:g} s of real time; virtual time cannot pass inside a thread: "
                    "make the tool async (await asyncio.sleep) or use a `slow` fault to make it take time")
            ready = self._never_sleeps.real.select(remaining)
            if ready:
                return ready
