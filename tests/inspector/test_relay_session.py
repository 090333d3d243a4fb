"""A real session through `relay serve` (the mock upstream on 127.0.0.1, the client sending
microphone audio, the model answering with audio and calling a relay tool): its recording opens
in the inspector with both sides' audio as long as the recording holds, and the call with its
output; in Chromium the players last as long as that audio."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from relay.inspector import build_model
from relay.recording.reader import read_recording
from relay.tools import tool
from tests.inspector import synth
from tests.support.browser import (
    make_page,
    open_page,
    page_errors,
    screenshot,
    wait_for,
)
from tests.support.clients import realtime_client
from tests.support.keys import PROVIDER_KEY
from tests.support.relays import relay_for
from tests.support.tools import WEATHER_SCRIPT


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny and 21 degrees in {city}"


@pytest.fixture
async def voice_recording(tmp_path: Path) -> Path:
    from relay.mock import MockUpstream

    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, tools=[get_weather], record_dir=tmp_path) as server:
        async with realtime_client(server) as client:
            await client.send({"type": "session.update", "session": {"type": "realtime", "output_modalities": ["audio"]}})
            await client.wait_type("session.updated")
            chunk = base64.b64encode(synth.tone(0.1, 24000)).decode()
            for _ in range(10):                                   # 1 s of microphone audio
                await client.send({"type": "input_audio_buffer.append", "audio": chunk})
            await client.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather in Paris?"}]}})
            await client.send({"type": "response.create"})
            await client.wait_type("response.done")
            await client.wait_type("response.done")               # the follow-up the relay asked for
        session = next(iter(server.sessions.values()), None)
        if session is not None:
            await session.wait_closed()
    [recording] = tmp_path.glob("*.jsonl")
    return recording


def recorded_seconds(path: Path) -> dict[str, float]:
    """Each side's audio in the recording, counted from its frames alone (24 kHz PCM16)."""
    seconds = {"caller": 0.0, "assistant": 0.0}
    for frame in read_recording(path).frames:
        event = frame.event or {}
        if frame.direction == "client>relay" and event.get("type") == "input_audio_buffer.append":
            seconds["caller"] += len(base64.b64decode(event["audio"])) / 48000
        elif frame.direction == "upstream>relay" and event.get("type") == "response.output_audio.delta":
            seconds["assistant"] += len(base64.b64decode(event["delta"])) / 48000
    return seconds


async def test_a_relay_session_with_audio_and_a_call_opens_in_the_inspector(voice_recording: Path) -> None:
    expected = recorded_seconds(voice_recording)
    assert expected["caller"] == pytest.approx(1.0) and expected["assistant"] > 0
    snapshot = build_model(read_recording(voice_recording), strict=True).snapshot(audio_data=False)
    for side in ("caller", "assistant"):
        part = snapshot["audio"][side]
        assert part["playable"] and part["samples"] / part["rate"] == pytest.approx(expected[side], rel=0.001)
    [call] = [e for e in snapshot["events"] if e["kind"] == "call"]
    assert (call["name"], call["outcome"], call["output"]) == ("get_weather", "ok", "sunny and 21 degrees in Paris")
    assert call["end_to_end_ms"] is not None and call["answered_by"]
    assert [e["kind"] for e in snapshot["events"] if e["lane"] == "relay"].count("follow_up") == 1
    assert call["hidden"] and [e for e in snapshot["events"] if e.get("call") == call["id"]] == []


def test_its_players_last_as_long_as_the_recorded_audio(browser: Any, voice_recording: Path, tmp_path: Path,
                                                        artifacts: Path) -> None:
    expected = recorded_seconds(voice_recording)
    page = make_page(voice_recording, tmp_path / "voice.html")
    open_page(browser, page)
    for side in ("caller", "assistant"):
        duration = wait_for(browser, f"const p = document.getElementById('player-{side}');"
                                     " return p.src && isFinite(p.duration) && p.duration > 0 ? p.duration : false")
        assert duration == pytest.approx(expected[side], rel=0.01), side
    screenshot(browser, artifacts, "relay-session-with-audio")
    assert page_errors(browser) == []
