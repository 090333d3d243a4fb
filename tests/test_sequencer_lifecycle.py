"""The sequencer's states: every step its tables allow is taken, every other step is refused.

The tables (`relay.engine.sequencer.STEPS`: the relay's own create and its cancel;
`relay.engine.holding.STEPS`: the client creates a proxy holds back) are the one statement of
how those states change; these tests walk all of them, every pair of states of every machine,
as tests/test_call_lifecycle.py walks the calls', then follow each step the engine takes.
"""

from __future__ import annotations

import ast
import itertools
from enum import Enum
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import pytest

from relay.dialects import OPENAI
from relay.dialects import openai_codec as wire
from relay.engine import EngineConfig, OpenAIEngine
from relay.engine.calls import IllegalTransition
from relay.engine.holding import STEPS as HOLDING_STEPS
from relay.engine.holding import HeldCreates, HeldState, ShiftState
from relay.engine.sequencer import STEPS as SEQUENCER_STEPS
from relay.engine.sequencer import CancelState, CreateState, Sequencer
from relay.engine.states import Machines

ACTIVE = {"type": "invalid_request_error", "code": "conversation_already_has_active_response",
          "message": "Conversation already has an active response in progress: resp_x."}


def new_sequencer(**options: Any) -> Sequencer:
    counter = itertools.count(1)
    return Sequencer(new_event_id=lambda: f"t_e{next(counter)}", build_create=partial(wire.response_create, OPENAI),
                     **options)


def polled(sequencer: Sequencer, now: float) -> list[dict[str, Any]]:
    """What the sequencer sends now, as the frames' JSON objects."""
    return [msgspec.to_builtins(command) for command in sequencer.poll(now)]


MACHINES: list[tuple[type[Machines], type[Enum]]] = [
    (Sequencer, CreateState), (Sequencer, CancelState), (HeldCreates, HeldState), (HeldCreates, ShiftState)]


def machines_in(owner: type[Machines], machine: type[Enum], state: Enum, **options: Any) -> Machines:
    machines = new_sequencer(**options) if owner is Sequencer else HeldCreates(**options)
    setattr(machines, owner.attributes[machine], state)   # set up directly: the test puts it where the table starts
    return machines


def all_steps(machine: type[Enum]) -> list[tuple[Any, Any]]:
    return list(itertools.product(list(machine), repeat=2))


def allowed(owner: type[Machines], before: Any, after: Any) -> bool:
    return after in owner.steps[type(before)][before]


def test_the_tables_name_every_state_of_every_machine() -> None:
    assert set(SEQUENCER_STEPS) == {CreateState, CancelState} == set(Sequencer.attributes)
    assert set(HOLDING_STEPS) == {HeldState, ShiftState} == set(HeldCreates.attributes)
    for owner, machine in MACHINES:
        table = owner.steps[machine]
        assert set(table) == set(machine), machine
        assert all(state in set(machine) for nexts in table.values() for state in nexts), machine


@pytest.mark.parametrize(("owner", "machine"), MACHINES)
def test_every_step_the_table_allows_is_taken(owner: type[Machines], machine: type[Enum]) -> None:
    steps = [(a, b) for a, b in all_steps(machine) if allowed(owner, a, b)]
    assert steps, "the table allows some steps"
    for before, after in steps:
        machines = machines_in(owner, machine, before)
        assert machines.move(after) is True
        assert getattr(machines, owner.attributes[machine]) is after


@pytest.mark.parametrize(("owner", "machine"), MACHINES)
def test_every_step_the_table_does_not_allow_is_refused_in_strict_mode(owner: type[Machines],
                                                                       machine: type[Enum]) -> None:
    refused = [(a, b) for a, b in all_steps(machine) if not allowed(owner, a, b)]
    assert len(refused) >= len(list(machine))   # self-steps at least
    for before, after in refused:
        machines = machines_in(owner, machine, before)
        with pytest.raises(IllegalTransition, match=f"{machine.__name__}: {before.value} -> {after.value}"):
            machines.move(after)
        assert getattr(machines, owner.attributes[machine]) is before, "a refused step changes nothing"


