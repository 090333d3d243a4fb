"""The sans-I/O core on its own: no sockets, no event loop, every cancellation point."""

from __future__ import annotations

from collections import defaultdict

import pytest

from relay.mock import Faults, MockScript, Rule, ToolCall
from relay.mock.responses import Pause
from relay.mock.session import Emit, MockSession, Stream, Wake
from relay.mock.wire import Wire
from tests.mock.conftest import TIME_TOOL, WEATHER_TOOL, check_event

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
