"""One action interpreter and one handler runner: the live session loop, the scripted harness and
the replay are each a `DriverCore` (relay/session/driver.py): they carry out the engine's actions
through its `ActionInterpreter` and run tools through its `HandlerRunner` (`run_handler`, the
error-output policy, the loop watch), so a rule changed there is changed for all three. The
harness's and the replay's driver is the live `SessionLoop` itself (`HarnessLoop`, `ReplayLoop`, on
the virtual loop between in-memory sockets: the replay's upstream is the recording's), so a change
to how the loop carries out an action is seen scripted and replayed too."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from relay.engine import (
    Remember,
    ActionInterpreter,
    CancelHandler,
    Close,
    Notice,
    Outcome,
    SendClient,
    SendUpstream,
    StartHandler,
)
from relay.engine.records import CallRecord, Phase
from relay.offline.peers import HarnessLoop
from relay.offline.replay import replay
from relay.offline.replay_play import ReplayLoop
from relay.recording.reader import read_recording
from relay.session import runner
from relay.session.driver import DriverCore
from relay.session.loop import SessionLoop
from relay.testing import Script, Turn, call
from relay.tools import tool
from tests.support.peers import record_session
from tests.support.tools import get_weather

MARK = " [as run_handler ran it]"


class Sink:
    def __init__(self) -> None:
        self.steps: list[tuple[str, Any]] = []

    def act_send_upstream(self, action: SendUpstream) -> None:
        self.steps.append(("upstream", action.frame))

    def act_send_client(self, action: SendClient) -> None:
        self.steps.append(("client", action.frame))

    def act_start_handler(self, action: StartHandler) -> None:
        self.steps.append(("start", action.call_id))

    def act_cancel_handler(self, action: CancelHandler) -> None:
        self.steps.append(("cancel", action.call_id))

    def act_notice(self, action: Notice) -> None:
        self.steps.append(("notice", action.kind))

    def act_close(self, action: Close) -> None:
        self.steps.append(("close", action.code))

    def act_remember(self, action: Remember) -> None:
        self.steps.append(("remember", action.record.phase))


def test_the_interpreter_hands_each_action_to_its_step_in_the_engine_s_order() -> None:
    sink = Sink()
    interpret = ActionInterpreter(sink)
    interpret([SendClient("a"), Notice("filler"), SendUpstream("b"), CancelHandler("c1", "timeout"),
               Remember(CallRecord("s", "c2", "get_weather", Phase.STARTED, 1.0)),
               StartHandler("c2", get_weather.__relay_tool__, {"city": "Oslo"}), Close("both", 1000, "bye")])
    assert sink.steps == [("client", "a"), ("notice", "filler"), ("upstream", "b"), ("cancel", "c1"),
                          ("remember", Phase.STARTED), ("start", "c2"), ("close", 1000)]


def test_something_that_is_not_an_action_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="not an engine action"):
        ActionInterpreter(Sink())([SendUpstream("a"), "b"])   # type: ignore[list-item]


@pytest.mark.parametrize("driver", [SessionLoop, HarnessLoop, ReplayLoop])
def test_every_driver_is_an_action_sink(driver: type) -> None:
    steps = {name for name in vars(Sink) if name.startswith("act_")}
    assert steps <= set(dir(driver))


@pytest.fixture
def marked_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change to how a sync handler's outcome is decided, made in one place: the runner's."""
    decide = runner._outcome_in_thread

    def marked(handler: Any, arguments: dict[str, Any]) -> Outcome:
        outcome = decide(handler, arguments)
        return Outcome.returned(f"{outcome.value}{MARK}") if outcome.error is None else outcome

    monkeypatch.setattr(runner, "_outcome_in_thread", marked)


def outputs_of_recording(path: Path) -> list[str]:
    recording = read_recording(path)
    outputs = []
    for frame in recording.frames:
        event = frame.event or {}
        item = event.get("item") or {}
        if event.get("type") == "conversation.item.create" and item.get("type") == "function_call_output":
            outputs.append(item["output"])
    return outputs


@tool
def lookup_order(order_id: str) -> str:
    if order_id == "missing":
        raise LookupError("no such order")
    return f"order {order_id} shipped"


@tool
def where_is(order: str) -> str:
    return f"order {order} is on its way"


def test_a_change_to_how_handlers_run_is_seen_live_replayed_and_scripted(tmp_path: Path, marked_runs: None) -> None:
    # live: the session loop with the in-process mock upstream, recorded
    path = anyio.run(functools.partial(record_session, tmp_path, [get_weather, lookup_order]))
    live = outputs_of_recording(path)
    # two weather reports marked (the three handlers run at once: any order); the failed lookup
    # is an error output, as before
    unmarked = [output for output in live if not output.endswith(MARK)]
    assert len(live) == 3 and len(unmarked) == 1 and "no such order" in unmarked[0]
    # replayed: the same recording against the same tools
    replayed = replay(path, [get_weather, lookup_order])
    assert replayed.ok, replayed.divergences
    assert [c.output for c in replayed.calls if c.output and c.output.endswith(MARK)]
    # scripted: the harness on virtual time
    script = Script(Turn(calls=[call("where_is", order="7")]), Turn(say="{output}"))
    with script.start([where_is]) as session:
        session.user("Where is order 7?")
    [output] = session.timeline.outputs()
    assert output.text == f"order 7 is on its way{MARK}"