@pytest.mark.parametrize(("owner", "machine"), MACHINES)
def test_outside_strict_mode_a_refused_step_is_reported_and_changes_nothing(owner: type[Machines],
                                                                            machine: type[Enum]) -> None:
    heard: list[str] = []
    for before, after in all_steps(machine):
        if allowed(owner, before, after):
            continue
        machines = machines_in(owner, machine, before, strict=False, on_refused=heard.append)
        assert machines.move(after) is False
        assert getattr(machines, owner.attributes[machine]) is before
    assert heard and all("is not a step of its table" in message for message in heard)


def test_the_engine_records_a_refused_step_as_an_anomaly_when_not_strict() -> None:
    engine = OpenAIEngine([], config=EngineConfig(strict=False))
    assert engine.sequencer.move(CreateState.RETRY) is False
    assert engine.view.held.move(ShiftState.ADDED) is False
    assert [a.message for a in engine.anomalies] == [
        "Sequencer CreateState: idle -> retry is not a step of its table",
        "HeldCreates ShiftState: none -> added is not a step of its table"]


def test_strict_engines_raise_on_a_refused_step() -> None:
    engine = OpenAIEngine([], config=EngineConfig(strict=True))
    with pytest.raises(IllegalTransition):
        engine.sequencer.move(CancelState.NONE)
    with pytest.raises(IllegalTransition):
        engine.view.held.move(HeldState.NONE)


def test_the_relay_sends_a_create_only_when_idle_or_due_for_a_retry() -> None:
    """The tables' promises: one create of the relay's at a time; a retry waiting for a done it
    cannot see start goes through `retry` (the done, or its deadline) before it is sent; a
    client create held for the relay's work is only ever released."""
    create = SEQUENCER_STEPS[CreateState]
    assert [s for s, nexts in create.items() if CreateState.SENT in nexts] == [CreateState.IDLE, CreateState.RETRY]
    assert create[CreateState.RETRY_AFTER_DONE] == {CreateState.RETRY, CreateState.IDLE}
    assert HOLDING_STEPS[HeldState][HeldState.FOR_RELAY] == {HeldState.NONE}
    assert all(s not in nexts for table in (*SEQUENCER_STEPS.values(), *HOLDING_STEPS.values())
               for s, nexts in table.items())


def test_no_code_in_relay_sets_a_sequencer_state_but_move() -> None:
    root = Path(__file__).resolve().parents[1] / "relay"
    names = {*Sequencer.attributes.values(), *HeldCreates.attributes.values()}
    offenders = []
    for path in root.rglob("*.py"):
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.name == "__init__":
                continue
            for node in ast.walk(function):
                targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
                if any(isinstance(t, ast.Attribute) and t.attr in names for t in targets):
                    offenders.append(f"{path.relative_to(root)}:{node.lineno}")
    assert offenders == []


# ---- the steps as the sequencer takes them (a fake clock, no engine) -------------------------

def follow_up(sequencer: Sequencer, now: float = 0.0, *, interrupt: bool = False) -> dict[str, Any]:
    sequencer.request_follow_up(["call_1"], interrupt=interrupt, messages=[], confirm={"item_out"}, now=now)
    [frame] = polled(sequencer, now)
    return frame


def test_a_create_is_sent_then_acknowledged_by_its_response() -> None:
    sequencer = new_sequencer()
    frame = follow_up(sequencer)
    assert frame["type"] == "response.create" and sequencer.create_state is CreateState.SENT
    assert sequencer.busy(1.0) and polled(sequencer, 1.0) == []
    creator, ours = sequencer.response_created("resp_1", frame["response"]["metadata"], 1.0)
    assert creator == "relay" and ours is not None and ours.event_id == frame["event_id"]
    assert sequencer.create_state is CreateState.IDLE


