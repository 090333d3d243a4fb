"""The explorer holds a Responses backend call that a dropped GPT-Live session had not spoken of to
a follow-up in the session that carries it on (`relay serve --live-reseed`): the new session
continues its batch (relay/engine/delegation_records.py), and with that undone `spoke_after_tools`
names the call, whether its answer went up before the drop (its continuation lost with the
connection) or in the new session (its handler still running at the drop: told by a note, which
names no call the timeline can read)."""

from __future__ import annotations

from typing import Any

import pytest

from relay.edges.reseed import DEFAULT_ATTEMPTS
from relay.engine.calls import CallState
from relay.engine.delegation_records import LiveRecords
from relay.offline.explore import run_schedule
from relay.offline.explore_live import ATTEMPTS, FAILS, OPENING
from relay.offline.explore_session import Conversation, Perturbation
from relay.offline.scripted import Script, Turn, call
from relay.recording.format import RELAY_TO_UPSTREAM
from relay.tools.sources import tool_registry
from tests.live.test_live_mock import SCRIPT, get_time, get_weather
from tests.test_explore_live import one_call
from tests.test_explore_quirks import check_stock, show_map


@pytest.mark.parametrize("anchor", ["running", "answered"])
def test_a_batch_a_drop_left_unspoken_is_spoken_in_the_new_session(anchor: str) -> None:
    schedule = (Perturbation("reseed", 1, anchor),)
    run = run_schedule(one_call(), schedule)
    assert run.observed.fired == list(schedule) and run.broken == []


@pytest.mark.parametrize("anchor", ["running", "answered"])
def test_with_the_continuation_undone_the_silence_is_named(monkeypatch: pytest.MonkeyPatch, anchor: str) -> None:
    monkeypatch.setattr(LiveRecords, "_continue_carried", lambda self: None)
    run = run_schedule(one_call(), (Perturbation("reseed", 1, anchor),))
    assert [name for name, _ in run.broken] == ["spoke_after_tools"]
    assert "nothing was said after the answer to" in run.broken[0][1]


def weather_and_time() -> Conversation:
    """The conversation the explorer found the double reseed on (seed 48, budget 2000)."""
    return Conversation("live", SCRIPT, ("What's the weather in Paris?",), tool_registry([get_weather, get_time]),
                        dialect="live")


DOUBLE_RESEED = (Perturbation("finish", 1, "running", 2), Perturbation("reseed", 1, "answered", 0),
                 Perturbation("reseed", 1, "running", 0))
"""The shrunk schedule: the connection drops while get_weather runs, its answer's note and the new
session's continuation go up, and the connection drops again before that continuation began."""


@pytest.mark.parametrize("conversation", [weather_and_time, one_call])
def test_a_continuation_a_second_drop_cut_short_is_made_in_the_next_session(conversation: Any) -> None:
    run = run_schedule(conversation(), DOUBLE_RESEED)
    assert set(run.observed.fired) == set(DOUBLE_RESEED) and run.broken == []


@pytest.mark.parametrize("anchor", ["running", "answered"])
@pytest.mark.parametrize("how", [OPENING, FAILS])
def test_a_drop_while_the_new_session_opens_and_a_failed_reconnect_hold(anchor: str, how: int) -> None:
    """`reseed`'s two other ways (relay/offline/explore_live.py): the new connection drops before
    its session started and the relay opens another (three `session.start`s, two sessions up); or
    none can be made and the relay ends the session (every call answered or abandoned)."""
    schedule = (Perturbation("reseed", 1, anchor, how),)
    run = run_schedule(weather_and_time(), schedule, keep=True)
    try:
        assert run.observed.fired == list(schedule) and run.broken == []
        frames = [f.raw or "" for f in run.session.frames]
        starts = [f for f, raw in zip(run.session.frames, frames) if f.direction == RELAY_TO_UPSTREAM
                  and '"session.start"' in raw]
        if how == OPENING:
            assert len(starts) == 3 and sum('"session.started"' in raw for raw in frames) == 2 * 2
            assert not run.session.closed
        else:
            assert len(starts) == 1 and run.session.closed
            assert {entry.state for entry in run.session.engine.ledger} <= {CallState.ANSWERED, CallState.ABANDONED}
    finally:
        run.session.close()


def test_past_its_attempts_the_relay_ends_the_session() -> None:
    """Two drops, each followed by one while the new session opens: four drops, past the loop's
    three new sessions (`ReseedingLoop`'s `DEFAULT_ATTEMPTS`): the fourth ends the session."""
    assert ATTEMPTS == DEFAULT_ATTEMPTS
    schedule = (Perturbation("reseed", 1, "running", OPENING), Perturbation("reseed", 2, "running", OPENING))
    run = run_schedule(weather_and_time(), schedule, keep=True)
    try:
        assert run.broken == [] and run.session.closed and len(run.session.reseeds) == ATTEMPTS + 1
    finally:
        run.session.close()


def stock_and_map() -> Conversation:
    """One backend response asks check_stock (the relay's) and show_map (the caller's own tool):
    a batch of both, whose create the caller asks for once it answered show_map."""
    script = Script(Turn(say="Let me look.", calls=[call("check_stock", item="A1"), call("show_map", city="Paris")]),
                    Turn(say="Here it is."))
    return Conversation("stock", script.mock_script(), ("Is A1 in stock? Show me Paris.",),
                        tool_registry([check_stock]), client_tools=(show_map,), turns=script.turns, dialect="live")


MIXED_RESEED = (Perturbation("reseed", 1, "answered"),)
"""What the explorer found (budget 300, seed 48, 260 schedules broken): the connection drops
after check_stock's output, show_map's and the caller's create went up, before the continuation
began. The new session, told check_stock's result only, was never continued: the caller heard
neither result."""


def test_a_dropped_batch_with_the_callers_calls_is_spoken_in_the_new_session() -> None:
    run = run_schedule(stock_and_map(), MIXED_RESEED)
    assert run.observed.fired == list(MIXED_RESEED) and run.broken == []


def test_with_that_batch_left_to_the_caller_the_silence_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    carry = LiveRecords._uncontinued_batches

    def left_to_the_caller(self: LiveRecords) -> list[str]:   # the batch of both not carried, as before
        notes = carry(self)
        self._gated, self._client_carried, self._asks_owed = [], {}, 0
        return notes

    monkeypatch.setattr(LiveRecords, "_uncontinued_batches", left_to_the_caller)
    run = run_schedule(stock_and_map(), MIXED_RESEED)
    assert [name for name, _ in run.broken] == ["spoke_after_tools"]
    assert "check_stock" in run.broken[0][1]
