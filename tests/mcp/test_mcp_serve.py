"""MCP tools through `relay serve` on the mock, both dialects, over stdio and streamable HTTP: the
model's calls reach the server and its answers come back as outputs, hidden from the client as any
relay tool; errors, a slow call with a filler, a timeout, a server killed mid-call and reconnected,
a tool list that changes; headers from the environment kept out of logs and recordings."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import anyio
import pytest

from relay.errors import ConfigError
from relay.mcp.connection import McpConnection
from relay.mock import MockUpstream
from relay.observe.logs import configure_logging
from relay.recording.reader import read_recording
from relay.tools import Interruption
from relay.tools.mcp_config import McpServerConfig, ToolSettings
from tests.support.clients import realtime_client
from tests.support.frames import user_text
from tests.support.keys import PROVIDER_KEY
from tests.support.mcp import (
    attached_call,
    call_started,
    calls,
    cancelled_on_the_server,
    gemini_turns,
    http_config,
    http_server,
    outputs_sent,
    settings,
    stdio_server,
    turn,
)
from tests.support.relays import LeakGuard, application_log, captured_logs, relay_for
from tests.support.tools import get_weather

SCRIPT = calls(
    ("forecast", "forecast", {"city": "Oslo"}),
    ("echo", "echo", {"text": "hello there"}),
    ("fail", "fail", {"reason": "no luck"}),
    ("slow", "slow", {"seconds": 0.6}),
    ("stuck", "slow", {"seconds": 30}),
    ("crash", "crash", {"after": 0.1}),
    ("pid", "pid", {}),
    ("picture", "picture", {}),
    ("added", "added", {"text": "new"}),
)


async def test_an_mcp_tool_over_stdio_answers_like_a_tool_and_stays_hidden_from_the_client(tmp_path: Path) -> None:
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        async with relay_for(mock, tools=[get_weather], mcp=settings(stdio_server()), record_dir=tmp_path) as server:
            assert {"forecast", "echo", "get_weather"} <= set(server.tools.names)
            async with realtime_client(server) as client:
                await turn(client, "forecast please", "sunny")
                await turn(client, "echo it", "hello there")
                await turn(client, "picture", "image/png")
    assert json.loads(outputs_sent(mock)[0]) == {"city": "Oslo", "temperature_c": 21.5, "conditions": "sunny"}
    assert outputs_sent(mock)[1] == "hello there", "text content is the output as it is"
    assert outputs_sent(mock)[2] == "[image: image/png, 70 bytes]", "an image is described, not pasted"
    declared = [t["name"] for t in mock.sessions[-1].tools]
    assert {"forecast", "echo", "get_weather"} <= set(declared)
    seen = json.dumps(client.frames)
    assert "function_call" not in seen and "forecast" not in seen.replace("forecast please", "")
    recording = read_recording(next(tmp_path.glob("*.jsonl")))
    recorded = {entry["name"]: entry for entry in recording.header["mcp_tools"]}
    assert recorded["forecast"]["server"] == "test" and recorded["forecast"]["tool"] == "forecast"
    assert recorded["forecast"]["parameters"]["properties"]["city"]["type"] == "string"


async def test_an_error_result_a_filler_and_a_timeout_follow_the_tools_settings() -> None:
    server_config = stdio_server(tool_settings=(("slow", ToolSettings(on_delay=(200, "Hold on a moment."),
                                                                        timeout=2.0)),
                                                ("fail", ToolSettings(on_failure="That did not work."))))
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        async with relay_for(mock, mcp=settings(server_config)) as server:
            async with realtime_client(server) as client:
                await turn(client, "fail now", "That did not work.")   # on_failure is said instead
                await turn(client, "slow one", "slept 0.6 s")
                await turn(client, "stuck", "Here is what I found")
                await turn(client, "echo again", "hello there")   # the session and the server go on
            cancelled = await cancelled_on_the_server(server.tool_set.mcp.connections[0])
    outputs = outputs_sent(mock)
    assert json.loads(outputs[0]) == {"error": "Error executing tool fail: cannot do it: no luck"}
    assert outputs[1] == "slept 0.6 s"
    assert "2 s" in json.loads(outputs[2])["error"], "the timeout's error output"
    assert cancelled == "slow 30", "the timeout cancelled the MCP request on the server"
    assert outputs[3] == "hello there"
    said = json.dumps(client.frames)
    assert "Hold on a moment." in said, "the on_delay filler was spoken while the slow call ran"


async def test_a_server_killed_mid_call_gives_an_error_output_and_is_reconnected_for_the_next_call() -> None:
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        with captured_logs() as logs:
            async with relay_for(mock, mcp=settings(stdio_server())) as server:
                async with realtime_client(server) as client:
                    await turn(client, "pid", "Here is what I found")
                    first_pid = outputs_sent(mock)[-1]
                    await turn(client, "crash", "lost during the call")
                    await turn(client, "pid", "Here is what I found")
                    second_pid = outputs_sent(mock)[-1]
                events = server.metrics.mcp_events
    assert first_pid.isdigit() and second_pid.isdigit() and first_pid != second_pid, \
        "a new server process answers after the crash"
    assert events[("test", "lost")] == 1 and events[("test", "reconnected")] == 1, events
    assert "MCP server test lost" in logs.getvalue()


async def test_an_http_server_gets_its_header_from_the_environment_and_it_never_reaches_logs_or_recordings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = "mcp-secret-token-123"
    monkeypatch.setenv("TEST_MCP_TOKEN", token)
    with http_server(token=token) as (_, url), LeakGuard(tmp_path) as guard:
        config = http_config(url, headers=(("Authorization", "Bearer ${TEST_MCP_TOKEN}"),))
        async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
            async with guard.relay(mock, mcp=settings(config)) as server:
                assert token in server.redactor.secrets, "the relay's one redactor knows the header's value"
                async with guard.client(server) as client:
                    await turn(client, "echo it", "hello there")
    guard.check()
    assert token not in guard.log.getvalue()
    assert list(tmp_path.glob("*.jsonl"))
    for recording in tmp_path.glob("*.jsonl"):
        assert token not in recording.read_text()


async def test_a_credential_in_an_http_servers_url_reaches_no_log_line_and_no_recording(
        tmp_path: Path, restore_logging: None) -> None:
    """Some servers take their key in the URL. httpx, under the MCP SDK, quotes the URL in each
    request line it logs: at `debug` those lines are shown (below it, not at all), without the key."""
    secret = "query-secret-12345"
    stream = io.StringIO()
    configure_logging("json", level="debug", stream=stream)
    with http_server() as (_, url):
        async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
            async with relay_for(mock, record_dir=tmp_path, mcp=settings(http_config(f"{url}?api_key={secret}"))
                                 ) as server:
                assert secret in server.redactor.secrets
                async with realtime_client(server) as client:
                    await turn(client, "echo it", "hello there")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    requests = [line["msg"] for line in lines if line["logger"] == "httpx2"]
    assert requests and all("?api_key=[redacted] " in request for request in requests)
    assert secret not in stream.getvalue()
    assert list(tmp_path.glob("*.jsonl"))
    for recording in tmp_path.glob("*.jsonl"):
        assert secret not in recording.read_text()


async def test_a_credential_in_an_http_servers_url_is_kept_out_of_an_applications_own_log() -> None:
    """The relay as a library in an application that logs at INFO with a handler and formatter of
    its own (`logging.basicConfig`): httpx's request lines reach it, and not with the key."""
    secret = "app-query-secret-24680"
    with application_log("%(name)s %(levelname)s %(message)s") as stream, http_server() as (_, url):
        async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
            async with relay_for(mock, mcp=settings(http_config(f"{url}?api_key={secret}"))) as server:
                async with realtime_client(server) as client:
                    await turn(client, "echo it", "hello there")
    requests = [line for line in stream.getvalue().splitlines() if line.startswith("httpx2 INFO HTTP Request")]
    assert requests and all("?api_key=[redacted] " in request for request in requests)
    assert secret not in stream.getvalue()


