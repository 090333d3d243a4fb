"""A GPT-Live delegate that counts its effects in Redis (at RELAY_TEST_REDIS), for the Live
takeover tests (tests/live/test_live_takeover.py): a replica runs it in a subprocess, another in
the test's process, and Redis sees both. It is not idempotent: each run applies its effect (a
refund, counted per delegation) and says it started (the list `started`); a run that began while
the key `hold` existed blocks after its effect, as a slow tool would, until its process is killed
or the test pushes to `release:<pid>` (as tests/store/tools/effects.py's tools do)."""

from __future__ import annotations

import os

import redis

from relay.tools import Delegation, ToolResult, delegate

HOLD_SECONDS = 60


@delegate(timeout=HOLD_SECONDS * 2)
def refund_desk(delegation: Delegation) -> ToolResult:
    """Refunds the order the caller asks about (not idempotent)."""
    client = redis.Redis.from_url(os.environ["RELAY_TEST_REDIS"])
    held = bool(client.exists("hold"))
    client.incr(f"effects:refund:{delegation.id}")
    client.rpush("started", f"refund_desk {os.getpid()}")
    if held:
        client.blpop([f"release:{os.getpid()}"], timeout=HOLD_SECONDS)
    return ToolResult(result="order 7 refunded", message="Tell the caller order 7 is refunded.")
