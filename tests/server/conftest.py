"""Fixtures for `relay serve` tests (helpers live in tests/server/helpers.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from relay.mock import MockUpstream
from tests.server.helpers import PROVIDER_KEY, WEATHER_SCRIPT


@pytest.fixture
async def weather_mock() -> AsyncIterator[MockUpstream]:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock:
        yield mock
