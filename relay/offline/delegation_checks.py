"""What the explorer's GPT-Live invariants read of a session (relay/offline/explore_checks.py): the
appends the relay sent upstream, which the server placed on the session's timeline and which it
refused, read from the session's frames through the Live codec.

A relay append names its delegation (`delegation_id`), or none (a note of a new session's that
carries a dropped one on). The relay's progress filler (the delegate's `on_delay` text) is an
append of its delegation too, but not its answer: `DelegationAppends.filler` tells it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from relay.dialects import LiveDialect
from relay.dialects import live
from relay.dialects.peek import may_be
from relay.engine.appends import split_text
from relay.recording.format import RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY, Frame
from relay.tools import Interruption

INJECTION_INCOMPLETE = "context_injection_incomplete"
"""The code of the error an append still pending when the session closes gets (GPT-LIVE.md 2.4)."""
_APPEND_TYPES = frozenset(kind.__struct_config__.tag for kind in live.APPENDS)
_ANSWER_TYPES = frozenset(kind.__struct_config__.tag for kind in (*live.APPENDED.values(), live.Error))
_NOTED = {RELAY_TO_UPSTREAM: _APPEND_TYPES, UPSTREAM_TO_RELAY: _ANSWER_TYPES}
"""The frames `note` reads, by direction: those that may be of these types."""


@dataclass
class DelegationAppends:
    """The relay's appends (`sent`: frame and typed append, in order; naming a delegation unless
    `every`), the event ids the server placed, and those it refused (event id -> error code)."""

    tools: Any
    sent: list[tuple[Frame, Any]] = field(default_factory=list)
    placed: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)

    def filler(self, append: Any) -> bool:
        """Whether the append is a piece of its delegate's progress filler, not of its answer."""
        delegate = self.tools.delegate
        if delegate is None or delegate.on_delay is None or not isinstance(append, live.CommentaryAppend):
            return False
        return append.content in split_text(delegate.on_delay[1])

    def policy(self, name: str) -> Interruption | None:
        spec = self.tools.get(name)
        return spec.interruption if spec is not None else None


def delegation_appends(session: Any, *, every: bool = False, timeline: Any = None) -> DelegationAppends | None:
    """What `session` (anything with `dialect`, `tools` and `frames`) shows of the relay's
    appends; None when it is not a GPT-Live session, or (unless `every`) its relay has no delegate.
    `timeline`: the session's, read already, whose reader noted them (`Timeline.appends_seen`): the
    frames are not read again."""
    dialect = getattr(session, "dialect", None)
    if not isinstance(dialect, LiveDialect) or (not every and session.tools.delegate is None):
        return None
    seen = getattr(timeline, "appends_seen", None)
    if seen is None:
        seen = DelegationAppends(None)
        for frame in session.frames:
            text, kinds = frame.raw, _NOTED.get(frame.direction)
            if text is not None and kinds is not None and may_be(text, kinds):
                note(seen, frame, live.decode(text))
    sent = seen.sent if every else [(frame, append) for frame, append in seen.sent
                                    if isinstance(append.delegation_id, str)]
    return DelegationAppends(session.tools, sent, seen.placed, seen.refused)


def note(found: DelegationAppends, frame: Frame, event: Any) -> None:
    """A text frame's part in `found`, its event decoded from its text: a relay append that went
    up, or the server's placing or refusal of one."""
    if frame.direction == RELAY_TO_UPSTREAM:
        if isinstance(event, live.APPENDS):
            found.sent.append((frame, event))
    elif frame.direction == UPSTREAM_TO_RELAY:
        _answered(found, event)


def _answered(found: DelegationAppends, event: Any) -> None:
    if isinstance(event, live.Error):
        error = event.error if isinstance(event.error, dict) else {}
        aimed = error.get("client_event_id") or event.client_event_id
        if isinstance(aimed, str):
            found.refused[aimed] = str(error.get("code") or "error")
    elif type(event) in live.APPENDED.values() and isinstance(event.client_event_id, str):
        found.placed.add(event.client_event_id)


__all__ = ["INJECTION_INCOMPLETE", "DelegationAppends", "delegation_appends", "note"]
