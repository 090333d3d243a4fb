"""What the explorer found in the relay itself, each shrunk schedule kept as a regression test
(issue 48, item 5): the schedule still fires where it did, and every invariant holds on it.

- **A call lost whole to a sideband's reconnect** (the demo, call 1's handler running, the
  sideband away 0.2 s or 12.6 s): the parallel call of the same response was made while the
  connection was down, every frame of it lost, and was never answered (`answered_once`). The
  relay now asks for the item the next item names as its previous (relay/engine/recovery.py).
- **A lost call's question lost to a second reconnect** (the demo, the sideband away 12.6 s while
  call 1's handler runs and again while call 2's does): the relay asked for the lost call's item,
  the answer went with the second drop, and the call was never answered (`answered_once`). The
  relay now asks an unanswered question again on each new connection (three drops in a row too).
- **The explorer's own check**, not the relay: a session that expired while the relay's question
  for a lost call's item was unanswered counted that call as owed (`answered_once`); the relay
  never learnt that the item was a call, so it is owed nothing (`unseen_calls`).
- **A Gemini session dropped mid-call did not replay to the same outcome** (`replays_same`).
- **A lost call whose item names its response** (Foundry, the demo: call 2's response cancelled
  by the server before it is complete, the sideband away 0.2 s between call 1's output and its
  follow-up): the follow-up made two calls while the connection was down, every frame lost. The
  relay asked for the second one's item and ran it, but Foundry's item names its response
  (`response_id`), one the relay never saw begin; the relay waited for that response's end, and
  the call was never answered (`answered_once`, `nothing_owed`). Such a response is now taken as
  ended, as an unnamed one always was (relay/engine/recovery.py).
- **The explorer's own delivery, not the relay** (`answered_once`, xAI, the refund example with
  the order refunded already, so that the tool answers at once: the caller barging in between
  call 1's output and its follow-up, at the same moment as a reconnect while its handler runs,
  and a `response.done` before the call's item): the caller's new turn was queued after the
  frames the reconnect lost, and delivered while the connection was down. The relay saw a
  response begin while away, took it as ended at the reconnect, and left its call, still being
  made then, unrun. A frame released while the connection is down is now lost, however it was
  queued (relay/offline/explore_session.py).
- **The explorer's own recordings, not the relay** (`replays_same`, xAI and Voice Live, the demo:
  a call's `response.done` before its item is done, and the session expiring while call 4 runs):
  the relay sent call 4's output and follow-up just before the server closed the session. The
  replay of the written recording then asked for that follow-up again every 15 s, past the
  recording's end, because its end line said the session lasted 0 s (the harness wrote no end
  time) and a replay fired every timer left. The harness now writes when the session ended and a
  replay fires no timer due after a recorded end (relay/offline/replay_play.py).
- **A follow-up sent ahead of a new call's output** (`settles`, Voice Live, the refund example's
  fixed tool: the caller barging in while call 1's handler runs and between its output and its
  follow-up, and call 1's `response.done` before its item): a follow-up held behind the caller's
  response went up the moment that response ended, while the call it had made was still running;
  the model, asked to speak with that call open, called the tool again, and each new batch's
  follow-up went up ahead of the next call's output, without end. A follow-up now waits while a
  relay call of a response that ended is unanswered, and the ones waiting go up as one
  (relay/engine/sequencer.py).
- **The explorer's own check, not the relay** (`spoke_after_tools`, Gemini, the demo: the caller
  barging in while call 5, search_flights, runs, on a server that drops a BLOCKING call with no
  `toolCallCancellation`, `no_cancellation`): the model answered the caller's turn, and the relay
  answered the call once, after that turn; the server took no notice of the answer, so nothing was
  said after it. The relay cannot tell that server from one that replies; the timeline owes such
  an answer no speech (relay/offline/events.py, `TurnReader`).
- **The explorer's own delivery, not the relay** (`spoke_after_tools`, Gemini, the refund example:
  two barge-ins with words while call 1's handler hangs, one of them `no_cancellation`): the first
  barge-in's words made a new call, and the second barge-in dropped it while its `toolCall` was
  still in flight; delivered after the `interrupted` that dropped it, the call ran, and its answer
  got no reply. A server drops only a call it issued; a call dropped before it was delivered is now
  never made, as a withdrawn one is not (relay/offline/withdrawn_calls.py).
- **A streaming handler's end replayed past a dropped session** (`replays_same`, Gemini, the tests'
  Gemini script with the client's tools: call 4, track, finishing at once, and the connection
  dropping while it runs): the handler's two values went up, and the connection dropped before its
  end, whose last answer (`willContinue` false) never went. The replay held that end until the
  recording's last value was reached, then let it go with that value, and sent the answer the
  session never did (`relay replay`: "extra: answer 3"). What such a handler reports past its last
  recorded place stays held (relay/offline/replay_finishes.py).
- **Two GPT-Live delegations at once** (the refund example's fixed tool on GPT-Live, Responses
  delegation, seeds 3 and 53: `no_create_while_active`, `one_response_at_a_time`,
  `appends_placed`, shrunk to one barge-in while call 1's handler runs): the caller's repeated
  request made a second delegation, and the relay sent its batch's `response.create` while the
  first delegation's response was open and call 1 unanswered; the mock's backend then refused
  call 1's output, having let the second delegation's calls replace the first's. The relay now
  sends no create while another delegation's response is open, one of its calls is unanswered, or
  a create already up has not begun its response, and then one for all (relay/engine/backend_calls.py);
  the mock's pending calls are every delegation's since the last create; and the explorer's
  GPT-Live barge-in reaches the relay behind what the server sent before it (a backend response's
  end), as GPT-Live cancels nothing at a barge-in (relay/offline/explore_live.py).
- **The explorer's own outage, not the relay** (`answered_once`, the demo on xAI at seed 48 and
  the whole OpenAI family: the connection dropping twice at once while call 2's handler runs, the
  relay reconnecting at its first attempt for one and its sixth for the other, and again between
  call 2's output and its follow-up): each drop reopened the connection on its own timer, so the
  relay was told it had reconnected twice for one drop, the second time in the middle of the
  caller's next turn. It took the response under way then as lost with the connection, and the
  call that response went on to make was never answered. No edge tells the relay of a
  reconnection it did not drop before; a drop while the connection is down already drops
  nothing more now (relay/offline/explore_quirks.py).
- **A call being made when the connection drops** (`answered_once`, the demo on the whole OpenAI
  family, one perturbation: the connection dropping before call 1 is complete, back 0.2 s or 12.6 s
  later; found once the explorer dropped the connection there too): the reconnect took the
  response for ended and skipped the call, whose item was still being made, though the model
  finished it meanwhile; it was never answered. The call now stays open and the relay asks for
  its item: completed, it runs and is answered once (relay/engine/recovery.py). Its response may
  have ended cancelled in what the connection lost (a `late_arguments` schedule): the relay cannot
  know, answers it, and the explorer does not count that answer against it (`unheard_withdrawals`;
  docs/guarantees.md names the window).
- **The explorer's own check, not the relay** (`nothing_owed`, `answered_once`, the demo on
  openai-beta at seed 211 and xAI at seed 307: a `response.done` before a call's item, the
  connection dropping before call 2 is complete and back 0.2 s later, then dropping for good once
  call 1 runs): the relay had asked for call 2's item after the reconnect, and the answer went with
  the final drop. The check counted that call, half made as far as the relay knew, as owed; a
  call a dropped connection left half made is owed nothing more, as one it abandoned is not
  (relay/offline/explore_checks.py)."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
from relay.engine.calls import CallState
from relay.offline import events, explore_session
from relay.offline.withdrawn_calls import withdrawn_in_flight
from relay.offline.events import CALL
from relay.offline.explore import replayable, replays_same, run_schedule
from relay.offline.explore_session import Conversation, ExploredSession, Perturbation
from relay.recording.format import HANDLER_FINISHED_NOTE, HANDLER_YIELDED_NOTE, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY
from relay.recording.reader import read_recording
from relay.tools.sources import tool_registry
from tests.test_explore import bank, refund  # noqa: F401   # the refund example's payment provider, emptied
from tests.test_explore_gemini_script import conversation as gemini_script


@contextmanager
def held(conversation: Conversation, schedule: tuple[Perturbation, ...]) -> Iterator[ExploredSession]:
    """The session of `conversation` on `schedule`, open, once every perturbation fired and no
    invariant broke; closed after."""
    run = run_schedule(conversation, schedule, keep=True)
    try:
        assert sorted(run.observed.fired, key=repr) == sorted(schedule, key=repr)
        assert run.broken == []
        yield run.session
    finally:
        run.session.close()


def demo(dialect: str) -> Conversation:
    return Conversation("demo", demo_script(), TURNS, tool_registry([EXAMPLE_TOOLS])).with_dialect(dialect)


@pytest.mark.parametrize("dialect", ["openai", "azure", "foundry", "xai"])
@pytest.mark.parametrize("attempt", [1, 6])
def test_a_call_lost_whole_to_a_reconnect_is_answered_once(dialect: str, attempt: int) -> None:
    schedule = (Perturbation("reconnect", 1, "running", attempt),)
    run = run_schedule(demo(dialect), schedule, keep=True)
    try:
        session = run.session
        assert run.observed.fired == list(schedule)
        assert run.broken == []
        made = {event.call_id for event in session.timeline.of(CALL)}
        retrieved = [frame for frame in session.frames if frame.raw and "conversation.item.retrieve\"" in frame.raw]
        if dialect != "xai":   # xAI's calls come whole in response.done: none is lost alone
            assert retrieved, "the lost call was asked for"
        assert session.unseen_calls() == set()
        assert made <= {entry.call_id for entry in session.engine.ledger}
    finally:
        run.session.close()


@pytest.mark.parametrize("dialect", ["openai", "azure", "foundry"])
@pytest.mark.parametrize("schedule", [
    (Perturbation("reconnect", 1, "running", 6), Perturbation("reconnect", 2, "running", 6)),
    (Perturbation("reconnect", 1, "running", 6), Perturbation("reconnect", 2, "answered", 1),
     Perturbation("reconnect", 3, "running", 1)),
], ids=["two drops", "three drops"])
def test_a_question_lost_to_a_later_reconnect_is_asked_again_and_its_call_answered_once(
        dialect: str, schedule: tuple[Perturbation, ...]) -> None:
    with held(demo(dialect), schedule) as session:
        asked = [json.loads(frame.raw)["item_id"] for frame in session.frames
                 if frame.direction == RELAY_TO_UPSTREAM and frame.raw and "conversation.item.retrieve\"" in frame.raw]
        assert len(asked) > len(set(asked)), "the question lost with the second drop was asked again"
        made = {event.call_id for event in session.timeline.of(CALL)}
        assert made - session.unseen_calls() <= {entry.call_id for entry in session.engine.ledger}


def test_a_session_ending_before_a_lost_items_answer_owes_that_call_nothing() -> None:
    schedule = (Perturbation("expiry", 3, "running"), Perturbation("late_arguments", 2, "announced"),
                Perturbation("reconnect", 1, "answered", 6))
    run = run_schedule(demo("openai"), schedule, keep=True)
    try:
        session = run.session
        assert sorted(run.observed.fired, key=repr) == sorted(schedule, key=repr)
        assert session.closed and run.broken == []
        asked = [json.loads(frame.raw)["item_id"] for frame in session.frames
                 if frame.direction == RELAY_TO_UPSTREAM and frame.raw and "conversation.item.retrieve\"" in frame.raw]
        answered = [frame.raw for frame in session.frames
                    if frame.direction == UPSTREAM_TO_RELAY and frame.raw and "conversation.item.retrieved" in frame.raw]
        assert [item_id for item_id in asked if not any(item_id in text for text in answered)], (
            "the session ended with the relay's question unanswered")
    finally:
        run.session.close()


def test_a_gemini_session_dropped_mid_call_replays_to_the_same_outcome() -> None:
    """`replays_same` found it (the demo on Gemini, the connection dropping while call 5 runs):
    the replay played on past the recording's end and answered the call the dropped session had
    abandoned. A replay now ends where a recording that abandoned a call does."""
    schedule = (Perturbation("drop", 5),)
    conversation = demo("gemini")
    run = run_schedule(conversation, schedule)
    assert run.observed.fired == list(schedule) and run.broken == []
    assert replayable(schedule, "gemini")
    assert replays_same(conversation, schedule, {}, None) is None


def test_a_lost_call_whose_item_names_a_response_never_seen_is_answered_once() -> None:
    schedule = (Perturbation("reconnect", 1, "answered", 1), Perturbation("server_cancel", 2, "announced"))
    with held(demo("foundry"), schedule) as session:
        retrieved = [json.loads(frame.raw)["item"] for frame in session.frames
                     if frame.direction == UPSTREAM_TO_RELAY and frame.raw and "conversation.item.retrieved" in frame.raw]
        lost = [item for item in retrieved if item.get("type") == "function_call"]
        assert lost and all(item.get("response_id") for item in lost), "a lost call named its response"
        for item in lost:
            entry = session.engine.ledger.get(item["call_id"])
            assert entry is not None and entry.state.value == "answered"


@pytest.mark.parametrize("dialect, schedule", [
    ("xai", (Perturbation("done_first", 4, "running"), Perturbation("expiry", 4, "running"))),
    ("voicelive", (Perturbation("done_first", 2, "running"), Perturbation("expiry", 4, "running"))),
])
def test_a_session_the_server_closed_right_after_a_follow_up_replays_to_the_same_outcome(
        dialect: str, schedule: tuple[Perturbation, ...], tmp_path: Path) -> None:
    conversation = demo(dialect)
    with held(conversation, schedule) as session:
        recording = read_recording(session.save(tmp_path))
        last = max(frame.t for frame in recording.frames)
        assert recording.end_t is not None and recording.end_t >= last   # when the session ended
    assert replays_same(conversation, schedule, {}, None) is None


def test_a_turn_the_server_streams_while_the_connection_is_down_is_lost_with_it(bank: dict[str, list[str]]) -> None:
    bank["A1"] = ["rf_A1_1"]   # refunded already: the tool answers at once
    conversation = refund("refunds_fixed", bank).with_dialect("xai")
    schedule = (Perturbation("barge_in", 1, "answered"), Perturbation("done_first", 1, "running"),
                Perturbation("reconnect", 1, "running", 1))
    with held(conversation, tuple(sorted(schedule))) as session:
        away = [t for _, t, kind, text in session.marks if kind == "fault" and "reconnect" in text]
        assert len(away) == 2, away   # dropped, then reconnected
        assert not [frame for frame in session.frames if frame.direction == UPSTREAM_TO_RELAY
                    and away[0] < frame.t < away[1]], "nothing reached the relay while it was away"
        assert [entry.state.value for entry in session.engine.ledger] == ["answered", "answered"]


def test_a_follow_up_waits_for_the_call_of_the_response_it_was_held_behind(bank: dict[str, list[str]]) -> None:
    conversation = refund("refunds_fixed", bank).with_dialect("voicelive")
    schedule = (Perturbation("barge_in", 1, "answered"), Perturbation("barge_in", 1, "running"),
                Perturbation("done_first", 1, "announced"))
    with held(conversation, tuple(sorted(schedule))) as session:   # it settles, every invariant held
        sent = [json.loads(frame.raw) for frame in session.frames if frame.direction == RELAY_TO_UPSTREAM and frame.raw]
        calls = [entry.call_id for entry in session.engine.ledger]
        assert [session.engine.ledger.get(call_id).state.value for call_id in calls] == ["answered"] * 4
        follow_ups = [(index, e["response"]["metadata"]["call_ids"].split(",")) for index, e in enumerate(sent)
                      if e["type"] == "response.create" and e["response"]["metadata"].get("relay") == "follow_up"]
        # call 2's, sent before the caller's next turn made call 3; then calls 3 and 4 as one, after
        # both outputs (call 3's is not sent ahead of call 4's output, with call 4 still open)
        assert [named for _, named in follow_ups] == [[calls[1]], calls[2:]]
        last, _ = follow_ups[-1]
        answered = [e["item"]["call_id"] for e in sent[:last] if e["type"] == "conversation.item.create"]
        assert answered == calls


DROPPED = (Perturbation("no_cancellation", 5),)
"""The caller barges in while search_flights runs; the server drops the call, no cancellation."""


def test_a_gemini_call_dropped_with_no_cancellation_is_answered_once_and_owed_no_speech() -> None:
    with held(demo("gemini"), DROPPED) as session:
        call_id = session.observed.calls[4]
        entry = session.engine.ledger.get(call_id)
        assert entry is not None and entry.state is CallState.ANSWERED and session.observed.starts[call_id] == 1
        assert session.model.mock.unheard == [call_id], "the server took no notice of the answer"
        texts = [frame.raw or (frame.binary or b"").decode() for frame in session.frames]
        upstream = [text for frame, text in zip(session.frames, texts) if frame.direction == UPSTREAM_TO_RELAY]
        stop = next(i for i, text in enumerate(upstream) if '"interrupted"' in text)
        assert not any("toolCallCancellation" in text for text in upstream)
        assert any("outputTranscription" in text for text in upstream[stop:]), "the caller's turn was answered"
        assert replays_same(demo("gemini"), DROPPED, {}, None) is None


def test_with_every_answer_owed_speech_the_dropped_calls_answer_breaks_spoke_after_tools(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The timeline's reading undone: an answer for a call no cancellation named is owed speech."""
    monkeypatch.setattr(events.TurnReader, "finish", events.TurnReader.flush_words)
    run = run_schedule(demo("gemini"), DROPPED)
    assert [name for name, _ in run.broken] == ["spoke_after_tools"], run.broken
    assert "search_flights" in run.broken[0][1]


