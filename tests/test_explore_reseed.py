"""The explorer holds a Responses backend call that a dropped GPT-Live session had not spoken of to
a follow-up in the session that carries it on (`relay serve --live-reseed`): the new session
continues its batch (relay/engine/delegation_records.py), and with that undone `spoke_after_tools`
names the call, whether its answer went up before the drop (its continuation lost with the
connection) or in the new session (its handler still running at the drop: told by a note, which
names no call the timeline can read)."""

from __future__ import annotations

import pytest

from relay.engine.delegation_records import LiveRecords
from relay.offline.explore import run_schedule
from relay.offline.explore_session import Perturbation
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