def test_the_harness_runs_the_relay_s_session_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """A change to how the live loop carries out an action (`SessionLoop._enqueue`: every frame
    the engine sends either way), made in the loop alone, is seen by the scripted harness: its
    relay under test is the loop itself, not a copy of it."""
    written: list[tuple[str, str]] = []
    enqueue = SessionLoop._enqueue

    def counted(self: SessionLoop, queue: Any, side: str, frame: Any) -> None:
        written.append((side, str(frame)))
        enqueue(self, queue, side, frame)

    monkeypatch.setattr(SessionLoop, "_enqueue", counted)
    script = Script(Turn(calls=[call("where_is", order="7")]), Turn(say="{output}"))
    with script.start([where_is]) as session:
        assert isinstance(session.session, SessionLoop)
        session.user("Where is order 7?")
    [output] = session.timeline.outputs()
    assert any(side == "upstream" and output.text in frame for side, frame in written)   # the output, up
    assert any(side == "client" for side, _ in written)


def test_the_replay_runs_the_relay_s_session_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same change, made in the loop alone, is seen by a replay: what it compares with the
    recording is what the loop wrote on the recorded upstream's socket."""
    path = anyio.run(functools.partial(record_session, tmp_path, [get_weather, lookup_order]))
    written: list[tuple[str, str]] = []
    enqueue = SessionLoop._enqueue

    def changed(self: SessionLoop, queue: Any, side: str, frame: Any) -> None:
        written.append((side, str(frame)))
        event = json.loads(frame) if side == "upstream" else {}
        if (event.get("item") or {}).get("type") == "function_call_output":   # the loop changes an output
            event["item"]["output"] = "changed in the loop"
            frame = json.dumps(event)
        enqueue(self, queue, side, frame)

    monkeypatch.setattr(SessionLoop, "_enqueue", changed)
    replayed = replay(path, [get_weather, lookup_order])
    assert any(side == "upstream" and "function_call_output" in frame for side, frame in written)
    assert [d.kind for d in replayed.divergences] == ["changed"] * 3, replayed.divergences
    assert all("changed in the loop" in d.diff for d in replayed.divergences)
    monkeypatch.setattr(SessionLoop, "_enqueue", enqueue)
    assert replay(path, [get_weather, lookup_order]).ok


DRIVERS = [SessionLoop, HarnessLoop, ReplayLoop]
SHARED = ["act_remember", "_apply", "_fire_deadline", "_next_due", "_run_handlers", "_written_ahead"]


@pytest.mark.parametrize("driver", DRIVERS, ids=lambda d: d.__name__)
def test_every_driver_is_an_engine_driver_and_keeps_its_shared_steps(driver: type) -> None:
    assert issubclass(driver, DriverCore)
    assert all(getattr(driver, name) is getattr(DriverCore, name) for name in SHARED)


POLICY = "the runner's policy says: "


@pytest.fixture
def changed_policy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Two changes made in the runner alone: its error-output policy (what a handler's raise
    becomes) and its loop watch (each timed step of a handler, noted by its tool's name)."""
    watched: list[str] = []
    step = runner.LoopWatch.step

    def noted(self: runner.LoopWatch, call_id: str, tool: str, started: float, ended: float) -> None:
        watched.append(tool)
        step(self, call_id, tool, started, ended)

    monkeypatch.setattr(runner, "failed", lambda error: Outcome.returned(f"{POLICY}{error}"))
    monkeypatch.setattr(runner.LoopWatch, "step", noted)
    return watched


@tool(name="lookup_order")
async def failing_lookup(order_id: str) -> str:
    """An async handler's raise goes through the runner's own `except`, not a thread's."""
    await anyio.sleep(0)
    raise LookupError(f"no such order {order_id}")


def test_a_change_to_the_runner_s_error_policy_and_loop_watch_is_seen_by_all_three_drivers(
        tmp_path: Path, changed_policy: list[str]) -> None:
    # live: the session loop with the in-process mock upstream, recorded
    path = anyio.run(functools.partial(record_session, tmp_path, [get_weather, failing_lookup]))
    assert f"{POLICY}no such order missing" in outputs_of_recording(path)
    assert "lookup_order" in changed_policy
    # replayed: the same recording against the same tools, the policy's output sent again
    changed_policy.clear()
    replayed = replay(path, [get_weather, failing_lookup])
    assert replayed.ok, replayed.divergences
    [looked_up] = [c for c in replayed.calls if c.name == "lookup_order"]
    assert looked_up.output == f"{POLICY}no such order missing"
    assert "lookup_order" in changed_policy
    # scripted: the harness on virtual time
    changed_policy.clear()
    script = Script(Turn(calls=[call("lookup_order", order_id="7")]), Turn(say="{output}"))
    with script.start([failing_lookup]) as session:
        session.user("Where is order 7?")
    [output] = session.timeline.outputs()
    assert output.text == f"{POLICY}no such order 7"
    assert "lookup_order" in changed_policy
