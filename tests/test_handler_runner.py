"""The handler runner on its own, without sockets: whatever a handler raises is its call's outcome
(what ends a program included), a cancellation the relay asks for still cancels, and a step that
holds the event loop is reported with the tool's name, measured on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from relay.engine import Outcome, StartHandler
from relay.session.runner import HandlerRunner, LoopWatch
from relay.tools.spec import build_spec
from tests.support.clients import TIMEOUT


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Reports:
    """What a runner reported: outcomes, yields and blocked steps, with an event per outcome."""

    def __init__(self) -> None:
        self.outcomes: dict[str, Outcome] = {}
        self.yields: list[Any] = []
        self.blocked: list[tuple[str, str, float]] = []
        self.finished = anyio.Event()

    def on_finished(self, call_id: str, outcome: Outcome) -> None:
        self.outcomes[call_id] = outcome
        self.finished.set()

    def runner(self, task_group: anyio.abc.TaskGroup, clock: FakeClock | None = None) -> HandlerRunner:
        return HandlerRunner(task_group, on_finished=self.on_finished, on_yield=lambda _, v: self.yields.append(v),
                             on_blocked=lambda *blocked: self.blocked.append(blocked),
                             clock=clock or FakeClock())


def start(runner: HandlerRunner, handler: Any, call_id: str = "call_1", name: str = "odd_tool") -> None:
    runner.start(StartHandler(call_id, build_spec(handler, name=name), {}))


async def run_one(handler: Any, clock: FakeClock | None = None, name: str = "odd_tool") -> Reports:
    """Run `handler` as call_1 of tool `name` until it finishes; what the runner reported."""
    reports = Reports()
    async with anyio.create_task_group() as task_group:
        start(reports.runner(task_group, clock), handler, name=name)
        with anyio.fail_after(TIMEOUT):
            await reports.finished.wait()
    return reports


async def outcome_of(handler: Any) -> Outcome:
    return (await run_one(handler)).outcomes["call_1"]


def sync_raising(error: BaseException) -> Any:
    def handler() -> str:
        raise error
    return handler


def async_raising(error: BaseException) -> Any:
    async def handler() -> str:
        await anyio.sleep(0)
        raise error
    return handler


def stream_raising(error: BaseException) -> Any:
    async def handler() -> AsyncIterator[str]:
        yield "first"
        raise error
    return handler


@pytest.mark.parametrize("wrap", [sync_raising, async_raising, stream_raising], ids=["sync", "async", "stream"])
@pytest.mark.parametrize("error", [SystemExit(3), KeyboardInterrupt(), BaseException("odd"), GeneratorExit()],
                         ids=["SystemExit", "KeyboardInterrupt", "BaseException", "GeneratorExit"])
async def test_whatever_a_handler_raises_is_its_outcome(wrap: Any, error: BaseException) -> None:
    outcome = await outcome_of(wrap(error))
    assert outcome.error is error


async def test_a_cancelled_error_a_handler_raises_by_itself_is_its_outcome() -> None:
    async def handler() -> str:
        raise asyncio.CancelledError("the tool's own")

    outcome = await outcome_of(handler)
    assert isinstance(outcome.error, asyncio.CancelledError)


class Held:
    """A handler that waits for ever, telling when it started and when it was cancelled."""

    def __init__(self) -> None:
        self.entered, self.cancelled = anyio.Event(), anyio.Event()

    async def __call__(self) -> str:
        self.entered.set()
        try:
            await anyio.sleep_forever()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        return "never"


@pytest.mark.parametrize("by", ["CancelHandler", "the session ending"])
async def test_a_cancel_the_relay_asks_for_still_cancels_and_reports_nothing(by: str) -> None:
    reports, held = Reports(), Held()
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as task_group:
            runner = reports.runner(task_group)
            runner.start(StartHandler("call_1", build_spec(held.__call__, name="held"), {}))
            await held.entered.wait()
            if by == "CancelHandler":
                runner.cancel("call_1")
                await held.cancelled.wait()
            else:
                task_group.cancel_scope.cancel()
    assert held.cancelled.is_set() and reports.outcomes == {} and reports.blocked == []
    assert runner.running == 0


# ---- the loop watch ---------------------------------------------------------------------------

def test_the_loop_watch_reports_a_step_at_or_over_its_threshold_only() -> None:
    blocked: list[tuple[str, str, float]] = []
    watch = LoopWatch(lambda *report: blocked.append(report), threshold=0.1)
    watch.step("call_1", "quick", 10.0, 10.05)
    watch.step("call_2", "slow", 10.0, 10.25)
    watch.step("call_3", "slower", 20.0, 25.0)
    assert [(call_id, tool) for call_id, tool, _ in blocked] == [("call_2", "slow"), ("call_3", "slower")]
    assert blocked[1][2] == pytest.approx(5.0)


async def test_an_async_handler_step_that_holds_the_loop_is_reported_with_its_tool() -> None:
    clock = FakeClock()

    async def handler() -> str:
        clock.now += 0.01        # a quick first step
        await anyio.sleep(0)
        clock.now += 5.0         # `time.sleep(5)`: the loop is held for the whole step
        await anyio.sleep(0)
        clock.now += 0.02
        return "slept"

    reports = await run_one(handler, clock, name="sleepy")
    assert reports.outcomes["call_1"].value == "slept"
    assert reports.blocked == [("call_1", "sleepy", pytest.approx(5.0))]


async def test_a_streaming_handler_step_that_holds_the_loop_is_reported_too() -> None:
    clock = FakeClock()

    async def handler() -> AsyncIterator[str]:
        yield "quick"
        clock.now += 2.0
        yield "after a block"

    reports = await run_one(handler, clock, name="streamer")
    assert reports.yields == ["quick", "after a block"]
    assert reports.blocked == [("call_1", "streamer", pytest.approx(2.0))]
