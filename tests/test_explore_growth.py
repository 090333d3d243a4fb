"""The explorer's space grown from perturbed runs (relay/offline/explore_growth.py): a call only a
perturbation makes gets perturbations of its own, tried beside the schedule that reached it.

The bug only a grown perturbation reaches (found by the growth itself, fixed in
relay/engine/client_asks.py): on GPT-Live, a caller who asks for a second relay tool in a barge-in
(`asked_again`); when the first one's output goes up just after the model delegated again, the
relay's create went before that delegation's response began, and the server refused it as a
partial batch (the new response's call unanswered). The second call exists only in perturbed
runs: the scripted run's space has no perturbation of it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from relay.engine.client_asks import ClientAsks
from relay.mock import MockScript, ToolCall
from relay.mock.script import Reply, Rule
from relay.offline.explore import boundaries, explore, run_schedule
from relay.offline.explore_growth import MAX_PERTURBATIONS, Growth
from relay.offline.explore_session import Conversation, Observed, Perturbation
from relay.tools.sources import tool_registry
from tests.test_explore import EXAMPLES, bank, refunded_once  # noqa: F401   (the refund example's bank, a fixture)
from tests.test_explore_shapes import asked_again


def test_a_bug_only_a_grown_perturbation_reaches_is_found_with_its_fix_undone(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    conversation = asked_again("live")
    base = run_schedule(conversation, ())
    assert len(base.observed.calls) == 1 and all(p.call == 1 for p in boundaries(conversation, base.observed))
    monkeypatch.setattr(ClientAsks, "_announced_wait", lambda self: None)   # the fix undone
    result = explore(conversation, budget=400, seed=1, out=tmp_path, replay_check=False)
    [finding] = result.findings
    assert finding.invariant == "appends_placed" and "refused" in finding.message, finding.describe()
    assert any(p.call == 2 for p in finding.schedule), finding.describe()
    assert len(finding.schedule) <= 3 and result.grown > 0
    assert "grown from perturbed runs" in result.report() and result.to_json()["grown"] == result.grown
    monkeypatch.undo()
    assert run_schedule(conversation, finding.schedule).broken == []


def show_map(city: str) -> str:
    """Show a city on the caller's screen (the caller's own tool)."""
    return f"showing {city}"


def map_then_refund(tools: str) -> Conversation:
    """The caller asks for its own tool, then (barging in before it answers it) for a refund: the
    relay's call exists only in perturbed runs."""
    rules = (Rule(match="paris", say="Showing it.", calls=(ToolCall(name="show_map", arguments={"city": "Paris"}),)),
             Rule(match="refund order a1", say="Let me refund that.",
                  calls=(ToolCall(name="refund_order", arguments={"order_id": "A1"}),)))
    return Conversation("map then refund", MockScript(rules=rules, after_outputs=Reply(say="{output}")),
                        ("Show me Paris.",), tool_registry([str(EXAMPLES / f"{tools}.py")]),
                        client_tools=(show_map,), barge_text="Please refund order A1.")


@pytest.mark.parametrize("dialect", ["openai", "gemini", "live"])
def test_the_relays_call_only_a_barge_in_makes_is_perturbed_and_holds(dialect: str,
                                                                      bank: dict[str, list[str]]) -> None:  # noqa: F811
    result = explore(map_then_refund("refunds_fixed").with_dialect(dialect), budget=150, seed=1,
                     invariants={"refunded_once": refunded_once(bank)}, reset=bank.clear, replay_check=False)
    assert result.ok, result.report()
    assert result.grown > 0 and result.grown_covered > result.grown // 2 and result.covered == result.boundaries


# ---- the growth's own rules, on observations made by hand ------------------------------------------
A, B = Perturbation("barge_in_client", 1, "announced"), Perturbation("client_late", 1, step=1)
SPACE = [A, B, Perturbation("client_late", 1, step=2)]


def _base() -> Observed:
    return Observed(client_calls=["c1"])


