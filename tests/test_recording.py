"""Session recordings: writer, reader, audio policy, redaction and failure handling."""

from __future__ import annotations

import base64
import copy
import errno
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from google.genai import types as genai_types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.beta.realtime import RealtimeServerEvent as BetaServerEvent
from openai.types.realtime import (
    RealtimeClientEvent,
    RealtimeServerEvent,
    RealtimeTranslationInputAudioBufferAppendEvent,
    RealtimeTranslationOutputAudioDeltaEvent,
)
from pydantic import TypeAdapter

from relay import __version__
from relay.recording.format import (
    CLIENT_TO_RELAY,
    DIRECTIONS,
    RELAY_TO_CLIENT,
    RELAY_TO_UPSTREAM,
    UPSTREAM_TO_RELAY,
    Frame,
    RecordingError,
    upstream_host,
)
from relay.recording.writer import RecordingWriter
from relay.recording.reader import iter_frames, read_recording

SECRET = "sk-proj-Zq9XvB2mT7wLkP4sR8nY"
RELAY_TOKEN = "rt_5f1c9a7e3b2d4068"
AUDIO = base64.b64encode(bytes(range(256)) * 6).decode()
IMAGE = base64.b64encode(b"\xff\xd8\xff\xe0 not really a jpeg").decode()


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


WALL_2025 = 1735787045.25  # 2025-01-02T03:04:05.250000Z


def make_writer(directory: Path, **overrides: Any) -> RecordingWriter:
    options: dict[str, Any] = {
        "session_id": "sess_1",
        "dialect": "openai-ga",
        "upstream": "wss://api.openai.com/v1/realtime?model=gpt-realtime",
        "tools": ["lookup_order", "book_table"],
        "clock": FakeClock(),
        "wall_clock": lambda: WALL_2025,
    }
    options.update(overrides)
    return RecordingWriter(directory, **options)


