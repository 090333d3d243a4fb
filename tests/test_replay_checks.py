"""`relay replay` checks the explorer's built-in invariants (relay/offline/replay_checks.py): a
finding the explorer wrote for a built-in invariant replays with exit 1 and that invariant named,
a clean recording exits 0, and the refund example's finding (an invariant of the user's own)
replays as it did."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from relay.cli import main
from relay.offline.explore import explore, run_schedule
from relay.offline.explore_session import Perturbation
from relay.offline.replay import replay
from relay.offline.replay_checks import CHECKED, NOT_ON_A_REPLAY, builtin_broken
from tests.test_explore import bank  # noqa: F401   (the refund example's bank, emptied: a fixture)
from tests.test_explore_live_client import TOOLS, concierge, runs_again

EXAMPLES = Path(TOOLS).parent


def test_a_built_in_finding_replays_with_exit_1_naming_its_invariant(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The seeded bug (the relay runs a delegation delivered twice again) is found by
    `handler_once`; its recording, replayed against the same relay, breaks it again."""
    runs_again(monkeypatch)
    result = explore(concierge(), budget=40, seed=1, out=tmp_path, replay_check=False, tools_arg=TOOLS)
    finding = next(f for f in result.findings if f.invariant == "handler_once")
    assert finding.recording is not None and finding.command is not None
    capsys.readouterr()
    status = main(["replay", str(finding.recording), "--tools", TOOLS, "--json"])
    replayed = json.loads(capsys.readouterr().out)
    assert status == 1
    assert replayed["divergences"] == [], "it replays faithfully: the relay under test is the one that broke it"
    assert [b["invariant"] for b in replayed["broken"]] == ["handler_once"]


def test_a_clean_recording_replays_with_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_schedule(concierge(), (Perturbation("barge_in", 1, "follow_up"),), keep=True)
    try:
        assert run.broken == []
        path = run.session.save(tmp_path)
    finally:
        run.session.close()
    assert main(["replay", str(path), "--tools", TOOLS]) == 0
    assert "verdict: no divergence" in capsys.readouterr().out


def test_a_replay_is_read_as_an_explored_session_is(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The same invariants broken on the explored session and on its replay, through the API;
    what a replay cannot show is not checked."""
    runs_again(monkeypatch)
    run = run_schedule(concierge(), (Perturbation("duplicate", 2),), keep=True)
    try:
        explored = [name for name, _ in run.broken]
        path = run.session.save(tmp_path)
    finally:
        run.session.close()
    replayed = replay(path, [TOOLS])
    assert replayed.handler_starts == dict(run.observed.starts)
    assert [name for name, _ in builtin_broken(replayed)] == explored == ["handler_once"]
    assert not NOT_ON_A_REPLAY & set(CHECKED)


def test_the_refund_examples_finding_replays_to_its_own_invariant_alone(
        bank: dict[str, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """The refund that pays twice breaks the user's `refunded_once`, and no built-in invariant:
    the relay kept its word, the tool did not."""
    from relay.offline.explore_input import from_file
    from relay.tools.sources import tool_registry

    sys.path.insert(0, str(EXAMPLES))
    try:
        from bank import refunded_once
    finally:
        sys.path.remove(str(EXAMPLES))
    conversation = from_file(EXAMPLES / "refund.script.json", tool_registry([str(EXAMPLES / "refunds.py")]))
    spec = f"{EXAMPLES / 'bank.py'}:refunded_once"
    result = explore(conversation, budget=60, seed=3, invariants={"refunded_once": refunded_once}, reset=bank.clear,
                     out=tmp_path, tools_arg=str(EXAMPLES / "refunds.py"), invariant_args=(spec,), replay_check=False)
    finding = next(f for f in result.findings if f.invariant == "refunded_once")
    assert finding.recording is not None
    capsys.readouterr()
    status = main(["replay", str(finding.recording), "--tools", str(EXAMPLES / "refunds.py"), "--invariant", spec,
                   "--json"])
    replayed = json.loads(capsys.readouterr().out)
    assert status == 1 and [b["invariant"] for b in replayed["broken"]] == ["refunded_once"]
