"""The explorer on GPT-Live in client delegation (issue 48, relay/offline/explore_live.py): the
concierge example (docs/examples/testing/concierge.py, a `@delegate` answering two delegations
with appends) explored at every placement that applies, the delegation invariants held, and each
of them caught when a relay change breaks it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relay.cli import main
from relay.dialects import live
from relay.engine import StartHandler
from relay.engine import delegations as live_engine
from relay.engine.appends import answer_appends
from relay.engine.calls import CallState
from relay.engine.delegations import LiveEngine
from relay.offline.explore import boundaries, explore, run_schedule, shrink
from relay.offline.explore_input import from_file
from relay.offline.explore_live import ANCHORS, INTERRUPTION, LATE, POLICIES
from relay.offline.explore_session import Conversation, Perturbation
from relay.tools import Interruption
from relay.tools.sources import tool_registry
from tests.support.paths import REPO

EXAMPLES = REPO / "docs" / "examples" / "testing"
SCRIPT = EXAMPLES / "concierge.script.json"
TOOLS = str(EXAMPLES / "concierge.py")


def concierge() -> Conversation:
    return from_file(SCRIPT, tool_registry([TOOLS]))


def test_every_placement_of_a_client_delegation_lands_and_every_invariant_holds() -> None:
    conversation = concierge()
    base = run_schedule(conversation, ())
    assert base.broken == [] and len(base.observed.calls) == 2
    assert {anchor for _, anchor in base.observed.anchors} == set(ANCHORS), "running, appended, continuation"
    space = boundaries(conversation, base.observed)
    kinds = {p.kind for p in space}
    assert kinds >= {"barge_in", "finish", "past_filler", "past_timeout", "raises", "hangs", "answers_twice",
                     "duplicate", "drop", "expired", INTERRUPTION}
    assert Perturbation("barge_in", 1, "running", LATE) in space
    assert {Perturbation("expired", 2, "answered"), Perturbation("drop", 2, "answered")} <= set(space)
    for single in space:
        run = run_schedule(conversation, (single,))
        assert single in run.observed.fired, single
        assert run.broken == [], (single, run.broken)


def test_a_delegation_delivered_twice_is_answered_once_by_one_run_of_appends() -> None:
    run = run_schedule(concierge(), (Perturbation("duplicate", 1),), keep=True)
    try:
        session = run.session
        assert run.broken == [] and Perturbation("duplicate", 1) in run.observed.fired
        created = [f for f in session.frames if f.raw and live.DelegationCreated.__struct_config__.tag in f.raw
                   and f.direction == "upstream>relay"]
        assert len(created) == 3, "the first delegation came twice"
        assert list(run.observed.starts.values()) == [1, 1]
    finally:
        run.session.close()


def test_an_interrupted_delegate_under_cancel_answers_silently() -> None:
    """The caller speaks again past the delegation's words while the delegate runs: under `cancel`
    its answer is silent context (a thinking append), not spoken."""
    schedule = (Perturbation("barge_in", 1, "running", LATE), Perturbation(INTERRUPTION, 1, step=0))
    assert POLICIES[0] is Interruption.CANCEL
    run = run_schedule(concierge(), schedule, keep=True)
    try:
        entry = run.session.engine.ledger.get(run.observed.calls[0])
        assert run.broken == [] and entry is not None and entry.interrupted
        answer = [live.decode(f.raw) for f in run.session.frames if f.direction == "relay>upstream" and f.raw
                  and entry.call_id in f.raw and f.t > entry.started_at + 1.0]
        assert answer and all(isinstance(a, live.ThinkingAppend) for a in answer)
    finally:
        run.session.close()


def test_the_session_expiring_with_appends_pending_owes_nothing() -> None:
    run = run_schedule(concierge(), (Perturbation("expired", 1, "answered"),), keep=True)
    try:
        session = run.session
        assert run.broken == [] and session.closed
        refused = [json.loads(f.raw) for f in session.frames if f.raw and '"error"' in f.raw
                   and f.direction == "upstream>relay"]
        assert refused and {e["error"]["code"] for e in refused} == {"context_injection_incomplete"}
        assert [entry.state for entry in session.engine.ledger] == [CallState.ANSWERED]
    finally:
        session.close()


def runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The relay's claim of each delegation id (GPT-LIVE.md 5.7), undone: a delegation delivered
    again starts its delegate again."""
    taken = LiveEngine._UPSTREAM[live.DelegationCreated]

    def again(self: Any, event: live.DelegationCreated) -> Any:
        entry = self.ledger.get(event.delegation.id)
        if entry is not None and self.delegate is not None:
            self.ctx.emit(StartHandler(entry.call_id, self.delegate, {"delegation": None}))
        return taken(self, event)

    monkeypatch.setitem(LiveEngine._UPSTREAM, live.DelegationCreated, again)


