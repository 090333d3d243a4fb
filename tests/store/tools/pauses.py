"""A tool, and pauses for the takeover tests that kill an owner between two of its steps. In a
process started with RELAY_TEST_PAUSES set (the test's `relay attach` owner), loading this
module as its tools makes the owner stop, while a key of Redis (at RELAY_TEST_REDIS) says so:

- `pause_output`: right after a call's output is marked "sent" under the lease, before the
  output frame goes (`SessionLease.mark_sent`); it pushes "<call id> <pid>" to `output_marked`;
- `pause_follow_up`: right after a "follow_up" record is written (the follow-up owed, ahead of
  its `response.create`: `WriteAhead.write`); it pushes "<call id> <pid>" to `follow_up_owed`;
- `pause_decided`: right after a "decided" record is written (the output known, ahead of its
  send); it pushes "<call id> <pid>" to `output_decided`.

It waits there until it is killed or the test pushes to `release:<pid>`. Only that task waits:
the owner keeps renewing its lease, as a live owner does. Elsewhere (the test's own process reads
the tool's definition) the module only defines the tool."""

from __future__ import annotations

import os
from typing import Any

import redis.asyncio as aioredis

from relay.engine.records import CallRecord, Phase
from relay.store.lease import SessionLease
from relay.store.writeahead import WriteAhead
from relay.tools import tool

HOLD_SECONDS = 60
_write = WriteAhead.write
_mark_sent = SessionLease.mark_sent


async def _pause(key: str, say: str, call_id: str) -> None:
    client = aioredis.Redis.from_url(os.environ["RELAY_TEST_REDIS"])
    try:
        if await client.exists(key):
            await client.rpush(say, f"{call_id} {os.getpid()}")
            await client.blpop([f"release:{os.getpid()}"], timeout=HOLD_SECONDS)
    finally:
        await client.aclose()


async def _write_then_pause(self: WriteAhead, record: CallRecord) -> None:
    await _write(self, record)
    if record.phase is Phase.FOLLOW_UP:
        await _pause("pause_follow_up", "follow_up_owed", record.call_id)
    elif record.phase is Phase.DECIDED:
        await _pause("pause_decided", "output_decided", record.call_id)


async def _mark_then_pause(self: SessionLease, call_id: str, *args: Any) -> bool:
    kept = await _mark_sent(self, call_id, *args)
    if kept:
        await _pause("pause_output", "output_marked", call_id)
    return kept


if os.environ.get("RELAY_TEST_PAUSES"):
    WriteAhead.write = _write_then_pause   # type: ignore[method-assign]
    SessionLease.mark_sent = _mark_then_pause   # type: ignore[method-assign]


@tool
def lookup(order: int) -> str:
    """Look an order up."""
    return f"order {order} ships today"
