"""What the explorer's faster loop rests on (issue 48's speed): the virtual loop's clock moved at
once only when nothing of the loop's comes first, a timeline that decodes fewer frames and reads
the same, the copy of JSON the mock makes, the check of the client's frames that scans each
frame once, the relay's GPT-Live appends the checks take from the timeline's reading, and the
garbage collector set for the runs and put back. tests/test_explore_fixed.py holds the schedules
and verdicts of fixed seeds."""

from __future__ import annotations

import copy
import gc
from types import SimpleNamespace

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.offline import events
from relay.offline.delegation_events import DelegationReader
from relay.offline.explore import YOUNG_COLLECTIONS, explore, run_schedule
from relay.offline.explore_checks import client_never_sees_relay_call
from relay.offline.explore_session import Conversation
from relay.offline.virtual import VirtualLoop
from relay.recording.format import RELAY_TO_CLIENT, Frame
from relay.tools.render import json_copy
from relay.tools.sources import tool_registry


def test_skip_to_moves_the_clock_only_when_nothing_comes_first() -> None:
    loop = VirtualLoop()
    seen: list[tuple[bool, float]] = []

    def step() -> None:
        seen.append((loop.skip_to(0.5), loop.time()))    # nothing before 0.5: the clock moves
        seen.append((loop.skip_to(1.5), loop.time()))    # a timer at 1.0 comes first
        loop.call_soon(lambda: None)
        seen.append((loop.skip_to(0.7), loop.time()))    # a callback is ready

    loop.call_soon(step)
    loop.call_at(1.0, lambda: seen.append((loop.skip_to(2.5), loop.time())))   # past the horizon
    try:
        loop.run_until(2.0)
    finally:
        loop.close()
    assert seen == [(True, 0.5), (False, 0.5), (False, 0.5), (False, 1.0)]


def test_a_timeline_reads_the_same_when_it_decodes_only_what_it_reads(monkeypatch) -> None:
    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS]))
    run = run_schedule(conversation, (), keep=True)
    try:
        skipped = run.session._timeline().events
        monkeypatch.setattr(events.ItemReader, "read_upstream", frozenset(events.wire.names_of((events.wire.Event,))),
                            raising=False)
        monkeypatch.setattr(events.ItemReader, "wants", lambda self, frame: True)
        every = run.session._timeline().events
    finally:
        run.session.close()
    assert skipped == every
    assert any(event.kind == events.FOLLOW_UP for event in every)


def test_a_gpt_live_timeline_reads_the_same_without_decoding_the_audio(monkeypatch) -> None:
    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect("live")
    run = run_schedule(conversation, (), keep=True)
    try:
        skipped = run.session._timeline().events
        audio = sum(1 for frame in run.session.frames if frame.raw and "audio" in frame.raw[:40])
        monkeypatch.setattr(DelegationReader, "wants", lambda self, frame: True)
        every = run.session._timeline().events
    finally:
        run.session.close()
    assert audio > len(run.session.frames) / 2   # most of the session's frames are its audio
    assert skipped == every
    assert any(event.kind == events.FOLLOW_UP for event in every)


def test_an_explored_gpt_live_session_reads_the_same_through_the_express_lane(monkeypatch) -> None:
    from relay.offline.explore_live import ExploredLiveSession
    from relay.offline.explore_session import Perturbation

    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect("live")
    schedule = (Perturbation("barge_in", 1, "running"), Perturbation("finish", 5, step=3))

    def played() -> tuple[list[tuple[float, str, object]], list[object], list[tuple[str, str]]]:
        run = run_schedule(conversation, schedule)
        return ([(f.t, f.direction, f.raw) for f in run.session.frames], run.observed.fired, run.broken)

    express = played()
    monkeypatch.setattr(ExploredLiveSession, "express_lane", False)
    assert ExploredLiveSession.express_lane is False
    every_frame_in_a_round = played()
    assert express == every_frame_in_a_round
    assert len(express[1]) == 2


def test_json_copy_copies_as_deepcopy_does_and_shares_nothing() -> None:
    value = {"a": [1, 2.5, {"b": None, "c": True}], "d": ("x", {"e": "f"}), "g": {"h": []}}
    copied = json_copy(value)
    assert copied == copy.deepcopy(value)
    copied["a"][2]["b"] = 1
    copied["g"]["h"].append(1)
    copied["d"][1]["e"] = "changed"
    assert value == {"a": [1, 2.5, {"b": None, "c": True}], "d": ("x", {"e": "f"}), "g": {"h": []}}


