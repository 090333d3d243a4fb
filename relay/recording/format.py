"""The recording format (`docs/recording-format.md`): its name and version, the four
directions a frame can cross, the header line, and what a recording read back holds (`Frame`,
`Note`, `Recording`). The writer (`relay.recording.writer`) and the reader
(`relay.recording.reader`) both build on it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from relay import __version__
from relay.dialects import DIALECTS, GEMINI, OPENAI, Dialect
from relay.dialects.gemini import is_gemini_message
from relay.errors import UnusableInput

FORMAT_NAME = "relay-recording"
FORMAT_VERSION = 1

CLIENT_TO_RELAY = "client>relay"
RELAY_TO_UPSTREAM = "relay>upstream"
UPSTREAM_TO_RELAY = "upstream>relay"
RELAY_TO_CLIENT = "relay>client"
DIRECTIONS = (CLIENT_TO_RELAY, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY, RELAY_TO_CLIENT)

AudioPolicy = Literal["keep", "drop"]

TOOL_CALL_NOTE = "tool_call"
"""The kind of the `relay` line that says how the relay decided a call: the engine's notice of it
(`relay.engine.actions.TOOL_CALL`), recorded under its kind."""
# What the relay decided, written as `relay` lines beside the frames: for each kind of engine
# notice recorded, the fields kept (docs/recording-format.md, "Relay lines").
HANDLER_FINISHED_NOTE = "handler_finished"
"""The kind of the `relay` line that says when a relay call's handler finished (its outcome went to
the engine), placed among the frames where it happened: a replay holds that handler's finish until
its own play reaches the same place (relay/offline/replay_finishes.py)."""
HANDLER_YIELDED_NOTE = "handler_yielded"
"""The same for each value a streaming tool's handler yielded (its updates, its first output)."""
NOTE_FIELDS: dict[str, tuple[str, ...]] = {
    TOOL_CALL_NOTE: ("call_id", "name", "outcome", "is_error", "message", "output_item_id", "response_id"),
    HANDLER_FINISHED_NOTE: ("call_id", "name"),
    HANDLER_YIELDED_NOTE: ("call_id", "name"),
}


class RecordingError(UnusableInput, ValueError):
    """The file cannot be read as a recording at all (unknown format, newer version, empty)."""


# --- helpers shared by writer and reader ------------------------------------------------------


def reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_object(text: str | bytes) -> dict[str, Any] | None:
    """The JSON object in `text`, or None when it is not strict JSON or not an object."""
    try:
        value = json.loads(text, parse_constant=reject_constant)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    return value if isinstance(value, dict) else None


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def upstream_host(upstream: str) -> str:
    """`host[:port]` of an upstream URL or address: never its path, query or credentials."""
    text = upstream.strip()
    parts = urlsplit(text if "://" in text else "//" + text)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets so a port stays unambiguous
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    return f"{host}:{port}" if host and port is not None else host



def session_header(*, session_id: str, dialect: str, upstream: str, started_at: str, tools: Iterable[str],
                   mode: str, record_audio: AudioPolicy, relay_version: str = __version__,
                   extra_header: dict[str, Any] | None = None,
                   clean: Callable[[str], str] = lambda text: text) -> dict[str, Any]:
    """A recording's header line (the live inspector's model of a session starts from the same);
    `clean` is applied to the names that come from configuration (a writer's secrets filter)."""
    header: dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "session_id": session_id,
        "dialect": clean(dialect),
        "upstream": clean(upstream_host(upstream)),
        "started_at": started_at,
        "relay_version": relay_version,
        "tools": [clean(name) for name in tools],
        "mode": clean(mode),
        "record_audio": record_audio,
        "handler_finishes": True,   # relay lines mark where each relay call's handler finished
    }
    # what replay needs to rebuild the session (e.g. the engine's id prefix); never overrides
    for key, value in (extra_header or {}).items():
        header.setdefault(key, value)
    return header



@dataclass
class Frame:
    """One frame as recorded: exactly one of `event`, `raw` and `binary` is set."""

    t: float
    direction: str
    event: dict[str, Any] | None
    raw: str | None
    binary: bytes | None
    line_no: int
    audio_dropped: int = 0  # base64 characters removed by `--record-audio drop`


@dataclass
class Note:
    """A `relay` line: something the relay decided, recorded beside the frames (`kind`, and the
    line's other fields)."""

    t: float
    kind: str
    fields: dict[str, Any]
    line_no: int


@dataclass
class Recording:
    header: dict[str, Any] | None  # None for a plain event log (or a recording that lost it)
    frames: list[Frame]
    warnings: list[str]
    path: Path
    kind: Literal["relay", "event-log"]
    end: dict[str, Any] | None = None  # the end line's object, when the writer was closed
    end_t: float | None = None  # when the end line was written (seconds since the header): the session's length
    damage: list[str] = field(default_factory=list)  # the warnings that mean frames are missing
    notes: list[Note] = field(default_factory=list)  # the `relay` lines, in order
    audio: AudioPolicy = "keep"
    """What `frames` hold of audio: `drop` when read without it (`read_recording(audio="drop")`),
    the payloads then left in the file at `path` for a reader that streams it (`iter_frames`)."""

    def tool_calls_decided(self) -> dict[str, dict[str, Any]]:
        """The relay's `tool_call` notes by call id (the last one of a call wins): its outcome,
        whether its output is an error, what the assistant was to say. Empty for a recording
        written before the relay recorded them."""
        return {str(note.fields["call_id"]): note.fields for note in self.notes
                if note.kind == TOOL_CALL_NOTE and isinstance(note.fields.get("call_id"), str)}

    @property
    def complete(self) -> bool:
        """Nothing is missing: no line was skipped or cut short and, for a relay recording, the
        writer closed it cleanly (its end line is there and counts the frames read)."""
        return not self.damage

    @property
    def dialect(self) -> Dialect:
        """The wire the session spoke: the header's dialect; for a plain event log (or a header
        without a dialect this relay knows), Gemini Live when its first event is a Gemini message
        (no `type`), else OpenAI."""
        name = (self.header or {}).get("dialect")
        if isinstance(name, str) and name in DIALECTS:
            return DIALECTS[name]
        first = next((frame.event for frame in self.frames if frame.event is not None), None)
        return GEMINI if is_gemini_message(first) else OPENAI


