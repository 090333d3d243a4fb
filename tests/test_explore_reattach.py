"""The explorer's `reconnect` on GPT-Live (relay/offline/explore_live.py, relay/offline/explore_outage.py):
the sideband drops at each anchor of each call and the relay re-attaches to the same session at
its first attempt or its last. Each schedule here broke an invariant before the relay's fix it
names (tests/live/test_live_reattach.py holds the fixes, each failing with its change undone)."""

from __future__ import annotations

import pytest

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.dialects import live
from relay.engine.backend_calls import ResponsesDelegation
from relay.offline.events import CALL
from relay.offline.explore import _compatible, boundaries, run_schedule
from relay.offline.explore_input import from_file
from relay.offline.explore_live import ANCHORS, REATTACH, describe
from relay.offline.explore_outage import RECONNECT_ATTEMPTS, away_for
from relay.offline.explore_session import Conversation, Perturbation
from relay.tools.sources import tool_registry
from tests.support.paths import REPO
from tests.test_explore_shapes import chained

EXAMPLES = REPO / "docs" / "examples" / "testing"
DROPPED = "the upstream connection dropped; the relay reconnects"
BACK = "the relay reconnected"


def demo(dialect: str = "live") -> Conversation:
    return Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect(dialect)


def concierge() -> Conversation:
    return from_file(EXAMPLES / "concierge.script.json", tool_registry([str(EXAMPLES / "concierge.py")]))


def marks(session: object) -> dict[str, float]:
    return {text: t for _, t, kind, text in session.marks if kind == "fault"}   # type: ignore[attr-defined]


def test_the_sideband_drops_at_every_anchor_of_every_call_at_both_attempts() -> None:
    conversation = demo()
    base = run_schedule(conversation, ())
    found = {p for p in boundaries(conversation, base.observed) if p.kind == REATTACH}
    assert found == {Perturbation(REATTACH, number, anchor, attempt) for number in range(1, 6)
                     for anchor in ANCHORS for attempt in RECONNECT_ATTEMPTS}
    assert describe(Perturbation(REATTACH, 2, "answered", 6)) == (
        "call 2: the sideband drops before its answer is placed; the relay re-attaches to the same "
        "session 12.6 s later (attempt 6)")
    assert not _compatible((Perturbation(REATTACH, 1, "running", 1), Perturbation("reseed", 2, "running")))


def test_a_response_whose_end_the_drop_lost_still_gets_its_answers_and_the_lost_call_is_owed_nothing() -> None:
    """The demo's first backend response makes two calls; the sideband drops once the first is
    made: the second call and the response's end are lost. Before the fix the first call was
    never answered (its output waited for that end); now it is answered once at the return. The
    second call the relay never saw: it owes it nothing, and the batch it holds open strands the
    session's follow-ups (GPT-Live refuses a partial batch), which the explorer does not hold
    against the relay."""
    run = run_schedule(demo(), (Perturbation(REATTACH, 1, "running", 1),), keep=True)
    try:
        session = run.session
        assert run.broken == []
        times = marks(session)
        assert times[BACK] - times[DROPPED] == away_for(1)
        first, second = session.observed.calls[0], session.unseen_calls()
        assert len(second) == 1 and first not in second
        assert session.strands_follow_ups() == min(e.t for e in session.timeline.of(CALL) if e.call_id in second)
        outputs = [f for f in session.frames if f.direction == "relay>upstream" and first in (f.raw or "")
                   and '"function_call_output"' in (f.raw or "")]
        assert len(outputs) == 1 and outputs[0].t >= times[BACK]
        assert session.sent_while_away == []
    finally:
        session.close()


def test_a_follow_up_the_relay_never_asked_for_still_counts_when_a_lost_call_strands_the_batch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What the stranded session is excused is narrow: a follow-up the relay asked for and the
    server refused. With the relay's creates withheld, the same schedule breaks `spoke_after_tools`."""
    monkeypatch.setattr(ResponsesDelegation, "_send_create", lambda self, event: None)
    run = run_schedule(demo(), (Perturbation(REATTACH, 1, "running", 1),), keep=True)
    try:
        assert run.session.strands_follow_ups() is not None
        assert "spoke_after_tools" in [name for name, _ in run.broken]
    finally:
        run.session.close()


CHAINED_AWAY = (Perturbation(REATTACH, 1, "running", 6), Perturbation(REATTACH, 1, "answered", 1))
"""The sideband drops while call 1 runs (back 12.6 s later, when its answer goes up at once) and
again as that answer is placed: the follow-up the relay asked for makes call 2 while it is away."""


def test_a_follow_up_whose_call_the_drop_lost_is_silent_and_not_held_against_the_relay() -> None:
    """The follow-up's words wait for its call's output, and the relay never saw the call: the
    silence after call 1's answer is the documented limit (docs/gpt-live.md, Re-attach), which the
    explorer reported as `spoke_after_tools` before it knew the case."""
    run = run_schedule(chained("live"), CHAINED_AWAY, keep=True)
    try:
        session = run.session
        assert set(CHAINED_AWAY) <= set(run.observed.fired) and run.broken == []
        (lost,) = session.unseen_calls()
        (follow_up,) = [e for e in session.timeline.of(CALL) if e.call_id == lost]
        asked = [e for e in session.timeline.events if e.kind == "response" and e.response_id == follow_up.response_id]
        assert asked and asked[0].by == "relay follow-up"
    finally:
        session.close()


def test_without_the_follow_up_the_same_drops_break_spoke_after_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ResponsesDelegation, "_send_create", lambda self, event: None)
    run = run_schedule(chained("live"), CHAINED_AWAY, keep=True)
    try:
        assert "spoke_after_tools" in [name for name, _ in run.broken]
    finally:
        run.session.close()


def test_a_drop_with_nothing_lost_strands_nothing() -> None:
    run = run_schedule(demo(), (Perturbation(REATTACH, 4, "answered", 6),), keep=True)
    try:
        assert run.broken == [] and run.session.unseen_calls() == set()
        assert run.session.strands_follow_ups() is None
    finally:
        run.session.close()


def test_a_delegates_filler_due_while_the_sideband_is_away_is_said_on_its_return() -> None:
    """Client delegation: the sideband drops while the delegate runs and comes back 12.6 s later.
    Before the fix its filler went up while the sideband was away (`nothing_sent_while_away`) and
    was never placed (`appends_placed`); now it goes up once the sideband is back."""
    run = run_schedule(concierge(), (Perturbation(REATTACH, 1, "running", 6),), keep=True)
    try:
        session = run.session
        assert run.broken == []
        assert session.sent_while_away == []
        back = marks(session)[BACK]
        commentary = live.CommentaryAppend.__struct_config__.tag
        fillers = [f for f in session.frames if f.direction == "relay>upstream" and f'"{commentary}"' in (f.raw or "")]
        assert fillers and all(f.t >= back for f in fillers)
    finally:
        session.close()


def test_while_away_the_caller_is_still_heard_and_what_the_server_says_is_lost() -> None:
    """The caller's audio reaches the server by the call's own path while the sideband is away:
    the session's clock moves on, and the server's frames meanwhile never reach the relay."""
    run = run_schedule(demo(), (Perturbation(REATTACH, 5, "running", 6),), keep=True)
    try:
        session = run.session
        times = marks(session)
        crossed = [f for f in session.frames if f.direction == "upstream>relay"
                   and times[DROPPED] < f.t < times[BACK]]
        assert crossed == []
        assert session._lost and all(times[DROPPED] <= frame.t < times[BACK] for _, frame in session._lost)
        assert run.broken == []
    finally:
        session.close()
