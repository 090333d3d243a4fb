"""Gemini Live's `goAway` met with the session's resumption handle, invisibly to the client
(`relay serve`; the edge's side is relay/edges/going_away.py).

The service closes a connection after about ten minutes and warns first (`goAway`, with the time
left). A client that enabled session resumption (`setup.sessionResumption`) is sent handles
(`sessionResumptionUpdate {newHandle, resumable}`), with which a new connection continues the
session. When the upstream says goAway to such a session, the relay carries it over itself: the
`goAway` is not forwarded, and as soon as the relay holds a handle the server said resumable (at
once if the latest update was one; else the next one, which comes once the calls in flight are
answered: the service is not resumable while the model makes calls, and resuming from an older
handle loses what came after it) it asks the edge for a new upstream connection (a `going_away`
notice) and opens it with the client's setup again, the handle in it (`begin`). From then until
that connection's `setupComplete` (not forwarded either: the client had its own) answers wait;
then they go up on it, once. Calls keep running throughout. Without a resumable handle before
the connection closes, the session ends as before, with the upstream's close.
"""

from __future__ import annotations

from typing import Any, Callable

from relay.dialects.gemini import TurnCodec
from relay.dialects.gemini_codec import SessionResumptionUpdate, Setup, given, with_resumption_handle
from relay.engine.actions import Notice
from relay.engine.context import SessionContext

GOING_AWAY = "going_away"
"""The notice of a `goAway` the relay answers by resuming (its field: `left`, the time left): the edge opens
a new connection when it sees it."""


class Resumption:
    """One Gemini session's resumption: the setup that went up, the latest resumable handle, and
    where a carry-over stands (`going`: the upstream said goAway; `asked`: the edge was asked for
    a new connection; `resuming`: its setup went, its `setupComplete` not come)."""

    def __init__(self, ctx: SessionContext, codec: TurnCodec) -> None:
        self.ctx = ctx
        self.codec = codec
        self.setup: Setup | None = None    # the client's setup as it went up (the relay's tools in it)
        self.handle: str | None = None     # from the latest update, when it said resumable
        self.going = self.asked = self.resuming = False
        self.time_left: Any = None
        self.begun: str | None = None      # the setup `begin` made, for the edge

    @property
    def enabled(self) -> bool:
        """The client asked for resumption handles in its setup."""
        return self.setup is not None and isinstance(given(self.setup.session_resumption), dict)

    def update(self, message: SessionResumptionUpdate) -> None:
        """A `sessionResumptionUpdate`: its handle kept when it says resumable, else none."""
        handle = given(message.new_handle)
        self.handle = handle if message.resumable is True and isinstance(handle, str) and handle else None
        self._ask()

    def go_away(self, time_left: Any) -> bool:
        """The upstream says goAway: True when the relay carries the session over (the goAway is
        then not the client's), False when the client gets it, as without the relay."""
        if not self.enabled:
            return False
        if not self.going:
            self.going, self.time_left = True, time_left
            self._ask()
        return True

    def _ask(self) -> None:
        if self.going and not self.asked and self.handle is not None:
            self.asked = True
            self.ctx.emit(Notice(GOING_AWAY, {"left": self.time_left}))

    def begin(self, disconnect: Callable[[], None]) -> None:
        """The edge holds the new connection: `begun` is the setup to open it with (the latest
        handle in it), and answers wait (`disconnect`); nothing when there is no handle."""
        self.begun = None
        if not self.asked or self.resuming:
            return
        if self.setup is None or self.handle is None:
            self.asked = False   # no handle now: the next resumable update asks again
            return
        self.resuming = True
        disconnect()
        self.begun = self.codec.encode(with_resumption_handle(self.setup, self.handle))

    def completed(self) -> bool:
        """A `setupComplete` (or the upstream back): True when it ends a carry-over."""
        if not self.resuming:
            return False
        self.resuming = self.going = self.asked = False
        return True


__all__ = ["GOING_AWAY", "Resumption"]
