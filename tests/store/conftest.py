"""The store's fixtures: a redis-server per test module (each test uses its own sessions)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
import redis.asyncio as aioredis

from relay.store import CallStore, MemoryStore, open_store
from relay.store.writeahead import WriteAhead
from tests.support.redis_server import redis_server


class FakeClock:
    """A store's clock that a test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RedisClock:
    """Redis's own clock, as its keyspace notifications tell it: `passes(seconds)` sets a key to
    expire that much later and returns once Redis reports it expired (Redis's time is then past
    it, and past every lease that ended sooner)."""

    _ticks = itertools.count()

    def __init__(self, client: aioredis.Redis, pubsub: object) -> None:
        self.client = client
        self.pubsub = pubsub

    async def passes(self, seconds: float, *, timeout: float = 10.0) -> None:
        key = f"test:tick:{id(self)}:{next(self._ticks)}"
        await self.client.set(key, 1, px=max(1, int(seconds * 1000)))
        with anyio.fail_after(timeout):
            async for message in self.pubsub.listen():   # type: ignore[attr-defined]
                if message["type"] == "message" and message["data"] == key.encode():
                    return


@asynccontextmanager
async def redis_clock(url: str) -> AsyncIterator[RedisClock]:
    """A `RedisClock` on the Redis at `url` (its expired-key notifications turned on)."""
    client = aioredis.Redis.from_url(url)
    db = client.connection_pool.connection_kwargs.get("db", 0)
    pubsub = client.pubsub()
    try:
        await client.config_set("notify-keyspace-events", "Ex")
        await pubsub.subscribe(f"__keyevent@{db}__:expired")
        yield RedisClock(client, pubsub)
    finally:
        await pubsub.aclose()
        await client.aclose()


class Writes:
    """Wakes a waiting test at every record `write_ahead` writes to its store (through its
    `on_latency` hook, which it calls once per write done): `until(check)` looks again after each."""

    def __init__(self, write_ahead: WriteAhead) -> None:
        self._wake = anyio.Event()
        told = write_ahead.on_latency

        def written(seconds: float) -> None:
            if told is not None:
                told(seconds)
            self._wake.set()

        write_ahead.on_latency = written

    async def until(self, check: Callable[[], Awaitable[bool]], *, timeout: float) -> None:
        """Until `check()` is true, looked at now and after each write; fails after `timeout` s."""
        with anyio.fail_after(timeout):
            while True:
                self._wake = anyio.Event()   # a write during the check wakes the wait below
                if await check():
                    return
                await self._wake.wait()


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(tmp_path_factory.mktemp("redis")) as server:
        yield server.url


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[CallStore]:
    """Each store, opened (the Redis one on the module's redis-server)."""
    if request.param == "memory":
        made: CallStore = MemoryStore()
    else:
        made = open_store(request.getfixturevalue("redis_url"))
    await made.open()
    yield made
    await made.close()


@pytest.fixture
async def effects(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[aioredis.Redis]:
    """The module's Redis, emptied, as the tools in tests/store/tools/ count their effects in it
    (at RELAY_TEST_REDIS, set for the test's process and the relays it starts)."""
    monkeypatch.setenv("RELAY_TEST_REDIS", redis_url)
    client = aioredis.Redis.from_url(redis_url)
    await client.flushdb()
    yield client
    await client.aclose()
