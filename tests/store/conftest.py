"""The store's fixtures: a redis-server per test module (each test uses its own sessions)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from relay.store import CallStore, MemoryStore, open_store
from tests.support.redis_server import redis_server


class FakeClock:
    """A store's clock that a test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


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
