"""`relay attach` and `relay sidecar` as a user runs them: subprocesses against an in-process mock,
with the provider key and the webhook secret in their environment."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from typing import Any

from relay.cli import build_parser
from relay.edges.sidecar import signed_headers
from relay.mock import MockUpstream
from tests.support.clients import http_request
from tests.support.frames import outputs_received, said
from tests.support.keys import PROVIDER_KEY
from tests.support.paths import REPO
from tests.support.processes import next_log_line, relay_process
from tests.support.tools import WEATHER_SCRIPT, WEATHER_TOOL

WEBHOOK_SECRET = "whsec_Y2xpIHdlYmhvb2sgc2VjcmV0"
ENVIRONMENT = {"OPENAI_API_KEY": PROVIDER_KEY, "OPENAI_WEBHOOK_SECRET": WEBHOOK_SECRET}
TOOLS = REPO / "tests" / "fixtures" / "weather_tools.py"


async def rest(mock: MockUpstream, call_id: str, operation: str, body: dict[str, Any] | None = None) -> None:
    response = await http_request("POST", f"{mock.rest_url}/realtime/calls/{call_id}/{operation}",
                                  {"Authorization": f"Bearer {PROVIDER_KEY}"}, json.dumps(body or {}).encode())
    assert response.status_code == 200, response.text


async def finish(process: asyncio.subprocess.Process, log: list[str]) -> list[dict[str, Any]]:
    """Wait for the process to exit; every JSON log line it wrote."""
    assert process.stderr is not None
    await asyncio.wait_for(process.wait(), 10)
    log += (await process.stderr.read()).decode().splitlines(keepends=True)
    return [json.loads(line) for line in log]


async def test_relay_attach_serves_a_call_until_it_is_hung_up(tmp_path: Path) -> None:
    log: list[str] = []
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock:
        call_id = mock.create_call()
        session = mock.find_session(call_id)
        await rest(mock, call_id, "accept", {"type": "realtime", "tools": [WEATHER_TOOL]})
        async with relay_process("attach", "--call-id", call_id, "--tools", str(TOOLS), "--upstream", mock.url,
                                 "--dialect", "openai", "--record", str(tmp_path), "--reconnect-delay", "0.01",
                                 cwd=tmp_path, env=ENVIRONMENT) as process:
            assert process.stderr is not None
            start = await next_log_line(process.stderr, lambda r: r["msg"] == "session start", log)
            await mock.user_turn(session, "What's the weather in Paris?")
            answer = await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "found" in said(e))
            await rest(mock, call_id, "hangup")
            lines = await finish(process, log)
    assert process.returncode == 0
    assert (start["realtime_call_id"], start["mode"], start["tools"]) == (call_id, "sidecar", ["get_weather"])
    tool_call = next(line for line in lines if line["msg"] == "tool call")
    assert (tool_call["tool"], tool_call["outcome"], tool_call["realtime_call_id"]) == ("get_weather", "ok", call_id)
    assert outputs_received(mock) == [(0, tool_call["call_id"])]
    assert "cloudy in Paris" in said(answer.event)
    assert [line["msg"] for line in lines][-2:] == ["call ended", "session end"]
    assert (lines[-1]["by"], lines[-1]["code"], lines[-1]["tool_calls"]) == ("upstream", 1000, 1)
    assert session.connections[0].auth == "bearer"
    recording = next(tmp_path.glob("*.jsonl")).read_text()
    header = json.loads(recording.splitlines()[0])
    assert (header["mode"], header["call_id"], header["id_prefix"]) == ("sidecar", call_id, start["session_id"])
    assert PROVIDER_KEY not in "".join(log) + recording


async def test_relay_attach_detaches_on_sigterm_and_reports_failures(tmp_path: Path) -> None:
    log: list[str] = []
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock:
        call_id = mock.create_call()
        async with relay_process("attach", "--call-id", call_id, "--tools", str(TOOLS), "--upstream", mock.url,
                                 "--dialect", "openai", cwd=tmp_path, env=ENVIRONMENT) as process:
            assert process.stderr is not None
            await next_log_line(process.stderr, lambda r: r["msg"] == "session start", log)
            process.send_signal(signal.SIGTERM)
            lines = await finish(process, log)
        async with relay_process("attach", "--call-id", "rtc_unknown", "--tools", str(TOOLS), "--upstream", mock.url,
                                 "--dialect", "openai", cwd=tmp_path, env=ENVIRONMENT) as unknown:
            unknown_lines = await finish(unknown, [])
        async with relay_process("attach", "--call-id", call_id, "--tools", str(TOOLS), "--upstream", "http://x",
                                 cwd=tmp_path, env=ENVIRONMENT) as misconfigured:
            misconfigured_lines = await finish(misconfigured, [])
    assert process.returncode == 0 and not mock.find_session(call_id).ended
    assert (lines[-1]["msg"], lines[-1]["by"], lines[-1]["reason"]) == ("session end", "relay", "SIGTERM: detached")
    assert unknown.returncode == 2   # no such call: unusable input, not a finding
    assert unknown_lines[-1]["level"] == "error" and "no live call rtc_unknown" in unknown_lines[-1]["msg"]
    assert misconfigured.returncode == 2 and "ws:// or wss://" in misconfigured_lines[-1]["msg"]


async def test_relay_sidecar_accepts_a_signed_call_and_attaches(tmp_path: Path) -> None:
    instructions = tmp_path / "instructions.txt"
    instructions.write_text("Answer the weather line.")
    log: list[str] = []
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock:
        call_id = mock.create_call()
        session = mock.find_session(call_id)
        async with relay_process("sidecar", "--port", "0", "--tools", str(TOOLS), "--upstream", mock.url,
                                 "--dialect", "openai", "--rest-base", mock.rest_url,
                                 "--instructions", str(instructions), "--drain-seconds", "0",
                                 cwd=tmp_path, env=ENVIRONMENT) as process:
            assert process.stderr is not None
            listening = await next_log_line(process.stderr, lambda r: r["msg"].startswith("listening on"), log)
            body = json.dumps({"id": "evt_1", "object": "event", "created_at": int(time.time()),
                               "type": "realtime.call.incoming", "data": {"call_id": call_id, "sip_headers": []}})
            headers = signed_headers(WEBHOOK_SECRET, body.encode(), webhook_id="wh_cli", timestamp=int(time.time()))
            response = await http_request("POST", listening["url"], headers, body.encode())
            await next_log_line(process.stderr, lambda r: r["msg"] == "session start", log)
            await mock.user_turn(session, "What's the weather in Paris?")
            answer = await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "found" in said(e))
            process.send_signal(signal.SIGTERM)
            lines = await finish(process, log)
    assert response.status_code == 200 and process.returncode == 0
    assert session.accepts == [{"type": "realtime", "model": "gpt-realtime",
                                "instructions": "Answer the weather line.", "tools": [WEATHER_TOOL]}]
    assert "cloudy in Paris" in said(answer.event)
    ends = [line for line in lines if line["msg"] == "session end"]
    assert [(end["realtime_call_id"], end["reason"]) for end in ends] == [(call_id, "relay shutting down")]
    assert PROVIDER_KEY not in "".join(log) and WEBHOOK_SECRET not in "".join(log)


def test_attach_and_sidecar_are_relay_subcommands() -> None:
    attach = build_parser().parse_args(["attach", "--call-id", "rtc_1", "--tools", "t.py", "--declare-tools"])
    assert (attach.call_id, attach.tools, attach.declare_tools, attach.reconnect_attempts) == ("rtc_1", ["t.py"], True, 6)
    sidecar = build_parser().parse_args(["sidecar", "--tools", "t.py"])
    assert (sidecar.port, sidecar.rest_base, sidecar.model) == (8080, "https://api.openai.com/v1", None)   # the dialect's
