"""The explorer's results for fixed seeds stay what they were (issue 48's speed work must not change
them): for the demo's conversation on two wire families and the refund example, every schedule
tried, the perturbations that fired on it and the invariants it broke, and each finding's shrunk
schedule, compared with `tests/fixtures/explore_fixed.json`.

A change that means to alter the schedules or the verdicts rewrites the fixture on purpose:
`.venv/bin/python -m tests.test_explore_fixed --write`, and says why in its commit."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.offline.explore import boundaries, explore, fits_for, growth_of, run_schedule, schedules
from relay.offline.explore_growth import names_of
from relay.offline.explore_input import from_file
from relay.offline.explore_session import Conversation
from relay.tools.sources import tool_registry
from tests.support.paths import REPO

FIXTURE = Path(__file__).parent / "fixtures" / "explore_fixed.json"
EXAMPLES = REPO / "docs" / "examples" / "testing"
BUDGET = 40
SEED = 48


def _names(perturbations: Any) -> list[str]:
    return [f"{p.kind}:{p.call}:{p.anchor}:{p.step}" for p in perturbations]


def _schedules_of(conversation: Conversation) -> list[dict[str, Any]]:
    base = run_schedule(conversation, ())
    space = boundaries(conversation, base.observed)
    growth = growth_of(conversation, space, base.observed)
    rows = []
    for schedule in schedules(space, BUDGET, SEED, growth, fits_for(conversation)):
        if len(rows) == BUDGET:
            break
        run = base if not schedule else run_schedule(conversation, schedule)
        growth.learn(schedule, run.observed, names_of(run.session))
        rows.append({"schedule": _names(schedule), "fired": _names(run.observed.fired), "broken": run.broken})
    return rows


def _bank() -> Any:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import bank
    finally:
        sys.path.remove(str(EXAMPLES))
    return bank.BANK


def _refund_findings(out: Path) -> list[dict[str, Any]]:
    bank = _bank()
    bank.clear()

    def refunded_once(session: object) -> str | None:
        twice = [order for order, paid in bank.items() if len(paid) > 1]
        return f"order {twice[0]} was refunded {len(bank[twice[0]])} times" if twice else None

    conversation = from_file(EXAMPLES / "refund.script.json", tool_registry([str(EXAMPLES / "refunds.py")]))
    try:
        result = explore(conversation, budget=60, seed=3, invariants={"refunded_once": refunded_once},
                         reset=bank.clear, out=out, replay_check=False)
    finally:
        bank.clear()
    return [{"invariant": f.invariant, "message": f.message, "schedule": _names(f.schedule),
             "original": _names(f.original)} for f in result.findings] + [{"tried": result.tried,
                                                                          "distinct": result.distinct,
                                                                          "held": result.held}]


def results(out: Path) -> dict[str, Any]:
    tools = tool_registry([EXAMPLE_TOOLS])
    demo = Conversation("demo", demo_script(), TURNS, tools)
    return {"demo (openai)": _schedules_of(demo.with_dialect("openai")),
            "demo (gemini)": _schedules_of(demo.with_dialect("gemini")),
            "refund": _refund_findings(out)}


def test_a_fixed_seed_tries_the_same_schedules_with_the_same_verdicts(tmp_path: Path) -> None:
    expected = json.loads(FIXTURE.read_text())
    found = json.loads(json.dumps(results(tmp_path)))   # tuples as lists, as the fixture has them
    for name in expected:
        assert found[name] == expected[name], name


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python -m tests.test_explore_fixed --write")
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        FIXTURE.write_text(json.dumps(results(Path(folder)), indent=1) + "\n")
    print(f"wrote {FIXTURE}")
