"""`relay explore` (issue 48): the explorer runs a conversation under many schedules on virtual
time, checks the invariants on each, and hands back the smallest failing schedule as a recording
that `relay replay` reproduces; bad input is one line and exit 2."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import anyio
import pytest

from relay.cli import main
from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.offline.explore import NothingToExplore, boundaries, explore, run_schedule, schedules
from relay.offline.explore_input import from_file, from_recording
from relay.offline.explore_session import ANCHORS, Conversation, Perturbation
from relay.testing import Script, Turn, call
from relay.testing import explore as explore_script
from relay.tools import tool
from relay.tools.sources import tool_registry
from tests.support.paths import REPO, shared_dir
from tests.support.peers import record_session
from tests.support.tools import get_weather_data

EXAMPLES = REPO / "docs" / "examples" / "testing"
REFUND_SCRIPT = EXAMPLES / "refund.script.json"


@pytest.fixture
def bank() -> dict[str, list[str]]:
    """The refund example's payment provider (docs/examples/testing/bank.py), emptied."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import bank as module
    finally:
        sys.path.remove(str(EXAMPLES))
    module.BANK.clear()
    yield module.BANK
    module.BANK.clear()


def refund(tools: str, bank_module_bank: dict[str, list[str]]) -> Conversation:
    return from_file(REFUND_SCRIPT, tool_registry([str(EXAMPLES / f"{tools}.py")]))


def refunded_once(bank: dict[str, list[str]]):
    def check(session: object) -> str | None:
        twice = [order for order, paid in bank.items() if len(paid) > 1]
        return f"order {twice[0]} was refunded {len(bank[twice[0]])} times" if twice else None
    return check


def test_the_refund_that_pays_twice_is_found_shrunk_and_replayed(bank: dict[str, list[str]], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    conversation = refund("refunds", bank)
    result = explore(conversation, budget=60, seed=3, invariants={"refunded_once": refunded_once(bank)},
                     reset=bank.clear, out=tmp_path, tools_arg=str(EXAMPLES / "refunds.py"), replay_check=False)
    finding = next(f for f in result.findings if f.invariant == "refunded_once")
    # shrunk to one barge-in on call 1: before the call is complete (the call completes anyway and
    # the caller's repeated request makes a second, both refunds run) or while its handler runs
    # (cancelled after the money left, the model asked again calls again)
    assert finding.schedule in ((Perturbation("barge_in", 1, "announced"),), (Perturbation("barge_in", 1, "running"),))
    for anchor in ("announced", "running"):   # each breaks it alone, and nothing else breaks
        bank.clear()
        run = run_schedule(conversation, (Perturbation("barge_in", 1, anchor),),
                           {"refunded_once": refunded_once(bank)}, reset=bank.clear)
        assert [name for name, _message in run.broken] == ["refunded_once"], (anchor, run.broken)
    assert finding.recording is not None and finding.recording.exists() and finding.page.exists()
    assert finding.command == f"relay replay {finding.recording} --tools {EXAMPLES / 'refunds.py'}"
    # the recording reproduces it: the relay sends what it recorded, and the order is paid twice again
    bank.clear()
    status = main(["replay", str(finding.recording), "--tools", str(EXAMPLES / "refunds.py")])
    assert status == 0, capsys.readouterr().out
    assert len(bank["A1"]) == 2
    # the fixed tool passes every schedule the buggy one failed, and the rest
    fixed = explore(refund("refunds_fixed", bank), budget=60, seed=3, reset=bank.clear,
                    invariants={"refunded_once": refunded_once(bank)}, replay_check=False)
    assert fixed.ok, fixed.report()


def test_the_command_explores_a_script_and_says_what_held(bank: dict[str, list[str]],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["explore", str(REFUND_SCRIPT), "--tools", str(EXAMPLES / "refunds_fixed.py"), "--budget", "12",
                   "--seed", "1", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert status == 0, result
    assert result["ok"] and result["tried"] == 12 and result["boundaries"] > 12
    assert result["held"]["replays_same"] == 1
    assert set(result["held"]) >= {"answered_once", "handler_once", "nothing_owed", "cancelled_not_spoken"}


def test_the_demo_replays_to_the_same_outcome() -> None:
    """`replays_same` on the demo's conversation (it broke in this issue's first runs: the replay missed
    search_flights' filler and asked for the follow-up again every 15 s)."""
    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS]))
    result = explore(conversation, budget=1)
    assert result.ok, result.report()