def file_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a written recording, each of which must be strict JSON."""
    text = path.read_bytes().decode("utf-8")
    assert text.endswith("\n")
    return [json.loads(line, parse_constant=_refuse) for line in text.split("\n")[:-1]]


def _refuse(name: str) -> Any:
    raise AssertionError(f"{name} written into a recording")


def _strict_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text, parse_constant=_refuse)
    except (ValueError, AssertionError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


# --- writing and reading back -----------------------------------------------------------------


def test_round_trip_of_every_direction_and_frame_kind(tmp_path: Path) -> None:
    clock = FakeClock(50.0)
    writer = make_writer(tmp_path, clock=clock)
    session_update = json.dumps({"type": "session.update", "session": {"type": "realtime"}})
    created = '{"type":"response.created","event_id":"event_1","response":{"id":"resp_1"}}'
    frames: list[tuple[str, str | bytes]] = [
        (CLIENT_TO_RELAY, session_update),
        (RELAY_TO_UPSTREAM, session_update),
        (UPSTREAM_TO_RELAY, created),
        (RELAY_TO_CLIENT, created),
        (UPSTREAM_TO_RELAY, "ping? not json {"),
        (CLIENT_TO_RELAY, "[1, 2, 3]"),  # JSON, but not an object
        (UPSTREAM_TO_RELAY, b"\x00\xffbinary\n"),
    ]
    for step, (direction, frame) in enumerate(frames):
        clock.now = 50.0 + step * 0.25 + 0.0000004
        writer.record(direction, frame)
    clock.now = 60.0
    writer.close()

    recording = read_recording(writer.path)
    assert recording.kind == "relay"
    assert recording.warnings == []
    assert recording.header == {
        "format": "relay-recording",
        "version": 1,
        "session_id": "sess_1",
        "dialect": "openai-ga",
        "upstream": "api.openai.com",
        "started_at": "2025-01-02T03:04:05.250000Z",
        "relay_version": __version__,
        "tools": ["lookup_order", "book_table"],
        "mode": "proxy",
        "record_audio": "keep",
        "handler_finishes": True,
    }
    assert [(f.direction, f.t) for f in recording.frames] == [
        (direction, step * 0.25) for step, (direction, _) in enumerate(frames)
    ]
    assert [f.line_no for f in recording.frames] == list(range(2, 9))
    assert recording.frames[0].event == json.loads(session_update)
    assert recording.frames[3].event == json.loads(created)
    assert recording.frames[4] == Frame(
        t=1.0,
        direction=UPSTREAM_TO_RELAY,
        event=None,
        raw="ping? not json {",
        binary=None,
        line_no=6,
    )
    assert recording.frames[5].raw == "[1, 2, 3]"
    assert recording.frames[6].binary == b"\x00\xffbinary\n"
    assert recording.end == {"reason": "closed", "failed": False, "frames": 7}
    assert file_lines(writer.path)[-1] == {"t": 10.0, "end": recording.end}


def test_a_json_frame_is_written_as_the_same_text(tmp_path: Path) -> None:
    frame = '{"type": "response.done",   "response": {"id": "resp_1", "output": []}}'
    with make_writer(tmp_path) as writer:
        writer.record(UPSTREAM_TO_RELAY, frame, t=1.5)
    assert f'{{"t":1.500000,"dir":"upstream>relay","event":{frame}}}\n' in writer.path.read_text()


def test_frames_that_would_break_the_line_format_still_give_one_valid_line_each(
    tmp_path: Path,
) -> None:
    pretty = json.dumps({"type": "session.update", "session": {"instructions": "a\nb"}}, indent=2)
    with make_writer(tmp_path) as writer:
        writer.record(CLIENT_TO_RELAY, pretty)
        writer.record(CLIENT_TO_RELAY, '{"type": "x", "value": NaN}')
        writer.record(CLIENT_TO_RELAY, "line one\r\nline two")
        writer.record(CLIENT_TO_RELAY, '{"text": "lone \ud83d surrogate"}')
        writer.record(CLIENT_TO_RELAY, "lone \udfff in raw text")
    lines = file_lines(writer.path)
    assert len(lines) == 7  # header, five frames, end
    frames = read_recording(writer.path).frames
    assert frames[0].event == json.loads(pretty)
    assert frames[1].raw == '{"type": "x", "value": NaN}'  # not strict JSON: kept as text
    assert frames[2].raw == "line one\r\nline two"
    assert frames[3].event == {"text": "lone \ud83d surrogate"}
    assert frames[4].raw == "lone \udfff in raw text"


def test_time_defaults_to_seconds_since_start_rounded_to_microseconds(tmp_path: Path) -> None:
    clock = FakeClock(7.0)
    writer = make_writer(tmp_path, clock=clock)
    clock.now = 7.1234567
    writer.record(CLIENT_TO_RELAY, "{}")
    writer.record(CLIENT_TO_RELAY, "{}", t=2.0000004)
    writer.close()
    assert [line["t"] for line in file_lines(writer.path)[1:3]] == [0.123457, 2.0]


def test_bad_calls_raise_but_are_not_written(tmp_path: Path) -> None:
    with make_writer(tmp_path) as writer:
        with pytest.raises(ValueError, match="direction"):
            writer.record("client->relay", "{}")
        with pytest.raises(TypeError):
            writer.record(CLIENT_TO_RELAY, {"type": "x"})  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="finite"):
            writer.record(CLIENT_TO_RELAY, "{}", t=float("nan"))
    assert read_recording(writer.path).frames == []
    with pytest.raises(ValueError, match="record_audio"):
        make_writer(tmp_path, record_audio="mute")


def test_close_is_idempotent_and_later_frames_are_ignored(tmp_path: Path) -> None:
    writer = make_writer(tmp_path)
    writer.record(CLIENT_TO_RELAY, "{}")
    writer.close("client went away")
    writer.close("again")
    writer.record(CLIENT_TO_RELAY, "{}")
    recording = read_recording(writer.path)
    assert len(recording.frames) == 1
    assert recording.end == {"reason": "client went away", "failed": False, "frames": 1}


def test_context_manager_records_why_the_session_ended(tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        with make_writer(tmp_path) as writer:
            raise KeyError("boom")
    assert read_recording(writer.path).end == {
        "reason": "error: KeyError",
        "failed": False,
        "frames": 0,
        "error": "KeyError",
    }


@pytest.mark.parametrize(
    ("upstream", "host"),
    [
        ("wss://api.openai.com/v1/realtime?model=gpt-realtime", "api.openai.com"),
        (
            "wss://user:pa55@my-res.openai.azure.com:8443/openai/realtime?api-key=k",
            "my-res.openai.azure.com:8443",
        ),
        ("generativelanguage.googleapis.com/ws/x?key=abc", "generativelanguage.googleapis.com"),
        ("127.0.0.1:9000", "127.0.0.1:9000"),
        ("ws://[::1]:8765/v1", "[::1]:8765"),
        ("WSS://API.OpenAI.com", "api.openai.com"),
        ("", ""),
    ],
)
def test_upstream_is_reduced_to_its_host(upstream: str, host: str) -> None:
    assert upstream_host(upstream) == host


# --- file names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("session_id", "file_name"),
    [
        ("sess_C7zY4abc", "20250102T030405Z_sess_C7zY4abc.jsonl"),
        ("../../etc/passwd", "20250102T030405Z__.._etc_passwd.jsonl"),
        ("call id: 42/a?b", "20250102T030405Z_call_id__42_a_b.jsonl"),
        ("", "20250102T030405Z_session.jsonl"),
        ("x" * 200, f"20250102T030405Z_{'x' * 80}.jsonl"),
    ],
)
def test_file_name_is_utc_start_and_safe_session_id(
    tmp_path: Path, session_id: str, file_name: str
) -> None:
    with make_writer(tmp_path / "new" / "dir", session_id=session_id) as writer:
        pass
    assert writer.path == tmp_path / "new" / "dir" / file_name
    assert writer.path.is_file()
    assert read_recording(writer.path).header["session_id"] == session_id  # type: ignore[index]


@pytest.mark.parametrize("file_mode, directory_mode", [(0o600, 0o700), (0o640, 0o750)])
def test_a_recording_is_written_for_its_owner_alone_in_a_directory_made_so_whatever_the_umask(
        tmp_path: Path, file_mode: int, directory_mode: int) -> None:
    """Transcripts and audio: 0600 in a 0700 directory by default (`--record-mode` chooses), even
    under a umask that would let everyone read them."""
    directory = tmp_path / "made" / "recordings"
    umask = os.umask(0)
    try:
        writer = make_writer(directory, **({} if file_mode == 0o600 else {"file_mode": file_mode}))
        writer.record(CLIENT_TO_RELAY, '{"type":"session.update"}')
        writer.close()
    finally:
        os.umask(umask)
    assert stat.S_IMODE(writer.path.stat().st_mode) == file_mode
    assert stat.S_IMODE(directory.stat().st_mode) == directory_mode
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)
    make_writer(existing).close()   # a directory that exists keeps its mode; its files do not follow it
    assert stat.S_IMODE(existing.stat().st_mode) == 0o755
    assert [stat.S_IMODE(path.stat().st_mode) for path in existing.iterdir()] == [0o600]


def test_a_symbolic_link_where_a_recording_would_go_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("untouched")
    writer = make_writer(tmp_path / "recordings")
    writer.close()
    writer.path.unlink()
    writer.path.symlink_to(target)
    second = make_writer(tmp_path / "recordings")
    second.close()
    assert target.read_text() == "untouched"
    assert second.path != writer.path and not second.path.is_symlink()


def test_an_existing_recording_is_never_overwritten(tmp_path: Path) -> None:
    existing = tmp_path / "20250102T030405Z_sess_1.jsonl"
    existing.write_text("somebody else's data\n")
    paths = []
    for _ in range(3):
        with make_writer(tmp_path) as writer:
            writer.record(CLIENT_TO_RELAY, "{}")
        paths.append(writer.path.name)
    assert paths == [
        "20250102T030405Z_sess_1_2.jsonl",
        "20250102T030405Z_sess_1_3.jsonl",
        "20250102T030405Z_sess_1_4.jsonl",
    ]
    assert existing.read_text() == "somebody else's data\n"


# --- audio policy -----------------------------------------------------------------------------

_GA_CLIENT = TypeAdapter(RealtimeClientEvent).validate_python
_GA_SERVER = TypeAdapter(RealtimeServerEvent).validate_python
_BETA_SERVER = TypeAdapter(BetaServerEvent).validate_python


def _gemini_client(event: dict[str, Any]) -> None:
    genai_types.LiveClientMessage.model_validate_json(json.dumps(event))


def _gemini_server(event: dict[str, Any]) -> None:
    genai_types.LiveServerMessage.model_validate_json(json.dumps(event))


def _assistant_item(part_type: str) -> dict[str, Any]:
    return {
        "id": "item_CAb1",
        "object": "realtime.item",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": part_type, "audio": AUDIO, "transcript": "Your table is booked."}],
    }


def _user_audio_item() -> dict[str, Any]:
    return {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "and this:"},
            {"type": "input_audio", "audio": AUDIO, "transcript": "book a table"},
        ],
    }


def _audio_delta(event_type: str) -> dict[str, Any]:
    return {
        "type": event_type,
        "event_id": "event_CAb2",
        "response_id": "resp_CAb3",
        "item_id": "item_CAb1",
        "output_index": 0,
        "content_index": 0,
        "delta": AUDIO,
    }


# name, event, validator (checks the fixture has the provider's real shape), audio paths
AUDIO_EVENTS: list[tuple[str, dict[str, Any], Callable[[Any], Any], list[tuple[Any, ...]]]] = [
    (
        "input_audio_buffer.append",
        {"type": "input_audio_buffer.append", "event_id": "evt_1", "audio": AUDIO},
        _GA_CLIENT,
        [("audio",)],
    ),
    (
        "response.output_audio.delta",
        _audio_delta("response.output_audio.delta"),
        _GA_SERVER,
        [("delta",)],
    ),
    ("beta response.audio.delta", _audio_delta("response.audio.delta"), _BETA_SERVER, [("delta",)]),
    (
        "conversation.item.create",
        {"type": "conversation.item.create", "event_id": "evt_2", "item": _user_audio_item()},
        _GA_CLIENT,
        [("item", "content", 1, "audio")],
    ),
    (
        "conversation.item.added",
        {
            "type": "conversation.item.added",
            "event_id": "event_CAb4",
            "previous_item_id": None,
            "item": {**_user_audio_item(), "id": "item_CAb0", "object": "realtime.item"},
        },
        _GA_SERVER,
        [("item", "content", 1, "audio")],
    ),
    (
        "conversation.item.done",
        {
            "type": "conversation.item.done",
            "event_id": "event_CAb5",
            "previous_item_id": "item_CAb0",
            "item": _assistant_item("output_audio"),
        },
        _GA_SERVER,
        [("item", "content", 0, "audio")],
    ),
    (
        "conversation.item.retrieved",
        {
            "type": "conversation.item.retrieved",
            "event_id": "event_CAb6",
            "item": _assistant_item("output_audio"),
        },
        _GA_SERVER,
        [("item", "content", 0, "audio")],
    ),
    (
        "beta conversation.item.created",
        {
            "type": "conversation.item.created",
            "event_id": "event_CAb7",
            "previous_item_id": "item_CAb0",
            "item": _assistant_item("audio"),
        },
        _BETA_SERVER,
        [("item", "content", 0, "audio")],
    ),
    (
        "session.input_audio_buffer.append",
        {"type": "session.input_audio_buffer.append", "audio": AUDIO},
        RealtimeTranslationInputAudioBufferAppendEvent.model_validate,
        [("audio",)],
    ),
    (
        "session.output_audio.delta",
        {"type": "session.output_audio.delta", "event_id": "event_1", "delta": AUDIO},
        RealtimeTranslationOutputAudioDeltaEvent.model_validate,
        [("delta",)],
    ),
    (
        "gemini realtimeInput.audio",
        {"realtimeInput": {"audio": {"data": AUDIO, "mimeType": "audio/pcm;rate=16000"}}},
        _gemini_client,
        [("realtimeInput", "audio", "data")],
    ),
    (
        "gemini realtimeInput.mediaChunks",
        {
            "realtimeInput": {
                "mediaChunks": [
                    {"mimeType": "audio/pcm;rate=16000", "data": AUDIO},
                    {"mimeType": "image/jpeg", "data": IMAGE},
                    {"mimeType": "audio/pcm;rate=16000", "data": AUDIO[:400]},
                ]
            }
        },
        _gemini_client,
        [("realtimeInput", "mediaChunks", 0, "data"), ("realtimeInput", "mediaChunks", 2, "data")],
    ),
    (
        "gemini serverContent.modelTurn inlineData",
        {
            "serverContent": {
                "modelTurn": {
                    "role": "model",
                    "parts": [
                        {"text": "Booked."},
                        {"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": AUDIO}},
                    ],
                }
            }
        },
        _gemini_server,
        [("serverContent", "modelTurn", "parts", 1, "inlineData", "data")],
    ),
]


def _blanked(event: dict[str, Any], paths: list[tuple[Any, ...]]) -> tuple[dict[str, Any], int]:
    expected = copy.deepcopy(event)
    removed = 0
    for path in paths:
        container = expected
        for key in path[:-1]:
            container = container[key]
        removed += len(container[path[-1]])
        container[path[-1]] = ""
    return expected, removed


@pytest.mark.parametrize(
    ("event", "validate", "paths"),
    [case[1:] for case in AUDIO_EVENTS],
    ids=[case[0] for case in AUDIO_EVENTS],
)
def test_drop_removes_only_the_audio_payload(
    tmp_path: Path,
    event: dict[str, Any],
    validate: Callable[[Any], Any],
    paths: list[tuple[Any, ...]],
) -> None:
    validate(event)
    expected, removed = _blanked(event, paths)
    text = json.dumps(event)
    with make_writer(tmp_path / "drop", record_audio="drop") as dropping:
        dropping.record(CLIENT_TO_RELAY, text)
    with make_writer(tmp_path / "keep") as keeping:
        keeping.record(CLIENT_TO_RELAY, text)

    dropped_frame = read_recording(dropping.path).frames[0]
    assert dropped_frame.event == expected
    assert dropped_frame.audio_dropped == removed
    assert AUDIO[:400] not in dropping.path.read_text()
    kept_frame = read_recording(keeping.path).frames[0]
    assert (kept_frame.event, kept_frame.audio_dropped) == (event, 0)


def test_drop_also_applies_to_json_carried_in_binary_frames(tmp_path: Path) -> None:
    _, event, _, paths = AUDIO_EVENTS[-1]  # Gemini's server sends its events as binary frames
    expected, removed = _blanked(event, paths)
    with make_writer(tmp_path, record_audio="drop") as writer:
        writer.record(UPSTREAM_TO_RELAY, json.dumps(event).encode())
        writer.record(UPSTREAM_TO_RELAY, b"\x00inlineData\xff")  # marker, but not JSON
    first, second = read_recording(writer.path).frames
    assert first.binary is not None and json.loads(first.binary) == expected
    assert first.audio_dropped == removed
    assert (second.binary, second.audio_dropped) == (b"\x00inlineData\xff", 0)


def test_drop_leaves_events_without_audio_alone(tmp_path: Path) -> None:
    events = [
        {"type": "response.output_audio_transcript.delta", "delta": "Your table"},
        {
            "type": "conversation.item.input_audio_transcription.delta",
            "item_id": "i",
            "delta": "bo",
        },
        {"type": "input_audio_buffer.append", "audio": ""},
        {
            "type": "conversation.item.create",
            "item": {"type": "function_call_output", "output": "{}"},
        },
        {"realtimeInput": {"video": {"data": IMAGE, "mimeType": "image/jpeg"}}},
        {"toolCall": {"functionCalls": [{"id": "c1", "name": "f", "args": {"audio": AUDIO}}]}},
    ]
    texts = [json.dumps(event) for event in events]
    with make_writer(tmp_path, record_audio="drop") as writer:
        for text in texts:
            writer.record(UPSTREAM_TO_RELAY, text)
    frames = read_recording(writer.path).frames
    assert [(frame.event, frame.audio_dropped) for frame in frames] == [(e, 0) for e in events]
    for text in texts:  # untouched events are written as the very same text
        assert text in writer.path.read_text()


# --- secrets ----------------------------------------------------------------------------------


def test_secrets_never_reach_the_file(tmp_path: Path) -> None:
    escaped_secret = SECRET.replace("s", "\\u0073", 1)
    with make_writer(
        tmp_path,
        session_id=f"leaky-{RELAY_TOKEN}",
        upstream=f"wss://x:{SECRET}@api.openai.com/v1/realtime?api-key={SECRET}",
        secrets=[SECRET, RELAY_TOKEN, ""],
        record_audio="drop",
    ) as writer:
        writer.record(
            UPSTREAM_TO_RELAY,
            json.dumps({"type": "error", "error": {"message": f"Incorrect API key: {SECRET}"}}),
        )
        writer.record(CLIENT_TO_RELAY, f"Bearer {RELAY_TOKEN} is not JSON")
        writer.record(CLIENT_TO_RELAY, f"\x00binary {SECRET}".encode())
        # a spelling with an escape becomes the literal key once the event is re-serialised
        writer.record(
            CLIENT_TO_RELAY,
            '{"type":"input_audio_buffer.append","audio":"QUJD","note":"%s"}' % escaped_secret,
        )
        writer.record(CLIENT_TO_RELAY, json.dumps({"pretty": SECRET}, indent=1))
    content = writer.path.read_bytes()
    assert SECRET.encode() not in content
    assert RELAY_TOKEN.encode() not in content
    assert writer.path.name == "20250102T030405Z_leaky-_redacted_.jsonl"
    frames = read_recording(writer.path).frames
    assert frames[0].event == {
        "type": "error",
        "error": {"message": "Incorrect API key: [redacted]"},
    }
    assert frames[1].raw == "Bearer [redacted] is not JSON"
    assert frames[2].binary == b"\x00binary [redacted]"
    assert frames[3].event is not None and frames[3].event["note"] == "[redacted]"
    assert frames[4].event == {"pretty": "[redacted]"}


def test_a_secret_with_a_slash_is_also_found_escaped(tmp_path: Path) -> None:
    secret = "tok/en+9a8b7c"
    with make_writer(tmp_path, secrets=[secret]) as writer:
        writer.record(UPSTREAM_TO_RELAY, '{"echo":"tok\\/en+9a8b7c"}')
    assert read_recording(writer.path).frames[0].event == {"echo": "[redacted]"}


def test_a_secret_that_matches_json_syntax_still_leaves_valid_lines(tmp_path: Path) -> None:
    with make_writer(tmp_path, secrets=["123456789"]) as writer:
        writer.record(UPSTREAM_TO_RELAY, '{"n":123456789}')
        # only the re-serialised form (needed for the line break) holds the secret
        writer.record(UPSTREAM_TO_RELAY, '{\n"n":1.23456789e8}')
    file_lines(writer.path)
    assert [frame.raw for frame in read_recording(writer.path).frames] == [
        '{"n":[redacted]}',
        '{"n":[redacted].0}',
    ]


def test_secrets_that_json_would_escape_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="secrets"):
        make_writer(tmp_path, secrets=['ab"cd'])


# --- write failures ---------------------------------------------------------------------------


class FillingDisk:
    """A real file that takes `room` more bytes and then fails like a full disk."""

    def __init__(self, path: Path, room: int) -> None:
        self._file = open(path, "xb", buffering=0)
        self.room = room

    def write(self, data: bytes | memoryview) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        count = min(len(data), self.room)
        self._file.write(data[:count])
        self.room -= count
        return count

    def close(self) -> None:
        self._file.close()


def _recording_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "relay.recording"]


def test_a_full_disk_stops_the_recording_not_the_session(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    disks: list[FillingDisk] = []

    def opener(path: Path) -> FillingDisk:
        disks.append(FillingDisk(path, room=400))
        return disks[-1]

    writer = make_writer(tmp_path, opener=opener)
    for number in range(20):
        writer.record(UPSTREAM_TO_RELAY, json.dumps({"type": "rate_limits.updated", "n": number}))
    assert writer.failed
    assert writer.failure is not None and "No space left on device" in writer.failure
    errors = _recording_errors(caplog)
    assert len(errors) == 1 and errors[0].levelno == logging.ERROR

    disks[0].room = 10_000  # space is freed before the session ends
    writer.close("upstream closed")
    recording = read_recording(writer.path)
    written = len(recording.frames)
    assert 0 < written < 20
    assert recording.end is not None and recording.end["failed"] is True
    assert recording.end["lost_frames"] == 20 - written  # one of them was cut mid-line
    cut_line = written + 2
    assert recording.warnings[0].startswith(f"line {cut_line}: skipped, not valid JSON")
    assert any("No space left on device" in warning for warning in recording.warnings)
    assert len(_recording_errors(caplog)) == 1


def test_a_failure_on_the_first_write_is_handled_the_same(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = make_writer(tmp_path, opener=lambda path: FillingDisk(path, room=0))
    writer.record(CLIENT_TO_RELAY, "{}")
    writer.close()
    assert writer.failed and len(_recording_errors(caplog)) == 1
    with pytest.raises(RecordingError):
        read_recording(writer.path)  # nothing could be written at all


@contextmanager
def _without_root() -> Iterator[None]:
    """Root ignores permission bits; act as `nobody` inside the block so they apply."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)


