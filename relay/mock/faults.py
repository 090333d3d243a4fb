"""Faults the mock can inject, to test that a relay survives an upstream misbehaving."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _server_error() -> dict[str, Any]:
    return {
        "type": "server_error",
        "code": "server_error",
        "message": "The server had an error while processing your request. Sorry about that!",
    }


@dataclass
class Faults:
    """Per-session fault settings (`MockUpstream(faults=...)` for new sessions, or assign
    `session.faults` to change one live session)."""

    drop_after_events: int | None = None
    """Close each connection once it has been sent this many server events."""
    drop_close_code: int | None = None
    """Close code for that drop; None aborts the TCP connection without a closing handshake."""
    event_delay: float = 0.0
    """Seconds to wait before sending each server event."""
    duplicate_done: bool = False
    """Send every event whose type ends in `.done` twice (same `event_id`)."""
    auto_response_after_output: bool = False
    """Start a response on the server's own account right after a `function_call_output` item is
    added (when none is active), the way server VAD or a racing server can."""
    pace_audio: bool = False
    """Stream audio deltas no faster than real time."""
    reject_response_create: int = 0
    """Answer this many `response.create` events with `reject_error` instead of a response."""
    reject_error: dict[str, Any] = field(default_factory=_server_error)
    """The `error` object (type, code, message) for rejected `response.create` events."""
