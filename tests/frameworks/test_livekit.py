"""LiveKit Agents' own ways against the relay (livekit-agents 1.8.9): `generate_reply` gives up on a
reply whose `response.created` has not come within 10 s (`call_later(10.0, ...)`, not
configurable) and discards the response that comes later; `session.run()` ends before the
relay's follow-up."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from relay.mock import MockUpstream
from relay.tools import ToolResult, tool
from tests.frameworks.conftest import client, outputs, relay
from tests.frameworks.test_cases import get_weather

pytestmark = pytest.mark.frameworks

REPORT_SECONDS = 12.0
"""Longer than LiveKit's 10 s: this test takes that long (the one test of the suite that does)."""


@tool(timeout=60)
async def make_report() -> ToolResult:
    """Write the monthly report."""
    await asyncio.sleep(REPORT_SECONDS)
    return ToolResult(result="report ready", message="Your report is ready.")


async def test_a_relay_tool_longer_than_livekits_timeout_with_an_interjection(mock: MockUpstream) -> None:
    """The user asks for the report (a 12 s relay tool), then, while it runs, says "thanks":
    LiveKit's `generate_reply` sends `response.create` and waits at most 10 s for it. The relay
    holds that create for its running tool at most `--hold-limit` (5 s by default), then lets it
    go up without the tool's output: the "thanks" is answered in time, and the report follows
    with the relay's own follow-up once the tool ends.

    With the hold unbounded (`hold_limit=None`, or `--hold-limit 1000`: the relay before it had
    a limit) this test fails: LiveKit reports "generate_reply timed out", discards the response
    the relay releases at 12 s, and neither the "thanks" nor the report is ever spoken."""
    async with relay(mock, [make_report]) as server:
        async with client("livekit", server, turns=[{"text": "Make me the monthly report."},
                                                    {"text": "thanks", "after": "Working on"}],
                          until=["welcome", "report is ready"]) as run:
            pass
    assert run.heard == ["Working on your report.", "You are welcome.", "Your report is ready."]
    assert not run.of("error")
    assert outputs(mock) == {"make_report": ["report ready"]}
    # on the provider's side: LiveKit's create went up before the tool's output, the relay's own
    # follow-up after it
    sent = [record.event for record in mock.received
            if record.event["type"] == "response.create"
            or record.event.get("item", {}).get("type") == "function_call_output"]
    kinds = [event["response"].get("metadata", {}).get("relay", "client") if event["type"] == "response.create"
             else "output" for event in sent]
    assert kinds == ["client", "client", "output", "follow_up"]


async def test_session_run_returns_before_the_relays_follow_up(mock: MockUpstream) -> None:
    """LiveKit's `session.run()` (its test surface) ends with the response that carried the relay's
    call: its result has the preamble, not the relay's follow-up with the tool's result, which
    reaches `session.history` after it (docs/frameworks.md)."""
    async with relay(mock, [get_weather]) as server:
        async with client("livekit", server, turns=[{"text": "What's the weather in Paris?"}],
                          until=["rainy in Paris"], options={"api": "run"}) as run:
            pass
    [result] = run.of("run_result")
    assert result["messages"] == ["Let me check."]
    assert run.heard == ["Let me check.", "Here you go: rainy in Paris."]
    [history] = run.of("history")
    assert "Here you go: rainy in Paris." in [item["text"] for item in history["items"]]


async def test_a_filler_while_livekit_waits_on_its_own_reply(mock: MockUpstream) -> None:
    """The relay's `on_delay` filler goes up while LiveKit's "thanks" reply is held for the running
    tool, and before the tool's result, as always; LiveKit plays it after its own reply (its
    speech queue puts that first: docs/frameworks.md), and the result after both."""
    heard_filler = anyio.Event()

    @tool(name="make_report", on_delay=(300, "Still working on it."))
    async def slow_report() -> ToolResult:
        """Write the monthly report."""
        await heard_filler.wait()
        return ToolResult(result="report ready", message="Your report is ready.")

    async with relay(mock, [slow_report], hold_limit=2) as server:
        async with client("livekit", server, turns=[{"text": "Make me the monthly report."},
                                                    {"text": "thanks", "after": "Working on"}],
                          until=["welcome", "Still working", "report is ready"]) as run:
            await run.wait_for(lambda e: e["event"] == "heard" and "Still working" in e["text"])
            heard_filler.set()
    assert sorted(run.heard[1:3]) == ["Still working on it.", "You are welcome."]
    assert run.heard[0] == "Working on your report." and run.heard[3:] == ["Your report is ready."]
    assert outputs(mock) == {"make_report": ["report ready"]}
    relay_creates = [record.event["response"]["metadata"].get("relay") for record in mock.received
                     if record.event["type"] == "response.create"]
    assert [kind for kind in relay_creates if kind] == ["filler", "follow_up"]
