"""What a session tolerates and what its peers are told when it stops: the limits and their
defaults, the client's event budget, and which close code each side gets.

The session loop (relay/session/loop.py) carries these out; the edges' configurations
(relay/edges/config.py) take their defaults from here, and every close code the relay sends is
named here, so each number and each rule is written once.
"""

from __future__ import annotations

import time
from typing import Callable

from relay.session.transport import TransportClosed

# ---- limits ----------------------------------------------------------------------------------
DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
DEFAULT_QUEUE_BYTES = 32 * 1024 * 1024
# Back-pressure: once this much waits for a peer, the other side's socket is no longer read (TCP
# then slows the sender down, as it would without the relay) until a quarter of it is left. 1 MiB
# is 16 s of 24 kHz audio: far ahead of anything a listener hears, and a bound on what a session
# holds for a slow client.
DEFAULT_HOLD_BACK_BYTES = 1024 * 1024
# A peer that takes nothing for this long while its queue is over that mark is not reading: closed
# (before the WebSocket keepalive's 20 + 20 s would drop it with 1011).
DEFAULT_STALL_SECONDS = 10.0
# Audio in 20 ms chunks is 50 events a second; even an upload 10x faster than real time stays far below.
DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND = 1000.0
DEFAULT_OPEN_TIMEOUT = 10.0
DEFAULT_DRAIN_SECONDS = 10.0

# ---- close codes -----------------------------------------------------------------------------
# RFC 6455's codes, by name
NORMAL_CLOSURE = 1000
GOING_AWAY = 1001
NO_CLOSE_FRAME = 1006      # never sent: says that the connection ended without a close frame
POLICY_VIOLATION = 1008
INTERNAL_ERROR = 1011
TRY_AGAIN_LATER = 1013
BAD_GATEWAY = 1014         # to the client: the upstream, not the client, sent something invalid

# Codes that may not be sent in a close frame: they are replaced by INTERNAL_ERROR toward the peer.
RESERVED_CLOSE_CODES = frozenset({1005, NO_CLOSE_FRAME, 1015})
# Codes a WebSocket library closes with when the peer broke the protocol, sent bad UTF-8, or too big a message.
PEER_FAULT_CLOSE_CODES = frozenset({1002, 1007, 1009})
CLEAN_CLOSE_CODES = frozenset({NORMAL_CLOSURE, GOING_AWAY})   # a session that ended so did not fail

SHUTDOWN_CODE = GOING_AWAY       # the relay stops (after its drain)
DETACHED_CODE = NORMAL_CLOSURE   # a sidecar leaves a call that goes on without it
RATE_LIMIT_CODE = "rate_limit_exceeded"
RATE_LIMIT_CLOSE = (POLICY_VIOLATION, "client sends events too fast")


def sendable_close_code(code: int) -> int:
    """`code` as it may go out in a close frame: the reserved codes (which only say that no
    close frame came) become INTERNAL_ERROR."""
    return INTERNAL_ERROR if code in RESERVED_CLOSE_CODES else code


def closed_for_peer_fault(closed: TransportClosed) -> bool:
    """The transport itself closed this connection because of what the peer sent (a protocol
    error, bad UTF-8, too big a message), rather than the peer closing it."""
    return closed.initiated_here and closed.code in PEER_FAULT_CLOSE_CODES


def ended_in_failure(by: str, code: int) -> bool:
    """A session the relay or the upstream ended with another code than a clean one failed (a
    client may leave as it likes)."""
    return by in ("relay", "upstream") and code not in CLEAN_CLOSE_CODES


def short_close_reason(reason: str) -> str:
    """A close reason cut to the 123 bytes a close frame holds (never inside a character)."""
    return reason.encode()[:123].decode(errors="ignore")


# ---- the client's event budget ---------------------------------------------------------------
class EventBudget:
    """A token bucket over a client's events: `per_second` on average and bursts of two seconds'
    worth. A client that sends faster is broken or hostile: it is told so and closed, so that it
    can neither flood the upstream nor take the relay's time from other sessions."""

    code = RATE_LIMIT_CODE
    close = RATE_LIMIT_CLOSE

    def __init__(self, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self.burst = 2.0 * per_second
        self._clock = clock
        self._tokens = self.burst
        self._last = clock()

    @classmethod
    def optional(cls, per_second: float | None) -> EventBudget | None:
        """A budget of `per_second`, or None for no limit (None or 0)."""
        return cls(per_second) if per_second else None

    def take(self) -> bool:
        """Spend one event; False when the client is over its budget."""
        now = self._clock()
        tokens = self._tokens + (now - self._last) * self.per_second
        self._last = now
        if tokens > self.burst:   # `min` inline: this runs on every client audio frame
            tokens = self.burst
        if tokens < 1.0:
            self._tokens = tokens
            return False
        self._tokens = tokens - 1.0
        return True

    def refusal(self) -> str:
        """What the client is told when it is cut off."""
        return (f"more than {self.per_second:g} events per second (bursts of up to {self.burst:g}): "
                "the relay closes a client that sends faster")
