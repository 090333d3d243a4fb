"""The provider's own MCP tools (`{"type": "mcp"}`, run by OpenAI Realtime itself): their items
and events pass through the relay untouched (they are not function calls: no handler starts, even
for a relay tool of the same name), are recorded, inspected, exported and replayed without
divergence; approval requests are answered by the operator's policy or passed to the client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from relay.inspector.model import build_model
from relay.mock import MockScript, MockUpstream, Reply, Rule
from relay.mock.script import McpCall
from relay.offline.export import export_recording
from relay.offline.replay import replay_async
from relay.recording.reader import read_recording
from relay.tools import tool
from relay.tools.mcp_config import ApprovalPolicy, McpSettings
from tests.support.clients import RealtimeClient, realtime_client
from tests.support.frames import user_text
from tests.support.keys import PROVIDER_KEY
from tests.support.relays import relay_for

DEEPWIKI = {"type": "mcp", "server_label": "deepwiki", "server_url": "https://mcp.example.com/mcp",
            "require_approval": "never"}
GCAL = {"type": "mcp", "server_label": "gcal", "server_url": "https://calendar.example.com/mcp",
        "require_approval": "always"}
SCRIPT = MockScript(
    rules=[
        Rule(match="docs", say="Deepwiki says: {mcp_output}",
             mcp_calls=[McpCall(server_label="deepwiki", name="ask_question",
                                arguments={"repoName": "openai/openai-python", "question": "what is it?"},
                                output="It is the official Python library.")]),
        Rule(match="calendar", say="Done: {mcp_output}",
             mcp_calls=[McpCall(server_label="gcal", name="create_event", arguments={"title": "lunch"},
                                output="event created", approval=True)]),
    ],
    mcp_tools={"deepwiki": ({"name": "ask_question", "input_schema": {"type": "object", "properties": {}}},)},
    default=Reply(say="Hello."),
)
ran: list[str] = []


@tool
def ask_question(question: str) -> str:
    """A relay tool with the provider MCP tool's name: it must never run for an mcp_call."""
    ran.append(question)
    return "the relay's answer"


async def said(client, words: str, says: str) -> None:
    await client.send(user_text(words))
    await client.send({"type": "response.create"})
    await client.wait_for(lambda e: e["type"] == "response.done" and says in json.dumps(e["response"]["output"]))


async def test_provider_mcp_items_pass_through_are_recorded_inspected_exported_and_replayed(tmp_path: Path) -> None:
    ran.clear()
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        async with relay_for(mock, tools=[ask_question], record_dir=tmp_path) as server:
            async with realtime_client(server) as client:
                await client.send({"type": "session.update", "session": {"type": "realtime", "tools": [DEEPWIKI]}})
                await client.wait_for(lambda e: e["type"] == "mcp_list_tools.completed")
                await said(client, "ask the docs", "Deepwiki says: It is the official Python library.")
    assert ran == [], "an mcp_call is the provider's: no relay handler runs for it"
    seen = [e["type"] for e in client.events]
    for expected in ("mcp_list_tools.in_progress", "response.mcp_call_arguments.delta",
                     "response.mcp_call_arguments.done", "response.mcp_call.in_progress", "response.mcp_call.completed"):
        assert expected in seen
    items = [e["item"] for e in client.events if e["type"] == "response.output_item.done"]
    assert any(item["type"] == "mcp_call" and item["output"] == "It is the official Python library." for item in items)
    assert not any(item.get("type") == "function_call_output" for item in mock.sessions[0].items)

    path = next(tmp_path.glob("*.jsonl"))
    recording = read_recording(path)
    assert any(frame.event and frame.event.get("type") == "response.mcp_call.completed" for frame in recording.frames)
    model = build_model(recording).snapshot()
    provider = [e for e in model["events"] if e["lane"] == "provider_mcp"]
    assert {e["kind"] for e in provider} == {"mcp_list_tools", "mcp_call"}
    call = next(e for e in provider if e["kind"] == "mcp_call")
    assert call["label"] == "deepwiki.ask_question → It is the official Python library."
    exported = export_recording(path, "openai-chat")
    messages = exported.document["messages"]
    assert any(m.get("role") == "tool" and m.get("content") == "It is the official Python library." for m in messages)
    assert any(note.kind == "provider_mcp_call" for note in exported.report)
    result = await replay_async(path, [ask_question])
    assert result.ok, result.divergences
    assert ran == []


