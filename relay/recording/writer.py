"""Writing a session's recording as it happens: one unbuffered line per frame, never taking
the session down (see `RecordingWriter`).

The writer sits on the hot path of every frame, so it avoids work: a text frame that is already a
JSON object is written as the same text inside its line (parsed once to be sure it is valid, never
re-serialised unless it must change), and the audio policy looks at the event type, not at every
field. I/O failures are logged once and later frames are dropped, but `record` does not raise
because of them."""

from __future__ import annotations

import base64
import errno
import functools
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

from relay import __version__
from relay.recording.audio import _AUDIO_MARKERS, drop_audio
from relay.recording.format import (
    DIRECTIONS,
    NOTE_FIELDS,
    AudioPolicy,
    Frame,
    Note,
    dumps,
    parse_object,
    session_header,
)
from relay.recording.redact import Redactor

log = logging.getLogger("relay.recording")
_MAX_NAME_SUFFIX = 1000
# A recording holds transcripts and audio: readable by its owner alone unless configured
# otherwise (`--record-mode`), in a directory the relay creates for its owner alone likewise.
RECORDING_FILE_MODE = 0o600


def directory_mode(file_mode: int) -> int:
    """The mode of a directory the relay creates for recordings of `file_mode`: whoever may read
    them may list it (0600 -> 0700, 0640 -> 0750)."""
    return 0o700 | file_mode | ((file_mode & 0o044) >> 2)
_SESSION_ID_MAX_CHARS = 80
_UNSAFE_NAME_CHARS = re.compile(r"[^A-Za-z0-9._-]")


def _session_file_stem(session_id: str) -> str:
    """A session id reduced to characters that are safe in a file name on every platform."""
    stem = _UNSAFE_NAME_CHARS.sub("_", session_id)[:_SESSION_ID_MAX_CHARS].lstrip(".")
    return stem or "session"



