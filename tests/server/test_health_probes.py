"""What load balancers and orchestrators send `relay serve` before any session: `/healthz` and
`/metrics` answer GET and HEAD (HEAD: the same status and headers, no body), 405 with an Allow
header for any other method, an HTTP/1.0 probe too; a TCP check that connects and leaves, or bytes
that are not HTTP, are closed quietly; no probe ever logs at error level or with a traceback.
While the relay drains, `/healthz` says 503 and a new session is refused with 503."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from relay.mock import MockUpstream
from relay.transports.websockets import MAX_REQUEST_HEAD, ProbeConnection, _rewritten_head
from tests.support.clients import TIMEOUT, raw_http, realtime_client
from tests.support.processes import only_on_transport
from tests.support.relays import captured_logs, relay_for, weather_turn
from tests.support.tools import get_weather


def request(method: str, path: str, *, version: str = "HTTP/1.1", body: bytes = b"") -> bytes:
    headers = "Host: relay.example\r\n" if version == "HTTP/1.1" else ""
    if body:
        headers += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return f"{method} {path} {version}\r\n{headers}\r\n".encode() + body


async def test_healthz_and_metrics_answer_head_like_get_without_a_body(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock) as server:
        for path in ("/healthz", "/metrics"):
            get_status, get_headers, get_body = await raw_http(server.port, request("GET", path))
            head_status, head_headers, head_body = await raw_http(server.port, request("HEAD", path))
            assert get_status == head_status == 200
            assert head_body == b"" and get_body
            assert head_headers["content-type"] == get_headers["content-type"]
            assert int(head_headers["content-length"]) == len(get_body) == int(get_headers["content-length"])


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"])
async def test_other_methods_get_405_with_the_methods_allowed(weather_mock: MockUpstream, method: str) -> None:
    async with relay_for(weather_mock) as server:
        for path in ("/healthz", "/metrics"):
            status, headers, body = await raw_http(server.port, request(method, path, body=b'{"probe": 1}'))
            assert (status, headers["allow"]) == (405, "GET, HEAD")
            assert json.loads(body)["error"]["code"] == "method_not_allowed"
        status, headers, body = await raw_http(server.port, request(method, "/v1/realtime"))
        assert (status, headers["allow"]) == (405, "GET")
        assert "WebSocket endpoint" in json.loads(body)["error"]["message"]
        assert server.metrics.handshakes_refused[405] == 3


async def test_an_http_1_0_probe_is_answered_and_a_websocket_needs_http_1_1(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock) as server:
        status, _, body = await raw_http(server.port, request("GET", "/healthz", version="HTTP/1.0"))
        assert status == 200 and json.loads(body)["status"] == "ok"
        status, _, body = await raw_http(server.port, request("HEAD", "/healthz", version="HTTP/1.0"))
        assert (status, body) == (200, b"")
        status, _, _ = await raw_http(server.port, request("GET", "/v1/realtime", version="HTTP/1.0"))
        assert status == 505


async def test_a_request_head_in_pieces_is_read_whole(weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock) as server:
        whole = request("HEAD", "/healthz")
        status, headers, body = await raw_http(server.port, whole[:3], whole[3:20], whole[20:])
        assert (status, body) == (200, b"") and int(headers["content-length"]) > 0


@only_on_transport("websockets")
def test_the_head_is_rewritten_only_once_it_is_complete() -> None:
    head = request("POST", "/healthz?x=1", body=b"{}")
    end = head.index(b"\r\n\r\n") + 4
    for cut in range(end):
        assert _rewritten_head(head[:cut]) is None, cut
    method, version, plain_get = _rewritten_head(head)   # type: ignore[misc]
    assert (method, version) == ("POST", "HTTP/1.1")
    assert plain_get == b"GET /healthz?x=1 HTTP/1.1\r\nHost: relay.example\r\nContent-Type: application/json\r\n\r\n"
    get = request("GET", "/v1/realtime")
    assert _rewritten_head(get) is get                 # websockets reads a plain GET itself
    assert _rewritten_head(b"\x16\x03\x01\x02\x00\x01\x00\r\n") is not None   # not HTTP: websockets says so
    endless = b"HEAD /healthz HTTP/1.1\r\nX: " + b"y" * MAX_REQUEST_HEAD
    assert _rewritten_head(endless) is endless         # too long for a probe: websockets' limits apply


async def test_no_probe_logs_an_error_or_a_traceback_and_sessions_still_work(weather_mock: MockUpstream) -> None:
    with captured_logs() as logs:
        async with relay_for(weather_mock, tools=[get_weather]) as server:
            probes = [request(method, path) for method in ("GET", "HEAD", "POST", "OPTIONS")
                      for path in ("/healthz", "/metrics", "/v1/realtime", "/elsewhere")]
            probes += [request("GET", "/healthz", version="HTTP/1.0"), request("POST", "/healthz", body=b"x" * 100)]
            for probe in probes:
                await raw_http(server.port, probe)
            # a TCP check: connect and leave without a word; then bytes that are not HTTP
            for payload in (b"", b"\x16\x03\x01 not http at all\r\n\r\n"):
                reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
                writer.write(payload)
                writer.write_eof()
                async with asyncio.timeout(TIMEOUT):
                    assert await reader.read() == b""
                writer.close()
            async with realtime_client(server) as client:
                assert "sunny in Paris" in json.dumps(await weather_turn(client))
    records = [json.loads(line) for line in logs.getvalue().splitlines()]
    # (websockets 17 adds its own traceback at debug, shown only with --log-level debug)
    assert [r for r in records if r["level"] in ("error", "critical") or ("exc" in r and r["level"] != "debug")] == []
    assert any(r["msg"].startswith("not an HTTP request") and r["level"] == "info" for r in records)
    assert any(r["msg"] == "connection closed before sending a request" and r["level"] == "debug" for r in records)


@only_on_transport("websockets")
async def test_a_probe_that_stalls_after_the_answer_is_not_an_error(
        weather_mock: MockUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checker reads the answer but does not close its side within the relay's close timeout
    (as HAProxy's checks did when the machine was saturated): the relay gives up the connection
    quietly."""
    handshake = ProbeConnection.handshake
    handshakes_done = asyncio.Event()

    async def observed(self: ProbeConnection, *args: Any, **kwargs: Any) -> None:
        try:
            await handshake(self, *args, **kwargs)
        finally:
            handshakes_done.set()

    monkeypatch.setattr(ProbeConnection, "handshake", observed)
    with captured_logs() as logs:
        async with relay_for(weather_mock) as server:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(request("GET", "/healthz"))
            async with asyncio.timeout(TIMEOUT):
                assert (await reader.read()).startswith(b"HTTP/1.1 200 ")   # the answer, then the relay's EOF
            await asyncio.wait_for(handshakes_done.wait(), TIMEOUT)   # while this side stays open
            writer.close()
    records = [json.loads(line) for line in logs.getvalue().splitlines()]
    assert [r for r in records if r["level"] in ("error", "critical") or ("exc" in r and r["level"] != "debug")] == []
    assert any(r["msg"] == "the client left during the handshake" and r["level"] == "info" for r in records)


async def test_while_draining_healthz_is_503_and_new_sessions_are_refused_with_503(
        weather_mock: MockUpstream) -> None:
    async with relay_for(weather_mock, tools=[get_weather], drain_seconds=30) as server:
        serving = asyncio.ensure_future(server.serve_forever())
        async with realtime_client(server) as open_session:
            await open_session.wait_type("session.created")
            server.request_stop()
            for method in ("GET", "HEAD"):
                status, headers, body = await raw_http(server.port, request(method, "/healthz"))
                assert status == 503 and headers["content-type"] == "application/json"
            _, _, body = await raw_http(server.port, request("GET", "/healthz"))
            assert json.loads(body)["status"] == "draining"
            with pytest.raises(InvalidStatus) as refused:
                async with realtime_client(server):
                    pass
            response = refused.value.response
            assert response.status_code == 503 and response.headers["Retry-After"] == "1"
            assert "draining" in json.loads(response.body)["error"]["message"]
            assert "sunny in Paris" in json.dumps(await weather_turn(open_session))   # goes on meanwhile
        await asyncio.wait_for(serving, 5)   # the last session ended: the drain is over at once
    assert server.metrics.sessions_total == 1 and server.metrics.handshakes_refused[503] == 1
