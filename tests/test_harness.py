"""The test harness itself (`relay.testing`): virtual time, strict scripts, turn endings, the
expectations and how they fail, one event model over scripted, replayed and recorded sessions."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from relay.offline.virtual import VirtualLoop
from relay.testing import (
    ExpectationFailed,
    Script,
    ScriptError,
    Turn,
    VirtualTimeError,
    call,
    expect,
    replay,
    timeline_of,
)
from relay.tools import tool
from tests.support.engine import StuckEngines
from tests.support.paths import REPO, shared_dir

DIALECTS = ["openai", "gemini"]


@tool(on_delay=(800, "Still looking."))
async def slow_lookup(order: str) -> dict:
    await asyncio.sleep(3)
    return {"order": order, "status": "shipped"}


@tool
def sync_lookup(order: str) -> dict:
    time.sleep(0.05)          # real time, in a thread: no virtual time passes
    return {"order": order}


ORDER = Script(Turn(calls=[call("slow_lookup", order="42")]), Turn(say="Order 42: {output}"))


# ---- virtual time -------------------------------------------------------------------------------
def test_the_virtual_loop_runs_timers_in_order_up_to_the_horizon_and_waits_for_threads() -> None:
    loop = VirtualLoop()
    seen: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await asyncio.sleep(seconds)
        seen.append((name, loop.time()))

    async def in_thread() -> None:
        await loop.run_in_thread(lambda: time.sleep(0.05))
        seen.append(("thread", loop.time()))

    for name, seconds in (("late", 3.0), ("early", 0.8)):
        loop.create_task(sleeper(name, seconds))
    loop.create_task(in_thread())
    loop.run_until(1.0)
    assert seen == [("thread", 0.0), ("early", 0.8)] and loop.time() == 1.0
    loop.run_until(5.0)
    assert seen[-1] == ("late", 3.0)
    loop.close()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_advance_runs_the_session_to_that_moment_and_no_further(dialect: str) -> None:
    with ORDER.start([slow_lookup], dialect=dialect) as session:
        session.user("Where is order 42?")
        session.advance(2.9)
        assert session.timeline.outputs() == [] and session.now == pytest.approx(2.9)
        session.advance(0.1)
        [output] = session.timeline.outputs()
        assert output.t == pytest.approx(3.0)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_run_repeats_itself_exactly(dialect: str) -> None:
    def run() -> list[str]:
        with ORDER.start([slow_lookup], dialect=dialect) as session:
            session.user("Where is order 42?")
            session.run_until_quiet()
        return [event.describe() for event in session.timeline]

    assert run() == run()


def test_a_deadline_a_tick_does_not_move_fails_the_step_instead_of_hanging_it() -> None:
    # without the guard the virtual loop fires the deadline again at the same instant, for as
    # long as it stays put (here STUCK_FOR asks; with a real bug, forever)
    engines = StuckEngines()
    with ORDER.start([slow_lookup], engine=engines, strict=False) as session:
        with pytest.raises(ExpectationFailed, match="a deadline its tick did not move"):
            session.advance(2)
        session.advance(1)   # not fired again
    assert engines.made[0].ticks == 1


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_engine_failure_where_a_handler_reports_fails_the_step_it_happened_in(dialect: str) -> None:
    """The handler's report reaches the engine from the handler's task: what the engine raises
    there (strict mode: a bug of its own) fails that step, as a task group would fail the session,
    instead of going to the loop's log as a task exception nobody retrieved (the test then failed
    later, on what the bug left undone: a turn never used)."""
    def broken(*args: object) -> list[object]:
        raise RuntimeError("the engine's bug")

    with pytest.raises(RuntimeError, match="the engine's bug"):
        with ORDER.start([slow_lookup], dialect=dialect) as session:
            session.engine.handler_finished = broken   # type: ignore[method-assign]
            session.user("Where is order 42?")
            session.advance(4)


def test_a_sync_tool_runs_in_a_thread_at_one_virtual_instant() -> None:
    script = Script(Turn(calls=[call("sync_lookup", order="7")]), Turn(say="{output}"))
    with script.start([sync_lookup]) as session:
        session.user("Order 7?")
    [output] = session.timeline.outputs()
    assert output.t == 0.0 and output.text == '{"order":"7"}'


def test_a_sync_tool_blocking_past_the_real_time_limit_stops_the_run_with_a_clear_error() -> None:
    @tool(name="sync_lookup")
    def stuck(order: str) -> dict:
        time.sleep(0.5)
        return {}

    script = Script(Turn(calls=[call("sync_lookup", order="7")]), strict=False)
    session = script.start([stuck], thread_limit=0.05)
    with pytest.raises(VirtualTimeError, match="virtual time cannot pass inside a thread"):
        session.user("Order 7?")
    session.close()


async def test_an_async_test_drives_a_session_the_same_way() -> None:
    with ORDER.start([slow_lookup], dialect="gemini") as session:
        session.user("Where is order 42?")
        session.advance(4)
    session.expect().next_call("slow_lookup").output(contains="shipped").spoken("Order 42")
    await asyncio.sleep(0)   # the test's own loop is untouched


# ---- strict scripts --------------------------------------------------------------------------------
@pytest.mark.parametrize("dialect", DIALECTS)
def test_strict_mode_fails_at_a_response_the_script_has_no_turn_for(dialect: str) -> None:
    script = Script(Turn(calls=[call("slow_lookup", order="42")]))     # nothing for after the output
    session = script.start([slow_lookup], dialect=dialect)
    session.user("Where is order 42?")
    with pytest.raises(ExpectationFailed, match="the model was asked for another response after the script's 1 turn"):
        session.advance(4)
    session.close()


def test_strict_mode_fails_on_a_turn_never_used_and_on_a_call_nobody_declared() -> None:
    script = Script(Turn(say="Hello."), Turn(say="Anything else?"))
    with pytest.raises(ExpectationFailed, match="turn 2 \\(Anything else\\?\\) was never used"):
        with script.start([]) as session:
            session.user("Hi")
    with pytest.raises(ScriptError, match="turn 1 calls 'refund', which neither the relay's tools"):
        Script(Turn(calls=[call("refund", order="1")])).start([slow_lookup])


def test_strict_mode_fails_on_an_error_from_the_upstream() -> None:
    session = Script(Turn(say="Hi.")).start([])
    session.user("Hi")
    session.from_caller(['{"type": "conversation.item.create", "item": {"type": "function_call_output", '
                         '"call_id": "nope", "output": "x"}}'])
    with pytest.raises(ExpectationFailed, match="function_call_not_found"):
        session.advance(0)
    session.close()


# ---- how a turn ends --------------------------------------------------------------------------
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_held_turn_stays_open_until_the_test_ends_it(dialect: str) -> None:
    script = Script(Turn(say="Let me think about that.", ends="held"))
    with script.start([], dialect=dialect) as session:
        session.user("Hm?")
        session.advance(5)
        assert session.timeline.of("response_done") == []
        session.end_response()
    assert [e.status for e in session.timeline.of("response_done")] == ["completed"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_calls_of_a_cancelled_turn_are_never_run(dialect: str) -> None:
    script = Script(Turn(calls=[call("slow_lookup", order="1")], ends="cancelled"))
    with script.start([slow_lookup], dialect=dialect) as session:
        session.user("Order 1?")
        session.advance(5)
    session.expect().next_call("slow_lookup").cancelled("slow_lookup").no_more_events()
    if dialect == "openai":   # its item ended incomplete: it never ran (Gemini runs a call at once)
        assert [n for n in session.notices if n.kind == "tool_started"] == []
    session.check_invariants()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_interrupted_turn_is_cut_by_the_caller(dialect: str) -> None:
    script = Script(Turn(say="A very long answer that the caller will not wait for.", ends="interrupted"))
    with script.start([], dialect=dialect) as session:
        session.user("Tell me everything")
    session.expect().spoken("very long").barge_in().no_more_events()
    assert [e.status for e in session.timeline.of("response_done")] == ["cancelled"]


# ---- expectations ------------------------------------------------------------------------------------
def test_a_failed_expectation_says_what_was_expected_what_came_and_where() -> None:
    with ORDER.start([slow_lookup]) as session:
        session.user("Where is order 42?")
        session.advance(4)
    with pytest.raises(ExpectationFailed) as failed:
        session.expect().next_call("slow_lookup").filler(after=0.5)
    message = str(failed.value)
    assert message.splitlines()[0] == "expected: a filler 0.5 s after the call"
    assert re.search(r"^came: +0\.800  filler .*<- it came 0\.800 s after the call$", message, re.M)
    assert "where:    scripted session (openai), event " in message
    assert re.search(r"^  >> +0\.800  filler", message, re.M)
    command = re.search(r"^look at it: relay inspect (\S+\.jsonl)$", message, re.M)
    assert command is not None
    from relay.recording.reader import load_recording

    assert load_recording(command.group(1)).kind == "relay"   # the saved session opens in the inspector


def test_no_more_events_names_the_first_event_left() -> None:
    with ORDER.start([slow_lookup]) as session:
        session.user("Where is order 42?")
        session.advance(4)
    with pytest.raises(ExpectationFailed, match="expected: no more events\ncame: +0.800  filler"):
        session.expect().next_call("slow_lookup").no_more_events()
    with pytest.raises(ExpectationFailed, match="came: +no call event after call at 0.000 s"):
        session.expect().next_call().next_call()


def test_arguments_match_as_a_subset_text_as_a_substring_a_pattern_or_a_predicate() -> None:
    with ORDER.start([slow_lookup]) as session:
        session.user("Where is order 42?")
        session.advance(4)
    (session.expect().next_call(arguments={"order": "42"}).output(contains=re.compile(r'"status":\s*"shipped"'))
     .spoken(lambda words: words.startswith("Order 42")))
    with pytest.raises(ExpectationFailed, match="its arguments do not match"):
        session.expect().next_call(arguments={"order": "43"})


def test_the_same_expectations_walk_a_replay_and_a_recording(tmp_path) -> None:
    """One event model: a session recorded through the relay, its replay, and the file itself."""
    with ORDER.start([slow_lookup]) as session:
        session.user("Where is order 42?")
        session.advance(4)
    path = session.save(tmp_path)
    result = replay(path, [slow_lookup])
    assert result.ok, [d.describe() for d in result.divergences]
    for source in (session, path, result):
        (expect(source).next_call("slow_lookup").filler(after=0.8).output(contains="shipped").follow_up()
         .spoken("Order 42").no_more_events())
    assert [e.kind for e in timeline_of(path)] == [e.kind for e in session.timeline if e.kind != "closed"]


def test_a_plain_event_log_reads_into_the_same_events(recordings_dir) -> None:
    log = timeline_of(recordings_dir / "realtime-notes-idx1781683788_beta_fc.jsonl")
    expect(log).next_call("search", arguments={"text": "Hamrah Aval (MCI) energy consumption"})
    assert REPO.exists() and shared_dir().exists()


def failing_session(name: str = "failing session") -> str:
    """A session whose expectation fails: the failure's `relay inspect` command."""
    with Script(Turn(say="Hello.")).start([], name=name) as session:
        session.user("Hi")
        session.advance(1)
    with pytest.raises(ExpectationFailed) as failed:
        session.expect().spoken("goodbye")
    [command] = [line.strip() for line in str(failed.value).splitlines() if "relay inspect" in line]
    return command.split("relay inspect ", 1)[1]


