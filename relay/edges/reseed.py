"""`relay serve --live-reseed`: a GPT-Live session whose upstream connection drops is carried on
in a new session, for the client, on the same client connection.

GPT-Live has no resume: a new connection is a new session. When the upstream socket closes before
the server said `session.closed` (a network failure, not the end of the session), the loop opens
a new upstream connection, sends first the `session.start` the engine builds for it (the first
session's configuration, the conversation so far as its `input`, what the relay's tools already
did: `LiveEngine.new_session`, relay/engine/reseed.py), then carries on over it: what waited for
the upstream goes up after that start, the client sees the new session's `session.started` (its
new id) and talks on. At most `attempts` times per session; without the flag, or when nothing can
be carried on, the session ends as any proxied session whose upstream closed.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from relay.edges.upstream import UpstreamUnavailable
from relay.engine import LiveEngine
from relay.recording.format import RELAY_TO_UPSTREAM
from relay.session.loop import SessionLoop, close_quietly
from relay.session.policy import INTERNAL_ERROR, NORMAL_CLOSURE, closed_for_peer_fault
from relay.session.transport import Transport, TransportClosed

log = logging.getLogger("relay.serve")
DEFAULT_ATTEMPTS = 3


class ReseedingLoop(SessionLoop):
    """A GPT-Live session's loop that carries the session on in a new one when its upstream drops
    (`reconnect` opens a new upstream connection)."""

    def __init__(self, engine: LiveEngine, *, reconnect: Callable[[], Awaitable[Transport]],
                 attempts: int = DEFAULT_ATTEMPTS, **options: Any) -> None:
        super().__init__(engine, **options)
        self._reconnect = reconnect
        self._attempts_left = attempts

    async def upstream_lost(self, closed: TransportClosed) -> None:
        engine = self.engine
        if (self.end is not None or self._attempts_left <= 0 or closed_for_peer_fault(closed)
                or not isinstance(engine, LiveEngine) or self.client is None):
            await super().upstream_lost(closed)
            return
        self._apply(engine.upstream_disconnected(self.clock()))
        start, actions = engine.new_session(self.clock())
        self._apply(actions)
        if start is None:   # over for good (or never started here): ends as usual
            await super().upstream_lost(closed)
            return
        self._attempts_left -= 1
        context = {"session_id": engine.session_id, "code": closed.code, "reason": closed.reason}
        log.warning("upstream connection dropped; starting a new GPT-Live session that carries this one on",
                    extra=context)
        try:
            upstream = await self._reconnect()
        except UpstreamUnavailable as exc:
            log.error("no new upstream session: %s", exc, extra=context)
            await self.finish("relay", INTERNAL_ERROR, "upstream lost")
            return
        try:
            await upstream.send([start])
        except TransportClosed:
            log.error("the new upstream session closed before it started", extra=context)
            await self.finish("relay", INTERNAL_ERROR, "upstream lost")
            return
        if self.end is not None:   # the session ended while the new one was opening
            await close_quietly(upstream, NORMAL_CLOSURE, self.end.reason)
            return
        if self.recorder is not None:
            self.recorder.record(RELAY_TO_UPSTREAM, start)
        self.replace_upstream(upstream)
        self._apply(engine.upstream_reconnected(self.clock()))


__all__ = ["DEFAULT_ATTEMPTS", "ReseedingLoop"]
