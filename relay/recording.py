"""Session recordings: what crossed the relay's sockets, written as it happens and read back.

A recording lets a real session be captured once and replayed offline (in CI) against changed
handlers. The format is JSON lines; `docs/recording-format.md` is its specification. This module
holds the writer (used by the proxy and sidecar edges) and the reader (used by replay and tests).

The writer sits on the hot path of every frame, so it avoids work: a text frame that is already a
JSON object is written as the same text inside its line (parsed once to be sure it is valid, never
re-serialised unless it must change), and the audio policy looks at the event type, not at every
field. A recording must never take a session down: I/O failures are logged once and later frames
are dropped, but `record` does not raise because of them.
"""

from __future__ import annotations

import base64
import binascii
import errno
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Literal, TypeGuard
from urllib.parse import urlsplit

from relay import __version__
from relay.dialects import DIALECTS, GEMINI, OPENAI, Dialect
from relay.dialects.base import CLIENT_EVENT_TYPES
from relay.dialects.gemini import is_gemini_message

FORMAT_NAME = "relay-recording"
FORMAT_VERSION = 1

CLIENT_TO_RELAY = "client>relay"
RELAY_TO_UPSTREAM = "relay>upstream"
UPSTREAM_TO_RELAY = "upstream>relay"
RELAY_TO_CLIENT = "relay>client"
DIRECTIONS = (CLIENT_TO_RELAY, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY, RELAY_TO_CLIENT)

AudioPolicy = Literal["keep", "drop"]

# What the relay decided, written as `relay` lines beside the frames: for each kind of engine
# notice recorded, the fields kept (docs/recording-format.md, "Relay lines").
NOTE_FIELDS: dict[str, tuple[str, ...]] = {
    "tool_call": ("call_id", "name", "outcome", "is_error", "message", "output_item_id", "response_id"),
}

REDACTED = "[redacted]"

_MAX_NAME_SUFFIX = 1000
_SESSION_ID_MAX_CHARS = 80
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")

# Event type -> the field holding base64 audio, for OpenAI events whose whole point is audio.
_OPENAI_AUDIO_FIELDS = {
    "input_audio_buffer.append": "audio",
    "response.output_audio.delta": "delta",
    "response.audio.delta": "delta",  # beta name
    "session.input_audio_buffer.append": "audio",  # translation sessions
    "session.output_audio.delta": "delta",
}
# Substrings one of which any audio-bearing event contains; lets binary frames skip the JSON parse.
_AUDIO_MARKERS = (
    *(name.encode() for name in _OPENAI_AUDIO_FIELDS),
    b"conversation.item.",
    b"realtimeInput",
    b"realtime_input",
    b"inlineData",
    b"inline_data",
)

_OPENAI_CLIENT_EVENT_TYPES = frozenset({*CLIENT_EVENT_TYPES, "transcription_session.update"})
# Gemini Live frames have one top-level key; the server accepts camelCase and snake_case.
_GEMINI_CLIENT_KEYS = frozenset(
    {
        "setup",
        "clientContent",
        "client_content",
        "realtimeInput",
        "realtime_input",
        "toolResponse",
        "tool_response",
    }
)
# How the `directions` array of a `NAME.meta.json` beside a plain event log names each side.
_META_DIRECTIONS = {"client": CLIENT_TO_RELAY, "server": UPSTREAM_TO_RELAY}

log = logging.getLogger("relay.recording")


class RecordingError(ValueError):
    """The file cannot be read as a recording at all (unknown format, newer version, empty)."""


