"""Record a session through the real async edge, replay it: no divergence with the same tools;
a changed tool is reported with a diff. Every shared recording replays."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from relay.inspector.replay import replay_model
from relay.recording.format import RELAY_TO_UPSTREAM
from relay.offline.replay_play import recorded_end
from relay.recording.reader import read_recording
from relay.testing import replay
from relay.tools import ToolResult, tool
from tests.support.engine import DeadlineStuckInThePast, StuckEngines
from tests.support.paths import REPO, shared_dir
from tests.support.peers import record_session
from tests.support.tools import get_weather_data


@tool
def lookup_order(order_id: str) -> dict:
    if order_id == "missing":
        raise LookupError("no such order")
    return {"order_id": order_id, "status": "shipped"}


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    return anyio.run(record_session, tmp_path, [get_weather_data, lookup_order])


def test_replay_with_the_same_tools_has_no_divergence(recorded: Path) -> None:
    result = replay(recorded, [get_weather_data, lookup_order])
    assert result.ok, [d.describe() for d in result.divergences]
    assert [c.name for c in result.calls] == ["get_weather", "get_weather", "lookup_order"]
    assert [c.outcome for c in result.calls] == ["ok", "ok", "error"]
    assert all(c.output == c.recorded_output for c in result.calls)
    assert all(c.follow_up_response_id for c in result.calls)
    outputs = [e for e in result.sent if e["type"] == "conversation.item.create"]
    assert len(outputs) == 3 and len([e for e in result.sent if e["type"] == "response.create"]) == 1


def test_a_deadline_a_tick_does_not_move_is_logged_and_not_fired_again(
        recorded: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # without the guard replay fires it again without moving virtual time, for as long as it
    # stays put (here STUCK_FOR asks; with a real bug, forever)
    engines = StuckEngines()
    monkeypatch.setattr("relay.offline.replay.new_engine", engines)
    # due within the recorded session (a replay fires no timer due after the recording's end)
    monkeypatch.setattr(DeadlineStuckInThePast, "DEADLINE", read_recording(recorded).frames[1].t)
    replay(recorded, [get_weather_data, lookup_order])
    assert engines.made[0].ticks == 1
    assert [r.message for r in caplog.records if r.levelname == "ERROR"] == [
        "the engine kept a deadline its tick did not move; ignoring it"]


def test_a_changed_tool_output_is_reported_with_a_diff(recorded: Path) -> None:
    @tool(name="get_weather")
    def warmer(city: str) -> dict:
        return {"city": city, "temp_c": 25}

    result = replay(recorded, [warmer, lookup_order])
    assert not result.ok
    changed = [d for d in result.divergences if d.kind == "changed"]
    assert len(changed) == 2 and all(d.what.startswith("output of call_") for d in changed)
    assert '-      "temp_c": 21' in changed[0].diff and '+      "temp_c": 25' in changed[0].diff


def test_a_divergence_carries_its_call_and_when_it_happened_and_the_page_marks_it_there(recorded: Path) -> None:
    @tool(name="get_weather")
    def warmer(city: str) -> dict:
        return {"city": city, "temp_c": 25}

    recording = read_recording(recorded)
    output_sent_at = {frame.event["item"]["call_id"]: frame.t for frame in recording.frames
                      if frame.direction == RELAY_TO_UPSTREAM and frame.event is not None
                      and frame.event.get("type") == "conversation.item.create"
                      and frame.event["item"]["type"] == "function_call_output"}
    result = replay(recording, [warmer, lookup_order])
    changed = [d for d in result.divergences if d.kind == "changed"]
    assert [(d.call_id, d.t) for d in changed] == [(call_id, output_sent_at[call_id]) for call_id in
                                                   (d.what.removeprefix("output of ") for d in changed)]
    marks = [e for e in replay_model(recording, result).snapshot()["events"] if e["kind"] == "divergence"]
    assert [(m["related"], m["t0"]) for m in marks] == [(f"call:{d.call_id}", round(d.t, 6)) for d in changed]


def test_a_missing_follow_up_and_an_extra_output_name_their_call(tmp_path: Path, recorded: Path) -> None:
    missing = replay(recorded, [get_weather_data])
    [follow_up] = [d for d in missing.divergences if d.kind == "missing" and "follow-up" in d.what]
    assert follow_up.call_id == follow_up.what.split(" for ")[1].split(",")[0] and follow_up.t is not None
    path = anyio.run(lambda: record_session(tmp_path, [get_weather_data], creates=0))
    extra = replay(path, [get_weather_data, lookup_order])
    outputs = [d for d in extra.divergences if d.kind == "extra" and "output" in d.what]
    assert outputs and all(d.what == f"output of {d.call_id}" for d in outputs)
    last = read_recording(path).frames[-1].t
    assert all(d.t is not None and 0 <= d.t <= last for d in outputs)


def test_a_missing_tool_is_reported_as_missing_sends(recorded: Path) -> None:
    result = replay(recorded, [get_weather_data])
    kinds = sorted((d.kind, d.what.split(" ")[0]) for d in result.divergences)
    assert ("missing", "output") in kinds
    # without lookup_order the call belongs to the client: the relay leaves the follow-up too
    assert any(d.kind == "missing" and "follow-up" in d.what for d in result.divergences)


def test_an_extra_send_is_reported(tmp_path: Path) -> None:
    # lookup_order was the client's then: no follow-up from the relay
    path = anyio.run(lambda: record_session(tmp_path, [get_weather_data], creates=0))
    result = replay(path, [get_weather_data, lookup_order])
    assert any(d.kind == "extra" and "output" in d.what for d in result.divergences)


def test_cli_exit_codes_and_report(recorded: Path, tmp_path: Path) -> None:
    tools_file = tmp_path / "same_tools.py"
    tools_file.write_text(
        "from relay import tool\n"
        "@tool\ndef get_weather(city: str) -> dict:\n    return {'city': city, 'temp_c': 21}\n"
        "@tool\ndef lookup_order(order_id: str) -> dict:\n"
        "    if order_id == 'missing':\n        raise LookupError('no such order')\n"
        "    return {'order_id': order_id, 'status': 'shipped'}\n")
    command = [sys.executable, "-m", "relay", "replay", str(recorded), "--tools", str(tools_file)]
    same = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=60)
    assert same.returncode == 0, same.stderr
    assert "verdict: no divergence" in same.stdout and "get_weather" in same.stdout
    tools_file.write_text(tools_file.read_text().replace("'temp_c': 21", "'temp_c': 30"))
    changed = subprocess.run(command + ["--json"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert changed.returncode == 1
    report = json.loads(changed.stdout)
    assert not report["ok"] and {d["kind"] for d in report["divergences"]} == {"changed"}


def test_a_truncated_recording_replays_up_to_its_last_line(recorded: Path, tmp_path: Path) -> None:
    data = recorded.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    result = replay(cut, [get_weather_data, lookup_order])
    assert result.warnings and any("line" in w for w in result.warnings)
    assert result.engine.ledger  # it got somewhere


RECORDINGS = sorted((shared_dir() / "recordings").glob("*.jsonl"))


@pytest.mark.parametrize("path", RECORDINGS, ids=lambda p: p.stem)
def test_every_shared_recording_replays(path: Path) -> None:
    result = replay(path)
    assert result.kind == "event-log" and result.ok
    assert not result.internal_errors


def test_banyan_transfer_runs_only_with_a_tool_of_that_name() -> None:
    path = next(p for p in RECORDINGS if p.name.startswith("banyan-landing_log1"))
    without = replay(path)
    assert without.calls == []
    assert [e.name for e in without.engine.ledger] == ["transferToSupervisor"]

    @tool
    def transferToSupervisor(destination_agent_name: str, reason: str, urgency: str = "",
                             summary: str = "") -> ToolResult:
        return ToolResult(result={"transferred_to": destination_agent_name})

    with_tool = replay(path, [transferToSupervisor])
    [call] = with_tool.calls
    assert call.outcome == "ok" and json.loads(call.output) == {"transferred_to": "marco_supervisor_biller"}
    [output] = [e for e in with_tool.sent if e["type"] == "conversation.item.create"]
    assert output["item"]["call_id"] == call.call_id


@tool(name="book")
def book(ref: str) -> dict:
    """Books a table."""
    return {"ref": ref}


@tool(name="book", on_start="One moment.")
def book_with_filler(ref: str) -> dict:
    """Books a table."""
    return {"ref": ref}


def booked(tmp_path: Path, tools: list) -> Path:
    from relay.testing import Script, Turn, call

    script = Script(Turn(calls=[call("book", ref="BK0001", call_id="call_book1")]), Turn(say="Booked."))
    with script.start(tools) as session:
        session.user("Book it")
        session.advance(1)
    return session.save(tmp_path)


def test_a_filler_the_recording_never_answered_is_answered_and_reported_once(tmp_path: Path) -> None:
    path = booked(tmp_path, [book])
    result = replay(path, [book_with_filler])
    assert [d.describe() for d in result.divergences] == ["extra: filler response for call_book1"]
    # answered at once, as a provider would: the follow-up goes when it went in the recording
    assert follow_ups(result.frames) == follow_ups(read_recording(path).frames)


def follow_ups(frames: list) -> list[float]:
    """When the relay asked for a follow-up response, in seconds into the session."""
    sent = [(f.t, f.event or json.loads(f.raw)) for f in frames if f.direction == RELAY_TO_UPSTREAM]
    return [t for t, event in sent if event.get("type") == "response.create"
            and event["response"]["metadata"]["relay"] == "follow_up"]


def test_a_request_sent_again_is_one_divergence(tmp_path: Path) -> None:
    # the recording ends as the filler is sent: its answer never comes, and the relay sends it again
    path = booked(tmp_path, [book_with_filler])
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"filler"' in line and "response.create" in line)
    path.write_text("".join(lines[:at + 1]))
    result = replay(path, [book_with_filler])
    sent = [e for e in result.sent if e["type"] == "response.create" and e["response"]["metadata"]["relay"] == "filler"]
    assert len(sent) > 1 and len({e["event_id"] for e in sent}) == 1
    assert [d.what for d in result.divergences if "filler" in d.what] == ["filler response for call_book1"]


def test_a_follow_up_a_plain_event_log_never_answered_is_answered_and_reported_once() -> None:
    path = next(p for p in RECORDINGS if p.name.startswith("realtime-notes-idx1781683788"))
    result = replay(path, [str(REPO / "tests" / "fixtures" / "shared_recording_tools.py")])
    assert sorted(d.describe().split(" for ")[0] for d in result.divergences if d.kind == "extra") == [
        "extra: follow-up response", "extra: output of call_fTuC8D7u141uOgDt"]
    assert len([e for e in result.sent if e["type"] == "response.create"]) == 1


def test_a_recorded_end_counts_only_when_it_comes_after_everything_recorded(recorded: Path) -> None:
    recording = read_recording(recorded)
    last = max([frame.t for frame in recording.frames] + [note.t for note in recording.notes])
    assert recorded_end(recording) == recording.end_t and recording.end_t >= last
    # an end line before the last frame (the harness wrote 0 there) says nothing of the end
    assert recorded_end(dataclasses.replace(recording, end_t=0.0)) is None
    assert recorded_end(dataclasses.replace(recording, end=None, end_t=None)) is None
