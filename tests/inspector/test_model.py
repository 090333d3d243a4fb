"""The inspector's model: calls, latencies, lanes, dialects, audio formats and the page built
from every recording we have (no browser here; see test_browser.py)."""

from __future__ import annotations

import base64
import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from relay.inspector import (
    LANES,
    SessionModel,
    build_model,
    recording_dialect,
    render_page,
)
from relay.inspector.audio import (
    ALAW_TO_LINEAR,
    ULAW_TO_LINEAR,
    AudioFormat,
    SideAudio,
    mime_format,
    mulaw_encode,
    openai_format,
    page_rate,
)
from relay.recording.format import Frame
from relay.recording.reader import read_recording
from tests.inspector import synth
from tests.support.paths import shared_dir


def events_of(snapshot: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in snapshot["events"] if e["kind"] == kind and not e.get("gone")]


@pytest.fixture
def openai(tmp_path: Path) -> tuple[synth.Facts, dict[str, Any]]:
    facts = synth.openai_session(tmp_path)
    return facts, build_model(read_recording(facts.path), strict=True).snapshot()


# ---- calls, responses, the relay's own requests --------------------------------------------
def test_every_call_has_its_arguments_output_outcome_and_times(openai: Any) -> None:
    facts, model = openai
    calls = {e["call_id"]: e for e in events_of(model, "call")}
    assert set(calls) == set(facts.calls)
    for call_id, expected in facts.calls.items():
        call = calls[call_id]
        assert call["name"] == expected["name"] and json.loads(call["arguments"]) == expected["arguments"]
        assert call["output"] == expected["output"] and call["outcome"] == expected["outcome"]
        assert call["owner"] == "relay" and call["lane"] == "calls"
    weather = calls["call_1"]
    assert weather["response_id"] == "resp_1" and weather["answered_by"] == "resp_2"
    assert weather["status"] == "completed" and weather["output_item_id"] == "rs_test_i1"
    assert weather["handler_ms"] == pytest.approx(400, abs=5)        # ready at 1.6, output at 2.0
    assert weather["end_to_end_ms"] == pytest.approx(500, abs=5)     # ... the answer's audio at 2.1
    assert calls["call_2"]["status"] == "incomplete" and calls["call_2"]["handler_ms"] == pytest.approx(5100, abs=5)


def test_summary_counts_calls_per_tool_with_p50_and_max_latency(openai: Any) -> None:
    _, model = openai
    summary = model["summary"]
    assert summary["calls"] == 2 and summary["responses"] == 3 and summary["turns"] == 1
    assert summary["tools"]["get_weather"] == {"calls": 1, "errors": 0, "unanswered": 0,
                                               "p50_ms": pytest.approx(400, abs=5), "max_ms": pytest.approx(400, abs=5)}
    assert summary["tools"]["slow_lookup"]["errors"] == 1
    assert summary["anomalies"] == 2 and summary["errors"] == 3
    assert summary["duration"] == pytest.approx(8.0, abs=0.01)      # the end line, 0.3 s after the last frame


def test_p50_is_the_median_of_the_handler_times() -> None:
    model = SessionModel(header={"format": "relay-recording", "tools": ["f"], "dialect": "openai"})
    t = 0.0
    for number, handler_seconds in enumerate((0.1, 0.3, 0.2, 0.9)):
        call_id = f"c{number}"
        for direction, event in (
            ("upstream>relay", {"type": "response.output_item.done", "response_id": "r", "item": {
                "type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}", "status": "completed"}}),
            ("relay>upstream", {"type": "conversation.item.create", "item": {
                "type": "function_call_output", "call_id": call_id, "output": "x"}}),
        ):
            model.feed(Frame(t, direction, event, None, None, 1))
            t += handler_seconds
    tool = model.summary()["tools"]["f"]
    assert tool["p50_ms"] == pytest.approx(250) and tool["max_ms"] == pytest.approx(900)


