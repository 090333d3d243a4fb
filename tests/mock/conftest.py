"""Fixtures for the mock upstream's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest

from relay.mock import MockUpstream
from tests.support.clients import MockFactory
from tests.support.sdk import check_event


@pytest.fixture
async def make_mock() -> AsyncIterator[MockFactory]:
    """Start mocks for a test; afterwards check every event each one sent against the SDK types
    (pass `validate=False` for tests that inject malformed events on purpose)."""
    checked: list[MockUpstream] = []
    async with AsyncExitStack() as stack:

        async def factory(*, validate: bool = True, **kwargs: Any) -> MockUpstream:
            mock = await stack.enter_async_context(MockUpstream(**kwargs))
            if validate:
                checked.append(mock)
            return mock

        yield factory
    for mock in checked:
        wires = {session.id: session.wire for session in mock.sessions}
        for record in mock.sent:
            wire = wires[record.session_id]
            check_event(record.event, beta=wire.beta, foundry=wire.foundry)
