"""GPT-Live recordings made through `relay serve --record` against the GPT-Live mock, with the
official SDK as the client (tests/live/test_live_mock.py's conversation), read back: the timeline
and the inspector show the delegations, the appends and their acknowledgements, a Responses
batch's calls, outputs and its one `response.create`; the export writes the calls (a client
delegation as a call named `delegation`) with their answers; replay runs the handlers again and
sends the same outputs and appends, and a changed one is a divergence (`relay replay` exits 1, the
pytest plugin's item fails)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from relay.cli import main
from relay.inspector.model import build_model
from relay.mock import MockUpstream
from relay.offline.expect import violations
from relay.offline.export import FORMATS, export_recording
from relay.offline.replay import replay_async
from relay.offline.replay_result import render_report
from relay.offline.timeline import Timeline
from relay.recording.format import RELAY_TO_UPSTREAM
from relay.recording.reader import read_recording
from relay.tools import Delegation, ToolResult, delegate, tool
from tests.live.test_live_mock import SCRIPT, assistant, conversation, get_time, get_weather
from tests.support.relays import relay_for

pytest_plugins = ["pytester"]
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
    return await record(tmp_path / "responses", RESPONSES, [get_weather, get_time], answered="response.create", says="Here it is")


@pytest.fixture
async def client_recording(tmp_path: Path) -> Path:
    return await record(tmp_path / "client", CLIENT, [get_weather, assistant], answered="session.commentary.append",
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


def test_export_writes_the_batch_and_the_delegation_as_calls_with_their_answers(
        responses_recording: Path, client_recording: Path) -> None:
    chat = export_recording(responses_recording, "openai-chat").document["messages"]
    assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "assistant"]
    assert chat[0]["content"] == "What's the weather in Paris?"
    calls = chat[1]["tool_calls"]
    assert sorted(c["function"]["name"] for c in calls) == ["get_time", "get_weather"]
    assert [m["tool_call_id"] for m in chat[2:4]] == [c["id"] for c in calls], "each answer after its call, in order"
    assert sorted(m["content"] for m in chat[2:4]) == ["noon in Paris", "sunny in Paris"]
    assert "Here it is" in chat[4]["content"], "the words after the answers come after them"
    for format in FORMATS:
        assert export_recording(responses_recording, format).report == []

    vapi = export_recording(client_recording, "vapi").document["results"]
    assert [(r["name"], r["result"], r["message"]["content"]) for r in vapi] == [
        ("delegation", "forecast for Paris It is sunny in Paris.", "It is sunny in Paris.")]


@tool(name="get_weather")
def rainy_weather(city: str) -> str:
    """Current weather in a city (changed: it rains)."""
    return f"rainy in {city}"


@delegate(timeout=5)
def gloomy_assistant(delegation: Delegation) -> ToolResult:
    """Answers the caller from the transcript (changed: it rains)."""
    return ToolResult(result="forecast: rain", message="It is rainy.")


async def test_replay_runs_the_handlers_again_and_sends_the_same_outputs_and_appends(
        responses_recording: Path, client_recording: Path) -> None:
    for path, tools in ((responses_recording, [get_weather, get_time]), (client_recording, [get_weather, assistant])):
        first, second = [await replay_async(path, tools) for _ in range(2)]
        assert first.divergences == [] and second.divergences == [], render_report(first)
        recorded = [f.event for f in read_recording(path).frames if f.direction == RELAY_TO_UPSTREAM and f.event]
        sent = own(recorded, read_recording(path).header["id_prefix"])
        assert sent, "the relay's outputs or appends were recorded"
        # the same sends each time (parallel handlers may finish in either order: compared as sets)
        assert own(first.sent, first.engine.id_prefix) == own(second.sent, second.engine.id_prefix) == sent
    outputs = {call.name: call.output for call in first.calls}
    assert outputs == {"assistant": "forecast for Paris"}


async def test_replay_reports_a_changed_output_or_append_as_a_divergence(
        responses_recording: Path, client_recording: Path) -> None:
    changed = await replay_async(responses_recording, [rainy_weather, get_time])
    (divergence,) = changed.divergences
    assert divergence.kind == "changed" and divergence.call_id is not None and "rainy in Paris" in divergence.diff
    changed = await replay_async(client_recording, [get_weather, gloomy_assistant])
    assert [d.kind for d in changed.divergences] == ["changed", "changed"]
    assert "forecast: rain" in changed.divergences[0].diff and "It is rainy." in changed.divergences[1].diff


def test_relay_replay_exits_1_on_a_divergence(responses_recording: Path, tmp_path: Path, capsys: Any) -> None:
    tools = tmp_path / "changed_tools.py"
    tools.write_text(CHANGED_TOOLS)
    assert main(["replay", str(responses_recording), "--tools", str(tools)]) == 1
    assert "changed: output of" in capsys.readouterr().out
    assert main(["replay", str(responses_recording), "--tools", "tests/live/test_live_mock.py"]) == 0


def test_the_pytest_plugin_replays_a_live_recording_as_its_own_item(
        responses_recording: Path, pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    recordings = pytester.mkdir("recordings")
    shutil.copy(responses_recording, recordings / "live_session.jsonl")
    pytester.makepyfile(tools=RECORDED_TOOLS, changed=CHANGED_TOOLS)
    quiet = ("-p", "no:hypothesispytest", "-p", "no:cacheprovider")
    passed = pytester.runpytest(*quiet, "--relay-recordings", "recordings", "--relay-tools", "tools.py", "-v")
    passed.assert_outcomes(passed=1)
    passed.stdout.fnmatch_lines(["recordings/live_session.jsonl::replay PASSED*"])
    failed = pytester.runpytest(*quiet, "--relay-recordings", "recordings", "--relay-tools", "changed.py")
    failed.assert_outcomes(failed=1)
    failed.stdout.fnmatch_lines(["*changed: output of call_*", '*+*"output": "rainy in Paris"*'])


RECORDED_TOOLS = """\
from tests.live.test_live_mock import get_time, get_weather
"""
CHANGED_TOOLS = """\
from tests.live.test_live_mock import get_time
from tests.live.test_live_recordings import rainy_weather
"""


def own(events: list[dict[str, Any]], id_prefix: str) -> list[str]:
    """The relay's own sends among `events` (by the event ids it chose), without those ids, as
    sorted JSON texts."""
    return sorted(json.dumps({k: v for k, v in e.items() if k != "event_id"}, sort_keys=True) for e in events
                  if str(e.get("event_id", "")).startswith(f"{id_prefix}_e"))
