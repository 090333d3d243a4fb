"""The live feed: one page's connection to the hub, over a WebSocket (a transport's or an ASGI
server's: `Channel` is all it needs of one).

Messages are JSON text. The page sends `{"type": "watch", "session": ID}` (and `{"type":
"unwatch"}`); the feed sends

    {"type": "sessions", "live": [...], "recent": [...]}    on connecting and when the list changes
    {"type": "snapshot", "session", "facts", "model"}        the session as it is when watched
    {"type": "delta", "session", "delta"[, "ended"]}         what changed since (the model's delta)
    {"type": "unavailable", "session", "facts", "message"}   an ended session with nothing kept
    {"type": "error", "message"[, "session"]}

A connection has two tasks in one task group: the reader (what the page asks) and the writer,
which wakes when there is something to send, lets frames gather for FLUSH_INTERVAL, has the
watched session feed them to its model, and sends what is due in order. A page that does not read
its feed is closed (POLICY_VIOLATION) rather than buffered without end; the session is never
slowed by it.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from typing import Protocol

import anyio

from relay.errors import RelayError
from relay.inspector.live.hub import LiveHub, LiveSession, UnreadableRecording
from relay.recording.format import RecordingError
from relay.session.policy import POLICY_VIOLATION

log = logging.getLogger("relay.inspector")

FLUSH_INTERVAL = 0.05          # frames gather this long before a batch goes to the model
MAX_OUTBOX_BYTES = 32 << 20    # messages waiting for a page (a single snapshot may be larger)


class ChannelClosed(RelayError):
    """The page's connection is gone."""


class Channel(Protocol):
    """A WebSocket to the page, whichever server holds it."""

    async def send(self, text: str) -> None:
        """Send one text message; raises ChannelClosed when the connection is gone."""

    async def receive(self) -> str | None:
        """The next text message, or None once the page has gone."""

    async def close(self, code: int, reason: str) -> None: ...


class FeedConnection:
    """One page watching the hub: the list, and at most one session at a time."""

    def __init__(self, hub: LiveHub, channel: Channel) -> None:
        self.hub = hub
        self.channel = channel
        self.session: LiveSession | None = None
        self._outbox: deque[str] = deque()
        self._outbox_bytes = 0
        self._wake = anyio.Event()
        self._list_due = True
        self._too_slow = False

    # ---- what the hub calls (synchronous) --------------------------------------------------
    def post(self, message: str) -> None:
        if self._outbox and self._outbox_bytes + len(message) > MAX_OUTBOX_BYTES:
            self._too_slow = True
        else:
            self._outbox.append(message)
            self._outbox_bytes += len(message)
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def sessions_changed(self) -> None:
        self._list_due = True
        self._wake.set()

    # ---- the connection -------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the page until it leaves (or cannot keep up)."""
        self.hub.listeners.add(self)
        self._wake.set()   # the list goes first
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(self._read, tasks.cancel_scope)
                await self._write()
                tasks.cancel_scope.cancel()
        finally:
            self.hub.listeners.discard(self)
            self._leave()

    async def _read(self, scope: anyio.CancelScope) -> None:
        while True:
            text = await self.channel.receive()
            if text is None:
                scope.cancel()
                return
            try:
                message = json.loads(text)
            except ValueError:
                message = None
            kind = message.get("type") if isinstance(message, dict) else None
            if kind == "watch" and isinstance(message.get("session"), str):
                await self._watch(message["session"])
            elif kind == "unwatch":
                self._leave()
            else:
                self.post(json.dumps({"type": "error", "message": "expected {\"type\": \"watch\", \"session\": ID} "
                                                                  "or {\"type\": \"unwatch\"}"}))

    async def _watch(self, session_id: str) -> None:
        self._leave()
        session = self.hub.find(session_id)
        if session is None:
            self.post(json.dumps({"type": "error", "session": session_id,
                                  "message": f"no live or recent session {session_id}"}))
            return
        self.session = session
        try:
            opened = await session.open(self)
        except Exception as exc:   # an unreadable recording must not take the feed down
            if isinstance(exc, (UnreadableRecording, RecordingError)):
                why = str(exc) if isinstance(exc, UnreadableRecording) else "its recording is not readable"
                log.warning("inspector: cannot open session %s: %s", session_id, exc, extra={"session_id": session_id})
            else:
                why = f"the relay could not read it ({type(exc).__name__}; see its log)"
                log.exception("inspector: cannot open session %s", session_id, extra={"session_id": session_id})
            self._leave()
            # the page is told why in words: never the exception's text, which may hold a server path
            opened = json.dumps({"type": "error", "session": session_id, "message": f"cannot open this session: {why}"})
        self.post(opened)

    def _leave(self) -> None:
        if self.session is not None:
            self.session.leave(self)
            self.session = None

    async def _write(self) -> None:
        channel = self.channel
        try:
            while True:
                await self._wake.wait()
                self._wake = anyio.Event()
                if self._too_slow:
                    log.warning("inspector: a page is not reading its live feed; closing it")
                    await channel.close(POLICY_VIOLATION, "the page is not reading its feed")
                    return
                session = self.session
                if session is not None and session.has_news:
                    await anyio.sleep(FLUSH_INTERVAL)
                    await session.flush()
                if self._list_due:
                    self._list_due = False
                    await channel.send(json.dumps({"type": "sessions", **self.hub.sessions()}))
                while self._outbox:
                    message = self._outbox.popleft()
                    self._outbox_bytes -= len(message)
                    await channel.send(message)
        except ChannelClosed:
            return
