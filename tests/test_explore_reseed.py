"""The explorer holds a Responses backend call that a dropped GPT-Live session had not spoken of to
a follow-up in the session that carries it on (`relay serve --live-reseed`): the new session
continues its batch (relay/engine/delegation_records.py), and with that undone `spoke_after_tools`
names the call, whether its answer went up before the drop (its continuation lost with the
connection) or in the new session (its handler still running at the drop: told by a note, which
names no call the timeline can read)."""

from __future__ import annotations

from typing import Any

import pytest

from relay.engine.delegation_records import LiveRecords
from relay.offline.explore import run_schedule
from relay.offline.explore_session import Conversation, Perturbation
from relay.tools.sources import tool_registry
from tests.live.test_live_mock import SCRIPT, get_time, get_weather
from tests.test_explore_live import one_call


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
