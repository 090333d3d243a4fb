"""The live inspector's hub: the sessions an edge runs, and the model of each one someone watches.

An edge with the inspector on registers every session here (`LiveHub.open_session`) with its own
recorders (relay.recording.taps.Taps: the traffic counter, the recording) and gives its session
loop the `LiveTap` it gets back as recorder. While nobody watches a session, the tap's `record`
goes to the edge's recorders only: the audio path pays nothing for the inspector, and no model
exists. When a page opens the session, the session joins its taps, keeps the frames it sees, and
a model is built:

- a recorded session is seen from its start: the recording so far is read (in a worker thread,
  up to the size it had at that instant) and the frames kept since are fed after it;
- a session without a recording is seen from that moment on (what came before was not kept).

The frames are fed to the model in batches by the watchers' connections (relay/inspector/live/
feed.py), in a worker thread, as the recording holds them: through the recording's own
`RecordingFilter` (secrets redacted, audio left out with `--record-audio drop`), or one with the
same rules when the session is not recorded, so the live view never differs from the file. When
the last watcher leaves a live session the session leaves the taps and the model is dropped.
Ended sessions stay listed (the last `recent` of them); one that was recorded reopens from its
recording, one that was not from the view its watchers had (the last few are kept), else only its
facts remain.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol

import anyio

from relay.dialects.jsontext import utf8_safe
from relay.inspector.model import SessionModel, build_model
from relay.recording.format import NOTE_FIELDS, Note
from relay.recording.reader import iter_frames, read_recording
from relay.recording.taps import Taps
from relay.recording.writer import RecordingFilter

if TYPE_CHECKING:
    from relay.recording.writer import RecordingWriter

log = logging.getLogger("relay.inspector")

RECENT_SESSIONS = 20          # ended sessions the list keeps
KEPT_VIEWS = 4                # models of ended, unrecorded sessions kept for a later look
MAX_PENDING_BYTES = 64 << 20  # frames waiting for the model; past this the view stops (see `record`)

# What waits for the model: (t, direction, frame), or (t, None, (kind, fields)) for a notice.
Pending = tuple[float, str | None, Any]


class Watcher(Protocol):
    """A page's connection, as the hub sees it (relay/inspector/live/feed.py)."""

    def post(self, message: str) -> None: ...
    def wake(self) -> None: ...
    def sessions_changed(self) -> None: ...


class LiveTap:
    """The session loop's recorder when the inspector is on: the edge's own recorders (`taps`:
    the traffic counter, the recording...), which the session's live view joins while someone
    watches it. `record` and `record_notice` are the chain's own methods: nobody watching, the
    view costs the frames nothing. `close(reason)`, what the edge calls when the session ends,
    closes the chain and ends the session in the hub's list."""

    def __init__(self, session: LiveSession, taps: Taps) -> None:
        self.session = session
        self.taps = taps
        self.record = taps.record
        self.record_forwarded = taps.record_forwarded
        self.lane = taps.lane
        self.record_notice = taps.record_notice

    def watch(self) -> None:
        self.taps.add(self.session)

    def unwatch(self) -> None:
        self.taps.remove(self.session)

    def close(self, reason: str) -> None:
        try:
            self.taps.close(reason)
        finally:
            self.session.end(reason)