async def test_an_http_server_killed_mid_call_and_restarted_is_reconnected() -> None:
    with http_server() as (process, url):
        port = int(url.split(":")[2].split("/")[0])
        async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
            async with relay_for(mock, mcp=settings(http_config(url))) as server:
                async with realtime_client(server) as client:
                    await turn(client, "crash", "error")
                    lost = outputs_sent(mock)[-1]
                    await turn(client, "echo it", "unreachable")   # while it is down: at once, not at the timeout
                    down = outputs_sent(mock)[-1]
                    with http_server(port=port):
                        await turn(client, "echo it", "hello there")
                events = server.metrics.mcp_events
    assert process.poll() is not None
    assert "lost during the call" in lost or "unreachable" in lost
    assert json.loads(down) == {"error": "McpUnavailable: MCP server web is unreachable: ConnectError: All "
                                         "connection attempts failed"}
    assert events[("web", "connect_failed")] >= 1 and events[("web", "reconnected")] == 1


async def test_a_new_tool_joins_the_sessions_that_start_after_the_server_says_so() -> None:
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        async with relay_for(mock, mcp=settings(stdio_server())) as server:
            changed = anyio.Event()
            server.tool_set.mcp.on_change.append(changed.set)
            await server.tools.get("add_tool").handler(name="added")
            with anyio.fail_after(5):
                await changed.wait()
            assert "added" in server.tools
            async with realtime_client(server) as client:
                await turn(client, "added", "added: new")
    assert server.metrics.mcp_events[("test", "tools_changed")] == 1


