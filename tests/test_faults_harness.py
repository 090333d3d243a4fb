"""Faults on demand (`relay.testing.faults`): on a scripted conversation and on a recording, each
fault and the relay's answer to it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from relay.offline.harness import SessionOver
from relay.offline.timeline import decided_outcomes
from relay.testing import Script, Turn, call, faults, replay_with_faults
from relay.tools import tool
from tests.support.paths import REPO

DIALECTS = ["openai", "gemini"]
SHARED_TOOLS = REPO / "tests" / "fixtures" / "shared_recording_tools.py"
NOTES_LOG = "realtime-notes-idx1781683788_beta_fc.jsonl"   # a real event log in which the model calls `search`


@tool(timeout=4, interruption="cancel")
async def check_stock(item: str) -> dict:
    await asyncio.sleep(1)
    return {"item": item, "in_stock": 3}


STOCK = Script(Turn(calls=[call("check_stock", item="lamp")]), Turn(say="About the lamp: {output}"), strict=False)


def session_with(dialect: str, fault: faults.Fault, seconds: float = 6) -> object:
    with STOCK.start([check_stock], dialect=dialect, faults=[fault]) as session:
        session.user("Is the lamp in stock?")
        session.advance(seconds)
    return session


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_tool_forced_to_time_out_is_answered_by_the_relays_timeout(dialect: str) -> None:
    session = session_with(dialect, faults.timeout("check_stock"))
    output = session.expect().next_call("check_stock").output(outcome="timeout").last
    assert output.t == pytest.approx(4.0) and "timed out after 4 s" in output.text
    session.expect().next_call().output().spoken("About the lamp")
    session.check_invariants()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_tool_forced_to_raise_is_answered_with_the_error(dialect: str) -> None:
    session = session_with(dialect, faults.raises("check_stock", LookupError("warehouse offline")))
    session.expect().next_call().output(error=True, contains="LookupError: warehouse offline", outcome="error")
    session.check_invariants()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_slow_tool_answers_late_and_an_error_result_is_an_error(dialect: str) -> None:
    slow = session_with(dialect, faults.slow("check_stock", 2.5))
    assert slow.expect().next_call().output(contains="in_stock").last.t == pytest.approx(3.5)
    failing = session_with(dialect, faults.error_result("check_stock", "inventory unavailable"))
    failing.expect().next_call().output(error=True, contains="inventory unavailable").spoken()


def test_a_fault_hits_only_the_call_it_names() -> None:
    script = Script(Turn(calls=[call("check_stock", item="lamp"), call("check_stock", item="desk")]),
                    Turn(say="{joined}"), strict=False)
    with script.start([check_stock], faults=[faults.raises("check_stock", call=2)]) as session:
        session.user("Lamp and desk?")
        session.advance(2)
    outputs = {e.call_id: e for e in session.timeline.outputs()}
    lamp, desk = session.timeline.calls()
    assert not outputs[lamp.call_id].is_error and outputs[desk.call_id].is_error


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_caller_barging_in_at_a_call(dialect: str) -> None:
    session = session_with(dialect, faults.barge_in(call=1, after=0.5))
    expect = session.expect().next_call("check_stock").barge_in()
    if dialect == "openai":
        assert expect.output(outcome="cancelled").last.t == pytest.approx(0.5)
    else:
        expect.cancelled("check_stock")
    session.check_invariants()


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_dropped_upstream_ends_the_session_and_abandons_the_running_call(dialect: str) -> None:
    session = session_with(dialect, faults.drop_upstream(call=1, after=0.5))
    timeline = session.timeline
    assert [(e.kind, e.t) for e in timeline.of("fault", "closed")][:2] == [("fault", 0.5), ("closed", 0.5)]
    assert timeline.outputs() == []
    assert list(decided_outcomes(session.ledger).values()) == ["abandoned"]
    with pytest.raises(Exception, match="never answered"):
        session.check_invariants("answered_once")
    with pytest.raises(SessionOver):
        session.advance(1)


def test_faults_on_a_recording_show_the_relays_answer(tmp_path: Path) -> None:
    with STOCK.start([check_stock]) as recorded:
        recorded.user("Is the lamp in stock?")
        recorded.advance(2)
    path = recorded.save(tmp_path)
    as_recorded = replay_with_faults(path, [check_stock])
    as_recorded.expect().next_call("check_stock").output(contains="in_stock", outcome="ok")
    timed_out = replay_with_faults(path, [check_stock], [faults.timeout("check_stock")])
    timed_out.expect().next_call("check_stock").output(outcome="timeout").follow_up()
    assert "check_stock" in timed_out.report() and "timeout [incomplete]" in timed_out.report()
    barged = replay_with_faults(path, [check_stock], [faults.barge_in(call=1, after=0.2)])
    barged.expect().next_call().barge_in().output(outcome="cancelled")


def test_faults_on_a_real_event_log(recordings_dir: Path) -> None:
    run = replay_with_faults(recordings_dir / NOTES_LOG, [str(SHARED_TOOLS)],
                             [faults.error_result("search", "search index offline")])
    run.expect().next_call("search").output(error=True, contains="search index offline", by="relay").follow_up()
    assert run.name.startswith(f"{NOTES_LOG} with error_result at search")
    dropped = replay_with_faults(recordings_dir / NOTES_LOG, [str(SHARED_TOOLS)],
                                 [faults.duplicate_delivery(1)])
    assert len(dropped.timeline.outputs()) == 1 and dropped.timeline.of("fault")
