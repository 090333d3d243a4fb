"""Reading a recording back (replay, export, the inspector, tests): `read_recording` takes
whatever can be read and warns about the rest; `load_recording` is the commands' strict reader,
which refuses a recording that lost frames unless asked."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal, TypeGuard

from relay.dialects.openai import CLIENT_EVENT_TYPES
from relay.dialects.gemini import CLIENT_MESSAGE_KEYS, is_gemini_message, snake_case
from relay.recording.audio import without_audio
from relay.recording.format import (
    CLIENT_TO_RELAY,
    DIRECTIONS,
    FORMAT_NAME,
    FORMAT_VERSION,
    UPSTREAM_TO_RELAY,
    AudioPolicy,
    Frame,
    Note,
    Recording,
    RecordingError,
)

log = logging.getLogger("relay.recording")

_OPENAI_CLIENT_EVENT_TYPES = frozenset({*CLIENT_EVENT_TYPES, "transcription_session.update"})
# Gemini Live frames have one top-level key; the server accepts camelCase and snake_case.
_GEMINI_CLIENT_KEYS = frozenset({*CLIENT_MESSAGE_KEYS, *map(snake_case, CLIENT_MESSAGE_KEYS)})
# How the `directions` array of a `NAME.meta.json` beside a plain event log names each side.
_META_DIRECTIONS = {"client": CLIENT_TO_RELAY, "server": UPSTREAM_TO_RELAY}


def read_recording(path: str | Path, *, directions: Iterable[str] | None = None,
                   file: BinaryIO | None = None, audio: AudioPolicy = "keep") -> Recording:
    """Read a whole recording (or plain event log). Damaged lines become warnings, not errors.
    `file`: the recording already open (binary, at its start), read instead of opening `path`.
    `audio="drop"`: each frame's audio payloads are left out as it is read (`without_audio`), so
    what is held grows with the session's events, not its audio.

    Raises RecordingError only when nothing can be read: an unknown format, a newer version, or
    no JSON object on any line."""
    scanner = _Scanner(Path(path), [], file)
    read = scanner.frames()
    frames = list(_filtered(map(without_audio, read) if audio == "drop" else read, directions))
    assert scanner.kind is not None
    return Recording(
        header=scanner.header,
        frames=frames,
        warnings=scanner.warnings,
        path=scanner.path,
        kind=scanner.kind,
        end=scanner.end,
        end_t=scanner.end_t,
        damage=scanner.damage,
        notes=scanner.notes,
        audio=audio,
    )


ALLOW_INCOMPLETE_OPTION = "--allow-incomplete"


def load_recording(path: str | Path, *, allow_incomplete: bool = False, audio: AudioPolicy = "keep") -> Recording:
    """`read_recording` for a command (replay, export, inspect), which must not go on with input
    it cannot trust: raises RecordingError, its message one line saying why, for a path that is
    missing, a directory or empty, a file that is not a recording (JSON whose lines are not
    realtime events), and, unless `allow_incomplete`, a recording that lost frames (cut short,
    no end line, skipped lines); its warnings then stay on the result. `audio`: as for
    `read_recording`."""
    source = Path(path)
    if not source.exists():
        raise RecordingError(f"{source}: no such file")
    if source.is_dir():
        raise RecordingError(f"{source} is a directory, not a recording")
    try:
        if source.stat().st_size == 0:
            raise RecordingError(f"{source} is empty, not a recording")
        recording = read_recording(source, audio=audio)
    except OSError as exc:
        raise RecordingError(f"cannot read {source}: {exc.strerror or exc}") from None
    if recording.kind == "event-log" and not any(is_realtime_event(f.event) for f in recording.frames):
        raise RecordingError(f"{source} {NO_REALTIME_EVENT}")
    if recording.damage and not allow_incomplete:
        more = len(recording.damage) - 1
        also = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise RecordingError(f"{source} is incomplete: {recording.damage[0]}{also}; "
                             f"pass {ALLOW_INCOMPLETE_OPTION} to use what it holds")
    return recording


_ARCHIVES = ((b"\x1f\x8b", "gzip-compressed: decompress it first (gunzip -k FILE)"),
             (b"PK\x03\x04", "a zip archive: extract the recording first"),
             (b"(\xb5/\xfd", "zstd-compressed: decompress it first (zstd -d FILE)"))


def archive_of(path: Path) -> str | None:
    """What archive `path` is, when its first bytes say so (a recording kept compressed), and
    what to do about it; None for any other file."""
    try:
        with open(path, "rb") as file:
            head = file.read(4)
    except OSError:
        return None
    return next((what for magic, what in _ARCHIVES if head.startswith(magic)), None)


def no_json_object(path: Path) -> str:
    """Why a file none of whose lines holds a JSON object is not a recording: the archive it is,
    else that no line holds one."""
    archive = archive_of(path)
    return f"not a recording but {archive}" if archive else "no line holds a JSON object; not a recording"


NO_REALTIME_EVENT = ("is JSON but not a recording: no line is a realtime event (an object with a `type`, "
                     "or a Gemini Live message)")
"""Why an event log none of whose objects is a realtime event is refused (after its path)."""


def is_realtime_event(event: object) -> bool:
    """Whether an event log's object is a realtime event: a `type`d event, or a Gemini Live message."""
    return isinstance(event, dict) and (isinstance(event.get("type"), str) or is_gemini_message(event))


def iter_frames(
    path: str | Path,
    *,
    directions: Iterable[str] | None = None,
    warnings: list[str] | None = None,
    notes: list[Note] | None = None,
    file: BinaryIO | None = None,
) -> Iterator[Frame]:
    """Stream the frames of a recording without holding them all; warnings are appended to
    `warnings` and the `relay` lines to `notes` (when given) as they are met. `file`: the
    recording already open (binary, at its start), read instead of opening `path` (and left
    open)."""
    scanner = _Scanner(Path(path), warnings if warnings is not None else [], file)
    if notes is not None:
        scanner.notes = notes
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

    def __init__(self, path: Path, warnings: list[str], file: BinaryIO | None = None) -> None:
        self.path = path
        self._file = file
        self.warnings = warnings
        self.damage: list[str] = []   # the warnings that mean frames are missing
        self.notes: list[Note] = []
        self.kind: Literal["relay", "event-log"] | None = None
        self.header: dict[str, Any] | None = None
        self.end: dict[str, Any] | None = None
        self.end_t: float | None = None
        self._frames_read = 0
        self._meta_directions: list[Any] | None = None

    def frames(self) -> Iterator[Frame]:
        with open(self.path, "rb") if self._file is None else contextlib.nullcontext(self._file) as file:
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
            raise RecordingError(f"{self.path}: {no_json_object(self.path)}")
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
            self.end_t = float(t) if _is_number(t) else None
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