def test_a_create_refused_behind_an_active_response_goes_again_after_its_done() -> None:
    sequencer = new_sequencer()
    sequencer.response_created("resp_server", None, 0.0)          # someone else's response runs
    sequencer.request_follow_up(["call_1"], interrupt=False, messages=[], confirm={"item_out"}, now=0.0)
    assert polled(sequencer, 0.0) == [] and sequencer.create_state is CreateState.IDLE
    sequencer.response_done("resp_server")
    [frame] = polled(sequencer, 1.0)
    sequencer.response_created("resp_other", None, 1.5)           # a second writer's, seen start
    assert sequencer.error_about({**ACTIVE, "event_id": frame["event_id"]}, 2.0) == ("response.create", None)
    assert sequencer.create_state is CreateState.RETRY and sequencer.pending()
    sequencer.response_done("resp_other")
    assert polled(sequencer, 3.0) == [frame] and sequencer.create_state is CreateState.SENT


def test_a_create_refused_with_no_response_in_sight_waits_for_the_next_done_but_not_forever() -> None:
    sequencer = new_sequencer(retry_wait=5.0)
    frame = follow_up(sequencer, 10.0)
    sequencer.error_about({**ACTIVE, "event_id": frame["event_id"]}, 11.0)
    assert sequencer.create_state is CreateState.RETRY_AFTER_DONE
    assert sequencer.next_deadline() == 16.0 and sequencer.busy(15.9)
    assert not sequencer.busy(16.0) and sequencer.create_state is CreateState.RETRY
    assert polled(sequencer, 16.0) == [frame]


def test_an_unacknowledged_create_is_sent_again_until_its_attempts_are_spent() -> None:
    sequencer = new_sequencer(ack_timeout=15.0, max_attempts=2)
    frame = follow_up(sequencer, 0.0)
    assert sequencer.next_deadline() == 15.0
    assert polled(sequencer, 15.0) == [frame] and sequencer.create_state is CreateState.SENT   # via retry
    assert polled(sequencer, 30.0) == [] and sequencer.create_state is CreateState.IDLE        # given up


def test_a_create_in_flight_when_the_connection_is_replaced_is_not_sent_again_yet_recognised() -> None:
    sequencer = new_sequencer()
    frame = follow_up(sequencer)
    sequencer.reset_connection()
    assert sequencer.create_state is CreateState.IDLE and polled(sequencer, 1.0) == []
    creator, ours = sequencer.response_created("resp_1", frame["response"]["metadata"], 2.0)
    assert creator == "relay" and ours is not None


def test_an_interrupting_follow_up_cancels_the_response_it_waits_behind_once() -> None:
    sequencer = new_sequencer()
    sequencer.response_created("resp_user", None, 0.0)
    sequencer.request_follow_up(["call_1"], interrupt=True, messages=[], confirm={"item_out"}, now=0.0)
    [cancel] = polled(sequencer, 0.0)
    assert cancel == {"type": "response.cancel", "event_id": cancel["event_id"], "response_id": "resp_user"}
    assert sequencer.cancel_state is CancelState.SENT and polled(sequencer, 0.5) == []
    sequencer.response_done("resp_user")
    assert sequencer.cancel_state is CancelState.NONE
    assert polled(sequencer, 1.0)[0]["type"] == "response.create"


def test_held_creates_are_released_first_up_rest_refused_and_the_shift_is_followed() -> None:
    held = HeldCreates()
    held.hold("create_a", "a", for_relay=False, now=1.0)
    held.hold("create_b", "b", for_relay=False, now=2.0)
    assert held.held_state is HeldState.HELD and held.since == 1.0
    held.held_for_relay()
    assert held.release() == (("create_a", "a"), ["b"])
    assert held.since is None
    assert (held.held_state, held.shift_state) == (HeldState.NONE, ShiftState.SHIFTED) and not held.collides()
    held.client_added_item()
    assert held.shift_state is ShiftState.ADDED and held.collides()
    held.hold("create_c", "c", for_relay=True, now=3.0)
    assert held.release() == (("create_c", "c"), [])
    assert held.shift_state is ShiftState.SHIFTED   # what the client added before it is in its response
    held.settle()
    assert held.shift_state is ShiftState.NONE


def test_creates_held_only_behind_someone_elses_response_are_all_refused() -> None:
    held = HeldCreates()
    held.hold("create_a", "a", for_relay=False, now=1.0)
    held.hold("create_b", None, for_relay=False, now=1.0)
    assert held.release() == (None, ["a", None])
    assert (held.held_state, held.shift_state) == (HeldState.NONE, ShiftState.NONE)
