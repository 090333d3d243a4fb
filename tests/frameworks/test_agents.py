"""The OpenAI Agents SDK's own caveats through the relay (openai-agents 0.25)."""

from __future__ import annotations

import pytest

from relay.mock import MockUpstream
from tests.frameworks.conftest import client, outputs, relay
from tests.frameworks.test_cases import get_weather

pytestmark = pytest.mark.frameworks


async def test_with_the_relays_calls_exposed_the_sdk_answers_them_and_is_refused(mock: MockUpstream) -> None:
    """`--expose-tool-events`: the SDK sees the relay's call as a call of a tool it lacks and answers
    it itself; the relay refuses that output (`relay_owned_call`), its own stands, and the model
    answers once."""
    async with relay(mock, [get_weather], expose_tool_events=True) as server:
        async with client("agents", server, turns=[{"text": "What's the weather in Paris?"}],
                          until=["rainy in Paris"], until_errors=["relay_owned_call"]) as run:
            pass
    assert outputs(mock) == {"get_weather": ["rainy in Paris"]}
    assert any("relay_owned_call" in event["message"] for event in run.of("error"))
    assert [text for text in run.heard if "rainy" in text] == ["Here you go: rainy in Paris."]