@pytest.mark.parametrize("case", ["not_a_recording", "bad_script", "tools", "budget", "history", "no_call",
                                  "directory", "out_file"])
def test_bad_input_is_one_line_and_exit_2(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    foreign = tmp_path / "notes.jsonl"
    foreign.write_text('{"hello": 1}\n{"world": 2}\n')
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"lines": ["hi"], "script": {"rules": [{"say": "no match given"}]}}))
    broken = tmp_path / "broken_tools.py"
    broken.write_text("def broken(:\n    pass\n")
    unmatched = tmp_path / "unmatched.json"   # its one rule matches none of its lines: no call is ever made
    unmatched.write_text(json.dumps({"lines": ["Hello there."], "script": {"rules": [
        {"match": "refund order a1", "calls": [{"name": "refund_order", "arguments": {"order_id": "A1001"}}]}]}}))
    argv = {"not_a_recording": ["explore", str(foreign)],
            "bad_script": ["explore", str(script)],
            "tools": ["explore", "demo", "--tools", str(broken)],
            "budget": ["explore", "demo", "--budget", "0"],
            "history": ["explore", "demo", "--history-items", "-1"],
            "no_call": ["explore", str(unmatched), "--tools", str(EXAMPLES / "refunds.py")],
            "directory": ["explore", str(tmp_path)],
            "out_file": ["explore", "demo", "--out", str(foreign)]}[case]
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("relay explore: "), err
    assert captured.out == ""
    if case == "no_call":
        assert "nothing to explore: as it runs, the model makes no call of the relay's tools" in err
    if case == "directory":
        assert err.endswith("is a directory, not a recording or a script"), err
    if case == "out_file":
        assert err.endswith("notes.jsonl is a file: recordings go into a directory"), err


def test_every_boundary_of_a_call_is_a_schedule_of_its_own() -> None:
    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return f"order {order}: shipped"

    script = Script(Turn(say="Let me look.", calls=[call("lookup", order="A1")]), Turn(say="It shipped."))
    conversation = Conversation("lookup", script.mock_script(), ("Where is A1?",), tool_registry([lookup]))
    base = run_schedule(conversation, ())
    assert base.broken == [] and len(base.observed.calls) == 1
    space = boundaries(conversation, base.observed)
    assert {p.anchor for p in space if p.kind == "barge_in"} == set(ANCHORS)
    finishes = [p.step for p in space if p.kind == "finish"]
    assert finishes == list(range(len(finishes))) and len(finishes) >= 2
    tried = list(schedules(space, budget=10_000, seed=0))
    assert tried[0] == () and all((p,) in tried for p in space)
    assert len(tried) == len(set(tried))
    for single in space:   # each lands where it says
        assert single in run_schedule(conversation, (single,)).observed.fired, single


@pytest.mark.parametrize("dialect", ["openai", "azure", "foundry", "xai", "voicelive", "gemini"])
def test_the_demo_holds_every_invariant_on_every_dialect(dialect: str) -> None:
    """CI's exploration of our own scripted conversation (a fixed seed and budget)."""
    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect(dialect)
    result = explore(conversation, budget=40, seed=48, replay_check=False)
    assert result.ok, result.report()
    assert result.tried == 40 and result.distinct > 1


def test_a_script_and_a_recording_explore_through_the_public_api(tmp_path: Path) -> None:
    result = explore_script(Script(Turn(say="Let me check.", calls=[call("lookup_order", order_id="A1001")]),
                                   Turn(say="It shipped.")), [EXAMPLE_TOOLS], budget=10)
    assert result.ok, result.report()
    conversation = from_recording(REPO / "docs" / "examples" / "recordings" / "demo.jsonl",
                                  tool_registry([EXAMPLE_TOOLS]))
    assert conversation.lines and conversation.script.turns
    assert explore(conversation, budget=5, replay_check=False).tried == 5


