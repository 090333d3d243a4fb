"""`relay sidecar` for GPT-Live against the GPT-Live mock: the signed `live.transport.incoming`
webhook, the accept with the relay's tools in the session's delegation config, the sideband at
`/v1/live/sessions/{id}/attach`, and the application's reject, refer and hangup.

The call's other party is the mock's own scripted SIP caller (`mock.live_calls`: its turns and its
audio, which moves the session's timeline): the official SDK's `client.live.connect()` cannot be
a SIP caller, since it opens a new session with `session.start`, while a SIP call's session is
started by the accept. The SDK is used where it can be: its `live.sessions` REST client drives
the mock's accept/reject/refer/hangup, its webhook verifier checks the mock's deliveries, and its
types validate every event the mock writes, the webhook and the accept the relay sends."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from openai import AsyncOpenAI
from openai.types.live.session_accept_params import SessionAcceptParams
from openai.types.webhooks import LiveCallIncomingWebhookEvent, LiveTransportIncomingWebhookEvent
from pydantic import TypeAdapter

from relay.cli import main
from relay.dialects.webhooks import signed_headers
from relay.edges.sidecar import CallRequestFailed, SidecarServer, SidecarServerConfig
from relay.errors import ConfigError
from relay.mock import MockUpstream
from relay.session.loop import SessionEnd
from tests.live.test_live_mock import AUDIO, SCRIPT, SERVER_EVENT, assistant, get_time, get_weather
from tests.support.clients import TIMEOUT
from tests.support.paths import REPO
from tests.support.tools import Gate

SECRET = "whsec_" + base64.b64encode(b"live webhook key for tests").decode()
INSTRUCTIONS = "You answer the phone for a weather service."
ACCEPT: TypeAdapter[Any] = TypeAdapter(SessionAcceptParams)


@asynccontextmanager
async def live_sidecar(mock: MockUpstream, tools: list[Any], **options: Any) -> AsyncIterator[SidecarServer]:
    settings: dict[str, Any] = {
        "tools": tools, "upstream": mock.url, "dialect": "live", "api_key": "sk-test", "port": 0,
        "rest_base": mock.rest_url, "webhook_secret": SECRET, "instructions": INSTRUCTIONS, "drain_seconds": 0.0,
        "responses_model": "gpt-5.4"} | options
    server = SidecarServer(SidecarServerConfig(**settings))
    async with anyio.create_task_group() as group:
        await group.start(server.run)
        yield server
        server.request_stop()


def sdk(mock: MockUpstream) -> AsyncOpenAI:
    return AsyncOpenAI(api_key="sk-test", base_url=mock.rest_url, max_retries=0)


async def heard(mock: MockUpstream, session: Any, says: str) -> None:
    """Let the caller's audio run until the model said `says` (its transcript on the timeline)."""
    def spoken() -> str:   # each piece once, whichever sidebands it reached
        return "".join({r.event["event_id"]: r.event["delta"] for r in mock.sent if r.session_id == session.id
                        and r.event["type"] == "session.output_transcript.delta"}.values())

    with anyio.fail_after(TIMEOUT):
        while says not in spoken():
            await mock.live_calls.caller_audio(session, 200)


def validated(mock: MockUpstream) -> list[dict[str, Any]]:
    """Every event the mock sent, each checked against `openai.types.live`."""
    for record in mock.sent:
        SERVER_EVENT.validate_python(record.event)
    return [record.event for record in mock.sent]


async def test_a_live_call_is_accepted_with_the_tools_attached_and_each_call_answered_once() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, \
            live_sidecar(mock, [get_weather, get_time]) as server:
        session = mock.live_calls.create()
        response = await mock.live_calls.announce(session, server.url, SECRET)
        assert response.status_code == 200
        call = mock.live_calls.calls[session.id]
        ACCEPT.validate_python({"session": call.accepted})
        assert call.accepted == {"type": "live", "model": "gpt-live-1", "instructions": INSTRUCTIONS, "delegation": {
            "type": "responses", "responses": {"model": "gpt-5.4", "tools": [
                {"type": "function", "name": "get_weather", "description": "Current weather in a city.",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}},
                {"type": "function", "name": "get_time", "description": "The local time in a city.",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                "required": ["city"]}}]}}}, "accepted before the 200"
        sidecar = server.calls[session.id]
        with anyio.fail_after(TIMEOUT):
            await sidecar.attached.wait()
        await mock.user_turn(session, "What's the weather in Paris?")
        await mock.wait_for(lambda e: e["type"] == "response.create", TIMEOUT)
        await heard(mock, session, "Here it is")
        await sdk(mock).live.sessions.hangup(session.id)
        with anyio.fail_after(TIMEOUT):
            await sidecar.ended.wait()
    assert [conn.path for conn in session.connections] == [f"/v1/live/sessions/{session.id}/attach"]
    received = [record.event for record in mock.received]
    assert "session.start" not in [e["type"] for e in received], "an accepted call is never started again"
    outputs = [e["item"] for e in received if e["type"] == "response.item.create"]
    made = {call_id: backend.name for call_id, backend in session.backend.calls.items()}
    assert sorted((made[item["call_id"]], item["output"]) for item in outputs) == [
        ("get_time", "noon in Paris"), ("get_weather", "sunny in Paris")], "each call once, by its call_id"
    kinds = [e["type"] for e in received]
    assert kinds.count("response.create") == 1 and kinds[-1] == "response.create", "one create, after the batch"
    assert not any(e["type"] == "error" for e in validated(mock)), "the mock refused something"
    assert sidecar.end == SessionEnd("upstream", 1000, "call ended"), "session.closed, then the socket closed"
    assert len(mock.handshakes) == 1, "a call that ended is not re-attached"
    assert session.id not in server.calls