def test_lanes_hold_responses_calls_fillers_follow_ups_anomalies_and_words(openai: Any) -> None:
    _, model = openai
    assert [lane["id"] for lane in model["lanes"]] == [lane for lane, _ in LANES]
    by_lane: dict[str, list[dict[str, Any]]] = {}
    for event in model["events"]:
        by_lane.setdefault(event["lane"], []).append(event)
    assert {e["response_id"]: (e["status"], e["creator"]) for e in by_lane["responses"]} == {
        "resp_1": ("completed", "server"), "resp_2": ("completed", "relay follow-up"), "resp_3": ("completed", "server")}
    relay = {e["kind"]: e for e in by_lane["relay"]}
    assert relay["follow_up"]["call_ids"] == ["call_1"] and relay["follow_up"]["response_id"] == "resp_2"
    assert relay["filler"]["label"] == "filler (on_delay) for slow_lookup" and relay["filler"]["refused"]
    assert relay["declare"]["tools"] == ["get_weather", "slow_lookup"]
    anomalies = [e["label"] for e in by_lane["anomalies"]]
    assert any("relay refused a client frame: relay_owned_call" in a for a in anomalies)
    assert any("upstream refused the relay's filler: conversation_already_has_active_response" in a for a in anomalies)
    # a call the client never saw says so itself: no lane repeats the calls lane to say it
    assert "hidden" not in by_lane and "hidden" not in [lane["id"] for lane in model["lanes"]]
    assert {e["call_id"]: e["hidden"] for e in by_lane["calls"]} == {"call_1": True, "call_2": True}
    words = {(e["role"], e["text"]) for e in by_lane["user_words"] + by_lane["assistant_words"]}
    assert words == {("user", "What's the weather in Paris?"), ("assistant", "Let me check."),
                     ("assistant", "It is 21 degrees in Paris.")}


def test_an_events_frames_are_its_own_in_every_direction_with_audio_left_out(openai: Any) -> None:
    _, model = openai
    call = next(e for e in events_of(model, "call") if e["call_id"] == "call_1")
    frames = [model["frames"][i] for i in call["frames"]]
    assert {f[1] for f in frames} == {"upstream>relay", "relay>upstream", "client>relay"}
    assert all("call_1" in f[2] for f in frames)
    texts = " ".join(f[2] for f in model["frames"])
    assert "input_audio_buffer.append" not in texts and "output_audio.delta" not in texts
    assert model["source"]["audio_frames"] == 2 * (30 + 15)          # each crossed two sockets