@pytest.fixture
def read_only_dir() -> Iterator[Path]:
    # not under tmp_path: its parents are private to the owner, which `nobody` is not
    directory = Path(tempfile.mkdtemp(prefix="relay-ro-"))
    directory.chmod(
        stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
    )
    yield directory
    directory.chmod(stat.S_IRWXU)
    shutil.rmtree(directory)


@pytest.mark.parametrize("subdirectory", ["", "sessions/today"])
def test_an_unwritable_directory_gives_a_failed_writer_not_an_exception(
    read_only_dir: Path, subdirectory: str, caplog: pytest.LogCaptureFixture
) -> None:
    with _without_root():
        writer = make_writer(read_only_dir / subdirectory)
        writer.record(CLIENT_TO_RELAY, '{"type":"session.update"}')
        writer.close()
    assert writer.failed
    assert writer.failure is not None and "Permission denied" in writer.failure
    assert len(_recording_errors(caplog)) == 1
    assert list(read_only_dir.iterdir()) == []


def test_a_file_in_the_way_of_the_directory_gives_a_failed_writer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "recordings").write_text("not a directory")
    writer = make_writer(tmp_path / "recordings")
    writer.record(CLIENT_TO_RELAY, "{}")
    writer.close()
    assert writer.failed and len(_recording_errors(caplog)) == 1