# --- helpers shared by writer and reader ------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_object(text: str | bytes) -> dict[str, Any] | None:
    """The JSON object in `text`, or None when it is not strict JSON or not an object."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        return None
    return value if isinstance(value, dict) else None


def _dumps(value: Any) -> str:
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


def _session_file_stem(session_id: str) -> str:
    """A session id reduced to characters that are safe in a file name on every platform."""
    stem = _UNSAFE_NAME_CHARS.sub("_", session_id)[:_SESSION_ID_MAX_CHARS].lstrip(".")
    return stem or "session"


# --- audio policy -----------------------------------------------------------------------------


def _blank(container: Any, key: str) -> int:
    """Empty the string at container[key]; the number of characters removed."""
    if not isinstance(container, dict):
        return 0
    value = container.get(key)
    if not isinstance(value, str) or not value:
        return 0
    container[key] = ""
    return len(value)


def _first_of(container: Any, *keys: str) -> Any:
    if isinstance(container, dict):
        for key in keys:
            if key in container:
                return container[key]
    return None


def _is_audio_blob(blob: Any) -> bool:
    """Gemini blobs carry a mime type; one without it is assumed to be audio."""
    mime = _first_of(blob, "mimeType", "mime_type")
    return not isinstance(mime, str) or mime.startswith("audio/")


def drop_audio(event: dict[str, Any]) -> int:
    """Empty the base64 audio payloads of `event` in place; how many characters were removed.

    Only the places where the protocols put audio are looked at, found from the event type (or,
    for Gemini, the single top-level key): the event is never walked as a whole."""
    event_type = event.get("type")
    if isinstance(event_type, str):
        audio_field = _OPENAI_AUDIO_FIELDS.get(event_type)
        if audio_field is not None:
            return _blank(event, audio_field)
        if event_type.startswith("conversation.item."):
            item = event.get("item")
            content = item.get("content") if isinstance(item, dict) else None
            if isinstance(content, list):
                return sum(_blank(part, "audio") for part in content)
        return 0
    dropped = 0
    realtime_input = _first_of(event, "realtimeInput", "realtime_input")
    if isinstance(realtime_input, dict):
        dropped += _blank(realtime_input.get("audio"), "data")
        chunks = _first_of(realtime_input, "mediaChunks", "media_chunks")
        if isinstance(chunks, list):
            dropped += sum(_blank(chunk, "data") for chunk in chunks if _is_audio_blob(chunk))
    server_content = _first_of(event, "serverContent", "server_content")
    parts = _first_of(_first_of(server_content, "modelTurn", "model_turn"), "parts")
    if isinstance(parts, list):
        for part in parts:
            blob = _first_of(part, "inlineData", "inline_data")
            if _is_audio_blob(blob):
                dropped += _blank(blob, "data")
    return dropped


# --- secrets ----------------------------------------------------------------------------------


class _Redactor:
    """Replaces every occurrence of the given secrets, as text and as UTF-8 bytes.

    A secret is matched literally and, when it holds `/`, also as `\\/` (how some JSON encoders
    write a slash). Secrets with a quote, a backslash or a control character are refused: a JSON
    encoder would escape them, so they could not be found in the text of a frame."""

    def __init__(self, secrets: Iterable[str]) -> None:
        spellings: set[str] = set()
        for secret in secrets:
            if not secret:
                continue
            if any(ch in secret for ch in '"\\') or any(ord(ch) < 0x20 for ch in secret):
                raise ValueError("secrets may not hold quotes, backslashes or control characters")
            spellings.add(secret)
            if "/" in secret:
                spellings.add(secret.replace("/", "\\/"))
        # longest first, so a secret that contains another is replaced whole
        self._texts = sorted(spellings, key=len, reverse=True)
        self._bytes = [(text.encode(), REDACTED.encode()) for text in self._texts]

    def text(self, value: str) -> str:
        for secret in self._texts:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def data(self, value: bytes) -> bytes:
        for secret, replacement in self._bytes:
            if secret in value:
                value = value.replace(secret, replacement)
        return value


# --- writer -----------------------------------------------------------------------------------


def _open_exclusive(path: Path) -> BinaryIO:
    """A new file, unbuffered so that each `write` goes straight to the OS; fails if it exists."""
    return open(path, "xb", buffering=0)


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
    }
    # what replay needs to rebuild the session (e.g. the engine's id prefix); never overrides
    for key, value in (extra_header or {}).items():
        header.setdefault(key, value)
    return header


class RecordingWriter:
    """Writes one session's frames to `<directory>/<UTC start>_<session id>.jsonl` as they pass.

    Every line goes out in one `write` of the complete line, unbuffered, so a crash loses at most
    the line being written. I/O failures (at construction too) never raise: the writer marks
    itself `failed`, logs one error and ignores later frames. Not thread-safe: one session, one
    task.

    `opener` creates the file (exclusively, binary, unbuffered); tests give one that fails like a
    full disk."""

    def __init__(
        self,
        directory: str | Path,
        *,
        session_id: str,
        dialect: str,
        upstream: str,
        tools: Iterable[str],
        mode: str = "proxy",
        record_audio: AudioPolicy = "keep",
        secrets: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        relay_version: str = __version__,
        logger: logging.Logger | None = None,
        opener: Callable[[Path], BinaryIO] = _open_exclusive,
        extra_header: dict[str, Any] | None = None,
    ) -> None:
        if record_audio not in ("keep", "drop"):
            raise ValueError(f"record_audio must be 'keep' or 'drop', not {record_audio!r}")
        self._clock = clock
        self._logger = logger or log
        self._drop_audio = record_audio == "drop"
        self._redactor = _Redactor(secrets)
        self._file: BinaryIO | None = None
        self._closed = False
        self._partial_line = False
        self._frames_written = 0
        self._frames_lost = 0
        self.failed = False
        self.failure: str | None = None

        started = datetime.fromtimestamp(wall_clock(), tz=timezone.utc)
        self._start = clock()
        session_id = self._redactor.text(session_id)
        directory = Path(directory)
        stem = f"{started:%Y%m%dT%H%M%SZ}_{_session_file_stem(session_id)}"
        self.path = directory / f"{stem}.jsonl"
        header = session_header(
            session_id=session_id, dialect=dialect, upstream=upstream, started_at=f"{started:%Y-%m-%dT%H:%M:%S.%fZ}",
            tools=tools, mode=mode, record_audio=record_audio, relay_version=relay_version,
            extra_header=extra_header, clean=self._redactor.text)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._file, self.path = self._create(directory, stem, opener)
        except OSError as exc:
            self._fail(f"cannot create a recording in {directory}: {exc}")
            return
        self._write_line(_dumps(header) + "\n")

    @staticmethod
    def _create(
        directory: Path, stem: str, opener: Callable[[Path], BinaryIO]
    ) -> tuple[BinaryIO, Path]:
        """Open a file that did not exist before, adding `_2`, `_3`, ... to the name if needed."""
        for number in range(1, _MAX_NAME_SUFFIX + 1):
            path = directory / (f"{stem}.jsonl" if number == 1 else f"{stem}_{number}.jsonl")
            try:
                return opener(path), path
            except FileExistsError:
                continue
        raise OSError(errno.EEXIST, f"{_MAX_NAME_SUFFIX} recordings named {stem}* already exist")

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close("closed" if exc_type is None else f"error: {exc_type.__name__}")

    def elapsed(self) -> float:
        """Seconds since the writer was created: the `t` a frame recorded now gets."""
        return self._clock() - self._start

    def record(self, direction: str, frame: str | bytes, *, t: float | None = None) -> None:
        """Append one frame; `t` defaults to seconds since the writer was created.

        A wrong direction or frame type is a bug in the caller and raises; a failed write does
        not."""
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}; expected one of {DIRECTIONS}")
        if not isinstance(frame, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"a frame is str or bytes, not {type(frame).__name__}")
        elapsed = self._clock() - self._start if t is None else t
        if not math.isfinite(elapsed):
            raise ValueError(f"frame time must be finite, not {elapsed}")
        if self._closed:
            return
        if self.failed:
            self._frames_lost += 1
            return
        if isinstance(frame, str):
            body = self._text_body(frame)
        else:
            body = self._binary_body(bytes(frame))
        if self._write_line('{"t":%.6f,"dir":"%s",%s}\n' % (elapsed, direction, body)):
            self._frames_written += 1
        else:
            self._frames_lost += 1

    def record_notice(self, kind: str, fields: dict[str, Any], *, t: float | None = None) -> None:
        """Append a `relay` line for an engine notice of a kind the format records (`NOTE_FIELDS`:
        a tool call's outcome and what the relay decided the assistant says about it); other
        kinds are not recorded. Not a frame: the end line does not count it. Never raises for I/O."""
        keys = NOTE_FIELDS.get(kind)
        if keys is None or self._closed or self.failed:
            return
        elapsed = self._clock() - self._start if t is None else t
        if not math.isfinite(elapsed):
            raise ValueError(f"note time must be finite, not {elapsed}")
        note = {"kind": kind, **{key: fields.get(key) for key in keys}}
        text = self._redactor.text(_dumps(note))
        if _parse_object(text) is None:   # a redaction cut through the JSON: keep what cannot leak
            text = _dumps({"kind": kind, "call_id": self._redactor.text(str(fields.get("call_id"))),
                           "redacted": True})
        self._write_line('{"t":%.6f,"relay":%s}\n' % (elapsed, text))

    def _text_body(self, frame: str) -> str:
        """The payload part of a frame line for a text frame: `"event":...` or `"raw":...`."""
        text = self._redactor.text(frame)
        event = _parse_object(text)
        if event is None:
            return '"raw":' + _dumps(text)
        dropped = drop_audio(event) if self._drop_audio else 0
        if dropped or "\n" in text or "\r" in text:
            # Must be re-serialised (audio removed, or a line break would split the line). Decoding
            # may have turned an escaped spelling of a secret into a literal one: redact again,
            # and keep the result only if the redaction did not cut through the JSON syntax.
            serialised = _dumps(event)
            text = self._redactor.text(serialised)
            if text != serialised and _parse_object(text) is None:
                return '"raw":' + _dumps(text) + _dropped_suffix(dropped)
        return '"event":' + text + _dropped_suffix(dropped)

    def _binary_body(self, frame: bytes) -> str:
        """`"binary":<base64>`; with the drop policy, JSON carried in binary frames (Gemini's
        server sends its events that way) loses its audio too."""
        data = self._redactor.data(frame)
        dropped = 0
        if self._drop_audio and any(marker in data for marker in _AUDIO_MARKERS):
            event = _parse_object(data)
            if event is not None:
                dropped = drop_audio(event)
                if dropped:
                    data = self._redactor.data(_dumps(event).encode())
        encoded = base64.b64encode(data).decode("ascii")
        return '"binary":"' + encoded + '"' + _dropped_suffix(dropped)

    def _write_line(self, line: str) -> bool:
        """Write a complete line; on an OS error, mark the writer failed. True if written."""
        assert self._file is not None
        # A lone surrogate cannot be encoded as UTF-8; as `\\udXXX` it is the JSON escape for the
        # same character, and it can only occur inside a JSON string, so the line stays valid.
        data = line.encode("utf-8", "backslashreplace")
        remaining = memoryview(data)
        try:
            while remaining:
                remaining = remaining[self._file.write(remaining) :]
        except OSError as exc:
            self._partial_line = len(remaining) < len(data)
            self._fail(f"cannot write to {self.path}: {exc}")
            return False
        return True

    def _fail(self, failure: str) -> None:
        self.failed = True
        self.failure = failure
        self._logger.error("session recording stopped, later frames are dropped: %s", failure)

    def close(self, reason: str = "closed") -> None:
        """Write the end line and close the file. Idempotent; never raises on I/O errors.

        After a failure the end line (saying so) is still attempted once, in case the disk had
        room again; it starts with a newline when the failure cut a line short."""
        if self._closed:
            return
        self._closed = True
        if self._file is None:
            return
        end: dict[str, Any] = {
            "reason": self._redactor.text(reason),
            "failed": self.failed,
            "frames": self._frames_written,
        }
        if self.failed:
            end["failure"] = self.failure
            end["lost_frames"] = self._frames_lost
        line = '{"t":%.6f,"end":%s}\n' % (self._clock() - self._start, _dumps(end))
        if not self.failed:
            self._write_line(line)
        else:
            try:
                self._file.write((("\n" if self._partial_line else "") + line).encode())
            except OSError:
                pass  # already failed and logged once; the reader reports the missing end line
        try:
            self._file.close()
        except OSError as exc:
            if not self.failed:
                self._fail(f"cannot close {self.path}: {exc}")
        self._file = None


def _dropped_suffix(dropped: int) -> str:
    return ',"audio_dropped":%d' % dropped if dropped else ""


# --- reader -----------------------------------------------------------------------------------


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
    damage: list[str] = field(default_factory=list)  # the warnings that mean frames are missing
    notes: list[Note] = field(default_factory=list)  # the `relay` lines, in order

    def tool_calls_decided(self) -> dict[str, dict[str, Any]]:
        """The relay's `tool_call` notes by call id (the last one of a call wins): its outcome,
        whether its output is an error, what the assistant was to say. Empty for a recording
        written before the relay recorded them."""
        return {str(note.fields["call_id"]): note.fields for note in self.notes
                if note.kind == "tool_call" and isinstance(note.fields.get("call_id"), str)}

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


def read_recording(path: str | Path, *, directions: Iterable[str] | None = None) -> Recording:
    """Read a whole recording (or plain event log). Damaged lines become warnings, not errors.

    Raises RecordingError only when nothing can be read: an unknown format, a newer version, or
    no JSON object on any line."""
    scanner = _Scanner(Path(path), [])
    frames = list(_filtered(scanner.frames(), directions))
    assert scanner.kind is not None
    return Recording(
        header=scanner.header,
        frames=frames,
        warnings=scanner.warnings,
        path=scanner.path,
        kind=scanner.kind,
        end=scanner.end,
        damage=scanner.damage,
        notes=scanner.notes,
    )


ALLOW_INCOMPLETE_OPTION = "--allow-incomplete"


def load_recording(path: str | Path, *, allow_incomplete: bool = False) -> Recording:
    """`read_recording` for a command (replay, export, inspect), which must not go on with input
    it cannot trust: raises RecordingError, its message one line saying why, for a path that is
    missing, a directory or empty, a file that is not a recording (JSON whose lines are not
    realtime events), and, unless `allow_incomplete`, a recording that lost frames (cut short,
    no end line, skipped lines); its warnings then stay on the result."""
    source = Path(path)
    if not source.exists():
        raise RecordingError(f"{source}: no such file")
    if source.is_dir():
        raise RecordingError(f"{source} is a directory, not a recording")
    try:
        if source.stat().st_size == 0:
            raise RecordingError(f"{source} is empty, not a recording")
        recording = read_recording(source)
    except OSError as exc:
        raise RecordingError(f"cannot read {source}: {exc.strerror or exc}") from None
    if recording.kind == "event-log" and not any(_is_realtime_event(f.event) for f in recording.frames):
        raise RecordingError(f"{source} is JSON but not a recording: no line is a realtime event "
                             "(an object with a `type`, or a Gemini Live message)")
    if recording.damage and not allow_incomplete:
        more = len(recording.damage) - 1
        also = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise RecordingError(f"{source} is incomplete: {recording.damage[0]}{also}; "
                             f"pass {ALLOW_INCOMPLETE_OPTION} to use what it holds")
    return recording


def _is_realtime_event(event: object) -> bool:
    return isinstance(event, dict) and (isinstance(event.get("type"), str) or is_gemini_message(event))


def iter_frames(
    path: str | Path,
    *,
    directions: Iterable[str] | None = None,
    warnings: list[str] | None = None,
) -> Iterator[Frame]:
    """Stream the frames of a recording without holding them all; warnings are appended to
    `warnings` (when given) as the damaged lines are met."""
    scanner = _Scanner(Path(path), warnings if warnings is not None else [])
    yield from _filtered(scanner.frames(), directions)


def _filtered(frames: Iterator[Frame], directions: Iterable[str] | None) -> Iterator[Frame]:
    if directions is None:
        return frames
    wanted = frozenset(directions)
    unknown = wanted.difference(DIRECTIONS)
    if unknown:
        raise ValueError(f"unknown directions {sorted(unknown)}; expected some of {DIRECTIONS}")
    return (frame for frame in frames if frame.direction in wanted)


def _infer_direction(event: dict[str, Any]) -> str:
    """Which way a bare event went, from its type: client events went to the upstream."""
    event_type = event.get("type")
    if isinstance(event_type, str):
        is_client = event_type in _OPENAI_CLIENT_EVENT_TYPES
    else:
        is_client = not _GEMINI_CLIENT_KEYS.isdisjoint(event)
    return CLIENT_TO_RELAY if is_client else UPSTREAM_TO_RELAY


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Scanner:
    """Reads a file line by line, decides its kind from the first object, and yields frames."""

    def __init__(self, path: Path, warnings: list[str]) -> None:
        self.path = path
        self.warnings = warnings
        self.damage: list[str] = []   # the warnings that mean frames are missing
        self.notes: list[Note] = []
        self.kind: Literal["relay", "event-log"] | None = None
        self.header: dict[str, Any] | None = None
        self.end: dict[str, Any] | None = None
        self._frames_read = 0
        self._meta_directions: list[Any] | None = None

    def frames(self) -> Iterator[Frame]:
        with open(self.path, "rb") as file:
            line_no = 0
            for line_no, line in enumerate(file, start=1):
                obj = self._parse_line(line_no, line)
                if obj is None:
                    continue
                if self.kind is None:
                    self._decide_kind(line_no, obj)
                    if self.header is not None:
                        continue
                if self.kind == "relay":
                    frame = self._relay_frame(line_no, obj)
                else:
                    frame = self._log_frame(line_no, obj)
                if frame is not None:
                    self._frames_read += 1
                    yield frame
        if self.kind is None:
            raise RecordingError(f"{self.path}: no line holds a JSON object; not a recording")
        self._check_complete(line_no)

    def _parse_line(self, line_no: int, line: bytes) -> dict[str, Any] | None:
        complete = line.endswith(b"\n")
        line = line.strip()
        if not line:
            return None
        try:
            value = json.loads(line)
        except (ValueError, RecursionError) as exc:
            if complete:
                self._damaged(f"line {line_no}: skipped, not valid JSON ({exc})")
            else:
                self._damaged(
                    f"line {line_no}: skipped, cut short (the file ends in the middle of it)"
                )
            return None
        if not isinstance(value, dict):
            self._damaged(f"line {line_no}: skipped, not a JSON object")
            return None
        return value

    def _decide_kind(self, line_no: int, obj: dict[str, Any]) -> None:
        if "format" in obj and "type" not in obj:  # events have a type; a header does not
            if obj["format"] != FORMAT_NAME:
                raise RecordingError(f"{self.path}: unknown format {obj['format']!r}")
            version = obj.get("version")
            if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                raise RecordingError(f"{self.path}: invalid format version {version!r}")
            if version > FORMAT_VERSION:
                raise RecordingError(
                    f"{self.path}: recording format version {version} is newer than this relay "
                    f"reads (up to {FORMAT_VERSION}); upgrade relay to replay it"
                )
            self.kind, self.header = "relay", obj
        elif "dir" in obj and "t" in obj:
            self.kind = "relay"
            self._damaged(f"line {line_no}: a frame before any header line; header missing")
        else:
            self.kind = "event-log"
            self._meta_directions = self._load_meta_directions()

    def _relay_frame(self, line_no: int, obj: dict[str, Any]) -> Frame | None:
        t = obj.get("t")
        if "end" in obj and isinstance(obj["end"], dict):
            self.end = obj["end"]
            return None
        if "relay" in obj and "dir" not in obj:
            note = obj["relay"]
            if isinstance(note, dict) and isinstance(note.get("kind"), str) and _is_number(t):
                fields = {key: value for key, value in note.items() if key != "kind"}
                self.notes.append(Note(float(t), note["kind"], fields, line_no))
            else:
                self.warnings.append(f"line {line_no}: relay line without a kind or a time; ignored")
            return None
        direction = obj.get("dir")
        payloads = [key for key in ("event", "raw", "binary") if key in obj]
        if not _is_number(t) or direction not in DIRECTIONS or len(payloads) != 1:
            self._damaged(f"line {line_no}: skipped, not a frame line")
            return None
        payload_key, payload = payloads[0], obj[payloads[0]]
        event: dict[str, Any] | None = None
        raw: str | None = None
        binary: bytes | None = None
        if payload_key == "event" and isinstance(payload, dict):
            event = payload
        elif payload_key == "raw" and isinstance(payload, str):
            raw = payload
        elif payload_key == "binary" and isinstance(payload, str):
            try:
                binary = base64.b64decode(payload, validate=True)
            except binascii.Error:
                self._damaged(f"line {line_no}: skipped, binary is not base64")
                return None
        else:
            self._damaged(f"line {line_no}: skipped, {payload_key} has the wrong type")
            return None
        dropped = obj.get("audio_dropped", 0)
        return Frame(
            t=float(t),
            direction=direction,
            event=event,
            raw=raw,
            binary=binary,
            line_no=line_no,
            audio_dropped=int(dropped) if _is_number(dropped) else 0,
        )

    def _log_frame(self, line_no: int, event: dict[str, Any]) -> Frame:
        index = line_no - 1
        return Frame(
            t=round(index * 0.001, 6),
            direction=self._log_direction(index, event),
            event=event,
            raw=None,
            binary=None,
            line_no=line_no,
        )

    def _log_direction(self, index: int, event: dict[str, Any]) -> str:
        if self._meta_directions is not None and index < len(self._meta_directions):
            named = self._meta_directions[index]
            if isinstance(named, str) and named in DIRECTIONS:
                return named
            if named in _META_DIRECTIONS:
                return _META_DIRECTIONS[named]
            self.warnings.append(
                f"line {index + 1}: meta direction {named!r} unknown; inferred from the event type"
            )
        return _infer_direction(event)

    def _meta_path(self) -> Path:
        return self.path.with_name(self.path.stem + ".meta.json")

    def _load_meta_directions(self) -> list[Any] | None:
        meta_path = self._meta_path()
        if not meta_path.exists():
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.warnings.append(f"{meta_path.name}: unreadable ({exc}); directions inferred")
            return None
        directions = meta.get("directions") if isinstance(meta, dict) else None
        if not isinstance(directions, list):
            self.warnings.append(f"{meta_path.name}: no directions list; directions inferred")
            return None
        return directions

    def _check_complete(self, last_line_no: int) -> None:
        if self.kind == "event-log":
            if self._meta_directions is not None and len(self._meta_directions) != last_line_no:
                self.warnings.append(
                    f"{self._meta_path().name}: {len(self._meta_directions)} directions for "
                    f"{last_line_no} lines"
                )
            return
        if self.end is None:
            self._damaged("no end line: the session did not close cleanly or is still open")
            return
        if self.end.get("failed"):
            self._damaged(
                f"incomplete: the writer failed ({self.end.get('failure')}); "
                f"{self.end.get('lost_frames')} frames were lost"
            )
        written = self.end.get("frames")
        if _is_number(written) and written != self._frames_read:
            self._damaged(
                f"the end line counts {written} frames written, {self._frames_read} were read"
            )

    def _damaged(self, warning: str) -> None:
        self.warnings.append(warning)
        self.damage.append(warning)