def test_the_client_seeing_a_relay_call_is_still_found() -> None:
    owned = [SimpleNamespace(call_id=f"call_{n}abc", relay_owned=True) for n in range(3)]
    frames = [Frame(0.0, RELAY_TO_CLIENT, None, '{"type":"response.output_audio.delta","delta":"AAAA"}', None, 2),
              Frame(0.1, RELAY_TO_CLIENT, None, '{"type":"x","call_id":"call_2abc"}', None, 3)]
    session = SimpleNamespace(engine=SimpleNamespace(ledger=owned), frames=frames, observed=SimpleNamespace(calls=[]))
    assert client_never_sees_relay_call(session) == "the client was sent call_2abc, a call the relay owns (frame 3)"
    # a call the run saw that a history limit forgot from the call book by the end
    forgot = SimpleNamespace(engine=SimpleNamespace(ledger=owned[:2]), frames=frames,
                             observed=SimpleNamespace(calls=["call_0abc", "call_1abc", "call_2abc"]))
    assert client_never_sees_relay_call(forgot) == "the client was sent call_2abc, a call the relay owns (frame 3)"
    session.frames = frames[:1]
    assert client_never_sees_relay_call(session) is None


def test_the_appends_a_gpt_live_timeline_read_are_those_its_frames_show() -> None:
    from relay.offline.delegation_checks import delegation_appends
    from relay.offline.explore_input import from_file
    from relay.offline.explore_session import Perturbation
    from tests.support.paths import REPO

    examples = REPO / "docs" / "examples" / "testing"
    conversation = from_file(examples / "concierge.script.json", tool_registry([str(examples / "concierge.py")]))
    run = run_schedule(conversation, (Perturbation("expired", 2, "answered"),), keep=True)
    try:
        session = run.session
        timeline = session._timeline()
        unread = SimpleNamespace(dialect=session.dialect, tools=session.tools, frames=[])
        for every in (True, False):
            scanned = delegation_appends(session, every=every)
            taken = delegation_appends(unread, every=every, timeline=timeline)   # no frame read again
            assert scanned is not None and taken is not None
            assert (taken.sent, taken.placed, taken.refused) == (scanned.sent, scanned.placed, scanned.refused)
        assert scanned.sent and scanned.placed and scanned.refused   # sent, placed, refused at the close
    finally:
        session.close()


def _collector_seen_by_runs(frozen_before: bool) -> tuple[set[tuple[int, int]], tuple[int, int], int]:
    """What the collector is while an exploration's runs go (its youngest threshold and how many
    objects are frozen beyond those before, as each run's reset sees them), after it (the same
    two), and how many objects were frozen before it."""
    conversation = Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS]))
    seen: set[tuple[int, int]] = set()
    threshold = gc.get_threshold()
    if frozen_before:
        gc.freeze()
    try:
        before = gc.get_freeze_count()
        explore(conversation, budget=3, replay_check=False,
                reset=lambda: seen.add((gc.get_threshold()[0], gc.get_freeze_count() - before)))
        after = (gc.get_threshold()[0], gc.get_freeze_count() - before)
    finally:
        gc.set_threshold(*threshold)
        if frozen_before:
            gc.unfreeze()
    return seen, after, before


def test_the_runs_collect_less_often_over_a_frozen_heap_and_the_collector_is_put_back() -> None:
    threshold = gc.get_threshold()[0]
    assert gc.get_freeze_count() == 0 and threshold != YOUNG_COLLECTIONS
    seen, after, _ = _collector_seen_by_runs(frozen_before=False)
    assert {young for young, _ in seen} == {YOUNG_COLLECTIONS}
    assert all(frozen > 0 for _, frozen in seen)    # what the process held when it began
    assert after == (threshold, 0)


def test_a_process_that_froze_its_own_heap_keeps_it_as_it_was() -> None:
    seen, (threshold, frozen), before = _collector_seen_by_runs(frozen_before=True)
    # nothing more frozen (a frozen object the runs free leaves the count, which may go down)
    assert seen and all(more <= 0 for _, more in seen)
    assert threshold == gc.get_threshold()[0] and before + frozen > 0   # and not unfrozen