# --- reading damaged or foreign files ---------------------------------------------------------


def _three_frame_recording(directory: Path, *, close: bool) -> Path:
    writer = make_writer(directory)
    for number in range(3):
        writer.record(
            UPSTREAM_TO_RELAY,
            json.dumps({"type": "response.text.delta", "delta": "é" * 8, "n": number}),
        )
    if close:
        writer.close()
    else:
        writer._file.close()  # a crash: the OS closes the file, nobody writes the end line
    return writer.path


@pytest.mark.parametrize("cut_bytes", [2, 5, 12])  # 5 and 12 cut inside a two-byte character
def test_a_truncated_file_gives_every_complete_line_and_names_the_cut_one(
    tmp_path: Path, cut_bytes: int
) -> None:
    path = _three_frame_recording(tmp_path, close=False)
    path.write_bytes(path.read_bytes()[:-cut_bytes])
    recording = read_recording(path)
    assert [frame.event["n"] for frame in recording.frames] == [0, 1]  # type: ignore[index]
    assert recording.warnings[0] == "line 4: skipped, cut short (the file ends in the middle of it)"
    assert "no end line" in recording.warnings[-1]


def test_a_last_line_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    path = _three_frame_recording(tmp_path, close=False)
    path.write_bytes(path.read_bytes()[:-1])
    recording = read_recording(path)
    assert [frame.event["n"] for frame in recording.frames] == [0, 1, 2]  # type: ignore[index]
    assert len(recording.warnings) == 1 and "no end line" in recording.warnings[0]


