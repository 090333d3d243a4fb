"""Where each handler finished, recorded and replayed (issue 48): the harness writes a
`handler_finished` line among the frames where the handler reported, at its virtual time; the
replay lands each finish there (relay/offline/replay_finishes.py), so a barge-in or a server's
cancel that came while a handler ran replays to the same outcome on the OpenAI family; and an
explorer's finding under such a barge-in replays, with `relay replay --invariant`, to the same
verdict."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from relay.cli import main
from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.offline.explore import boundaries, explore, replayable, replays_same, run_schedule
from relay.offline.explore_input import from_file, from_script
from relay.offline.explore_session import Conversation, Perturbation
from relay.offline.replay import replay
from relay.recording.format import HANDLER_FINISHED_NOTE, HANDLER_YIELDED_NOTE, RELAY_TO_UPSTREAM, TOOL_CALL_NOTE
from relay.recording.reader import read_recording
from relay.testing import Script, Turn, call
from relay.tools import tool
from relay.tools.sources import tool_registry
from tests.support.paths import REPO
from tests.test_explore import bank  # noqa: F401   # the refund example's payment provider, emptied
from tests.test_explore_client_late import mixed

EXAMPLES = REPO / "docs" / "examples" / "testing"
OPENAI_FAMILY = ["openai", "azure", "xai", "foundry"]


@tool
async def lookup(order: str) -> str:
    """Look an order up (five provider events' time, on either clock)."""
    await asyncio.sleep(0.05)
    return f"order {order}: shipped"


TWO = Script(Turn(say="Let me look.", calls=[call("lookup", order="A1"), call("lookup", order="B2")]),
             Turn(say="Both shipped."))


def two_lookups(dialect: str) -> Conversation:
    """Two calls in one response: with a barge-in while the second runs, the first finished before it
    (its answer owed speech) and the second after (unspoken: `finish_silently`)."""
    return from_script(TWO, tool_registry([lookup]), dialect=dialect, lines=("Where are A1 and B2?",))


def saved(conversation: Conversation, schedule: tuple[Perturbation, ...], folder: Path) -> Path:
    run = run_schedule(conversation, schedule, keep=True)
    assert run.broken == [], run.broken
    try:
        return run.session.save(folder)
    finally:
        run.session.close()


def test_the_harness_writes_each_finish_where_and_when_it_happened(tmp_path: Path) -> None:
    path = saved(two_lookups("openai"), (), tmp_path)
    recording = read_recording(path)
    finishes = [note for note in recording.notes if note.kind == HANDLER_FINISHED_NOTE]
    assert [note.fields["name"] for note in finishes] == ["lookup", "lookup"]
    assert len({note.fields["call_id"] for note in finishes}) == 2
    end = max(frame.t for frame in recording.frames)
    for note in finishes:
        # at its virtual time, not the session's end; before the output it caused, after its start
        assert 0 < note.t < end
        output = next(frame for frame in recording.frames if frame.direction == RELAY_TO_UPSTREAM
                      and note.fields["call_id"] in str(frame.event) and "function_call_output" in str(frame.event))
        assert note.line_no < output.line_no and note.t <= output.t
    decided = [note for note in recording.notes if note.kind == TOOL_CALL_NOTE]
    assert len(decided) == 2 and all(note.t < end for note in decided)


@pytest.mark.parametrize("dialect", OPENAI_FAMILY)
@pytest.mark.parametrize("perturbation", [Perturbation("barge_in", 2, "running"),
                                          Perturbation("server_cancel", 2, "running"),
                                          Perturbation("late_arguments", 2, "announced")],
                         ids=lambda p: f"{p.kind}-{p.anchor}")
def test_an_interruption_while_a_handler_runs_replays_to_the_same_outcome(dialect: str,
                                                                          perturbation: Perturbation) -> None:
    conversation = two_lookups(dialect)
    assert perturbation in run_schedule(conversation, (perturbation,)).observed.fired
    assert replayable((perturbation,), "openai")
    assert replays_same(conversation, (perturbation,), {}, None) is None


@tool
async def prices(symbol: str):
    """Stream a symbol's prices: the first is the output, the others updates."""
    for price in (1, 2, 3):
        yield {"symbol": symbol, "price": price}
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("schedule", [(), (Perturbation("barge_in", 2, "running"),),
                                      (Perturbation("finish", 1, step=2),)], ids=["scripted", "barge_in", "finish"])
def test_a_streaming_handler_s_values_land_where_they_came(schedule: tuple[Perturbation, ...], tmp_path: Path) -> None:
    """A streaming tool's values are placed as its finish is (`handler_yielded` lines): held, they
    keep their order with its finish, and the updates and follow-ups replay the same."""
    script = Script(Turn(say="Let me look.", calls=[call("lookup", order="A1"), call("prices", symbol="X")]),
                    Turn(say="Done."))
    conversation = from_script(script, tool_registry([lookup, prices]), dialect="openai", lines=("Go",))
    run = run_schedule(conversation, schedule, keep=True)
    try:
        path = run.session.save(tmp_path)
    finally:
        run.session.close()
    kinds = [note.kind for note in read_recording(path).notes
             if note.fields.get("name") == "prices" and note.kind != TOOL_CALL_NOTE]
    assert kinds == [HANDLER_YIELDED_NOTE] * 3 + [HANDLER_FINISHED_NOTE], kinds
    assert replay(path, conversation.tools).ok


def test_a_session_that_expires_while_a_streaming_handler_runs_replays_without_its_later_updates(
        tmp_path: Path) -> None:
    """Issue 48's replay divergence, the explorer's schedule shrunk: the server cancels the response
    while the streaming call runs, then the session expires and its connection closes with the
    handler still yielding. The recorded session ended there (no `handler_finished` line of the
    streaming call's); the replay ends there too, instead of sending the handler's next value as one
    more update (and asking for a follow-up again) to an upstream that is gone."""
    script = Script(Turn(say="Let me look.", calls=[call("lookup", order="A1"), call("prices", symbol="X")]),
                    Turn(say="Done."))
    conversation = from_script(script, tool_registry([lookup, prices]), dialect="openai", lines=("Go",))
    schedule = (Perturbation("server_cancel", 2, "running"), Perturbation("expiry", 2, "running"))
    assert replayable(schedule, "openai")
    path = saved(conversation, schedule, tmp_path)
    notes = [note.kind for note in read_recording(path).notes if note.fields.get("name") == "prices"
             and note.kind != TOOL_CALL_NOTE]
    assert notes == [HANDLER_YIELDED_NOTE] * 2, notes   # the third value and the finish never came
    replayed = replay(path, conversation.tools)
    assert replayed.ok, [d.describe() for d in replayed.divergences]
    assert replays_same(conversation, schedule, {}, None) is None


@tool(name="lookup", description=lookup.__relay_tool__.description)   # declared as `lookup` is
async def slow_lookup(order: str) -> str:
    """`lookup` taking ten times as long: its finish comes later than the recorded one's."""
    await asyncio.sleep(0.5)
    return f"order {order}: shipped"


def test_without_the_finish_lines_the_replay_lands_a_finish_elsewhere(tmp_path: Path) -> None:
    """A recording written before the lines existed still reads and replays, each finish taken when
    it comes. The replay's handlers run on its virtual clock, so the same tool finishes where it
    did; one slower than the recorded one does not: its finish lands elsewhere among the frames,
    and the follow-up the relay sent is missing. The lines are what makes it replay the same."""
    conversation = two_lookups("openai")
    path = saved(conversation, (Perturbation("barge_in", 2, "running"),), tmp_path)
    assert replay(path, conversation.tools).ok
    assert replay(path, [slow_lookup]).ok
    older = tmp_path / "older.jsonl"
    older.write_text("".join(line.replace(',"handler_finishes":true', "")
                             for line in path.read_text().splitlines(keepends=True)
                             if f'"kind":"{HANDLER_FINISHED_NOTE}"' not in line))
    assert read_recording(older).complete
    assert replay(older, conversation.tools).ok
    diverged = replay(older, [slow_lookup])
    assert [d.kind for d in diverged.divergences] == ["missing"], diverged.divergences
    assert "follow-up" in diverged.divergences[0].describe()


def test_the_explorer_checks_replays_same_on_interruptions_while_a_handler_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With every replayable schedule replayed (REPLAY_EVERY 1), the explorer replays each single
    perturbation of two calls, the barge-ins, server cancels and late arguments on the OpenAI
    family among them, and each replays to the same outcome."""
    from relay.offline import explore as explorer

    monkeypatch.setattr(explorer, "REPLAY_EVERY", 1)
    conversation = two_lookups("openai")
    space = boundaries(conversation, run_schedule(conversation, ()).observed)
    carried = [p for p in space if replayable((p,), "openai")]
    assert {"barge_in", "server_cancel", "late_arguments"} <= {p.kind for p in carried}
    result = explore(conversation, budget=len(space) + 1, seed=1)
    assert result.ok, result.report()
    assert result.replayed == len(carried) + 1 == result.held["replays_same"]   # and the run as scripted


@pytest.mark.parametrize("dialect, replays", [("openai", 2), ("azure", 1), ("xai", 1), ("foundry", 1)])
def test_the_refund_paid_twice_under_a_barge_in_replays_to_the_same_verdict(
        dialect: str, replays: int, bank: dict[str, list[str]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The seeded bug (docs/examples/testing/refunds.py: the money leaves, and a barge-in makes the
    model call again) is found under one barge-in on call 1; written for either placement the
    walk-through names (before the call is complete, and while its handler runs: docs/testing.md),
    the finding's command, `relay replay ... --invariant bank.py:refunded_once`, breaks the same
    invariant: exit 1, the same report each time."""
    import bank as module   # the fixture's, on the path the invariant spec imports it by
    from relay.offline import explore as explorer

    tools, invariant = str(EXAMPLES / "refunds.py"), f"{EXAMPLES / 'bank.py'}:refunded_once"
    conversation = from_file(EXAMPLES / "refund.script.json", tool_registry([tools]), dialect=dialect)
    own = {"refunded_once": module.refunded_once}
    result = explore(conversation, budget=20, seed=3, invariants=own, reset=bank.clear, out=tmp_path,
                     tools_arg=tools, invariant_args=(invariant,), replay_check=False)
    found = next(f for f in result.findings if f.invariant == "refunded_once")
    placements = [(Perturbation("barge_in", 1, "announced"),), (Perturbation("barge_in", 1, "running"),)]
    assert found.schedule in placements
    for schedule in placements:
        finding = found if schedule == found.schedule else explorer._finding(
            conversation, schedule, "refunded_once", "", own, bank.clear, tmp_path,
            f" --tools {tools} --invariant {invariant}")
        assert finding.schedule == schedule and finding.command is not None
        assert finding.command == f"relay replay {finding.recording} --tools {tools} --invariant {invariant}"
        capsys.readouterr()
        reports = []
        for _ in range(replays):
            assert main(finding.command.split()[1:]) == 1
            reports.append(capsys.readouterr().out)
            assert reports[-1].rstrip().endswith("verdict: invariant broken: refunded_once "
                                                 "(order A1 was refunded 2 times (rf_A1_1, rf_A1_2))"), reports[-1]
        assert len(set(reports)) == 1
        # the fix passes the same replay's invariant, and says how its answer differs from the recording's
        assert main(["replay", str(finding.recording), "--tools", str(EXAMPLES / "refunds_fixed.py"),
                     "--invariant", invariant]) == 1
        fixed = capsys.readouterr().out
        assert "invariant broken" not in fixed and "changed: output of" in fixed


def test_an_invariant_that_does_not_load_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    demo = REPO / "docs" / "examples" / "recordings" / "demo.jsonl"
    assert main(["replay", str(demo), "--tools", "relay.examples.tools", "--invariant", "nowhere.py:check"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no such file nowhere.py" in err, err


def test_a_handler_the_recorded_session_never_heard_finish_is_never_heard_in_the_replay(tmp_path: Path) -> None:
    """What `replays_same` found (Voice Live, the demo, seed 11): call 1's handler finishing two
    provider events late, and the session expiring before it did. The recording has no finish line
    for it, so the replay took its handler's quick finish at once, answered the call and asked for
    a follow-up the recorded relay never sent. A handler the recording never heard finish is now
    never heard in its replay: the replay ends with it running, as the session did."""
    schedule = (Perturbation("done_first", 3, "running"), Perturbation("expiry", 2, "running"),
                Perturbation("finish", 1, step=2))
    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect("voicelive")
    path = saved(conversation, schedule, tmp_path)
    recording = read_recording(path)
    finished = {note.fields["call_id"] for note in recording.notes if note.kind == HANDLER_FINISHED_NOTE}
    abandoned = {call_id for call_id, fields in recording.tool_calls_decided().items()
                 if fields.get("outcome") == "abandoned"}
    assert abandoned and not abandoned & finished, "a call the session ended with its handler running"
    replayed = replay(path, conversation.tools)
    assert replayed.ok, [d.describe() for d in replayed.divergences]
    assert replays_same(conversation, schedule, {}, None) is None


def test_a_session_that_ended_before_any_handler_finished_replays_the_same() -> None:
    """The session expires while the one relay call's handler runs: the recording has no
    `handler_finished` line at all, and its header says its relay writes them, so the replay's
    handler, which finishes at once, is never heard either (before, its output went up: `extra`).
    Found by `relay explore` on a conversation with the caller's own tool."""
    schedule = (Perturbation("done_first", 1), Perturbation("expiry", 1, "running"), Perturbation("finish", 1, step=2))
    for dialect in ("xai", "voicelive"):
        assert replays_same(mixed(dialect), schedule, {}, None) is None
