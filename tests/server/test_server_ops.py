"""Operating `relay serve`: health and metrics endpoints, recordings, secrets kept out of
everything, access tokens, and the process: several workers on one port, `relay.serve` (the drain
on SIGTERM: test_drain.py)."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import time
from pathlib import Path

import pytest

from relay import __version__
from relay.mock import MockUpstream
from relay.recording.reader import read_recording
from relay.edges.upstream import AccessToken
from tests.support.clients import TIMEOUT, http_get, parse_exposition, realtime_client
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.processes import next_log_line, python_process, relay_process
from tests.support.relays import captured_logs, relay_for, weather_turn
from tests.support.tools import WEATHER_SCRIPT, get_weather



async def test_healthz_reports_open_sessions_and_version(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock) as server:
        status, headers, body = await http_get(server.port, "/healthz")
        assert status == 200 and headers["content-type"] == "application/json"
        health = json.loads(body)
        assert health | {"pid": 0, "workers": {}} == {"status": "ok", "version": __version__, "sessions": 0,
                                                       "upstream": f"127.0.0.1:{weather_mock.port}",
                                                       "dialect": "openai", "pid": 0, "workers": {}}
        assert health["workers"] == {str(health["pid"]): 0}
        async with realtime_client(server) as client:
            await client.wait_type("session.created")
            _, _, body = await http_get(server.port, "/healthz")
            assert json.loads(body)["sessions"] == 1


async def test_metrics_count_sessions_frames_tools_and_errors(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, tools=[get_weather]) as server:
        async with realtime_client(server) as client:
            await weather_turn(client, says="found")
            await client.send("not json")
            await client.wait_type("error")
            session = next(iter(server.sessions.values()))
        await session.wait_closed()
        status, headers, body = await http_get(server.port, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = parse_exposition(body.decode())
    assert samples['relay_sessions_total'] == 1
    assert samples['relay_sessions_open'] == 0
    assert samples['relay_sessions_ended_total{by="client"}'] == 1
    assert samples['relay_tool_calls_total{outcome="ok",tool="get_weather"}'] == 1
    assert samples['relay_tool_call_seconds_count{tool="get_weather"}'] == 1
    assert samples['relay_tool_call_seconds_bucket{le="+Inf",tool="get_weather"}'] == 1
    assert samples['relay_follow_ups_total'] == 1
    assert samples['relay_errors_total{code="invalid_json",source="relay"}'] == 1
    assert samples['relay_frames_total{direction="client>relay"}'] == 3
    assert samples['relay_frames_total{direction="relay>upstream"}'] == 5   # 2 forwarded + tools, output, follow-up
    assert samples['relay_frames_total{direction="upstream>relay"}'] >= samples['relay_frames_total{direction="relay>client"}']
    assert samples['relay_frame_bytes_total{direction="client>relay"}'] > 0


async def test_the_provider_key_never_reaches_a_client_a_log_or_a_recording(
        weather_mock: MockUpstream, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    with captured_logs() as logs:
        async with relay_for(weather_mock, api_key=None, tools=[get_weather], record_dir=tmp_path) as server, \
                realtime_client(server, path="/v1/realtime?model=gpt-realtime&api-key=client-own-key") as client:
            await weather_turn(client, says="found")
            # a client asking for the key does not get it either
            await client.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "$OPENAI_API_KEY"}]}})
            await client.wait_type("conversation.item.added")
    upstream_connection = weather_mock.sessions[0].connections[0]
    assert upstream_connection.auth == "bearer"   # the key was used upstream, the client's were not
    assert upstream_connection.query == {"model": "gpt-realtime"}
    assert RELAY_TOKEN not in json.dumps(upstream_connection.headers)
    [recording] = tmp_path.glob("*.jsonl")
    texts = {"client frames": "".join(client.frames), "logs": logs.getvalue(), "recording": recording.read_text()}
    assert "Authorization" in texts["logs"]   # handshake headers were logged at DEBUG, redacted
    for where, text in texts.items():
        assert PROVIDER_KEY not in text, f"the provider key leaked into the {where}"
        assert RELAY_TOKEN not in text, f"the relay token leaked into the {where}"


async def test_each_session_writes_one_complete_recording(weather_mock: MockUpstream, tmp_path: Path) -> None:
    async with relay_for(weather_mock, tools=[get_weather], record_dir=tmp_path, record_audio="drop") as server:
        for _ in range(2):
            async with realtime_client(server) as client:
                await weather_turn(client, says="found")
                session = next(iter(server.sessions.values()))
            await session.wait_closed()
    recordings = sorted(tmp_path.glob("*.jsonl"))
    assert len(recordings) == 2
    for path in recordings:
        recording = read_recording(path)
        assert recording.header["tools"] == ["get_weather"]
        assert recording.header["record_audio"] == "drop"
        assert recording.end is not None and not recording.end["failed"]
        directions = {frame.direction for frame in recording.frames}
        assert directions == {"client>relay", "relay>upstream", "upstream>relay", "relay>client"}


async def test_a_recording_that_cannot_be_written_does_not_harm_the_session(
        weather_mock: MockUpstream, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    async with relay_for(weather_mock, tools=[get_weather], record_dir=not_a_directory) as server, \
            realtime_client(server) as client:
        done = await weather_turn(client, says="found")
    assert "sunny" in json.dumps(done)
    assert any("recording" in r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR)


async def test_an_access_token_provider_is_used_and_reused_while_valid() -> None:
    fetched: list[str] = []

    async def entra_token() -> AccessToken:
        fetched.append("entra-token")
        return AccessToken("entra-token", expires_on=time.time() + 3600)

    async with MockUpstream(script=WEATHER_SCRIPT, api_key="entra-token") as mock, \
            relay_for(mock, api_key=None, token_provider=entra_token) as server:
        for _ in range(2):
            async with realtime_client(server) as client:
                await client.wait_type("session.created")
    assert fetched == ["entra-token"]
    assert [session.auth for session in mock.sessions] == ["bearer", "bearer"]


# ---- the process -------------------------------------------------------------------------

async def test_workers_share_one_port(weather_mock: MockUpstream, tmp_path: Path) -> None:
    log: list[str] = []
    async with relay_process("serve", "--port", "0", "--upstream", weather_mock.url, "--dialect", "openai",
                             "--workers", "2", "--drain-seconds", "0",
                             cwd=tmp_path, env={"OPENAI_API_KEY": PROVIDER_KEY}) as relay:
        assert relay.stderr is not None
        first = await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
        second = await next_log_line(relay.stderr, lambda r: r["msg"].startswith("listening on"), log)
        assert first["url"] == second["url"] and first["pid"] != second["pid"]
        base = first["url"].removesuffix("/v1/realtime")
        async with realtime_client(base, token=None) as one, realtime_client(base, token=None) as other:
            await one.wait_type("session.created")
            await other.wait_type("session.created")
        relay.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(relay.wait(), TIMEOUT) == 0


async def test_relay_serve_runs_the_server_until_sigterm(weather_mock: MockUpstream, tmp_path: Path) -> None:
    code = f"import relay; raise SystemExit(relay.serve(upstream={weather_mock.url!r}, dialect='openai', port=0))"
    async with python_process("-c", code, cwd=tmp_path) as process:
        assert process.stderr is not None
        async with asyncio.timeout(TIMEOUT):
            while b"listening on ws://127.0.0.1:" not in await process.stderr.readline():
                pass
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), TIMEOUT) == 0