class LiveSession:
    """One session of the edge, as the inspector lists and shows it."""

    def __init__(self, hub: LiveHub, session_id: str, *, header: dict[str, Any],
                 recording: RecordingWriter | None, as_recorded: RecordingFilter, facts: dict[str, Any]) -> None:
        self.hub = hub
        self.id = session_id
        self.header = header
        self.recording = recording
        self.as_recorded = as_recorded   # the recording's own filter, or one with the same rules
        self.facts = facts
        self.tap: LiveTap | None = None
        self.model: SessionModel | None = None
        self.watchers: set[Watcher] = set()
        self.ended: dict[str, Any] | None = None
        self.lock = anyio.Lock()
        # frames are timed as the recording times them, so that its frames and the tap's line up
        self._elapsed: Callable[[], float] = recording.elapsed if recording is not None else _since(time.monotonic())
        self._pending: list[Pending] = []
        self._pending_bytes = 0
        self._woken = False
        self._finished = False   # the model has been told the session ended
        self._fell_behind = False

    # ---- what the list says ------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        return {**self.facts, "live": self.ended is None, "watchers": len(self.watchers),
                "recorded": self._recording_path() is not None,
                **({"ended_at": self.ended["ended_at"], "end_reason": self.ended["reason"]} if self.ended else {})}

    def _recording_path(self) -> Path | None:
        recording = self.recording
        if recording is None or recording.failed or not recording.path.exists():
            return None
        return recording.path

    # ---- frames (the loop's side, as a member of its taps while watched; synchronous, cheap) --
    def record(self, direction: str, frame: str | bytes) -> None:
        """A frame while someone watches: kept for the next batch, and the watchers woken once
        per batch. A view that cannot keep up (more than MAX_PENDING_BYTES waiting) stops
        rather than hold the session's memory."""
        self._keep((self._elapsed(), direction, frame), len(frame))

    def record_notice(self, kind: str, fields: dict[str, Any]) -> None:
        """An engine notice while someone watches: kept beside the frames, for the model to
        read as the recording holds it (what the relay decided about a tool call)."""
        if kind in NOTE_FIELDS:
            self._keep((self._elapsed(), None, (kind, dict(fields))), 0)

    def _keep(self, pending: Pending, size: int) -> None:
        self._pending.append(pending)
        self._pending_bytes += size
        if self._pending_bytes > MAX_PENDING_BYTES:
            self._stop_view("the view fell behind the session (too many frames to follow); open it again")
            return
        if not self._woken:
            self._woken = True
            for watcher in self.watchers:
                watcher.wake()

    def close(self, reason: str) -> None:
        self.end(reason)

    def end(self, reason: str) -> None:
        if self.ended is not None:
            return
        self.ended = {"reason": reason, "ended_at": _now_iso(), "t": self._elapsed()}
        self.hub._ended(self)
        for watcher in self.watchers:
            watcher.wake()

    def _stop_view(self, why: str) -> None:
        log.warning("inspector: %s", why, extra={"session_id": self.id})
        if self.tap is not None:
            self.tap.unwatch()
        self._pending, self._pending_bytes, self._woken = [], 0, False
        self.model = None
        self._fell_behind = True
        message = json.dumps({"type": "error", "session": self.id, "message": why})
        for watcher in list(self.watchers):
            watcher.post(message)
        self.watchers.clear()

    @property
    def has_news(self) -> bool:
        """Frames wait for the model, or the model has not been told the session ended."""
        return bool(self._pending) or (self.ended is not None and self.model is not None and not self._finished)

    # ---- the view (the watchers' side) --------------------------------------------------
    async def open(self, watcher: Watcher) -> str:
        """Add a watcher; the message that shows it the session as it is now (a snapshot, or
        why there is nothing to show)."""
        async with self.lock:
            if self.model is None:
                self._fell_behind = False
                since: float | None = None
                path = self._recording_path()
                if self.ended is None:
                    if self.tap is not None:
                        self.tap.watch()
                    if path is None:
                        since = self._elapsed()
                        self.model = self._new_model()
                    else:
                        self.model = await anyio.to_thread.run_sync(_model_of_prefix, path, self.header)
                elif path is not None:
                    self.model = await anyio.to_thread.run_sync(_model_of_recording, path)
                    self._finished = True
                else:
                    return json.dumps({"type": "unavailable", "session": self.id, "facts": self.describe(),
                                       "message": "this session was not recorded and nobody watched it: "
                                                  "nothing of it was kept"})
                if since is not None:
                    self.model.set_extra("live", {"since": round(since, 6)})
            await self._flush_locked()
            self.watchers.add(watcher)
            self.hub._kept(self)
            model = self.model
            assert model is not None
            return await anyio.to_thread.run_sync(self._snapshot_message, model)

    def _snapshot_message(self, model: SessionModel) -> str:
        return utf8_safe(json.dumps({"type": "snapshot", "session": self.id, "facts": self.describe(),
                                     "model": model.snapshot()}, ensure_ascii=False))

    def leave(self, watcher: Watcher) -> None:
        """A watcher left; with the last one, a live session stops being followed."""
        self.watchers.discard(watcher)
        if self.watchers:
            return
        if self.ended is None:
            if self.tap is not None:
                self.tap.unwatch()
            self._pending, self._pending_bytes, self._woken = [], 0, False
            self.model = None
        elif self._recording_path() is not None:
            self.model = None     # its recording has it all
        else:
            self.hub._kept(self)

    async def flush(self) -> None:
        """Feed the frames kept since the last batch to the model (in a worker thread) and post
        what changed to every watcher."""
        async with self.lock:
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        model = self.model
        if model is None or not self.has_news:
            return
        batch, self._pending, self._pending_bytes, self._woken = self._pending, [], 0, False
        end = None
        if self.ended is not None and not self._finished:
            self._finished = True
            end = {"reason": self.ended["reason"], "t": self.ended["t"]}
        message = await anyio.to_thread.run_sync(self._feed_batch, model, batch, end)
        if self.model is not model:
            return   # stopped meanwhile
        for watcher in self.watchers:
            watcher.post(message)

    def _feed_batch(self, model: SessionModel, batch: list[Pending],
                    end: dict[str, Any] | None) -> str:
        for t, direction, payload in batch:
            if direction is not None:
                model.feed(self.as_recorded.as_frame(t, direction, payload))
                continue
            note = self.as_recorded.as_note(t, *payload)
            if note is not None:
                model.note(note)
        if end is not None:
            model.finish({"reason": end["reason"]}, end_t=end["t"])
        message: dict[str, Any] = {"type": "delta", "session": self.id, "delta": model.delta()}
        if end is not None:
            message["ended"] = self.describe()
        return utf8_safe(json.dumps(message, ensure_ascii=False))   # a lone surrogate a session carried, escaped

    def _new_model(self) -> SessionModel:
        return SessionModel(name=f"{self.id} (live)", header=self.header, kind="relay")


