"""Replay's memory grows with a session's events, not its audio: a recording named by its path is
read twice a line at a time, the first pass keeping no audio payload, the second playing each
frame as it is read; the session as replayed keeps no audio either. Counted, not timed: frames
alive at once, audio payloads held. The result is the one the in-memory path gives."""

from __future__ import annotations

import base64
import copy
import json
import weakref
from pathlib import Path
from typing import Any, Iterator

import anyio
import pytest

from relay.offline.timeline import Timeline
from relay.recording.audio import without_audio
from relay.recording.format import CLIENT_TO_RELAY, UPSTREAM_TO_RELAY, Frame, Recording
from relay.recording.reader import iter_frames, read_recording
from relay.testing import replay
from relay.tools import tool
from tests.gemini.test_gemini_replay_export import record_session as record_gemini_session
from tests.gemini.test_gemini_replay_export import ship
from tests.support.peers import record_session
from tests.support.tools import get_weather_data, track
from tests.test_replay import lookup_order


@tool(name="get_weather")
async def weather(city: str) -> dict:
    """Current weather for a city."""
    return get_weather_data(city)


@tool(name="lookup_order")
async def order(order_id: str) -> dict:
    return lookup_order(order_id)


# sessions recorded with these; replayed with async tools, which finish at the same point of
# every replay (a sync tool's thread finishes when it does)
RECORDED_WITH = [get_weather_data, lookup_order]
OPENAI_TOOLS = [weather, order]
GEMINI_TOOLS = [weather, ship, track]
AUDIO = base64.b64encode(bytes(range(256)) * 64).decode("ascii")   # 21,848 characters a frame


def openai_audio(direction: str) -> dict[str, Any]:
    if direction == UPSTREAM_TO_RELAY:
        return {"event": {"type": "response.output_audio.delta", "event_id": "event_audio", "response_id": "resp_a",
                          "item_id": "item_a", "output_index": 0, "content_index": 0, "delta": AUDIO}}
    return {"event": {"type": "input_audio_buffer.append", "audio": AUDIO}}


def gemini_audio(direction: str) -> dict[str, Any]:
    if direction == UPSTREAM_TO_RELAY:
        message = {"serverContent": {"modelTurn": {"parts": [{"inlineData": {"mimeType": "audio/pcm;rate=24000",
                                                                             "data": AUDIO}}]}}}
    else:
        message = {"realtimeInput": {"audio": {"mimeType": "audio/pcm;rate=16000", "data": AUDIO}}}
    return {"binary": base64.b64encode(json.dumps(message).encode()).decode("ascii")}


def with_audio(path: Path, audio: Any, per_frame: int = 4) -> Path:
    """`path` with `per_frame` audio frames (each way, in turn) after each of its frames, at its
    time; the end line counts them, so the recording stays complete."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    out = [lines[0]]
    for line in lines[1:]:
        out.append(line)
        if "dir" in line:
            for n in range(per_frame):
                direction = (UPSTREAM_TO_RELAY, CLIENT_TO_RELAY)[n % 2]
                out.append({"t": line["t"], "dir": direction, **audio(direction)})
        elif "end" in line:
            line["end"]["frames"] = sum(1 for o in out if "dir" in o)
    target = path.with_name("with_audio.jsonl")
    target.write_text("".join(json.dumps(o) + "\n" for o in out))
    return target


def holds_audio(frame: Frame) -> bool:
    return without_audio(copy.deepcopy(frame)).audio_dropped > frame.audio_dropped


class CountingReader:
    """`iter_frames` instrumented: how many of the frames it read are alive at once, at most."""

    def __init__(self) -> None:
        self.alive: list[weakref.ref[Frame]] = []
        self.read = self.most_alive = self.with_audio = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Iterator[Frame]:
        for frame in iter_frames(*args, **kwargs):
            self.alive = [ref for ref in self.alive if ref() is not None] + [weakref.ref(frame)]
            self.read += 1
            self.with_audio += holds_audio(frame)
            self.most_alive = max(self.most_alive, len(self.alive))
            yield frame
            del frame


class Held:
    """`read_recording` instrumented: the recording the replay holds."""

    def __init__(self) -> None:
        self.recordings: list[Recording] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Recording:
        self.recordings.append(read_recording(*args, **kwargs))
        return self.recordings[-1]


def streamed(monkeypatch: pytest.MonkeyPatch) -> tuple[CountingReader, Held]:
    reader, held = CountingReader(), Held()
    monkeypatch.setattr("relay.offline.replay.iter_frames", reader)
    monkeypatch.setattr("relay.offline.replay.read_recording", held)
    return reader, held


def assert_bounded(path: Path, result: Any, reader: CountingReader, held: Held) -> None:
    [recording] = held.recordings
    total = len(read_recording(path).frames)
    assert len(recording.frames) == total and not any(holds_audio(f) for f in recording.frames)
    assert reader.read == total and reader.with_audio > 1000   # the audio was played, a frame at a time
    assert reader.most_alive <= 2
    assert result.frames and not any(holds_audio(f) for f in result.frames)


def same_result(streamed: Any, in_memory: Any) -> None:
    assert streamed.to_json() == {**in_memory.to_json(), "path": str(streamed.path)}
    assert streamed.timeline == in_memory.timeline
    assert [(f.t, f.direction, f.raw, f.binary) for f in streamed.frames] == \
        [(f.t, f.direction, f.raw, f.binary) for f in in_memory.frames]
    assert Timeline.from_replay(streamed).render() == Timeline.from_replay(in_memory).render()


def test_an_openai_replay_streams_the_audio_and_keeps_none(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = with_audio(anyio.run(record_session, tmp_path, RECORDED_WITH), openai_audio, per_frame=50)
    in_memory = replay(read_recording(path), OPENAI_TOOLS)
    reader, held = streamed(monkeypatch)
    result = replay(path, OPENAI_TOOLS)
    assert result.ok, [d.describe() for d in result.divergences]
    assert_bounded(path, result, reader, held)
    same_result(result, in_memory)


async def test_a_gemini_replay_streams_the_audio_and_keeps_none(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from relay.offline.replay import replay_async

    path = with_audio(await record_gemini_session(tmp_path), gemini_audio, per_frame=20)
    in_memory = await replay_async(read_recording(path), GEMINI_TOOLS, gate_timeout=2.0)
    assert any(holds_audio(f) for f in read_recording(path).frames)
    reader, held = streamed(monkeypatch)
    result = await replay_async(path, GEMINI_TOOLS, gate_timeout=2.0)
    assert result.ok, [d.describe() for d in result.divergences]
    assert_bounded(path, result, reader, held)
    same_result(result, in_memory)


def test_a_recording_without_audio_replays_as_it_does_in_memory(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = anyio.run(record_session, tmp_path, RECORDED_WITH)
    in_memory = replay(read_recording(path), OPENAI_TOOLS)
    reader, _ = streamed(monkeypatch)
    result = replay(path, OPENAI_TOOLS)
    assert reader.read == len(read_recording(path).frames)
    same_result(result, in_memory)
