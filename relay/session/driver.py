"""How the engine's actions are carried out and its handlers run: one core for every driver.

The engine answers every input with a list of actions (relay/engine/actions.py). Two drivers
feed it: the `SessionLoop` (relay/session/loop.py), live and, on the harness's virtual loop
between in-memory sockets, for scripted sessions and the explorer (relay/offline/peers.py), and
the replay of a recording (relay/offline/replay.py). Each is a `DriverCore`, and so shares,
rather than copies:

- the one `ActionInterpreter`: each action to its `act_` step, in the engine's order, the actions
  a record guards held while the record is written ahead (`act_remember`, with a store);
- the one `HandlerRunner` (relay/session/runner.py) for `StartHandler` and `CancelHandler`: every
  handler, live, scripted or replayed, runs with its error-output policy, its `BaseException`s
  kept as its call's outcome, the loop watch (a `loop_blocked` notice), the call's idempotency key
  and streaming values; what it reports goes back to the engine here;
- the round: the actions of one engine input carried out, then the driver's `_round_over`;
- the rule of the engine's timer: a deadline its tick leaves in the past is the engine's fault,
  reported once (`_deadline_left_behind`) and never fired again (firing it would never move time).

What differs between the drivers are the ports each supplies: `act_send_upstream` and
`act_send_client` (where frames go: the loop's queues and sockets, live or the harness's
in-memory peers; the replay's comparison with the recording), `act_notice` and `act_close`, `_moment` (the clock:
wall time, the virtual loop's, the recording's), `_round_over` (what follows a round: writes,
arming the timer, answering requests), `_start_task` (where a record's write runs), and the tasks
the runner's handlers run in (`_run_handlers`: an anyio task group, or the virtual loop's
`LoopTasks`). How a driver waits for the next deadline is its own (a task, a loop timer, stepped
time); firing it is `_fire_deadline`.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from relay.engine import (
    Action,
    ActionInterpreter,
    CancelHandler,
    Close,
    Engine,
    Notice,
    Outcome,
    Remember,
    SendClient,
    SendUpstream,
    StartHandler,
)
from relay.engine.records import CallRecord
from relay.session.runner import HandlerRunner, Run, Tasks
from relay.store.writeahead import WriteAhead

log = logging.getLogger("relay.session")

LOOP_BLOCKED = "loop_blocked"
"""The notice of a handler's step that held the event loop (`name`, `call_id`, `seconds`)."""


