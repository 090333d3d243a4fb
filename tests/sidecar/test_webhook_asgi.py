"""The webhook endpoint as an ASGI app: mounted in a user's FastAPI app served by uvicorn (a signed
`realtime.call.incoming` is accepted through the mock's REST API and a sidecar attaches), without
a socket through httpx's ASGI transport, with extra routes beside it; and the provider's REST
calls (accept, reject, hang up) through httpx, with their failures said in one safe line."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from relay.edges.sidecar import (
    AcceptFailed,
    CallRequestFailed,
    CallsAPI,
    SidecarServer,
    SidecarServerConfig,
    signed_headers,
)
from relay.mock import MockUpstream
from relay.session.loop import SessionEnd
from tests.support.clients import TIMEOUT, http_request
from tests.support.frames import outputs_received, said
from tests.support.keys import PROVIDER_KEY
from tests.support.paths import REPO
from tests.support.snippets import check_page_includes_its_examples
from tests.support.tools import WEATHER_SCRIPT, WEATHER_TOOL, get_weather

SECRET = "whsec_" + base64.b64encode(b"webhook key of the FastAPI test").decode()


def relay_for(mock: MockUpstream, routes: list[Route] | None = None, **options: Any) -> SidecarServer:
    settings: dict[str, Any] = {
        "tools": [get_weather], "upstream": mock.url, "dialect": "openai", "api_key": PROVIDER_KEY,
        "rest_base": mock.rest_url, "webhook_secret": SECRET, "drain_seconds": 0.0, "port": 0,
    }
    return SidecarServer(SidecarServerConfig(**(settings | options)), routes=routes or [])


def incoming_call(call_id: str, webhook_id: str = "wh_1") -> tuple[dict[str, str], bytes]:
    body = json.dumps({"id": "evt_1", "object": "event", "created_at": int(time.time()),
                       "type": "realtime.call.incoming", "data": {"call_id": call_id, "sip_headers": []}}).encode()
    headers = signed_headers(SECRET, body, webhook_id=webhook_id, timestamp=int(time.time()))
    return {**headers, "Content-Type": "application/json"}, body


@asynccontextmanager
async def served_by_uvicorn(app: Any) -> AsyncIterator[str]:
    """`app` served as a user serves theirs: uvicorn with its lifespan, on 127.0.0.1 (a socket
    bound here on port 0, so connections queue until uvicorn accepts them); stopped on exit."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", log_level="warning", ws="none"))
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, TIMEOUT)


async def test_mounted_in_a_fastapi_app_a_signed_call_is_accepted_and_attached() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock:
        call_id = mock.create_call()
        session = mock.find_session(call_id)
        webhooks = relay_for(mock, instructions="Answer the weather line.")
        app = FastAPI(lifespan=webhooks.lifespan)
        app.mount("/relay", webhooks.app)

        @app.get("/")
        def index() -> dict[str, str]:
            return {"app": "the user's own"}

        async with served_by_uvicorn(app) as base, httpx.AsyncClient(base_url=base) as client:
            headers, body = incoming_call(call_id)
            response = await client.post("/relay/webhooks/openai", headers=headers, content=body)
            assert response.status_code == 200, response.text
            assert session.accepts == [{"type": "realtime", "model": "gpt-realtime",
                                        "instructions": "Answer the weather line.", "tools": [WEATHER_TOOL]}]
            sidecar = webhooks.calls[call_id]
            with anyio.fail_after(TIMEOUT):
                await sidecar.attached.wait()
            await mock.user_turn(session, "What's the weather in Paris?")
            answer = await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "found" in said(e))
            health = (await client.get("/relay/healthz")).json()
            own = (await client.get("/")).json()
            refused = await client.post("/relay/webhooks/openai", headers={**headers, "webhook-id": "wh_2"},
                                        content=body.replace(b"evt_1", b"evt_2"))
        # uvicorn stopped: the app's lifespan ended, and with it the relay's calls (detached)
    assert "sunny in Paris" in said(answer.event)
    assert outputs_received(mock) == [(0, sidecar.engine.calls[0].call_id)]
    assert (health["status"], health["calls"]) == ("ok", 1) and own == {"app": "the user's own"}
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_signature"
    assert sidecar.end == SessionEnd("relay", 1000, "relay shutting down")
    assert webhooks.calls == {} and not session.ended, "the call goes on without the relay"
    assert session.connections[0].auth == "bearer"


