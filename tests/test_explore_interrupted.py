"""The explorer's Gemini Live after `interrupted`: a barge-in cuts the model off where it is, as
the service does (docs/gemini.md, "The model interrupted"). The explorer delivers a turn's frames
one at a time, so a barge-in often lands while the rest of the turn is on its way; that rest is
no longer delivered after `interrupted`, and the mock's own `turnComplete` ends the turn. A
barge-in with no words is a turn the model answers (the script's default reply).

Before, the model's remaining words arrived after `interrupted`. Once they stopped, the demo's
barge-in between search_flights' answer and the model's words about it broke `spoke_after_tools`
on 87 and 98 of 3,000 schedules (seeds 48 and 7): the caller's wordless turn was never answered,
which the service does not do. That was the explorer's, not the relay's (the relay answered; on
Gemini the model speaks by itself)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.engine.answer_hold import HeldAnswers
from relay.mock import MockScript, Reply, ToolCall
from relay.mock.faults import Faults
from relay.mock.gemini import GeminiMockSession
from relay.mock.quirks import Quirks
from relay.offline import explore_session
from relay.offline.explore import run_schedule, shrink
from relay.offline.explore_session import Conversation, Perturbation
from relay.recording.format import UPSTREAM_TO_RELAY
from relay.tools.sources import tool_registry

CUT_OFF = (Perturbation("barge_in", 5, "answered"),)
"""The caller barges in between search_flights' answer and the model's words about it."""
END_FIRST = (Perturbation("end_first", 2, "running"), Perturbation("finish", 1, "running", 2))
"""The caller barges in while call 2 runs, the interrupted turn's `turnComplete` comes before the
cancellation, and call 1's handler finishes between the two."""


def demo() -> Conversation:
    return Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect("gemini")


def upstream_messages(session: Any) -> list[dict[str, Any]]:
    return [json.loads(frame.binary if frame.binary is not None else frame.raw) for frame in session.frames
            if frame.direction == UPSTREAM_TO_RELAY and (frame.binary or frame.raw)]


def after_interrupted(session: Any) -> list[dict[str, Any]]:
    """The server's messages after its (only) `interrupted`."""
    messages = upstream_messages(session)
    marks = [i for i, message in enumerate(messages) if (message.get("serverContent") or {}).get("interrupted")]
    assert len(marks) == 1, marks
    return messages[marks[0] + 1:]


def test_a_barge_in_cuts_the_turn_off_and_the_model_answers_the_callers_turn() -> None:
    run = run_schedule(demo(), CUT_OFF, keep=True)
    try:
        assert CUT_OFF[0] in run.observed.fired
        assert run.broken == []
        after = after_interrupted(run.session)
        assert after[0] == {"serverContent": {"turnComplete": True}}, "interrupted > turn_complete, nothing between"
        reply = [m["serverContent"] for m in after[1:] if "serverContent" in m]
        assert reply and "generationComplete" in reply[-2] and "turnComplete" in reply[-1], "the answer to the caller"
        words = "".join(part["outputTranscription"]["text"] for part in reply if "outputTranscription" in part)
        assert words == demo_script().default.say, "the default reply, not the rest of the cut-off turn"
    finally:
        run.session.close()


def test_with_the_rest_of_the_turn_delivered_the_words_come_after_interrupted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The explorer's cut undone: the cut-off turn's words arrive after `interrupted` again."""
    monkeypatch.setattr(explore_session, "interrupted_in_flight", lambda paced: None)
    run = run_schedule(demo(), CUT_OFF, keep=True)
    try:
        after = after_interrupted(run.session)
        words = "".join((m.get("serverContent") or {}).get("outputTranscription", {}).get("text", "") for m in after)
        assert "Here is what I found" in words, words[:80]
    finally:
        run.session.close()


def test_an_unanswered_wordless_barge_in_left_the_answer_unspoken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The explorer's false finding: with the cut and no answer to the caller's wordless turn, the
    model never spoke after search_flights' answer (the relay had sent it)."""
    monkeypatch.setattr(GeminiMockSession, "answer_unheard", lambda self: [])
    run = run_schedule(demo(), CUT_OFF)
    assert [name for name, _ in run.broken] == ["spoke_after_tools"]
    assert "search_flights" in run.broken[0][1]