def test_a_corrupt_middle_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = _three_frame_recording(tmp_path, close=True)
    lines = path.read_text().split("\n")
    lines[2] = lines[2][:30]
    path.write_text("\n".join(lines))
    recording = read_recording(path)
    assert [frame.event["n"] for frame in recording.frames] == [0, 2]  # type: ignore[index]
    assert recording.warnings[0].startswith("line 3: skipped, not valid JSON")
    assert recording.warnings[1] == "the end line counts 3 frames written, 2 were read"


def test_lines_that_are_json_but_not_frames_are_skipped(tmp_path: Path) -> None:
    path = _three_frame_recording(tmp_path, close=True)
    lines = path.read_text().split("\n")
    lines[1:1] = [
        '{"t": 0.1, "dir": "sideways", "event": {}}',
        '{"t": 0.1, "dir": "client>relay", "event": "text"}',
        '{"t": 0.1, "dir": "client>relay", "binary": "**not base64**"}',
        '{"t": 0.1, "dir": "client>relay", "raw": "a", "event": {}}',
        "[1, 2]",
        "",
    ]
    path.write_text("\n".join(lines))
    recording = read_recording(path)
    assert len(recording.frames) == 3
    assert recording.warnings == [
        "line 2: skipped, not a frame line",
        "line 3: skipped, event has the wrong type",
        "line 4: skipped, binary is not base64",
        "line 5: skipped, not a frame line",
        "line 6: skipped, not a JSON object",
    ]