def _open_exclusive(path: Path, mode: int = RECORDING_FILE_MODE) -> BinaryIO:
    """A new file of `mode` (whatever the umask), unbuffered so that each `write` goes straight to
    the OS; fails if it exists (or is a symbolic link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), mode)
    try:
        os.fchmod(fd, mode)
        return os.fdopen(fd, "wb", buffering=0)
    except BaseException:
        os.close(fd)
        raise



class RecordingFilter:
    """What a recording holds of a frame or an engine notice: its secrets redacted and, with the
    `drop` audio policy, its audio left out; of notices, the kinds and fields the format records.
    The writer writes what this gives; the live inspector shows the same (`as_frame`, `as_note`),
    so a live view never differs from the file it stands for. Pure: safe in a worker thread."""

    def __init__(self, redactor: Redactor, record_audio: AudioPolicy = "keep") -> None:
        if record_audio not in ("keep", "drop"):
            raise ValueError(f"record_audio must be 'keep' or 'drop', not {record_audio!r}")
        self.redactor = redactor
        self.drop_audio = record_audio == "drop"

    def text(self, frame: str) -> tuple[dict[str, Any] | None, str, int]:
        """A text frame as recorded: `(event, its JSON text, audio characters dropped)` when it
        is a JSON object, else `(None, the raw text, dropped)`. An event is kept as the very text
        it came in (parsed once to be sure it is valid), re-serialised only when it must change."""
        redact = self.redactor.text
        text = redact(frame)
        event = parse_object(text)
        if event is None:
            return None, text, 0
        dropped = drop_audio(event) if self.drop_audio else 0
        if dropped or "\n" in text or "\r" in text:
            # Must be re-serialised (audio removed, or a line break would split the line). Decoding
            # may have turned an escaped spelling of a secret into a literal one: redact again,
            # and keep the result only if the redaction did not cut through the JSON syntax.
            serialised = dumps(event)
            text = redact(serialised)
            if text != serialised:
                event = parse_object(text)
        return event, text, dropped

    def binary(self, frame: bytes) -> tuple[bytes, int]:
        """A binary frame as recorded: `(its bytes, audio characters dropped)`; with the drop
        policy, JSON carried in binary frames (Gemini's server sends its events that way) loses
        its audio too."""
        data = self.redactor.data(frame)
        dropped = 0
        if self.drop_audio and any(marker in data for marker in _AUDIO_MARKERS):
            event = parse_object(data)
            if event is not None:
                dropped = drop_audio(event)
                if dropped:
                    data = self.redactor.data(dumps(event).encode("utf-8", "backslashreplace"))
        return data, dropped

    def note(self, kind: str, fields: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
        """A notice as its `relay` line holds it, `(object, JSON text)`; None for a kind the
        format does not record (`NOTE_FIELDS`)."""
        keys = NOTE_FIELDS.get(kind)
        if keys is None:
            return None
        text = self.redactor.text(dumps({"kind": kind, **{key: fields.get(key) for key in keys}}))
        note = parse_object(text)
        if note is None:   # a redaction cut through the JSON: keep what cannot leak
            note = {"kind": kind, "call_id": self.redactor.text(str(fields.get("call_id"))), "redacted": True}
            text = dumps(note)
        return note, text

    def as_frame(self, t: float, direction: str, frame: str | bytes) -> Frame:
        """The frame as the recording's reader gives it back."""
        if isinstance(frame, str):
            event, text, dropped = self.text(frame)
            return Frame(t, direction, event, None if event is not None else text, None, 0, dropped)
        data, dropped = self.binary(bytes(frame))
        return Frame(t, direction, None, None, data, 0, dropped)

    def as_note(self, t: float, kind: str, fields: dict[str, Any]) -> Note | None:
        """The notice as the recording's reader gives it back; None when it is not recorded."""
        recorded = self.note(kind, fields)
        if recorded is None:
            return None
        note = recorded[0]
        return Note(t, kind, {key: value for key, value in note.items() if key != "kind"}, 0)


class RecordingWriter:
    """Writes one session's frames to `<directory>/<UTC start>_<session id>.jsonl` as they pass.

    Every line goes out in one `write` of the complete line, unbuffered, so a crash loses at most
    the line being written. I/O failures (at construction too) never raise: the writer marks
    itself `failed`, logs one error and ignores later frames. Not thread-safe: one session, one
    task.

    What a line holds of a frame or a notice is `filter`'s (`RecordingFilter`). `secrets` are kept
    out of the file: the edge's `Redactor` itself (so a token refreshed during the session is kept
    out too) or a list of them. The file is created `file_mode` (0600: its owner's alone), in a
    directory created `directory_mode(file_mode)` when it does not exist (one that exists keeps its
    mode). `opener` creates the file (exclusively, binary, unbuffered); tests give one that fails
    like a full disk."""

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
        secrets: Redactor | Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        relay_version: str = __version__,
        logger: logging.Logger | None = None,
        opener: Callable[[Path], BinaryIO] | None = None,
        extra_header: dict[str, Any] | None = None,
        file_mode: int = RECORDING_FILE_MODE,
    ) -> None:
        redactor = secrets if isinstance(secrets, Redactor) else Redactor(secrets)
        self.filter = RecordingFilter(redactor, record_audio)
        self._clock = clock
        self._logger = logger or log
        self._file: BinaryIO | None = None
        self._closed = False
        self._partial_line = False
        self._frames_written = 0
        self._frames_lost = 0
        self.failed = False
        self.failure: str | None = None

        started = datetime.fromtimestamp(wall_clock(), tz=timezone.utc)
        self._start = clock()
        session_id = redactor.text(session_id)
        directory = Path(directory)
        stem = f"{started:%Y%m%dT%H%M%SZ}_{_session_file_stem(session_id)}"
        self.path = directory / f"{stem}.jsonl"
        header = session_header(
            session_id=session_id, dialect=dialect, upstream=upstream, started_at=f"{started:%Y-%m-%dT%H:%M:%S.%fZ}",
            tools=tools, mode=mode, record_audio=record_audio, relay_version=relay_version,
            extra_header=extra_header, clean=redactor.text)
        try:
            if not directory.is_dir():
                directory.mkdir(parents=True, exist_ok=True)
                directory.chmod(directory_mode(file_mode))   # whatever the umask
            self._file, self.path = self._create(directory, stem,
                                                 opener or functools.partial(_open_exclusive, mode=file_mode))
        except OSError as exc:
            self._fail(f"cannot create a recording in {directory}: {exc}")
            return
        self._write_line(dumps(header) + "\n")

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
        if exc_type is None:
            self.close("closed")
        else:
            self.close(f"error: {exc_type.__name__}", error=exc_type.__name__)

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
            event, text, dropped = self.filter.text(frame)
            body = ('"event":' + text if event is not None else '"raw":' + dumps(text)) + _dropped_suffix(dropped)
        else:
            data, dropped = self.filter.binary(bytes(frame))
            body = '"binary":"' + base64.b64encode(data).decode("ascii") + '"' + _dropped_suffix(dropped)
        if self._write_line('{"t":%.6f,"dir":"%s",%s}\n' % (elapsed, direction, body)):
            self._frames_written += 1
        else:
            self._frames_lost += 1

    def record_notice(self, kind: str, fields: dict[str, Any], *, t: float | None = None) -> None:
        """Append a `relay` line for an engine notice of a kind the format records (`NOTE_FIELDS`:
        a tool call's outcome and what the relay decided the assistant says about it); other
        kinds are not recorded. Not a frame: the end line does not count it. Never raises for I/O."""
        if kind not in NOTE_FIELDS or self._closed or self.failed:
            return
        elapsed = self._clock() - self._start if t is None else t
        if not math.isfinite(elapsed):
            raise ValueError(f"note time must be finite, not {elapsed}")
        recorded = self.filter.note(kind, fields)
        assert recorded is not None
        self._write_line('{"t":%.6f,"relay":%s}\n' % (elapsed, recorded[1]))

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

    def close(self, reason: str = "closed", *, error: str | None = None) -> None:
        """Write the end line and close the file. Idempotent; never raises on I/O errors.
        `error` names what made the session end, when an error did (the end line's `error`: a
        reader learns it from there, not from the reason's words).

        After a failure the end line (saying so) is still attempted once, in case the disk had
        room again; it starts with a newline when the failure cut a line short."""
        if self._closed:
            return
        self._closed = True
        if self._file is None:
            return
        end: dict[str, Any] = {
            "reason": self.filter.redactor.text(reason),
            "failed": self.failed,
            "frames": self._frames_written,
        }
        if error is not None:
            end["error"] = error
        if self.failed:
            end["failure"] = self.failure
            end["lost_frames"] = self._frames_lost
        line = '{"t":%.6f,"end":%s}\n' % (self._clock() - self._start, dumps(end))
        if not self.failed:
            self._write_line(line)
        else:
            try:
                self._file.write((("\n" if self._partial_line else "") + line).encode("utf-8", "backslashreplace"))
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

