"""Against an MCP server nobody here wrote: npm's `@modelcontextprotocol/server-everything` (the
TypeScript SDK's reference server, kebab-case tool names, draft-07 schemas with `$schema`), over
stdio and streamable HTTP, through `relay serve` (both dialects) and `relay attach` on the mock:
list, call, error result, slow call with a filler, timeout, server killed mid-call, reconnect.
Skipped, with the install command, when it is not installed (.ci/run installs it)."""

from __future__ import annotations

import json
import socket

import anyio

from relay.mock import MockUpstream
from relay.tools.mcp_config import McpServerConfig, ToolSettings
from tests.support.clients import realtime_client
from tests.support.frames import user_text
from tests.support.keys import PROVIDER_KEY
from tests.support.mcp import (
    attached_call,
    call_started,
    calls,
    everything_command,
    everything_http,
    gemini_turns,
    outputs_sent,
    settings,
    turn,
)
from tests.support.relays import relay_for

LONG = "trigger-long-running-operation"
SCRIPT = calls(
    ("addition", "get-sum", {"a": 2, "b": 3}),
    ("badargs", "get-sum", {"a": "two", "b": 3}),
    ("longjob", LONG, {"duration": 1, "steps": 2}),
    ("forever", LONG, {"duration": 30, "steps": 3}),
    ("echoing", "echo", {"message": "hi there"}),
)
SLOW = (("trigger-long-running-operation", ToolSettings(on_delay=(300, "Still working on it."), timeout=1.5)),)


def everything(**fields) -> McpServerConfig:
    return McpServerConfig(name="everything", command=everything_command(), **fields)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_server_everything_over_stdio_lists_calls_fails_fills_and_times_out() -> None:
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        async with relay_for(mock, mcp=settings(everything(tool_settings=SLOW))) as server:
            assert {"get-sum", "echo", LONG} <= set(server.tools.names)
            async with realtime_client(server) as client:
                await turn(client, "addition please", "The sum of 2 and 3 is 5.")
                await turn(client, "badargs", "error")
                await turn(client, "longjob", "Long running operation completed")
                await turn(client, "forever", "Here is what I found")
                await turn(client, "echoing", "hi there")
    outputs = outputs_sent(mock)
    assert outputs[0] == "The sum of 2 and 3 is 5."
    assert "error" in json.loads(outputs[1]) and "Input validation error" in outputs[1]
    assert "Still working on it." in json.dumps(client.messages), "the filler was said while the call ran"
    assert json.loads(outputs[3]) == {"error": "timed out after 1.5 s"}
    assert outputs[4] == "Echo: hi there", "the server answers after a timed-out call"
    declared = {tool["name"]: tool for tool in mock.sessions[0].tools}
    assert "$schema" not in json.dumps(declared["get-sum"]), "the schema the model is given is self-contained"


async def test_server_everything_over_http_killed_mid_call_is_reconnected() -> None:
    port = free_port()
    with everything_http(port) as (first, url):
        async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
            async with relay_for(mock, mcp=settings(McpServerConfig(name="everything", url=url))) as server:
                connection = server.tool_set.mcp.connections[0]
                async with realtime_client(server) as client:
                    await turn(client, "addition please", "The sum of 2 and 3 is 5.")
                    started = call_started(connection)
                    await client.send(user_text("forever"))
                    await client.send({"type": "response.create"})
                    with anyio.fail_after(5):
                        await started.wait()
                    first.kill()   # mid-call
                    await client.wait_for(lambda e: e["type"] == "response.done"
                                          and "Here is what I found" in json.dumps(e["response"]["output"]))
                    with everything_http(port):
                        await turn(client, "echoing", "hi there")
                events = server.metrics.mcp_events
    outputs = outputs_sent(mock)
    assert "lost during the call" in json.loads(outputs[1])["error"]
    assert outputs[2] == "Echo: hi there"
    assert events[("everything", "lost")] >= 1 and events[("everything", "reconnected")] >= 1


async def test_gemini_calls_server_everything_with_declarations_it_accepts() -> None:
    words, declarations = await gemini_turns(settings(everything()), (("addition", "get-sum", {"a": 2, "b": 3}),),
                                             "addition")
    assert "The sum of 2 and 3 is 5." in words
    assert "$schema" not in json.dumps(declarations) and "get-sum" in declarations


async def test_an_attached_sidecar_calls_server_everything() -> None:
    async with attached_call(SCRIPT, settings(everything()), "addition please") as (_, output):
        assert output["output"] == "The sum of 2 and 3 is 5."