def test_damage_is_told_apart_from_other_warnings(tmp_path: Path) -> None:
    whole = read_recording(_three_frame_recording(tmp_path / "whole", close=True))
    assert whole.complete and whole.damage == [] and whole.warnings == []
    open_ended = read_recording(_three_frame_recording(tmp_path / "open", close=False))
    assert not open_ended.complete and open_ended.damage == open_ended.warnings
    assert "no end line" in open_ended.damage[0]


def test_relay_lines_keep_what_the_relay_decided_beside_the_frames(tmp_path: Path) -> None:
    clock = FakeClock()
    writer = make_writer(tmp_path, clock=clock, secrets=[SECRET])
    writer.record(UPSTREAM_TO_RELAY, '{"type":"response.done"}')
    clock.now += 0.5
    decided = {"call_id": "call_1", "name": "book_table", "outcome": "ok", "is_error": False,
               "message": f"Booked; your code is {SECRET}.", "output_item_id": "rs_1_i2",
               "response_id": "resp_1", "handler_ms": 3.5, "status": "completed"}
    writer.record_notice("tool_call", decided)
    writer.record_notice("follow_up", {"event_id": "rs_1_e3"})   # not a kind the format records
    writer.record(RELAY_TO_UPSTREAM, '{"type":"response.create"}')
    writer.close()
    lines = file_lines(writer.path)
    assert lines[2] == {"t": 0.5, "relay": {
        "kind": "tool_call", "call_id": "call_1", "name": "book_table", "outcome": "ok", "is_error": False,
        "message": "Booked; your code is [redacted].", "output_item_id": "rs_1_i2", "response_id": "resp_1"}}
    assert len(lines) == 5 and lines[-1]["end"]["frames"] == 2   # a relay line is not a frame
    recording = read_recording(writer.path)
    assert recording.complete and len(recording.frames) == 2 and recording.warnings == []
    [note] = recording.notes
    assert (note.t, note.kind, note.line_no, note.fields["message"]) == (0.5, "tool_call", 3,
                                                                        "Booked; your code is [redacted].")
    assert recording.tool_calls_decided() == {"call_1": note.fields}