async def test_without_a_socket_through_the_asgi_transport_and_503_outside_running() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        call_id = mock.create_call()
        webhooks = relay_for(mock)
        transport = httpx.ASGITransport(app=webhooks.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
            headers, body = incoming_call(call_id)
            early = await client.post("/webhooks/openai", headers=headers, content=body)
            early_health = (await client.get("/healthz")).json()
            async with webhooks.running():
                accepted = await client.post("/webhooks/openai", headers=headers, content=body)
                with anyio.fail_after(TIMEOUT):
                    await webhooks.calls[call_id].attached.wait()
    assert (early.status_code, early.json()["error"]["code"]) == (503, "unavailable")
    assert early_health["status"] == "draining", "not taking calls yet"
    assert accepted.status_code == 200 and len(mock.find_session(call_id).accepts) == 1


async def test_extra_routes_are_served_beside_the_endpoint() -> None:
    async def page(request: Request) -> PlainTextResponse:
        return PlainTextResponse(f"{len(server.calls)} calls")

    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        server = relay_for(mock, routes=[Route("/inspect", page)])
        async with anyio.create_task_group() as group:
            await group.start(server.run)
            base = server.url.removesuffix("/webhooks/openai")
            shown = await http_request("GET", f"{base}/inspect")
            missing = await http_request("GET", f"{base}/nowhere")
            server.request_stop()
    assert (shown.status_code, shown.text) == (200, "0 calls")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_an_oversized_delivery_is_refused_before_it_is_read_whole() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT) as mock:
        webhooks = relay_for(mock)
        transport = httpx.ASGITransport(app=webhooks.app)
        async with webhooks.running(), httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
            response = await client.post("/webhooks/openai", content=b"x" * (1024 * 1024 + 1))
    assert response.status_code == 413 and response.json()["error"]["code"] == "invalid_body"


def test_the_documented_fastapi_app_runs_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/examples/sidecar/app.py, which the `relay sidecar` page includes."""
    example = REPO / "docs" / "examples" / "sidecar" / "app.py"
    check_page_includes_its_examples(REPO / "docs" / "commands" / "sidecar.md", example.parent)
    source = example.read_text()
    monkeypatch.setenv("OPENAI_API_KEY", PROVIDER_KEY)
    monkeypatch.setenv("OPENAI_WEBHOOK_SECRET", SECRET)
    namespace: dict[str, Any] = {}
    exec(compile(source, str(example), "exec"), namespace)

    async def requests() -> tuple[httpx.Response, ...]:
        transport = httpx.ASGITransport(app=namespace["app"])
        async with httpx.AsyncClient(transport=transport, base_url="http://app.test") as client:
            return (await client.get("/"), await client.get("/relay/healthz"),
                    await client.post("/relay/webhooks/openai", content=b"{}"))

    own, health, unsigned = anyio.run(requests)
    assert own.json() == {"service": "weather line"} and health.json()["status"] == "draining"
    assert (unsigned.status_code, unsigned.json()["error"]["code"]) == (400, "invalid_signature")
    assert namespace["webhooks"].session_config()["tools"][0]["name"] == "get_weather"


# ---- the REST calls --------------------------------------------------------------------------

async def test_accept_reject_and_hangup_reach_the_mock() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, api_key=PROVIDER_KEY) as mock:
        api = relay_for(mock).calls_api
        accepted, rejected = mock.create_call(), mock.create_call()
        try:
            await api.accept(accepted, {"type": "realtime", "instructions": "hi"})
            await api.reject(rejected, status_code=486)
            await api.hangup(accepted)
            with pytest.raises(CallRequestFailed, match=f"refused to hang up call {accepted}: HTTP 404"):
                await api.hangup(accepted)
            with pytest.raises(AcceptFailed, match="HTTP 404 Call 'rtc_gone' not found"):
                await api.accept("rtc_gone", {"type": "realtime"})
        finally:
            await api.aclose()
    assert mock.find_session(accepted).accepts == [{"type": "realtime", "instructions": "hi"}]
    assert mock.find_session(accepted).ended and mock.find_session(rejected).ended


@asynccontextmanager
async def answering(raw_response: bytes | None) -> AsyncIterator[str]:
    """A REST base whose server answers every request with `raw_response` (None: never)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
        if length is not None:   # read the body too: a socket closed on unread data resets the connection
            await reader.readexactly(int(length.group(1)))
        if raw_response is None:
            await reader.read()   # until the client gives up
        else:
            writer.write(raw_response)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    async with server:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


@pytest.mark.parametrize(("raw_response", "failure"), [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", None),
    (b"HTTP/1.1 200 OK\r\n\r\nuntil the end", None),
    (b"HTTP/1.1 204 No Content\r\n\r\n", None),
    (b"HTTP/1.1 500 Oops\r\nContent-Length: 27\r\n\r\n{\"error\": {\"message\": 42}}\n", "HTTP 500 42"),
    (b"garbage\r\n\r\n", "cannot reach 127.0.0.1"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "cannot reach 127.0.0.1"),
    (None, "did not answer the accept within 0.2 s"),   # the one case bounded by a short timeout
])
async def test_what_the_provider_answers_becomes_a_clear_failure(raw_response: bytes | None,
                                                                  failure: str | None) -> None:
    async with MockUpstream() as mock, answering(raw_response) as rest_base:
        api = CallsAPI(relay_for(mock).runtime, rest_base, timeout=0.2 if raw_response is None else TIMEOUT)
        try:
            if failure is None:
                await api.accept("rtc_1", {"type": "realtime"})
            else:
                with pytest.raises(AcceptFailed, match=failure) as refused:
                    await api.accept("rtc_1", {"type": "realtime"})
                assert PROVIDER_KEY not in str(refused.value)
        finally:
            await api.aclose()