def mock_session(reply: Reply, quirks: Quirks | None = None, **declared: str) -> GeminiMockSession:
    session = GeminiMockSession(MockScript(default=reply), Faults(), quirks=quirks)
    tools = [{"functionDeclarations": [{"name": name, "behavior": behavior} for name, behavior in declared.items()]}]
    session.handle({"setup": {"model": "models/m", "tools": tools,
                              "generationConfig": {"responseModalities": ["TEXT"]}}}, 0)
    session.handle({"realtimeInput": {"text": "hello"}}, 0)
    return session


def said(actions: list[Any]) -> list[dict[str, Any]]:
    return [action.event for action in actions]


def test_the_mock_ends_the_turn_it_stops_with_turn_complete_after_the_cancellation() -> None:
    waiting = mock_session(Reply(calls=[ToolCall(name="slow", arguments={})]), slow="BLOCKING")
    (call,) = waiting.open_calls
    assert said(waiting.interrupt()) == [{"serverContent": {"interrupted": True}},
                                         {"toolCallCancellation": {"ids": [call.id]}},
                                         {"serverContent": {"turnComplete": True}}]
    spoken = mock_session(Reply(say="hi"))   # its turn complete, nothing open
    assert said(spoken.interrupt(generating=True)) == [{"serverContent": {"interrupted": True}},
                                                       {"serverContent": {"turnComplete": True}}]


def test_the_mock_says_nothing_at_a_barge_in_with_no_turn_open() -> None:
    """`interrupted` "indicates that a client message has interrupted current model generation",
    and a cancellation "occurs only in cases where the clients interrupt server turns"
    (google-genai's `LiveServerContent`, `LiveServerToolCallCancellation`): a barge-in with no turn
    open interrupts nothing, cancels nothing, and the caller's words get the model's reply."""
    spoken = mock_session(Reply(say="hi"))   # its turn complete, nothing open
    assert said(spoken.interrupt()) == []
    background = mock_session(Reply(calls=[ToolCall(name="later", arguments={})]), later="NON_BLOCKING")
    (call,) = background.open_calls   # its turn complete, the NON_BLOCKING call running
    assert said(background.interrupt()) == []
    reply = said(background.handle({"realtimeInput": {"text": "and the weather?"}}, 0))
    assert not any("interrupted" in json.dumps(message) or "toolCallCancellation" in message for message in reply)
    assert reply[-1] == {"serverContent": {"turnComplete": True}} and call.open, "answered; the call stays open"


def test_the_turns_end_before_the_cancellation_does_not_let_an_answer_cross_it() -> None:
    run = run_schedule(demo(), END_FIRST, keep=True)
    try:
        assert set(END_FIRST) <= set(run.observed.fired) and run.broken == []
        paris = run.session.engine.ledger.get(run.observed.calls[0])
        assert paris.state.value == "skipped" and run.session.model.mock.ignored == []
    finally:
        run.session.close()


def test_with_the_hold_ended_by_the_turns_end_the_crossing_is_named_and_shrunk(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fix undone (relay/engine/answer_hold.py): the interrupted turn's `turnComplete` ends the
    hold, and call 1's answer goes up between it and the cancellation."""
    monkeypatch.setattr(HeldAnswers, "turn_ended", lambda self: None)
    run = run_schedule(demo(), END_FIRST)
    assert [name for name, _ in run.broken] == ["cancelled_not_answered"]
    noisy = (*END_FIRST, Perturbation("duplicate", 3))
    assert shrink(demo(), noisy, "cancelled_not_answered", {}, None) == tuple(sorted(END_FIRST))


def test_a_mock_that_drops_blocking_calls_names_none_in_a_cancellation_and_ignores_their_answers() -> None:
    """`Quirks.drops_blocking`: a barge-in drops the BLOCKING call with no `toolCallCancellation`
    (a NON_BLOCKING one is still cancelled), the turn still ends, and an answer for the dropped
    call gets no reply."""
    both = Reply(calls=[ToolCall(name="slow", arguments={}), ToolCall(name="later", arguments={})])
    session = mock_session(both, Quirks(drops_blocking=True), slow="BLOCKING", later="NON_BLOCKING")
    slow, later = session.open_calls
    assert said(session.interrupt()) == [{"serverContent": {"interrupted": True}},
                                         {"toolCallCancellation": {"ids": [later.id]}},
                                         {"serverContent": {"turnComplete": True}}]
    answer = {"toolResponse": {"functionResponses": [{"id": slow.id, "name": "slow", "response": {"output": "x"}}]}}
    assert said(session.handle(answer, 0)) == []
    assert session.unheard == [slow.id] and slow.state == "dropped" and slow.answers == []
