"""The fleet soak's tools (tests/store/test_fleet_soak.py): each call's arguments are its own
number `n`, each tool takes 0.1 to 2 s (by `n`), and each counts its effects in Redis (at
RELAY_TEST_REDIS). `charge` is not idempotent: every run adds one to `charge:<n>`. `reserve` takes
the call's idempotency key: a run applies its effect once per key (`reserve:<key>`) and adds one to
`reserve_runs:<n>` whatever it did. Every run pushes `<tool> <n> <pid> <until>` to `started` first:
`until` is the Unix time before which the run does not end (it sleeps its 0.1 to 2 s after it)."""

from __future__ import annotations

import os
import time

import redis

from relay.tools import IdempotencyKey, tool


def _client() -> redis.Redis:
    return redis.Redis.from_url(os.environ["RELAY_TEST_REDIS"])


def seconds_for(n: int) -> float:
    """0.1 to 2 s, spread over the calls."""
    return 0.1 + (n * 7919 % 20) * 0.1


@tool(timeout=10)
def charge(n: int) -> str:
    """Charge the order of call n (not idempotent)."""
    client = _client()
    client.rpush("started", f"charge {n} {os.getpid()} {time.time() + seconds_for(n)}")
    client.incr(f"charge:{n}")
    time.sleep(seconds_for(n))
    return f"charged {n}"


@tool(timeout=10)
def reserve(n: int, key: IdempotencyKey) -> str:
    """Reserve the slot of call n (idempotent by the call's key)."""
    client = _client()
    client.rpush("started", f"reserve {n} {os.getpid()} {time.time() + seconds_for(n)}")
    client.incr(f"reserve_runs:{n}")
    client.set(f"reserve:{key}", n, nx=True)
    time.sleep(seconds_for(n))
    return f"reserved {n}"