def _reaching(calls: int) -> Observed:
    """A run that reached `calls` relay calls, each to its `running` anchor."""
    return Observed(calls=[f"r{n}" for n in range(1, calls + 1)], client_calls=["c1"],
                    anchors={(n, "running") for n in range(1, calls + 1)})


def _space_of(observed: Observed, names: dict[str, str]) -> list[Perturbation]:
    grown = [Perturbation(kind, n) for n in range(1, len(observed.calls) + 1)
             for kind in ("barge_in", "raises", "done_first")]
    return [*SPACE, *grown]


def _growth(fits: Any = lambda schedule: True) -> Growth:
    return Growth(SPACE, _base(), _space_of, fits)


def test_a_single_that_reaches_a_new_call_queues_its_perturbations_beside_it() -> None:
    """Not `done_first`, which acts on every response from the run's start (`WHOLE_RUN`)."""
    growth = _growth()
    growth.learn((A,), _reaching(1), dict)
    assert list(growth.queue) == [tuple(sorted((A, Perturbation("barge_in", 1)))),
                                  tuple(sorted((A, Perturbation("raises", 1))))]
    assert growth.count == 2 and growth.found == {Perturbation("barge_in", 1), Perturbation("raises", 1)}


def test_a_run_that_reaches_nothing_new_grows_nothing() -> None:
    growth = _growth()
    growth.learn((B,), _base(), dict)
    growth.learn((), _reaching(1), dict)   # the scripted run itself is the space
    assert not growth.queue and growth.count == 0


def test_a_context_with_only_scripted_perturbations_more_is_not_grown_again() -> None:
    growth = _growth()
    growth.learn((A,), _reaching(1), dict)
    growth.queue.clear()
    growth.learn(tuple(sorted((A, B))), _reaching(1), dict)
    assert not growth.queue, "A already grew call 1's perturbations; B is left to the random draws"
    growth.learn((B,), _reaching(1), dict)
    assert len(growth.queue) == 2, "B alone reaching call 1 is another context"


def test_extensions_and_full_schedules_are_not_learnt_from() -> None:
    growth = _growth()
    growth.learn(tuple(sorted((A, Perturbation("barge_in", 1)))), _reaching(2), dict)
    full = tuple(sorted(SPACE))
    assert len(full) == MAX_PERTURBATIONS
    growth.learn(full, _reaching(2), dict)
    assert not growth.queue and growth.count == 0


def test_an_extension_that_cannot_hold_its_perturbations_is_not_grown() -> None:
    growth = _growth(fits=lambda schedule: not any(p.kind == "raises" for p in schedule))
    growth.learn((A,), _reaching(1), dict)
    assert list(growth.queue) == [tuple(sorted((A, Perturbation("barge_in", 1))))]


def test_the_random_draws_take_a_grown_perturbation_with_its_context_in_proportion() -> None:
    growth = _growth()
    growth.learn((A,), _reaching(1), dict)
    draw = random.Random(7)
    drawn = [growth.draw(draw, 2 + n % 2, SPACE) for n in range(500)]
    around = [schedule for schedule in drawn if schedule is not None]
    assert 100 < len(around) < 300, "2 grown perturbations against 3 scripted ones"
    for schedule in around:
        assert A in schedule and len(schedule) <= MAX_PERTURBATIONS
        assert any(p in growth.found for p in schedule)
    assert {len(schedule) for schedule in around} == {2, 3}
    assert _growth().draw(random.Random(7), 3, SPACE) is None, "nothing grown: the scripted space"


def test_a_response_the_callers_speech_makes_has_its_call_item_after_its_done_too() -> None:
    """`done_first` reorders the frames of a response the caller's speech makes (here the only one
    with the relay's call, which only the barge-in makes), as it does any other's."""
    schedule = (Perturbation("barge_in_client", 1, "announced"), Perturbation("done_first", 1))
    run = run_schedule(map_then_refund("refunds_fixed"), schedule)
    assert set(schedule) <= set(run.observed.fired) and run.broken == []
