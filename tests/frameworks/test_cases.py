"""Each framework as the relay's client, unchanged (clients/*_client.py), through `relay serve` in
front of the mock: the relay's tools, the framework's own, both in one response (each call
answered once, by its owner), audio in and out, fillers, a slow relay tool with an interjection.
The assertions are on what the framework showed the application (its events, in order) and on
what reached the provider; none on time."""

from __future__ import annotations

import base64

import anyio
import pytest

from relay.mock import MockUpstream
from relay.tools import ToolResult, tool
from relay.tools.result import Interruption
from tests.frameworks.conftest import ClientRun, client, outputs, relay

pytestmark = pytest.mark.frameworks
FRAMEWORKS = ["agents", "livekit", "pipecat"]


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"rainy in {city}"


def typed_turn(framework: str, text: str, after: str) -> list[dict[str, str]]:
    """The user's turn `text` once the assistant said `after`, as the client types it: LiveKit and
    the Agents SDK do; pipecat's realtime service takes later turns as speech (`spoken_turn`)."""
    return [] if framework == "pipecat" else [{"text": text, "after": after}]


async def spoken_turn(framework: str, mock: MockUpstream, run: ClientRun, text: str, after: str) -> None:
    """For pipecat, the same turn spoken: played on the mock (its voice detection) once the
    client heard `after`."""
    if framework == "pipecat":
        await run.wait_for(lambda e: e["event"] == "heard" and after in e["text"])
        await mock.user_turn(mock.sessions[0], text)


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_relay_tool_is_answered_and_its_follow_up_spoken(mock: MockUpstream, framework: str) -> None:
    async with relay(mock, [get_weather]) as server:
        async with client(framework, server, turns=[{"text": "What's the weather in Paris?"}],
                          until=["rainy in Paris"]) as run:
            pass
    assert run.heard == ["Let me check.", "Here you go: rainy in Paris."]
    assert outputs(mock) == {"get_weather": ["rainy in Paris"]}
    assert not run.of("tool") and not run.of("error")


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_the_frameworks_own_tool_runs_in_the_framework(mock: MockUpstream, framework: str) -> None:
    async with relay(mock, [get_weather]) as server:
        async with client(framework, server, turns=[{"text": "What time is it in Paris?"}],
                          until=["noon in Paris"]) as run:
            pass
    assert [event["name"] for event in run.of("tool")] == ["get_time"]
    assert [text for text in run.heard if "noon" in text] == [run.heard[-1]]
    [answer] = outputs(mock)["get_time"]
    assert "noon in Paris" in answer
    assert not run.of("error")


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_both_owners_calls_in_one_response_are_each_answered_once(mock: MockUpstream, framework: str) -> None:
    async with relay(mock, [get_weather]) as server:
        async with client(framework, server, turns=[{"text": "The weather and the time in Paris?"}],
                          until=["rainy in Paris", "noon in Paris"]) as run:
            pass
    found = outputs(mock)
    assert found["get_weather"] == ["rainy in Paris"] and len(found["get_time"]) == 1
    assert [event["name"] for event in run.of("tool")] == ["get_time"]
    # one answer with both outputs: the client asked for it, the relay sent no follow-up of its own
    assert run.heard[0] == "Checking both."
    [answer] = run.heard[1:]
    assert "rainy in Paris" in answer and "noon in Paris" in answer
    assert not run.of("error")


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_audio_goes_up_and_the_answer_comes_back_as_audio(mock: MockUpstream, framework: str) -> None:
    async with relay(mock, [get_weather]) as server:
        async with client(framework, server, audio_in=True, until=["rainy in Paris"]) as run:
            await run.wait_for(lambda e: e["event"] == "audio_sent")
            if framework == "pipecat":   # its bot greets first (the model runs on its initial context)
                await run.wait_for(lambda e: e["event"] == "heard" and "Hello" in e["text"])
            await mock.wait_for(lambda e: e["type"] == "input_audio_buffer.append", timeout=30)
            await mock.user_turn(mock.sessions[0], "What's the weather in Paris?")
    appended = b"".join(base64.b64decode(record.event["audio"]) for record in mock.received
                        if record.event["type"] == "input_audio_buffer.append")
    assert appended.strip(b"\0")             # the framework's audio reached the provider
    assert run.heard[-1] == "Here you go: rainy in Paris."
    [audio] = run.of("audio_out")
    assert audio["bytes"] > 0                # and the provider's audio reached the application
    assert outputs(mock) == {"get_weather": ["rainy in Paris"]}


@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_slow_relay_tool_lets_the_user_interject(mock: MockUpstream, framework: str) -> None:
    """The user says "thanks" while the relay's report runs; the client's turn is answered
    (within the relay's hold limit, here short) before the report, which follows on its own.
    Typed by LiveKit and the Agents SDK (their `response.create` is held); spoken for pipecat (a
    barge-in: the report asks to be spoken all the same, `finish_and_speak`)."""
    done = anyio.Event()

    @tool(interruption=Interruption.FINISH_AND_SPEAK)
    async def make_report() -> ToolResult:
        """Write the monthly report."""
        await done.wait()
        return ToolResult(result="report ready", message="Your report is ready.")

    async with relay(mock, [make_report], hold_limit=0.2) as server:
        turns = [{"text": "Make me the monthly report."}, *typed_turn(framework, "thanks", after="Working on")]
        async with client(framework, server, turns=turns, until=["welcome", "report is ready"]) as run:
            await spoken_turn(framework, mock, run, "thanks", after="Working on")
            await run.wait_for(lambda e: e["event"] == "heard" and "welcome" in e["text"])
            done.set()                       # the report ends only once the "thanks" is answered
    assert run.heard == ["Working on your report.", "You are welcome.", "Your report is ready."]
    assert outputs(mock) == {"make_report": ["report ready"]}
    assert not run.of("error")


@pytest.mark.parametrize("in_conversation", [False, True], ids=["out_of_band", "in_conversation"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
async def test_a_filler_is_heard_while_the_relay_tool_runs(mock: MockUpstream, framework: str,
                                                            in_conversation: bool) -> None:
    """The framework keeps the filler it heard in its own history; the provider's conversation
    has it only with `--fillers-in-conversation`."""
    heard_filler = anyio.Event()

    @tool(name="get_weather", on_start="One moment, please.", on_complete="It is rainy in Paris.")
    async def slow_weather(city: str) -> str:
        """Current weather in a city."""
        await heard_filler.wait()
        return f"rainy in {city}"

    async with relay(mock, [slow_weather], fillers_in_conversation=in_conversation) as server:
        async with client(framework, server, turns=[{"text": "What's the weather in Paris?"}],
                          until=["rainy in Paris"]) as run:
            await run.wait_for(lambda e: e["event"] == "heard" and "One moment" in e["text"])
            heard_filler.set()               # the tool ends only once the filler was heard
    assert run.heard == ["Let me check.", "One moment, please.", "It is rainy in Paris."]
    assert outputs(mock) == {"get_weather": ["rainy in Paris"]}
    assert not run.of("error")
    [history] = run.of("history")
    assert any("One moment" in item["text"] for item in history["items"] if item["role"] == "assistant")
    provider = [part.get("transcript") or part.get("text") for item in mock.sessions[0].items
                if item.get("role") == "assistant" for part in item["content"]]
    assert ("One moment, please." in provider) is in_conversation
