"""The explorer under the relay's history limit (`relay explore --history-items N`, as `relay serve
--history-items N` runs): each schedule's engine forgets as a live one would, the summary says
under which limit, and what it writes replays under the same limit, which the recording's header
carries (`history_limit`), as a live session's recording does."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from relay.cli import main
from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.offline.explore import explore, run_schedule
from relay.offline.explore_input import from_file
from relay.offline.explore_session import Conversation, Perturbation
from relay.offline.replay import replay
from relay.recording.reader import load_recording
from relay.tools.sources import tool_registry


def demo(dialect: str = "openai", limit: int | None = None) -> Conversation:
    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect(dialect)
    return replace(conversation, history_limit=limit)


@pytest.mark.parametrize("dialect", ["openai", "gemini", "live"])
def test_each_schedule_runs_under_the_limit_and_every_invariant_holds(dialect: str) -> None:
    conversation = demo(dialect, 2)
    base = run_schedule(conversation, (), keep=True)
    try:
        calls = len(base.observed.calls)
        assert base.session.engine.config.history_limit == 2
        assert calls >= 5 and len(base.session.engine.ledger) < calls   # it forgot some of them
    finally:
        base.session.close()
    result = explore(conversation, budget=60, seed=3)
    assert result.ok, result.report()
    assert result.history_limit == 2 and result.to_json()["history_limit"] == 2 and result.replayed >= 1
    assert "the last 2 items, responses and finished calls" in result.report()


def test_a_recording_made_under_a_limit_replays_and_is_explored_under_it(tmp_path: Path) -> None:
    run = run_schedule(demo("openai", 2), (), keep=True)
    try:
        path = run.session.save(tmp_path)
    finally:
        run.session.close()
    assert load_recording(path).header["history_limit"] == 2
    replayed = replay(path, [EXAMPLE_TOOLS])
    assert replayed.divergences == [] and replayed.engine.config.history_limit == 2
    # the replayed engine forgot as the session did; its report still has every call
    assert len(replayed.calls) >= 5 and len(replayed.engine.ledger) < len(replayed.calls)
    assert from_file(path, tool_registry([EXAMPLE_TOOLS])).history_limit == 2

    lines = path.read_text().splitlines()   # the same recording with no limit in its header
    header = json.loads(lines[0])
    del header["history_limit"]
    unlimited = tmp_path / "unlimited.jsonl"
    unlimited.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    everything = replay(unlimited, [EXAMPLE_TOOLS])
    assert everything.engine.config.history_limit is None and len(everything.engine.ledger) == len(everything.calls)
    assert [c.call_id for c in everything.calls] == [c.call_id for c in replayed.calls]
    assert from_file(unlimited, tool_registry([EXAMPLE_TOOLS])).history_limit is None


def test_the_command_explores_under_the_limit_it_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explore", "demo", "--budget", "20", "--history-items", "3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["history_limit"] == 3 and result["ok"]
    assert main(["explore", "demo", "--budget", "5", "--history-items", "0", "--json"]) == 0   # 0: all
    assert json.loads(capsys.readouterr().out)["history_limit"] is None


SCHEDULES = {
    "openai": (),
    "gemini": (),
    # GPT-Live: call 1 (of a batch of two) is answered and forgotten in one round
    "live": (Perturbation("hangs", 4), Perturbation("reconnect", 2, "follow_up", step=1),
             Perturbation("reconnect", 1, "answered", step=6)),
}


@pytest.mark.parametrize("dialect", ["openai", "gemini", "live"])
def test_a_run_under_a_limit_reaches_every_anchor_a_run_without_one_does(dialect: str) -> None:
    """A call answered and forgotten in one round still reaches its `answered` and `follow_up`
    anchors (the explorer reads them before the call book forgets), so a perturbation anchored
    there fires under a limit as without one."""
    schedule = SCHEDULES[dialect]
    everything, limited = run_schedule(demo(dialect), schedule), run_schedule(demo(dialect, 1), schedule)
    assert limited.observed.calls == everything.observed.calls
    assert limited.observed.anchors == everything.observed.anchors
    assert limited.observed.fired == everything.observed.fired
    assert limited.broken == everything.broken == []