class LiveHub:
    """The live and recently ended sessions of one edge (one process), and the pages' connections
    that want to hear when the list changes."""

    def __init__(self, *, recent: int = RECENT_SESSIONS, kept_views: int = KEPT_VIEWS) -> None:
        self.live: dict[str, LiveSession] = {}
        self.recent: deque[LiveSession] = deque(maxlen=recent)
        self.kept_views = kept_views
        self.listeners: set[Watcher] = set()
        self._views: deque[LiveSession] = deque()   # ended, unrecorded sessions whose model is kept

    def open_session(self, session_id: str, *, header: dict[str, Any], as_recorded: RecordingFilter,
                     recording: RecordingWriter | None, taps: Taps, **facts: Any) -> LiveTap:
        """Register a session that starts now; its loop's recorder is the tap returned, made of
        `taps`, the edge's own recorders (`recording` among them, if any). `header` is the
        session's recording header (relay.recording.format.session_header: what a recording of it
        starts with, whether or not it is recorded); `as_recorded` shows a frame as the recording
        holds it (the recording's own filter, or one with the same rules when it is not
        recorded). `facts` are shown in the list (a sidecar's `call_id`)."""
        session = LiveSession(
            self, session_id, header=header, recording=recording, as_recorded=as_recorded,
            facts={"id": session_id, "mode": header.get("mode"), "dialect": header.get("dialect"),
                   "started_at": header.get("started_at"), "tools": list(header.get("tools", ())), **facts})
        session.tap = LiveTap(session, taps)
        self.live[session_id] = session
        self._list_changed()
        return session.tap

    def find(self, session_id: str) -> LiveSession | None:
        session = self.live.get(session_id)
        if session is None:
            session = next((s for s in self.recent if s.id == session_id), None)
        return session

    def sessions(self) -> dict[str, Any]:
        """What the list shows: live sessions, then recent ones, newest first."""
        return {"live": [s.describe() for s in reversed(self.live.values())],
                "recent": [s.describe() for s in reversed(self.recent)]}

    def _ended(self, session: LiveSession) -> None:
        self.live.pop(session.id, None)
        if self.recent.maxlen is not None and len(self.recent) == self.recent.maxlen:
            dropped = self.recent[0]
            if dropped in self._views:
                self._views.remove(dropped)
            dropped.model = None
        self.recent.append(session)
        self._kept(session)
        self._list_changed()

    def _kept(self, session: LiveSession) -> None:
        """Bound the models kept for ended sessions without a recording."""
        if session.ended is None or session.model is None or session._recording_path() is not None:
            return
        if session not in self._views:
            self._views.append(session)
        while len(self._views) > self.kept_views:
            oldest = self._views.popleft()
            if not oldest.watchers:
                oldest.model = None

    def _list_changed(self) -> None:
        for listener in self.listeners:
            listener.sessions_changed()


# ---- reading a recording for the view -------------------------------------------------------
class UnreadableRecording(Exception):
    """A session's recording the inspector will not read; its message says why, without the
    server's paths (it goes to the page)."""


def open_recording(path: Path) -> BinaryIO:
    """The recording at `path`, opened once (what is read of it is read from this file): refused
    when it is not a regular file, or a symbolic link that leads out of its directory (the
    recordings directory: a recording replaced by a link to /etc/passwd is not read)."""
    directory = path.parent.resolve()
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise UnreadableRecording("its recording is gone") from None
    if real.parent != directory:
        raise UnreadableRecording("its recording is a link out of the recordings directory") from None
    try:
        fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UnreadableRecording(f"its recording cannot be opened ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnreadableRecording("its recording is not a regular file")
    return os.fdopen(fd, "rb")


def _model_of_prefix(path: Path, header: dict[str, Any]) -> SessionModel:
    """The model of a recording being written, as far as its bytes now hold complete lines
    (frames written after that instant reach the model from the tap)."""
    with open_recording(path) as file:
        complete_lines = 0
        remaining = os.fstat(file.fileno()).st_size
        while remaining > 0:
            chunk = file.read(min(remaining, 1 << 20))
            if not chunk:
                break
            complete_lines += chunk.count(b"\n")
            remaining -= len(chunk)
        file.seek(0)
        try:
            recorded_header = json.loads(file.readline())
        except (OSError, ValueError):
            recorded_header = None
        if not isinstance(recorded_header, dict):
            recorded_header = header
        model = SessionModel(name=path.name, header=recorded_header, kind="relay")
        notes: list[Note] = []
        file.seek(0)
        for frame in iter_frames(path, notes=notes, file=file):
            if frame.line_no > complete_lines:
                break
            model.feed(frame)
    for note in notes:
        if note.line_no <= complete_lines:
            model.note(note)
    return model


def _model_of_recording(path: Path) -> SessionModel:
    with open_recording(path) as file:
        return build_model(read_recording(path, file=file), release=True)


def _since(start: float) -> Callable[[], float]:
    return lambda: time.monotonic() - start


def _now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