def test_a_script_in_which_no_tool_is_called_is_refused_by_the_public_api() -> None:
    """Small talk, or a call of a tool left out of the tools: nothing to explore, said as such
    (a test that explored it would pass on nothing)."""
    with pytest.raises(NothingToExplore, match="nothing to explore"):
        explore_script(Script(Turn(say="Hello! How can I help?")), [EXAMPLE_TOOLS], budget=3)
    with pytest.raises(NothingToExplore, match="is each tool it calls among the tools"):
        explore_script(Script(Turn(calls=[call("refund_order", order_id="A1")]), Turn(say="Done.")),
                       [EXAMPLE_TOOLS], budget=3)


def test_a_sidecars_recording_is_explored_as_a_sidecar_and_the_summary_says_how_the_relay_ran(tmp_path: Path) -> None:
    """A sidecar's recording (`relay attach --record`) is explored with the relay beside the
    caller, as it ran; told `proxy`, as its conversation through a proxy; the summary says which."""
    sidecar = anyio.run(lambda: record_session(tmp_path, [get_weather_data], creates=0))
    conversation = from_recording(sidecar, [get_weather_data])
    result = explore(conversation, budget=3, replay_check=False)
    assert (conversation.recorded_as, result.to_json()["recorded_as"]) == ("sidecar", "sidecar")
    assert result.ok and result.to_json()["mode"] == "sidecar"
    assert "the relay runs as          a sidecar (the caller talks to the server" in result.report()
    through = explore(conversation.with_mode("proxy", "its recording"), budget=3, replay_check=False)
    assert through.to_json()["mode"] == "proxy"
    assert "the relay runs as          a proxy (the recording is of a sidecar: its conversation is explored " \
           "through a proxy)" in through.report()
    proxy = explore(from_recording(REPO / "docs" / "examples" / "recordings" / "demo.jsonl",
                                   tool_registry([EXAMPLE_TOOLS])), budget=3, replay_check=False)
    assert proxy.recorded_as == "proxy" and "the relay runs as          a proxy\n" in proxy.report()
    scripted = explore(Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])), budget=3,
                       replay_check=False)
    assert scripted.recorded_as is None and "the relay runs as          a proxy\n" in scripted.report()


def test_a_tool_that_answers_differently_each_run_is_named_as_the_replays_cause(tmp_path: Path) -> None:
    """A tool whose output is not a function of its arguments (a timestamp, a fresh id) cannot be
    replayed the same: the finding says that only tools' outputs changed, and why that happens."""
    runs: list[int] = []

    @tool
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        runs.append(1)
        return f"{order_id} shipped (lookup {len(runs)})"   # each run answers anew

    result = explore_script(Script(Turn(say="Let me check.", calls=[call("lookup_order", order_id="A1")]),
                                   Turn(say="It shipped.")), [lookup_order], budget=1, out=tmp_path)
    [finding] = result.findings
    assert finding.invariant == "replays_same"
    assert finding.message.startswith("changed: output of call_")
    assert "only tools' outputs changed, to the same arguments" in finding.message
    assert finding.recording is not None and finding.recording.parent == tmp_path


def test_a_finding_whose_recording_cannot_be_written_says_so(tmp_path: Path) -> None:
    """Not a recording path that does not exist and a replay command that cannot run."""
    runs: list[int] = []

    @tool
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        runs.append(1)
        return f"{order_id} shipped (lookup {len(runs)})"

    taken = tmp_path / "a_file"
    taken.write_text("")
    result = explore_script(Script(Turn(say="Let me check.", calls=[call("lookup_order", order_id="A1")]),
                                   Turn(say="It shipped.")), [lookup_order], budget=1, out=taken)
    [finding] = result.findings
    assert (finding.recording, finding.page, finding.command) == (None, None, None)
    assert finding.unwritten and "a_file" in finding.unwritten
    assert f"  recording: not written ({finding.unwritten})" in finding.describe()
    assert "reproduce it" not in finding.describe()


