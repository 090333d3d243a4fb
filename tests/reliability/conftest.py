"""Fixtures for the reliability tests: every test that runs a relay does it under a `LeakGuard`,
which fails the test at teardown if the provider key reached a client, a log line or a recording."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from relay.mock import MockUpstream
from tests.support.keys import PROVIDER_KEY
from tests.support.relays import LeakGuard
from tests.support.tools import WEATHER_SCRIPT


@pytest.fixture
def guard(tmp_path: Path) -> Iterator[LeakGuard]:
    with LeakGuard(tmp_path / "recordings") as leak_guard:
        yield leak_guard
    leak_guard.check()


@pytest.fixture
async def mock() -> AsyncIterator[MockUpstream]:
    """The mock upstream, requiring the provider key (so the relay is seen to use it)."""
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as upstream:
        yield upstream
