"""The explorer on GPT-Live (issue 48, relay/offline/explore_live.py): a scripted Responses
delegation conversation explored like the other wires' (barge-ins, handler orders and behaviours,
the call delivered twice, the connection dropping, the session expiring), the invariants held,
and a relay that runs a call delivered twice caught and shrunk to that one perturbation."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from relay.cli import main
from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.engine import StartHandler
from relay.engine.backend_calls import ResponsesDelegation
from relay.engine.calls import CallState
from relay.offline.explore import boundaries, explore, run_schedule
from relay.offline.explore_input import from_script
from relay.offline.explore_live import ANCHORS, SESSION_KINDS
from relay.offline.explore_session import Conversation, Perturbation
from relay.testing import Script, Turn, call
from relay.tools import tool
from relay.tools.sources import tool_registry

LOOKUP = Script(Turn(say="Let me look.", calls=[call("lookup", order="A1")]), Turn(say="It shipped."))
RUNS: list[str] = []


@tool
async def lookup(order: str) -> str:
    """Look an order up (it takes a few provider events' time)."""
    RUNS.append(order)
    await asyncio.sleep(0.05)
    return f"order {order}: shipped"


def one_call() -> Conversation:
    return from_script(LOOKUP, tool_registry([lookup]), dialect="live", lines=("Where is A1?",))


def test_every_perturbation_of_a_call_lands_and_the_relay_keeps_its_word() -> None:
    conv = one_call()
    base = run_schedule(conv, ())
    assert base.broken == [] and len(base.observed.calls) == 1
    space = boundaries(conv, base.observed)
    assert {p.anchor for p in space if p.kind == "barge_in"} == set(ANCHORS)
    assert {p.kind for p in space} >= {"finish", "past_timeout", "raises", "hangs", "answers_twice", "duplicate",
                                       "drop", *SESSION_KINDS}
    assert not {"done_first", "call_parts", "server_cancel", "goes_away"} & {p.kind for p in space}
    assert "reconnect" in {p.kind for p in space}
    for single in space:
        run = run_schedule(conv, (single,))
        assert single in run.observed.fired, single
        assert run.broken == [], (single, run.broken)


def test_a_call_delivered_twice_runs_once_and_an_expired_session_owes_nothing() -> None:
    RUNS.clear()
    twice = run_schedule(one_call(), (Perturbation("duplicate", 1),), keep=True)
    try:
        assert twice.broken == [] and RUNS == ["A1"]
        assert [entry.state for entry in twice.session.engine.ledger] == [CallState.ANSWERED]
    finally:
        twice.session.close()
    expired = run_schedule(one_call(), (Perturbation("expired", 1),), keep=True)
    try:
        assert expired.broken == [] and expired.session.closed
        closed = [json.loads(f.raw) for f in expired.session.frames if f.raw and '"session.closed"' in f.raw]
        assert closed and closed[0]["reason"] == "expired"
    finally:
        expired.session.close()


def runs_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The relay's claim of each call_id (GPT-LIVE.md 5.7), undone: a call delivered again starts
    its handler again."""
    announce = ResponsesDelegation._announce

    def again(self: Any, item: dict[str, Any], key: str | None) -> Any:
        existing = self.ledger.get(item.get("call_id"))
        entry = announce(self, item, key)
        if existing is not None and existing.relay_owned:
            tool_ = self.tools.get(existing.name)
            self.ctx.emit(StartHandler(existing.call_id, tool_, tool_.parse_arguments(existing.arguments)))
        return entry

    monkeypatch.setattr(ResponsesDelegation, "_announce", again)


def test_a_relay_that_runs_a_call_delivered_twice_is_found_and_shrunk(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Any) -> None:
    runs_again(monkeypatch)
    result = explore(one_call(), budget=60, seed=1, out=tmp_path, replay_check=False)
    finding = next(f for f in result.findings if f.invariant == "handler_once")
    assert finding.schedule == (Perturbation("duplicate", 1),)
    assert finding.recording is not None and finding.recording.exists()


def test_the_demo_holds_every_invariant_on_gpt_live() -> None:
    """CI's exploration of our own scripted conversation on GPT-Live (a fixed seed and budget)."""
    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect("live")
    result = explore(conversation, budget=40, seed=48, replay_check=False)
    assert result.ok, result.report()
    assert result.tried == 40 and result.distinct > 1


def test_the_command_explores_the_demo_on_gpt_live(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["explore", "demo", "--dialect", "live", "--budget", "6", "--seed", "2", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert status == 0, result
    assert result["ok"] and result["tried"] == 6 and result["held"]["replays_same"] == 1