def test_a_held_client_create_shows_in_the_relay_lane() -> None:
    model = SessionModel(header={"format": "relay-recording", "tools": ["f"], "dialect": "openai", "id_prefix": "p"})
    frames = [
        (0.0, "client>relay", {"type": "response.create"}),
        (0.1, "upstream>relay", {"type": "response.output_item.done", "response_id": "r1", "item": {
            "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "status": "completed"}}),
        (0.2, "relay>upstream", {"type": "conversation.item.create", "event_id": "p_e1", "item": {
            "type": "function_call_output", "call_id": "c1", "output": "ok"}}),
        (0.2, "relay>upstream", {"type": "response.create"}),
        (0.3, "upstream>relay", {"type": "response.created", "response": {"id": "r2", "conversation_id": "c"}}),
    ]
    for t, direction, event in frames:
        model.feed(Frame(t, direction, event, None, None, 1))
    snapshot = model.snapshot()
    [held] = events_of(snapshot, "held")
    assert (held["t0"], held["t1"]) == (0.0, 0.2)
    assert next(e for e in events_of(snapshot, "response"))["creator"] == "client"


# ---- incremental ---------------------------------------------------------------------------
def apply(state: dict[str, Any], delta: dict[str, Any]) -> None:
    """What the page's append(delta) does, in Python."""
    frames = state.setdefault("frames", [])
    frames[delta["frames_from"]:] = delta["frames"]
    for event in delta["events"]:
        state.setdefault("events", {})[event["id"]] = json.loads(json.dumps(event))
    for side, part in delta["audio"].items():
        track = state.setdefault("audio", {}).setdefault(side, {"segments": [], "levels": b"", "data": b""})
        track["segments"][part["segments_from"]:] = part["segments"]
        track["levels"] = track["levels"][:part["levels_from"]] + base64.b64decode(part["levels"])
        track["data"] = track["data"] + base64.b64decode(part["data"])
    state["summary"] = delta["summary"]


def test_deltas_fed_frame_by_frame_add_up_to_the_snapshot(tmp_path: Path) -> None:
    recording = read_recording(synth.openai_session(tmp_path).path)
    live = SessionModel(name=recording.path.name, header=recording.header, strict=True)
    state: dict[str, Any] = {}
    for line in sorted([*recording.frames, *recording.notes], key=lambda line: line.line_no):
        if isinstance(line, Frame):   # the live view gets the frames and, beside them, the relay's notes
            live.feed(line)
        else:
            live.note(line)
        apply(state, live.delta())
    live.finish(recording.end, end_t=recording.end_t)   # when the session ended, as the live hub tells it
    apply(state, live.delta())
    whole = build_model(recording, strict=True)
    snapshot = whole.snapshot()
    assert state["frames"] == snapshot["frames"]
    assert state["events"] == {e["id"]: e for e in snapshot["events"]}
    assert state["summary"] == snapshot["summary"]
    for side in ("caller", "assistant"):
        assert state["audio"][side]["segments"] == snapshot["audio"][side]["segments"]
        assert state["audio"][side]["levels"] == base64.b64decode(snapshot["audio"][side]["levels"])
        assert state["audio"][side]["data"] == whole.audio_bytes(side)


def test_a_delta_carries_only_what_changed() -> None:
    model = SessionModel(header={"format": "relay-recording", "tools": [], "dialect": "openai"})
    model.feed(Frame(0.0, "upstream>relay", {"type": "response.created", "response": {"id": "r1"}}, None, None, 1))
    first = model.delta()
    assert [e["id"] for e in first["events"]] == ["response:r1"] and len(first["frames"]) == 1
    assert model.delta()["events"] == [] and model.delta()["frames"] == []
    model.feed(Frame(0.5, "upstream>relay", {"type": "response.done", "response": {"id": "r1", "status": "cancelled"}},
                     None, None, 2))
    changed = model.delta()
    assert [(e["id"], e["status"]) for e in changed["events"]] == [("response:r1", "cancelled")]
    assert changed["frames_from"] == 1


# ---- dialects and audio formats -----------------------------------------------------------
def test_the_dialect_comes_from_the_header_else_from_the_first_event() -> None:
    assert recording_dialect({"dialect": "foundry"}, {"type": "session.created"}) == "foundry"
    assert recording_dialect(None, {"setupComplete": {}}) == "gemini"
    assert recording_dialect(None, {"tool_call": {"function_calls": []}}) == "gemini"
    assert recording_dialect(None, {"type": "response.created"}) == "openai"
    assert recording_dialect({}, None) == "openai"


@pytest.mark.parametrize("session, side, expected", [
    ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}}, "input", AudioFormat("pcm16", 24000)),
    ({"audio": {"output": {"format": {"type": "audio/pcmu"}}}}, "output", AudioFormat("mulaw", 8000)),
    ({"audio": {"input": {"format": {"type": "audio/pcma"}}}}, "input", AudioFormat("alaw", 8000)),
    ({"input_audio_format": "g711_ulaw"}, "input", AudioFormat("mulaw", 8000)),
    ({"output_audio_format": "g711_alaw"}, "output", AudioFormat("alaw", 8000)),
    ({"output_audio_format": "pcm16"}, "output", AudioFormat("pcm16", 24000)),
    ({"modalities": ["text"]}, "input", None),
])
def test_openai_session_formats_ga_and_beta(session: dict[str, Any], side: str, expected: AudioFormat | None) -> None:
    assert openai_format(session, side) == expected  # type: ignore[arg-type]


def test_gemini_rates_16_khz_in_24_khz_out_unless_the_mime_type_says_otherwise() -> None:
    from relay.inspector.audio import GEMINI_INPUT, GEMINI_OUTPUT

    assert (GEMINI_INPUT.rate, GEMINI_OUTPUT.rate) == (16000, 24000)
    assert mime_format("audio/pcm;rate=16000", GEMINI_OUTPUT) == AudioFormat("pcm16", 16000)
    assert mime_format("audio/pcm", GEMINI_OUTPUT) == GEMINI_OUTPUT
    assert mime_format(None, GEMINI_INPUT) == GEMINI_INPUT
    assert mime_format("audio/pcm; rate=8000", GEMINI_INPUT) == AudioFormat("pcm16", 8000)


