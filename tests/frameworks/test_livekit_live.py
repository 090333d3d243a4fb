"""LiveKit Agents' GPT-Live model (livekit-plugins-openai's `GPTLiveModel`, Responses delegation)
through `relay serve --dialect live` in front of the GPT-Live mock, unchanged: the relay's tools
beside the agent's own, in one batch and alone. LiveKit answers its own call and asks for the
continuation once it has its output; the relay answers its own, hides it from LiveKit, and the
batch goes on with exactly one `response.create`, after every output."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from tests.frameworks.conftest import TIMEOUT, ClientRun, client
from tests.frameworks.test_cases import get_weather
from tests.support.keys import PROVIDER_KEY
from tests.support.relays import relay_for

pytestmark = pytest.mark.frameworks

SCRIPT = MockScript(
    rules=[
        Rule(match="weather and the time",
             calls=[ToolCall(name="get_weather", arguments={"city": "Paris"}),
                    ToolCall(name="get_time", arguments={"city": "Paris"})]),
        Rule(match="weather", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})]),
    ],
    after_outputs=Reply(say="Here you go: {joined}."),
)


@pytest.fixture
async def live_mock() -> AsyncIterator[MockUpstream]:
    async with MockUpstream(script=SCRIPT, dialect="live", api_key=PROVIDER_KEY) as upstream:
        yield upstream


async def caller_says(mock: MockUpstream, run: ClientRun, text: str) -> None:
    """Once LiveKit's session has started (and its audio flows), the caller says `text`."""
    await run.wait_for(lambda e: e["event"] == "connected")
    started = await mock.wait_for_sent(lambda e: e["type"] == "session.started", TIMEOUT)
    await mock.wait_for(lambda e: e["type"] == "session.input_audio.append", TIMEOUT)
    await mock.user_turn(next(s for s in mock.sessions if s.id == started.session_id), text)


def backend_traffic(mock: MockUpstream) -> list[tuple[str, str]]:
    """What went up to the provider for the backend, in order: ("output", call name) per
    `response.item.create`, ("create", "") per `response.create`."""
    names = {}
    for record in mock.sent:
        nested = record.event.get("event") if record.event["type"] == "response.event" else None
        item = nested.get("item") if isinstance(nested, dict) else None
        if isinstance(item, dict) and item.get("type") == "function_call":
            names[item["call_id"]] = item["name"]
    traffic = []
    for record in mock.received:
        if record.event["type"] == "response.item.create":
            traffic.append(("output", names.get(record.event["item"]["call_id"], "?")))
        elif record.event["type"] == "response.create":
            traffic.append(("create", ""))
    return traffic


async def test_the_relays_tool_and_livekits_own_in_one_gpt_live_batch(live_mock: MockUpstream) -> None:
    async with relay_for(live_mock, path="/v1/live/sessions", dialect="live", tools=[get_weather]) as server:
        async with client("livekit", server, program="livekit_live", until=["Here you go"]) as run:
            await caller_says(live_mock, run, "What's the weather and the time in Paris?")
    assert [e["name"] for e in run.of("tool")] == ["get_time"], "LiveKit ran its own tool, once"
    assert not run.of("error")
    heard = " ".join(run.heard)
    assert "rainy in Paris" in heard and "noon in Paris" in heard
    traffic = backend_traffic(live_mock)
    assert sorted(traffic[:2]) == [("output", "get_time"), ("output", "get_weather")]
    assert traffic[2:] == [("create", "")], "one response.create, after both outputs"
    raw = [record.event for record in live_mock.sent]
    assert not any(event["type"] == "error" for event in raw), "the mock refused something"


async def test_a_relay_tool_alone_under_livekits_gpt_live_model(live_mock: MockUpstream) -> None:
    async with relay_for(live_mock, path="/v1/live/sessions", dialect="live", tools=[get_weather]) as server:
        async with client("livekit", server, program="livekit_live", until=["Here you go"]) as run:
            await caller_says(live_mock, run, "What's the weather in Paris?")
    assert not run.of("tool") and not run.of("error")
    assert "rainy in Paris" in " ".join(run.heard)
    assert run.of("audio_out")[0]["bytes"] > 0, "the model's audio reached LiveKit's speaker"
    assert backend_traffic(live_mock) == [("output", "get_weather"), ("create", "")]