def test_a_relay_that_runs_a_delegation_delivered_twice_is_found_and_shrunk(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    runs_again(monkeypatch)
    result = explore(concierge(), budget=40, seed=1, out=tmp_path, replay_check=False)
    finding = next(f for f in result.findings if f.invariant == "handler_once")
    assert finding.schedule == (Perturbation("duplicate", 1),)


def test_a_relay_that_speaks_an_interrupted_answer_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The silence of an interrupted delegation (`entry.speak`) ignored: its answer is spoken."""
    def spoken(output: str, **options: Any) -> Any:
        return answer_appends(output, **{**options, "speak": True})

    monkeypatch.setattr(live_engine, "answer_appends", spoken)
    conversation = concierge()
    cancel = (Perturbation("barge_in", 1, "running", LATE), Perturbation(INTERRUPTION, 1, step=0))
    assert [name for name, _ in run_schedule(conversation, cancel).broken] == ["interrupted_not_spoken"]
    wider = (*cancel, Perturbation("finish", 2, step=3))
    assert shrink(conversation, wider, "interrupted_not_spoken", {}, None) == tuple(sorted(cancel))


def test_a_relay_that_answers_a_delegation_twice_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer sent again once the server placed it: a second run of appends."""
    delivered = LiveEngine._delivered
    again: set[str] = set()

    def answers_again(self: Any, entries: list[Any]) -> None:
        delivered(self, entries)
        for entry in entries:
            if entry.call_id not in again:
                again.add(entry.call_id)
                self._send(live.ThinkingAppend(delegation_id=entry.call_id, content="again"))

    monkeypatch.setattr(LiveEngine, "_delivered", answers_again)
    broken = dict(run_schedule(concierge(), ()).broken)
    assert "delegation_answered_once" in broken and "2 runs of appends" in broken["delegation_answered_once"]


def test_a_relay_that_aims_an_append_at_an_unknown_delegation_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = LiveEngine._answer

    def elsewhere(self: Any, entry: Any, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, live.APPENDS) and isinstance(event.delegation_id, str):
                event.delegation_id = "item_unknown"
        answer(self, entry, events)

    monkeypatch.setattr(LiveEngine, "_answer", elsewhere)
    broken = dict(run_schedule(concierge(), ()).broken)
    assert "appends_placed" in broken and "invalid_value" in broken["appends_placed"]


def test_ci_explores_the_client_delegation_example_with_a_fixed_seed_and_budget() -> None:
    """CI's exploration of our own scripted conversation on GPT-Live in client delegation."""
    result = explore(concierge(), budget=60, seed=48, replay_check=False)
    assert result.ok, result.report()
    assert result.tried == 60 and result.distinct > 1


def test_the_command_explores_the_client_delegation_example(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["explore", str(SCRIPT), "--tools", TOOLS, "--budget", "5", "--seed", "2", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert status == 0, result
    assert result["ok"] and result["tried"] == 5 and result["conversation"] == "concierge.script.json (live)"


def test_a_dropped_connection_carried_on_in_a_new_session_answers_the_running_delegation_once() -> None:
    """`reseed` (`relay serve --live-reseed`): the connection drops while delegation 1's delegate
    runs; the relay's history-seeded `session.start` opens a new session, the delegate's answer
    goes to it once as a silent note (the dropped session's delegation id is not the new one's),
    and the conversation goes on."""
    run = run_schedule(concierge(), (Perturbation("reseed", 1, "running"),), keep=True)
    try:
        session = run.session
        assert run.broken == [] and not session.closed and session.reseeds
        starts = [live.decode(f.raw) for f in session.frames if f.direction == "relay>upstream" and f.raw
                  and live.SessionStart.__struct_config__.tag in f.raw]
        assert len(starts) == 2 and starts[1].session["input"], "the new session is seeded with the conversation"
        first = run.observed.calls[0]
        assert session.carried_calls() == {first} and run.observed.starts[first] == 1
        notes = [live.decode(f.raw) for f in session.frames if f.direction == "relay>upstream" and f.raw
                 and f.t > session.reseeds[0] and live.ThinkingAppend.__struct_config__.tag in f.raw]
        assert [n.delegation_id for n in notes][:1] == [None]
        assert [entry.state for entry in session.engine.ledger] == [CallState.ANSWERED] * 2
    finally:
        session.close()


@pytest.mark.parametrize("anchor", ["running", "answered"])
def test_a_responses_batch_carried_on_in_a_new_session_holds_every_invariant(anchor: str) -> None:
    """The demo's calls on GPT-Live (Responses delegation) with the session carried on: a backend
    response still open when the connection dropped ended with it (the timeline no longer reads
    the next one as a second response at once)."""
    from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script

    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect("live")
    for number in (1, 2):
        schedule = (Perturbation("reseed", number, anchor),)
        run = run_schedule(conversation, schedule)
        assert run.observed.fired == list(schedule) and run.broken == [], (schedule, run.broken)


def test_a_script_in_client_delegation_is_explored_through_relay_testing() -> None:
    from relay.testing import Script, Turn, call
    from relay.testing import explore as explore_script

    script = Script(Turn(say="Let me look.", calls=[call("concierge")]), Turn(say="Done."))
    result = explore_script(script, [TOOLS], dialect="live", delegation="client", lines=("Where is order Z9?",),
                            budget=12, seed=4)
    assert result.ok, result.report()
    assert result.tried == 12 and result.covered > 1
    with pytest.raises(Exception, match="delegation"):
        explore_script(script, [TOOLS], dialect="live", delegation="sideways", budget=1)


def test_an_answer_the_dropped_session_never_placed_is_said_in_the_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the explorer found (shrunk to this one perturbation): the connection drops between
    delegation 2's appends and their acknowledgement; the relay carried the session on with the
    answer told only as history, and the caller never heard it (`spoke_after_tools`). The relay
    now says it in the new session (a `delegation_id: null` commentary append), once."""
    schedule = (Perturbation("reseed", 2, "answered"),)
    run = run_schedule(concierge(), schedule, keep=True)
    try:
        session = run.session
        assert run.observed.fired == list(schedule) and run.broken == []
        second = [i for i, f in enumerate(session.frames) if f.direction == "relay>upstream" and f.raw
                  and live.SessionStart.__struct_config__.tag in f.raw][1]
        said = [live.decode(f.raw) for f in session.frames[second:] if f.direction == "relay>upstream" and f.raw
                and live.CommentaryAppend.__struct_config__.tag in f.raw]
        assert [(a.delegation_id, a.content) for a in said] == [(None, "Tell the caller that order Z9 is not on file.")]
        spoken = [e.text for e in session.timeline.of("spoken") if e.t >= session.reseeds[0]]
        assert any("Z9 is not on file" in (text or "") for text in spoken)
    finally:
        session.close()
    monkeypatch.setattr(LiveEngine, "_unplaced", lambda self, entry: None)
    assert [name for name, _ in run_schedule(concierge(), schedule).broken] == ["spoke_after_tools"]