async def test_gemini_gets_sanitised_declarations_and_the_answers_of_mcp_tools() -> None:
    rules = (("forecast", "forecast", {"city": "Oslo"}), ("deep", "deep", {"place": {"name": "Rome"}, "days": 2}))
    words, declarations = await gemini_turns(settings(stdio_server()), rules, "forecast", "deep")
    assert "sunny" in words and "Rome: 2 days in C" in words
    deep = json.dumps(declarations["deep"])
    for refused in ("$ref", "$defs", "exclusiveMinimum", "additionalProperties", "const", "title"):
        assert refused not in deep


async def test_a_name_clash_or_an_unreachable_server_refuses_to_start() -> None:
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        from relay.tools import tool

        @tool(name="echo")
        def own_echo(text: str) -> str:
            return text

        with pytest.raises(ConfigError, match="'echo' is taken twice.*prefix"):
            async with relay_for(mock, tools=[own_echo], mcp=settings(stdio_server())):
                pass
        async with relay_for(mock, tools=[own_echo], mcp=settings(stdio_server(prefix="t_"))) as server:
            assert {"echo", "t_echo"} <= set(server.tools.names)
        with pytest.raises(ConfigError, match="cannot reach MCP server gone"):
            async with relay_for(mock, mcp=settings(McpServerConfig(name="gone", command=("/nonexistent/server",)))):
                pass


async def test_an_attached_sidecar_runs_mcp_tools_beside_the_call() -> None:
    async with attached_call(SCRIPT, settings(stdio_server()), "forecast please") as (sidecar, output):
        assert "forecast" in sidecar.runtime.tools
    assert json.loads(output["output"])["conditions"] == "sunny"
    assert "forecast" not in sidecar.runtime.tools, "detached, the sidecar let the server go"


async def test_a_barge_in_cancels_the_mcp_request_of_a_tool_that_cancels_on_interruption() -> None:
    server_config = stdio_server(tool_settings=(("slow", ToolSettings(interruption=Interruption.CANCEL)),))
    async with MockUpstream(script=SCRIPT, api_key=PROVIDER_KEY) as mock:
        async with relay_for(mock, mcp=settings(server_config)) as server:
            connection = server.tool_set.mcp.connections[0]
            started = call_started(connection)
            async with realtime_client(server) as client:
                await client.send(user_text("stuck"))
                await client.send({"type": "response.create"})
                with anyio.fail_after(5):
                    await started.wait()
                await mock.user_turn(mock.sessions[0], "never mind", respond=False)
                cancelled = await cancelled_on_the_server(connection)
    assert cancelled == "slow 30"


async def test_a_stdio_servers_stderr_becomes_the_relays_log_lines(caplog: pytest.LogCaptureFixture,
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    connection = McpConnection(stdio_server(env=(("MCP_TEST_STDERR", "starting up\n\nready: 9 tools"),)))
    with caplog.at_level(logging.INFO, logger="relay.mcp"):
        try:
            await connection.start()
        finally:
            await connection.close()   # what the server wrote and was not read yet is logged now
    said = [(r.getMessage(), r.levelname, r.mcp_server) for r in caplog.records if getattr(r, "stream", None) == "stderr"]
    assert said == [("MCP server test: starting up", "INFO", "test"), ("MCP server test: ready: 9 tools", "INFO", "test")]
    assert "starting up" not in capfd.readouterr().err
