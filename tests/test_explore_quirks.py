"""The explorer's perturbations of the connection and the provider's server (issue 48:
relay/offline/explore_quirks.py): each applies where its fact does, lands where it says, does what
it says to the relay, and the invariants that read it catch a relay that gets it wrong; a real fix
of the relay's, undone, is found and shrunk."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.dialects import openai_codec as wire
from relay.engine.calls import CallState
from relay.engine.core import SessionEngine
from relay.engine.hiding import ClientView
from relay.mock.quirks import quirks_of
from relay.offline.explore import REPLAY_EVERY, boundaries, explore, replayable, replays_same, run_schedule
from relay.offline.explore_input import from_script
from relay.offline.explore_outage import away_for
from relay.offline.explore_quirks import KINDS, describe
from relay.offline.explore_session import Conversation, Perturbation
from relay.offline.replaying import json_object
from relay.recording.format import RELAY_TO_CLIENT, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY
from relay.testing import Script, Turn, call
from relay.tools import Scheduling, tool
from relay.tools.mcp_config import McpServerConfig
from relay.tools.mcp_tools import McpToolHandler, McpToolInfo, mcp_spec
from relay.tools.sources import tool_registry

LOOKUP = Script(Turn(say="Let me look.", calls=[call("lookup", order="A1")]), Turn(say="It shipped."))


@tool
async def lookup(order: str) -> str:
    """Look an order up (it takes five provider events' time)."""
    await asyncio.sleep(0.05)
    return f"order {order}: shipped"


def conversation(dialect: str = "openai", tools: Any = (lookup,), script: Script = LOOKUP) -> Conversation:
    return from_script(script, tool_registry(list(tools)), dialect=dialect, lines=("Where is A1?",))


def demo_conversation(dialect: str) -> Conversation:
    return Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect(dialect)


def space_of(conv: Conversation) -> list[Perturbation]:
    base = run_schedule(conv, ())
    assert base.broken == [], base.broken
    return boundaries(conv, base.observed, {entry.call_id: entry.name for entry in base.session.engine.ledger})


def kinds(space: list[Perturbation]) -> set[str]:
    return {p.kind for p in space if p.kind in KINDS}


def test_each_kind_applies_where_its_fact_does() -> None:
    # the sideband's reconnect and the session's expiry on the OpenAI family; goAway on Gemini
    assert kinds(space_of(conversation("openai"))) == {"reconnect", "server_cancel", "late_arguments", "expiry"}
    assert kinds(space_of(conversation("gemini"))) == {"server_cancel", "end_first", "no_cancellation", "goes_away"}
    # Voice Live has no sideband (Dialect.call_sideband): no reconnect path to explore
    assert "reconnect" not in kinds(space_of(conversation("voicelive")))
    # a provider whose calls come only in response.done (xAI, as reported): no late arguments
    assert "late_arguments" not in kinds(space_of(in_done()))
    # the dropped call of the report is a BLOCKING one: a NON_BLOCKING tool's call is not dropped
    background = dataclasses.replace(tool_registry([lookup]).get("lookup"), scheduling=Scheduling.INTERRUPT)
    assert "no_cancellation" not in kinds(space_of(conversation("gemini", tools=(background,))))
    for kind in KINDS.values():
        assert kind.fact and kind.anchors


@pytest.mark.parametrize("dialect", ["openai", "gemini"])
def test_every_new_perturbation_lands_and_the_relay_keeps_its_word(dialect: str) -> None:
    conv = conversation(dialect)
    mine = [p for p in space_of(conv) if p.kind in KINDS]
    assert mine
    for single in mine:
        run = run_schedule(conv, (single,))
        assert single in run.observed.fired, describe(single)
        assert run.broken == [], (describe(single), run.broken)


def test_a_server_cancelled_call_never_runs_and_a_late_one_neither() -> None:
    conv = conversation()
    for kind in ("server_cancel", "late_arguments"):
        run = run_schedule(conv, (Perturbation(kind, 1, "announced"),), keep=True)
        try:
            entry = next(iter(run.session.engine.ledger))
            assert entry.state == CallState.SKIPPED and run.observed.starts == {}, kind
            assert not any(f.direction == RELAY_TO_UPSTREAM and entry.call_id in (f.raw or "")
                           for f in run.session.frames), kind
            statuses = [wire.event_of(json_object(f.raw) or {}) for f in run.session.frames
                        if f.direction == UPSTREAM_TO_RELAY]
            done = [event for event in statuses if isinstance(event, wire.ResponseDone)]
            assert done[0].response["status"] == "cancelled"
            if kind == "late_arguments":   # the call's item came after its response's end, completed
                late = [event for event in statuses[statuses.index(done[0]):]
                        if isinstance(event, wire.OutputItemDone)]
                assert late and late[0].item["status"] == "completed"
        finally:
            run.session.close()


@pytest.mark.parametrize("schedule", [
    # the demo's first response makes two calls; the server cancels it while the first runs, and
    # the second's frames, written but still in flight, never reach the relay: the relay's second
    # call is the one the model makes again (numbered as the server wrote them, `duplicate 2`
    # named the withdrawn call and never fired)
    (Perturbation("server_cancel", 1), Perturbation("duplicate", 2)),
    # two reconnects: the relay learns two calls back by their items (`conversation.item.retrieve`),
    # whose frames never reached it; they are in its call book all the same (numbered as
    # delivered, the relay's 10th call was the 8th, and `duplicate 10` named one that never came)
    (Perturbation("reconnect", 1, "announced", 1), Perturbation("reconnect", 2, "announced", 1),
     Perturbation("duplicate", 10)),
])
def test_a_duplicate_numbers_the_calls_as_the_relays_call_book_does(schedule: tuple[Perturbation, ...]) -> None:
    run = run_schedule(demo_conversation("openai"), schedule, keep=True)
    try:
        assert set(run.observed.fired) == set(schedule) and run.broken == []
        doubled = run.observed.calls[schedule[-1].call - 1]
        completes = [f for f in run.session.frames if f.direction == UPSTREAM_TO_RELAY and f.raw
                     and isinstance(event := wire.event_of(json_object(f.raw) or {}), wire.OutputItemDone)
                     and (event.item or {}).get("call_id") == doubled]
        assert len(completes) == 2 and completes[0].raw == completes[1].raw
        assert run.observed.starts[doubled] == 1
    finally:
        run.session.close()


@pytest.mark.parametrize("attempt", [1, 6])
def test_a_reconnect_holds_the_output_until_the_connection_is_back(attempt: int) -> None:
    run = run_schedule(conversation(), (Perturbation("reconnect", 1, "running", attempt),), keep=True)
    try:
        assert run.broken == []
        marks = {text: t for _, t, kind, text in run.session.marks if kind == "fault"}
        back = marks["the relay reconnected"]
        assert back == pytest.approx(marks["the upstream connection dropped; the relay reconnects"] + away_for(attempt))
        entry = next(iter(run.session.engine.ledger))
        output = next(f for f in run.session.frames if f.direction == RELAY_TO_UPSTREAM
                      and entry.call_id in (f.raw or "") and "function_call_output" in (f.raw or ""))
        assert output.t >= back and entry.state == CallState.ANSWERED
    finally:
        run.session.close()


def in_done(dialect: str = "xai") -> Conversation:
    """A provider whose calls come only in `response.done` (xAI, as reported): a call's handler
    starts once its response has ended, so a reconnect while it runs loses nothing it waits for."""
    conv = conversation(dialect)
    conv.quirks = dataclasses.replace(quirks_of(dialect), calls="in_done")
    return conv


def test_a_relay_that_sends_while_away_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine's disconnect undone (it believes the connection is there): its output goes up
    into the void, and `nothing_sent_while_away` says so."""
    assert explore(in_done(), budget=40, seed=2, replay_check=False).ok
    monkeypatch.setattr(SessionEngine, "_on_disconnect", lambda self: None)
    result = explore(in_done(), budget=40, seed=2, replay_check=False)
    finding = next(f for f in result.findings if f.invariant == "nothing_sent_while_away")
    assert [p.kind for p in finding.schedule] == ["reconnect"]


def test_go_away_and_expiry_end_the_session() -> None:
    """goAway leaves a second: the call (0.05 s) is answered in it; an expiry closes at once, the
    call abandoned."""
    for dialect, kind, state in (("gemini", "goes_away", CallState.ANSWERED), ("openai", "expiry", CallState.ABANDONED)):
        run = run_schedule(conversation(dialect), (Perturbation(kind, 1, "running"),), keep=True)
        try:
            assert run.broken == [] and run.session.closed, kind
            entry = next(iter(run.session.engine.ledger))
            assert entry.state == state, kind
            to_client = " ".join((f.raw or (f.binary or b"").decode()) for f in run.session.frames
                                 if f.direction == RELAY_TO_CLIENT)
            assert ("goAway" if kind == "goes_away" else "session_expired") in to_client, kind
        finally:
            run.session.close()


class _StockServer:
    """An MCP server's connection, in process: answers `check_stock`."""

    name = "stock"

    async def call(self, tool: str, arguments: dict[str, Any], *, idempotency_key: str | None = None) -> Any:
        text = SimpleNamespace(type="text", text=f"12 of {arguments.get('item')} in stock")
        return SimpleNamespace(content=[text], is_error=False, structured_content=None)


def test_an_mcp_server_dying_mid_call_is_an_error_output_the_model_hears() -> None:
    spec = mcp_spec(McpServerConfig(name="stock", command=("stock-server",)),
                    McpToolInfo("check_stock", "How many of an item are in stock.",
                                {"type": "object", "properties": {"item": {"type": "string"}}}),
                    McpToolHandler(_StockServer(), "check_stock"))
    script = Script(Turn(say="Checking.", calls=[call("check_stock", item="A1")]), Turn(say="Done."))
    conv = conversation(tools=[spec], script=script)
    deaths = [p for p in space_of(conv) if p.kind == "mcp_dies"]
    assert deaths == [Perturbation("mcp_dies", 1, "running")]
    assert "mcp_dies" not in kinds(space_of(conversation()))   # a plain @tool has no server to die
    run = run_schedule(conv, tuple(deaths), keep=True)
    try:
        assert run.broken == []
        entry = next(iter(run.session.engine.ledger))
        assert entry.is_error and "MCP server stock was lost during the call" in (entry.output or "")
    finally:
        run.session.close()


@tool
def check_stock(item: str) -> str:
    """How many of an item are in stock."""
    return f"12 of {item} in stock"


def show_map(city: str) -> str:
    """Show a city on the caller's screen (the caller's own tool)."""
    return f"showing {city}"


def test_a_reverted_relay_fix_is_found_and_shrunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """4d6d8b0 ("Follow up outputs that land after a create released at the hold limit") undone:
    a response with the caller's call and a relay call; the caller answers its own and asks; the
    relay's tool runs past the hold limit, the held create goes up without its output, and the
    output landing later got no follow-up. The explorer finds it with one perturbation."""
    script = Script(Turn(say="Let me look.", calls=[call("check_stock", item="A1"), call("show_map", city="Paris")]),
                    Turn(say="Here it is."))
    conv = Conversation("stock", script.mock_script(), ("Is A1 in stock? Show me Paris.",),
                        tool_registry([check_stock]), client_tools=(show_map,), turns=script.turns)
    assert explore(conv, budget=60, seed=1, replay_check=False).ok
    monkeypatch.setattr(ClientView, "_asked_before_outputs", lambda self: None)   # the fix, undone
    result = explore(conv, budget=60, seed=1, replay_check=False)
    finding = next(f for f in result.findings if f.invariant == "spoke_after_tools")
    assert len(finding.schedule) == 1
    assert finding.schedule[0].kind in ("past_timeout", "hangs") and finding.schedule[0].call == 1


def test_replays_same_is_checked_on_a_named_share_of_the_schedules() -> None:
    """`replays_same` on the scripted run and every REPLAY_EVERY-th schedule a recording can carry
    (a replay runs the tools on the real clock: every schedule would cost hours)."""
    assert not replayable((Perturbation("reconnect", 1, "running", 1),))
    assert not replayable((Perturbation("barge_in", 1), Perturbation("raises", 1)))
    assert replayable((Perturbation("finish", 1, step=2), Perturbation("duplicate", 1)))
    assert replayable((Perturbation("barge_in", 1),), "gemini")
    assert replayable((Perturbation("server_cancel", 1),), "gemini")
    assert replayable((Perturbation("drop", 1),)) and replayable((Perturbation("drop", 1),), "gemini")
    result = explore(conversation("gemini"), budget=3 * REPLAY_EVERY, seed=5)
    assert result.ok, result.report()
    assert 2 <= result.replayed <= 4 and result.held["replays_same"] == result.replayed
    assert f"every {REPLAY_EVERY}th replayable schedule" in result.report()


@pytest.mark.parametrize("dialect", ["openai", "azure", "foundry", "xai", "voicelive", "gemini"])
def test_the_demo_holds_under_every_new_perturbation_on_every_dialect(dialect: str) -> None:
    """CI's exploration of the demo's conversation under each single perturbation of this kind."""
    conv = demo_conversation(dialect)
    mine = [p for p in space_of(conv) if p.kind in KINDS]
    assert mine
    for single in mine:
        run = run_schedule(conv, (single,))
        assert single in run.observed.fired and run.broken == [], (describe(single), run.broken)


@pytest.mark.parametrize("dialect, gap", [("openai", Perturbation("server_cancel", 4, "running")),
                                          ("xai", Perturbation("server_cancel", 2, "announced")),
                                          ("voicelive", Perturbation("barge_in", 2, "running")),
                                          ("openai", Perturbation("late_arguments", 2, "announced"))])
def test_the_replay_gaps_the_check_found_are_closed(dialect: str, gap: Perturbation) -> None:
    """`replays_same` found these on the demo: an interruption that landed while a relay call ran
    replayed with the handler's finish elsewhere. The recording now says where each handler
    finished (its `handler_finished` lines), the replay lands it there, and NOT_REPLAYABLE no
    longer names them (tests/test_replay_finishes.py)."""
    from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script

    conv = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect(dialect)
    assert replayable((gap,), "openai")
    assert replays_same(conv, (gap,), {}, None) is None