def test_a_gemini_session_is_read_at_its_own_rates(tmp_path: Path) -> None:
    facts = synth.gemini_session(tmp_path)
    model = build_model(read_recording(facts.path), strict=True)
    snapshot = model.snapshot(audio_data=False)
    caller, assistant = snapshot["audio"]["caller"], snapshot["audio"]["assistant"]
    assert (caller["source"], caller["rate"]) == ("PCM16 16000 Hz", 16000)
    assert (assistant["source"], assistant["rate"]) == ("PCM16 24000 Hz", 12000)
    assert caller["samples"] / caller["rate"] == pytest.approx(facts.caller_seconds)
    assert assistant["samples"] / assistant["rate"] == pytest.approx(facts.assistant_seconds)
    calls = {e["call_id"]: e for e in events_of(snapshot, "call")}
    for call_id, expected in facts.calls.items():
        assert json.loads(calls[call_id]["arguments"]) == expected["arguments"]
        assert calls[call_id]["output"] == expected["output"] and calls[call_id]["outcome"] == expected["outcome"]
    assert snapshot["source"]["dialect"] == "gemini"
    assert [e["status"] for e in events_of(snapshot, "response")] == ["completed"]
    assert {e["text"] for e in events_of(snapshot, "words")} == {"Weather in Rome?", "Let me look."}