def test_relay_lines_of_unknown_kinds_are_kept_and_malformed_ones_ignored(tmp_path: Path) -> None:
    path = _three_frame_recording(tmp_path, close=True)
    lines = path.read_text().split("\n")
    lines[1:1] = ['{"t": 0.1, "relay": {"kind": "from_the_future", "x": 1}}', '{"t": 0.1, "relay": "no kind"}']
    path.write_text("\n".join(lines))
    recording = read_recording(path)
    assert len(recording.frames) == 3 and recording.complete
    assert [(note.kind, note.fields) for note in recording.notes] == [("from_the_future", {"x": 1})]
    assert recording.tool_calls_decided() == {}
    assert recording.warnings == ["line 3: relay line without a kind or a time; ignored"]


def test_a_newer_format_version_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "future.jsonl"
    path.write_text(json.dumps({"format": "relay-recording", "version": 2}) + "\n")
    with pytest.raises(RecordingError, match="version 2 is newer than this relay reads"):
        read_recording(path)


@pytest.mark.parametrize(
    "content",
    [
        "",
        "\n\n",
        "garbage\n",
        '{"format": "har", "version": 1}\n',
        '{"format": "relay-recording"}\n',
    ],
)
def test_files_that_hold_no_recording_are_an_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(content)
    with pytest.raises(RecordingError):
        read_recording(path)


def test_directions_filter_and_streaming(tmp_path: Path) -> None:
    with make_writer(tmp_path) as writer:
        for direction in DIRECTIONS * 2:
            writer.record(direction, json.dumps({"type": "x", "dir": direction}))
    upstream_side = read_recording(writer.path, directions=[UPSTREAM_TO_RELAY, RELAY_TO_UPSTREAM])
    assert [frame.direction for frame in upstream_side.frames] == [
        RELAY_TO_UPSTREAM,
        UPSTREAM_TO_RELAY,
    ] * 2
    warnings: list[str] = []
    streamed = iter_frames(writer.path, directions=[RELAY_TO_CLIENT], warnings=warnings)
    assert [frame.line_no for frame in streamed] == [5, 9]
    assert warnings == []
    with pytest.raises(ValueError, match="unknown directions"):
        read_recording(writer.path, directions=["client"])


# --- plain event logs (the shared recordings) -------------------------------------------------


def _readme_event_counts(recordings: Path) -> dict[str, int]:
    rows = re.findall(
        r"^\| (\S+\.jsonl) \|.*\| (\d+) \|$", (recordings / "README.md").read_text(), re.M
    )
    return {name: int(count) for name, count in rows}


def _meta_directions(meta: dict[str, Any]) -> list[str]:
    return [
        {"client": CLIENT_TO_RELAY, "server": UPSTREAM_TO_RELAY}[side]
        for side in meta["directions"]
    ]


def test_shared_event_logs_are_read_with_their_meta_directions(recordings_dir: Path) -> None:
    recordings = recordings_dir
    counts = _readme_event_counts(recordings)
    assert len(counts) == len(list(recordings.glob("*.jsonl"))) == 11
    assert counts["banyan-landing_log1_webrtc_beta_fc.jsonl"] == 415
    for name, count in counts.items():
        meta = json.loads((recordings / name.replace(".jsonl", ".meta.json")).read_text())
        recording = read_recording(recordings / name)
        assert recording.kind == "event-log" and recording.header is None, name
        assert recording.warnings == [], name
        assert len(recording.frames) == count == meta["event_count"], name
        assert [frame.direction for frame in recording.frames] == _meta_directions(meta), name
        types = Counter(frame.event["type"] for frame in recording.frames)  # type: ignore[index]
        assert types == meta["type_counts"], name
        assert [frame.t for frame in recording.frames[:3]] == [0.0, 0.001, 0.002]
        assert recording.frames[-1].line_no == count


def test_without_meta_the_directions_are_inferred_from_event_types(tmp_path: Path, recordings_dir: Path) -> None:
    recordings = recordings_dir
    client_events = 0
    for source in sorted(recordings.glob("*.jsonl")):
        shutil.copy(source, tmp_path / source.name)
        meta = json.loads(source.with_name(source.stem + ".meta.json").read_text())
        recording = read_recording(tmp_path / source.name)
        assert recording.warnings == []
        assert [frame.direction for frame in recording.frames] == _meta_directions(
            meta
        ), source.name
        client_events += sum(frame.direction == CLIENT_TO_RELAY for frame in recording.frames)
    assert client_events == 3  # the session.update lines of the banyan and realtimechat logs