@pytest.mark.parametrize(("dialect", "delegation", "applies"), [
    ("openai", None, set()),
    ("gemini", None, {"cancelled_not_answered", "one_final_answer"}),
    ("live", None, {"appends_placed"}),
    ("live", "client", {"appends_placed", "delegation_answered_once", "interrupted_not_spoken"}),
])
def test_an_invariant_of_another_wire_is_shown_not_applicable(dialect: str, delegation: str | None,
                                                              applies: set[str]) -> None:
    """The summary counts as held only what the session gave a check to read."""
    own_wire = {"cancelled_not_answered", "one_final_answer", "appends_placed", "delegation_answered_once",
                "interrupted_not_spoken"}
    if delegation:   # the client-delegation example: its own script and @delegate
        conversation = from_file(EXAMPLES / "concierge.script.json", tool_registry([str(EXAMPLES / "concierge.py")]))
    else:
        conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect(dialect)
    assert (conversation.dialect, conversation.delegation) == (dialect, delegation)
    result = explore(conversation, budget=2, replay_check=False)
    assert set(result.to_json()["not_applicable"]) == own_wire - applies
    report = result.report()
    for name in own_wire - applies:
        assert re.search(rf"^  n/a     {name} +.+ only$", report, re.MULTILINE), report
    for name in applies | {"answered_once", "handler_once"}:
        assert re.search(rf"^  held    {name} +2 schedule\(s\)$", report, re.MULTILINE), report


def test_a_time_budget_always_leaves_the_conversation_as_scripted_tried() -> None:
    """A test with a tiny time budget still runs the conversation as scripted and checks it (it
    passed on nothing, 0 schedules tried); a budget of no time is refused, as `--time-budget 0` is."""
    lookup = Script(Turn(say="Let me check.", calls=[call("lookup_order", order_id="A1001")]), Turn(say="It shipped."))
    result = explore_script(lookup, [EXAMPLE_TOOLS], time_budget=1e-9)
    assert (result.tried, result.stopped, result.held["answered_once"]) == (1, "time", 1)
    with pytest.raises(ValueError, match="the time budget must be more than 0 seconds"):
        explore_script(lookup, [EXAMPLE_TOOLS], time_budget=0)


def test_a_recording_whose_model_spoke_first_still_makes_its_call() -> None:
    """A real WebRTC session (../shared/recordings): the model greets twice before the caller's
    first line and speaks twice between two others; its one call, in its last response, comes
    after 11 of the caller's lines and 12 responses. Played one response a line, the call was never
    made (nothing to explore); the caller now says one line more, and the call is explored."""
    log = shared_dir() / "recordings" / "banyan-landing_log1_webrtc_beta_fc.jsonl"
    tools = tool_registry([str(REPO / "tests" / "fixtures" / "shared_recording_tools.py")])
    conversation = from_recording(log, tools)
    assert len(conversation.script.turns) == 12 and conversation.lines[-1] == "Hello."
    assert conversation.recorded_as is None   # a provider's event log: no relay header, no mode
    assert [call.name for turn in conversation.script.turns for call in turn.calls] == ["transferToSupervisor"]
    result = explore(conversation, budget=30, replay_check=False)
    assert result.ok and result.boundaries > 0 and result.covered > 0, result.report()
    demo = from_recording(REPO / "docs" / "examples" / "recordings" / "demo.jsonl", tool_registry([EXAMPLE_TOOLS]))
    assert len(demo.lines) == 4   # one line a response that is not a follow-up: nothing added


def test_a_long_conversation_is_no_loop_and_a_loop_within_one_line_is_found(tmp_path: Path) -> None:
    """The loop check counts the upstream frames after each of the caller's lines: a conversation
    of 120 lookups (thousands of frames) settles, as it did not when the count ran over the whole
    session; a model that calls the tool again after every output is caught within one line."""
    turns = []
    for number in range(120):
        turns += [Turn(say=f"Checking {number}.", calls=[call("lookup_order", order_id=f"A{number}")]),
                  Turn(say=f"Order {number} shipped.")]
    result = explore_script(Script(*turns), [EXAMPLE_TOOLS], budget=2, out=tmp_path)
    assert result.ok, result.report()
    looping = tmp_path / "loop.script.json"
    again = {"calls": [{"name": "lookup_order", "arguments": {"order_id": "A1001"}}]}
    looping.write_text(json.dumps({"lines": ["Where is my order?"],
                                   "script": {"default": {"say": "Let me check.", **again}, "after_outputs": again}}))
    result = explore_script(str(looping), [EXAMPLE_TOOLS], budget=1, out=tmp_path)
    [finding] = result.findings
    assert finding.invariant == "settles" and "after one of the caller's lines" in finding.describe(), result.report()
