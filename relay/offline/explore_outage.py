"""The explorer's `reconnect`, on every wire with a sideband to reopen (`Dialect.call_sideband`):
the upstream connection drops and the relay's `step`th attempt reopens it to the same session
(relay/edges/sideband.py). What the server sends while it is away is lost; the relay is told of
the drop and of the return (`upstream_disconnected` / `upstream_reconnected`) as the edge tells
it, and sends nothing meanwhile (`nothing_sent_while_away`: what it decided waits for the return).

`Outage` comes first among an explored session's classes: the Realtime and Gemini wires'
(relay/offline/explore_quirks.py `PerturbedSession`) and GPT-Live's
(relay/offline/explore_live.py `ExploredLiveSession`). The invariants read what the server did,
not only what crossed the relay's sockets: the frames lost while away are put back in the
timeline where the server sent them (a response that ended while the relay was away did end).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from relay.offline.explore_session import Perturbation
from relay.offline.timeline import Timeline
from relay.recording.format import UPSTREAM_TO_RELAY, Frame

RECONNECT_DELAY = 0.2
"""The attached call's first wait before it reopens its sideband, doubled before each next attempt
(`relay.edges.config.DEFAULT_RECONNECT_DELAY`)."""
RECONNECT_ATTEMPTS = (1, 6)
"""A `reconnect`'s attempts (its `step`): the first succeeds (0.2 s away), or the sixth, the
attached call's last (`DEFAULT_RECONNECT_ATTEMPTS`: 12.6 s away)."""


def away_for(attempts: int) -> float:
    """The seconds the connection is away when the `attempts`th attempt succeeds."""
    return sum(RECONNECT_DELAY * 2 ** attempt for attempt in range(max(attempts, 1)))


class Outage:
    """The connection's drops and returns, for an explored session (see the module docstring).
    `_outage` sets it up before the session starts; `_away` (the connection is down, the relay
    reconnecting) is `Exploring`'s, which reads it as each frame in flight is released."""

    def _outage(self) -> None:
        self.sent_while_away: list[str] = []
        self._lost: list[tuple[int, Frame]] = []   # (frames kept before it, the frame the server sent)

    def pending(self) -> bool:
        return self._away or super().pending()   # type: ignore[misc, no-any-return]

    # ---- the connection ------------------------------------------------------------------------
    def _upstream_gets(self, frame: str | bytes) -> None:
        if not self._away:
            super()._upstream_gets(frame)   # type: ignore[misc]
            return
        self._log_lost(frame)

    def _log_lost(self, frame: str | bytes) -> None:
        """A frame the relay sent while the connection was away: recorded (by the loop's recorder),
        never delivered."""
        self.sent_while_away.append(frame if isinstance(frame, str) else frame.decode("utf-8", "replace"))

    def _queue_upstream(self, frames: list[str | bytes]) -> None:
        if not self._away:
            super()._queue_upstream(frames)   # type: ignore[misc]
            return
        self._lose(frames)   # while away, what the server sends is lost

    def _lose(self, frames: list[Any]) -> None:
        """Frames the server sent the relay while its connection was away: kept for the timeline,
        and heard by whoever else is on the session (a sidecar's application: `overhear`)."""
        kept = len(self.frames)   # type: ignore[attr-defined]
        for frame in frames:
            if isinstance(frame, (str, bytes)):
                self.overhear(frame)   # type: ignore[attr-defined]
                text, data = (frame, None) if isinstance(frame, str) else (None, frame)
                self._lost.append((kept, Frame(self.now, UPSTREAM_TO_RELAY, None, text, data, 0)))   # type: ignore[attr-defined]

    def _reconnect(self, perturbation: Perturbation) -> None:
        """The connection drops, and the relay's `perturbation.step`th attempt reopens it. While it
        is down already (two drops at one anchor, or one at an anchor reached while away), nothing
        more drops: the outage under way ends when its own attempt succeeds, and the relay sees
        one reconnection for one drop, as an edge tells it."""
        if self._away:
            return
        self.mark("fault", "the upstream connection dropped; the relay reconnects")   # type: ignore[attr-defined]
        paced = self._paced   # type: ignore[attr-defined]
        self._lose(list(paced))   # what was on its way is lost with the connection
        paced.clear()
        self._away = True
        self._engine_input(lambda: self.engine.upstream_disconnected(self.now))   # type: ignore[attr-defined]
        self.loop.call_at(self.now + away_for(perturbation.step), self._reconnected)   # type: ignore[attr-defined]

    def _reconnected(self) -> None:
        self._away = False
        if self.closed:   # type: ignore[attr-defined]
            return
        self.mark("fault", "the relay reconnected")   # type: ignore[attr-defined]
        self._engine_input(lambda: self.engine.upstream_reconnected(self.now))   # type: ignore[attr-defined]

    # ---- what the invariants read ----------------------------------------------------------------
    def _timeline(self) -> Timeline:
        """What happened, as the server did it: the frames the connection lost while away (which
        the recording, what crossed the relay's sockets, does not hold) where the server sent them.
        The invariants read this: a response that ended while the relay was away did end."""
        if not self._lost:
            return super()._timeline()   # type: ignore[misc, no-any-return]
        kept = self.frames   # type: ignore[attr-defined]
        merged: list[Frame] = []
        lost = iter(self._lost)
        pending = next(lost, None)
        for index, frame in enumerate([*kept, None]):
            while pending is not None and pending[0] <= index:
                merged.append(replace(pending[1], line_no=merged[-1].line_no if merged else 1))
                pending = next(lost, None)
            if frame is not None:
                merged.append(frame)
        self.frames = merged
        try:
            return super()._timeline()   # type: ignore[misc, no-any-return]
        finally:
            self.frames = kept

    def unheard_withdrawals(self) -> set[str]:
        """The calls the server withdrew (a response of theirs ended cancelled or failed) only in
        frames the connection lost: the relay, told nothing of that end, may answer them, as it
        answers a call whose response's end a reconnect lost (docs/guarantees.md: the window a
        reconnect leaves)."""
        if not self._lost:
            return set()
        from relay.offline.events import CANCELLED

        def withdrawn(timeline: Timeline) -> set[str]:
            return {call_id for event in timeline.of(CANCELLED) for call_id in event.call_ids}

        return withdrawn(self.timeline) - withdrawn(super()._timeline())   # type: ignore[attr-defined, misc]


__all__ = ["RECONNECT_ATTEMPTS", "RECONNECT_DELAY", "Outage", "away_for"]
