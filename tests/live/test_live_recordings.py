"""GPT-Live recordings made through `relay serve --record` against the GPT-Live mock, with the
official SDK as the client (tests/live/test_live_mock.py's conversation), read back: the timeline
and the inspector show the delegations, the appends and their acknowledgements, a Responses
batch's calls, outputs and its one `response.create`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from relay.inspector.model import build_model
from relay.mock import MockUpstream
from relay.offline.expect import violations
from relay.offline.timeline import Timeline
from relay.recording.reader import read_recording
from tests.live.test_live_mock import SCRIPT, assistant, conversation, get_time, get_weather
from tests.support.relays import relay_for

RESPONSES = {"type": "responses", "responses": {"model": "gpt-5.4"}}
CLIENT = {"type": "client"}


async def record(directory: Path, delegation: dict[str, Any], tools: list[Any], *, answered: str, says: str) -> Path:
    """One conversation through `relay serve --record` against the mock; the recording's path."""
    async with MockUpstream(script=SCRIPT, dialect="live") as mock:
        async with relay_for(mock, path="/v1/live/sessions", dialect="live", tools=tools,
                             record_dir=str(directory)) as server:
            await conversation(mock, server.port, delegation, answered=answered, says=says)
    (path,) = directory.glob("*.jsonl")
    return path


@pytest.fixture
async def responses_recording(tmp_path: Path) -> Path:
    return await record(tmp_path, RESPONSES, [get_weather, get_time], answered="response.create", says="Here it is")


@pytest.fixture
async def client_recording(tmp_path: Path) -> Path:
    return await record(tmp_path, CLIENT, [get_weather, assistant], answered="session.commentary.append",
                        says="sunny in Paris")


def test_a_responses_recording_shows_the_batch_and_its_one_create(responses_recording: Path) -> None:
    recording = read_recording(responses_recording)
    assert recording.dialect.name == "live" and recording.end is not None and not recording.damage
    timeline = Timeline.from_recording(recording)
    calls = timeline.calls()
    assert sorted((c.name, c.by) for c in calls) == [("get_time", "relay"), ("get_weather", "relay")]
    outputs = {o.call_id: o for o in timeline.outputs()}
    assert {o.text for o in outputs.values()} == {"sunny in Paris", "noon in Paris"}
    assert all(o.by == "relay" and o.outcome == "ok" for o in outputs.values())
    (follow_up,) = timeline.of("follow_up")
    assert sorted(follow_up.call_ids) == sorted(c.call_id for c in calls)
    assert follow_up.index > max(o.index for o in outputs.values()), "the create after every output of the batch"
    assert timeline.of("user")[0].text == "What's the weather in Paris?"
    assert "Here it is" in (timeline.of("spoken")[-1].text or "")
    assert violations(timeline) == []

    model = build_model(recording, strict=True)
    snapshot = model.snapshot()
    events = snapshot["events"]
    call_events = [e for e in events if e["kind"] == "call"]
    assert sorted((e["name"], e["owner"], e["outcome"], e["hidden"]) for e in call_events) == [
        ("get_time", "relay", "ok", True), ("get_weather", "relay", "ok", True)]
    (create,) = [e for e in events if e["kind"] == "follow_up"]
    assert sorted(create["call_ids"]) == sorted(e["call_id"] for e in call_events)
    assert all(e["follow_up"] == create["id"] for e in call_events)
    assert [e["status"] for e in events if e["kind"] == "response"] == ["completed", "completed"]
    assert snapshot["summary"]["errors"] == 0 and model.warnings == []


def test_a_client_delegation_recording_shows_the_delegation_its_appends_and_their_acks(client_recording: Path) -> None:
    recording = read_recording(client_recording)
    timeline = Timeline.from_recording(recording)
    (call,) = timeline.calls()
    assert (call.name, call.by) == ("delegation", "relay")
    (answer,) = timeline.outputs()
    assert (answer.call_id, answer.by, answer.status, answer.outcome) == (
        call.call_id, "relay", "thinking+commentary", "ok")
    assert answer.text == "forecast for Paris It is sunny in Paris."
    acks = timeline.of("appended")
    assert [(a.call_id, a.status) for a in acks] == [(call.call_id, "thinking"), (call.call_id, "commentary")]
    assert all(a.text and a.text.startswith("placed at ") for a in acks)
    assert violations(timeline) == []

    model = build_model(recording, strict=True)
    events = model.snapshot()["events"]
    (delegation,) = [e for e in events if e["kind"] == "call"]
    assert (delegation["call_id"], delegation["owner"], delegation["outcome"], delegation["hidden"]) == (
        call.call_id, "relay", "ok", True)
    assert [a["channel"] for a in delegation["answers"]] == ["thinking", "commentary"]
    appends = [e for e in events if e["kind"] == "append"]
    assert [(a["channel"], a["content"], a["by"]) for a in appends] == [
        ("thinking", "forecast for Paris", "relay"), ("commentary", "It is sunny in Paris.", "relay")]
    for append in appends:   # open from when it went up to its acknowledgement, placed on the timeline
        assert append["t1"] is not None and append["t1"] > append["t0"]
        assert isinstance(append["start_ms"], int) and append["end_ms"] >= append["start_ms"]