async def test_a_live_call_in_client_delegation_is_answered_by_the_delegate_once() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, \
            live_sidecar(mock, [get_weather, assistant], responses_model=None) as server:
        session = mock.live_calls.create()
        assert (await mock.live_calls.announce(session, server.url, SECRET, deprecated=True)).status_code == 200
        call = mock.live_calls.calls[session.id]
        ACCEPT.validate_python({"session": call.accepted})
        assert call.accepted == {"type": "live", "model": "gpt-live-1", "instructions": INSTRUCTIONS,
                                 "delegation": {"type": "client"}}
        with anyio.fail_after(TIMEOUT):
            await server.calls[session.id].attached.wait()
        await mock.user_turn(session, "What's the weather in Paris?")
        await mock.wait_for(lambda e: e["type"] == "session.commentary.append", TIMEOUT)
        await heard(mock, session, "sunny in Paris")
        await sdk(mock).live.sessions.hangup(session.id)
    appends = [r.event for r in mock.received if r.event["type"].startswith("session.") and "delegation_id" in r.event]
    assert [(e["type"], e["content"]) for e in appends] == [
        ("session.thinking.append", "forecast for Paris"), ("session.commentary.append", "It is sunny in Paris.")]
    assert {e["delegation_id"] for e in appends} == set(session.delegations), "the one delegation, answered once"
    assert not any(e["type"] == "error" for e in validated(mock)), "the mock refused something"


async def test_the_mocks_deliveries_verify_with_the_sdk_and_parse_as_its_webhook_types() -> None:
    client = AsyncOpenAI(api_key="sk-test", webhook_secret=SECRET)
    async with MockUpstream(dialect="live") as mock:
        session = mock.live_calls.create()
        for deprecated, kind in ((False, LiveTransportIncomingWebhookEvent), (True, LiveCallIncomingWebhookEvent)):
            headers, body = mock.live_calls.incoming(session, SECRET, deprecated=deprecated)
            event = client.webhooks.unwrap(body, headers)
            assert isinstance(event, kind) and event.data.session_id == session.id
            assert [h.name for h in event.data.sip_headers] == ["From", "To"]


async def test_other_deliveries_to_a_live_sidecar_are_refused_or_ignored_and_nothing_is_accepted() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, live_sidecar(mock, [get_weather]) as server:
        session = mock.live_calls.create()
        headers, body = mock.live_calls.incoming(session, "whsec_" + base64.b64encode(b"another").decode())
        async with httpx.AsyncClient() as http:
            forged = await http.post(server.url, headers=headers, content=body)
            assert forged.status_code == 400 and "signature" in forged.json()["error"]["message"]
            realtime = json.dumps({"id": "evt_rt", "object": "event", "created_at": int(time.time()),
                                   "type": "realtime.call.incoming", "data": {"call_id": "rtc_1", "sip_headers": []}})
            other = await http.post(server.url, content=realtime.encode(), headers=signed_headers(
                SECRET, realtime.encode(), webhook_id="wh_rt", timestamp=int(time.time())))
            assert other.status_code == 200, "another family's announcement: not this sidecar's to accept"
            empty = json.dumps({"id": "evt_x", "object": "event", "created_at": int(time.time()),
                                "type": "live.transport.incoming", "data": {"type": "sip", "sip_headers": []}})
            bad = await http.post(server.url, content=empty.encode(), headers=signed_headers(
                SECRET, empty.encode(), webhook_id="wh_x", timestamp=int(time.time())))
            assert bad.status_code == 400 and "data.session_id" in bad.json()["error"]["message"]
        assert server.calls == {} and mock.live_calls.calls[session.id].accepted is None
        first = await mock.live_calls.announce(session, server.url, SECRET, webhook_id="wh_same")
        again = await mock.live_calls.announce(session, server.url, SECRET, webhook_id="wh_same")
        assert (first.status_code, again.status_code) == (200, 200)
        assert len(server.calls) == 1, "a repeated delivery is accepted once"


