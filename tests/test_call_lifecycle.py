"""The call book's lifecycle: every step its table allows is taken, every other step is refused.

The table (`relay.engine.calls.LIFECYCLE`) is the one statement of how a call lives; these tests
walk all of it, both owners, every pair of states, so a step added to or dropped from the engine
without the table shows up here.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from relay.engine import CallEntry, CallLedger, CallState, OpenAIEngine, EngineConfig, Owner
from relay.engine.calls import LIFECYCLE, IllegalTransition

STAMPS = {CallState.READY: "ready_at", CallState.RUNNING: "started_at", CallState.ANSWERED: "injected_at"}


def entry_in(state: CallState, owner: Owner) -> CallEntry:
    entry = CallEntry("call_1", "get_weather", "item_1", "resp_1", owner)
    entry.state = state   # set up directly: the test puts the call where the table starts
    return entry


def all_steps(owner: Owner) -> list[tuple[CallState, CallState]]:
    return list(itertools.product(list(CallState), repeat=2))


def allowed(owner: Owner, before: CallState, after: CallState) -> bool:
    return after in LIFECYCLE[owner].get(before, frozenset())


@pytest.mark.parametrize("owner", list(Owner))
def test_every_step_the_table_allows_is_taken_and_stamped(owner: Owner) -> None:
    steps = [(a, b) for a, b in all_steps(owner) if allowed(owner, a, b)]
    assert steps, "the table allows some steps"
    for before, after in steps:
        ledger = CallLedger(strict=True)
        entry = entry_in(before, owner)
        assert ledger.move(entry, after, 12.5) is True
        assert entry.state is after
        if after in STAMPS:
            assert getattr(entry, STAMPS[after]) == 12.5


@pytest.mark.parametrize("owner", list(Owner))
def test_every_step_the_table_does_not_allow_is_refused_in_strict_mode(owner: Owner) -> None:
    refused = [(a, b) for a, b in all_steps(owner) if not allowed(owner, a, b)]
    assert len(refused) > len(list(CallState))   # self-steps at least, and every step out of an end state
    for before, after in refused:
        ledger = CallLedger(strict=True)
        entry = entry_in(before, owner)
        with pytest.raises(IllegalTransition, match=f"{before.value} -> {after.value}"):
            ledger.move(entry, after, 1.0)
        assert entry.state is before, "a refused step changes nothing"


@pytest.mark.parametrize("owner", list(Owner))
def test_outside_strict_mode_a_refused_step_is_reported_and_changes_nothing(owner: Owner) -> None:
    heard: list[str] = []
    for before, after in all_steps(owner):
        if allowed(owner, before, after):
            continue
        ledger = CallLedger(strict=False, on_refused=heard.append)
        entry = entry_in(before, owner)
        assert ledger.move(entry, after, 1.0) is False
        assert entry.state is before and entry.injected_at is None and entry.started_at is None
    assert heard and all("is not a step of its lifecycle" in message for message in heard)


def test_the_engine_records_a_refused_step_as_an_anomaly_when_not_strict() -> None:
    engine = OpenAIEngine([], config=EngineConfig(strict=False))
    entry = engine.ledger.add(entry_in(CallState.ANSWERED, Owner.RELAY))
    assert engine.ledger.move(entry, CallState.RUNNING, 3.0) is False
    assert [a.message for a in engine.anomalies] == [
        "call call_1 (relay-owned get_weather): answered -> running is not a step of its lifecycle"]


def test_strict_engines_raise_on_a_refused_step() -> None:
    engine = OpenAIEngine([], config=EngineConfig(strict=True))
    entry = engine.ledger.add(entry_in(CallState.SKIPPED, Owner.RELAY))
    with pytest.raises(IllegalTransition):
        engine.ledger.move(entry, CallState.READY, 3.0)


def test_end_states_have_no_way_out_but_a_client_answering_a_skipped_call() -> None:
    for owner, table in LIFECYCLE.items():
        for state in (CallState.ANSWERED, CallState.ABANDONED):
            assert not table.get(state), (owner, state)
    assert LIFECYCLE[Owner.RELAY][CallState.SKIPPED] == frozenset()
    assert LIFECYCLE[Owner.CLIENT][CallState.SKIPPED] == {CallState.ANSWERED}


def test_a_relay_call_reaches_answered_only_through_finished() -> None:
    """The invariant in table form: a relay call is answered only after its output was decided,
    and every decided output leads to answered (or to the end of the session or the call)."""
    relay = LIFECYCLE[Owner.RELAY]
    assert [s for s, nexts in relay.items() if CallState.ANSWERED in nexts] == [CallState.FINISHED]
    assert relay[CallState.FINISHED] == {CallState.ANSWERED, CallState.SKIPPED, CallState.ABANDONED}
    assert all(CallState.COMPLETE not in nexts for nexts in relay.values())
    assert all(s not in LIFECYCLE[Owner.CLIENT] for s in (CallState.READY, CallState.RUNNING, CallState.FINISHED))


def test_no_code_in_relay_sets_a_call_state_but_the_call_book() -> None:
    root = Path(__file__).resolve().parents[1] / "relay"
    assignment = re.compile(r"\.state\s*=\s*(CallState|_S)\.")
    offenders = [f"{path.relative_to(root)}:{number}"
                 for path in root.rglob("*.py") if path.name != "calls.py"
                 for number, line in enumerate(path.read_text().splitlines(), 1) if assignment.search(line)]
    assert offenders == []
