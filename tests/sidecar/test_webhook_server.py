"""`relay sidecar`'s webhook entry on loopback: signed `realtime.call.incoming` deliveries are
accepted through the mock's REST API and attached; bad, stale and repeated deliveries are not."""

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

from relay import __version__
from relay.edges.sidecar import SidecarServer, SidecarServerConfig, signed_headers
from relay.errors import ConfigError
from relay.inspector.live import LiveHub
from relay.mock import MockUpstream
from relay.session.loop import SessionEnd
from tests.support.clients import TIMEOUT, http_request, inspector_feed
from tests.support.frames import outputs_received, said
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.tools import WEATHER_SCRIPT, WEATHER_TOOL, get_weather

SECRET = "whsec_" + base64.b64encode(b"webhook signing key for tests").decode()
INSTRUCTIONS = "You answer the phone for a weather service."


@asynccontextmanager
async def sidecar_server(mock: MockUpstream, *, live: LiveHub | None = None, inspector_token: str | None = None,
                         **options: Any) -> AsyncIterator[SidecarServer]:
    settings: dict[str, Any] = {
        "tools": [get_weather], "upstream": mock.url, "dialect": "openai", "api_key": "sk-test",
        "port": 0, "rest_base": mock.rest_url, "webhook_secret": SECRET, "instructions": INSTRUCTIONS,
        "drain_seconds": 0.0,
    }
    settings.update(options)
    server = SidecarServer(SidecarServerConfig(**settings), live=live, inspector_token=inspector_token)
    async with anyio.create_task_group() as group:
        await group.start(server.run)
        yield server
        server.request_stop()


def incoming_call(call_id: str, event_id: str = "evt_1") -> bytes:
    return json.dumps({"id": event_id, "object": "event", "created_at": int(time.time()),
                       "type": "realtime.call.incoming",
                       "data": {"call_id": call_id, "sip_headers": [{"name": "From", "value": "sip:+1555@x"}]}}).encode()


async def deliver(server: SidecarServer, body: bytes, *, webhook_id: str = "wh_1", secret: str = SECRET,
                  timestamp: int | None = None) -> httpx.Response:
    headers = signed_headers(secret, body, webhook_id=webhook_id,
                             timestamp=int(time.time()) if timestamp is None else timestamp)
    return await http_request("POST", server.url, {**headers, "Content-Type": "application/json"}, body)


async def test_a_signed_incoming_call_is_accepted_attached_and_served() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, sidecar_server(mock) as server:
        call_id = mock.create_call()
        session = mock.find_session(call_id)
        response = await deliver(server, incoming_call(call_id))
        assert response.status_code == 200
        assert session.accepts == [{"type": "realtime", "model": "gpt-realtime", "instructions": INSTRUCTIONS,
                                    "tools": [WEATHER_TOOL]}], "accepted before the 200"
        sidecar = server.calls[call_id]
        with anyio.fail_after(TIMEOUT):
            await sidecar.attached.wait()
        await mock.user_turn(session, "What's the weather in Paris?")
        answer = await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "found" in said(e))
        await http_request("POST", f"{mock.rest_url}/realtime/calls/{call_id}/hangup")
        with anyio.fail_after(TIMEOUT):
            await sidecar.ended.wait()
        assert sidecar.engine is not None
        weather_call = sidecar.engine.calls[0]
    assert "sunny in Paris" in said(answer.event)
    assert [conn.query for conn in session.connections] == [{"call_id": call_id}]
    assert outputs_received(mock) == [(0, weather_call.call_id)]
    assert sidecar.end == SessionEnd("upstream", 1000, "call ended")
    assert call_id not in server.calls


