"""What the explorer found last stop and nobody verified: on Gemini Live, an answer crossing a
cancellation. The schedule (the demo: a barge-in while call 2 runs, call 1's handler finishing
two provider events later, call 3 delivered twice) had the relay send call 1's `toolResponse`
after the server's `interrupted` and before its `toolCallCancellation`. The mock then closed the
session with 1007, and no invariant fired: the explorer read a session its upstream closed as a
dropped connection.

Now the relay holds a turn's answers from `interrupted` until the next message decides them
(relay/engine/answer_hold.py), two invariants name what went unseen (`cancelled_not_answered`,
`upstream_accepted_every_send`), and the mock takes no notice of an answer for a call it
cancelled, as far as anyone reports the service does (docs/gemini.md)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.engine.calls import CallState
from relay.engine.answer_hold import HeldAnswers
from relay.mock.gemini import GeminiMockSession, GeminiProtocolError
from relay.offline.explore import explore, run_schedule, shrink
from relay.offline.explore_checks import SESSION_INVARIANTS, upstream_accepted_every_send
from relay.offline.explore_session import Conversation, Perturbation
from relay.offline.replay import replay
from relay.offline.replay_checks import CHECKED, builtin_broken
from relay.recording.format import RELAY_TO_UPSTREAM
from relay.tools.sources import tool_registry
from tests.test_explore import bank, refund, refunded_once  # noqa: F401   (the refund example, its bank a fixture)

CROSSING = (Perturbation("barge_in", 2, "running"), Perturbation("finish", 1, "running", 2), Perturbation("duplicate", 3))
SHRUNK = tuple(sorted(CROSSING[:2]))


def demo() -> Conversation:
    return Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect("gemini")


HOLD_BEGIN = HeldAnswers.begin


def undo_the_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fix undone: the engine never begins to hold its answers at `interrupted`."""
    monkeypatch.setattr(HeldAnswers, "begin", lambda self, now: None)


def answers_to(session: Any, call_id: str) -> list[int]:
    """The lines of the relay's frames upstream that answer `call_id`."""
    return [frame.line_no for frame in session.frames if frame.direction == RELAY_TO_UPSTREAM
            and frame.raw and "toolResponse" in frame.raw and call_id in frame.raw]


def test_the_crossing_the_explorer_found_now_holds_every_invariant() -> None:
    run = run_schedule(demo(), CROSSING, keep=True)
    try:
        assert set(CROSSING[:2]) <= set(run.observed.fired)
        assert run.broken == []
        session = run.session
        paris = session.engine.ledger.get(run.observed.calls[0])
        assert paris.state is CallState.SKIPPED, "resolved by the cancellation, owed nothing"
        assert answers_to(session, paris.call_id) == [], "its answer never went up"
        assert session.model.mock.ignored == [] and not session.closed
    finally:
        run.session.close()


def test_with_the_hold_undone_the_crossing_is_named_and_shrunk(monkeypatch: pytest.MonkeyPatch) -> None:
    undo_the_hold(monkeypatch)
    run = run_schedule(demo(), CROSSING, keep=True)
    try:
        assert [name for name, _ in run.broken] == ["cancelled_not_answered"]
        assert run.session.model.mock.ignored == [run.observed.calls[0]], "the mock took no notice of it"
    finally:
        run.session.close()
    assert shrink(demo(), CROSSING, "cancelled_not_answered", {}, None) == SHRUNK


def test_a_close_of_the_upstreams_own_is_a_violation_not_a_drop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Last stop's mock (1007 for any answer to a cancelled call) and the hold undone: the session
    the upstream closed is no longer read as a dropped connection."""
    undo_the_hold(monkeypatch)
    answered_call = GeminiMockSession._answered_call

    def refusing(self: GeminiMockSession, response: Any) -> Any:
        call = answered_call(self, response)
        if call is None:
            raise GeminiProtocolError("FunctionResponse for a cancelled function call.")
        return call

    monkeypatch.setattr(GeminiMockSession, "_answered_call", refusing)
    run = run_schedule(demo(), CROSSING)
    assert [name for name, _ in run.broken] == ["upstream_accepted_every_send"], "the cancellation never came"
    assert "(1007: FunctionResponse for a cancelled function call.)" in run.broken[0][1]
    monkeypatch.setattr(HeldAnswers, "begin", HOLD_BEGIN)   # the fix back, the refusing mock kept
    assert run_schedule(demo(), CROSSING).broken == [], "with the hold, that mock has nothing to refuse"


def test_an_ordinary_end_of_the_session_is_no_refusal() -> None:
    assert upstream_accepted_every_send(SimpleNamespace(upstream_closes=((1000, ""),))) is None  # type: ignore[arg-type]
    assert upstream_accepted_every_send(SimpleNamespace()) is None  # type: ignore[arg-type]
    told = upstream_accepted_every_send(SimpleNamespace(upstream_closes=((1011, "Internal error"),)))  # type: ignore[arg-type]
    assert told == "the upstream closed the session (1011: Internal error)"
    assert {"upstream_accepted_every_send", "cancelled_not_answered"} <= set(SESSION_INVARIANTS)
    assert "cancelled_not_answered" in CHECKED and "upstream_accepted_every_send" not in CHECKED


def test_a_replay_of_the_crossing_names_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """`relay replay` checks `cancelled_not_answered` (it reads frames only). The replay of the
    finding holds the recorded cancellation until the relay under test sends the answer the
    recording shows (the replay's gate, relay/offline/replay_play.py): the fixed relay sends it
    too, when its hold runs out, so that recording breaks the invariant against either relay."""
    undo_the_hold(monkeypatch)
    run = run_schedule(demo(), SHRUNK, keep=True)
    try:
        path = run.session.save(tmp_path)
    finally:
        run.session.close()
    assert [name for name, _ in builtin_broken(replay(path, [EXAMPLE_TOOLS]))] == ["cancelled_not_answered"]
    monkeypatch.undo()
    assert [name for name, _ in builtin_broken(replay(path, [EXAMPLE_TOOLS]))] == ["cancelled_not_answered"]


def test_a_gemini_barge_in_with_words_withdraws_the_turn_it_lands_in_not_the_next(
        bank: dict[str, list[str]]) -> None:  # noqa: F811
    """The caller's words of a barge-in reach the Gemini model after it withdrew the turn they land
    in. Said at once, they were answered first (a new turn, a new call), and the barge-in then
    withdrew that new call before the relay saw it: its cancellation reached the client under an id
    the relay then owned, and its answer went unheard. The mock's 1007 for that answer had made it
    look like a dropped connection. The refund example on Gemini, every schedule of its space, the
    grown perturbations' among them."""
    conversation = refund("refunds_fixed", bank).with_dialect("gemini")
    result = explore(conversation, budget=1500, seed=48, reset=bank.clear,
                     invariants={"refunded_once": refunded_once(bank)}, replay_check=False)
    assert result.ok, result.report()
    assert result.stopped == "space"