class DriverCore:
    """The core every driver of the engine shares (see the module docstring). A driver calls
    `_init_driver` first, `_run_handlers` once its tasks can run, `_apply` with each list of actions
    the engine returns, and `_fire_deadline` when the engine's deadline (`_next_due`) comes."""

    engine: Engine
    write_ahead: WriteAhead | None
    records: list[CallRecord] | None

    def _init_driver(self, engine: Engine, *, write_ahead: WriteAhead | None = None,
                     records: list[CallRecord] | None = None) -> None:
        """`records`: where the engine's records are kept in order (the harness and the replay keep
        them; the live loop writes them to `write_ahead`, its store, if any)."""
        self.engine = engine
        self.write_ahead = write_ahead
        self.records = records
        self._carry_out = ActionInterpreter(self)
        self._runner: HandlerRunner | None = None
        self._in_round = False
        self._stuck_deadline: float | None = None   # a deadline a tick did not move (the engine's fault)

    def _run_handlers(self, tasks: Tasks, **options: Any) -> HandlerRunner:
        """The session's handler runner, its handlers' tasks in `tasks` (`options`: the runner's)."""
        self._runner = HandlerRunner(tasks, on_finished=self._handler_finished, on_yield=self._handler_yielded,
                                     on_blocked=self._handler_blocked, **options)
        return self._runner

    # ---- a round of actions ------------------------------------------------------------------
    def _apply(self, actions: list[Action], more: bool = False) -> None:
        """Carry out what the engine asked, in its order, then what the driver does after a round
        (`_round_over`). A round started while another is under way (an action's step feeding the
        engine again) is not the outermost: the outer round's end covers it."""
        outermost = not self._in_round
        self._in_round = True
        try:
            self._carry_out(actions)
        finally:
            if outermost:
                self._in_round = False
        self._round_over(outermost, more)

    def _round_over(self, outermost: bool, more: bool) -> None:
        """After a round (`more`: it was a reader's frame, and more of the same read follows at
        once)."""

    # ---- the steps every driver shares (`ActionSink`) ------------------------------------------
    def act_start_handler(self, action: StartHandler) -> None:
        runner = self._runner
        assert runner is not None, "the driver's handlers do not run yet (_run_handlers)"
        runner.start(action, self._stand_in(action))

    def act_cancel_handler(self, action: CancelHandler) -> None:
        if self._runner is not None:
            self._runner.cancel(action.call_id)

    def act_remember(self, action: Remember) -> None:
        """The record is kept (`records`) and goes to the store before what follows it: at once to
        a synchronous one; else the guarded actions wait for the write (`ActionInterpreter.hold`)."""
        if self.records is not None:
            self.records.append(action.record)
        writes = self.write_ahead
        if writes is None or writes.write_now(action.record):
            return
        if self._start_task(self._written_ahead, action.record, name="write-ahead"):
            self._carry_out.hold()

    async def _written_ahead(self, record: CallRecord) -> None:
        assert self.write_ahead is not None
        await self.write_ahead.write(record)   # done, failed or timed out: never raises
        self._apply(self._carry_out.release())

    # ---- the ports a driver supplies ---------------------------------------------------------
    def act_send_upstream(self, action: SendUpstream) -> None:
        raise NotImplementedError

    def act_send_client(self, action: SendClient) -> None:
        raise NotImplementedError

    def act_notice(self, action: Notice) -> None:
        raise NotImplementedError

    def act_close(self, action: Close) -> None:
        raise NotImplementedError

    def _moment(self) -> float:
        """Now, on the driver's clock: what the engine is told."""
        raise NotImplementedError

    def _stand_in(self, action: StartHandler) -> Run | None:
        """What runs in the place of the call's handler (None: the tool's own, the runner's)."""
        return None

    def _start_task(self, work: Callable[..., Awaitable[Any]], *args: Any, name: str) -> bool:
        """Run `work(*args)` as a task of the session's; False when it cannot (it is over)."""
        return False

    def _deadline_left_behind(self, now: float, after: float) -> None:
        """A tick left the engine's deadline in the past (its fault): said once; never fired again."""
        log.error("the engine kept a deadline its tick did not move; ignoring it",
                  extra={"session_id": self.engine.session_id, "overdue_seconds": now - after})

    # ---- what the runner reports --------------------------------------------------------------
    def _handler_finished(self, call_id: str, outcome: Outcome) -> None:
        self._apply(self.engine.handler_finished(call_id, outcome, self._moment()))

    def _finish_note(self, call_id: str) -> dict[str, Any]:
        """The fields of the `handler_finished` (`handler_yielded`) relay line a driver that records
        writes when the runner reports a handler done (a streaming handler's value), before the
        engine hears it (relay/recording/format.py)."""
        entry = self.engine.ledger.get(call_id)
        return {"call_id": call_id, "name": entry.name if entry is not None else None}

    def _handler_yielded(self, call_id: str, value: Any) -> None:
        self._apply(self.engine.handler_yielded(call_id, value, self._moment()))

    def _handler_blocked(self, call_id: str, tool: str, seconds: float) -> None:
        """A step of a handler held the event loop `seconds`: a `loop_blocked` notice."""
        self.act_notice(Notice(LOOP_BLOCKED, {"call_id": call_id, "name": tool, "seconds": round(seconds, 3)}))

    # ---- the engine's timer --------------------------------------------------------------------
    def _next_due(self) -> float | None:
        """The engine's next deadline, unless it is one a tick left behind."""
        deadline = self.engine.next_deadline()
        return None if deadline == self._stuck_deadline else deadline

    def _fire_deadline(self, now: float) -> None:
        """The engine's deadline came: its tick, carried out; a deadline the tick leaves at or
        before `now` is the engine's fault, said once and not fired again."""
        self._apply(self.engine.tick(now))
        after = self.engine.next_deadline()
        if after is not None and after <= now:
            self._stuck_deadline = after
            self._deadline_left_behind(now, after)