def test_g711_sessions_keep_8_khz_and_a_law_becomes_the_same_sound_in_mu_law(tmp_path: Path) -> None:
    facts = synth.g711_session(tmp_path)
    model = build_model(read_recording(facts.path), strict=True)
    snapshot = model.snapshot(audio_data=False)
    assert snapshot["audio"]["caller"]["source"] == "G.711 mu-law 8000 Hz"
    assert snapshot["audio"]["assistant"]["source"] == "G.711 A-law 8000 Hz"
    assert snapshot["audio"]["caller"]["samples"] == 16000 and snapshot["audio"]["assistant"]["samples"] == 4000
    original = bytes(range(0x40, 0x40 + 80))
    decoded = [ULAW_TO_LINEAR[b] for b in model.audio_bytes("assistant")[:80]]
    for page, alaw in zip(decoded, original):
        expected = ALAW_TO_LINEAR[alaw]
        assert abs(page - expected) <= max(16, abs(expected) // 16)


def test_g711_decode_tables_hold_the_standard_values() -> None:
    assert (ULAW_TO_LINEAR[0xFF], ULAW_TO_LINEAR[0x7F], ULAW_TO_LINEAR[0x00], ULAW_TO_LINEAR[0x80]) == (0, 0, -32124, 32124)
    assert (ALAW_TO_LINEAR[0xD5], ALAW_TO_LINEAR[0x55], ALAW_TO_LINEAR[0xAA], ALAW_TO_LINEAR[0x2A]) == (8, -8, 32256, -32256)
    assert all(mulaw_encode(ULAW_TO_LINEAR[b]) in (b, b ^ 0x80) for b in range(256))  # +0 and -0 meet


def test_g711_tables_match_the_reference_codec_where_python_still_has_it() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")
    every = bytes(range(256))
    assert list(ULAW_TO_LINEAR) == [int.from_bytes(audioop.ulaw2lin(bytes([b]), 2), "little", signed=True) for b in every]
    assert list(ALAW_TO_LINEAR) == [int.from_bytes(audioop.alaw2lin(bytes([b]), 2), "little", signed=True) for b in every]
    ramp = b"".join(s.to_bytes(2, "little", signed=True) for s in range(-32768, 32768, 7))
    assert bytes(mulaw_encode(int.from_bytes(ramp[i:i + 2], "little", signed=True))
                 for i in range(0, len(ramp), 2)) == audioop.lin2ulaw(ramp, 2)


def test_the_page_rate_divides_the_session_rate_down_to_the_limit() -> None:
    assert [page_rate(rate, 16000) for rate in (24000, 16000, 8000, 48000, 44100)] == [12000, 16000, 8000, 16000, 14700]
    assert page_rate(24000, 8000) == 8000 and page_rate(24000, 24000) == 24000


def test_side_audio_lays_chunks_after_each_other_from_their_arrival_and_restarts_on_barge_in() -> None:
    side = SideAudio("assistant", max_rate=24000)
    chunk = bytes(4800)                                     # 0.1 s of 24 kHz PCM16
    fmt = AudioFormat("pcm16", 24000)
    for _ in range(3):
        side.add(1.0, fmt, chunk)                           # a burst: queued one after another
    side.restart()
    side.add(1.15, fmt, chunk)                              # barge-in: plays from its arrival
    side.add(2.0, fmt, chunk)                               # after a gap: a new segment
    assert side.segments == [[1.0, 0, 7200], [1.15, 7200, 2400], [2.0, 9600, 2400]]
    assert side.seconds == pytest.approx(0.5)


def test_a_recording_without_audio_says_why_there_is_no_player(tmp_path: Path) -> None:
    facts = synth.openai_session(tmp_path, record_audio="drop")
    snapshot = build_model(read_recording(facts.path), strict=True).snapshot()
    assert "--record-audio drop" in snapshot["audio_note"]
    for side, seconds in (("caller", facts.caller_seconds), ("assistant", facts.assistant_seconds)):
        part = snapshot["audio"][side]
        assert not part["playable"] and part["data"] == ""
        assert part["samples"] / part["rate"] == pytest.approx(seconds, rel=0.01)   # the lanes still show it


# ---- every recording opens ---------------------------------------------------------------
def _recordings() -> list[Path]:
    try:
        return sorted((shared_dir() / "recordings").glob("*.jsonl"))
    except RuntimeError:
        return []


@pytest.mark.parametrize("path", _recordings(), ids=lambda p: p.stem)
def test_every_shared_recording_builds_a_model_and_a_page(path: Path) -> None:
    recording = read_recording(path)
    model = build_model(recording, strict=True)
    snapshot = model.snapshot()
    assert snapshot["source"]["kind"] == "event-log" and snapshot["frames"]
    calls = [e for e in snapshot["events"] if e["kind"] == "call"]
    raw_calls = {json.loads(line).get("call_id") for line in path.read_text().splitlines()
                 if line.strip() and "function_call_arguments.done" in line}
    assert raw_calls - {None} <= {c["call_id"] for c in calls}
    page = render_page(model)
    assert page.startswith("<!DOCTYPE html>") and "inspector-model" in page
    assert "<script src" not in page and "<link" not in page


def test_the_demo_recording_builds_a_model_and_a_page(demo_recording: Path) -> None:
    model = build_model(read_recording(demo_recording), strict=True)
    snapshot = model.snapshot()
    calls = events_of(snapshot, "call")
    assert [c["name"] for c in calls] == ["get_weather", "get_weather", "lookup_order", "lookup_order", "search_flights"]
    assert [c["outcome"] for c in calls] == ["ok", "ok", "ok", "error", "ok"]
    assert all(c["output"] and c["handler_ms"] is not None and c["end_to_end_ms"] is not None for c in calls)
    assert {e["kind"] for e in snapshot["events"] if e["lane"] == "relay"} >= {"follow_up", "filler", "declare"}
    assert snapshot["summary"]["turns"] == 4
    first = events_of(snapshot, "response")[0]       # asked for by the client, through the relay
    assert first["creator"] == "client"
    assert [snapshot["frames"][i][1] for i in first["frames"][:2]] == ["client>relay", "relay>upstream"]
    assert {snapshot["frames"][i][1] for i in first["frames"]} == {"client>relay", "relay>upstream",
                                                                   "upstream>relay", "relay>client"}
    assert first["frames"] == sorted(first["frames"])
    assert "no audio crossed the relay" in snapshot["audio_note"]
    assert "demo-provider-key" not in render_page(model)


def test_a_lower_audio_rate_makes_a_smaller_page_of_the_same_duration(tmp_path: Path) -> None:
    recording = read_recording(synth.openai_session(tmp_path).path)
    default, small = build_model(recording), build_model(recording, max_audio_rate=8000)
    assert (default.audio["caller"].rate, small.audio["caller"].rate) == (12000, 8000)
    assert len(small.audio_bytes("caller")) * 3 == len(default.audio_bytes("caller")) * 2
    assert small.audio["caller"].seconds == pytest.approx(default.audio["caller"].seconds) == pytest.approx(3.0)
    without = build_model(recording, embed_audio=False)
    assert without.audio_bytes("caller") == b"" and "--no-audio" in (without.audio_note() or "")
    assert len(render_page(without)) < len(render_page(small)) < len(render_page(default))