def test_a_failing_session_of_this_suite_is_recorded_under_the_test_own_tmp_path(tmp_path) -> None:
    saved = Path(failing_session())
    assert saved.parent == tmp_path / "relay-sessions" and saved.is_file()


def test_the_recordings_directory_is_relay_sessions_dir_else_relay_sessions_in_the_temp_dir(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAY_SESSIONS_DIR", str(tmp_path / "chosen"))
    assert Path(failing_session()).parent == tmp_path / "chosen"
    monkeypatch.delenv("RELAY_SESSIONS_DIR")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "temp"))
    assert Path(failing_session()).parent == tmp_path / "temp" / "relay-sessions"


def test_relay_testing_holds_no_public_name_it_does_not_export() -> None:
    import relay.testing

    public = {name for name in vars(relay.testing) if name.isidentifier() and not name.startswith("_")}
    assert sorted(public - set(relay.testing.__all__)) == [] and set(relay.testing.__all__) <= public


def test_the_loops_tasks_are_held_and_ended_when_it_closes() -> None:
    """No task group owns a harness's handlers (`LoopTasks`: tasks of the virtual loop). One that
    nothing else holds (a handler the runner lost track of, as when an engine broken on purpose
    starts a call twice) still runs after a collection, and closing the loop cancels it, as
    `asyncio.run` ends its tasks; it is not collected unfinished."""
    import gc

    from relay.session.runner import LoopTasks

    loop = VirtualLoop()
    ended: list[str] = []

    async def waits_forever() -> None:
        try:
            await loop.create_future()   # held by nothing but this task
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    tasks = LoopTasks(loop)   # as the session's runner holds it
    tasks.start_soon(waits_forever, name="lost track of")
    loop.run_until(1.0)
    gc.collect()
    assert not ended and [task.get_name() for task in asyncio.all_tasks(loop)] == ["lost track of"]
    loop.close()
    assert ended == ["cancelled"]