async def test_an_approval_request_the_policy_allows_is_answered_by_the_relay_and_hidden_from_the_client(
        tmp_path: Path) -> None:
    policy = McpSettings(approvals=ApprovalPolicy(allow=("gcal:create_event",)))
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        async with relay_for(mock, mcp=policy, record_dir=tmp_path) as server:
            async with realtime_client(server) as client:
                await client.send({"type": "session.update", "session": {"type": "realtime", "tools": [GCAL]}})
                await client.wait_type("session.updated")
                await said(client, "book it in the calendar", "Done: event created")
    assert "mcp_approval_request" not in json.dumps(client.events), "the relay answered it: the client never sees it"
    answers = [i for i in mock.sessions[0].items if i["type"] == "mcp_approval_response"]
    assert [a["approve"] for a in answers] == [True]
    calls = [i for i in mock.sessions[0].items if i["type"] == "mcp_call"]
    assert calls[0]["approval_request_id"] == answers[0]["approval_request_id"]
    path = next(tmp_path.glob("*.jsonl"))
    assert read_recording(path).header["mcp_approvals"] == {"allow": ["gcal:create_event"], "deny": []}
    result = await replay_async(path)
    assert result.ok, result.divergences
    replayed = [e["item"] for e in result.sent if e.get("type") == "conversation.item.create"
                and e["item"]["type"] == "mcp_approval_response"]
    assert [i["approve"] for i in replayed] == [True], \
        "the replayed relay answered the request as recorded (and it was compared)"


@asynccontextmanager
async def calendar_session(policy: ApprovalPolicy) -> AsyncIterator[tuple[MockUpstream, RealtimeClient]]:
    """A client of a relay with this approval policy, its session given the calendar's MCP tool."""
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        async with relay_for(mock, mcp=McpSettings(approvals=policy)) as server:
            async with realtime_client(server) as client:
                await client.send({"type": "session.update", "session": {"type": "realtime", "tools": [GCAL]}})
                await client.wait_type("session.updated")
                yield mock, client


def approvals_given(mock: MockUpstream) -> list[bool]:
    return [i["approve"] for i in mock.sessions[0].items if i["type"] == "mcp_approval_response"]


async def test_an_approval_request_the_policy_denies_is_refused_and_the_model_says_so() -> None:
    async with calendar_session(ApprovalPolicy(deny=("gcal",))) as (mock, client):
        await said(client, "calendar please", "I was not allowed to use create_event.")
    assert approvals_given(mock) == [False]


async def test_an_approval_request_no_policy_decides_goes_to_the_client_as_without_the_relay() -> None:
    async with calendar_session(ApprovalPolicy(allow=("deepwiki",))) as (mock, client):
        await client.send(user_text("calendar please"))
        await client.send({"type": "response.create"})
        request = await client.wait_for(lambda e: e["type"] == "response.output_item.done"
                                        and e["item"]["type"] == "mcp_approval_request")
        await client.wait_type("response.done")
        await client.send({"type": "conversation.item.create", "item": {
            "type": "mcp_approval_response", "approval_request_id": request["item"]["id"], "approve": True}})
        await client.send({"type": "response.create"})
        await client.wait_for(lambda e: e["type"] == "response.done"
                              and "Done: event created" in json.dumps(e["response"]["output"]))
    assert approvals_given(mock) == [True], "only the client answered"