async def test_relay_sidecar_inspector_shows_each_attached_call_behind_its_token() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, \
            sidecar_server(mock, live=LiveHub(), inspector_token=RELAY_TOKEN) as server:
        base = server.url.removesuffix("/webhooks/openai")
        redirect = await http_request("GET", f"{base}/inspector")   # Starlette's mount: to the page's own path
        assert redirect.status_code == 307 and redirect.headers["location"] == f"{base}/inspector/"
        page = await http_request("GET", f"{base}/inspector/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert (await http_request("GET", f"{base}/inspector/sessions")).status_code == 401
        listed = await http_request("GET", f"{base}/inspector/sessions", {"Authorization": f"Bearer {RELAY_TOKEN}"})
        assert listed.status_code == 200 and listed.json()["live"] == []
        call_id = mock.create_call()
        session = mock.find_session(call_id)
        assert (await deliver(server, incoming_call(call_id))).status_code == 200
        sidecar = server.calls[call_id]
        async with inspector_feed(base.replace("http", "ws", 1)) as feed:
            await feed.until(lambda f: [s["id"] for s in f.sessions["live"]] == [sidecar.id])
            [shown] = feed.sessions["live"]
            assert (shown["mode"], shown["call_id"]) == ("sidecar", call_id)
            await feed.watch(sidecar.id)
            await mock.user_turn(session, "What's the weather in Paris?")
            await feed.until(lambda f: [c["output"] for c in f.calls().values()] == ["sunny in Paris"])
        await http_request("POST", f"{mock.rest_url}/realtime/calls/{call_id}/hangup")
        with anyio.fail_after(TIMEOUT):
            await sidecar.ended.wait()


@pytest.mark.parametrize("forgery", ["wrong secret", "stale", "from the future", "tampered", "unsigned"])
async def test_a_delivery_that_does_not_verify_gets_400_and_nothing_happens(forgery: str) -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, sidecar_server(mock) as server:
        call_id = mock.create_call()
        body = incoming_call(call_id)
        now = int(time.time())
        if forgery == "wrong secret":
            response = await deliver(server, body, secret="whsec_" + base64.b64encode(b"guess").decode())
        elif forgery == "stale":
            response = await deliver(server, body, timestamp=now - 301)
        elif forgery == "from the future":   # 302: `now` is rounded down, the server's clock is not
            response = await deliver(server, body, timestamp=now + 302)
        elif forgery == "tampered":
            headers = signed_headers(SECRET, body, webhook_id="wh_1", timestamp=now)
            response = await http_request("POST", server.url, headers, incoming_call("rtc_other"))
        else:
            response = await http_request("POST", server.url, {"Content-Type": "application/json"}, body)
        # the same delivery, correctly signed, still gets through: a refused id is not remembered
        retried = await deliver(server, body)
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_signature"
    assert retried.status_code == 200
    assert len(mock.find_session(call_id).accepts) == 1


async def test_a_repeated_delivery_is_attached_once() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, sidecar_server(mock) as server:
        call_id = mock.create_call()
        body = incoming_call(call_id)
        first = await deliver(server, body, webhook_id="wh_same")
        again = await deliver(server, body, webhook_id="wh_same")
        sidecar = server.calls[call_id]
        with anyio.fail_after(TIMEOUT):
            await sidecar.attached.wait()
        calls = dict(server.calls)
    session = mock.find_session(call_id)
    assert (first.status_code, again.status_code) == (200, 200)
    assert len(session.accepts) == 1 and list(calls) == [call_id]
    assert len(session.connections) == 1


async def test_a_failed_accept_answers_502_and_a_retry_tries_again() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, sidecar_server(mock) as server:
        first = await deliver(server, incoming_call("rtc_gone"), webhook_id="wh_gone")
        again = await deliver(server, incoming_call("rtc_gone"), webhook_id="wh_gone")
        calls = dict(server.calls)
    for response in (first, again):
        assert response.status_code == 502
        assert "HTTP 404" in response.json()["error"]["message"] and "rtc_gone" in response.json()["error"]["message"]
    assert calls == {} and [request.event for request in mock.received] == []


async def test_other_events_paths_and_methods() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock, sidecar_server(mock) as server:
        other = json.dumps({"id": "evt_2", "object": "event", "created_at": 1, "type": "batch.completed",
                            "data": {"id": "batch_1"}}).encode()
        ignored = await deliver(server, other, webhook_id="wh_other")
        no_call_id = await deliver(server, json.dumps({"type": "realtime.call.incoming", "data": {}}).encode(),
                                   webhook_id="wh_bad")
        not_json = await deliver(server, b"[1, 2", webhook_id="wh_not_json")
        base = server.url.removesuffix("/webhooks/openai")
        health = await http_request("GET", f"{base}/healthz")
        elsewhere = await http_request("POST", f"{base}/webhooks/other")
        wrong_method = await http_request("GET", server.url)
        upstream = f"127.0.0.1:{mock.port}"
    assert ignored.status_code == 200 and server.calls == {}
    assert (no_call_id.status_code, no_call_id.json()["error"]["code"]) == (400, "invalid_event")
    assert (not_json.status_code, not_json.json()["error"]["code"]) == (400, "invalid_json")
    assert health.status_code == 200 and health.json() | {"pid": 0} == {
        "status": "ok", "version": __version__, "calls": 0, "upstream": upstream,
        "dialect": "openai", "pid": 0}
    assert (elsewhere.status_code, wrong_method.status_code) == (404, 405)
    assert mock.sessions == []


async def test_stopping_detaches_attached_calls() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        call_id = mock.create_call()
        async with sidecar_server(mock) as server:
            assert (await deliver(server, incoming_call(call_id))).status_code == 200
            sidecar = server.calls[call_id]
            with anyio.fail_after(TIMEOUT):
                await sidecar.attached.wait()
        session = mock.find_session(call_id)
    assert sidecar.end == SessionEnd("relay", 1000, "relay shutting down")
    assert session.connections[0].closed and not session.ended, "the call goes on without the relay"


def test_the_server_needs_a_webhook_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_WEBHOOK_SECRET", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_WEBHOOK_SECRET"):
        SidecarServer(SidecarServerConfig(tools=[get_weather], dialect="openai", api_key=PROVIDER_KEY))
    monkeypatch.setenv("OPENAI_WEBHOOK_SECRET", "whsec_***")
    with pytest.raises(ConfigError, match="not base64"):
        SidecarServer(SidecarServerConfig(tools=[get_weather], dialect="openai", api_key=PROVIDER_KEY))
    monkeypatch.setenv("OPENAI_WEBHOOK_SECRET", SECRET)
    with pytest.raises(ConfigError, match="rest-base"):
        SidecarServer(SidecarServerConfig(tools=[get_weather], dialect="openai", rest_base="ftp://x",
                                          api_key=PROVIDER_KEY))
