"""The explorer on the Gemini script the loopback tests use (tests/support/tools.py's
`GEMINI_SCRIPT`: the weather, the client's own door, both at once, a slow shipment, a streamed
parcel), with the client answering its own calls.

What it found: the provider delivering the client's call twice, the client answered each delivery,
and the relay passed both answers up. The mock closed the session with 1007 for the second one,
which no source supports (docs/gemini.md, "A second answer to one call"); the mock now takes no
notice of it, and `one_final_answer` names it instead. The relay now forwards no answer after a
call's final one."""

from __future__ import annotations

import pytest

from relay.engine import immediate
from relay.offline.explore import explore, run_schedule, shrink
from relay.offline.explore_session import Conversation, Perturbation
from relay.tools.sources import tool_registry
from tests.gemini.test_gemini_engine import ship
from tests.support.tools import GEMINI_SCRIPT, get_weather, track

LINES = ("What's the weather?", "Open the door", "both please", "ship it", "track my parcel")
TWICE = (Perturbation("duplicate_client", 1),)
"""The client's first call, open_door, delivered twice (the model's second call)."""


def open_door(door: str) -> str:
    """Open a door."""
    return f"{door} door open"


def conversation() -> Conversation:
    return Conversation("tests/gemini script", GEMINI_SCRIPT, LINES, tool_registry([get_weather, ship, track]),
                        dialect="gemini", client_tools=(open_door,))


def forward_every_client_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fix undone: a client's answer after its call's final one goes up as the first did."""
    monkeypatch.setattr(immediate, "_answered_already", lambda engine, entry: False)


def test_the_client_answering_a_call_delivered_twice_sends_one_answer_up() -> None:
    run = run_schedule(conversation(), TWICE, keep=True)
    try:
        assert run.broken == []
        assert run.session.model.mock.repeated == [], "no second answer reached the model"
        assert any("again after its final answer" in a.message for a in run.session.engine.anomalies)
    finally:
        run.session.close()


def test_with_every_client_answer_forwarded_the_second_is_named_and_shrunk(monkeypatch: pytest.MonkeyPatch) -> None:
    forward_every_client_answer(monkeypatch)
    run = run_schedule(conversation(), TWICE, keep=True)
    try:
        assert [name for name, _ in run.broken] == ["one_final_answer"], run.broken
        assert run.session.model.mock.repeated != [] and not run.session.closed, "the mock took no notice"
    finally:
        run.session.close()
    assert shrink(conversation(), TWICE + (Perturbation("barge_in", 1, "running"),), "one_final_answer",
                  {}, None) == TWICE


def test_the_script_holds_every_invariant_for_a_fixed_seed() -> None:
    result = explore(conversation(), budget=40, seed=48, replay_check=False)
    assert result.ok, result.report()
