"""The caller's own tools under `relay explore`: each of the caller's calls answered late
(`client_late`) or spoken over before it answers (`barge_in_client`), and a caller who asks for
its own tool while a relay call runs. What the explorer found there (relay/engine/client_asks.py;
the invariants' scope: relay/offline/expect.py, explore_checks.py) stays found: each test fails
with its fix undone."""

from __future__ import annotations

import pytest

from relay.engine.client_asks import ClientAsks
from relay.mock import MockScript, ToolCall
from relay.mock.script import Reply, Rule
from relay.offline.explore import boundaries, explore, run_schedule
from relay.offline.explore_session import CLIENT_DELAYS, Conversation, Perturbation
from relay.offline.harness import CallerFailed
from relay.recording.format import RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY
from relay.testing import Script, Turn, call
from relay.tools.sources import tool_registry
from tests.test_explore_shapes import check_stock, ran


def show_map(city: str) -> str:
    """Show a city on the caller's screen (the caller's own tool)."""
    return f"showing {city}"


def mixed(dialect: str) -> Conversation:
    """One turn calls the relay's check_stock and the caller's show_map."""
    script = Script(Turn(say="Let me look.", calls=[call("check_stock", item="A1"), call("show_map", city="Paris")]),
                    Turn(say="Here it is."))
    return Conversation("stock", script.mock_script(), ("Is A1 in stock? Show me Paris.",),
                        tool_registry([check_stock]), client_tools=(show_map,), turns=script.turns).with_dialect(dialect)


def client_first(dialect: str) -> Conversation:
    """The caller asks for its own show_map, and barges in asking for the relay's check_stock
    before it answers show_map (`barge_in_client`)."""
    rules = (Rule(match="paris", say="Showing it.", calls=(ToolCall(name="show_map", arguments={"city": "Paris"}),)),
             Rule(match="in stock", say="Let me look.", calls=(ToolCall(name="check_stock", arguments={"item": "A1"}),)))
    mock = MockScript(rules=rules, after_outputs=Reply(say="Here: {output}"))
    return Conversation("client first", mock, ("Show me Paris.",), tool_registry([check_stock]),
                        client_tools=(show_map,), barge_text="Is A1 in stock?").with_dialect(dialect)


def overlapping(dialect: str) -> Conversation:
    """The caller asks for the relay's check_stock, and barges in asking for its own show_map."""
    rules = (Rule(match="in stock", say="Let me look.", calls=(ToolCall(name="check_stock", arguments={"item": "A1"}),)),
             Rule(match="paris", say="Showing it.", calls=(ToolCall(name="show_map", arguments={"city": "Paris"}),)))
    mock = MockScript(rules=rules, after_outputs=Reply(say="Here: {output}"))
    return Conversation("overlap", mock, ("Is A1 in stock?",), tool_registry([check_stock]),
                        client_tools=(show_map,), barge_text="Show me Paris.").with_dialect(dialect)


@pytest.mark.parametrize("dialect", ["openai", "gemini", "live"])
def test_every_late_answer_of_the_callers_is_explored_and_every_invariant_holds(dialect: str) -> None:
    conversation = mixed(dialect)
    base = run_schedule(conversation, ())
    late = [p for p in boundaries(conversation, base.observed) if p.kind in ("client_late", "barge_in_client")]
    assert late == [*(Perturbation("client_late", 1, step=step) for step in range(len(CLIENT_DELAYS))),
                    Perturbation("barge_in_client", 1, "announced")]
    result = explore(conversation, budget=120, seed=5, replay_check=False)
    assert result.ok, result.report()
    assert result.covered == result.boundaries


def test_a_late_answer_is_sent_that_late_and_the_model_speaks_after_it() -> None:
    with ran(mixed("openai"), (Perturbation("client_late", 1, step=2),)) as run:
        assert run.broken == []
        timeline = run.session.timeline
        [client_output] = [e for e in timeline.outputs() if e.by == "client"]
        [relay_output] = [e for e in timeline.outputs() if e.by == "relay"]
        assert client_output.t - relay_output.t >= CLIENT_DELAYS[2] - 0.5
        assert any(e.kind == "spoken" and e.index > client_output.index for e in timeline)


@pytest.mark.parametrize("dialect", ["openai", "gemini", "live"])
def test_a_caller_asking_for_its_own_tool_while_the_relays_runs_holds_every_invariant(dialect: str) -> None:
    result = explore(overlapping(dialect), budget=300, seed=3, replay_check=False)
    assert result.ok, result.report()


def test_the_gpt_live_client_create_sent_while_the_relays_call_runs_is_found_with_the_hold_undone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ClientAsks, "_relay_at_work", lambda self: False)   # the fix, undone
    result = explore(overlapping("live"), budget=300, seed=3, replay_check=False)
    finding = next(f for f in result.findings if f.invariant == "client_never_sees_relay_call")
    assert len(finding.schedule) <= 2 and any(p.kind == "barge_in" for p in finding.schedule)


def test_a_callers_tool_that_raises_fails_the_step_with_its_error() -> None:
    def broken_map(city: str) -> str:
        """Show a city on the caller's screen (the caller's own tool)."""
        raise KeyError(city)

    broken_map.__name__ = "show_map"
    script = Script(Turn(calls=[call("show_map", city="Paris")]))
    with script.start([check_stock], client_tools=[broken_map]) as session:
        with pytest.raises(CallerFailed, match="KeyError: 'Paris'"):
            session.user("Show me Paris.")


def test_a_callers_answer_crossing_a_gemini_cancellation_is_not_the_relays() -> None:
    """The caller answers its own call after the server's `interrupted`, and the cancellation
    names it: `cancelled_not_answered` holds the relay to its own answers."""
    schedule = (Perturbation("client_late", 1, step=0), Perturbation("end_first", 1, "running"),
                Perturbation("goes_away", 1, "running"))
    with ran(mixed("gemini"), schedule) as run:
        [client_output] = [e for e in run.session.timeline.outputs() if e.by == "client"]
        upstream = [(f.line_no, f.raw or (f.binary or b"").decode()) for f in run.session.frames
                    if f.direction in (RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY)]
        answered = next(n for n, raw in upstream if "toolResponse" in raw and client_output.call_id in raw)
        assert any(n > answered and "toolCallCancellation" in raw and client_output.call_id in raw for n, raw in upstream)
        assert run.broken == []


@pytest.mark.parametrize("dialect", ["openai", "gemini", "live"])
def test_a_caller_asking_for_the_relays_tool_before_answering_its_own_holds_every_invariant(dialect: str) -> None:
    result = explore(client_first(dialect), budget=100, seed=3, replay_check=False)
    assert result.ok, result.report()
    assert result.covered == result.boundaries


def test_the_relays_gpt_live_create_sent_before_the_callers_output_is_found_with_the_wait_undone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The relay's batch continued while the caller's call of another delegation was unanswered:
    a partial batch, refused (relay/engine/client_asks.py, `_client_to_ask`)."""
    monkeypatch.setattr(ClientAsks, "_client_to_ask", lambda self: False)   # the fix, undone
    result = explore(client_first("live"), budget=100, seed=3, replay_check=False)
    finding = next(f for f in result.findings if f.invariant == "appends_placed")
    assert len(finding.schedule) <= 2 and any(p.kind == "barge_in_client" for p in finding.schedule)
