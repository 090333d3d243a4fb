"""The sans-I/O core on its own: no sockets, no event loop, every cancellation point."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import pytest

from relay.mock import Faults, MockScript, Rule, ToolCall
from relay.mock.requests import Emit, Stream, Wake
from relay.mock.responses import Pause, ResponseRun
from relay.mock.session import MockSession
from relay.mock.wire import Wire, seed_ids
from tests.support.sdk import check_event
from tests.support.tools import TIME_TOOL, WEATHER_TOOL

SCRIPT = MockScript(
    rules=[
        Rule(
            match="go",
            say="Sure, checking.",
            calls=[ToolCall(name="get_weather", arguments={"city": "Oslo"}), ToolCall(name="get_time")],
        )
    ],
    options={"text_chunk_chars": 4, "argument_deltas": 3, "audio_chunks": 2},
)


def _session(wire: Wire) -> MockSession:
    session = MockSession(wire, SCRIPT, Faults(), "gpt-realtime")
    tools = {"tools": [WEATHER_TOOL, TIME_TOOL]} | ({} if wire.beta else {"type": "realtime"})
    session.handle({"type": "session.update", "session": tools}, 0)
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    session.handle({"type": "conversation.item.create", "item": item}, 0)
    return session


def _events(session: MockSession, cancel_after: int | None) -> list[dict]:
    (action,) = session.handle({"type": "response.create"}, 0)
    assert isinstance(action, Stream)
    events = []
    for step in action.run.steps():
        if isinstance(step, Pause):
            continue
        events.append(step)
        if len(events) == cancel_after:
            assert session.handle({"type": "response.cancel"}, 0) == [Wake(action.run)]
    return events


@pytest.mark.parametrize("wire", [Wire(), Wire(beta=True), Wire(foundry=True)], ids=["ga", "beta", "foundry"])
def test_every_cancellation_point_leaves_a_consistent_response(wire: Wire) -> None:
    total = len(_events(_session(wire), None))
    for cancel_after in range(1, total):
        session = _session(wire)
        events = _events(session, cancel_after)
        for event in events:
            check_event(event, beta=wire.beta, foundry=wire.foundry)
        done = events[-1]["response"]
        assert events[-1]["type"] == "response.done" and done["status"] == "cancelled"
        assert done["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
        opened = [e["item"]["id"] for e in events if e["type"] == "response.output_item.added"]
        closed = {e["item"]["id"]: e["item"]["status"] for e in events if e["type"] == "response.output_item.done"}
        assert list(closed) == opened, "every opened item is closed"
        assert [o["id"] for o in done["output"]] == opened
        statuses = [o["status"] for o in done["output"]]
        assert statuses == ["completed"] * (len(statuses) - 1) + ["incomplete"] or statuses == ["completed"] * len(
            statuses
        )
        streamed = defaultdict(str)
        for event in events:
            if event["type"] == "response.function_call_arguments.delta":
                streamed[event["item_id"]] += event["delta"]
        for event in (e for e in events if e["type"] == "response.function_call_arguments.done"):
            assert event["arguments"] == streamed[event["item_id"]]
        conversation = {i["id"]: i for i in session.items}
        assert all(conversation[o["id"]] == o for o in done["output"]), "the conversation holds the final items"
        assert session.active_response is None


def test_a_finished_response_cannot_be_cancelled() -> None:
    session = _session(Wire())
    events = _events(session, None)
    assert events[-1]["response"]["status"] == "completed"
    (error,) = session.handle({"type": "response.cancel", "event_id": "late"}, 3)
    assert isinstance(error, Emit) and error.to == 3
    assert error.event["error"]["code"] == "response_cancel_not_active" and error.event["error"]["event_id"] == "late"


def _steps_until_paused(run: ResponseRun) -> tuple[list[dict], Iterator[dict | Pause]]:
    """Step a stream in-process until it pauses for a release: its events and the stream."""
    stream, events = run.steps(), []
    for step in stream:
        if isinstance(step, Pause):
            return events, stream
        events.append(step)
    raise AssertionError("the stream never paused")


def _held_session(**reply: object) -> MockSession:
    script = SCRIPT.model_copy(update={"rules": (SCRIPT.rules[0].model_copy(update=reply),)})
    session = _session(Wire())
    session.script = script
    return session


def test_a_reply_held_before_done_streams_all_its_output_and_stays_active_until_released() -> None:
    session = _held_session(hold_before_done=True)
    (stream,) = session.handle({"type": "response.create"}, 0)
    run = stream.run
    events, rest = _steps_until_paused(run)
    assert [e["item"]["status"] for e in events if e["type"] == "response.output_item.done"] == ["completed"] * 3
    assert "response.done" not in [e["type"] for e in events]
    assert session.active_response is run, "complete calls, but the response is still in progress"
    (refused,) = session.handle({"type": "response.create", "event_id": "second"}, 0)
    assert refused.event["error"]["code"] == "conversation_already_has_active_response"
    run.release()
    [done] = [step for step in rest if not isinstance(step, Pause)]
    assert done["type"] == "response.done" and done["response"]["status"] == "completed"
    assert session.active_response is None


def test_a_cancel_while_held_before_done_ends_the_response_cancelled_with_its_items_complete() -> None:
    session = _held_session(hold_before_done=True)
    (stream,) = session.handle({"type": "response.create"}, 0)
    _, rest = _steps_until_paused(stream.run)
    assert session.handle({"type": "response.cancel"}, 0) == [Wake(stream.run)]
    [done] = [step for step in rest if not isinstance(step, Pause)]
    assert done["response"]["status"] == "cancelled"
    assert [o["status"] for o in done["response"]["output"]] == ["completed"] * 3


def test_the_hold_before_done_option_holds_every_response() -> None:
    session = _session(Wire())
    session.script = SCRIPT.model_copy(update={"options": SCRIPT.options.model_copy(update={"hold_before_done": True})})
    (stream,) = session.handle({"type": "response.create", "response": {"instructions": "Say exactly: Hi."}}, 0)
    events, _ = _steps_until_paused(stream.run)
    assert events[-1]["type"] == "response.output_item.done" and session.active_response is stream.run


def test_one_release_lets_a_response_held_twice_run_to_its_end() -> None:
    session = _held_session(hold=True, hold_before_done=True)
    (stream,) = session.handle({"type": "response.create"}, 0)
    _, rest = _steps_until_paused(stream.run)
    stream.run.release()
    remaining = list(rest)
    assert not [step for step in remaining if isinstance(step, Pause)]
    assert remaining[-1]["response"]["status"] == "completed"


def test_a_scripted_call_id_is_the_call_s_id_everywhere() -> None:
    calls = (ToolCall(name="get_weather", arguments={"city": "Oslo"}, call_id="call_oslo"), ToolCall(name="get_time"))
    session = _held_session(calls=calls)
    events = _events(session, None)
    ids = {e["item"]["call_id"] for e in events if e["type"] == "response.output_item.done"
           and e["item"]["type"] == "function_call"}
    assert "call_oslo" in ids and len(ids) == 2
    assert {e["call_id"] for e in events if e["type"] == "response.function_call_arguments.delta"} == ids
    output = {"type": "function_call_output", "call_id": "call_oslo", "output": "sunny"}
    (added, _) = session.handle({"type": "conversation.item.create", "item": output}, 0)
    assert added.event["type"] == "conversation.item.added"


def test_a_committed_user_turn_has_no_speech_events_and_carries_its_transcript() -> None:
    session = _session(Wire())
    actions = session.commit_user_turn("go, please")
    events = [action.event for action in actions]
    assert [e["type"] for e in events] == ["input_audio_buffer.committed", "conversation.item.added",
                                          "conversation.item.done",
                                          "conversation.item.input_audio_transcription.completed"]
    for event in events:
        check_event(event)
    assert events[-1]["transcript"] == "go, please"
    assert session.items[-1]["content"][0]["transcript"] == "go, please"
    assert session.script.reply_for(session.items, None, {}).calls, "the script reads the transcript"


def test_seeded_ids_repeat() -> None:
    def ids() -> list[str]:
        seed_ids(7)
        session = _session(Wire())
        return [e.get("item_id") or e.get("item", {}).get("id") for e in _events(session, None)]

    assert ids() == ids()
