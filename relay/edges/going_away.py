"""`relay serve` with Gemini Live: a `goAway` met by resuming the session on a new upstream
connection, invisibly to the client (the engine's side, what it decides: relay/engine/going_away.py).

When the engine says the session is going away and it holds a resumable handle (a `going_away`
notice), the loop opens a new upstream connection, sends on it the setup the engine builds (the
client's, with the handle: `GeminiEngine.resumption_setup`), and carries on over it (make before
break: the old connection is closed only then; what was queued for the upstream goes on the new
one after the setup). Calls in flight keep running; their answers wait for the new connection's
`setupComplete` and go up on it, once. When no new connection can be opened, the session goes on
over the old one until the service closes it, and then ends as before.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from relay.edges.upstream import UpstreamUnavailable
from relay.engine import GeminiEngine, Notice
from relay.engine.going_away import GOING_AWAY
from relay.recording.format import RELAY_TO_UPSTREAM
from relay.session.loop import SessionLoop, close_quietly
from relay.session.policy import NORMAL_CLOSURE
from relay.session.transport import Transport, TransportClosed

log = logging.getLogger("relay.serve")


class GoingAwayLoop(SessionLoop):
    """A Gemini Live session's loop that resumes the session on a new upstream connection when
    the service says goAway (`reconnect` opens one)."""

    def __init__(self, engine: GeminiEngine, *, reconnect: Callable[[], Awaitable[Transport]], **options: Any) -> None:
        super().__init__(engine, **options)
        self._reconnect = reconnect
        self._resuming = False

    def act_notice(self, action: Notice) -> None:
        super().act_notice(action)
        if action.kind == GOING_AWAY and not self._resuming and self._task_group is not None:
            self._resuming = True
            self._task_group.start_soon(self._resume, name="upstream resumption")

    async def _resume(self) -> None:
        engine = self.engine
        assert isinstance(engine, GeminiEngine)
        context = {"session_id": engine.session_id}
        try:
            try:
                upstream = await self._reconnect()
            except UpstreamUnavailable as exc:
                log.error("the upstream said goAway and no new connection opened: %s", exc, extra=context)
                return
            frame, actions = engine.resumption_setup(self.clock())
            self._apply(actions)
            if frame is None or self.end is not None:
                await close_quietly(upstream, NORMAL_CLOSURE, "not needed")
                return
            try:
                await upstream.send([frame])
            except TransportClosed:
                log.error("the upstream said goAway and the new connection closed at once", extra=context)
                self._apply(engine.upstream_reconnected(self.clock()))   # the old one carries on
                return
            if self.recorder is not None:
                self.recorder.record(RELAY_TO_UPSTREAM, frame)
            old = self.upstream
            self.replace_upstream(upstream)
            log.info("the upstream said goAway: the session resumed on a new connection", extra=context)
            await close_quietly(old, NORMAL_CLOSURE, "resumed on a new connection")
        finally:
            self._resuming = False


__all__ = ["GoingAwayLoop"]