async def test_the_application_rejects_refers_and_hangs_up_live_calls_through_the_calls_api() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, live_sidecar(mock, [get_weather]) as server:
        api = server.calls_api
        declined = mock.live_calls.create()
        await api.reject(declined.id)
        assert mock.live_calls.calls[declined.id].rejected == 603 and declined.ended
        busy = mock.live_calls.create()
        await sdk(mock).live.sessions.reject(busy.id, status_code=486)   # the SDK's client, the same endpoint
        assert mock.live_calls.calls[busy.id].rejected == 486
        with pytest.raises(CallRequestFailed, match="HTTP 404"):
            await api.reject(busy.id)
        transferred = mock.live_calls.create()
        assert (await mock.live_calls.announce(transferred, server.url, SECRET)).status_code == 200
        with pytest.raises(CallRequestFailed, match="HTTP 409 The call was already accepted"):
            await api.reject(transferred.id, 486)
        await api.refer(transferred.id, "sip:agent@example.com")
        assert mock.live_calls.calls[transferred.id].referred == ["sip:agent@example.com"]
        sidecar = server.calls[transferred.id]
        assert not transferred.ended, "a refer does not end the session: the sideband stays"
        await api.hangup(transferred.id)
        with anyio.fail_after(TIMEOUT):
            await sidecar.ended.wait()
        closed = [r.event for r in mock.sent if r.event["type"] == "session.closed"]
        assert [e["reason"] for e in closed] == ["close_requested"]


async def test_the_mock_refuses_an_accept_the_service_would_refuse() -> None:
    async with MockUpstream(dialect="live") as mock:
        client = sdk(mock)
        session = mock.live_calls.create()
        for bad, param in (({"type": "realtime", "model": "gpt-live-1"}, "session.type"),
                           ({"type": "live"}, "session.model"),
                           ({"type": "live", "model": "gpt-live-1", "tools": []}, "session.tools"),
                           ({"type": "live", "model": "gpt-live-1",
                             "audio": {"format": {"type": "audio/pcm", "rate": 24000}}}, "session.audio.format")):
            async with httpx.AsyncClient() as http:
                response = await http.post(f"{mock.rest_url}/live/sessions/{session.id}/accept", json={"session": bad})
            assert response.status_code == 400 and response.json()["error"]["param"] == param, bad
        await client.live.sessions.accept(session.id, session={"type": "live", "model": "gpt-live-1"})
        assert session.config is not None and session.config["delegation"] == {"type": "client"}


def test_a_live_sidecar_needs_a_backend_model_for_its_tools_and_knows_its_delegations() -> None:
    base = {"tools": [get_weather], "upstream": "wss://api.openai.com/v1/live/sessions", "dialect": "live",
            "api_key": "sk-test", "webhook_secret": SECRET}
    with pytest.raises(ConfigError, match="--responses-model"):
        SidecarServer(SidecarServerConfig(**base))
    with pytest.raises(ConfigError, match="--delegation must be one of"):
        SidecarServer(SidecarServerConfig(**base, delegation="decisions", responses_model="gpt-5.4"))
    with pytest.raises(ConfigError, match="GPT-Live's"):
        SidecarServer(SidecarServerConfig(**{**base, "dialect": "openai",
                                             "upstream": "wss://api.openai.com/v1/realtime"}, responses_model="x"))
    client = SidecarServer(SidecarServerConfig(**base, delegation="client"))
    assert client.session_config() == {"type": "live", "model": "gpt-live-1", "delegation": {"type": "client"}}


def test_relay_sidecar_for_gpt_live_without_a_backend_model_says_so_in_one_line_and_exits_2(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], restore_logging: None) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_WEBHOOK_SECRET", SECRET)
    tools = str(REPO / "tests" / "fixtures" / "weather_tools.py")
    assert main(["sidecar", "--port", "0", "--tools", tools, "--upstream", "wss://api.openai.com/v1/live/sessions"]) == 2
    err = capsys.readouterr().err
    assert "set --responses-model" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) == 1


