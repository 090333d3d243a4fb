"""Tools that count their effects in Redis (at RELAY_TEST_REDIS), for the takeover tests: a
replica runs them in a subprocess, another in the test's process, and Redis sees both.

`refund` is not idempotent: each run applies its effect. `book` takes the call's idempotency key
and applies its effect once per key, however often it runs. Each run says it started (the list
`started`); a run that began while the key `hold` existed blocks after its effect, as a slow tool
would, until its process is killed or the test pushes to `release:<pid>`. Whether it blocks is read
before it says it started, so a test that deletes `hold` on seeing the start (to let a later run
through) cannot let this run finish before the kill."""

from __future__ import annotations

import os

import redis

from relay.tools import IdempotencyKey, tool

HOLD_SECONDS = 60


def _client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["RELAY_TEST_REDIS"])


def _hold(client: redis.Redis, held: bool) -> None:
    if held:
        client.blpop([f"release:{os.getpid()}"], timeout=HOLD_SECONDS)


@tool(timeout=HOLD_SECONDS * 2)
def refund(order: int) -> str:
    """Refund an order (not idempotent)."""
    client = _client()
    held = bool(client.exists("hold"))
    client.incr(f"effects:refund:{order}")
    client.rpush("started", f"refund {os.getpid()}")
    _hold(client, held)
    return f"refunded order {order}"


@tool(timeout=HOLD_SECONDS * 2)
def book(slot: str, key: IdempotencyKey) -> str:
    """Book a slot (idempotent by the call's key)."""
    client = _client()
    held = bool(client.exists("hold"))
    if client.set(f"effects:book:{key}", 1, nx=True):
        client.incr("effects:book")
    client.rpush("started", f"book {os.getpid()}")
    _hold(client, held)
    return f"booked {slot}"