def test_gemini_and_other_client_events_are_inferred_as_client_side(tmp_path: Path) -> None:
    truncation = {"item_id": "i", "content_index": 0, "audio_end_ms": 5}
    events_and_directions = [
        ({"setup": {"model": "models/gemini-live-2.5-flash"}}, CLIENT_TO_RELAY),
        ({"setupComplete": {}}, UPSTREAM_TO_RELAY),
        ({"realtimeInput": {"audio": {"data": AUDIO, "mimeType": "audio/pcm"}}}, CLIENT_TO_RELAY),
        ({"toolCall": {"functionCalls": [{"id": "c1", "name": "f"}]}}, UPSTREAM_TO_RELAY),
        ({"toolResponse": {"functionResponses": [{"id": "c1", "name": "f"}]}}, CLIENT_TO_RELAY),
        ({"type": "conversation.item.truncate", **truncation}, CLIENT_TO_RELAY),
        ({"type": "conversation.item.truncated", **truncation}, UPSTREAM_TO_RELAY),
        ({"type": "output_audio_buffer.clear"}, CLIENT_TO_RELAY),
        ({"type": "a.future.event"}, UPSTREAM_TO_RELAY),
    ]
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(event) + "\n" for event, _ in events_and_directions))
    assert [frame.direction for frame in read_recording(path).frames] == [
        direction for _, direction in events_and_directions
    ]


def test_a_meta_file_that_does_not_fit_gives_warnings(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    path.write_text('{"type": "session.update"}\n{"type": "session.updated"}\n{"type": "x"}\n')
    (tmp_path / "log.meta.json").write_text(json.dumps({"directions": ["client", "sideways"]}))
    recording = read_recording(path)
    assert [frame.direction for frame in recording.frames] == [
        CLIENT_TO_RELAY,
        UPSTREAM_TO_RELAY,
        UPSTREAM_TO_RELAY,
    ]
    assert recording.warnings == [
        "line 2: meta direction 'sideways' unknown; inferred from the event type",
        "log.meta.json: 2 directions for 3 lines",
    ]
    (tmp_path / "log.meta.json").write_text("{broken")
    assert "unreadable" in read_recording(path).warnings[0]


# --- property: anything written is read back as it was ----------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=5)
encodings = st.sampled_from(
    [{}, {"separators": (",", ":")}, {"indent": 1}, {"ensure_ascii": False}]
)
frames_strategy = st.lists(
    st.tuples(
        st.sampled_from(DIRECTIONS),
        st.floats(min_value=0, max_value=1e5, allow_nan=False),
        st.one_of(
            st.tuples(json_objects, encodings).map(lambda pair: json.dumps(pair[0], **pair[1])),
            st.text(),
            st.binary(),
        ),
    ),
    max_size=12,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frames=frames_strategy)
def test_any_frames_round_trip_exactly(frames: list[tuple[str, float, str | bytes]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        with make_writer(Path(directory)) as writer:
            for direction, t, frame in frames:
                writer.record(direction, frame, t=t)
        recording = read_recording(writer.path)
    assert recording.warnings == []
    assert len(recording.frames) == len(frames)
    for (direction, t, frame), read in zip(frames, recording.frames):
        assert (read.direction, read.t) == (direction, float(f"{t:.6f}"))
        if isinstance(frame, bytes):
            assert (read.binary, read.event, read.raw) == (frame, None, None)
        elif (event := _strict_object(frame)) is not None:
            assert (read.event, read.raw, read.binary) == (event, None, None)
        else:
            assert (read.raw, read.event, read.binary) == (frame, None, None)


def test_an_error_that_ends_the_session_is_a_field_of_the_end_line_the_inspector_reads(tmp_path: Path) -> None:
    """The end line names the error (`"error"`), so a reader learns it from a field, never from
    the reason's words; the inspector shows it as an anomaly of the session."""
    from relay.inspector.model import build_model

    with pytest.raises(KeyError):
        with make_writer(tmp_path) as writer:
            writer.record(UPSTREAM_TO_RELAY, json.dumps({"type": "session.created", "event_id": "e1"}))
            raise KeyError("x")
    end = file_lines(writer.path)[-1]["end"]
    assert (end["error"], end["reason"]) == ("KeyError", "error: KeyError")
    model = build_model(read_recording(writer.path))
    assert [e["label"] for e in model.events.values() if e["kind"] == "anomaly"] == [
        "the session ended with an error: KeyError (error: KeyError)"]

    with make_writer(tmp_path / "clean") as clean:
        pass
    assert "error" not in file_lines(clean.path)[-1]["end"]


def test_record_mode_is_read_in_octal_and_a_mode_its_owner_cannot_write_is_refused() -> None:
    from relay.cli import build_parser
    from relay.cli.options import config_fields
    from relay.cli.serve import SERVE_OPTIONS
    from relay.edges.config import ServerConfig
    from relay.errors import ConfigError

    args = build_parser().parse_args(["serve", "--record", "rec", "--record-mode", "640"])
    assert config_fields(args, SERVE_OPTIONS)["record_mode"] == 0o640
    assert config_fields(build_parser().parse_args(["serve"]), SERVE_OPTIONS)["record_mode"] == 0o600
    with pytest.raises(ConfigError, match="--record-mode"):
        ServerConfig(upstream="ws://127.0.0.1:1/v1/realtime", record_mode=0o440).check()