async def test_a_sidecar_call_whose_sideband_drops_mid_tool_re_attaches_and_answers_once() -> None:
    gate = Gate()
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, \
            live_sidecar(mock, [gate.tool, get_time], reconnect_delay=0.0) as server:
        session = mock.live_calls.create()
        assert (await mock.live_calls.announce(session, server.url, SECRET)).status_code == 200
        sidecar = server.calls[session.id]
        with anyio.fail_after(TIMEOUT):
            await sidecar.attached.wait()
        await mock.user_turn(session, "What's the weather in Paris?")
        with anyio.fail_after(TIMEOUT):
            await gate.entered.wait()
        await mock.live_calls.drop(session)
        await mock.wait_for_sent(lambda e: e["type"] == "session.started", TIMEOUT, start=1)
        gate.opened.set()
        await mock.wait_for(lambda e: e["type"] == "response.create", TIMEOUT)
        await heard(mock, session, "Here it is")
        await sdk(mock).live.sessions.hangup(session.id)
        with anyio.fail_after(TIMEOUT):
            await sidecar.ended.wait()
    assert len(session.connections) == 2 and sidecar.reconnects >= 1
    outputs = [r.event["item"]["call_id"] for r in mock.received if r.event["type"] == "response.item.create"]
    assert sorted(outputs) == sorted(session.backend.calls), "each call answered once"
    assert [r.connection for r in mock.received if r.event["type"] == "response.create"] == [1]
    assert not any(e["type"] == "error" for e in validated(mock)), "the mock refused something"


async def test_a_running_session_announced_as_connected_is_attached_without_an_accept_and_served() -> None:
    """`live.transport.connected` (a direct WebRTC session): the SDK's `client.live.connect()` is
    the session's other party here, with none of the relay's tools; the relay attaches, adds them
    with a `session.update`, and answers the backend's calls."""
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, \
            live_sidecar(mock, [get_weather, get_time]) as server:
        client = AsyncOpenAI(api_key="sk-test", websocket_base_url=mock.base_url + "/v1")
        async with client.live.connect() as connection:
            await connection.send({"type": "session.start", "session": {"model": "gpt-live-1", "delegation": {
                "type": "responses", "responses": {"model": "gpt-5.4", "tools": []}}}})
            with anyio.fail_after(TIMEOUT):
                while SERVER_EVENT.validate_json(await connection.recv_bytes()).type != "session.started":
                    pass
            session = mock.sessions[-1]
            headers, body = mock.live_calls.connected(session, SECRET)
            event = AsyncOpenAI(api_key="sk-test", webhook_secret=SECRET).webhooks.unwrap(body, headers)
            assert event.type == "live.transport.connected" and event.data.session_id == session.id
            assert (await mock.live_calls.announce(session, server.url, SECRET, connected=True)).status_code == 200
            await mock.wait_for(lambda e: e["type"] == "session.update", TIMEOUT)
            await connection.send({"type": "session.input_audio.append", "audio": AUDIO})
            await mock.user_turn(session, "What's the weather in Paris?")
            await mock.wait_for(lambda e: e["type"] == "response.create", TIMEOUT)
            heard = ""
            with anyio.fail_after(TIMEOUT):
                while "Here it is" not in heard:
                    await connection.send({"type": "session.input_audio.append", "audio": AUDIO})
                    event = SERVER_EVENT.validate_json(await connection.recv_bytes())
                    if event.type == "session.output_transcript.delta":
                        heard += event.delta
            await connection.send({"type": "session.close"})
            with anyio.fail_after(TIMEOUT):
                while SERVER_EVENT.validate_json(await connection.recv_bytes()).type != "session.closed":
                    pass
    assert session.id not in mock.live_calls.calls, "never accepted: it was running"
    sideband = [record.event for record in mock.received if record.connection == 1]
    outputs = [e["item"]["call_id"] for e in sideband if e["type"] == "response.item.create"]
    assert sorted(outputs) == sorted(session.backend.calls), "each call answered once, on the sideband"
    assert [e["type"] for e in sideband].count("response.create") == 1
    assert not any(e["type"] == "error" for e in validated(mock)), "the mock refused something"


async def test_a_live_call_the_provider_will_not_accept_gets_502_and_a_later_delivery_may_try_again() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live") as mock, live_sidecar(mock, [get_weather]) as server:
        session = mock.live_calls.create()
        await sdk(mock).live.sessions.reject(session.id, status_code=486)   # the caller hung up first
        refused = await mock.live_calls.announce(session, server.url, SECRET, webhook_id="wh_once")
        assert refused.status_code == 502 and refused.json()["error"]["code"] == "accept_failed"
        assert "HTTP 404" in refused.json()["error"]["message"] and "sk-test" not in refused.text
        assert server.calls == {}
        again = await mock.live_calls.announce(session, server.url, SECRET, webhook_id="wh_once")
        assert again.status_code == 502, "a failed accept is not remembered as delivered"