DROPPED_IN_FLIGHT = (Perturbation("barge_in", 1), Perturbation("hangs", 1), Perturbation("no_cancellation", 1))
"""The refund example on Gemini: two barge-ins with words while call 1's handler hangs, on a server
that drops BLOCKING calls with no cancellation."""


def test_a_gemini_call_dropped_before_it_was_delivered_is_never_made(bank: dict[str, list[str]]) -> None:  # noqa: F811
    with held(refund("refunds_fixed", bank).with_dialect("gemini"), DROPPED_IN_FLIGHT) as session:
        mock = session.model.mock
        never_made = [call.id for call in mock.calls.values() if call.state == "dropped"
                      and session.engine.ledger.get(call.id) is None]
        assert never_made, "a call was dropped while its toolCall was in flight"
        assert mock.unheard == [session.observed.calls[0]], "only the call the relay was given is answered"


def test_with_a_dropped_call_still_delivered_its_unheard_answer_breaks_spoke_after_tools(
        bank: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """The delivery's fix undone: a call the mock dropped still reaches the relay after it."""
    monkeypatch.setattr(explore_session, "withdrawn_in_flight",
                        lambda paced, said, seen, dropped=(): withdrawn_in_flight(paced, said, seen))
    run = run_schedule(refund("refunds_fixed", bank).with_dialect("gemini"), DROPPED_IN_FLIGHT)
    assert [name for name, _ in run.broken] == ["spoke_after_tools"], run.broken


STREAM_DROPPED = (Perturbation("drop", 4), Perturbation("finish", 4, step=0))
"""The tests' Gemini script: call 4 (track, a streaming tool) finishing at once, the connection
dropping while it runs."""


def test_a_streaming_handler_s_end_the_dropped_session_never_sent_is_not_replayed(tmp_path: Path) -> None:
    conversation = gemini_script()
    with held(conversation, STREAM_DROPPED) as session:
        recording = read_recording(session.save(tmp_path))
    call_id = next(call_id for call_id, fields in recording.tool_calls_decided().items()
                   if fields.get("name") == "track")
    assert recording.tool_calls_decided()[call_id].get("outcome") == "abandoned"
    notes = [note.kind for note in recording.notes if note.fields.get("call_id") == call_id
             and note.kind in (HANDLER_FINISHED_NOTE, HANDLER_YIELDED_NOTE)]
    assert notes == [HANDLER_YIELDED_NOTE] * 2, "both values went up, the handler's end never did"
    assert replays_same(conversation, STREAM_DROPPED, {}, None) is None


@pytest.mark.parametrize("schedule", [
    (Perturbation("barge_in", 1, "running"),),
    (Perturbation("barge_in", 1, "follow_up"), Perturbation("reseed", 1, "answered")),
])
def test_two_gpt_live_delegations_at_once_are_continued_by_one_create(
        bank: dict[str, list[str]], schedule: tuple[Perturbation, ...]) -> None:
    """The first schedule breaks three invariants with backend_calls.py's wait undone; the second
    (the caller's second request made in a session carried on, while the carried create's
    response is still to begin) breaks `appends_placed` with its wait for a create on its way
    undone (`CREATE_WAIT` 0)."""
    from relay.offline.explore_input import from_file
    from tests.test_explore import EXAMPLES, REFUND_SCRIPT

    conversation = from_file(REFUND_SCRIPT, tool_registry([str(EXAMPLES / "refunds_fixed.py")]), dialect="live")
    with held(conversation, tuple(sorted(schedule))) as session:   # every invariant held
        calls = [entry for entry in session.engine.ledger]
        assert len(calls) >= 2 and all(entry.state is CallState.ANSWERED for entry in calls)


@pytest.mark.parametrize("dialect", ["openai", "azure", "foundry", "xai", "voicelive"])
def test_a_drop_while_the_connection_is_down_already_drops_nothing_more(dialect: str) -> None:
    schedule = (Perturbation("reconnect", 2, "running", 1), Perturbation("reconnect", 2, "running", 6),
                Perturbation("reconnect", 2, "answered", 6))
    with held(demo(dialect), schedule) as session:
        faults = [text for _, _, kind, text in session.marks if kind == "fault"]
        assert faults.count("the relay reconnected") == faults.count(
            "the upstream connection dropped; the relay reconnects") == 2   # the second drop at once: none
        assert faults[:2] == ["the upstream connection dropped; the relay reconnects", "the relay reconnected"]


@pytest.mark.parametrize("dialect", ["openai", "azure", "foundry", "xai"])
@pytest.mark.parametrize("attempt", [1, 6])
def test_a_call_being_made_when_the_connection_drops_is_answered_once(dialect: str, attempt: int) -> None:
    schedule = (Perturbation("reconnect", 1, "announced", attempt),)
    with held(demo(dialect), schedule) as session:
        entry = next(iter(session.engine.ledger))
        assert entry.state is CallState.ANSWERED
        asked = [json.loads(frame.raw)["item_id"] for frame in session.frames
                 if frame.direction == RELAY_TO_UPSTREAM and frame.raw and "conversation.item.retrieve\"" in frame.raw]
        if dialect != "xai":   # xAI's calls come whole in response.done: none is seen half made
            assert entry.item_id in asked   # (and the parallel call lost whole, which a later item names)


def test_a_call_withdrawn_only_in_frames_the_connection_lost_may_be_answered() -> None:
    """The window docs/guarantees.md names: the response's cancel went with the connection, and
    the call, complete when the relay asked for it, was answered; no other call's answer is
    excused."""
    schedule = (Perturbation("late_arguments", 4, "announced"), Perturbation("reconnect", 4, "announced", 1))
    with held(demo("openai"), schedule) as session:
        fourth = next(entry for number, entry in enumerate(
            [e for e in session.engine.ledger if e.relay_owned], start=1) if number == 4)
        assert fourth.state is CallState.ANSWERED
        assert session.unheard_withdrawals() == {fourth.call_id}


@pytest.mark.parametrize("dialect, schedule", [
    ("openai-beta", (Perturbation("done_first", 2, "running"), Perturbation("drop", 1, "running"),
                     Perturbation("reconnect", 2, "announced", 1))),
    ("xai", (Perturbation("done_first", 5, "running"), Perturbation("drop", 1, "running"),
             Perturbation("reconnect", 2, "announced", 1))),
])
def test_a_call_a_drop_left_half_made_is_owed_nothing_more(dialect: str, schedule: tuple[Perturbation, ...]) -> None:
    run = run_schedule(demo(dialect), schedule, keep=True)
    try:
        assert run.broken == [] and run.session.closed
        half_made = [entry for entry in run.session.engine.ledger
                     if entry.relay_owned and entry.state in (CallState.ANNOUNCED, CallState.STREAMING)]
        assert len(half_made) == 1   # the call whose item the relay asked for, the answer lost
    finally:
        run.session.close()
