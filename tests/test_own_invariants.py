"""A user's own invariants (`--invariant FILE:FUNCTION`, `invariants=`) that fail as code: a check
that raises is that check's finding, never the relay's (`settles`) nor a bug of relay's; a
`reset` that raises stops `relay explore` and `relay replay` with one line naming it (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.cli import main
from relay.cli.demo import EXAMPLE_TOOLS
from relay.offline.replay import replay
from relay.testing import Script, Turn, call
from relay.testing import explore as explore_script
from tests.support.paths import REPO

DEMO_RECORDING = REPO / "docs" / "examples" / "recordings" / "demo.jsonl"
LOOKUP = Script(Turn(say="Let me check.", calls=[call("lookup_order", order_id="A1001")]), Turn(say="It shipped."))
CHECKS = """
def buggy(session):
    return session.no_such_attribute

def fine(session):
    return None

def _unreachable():
    raise RuntimeError("cannot reach the test bank")

fine.reset = _unreachable
"""


def _buggy(subject: object) -> None:
    raise KeyError("calls")


def test_a_check_that_raises_is_its_own_finding_not_the_relays() -> None:
    result = explore_script(LOOKUP, [EXAMPLE_TOOLS], budget=2, invariants={"mine": _buggy})
    assert [finding.invariant for finding in result.findings] == ["mine"]
    assert result.findings[0].message == "the check raised KeyError: 'calls'"
    assert result.held["settles"] == 2 and result.held["answered_once"] == 2


def test_a_check_that_raises_on_a_replay_is_its_own_verdict() -> None:
    result = replay(DEMO_RECORDING, [EXAMPLE_TOOLS], invariants={"mine": _buggy})
    assert result.broken == [("mine", "the check raised KeyError: 'calls'")]
    assert not result.divergences


@pytest.mark.parametrize("command", ["explore", "replay"])
def test_a_reset_that_raises_is_one_line_and_exit_2(command: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    checks = tmp_path / f"checks_{command}.py"
    checks.write_text(CHECKS)
    source = ["demo"] if command == "explore" else [str(DEMO_RECORDING), "--tools", EXAMPLE_TOOLS]
    assert main([command, *source, "--invariant", f"{checks}:fine"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == (f"relay {command}: --invariant {checks}:fine: its reset raised RuntimeError: "
                                    "cannot reach the test bank")
    assert captured.out == ""


def test_relay_explore_names_a_raising_check_of_yours(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checks = tmp_path / "checks_named.py"
    checks.write_text(CHECKS)
    assert main(["explore", "demo", "--budget", "2", "--invariant", f"{checks}:buggy"]) == 1
    out = capsys.readouterr().out
    assert "  held    settles" in out and "  BROKEN  buggy" in out
    assert "the check raised AttributeError:" in out and "no_such_attribute" in out
