"""Browsers are clients like any other: a web page a developer visits cannot open sessions on the
provider key through a relay without a token (only the origins it was told of may), and cannot
read the live inspector by pointing a name of its own at the relay's address (DNS rebinding).
Clients that send no `Origin` (the SDKs, servers) connect as before. On the transport the test
run is on (both in CI)."""

from __future__ import annotations

from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from relay.mock import MockUpstream
from tests.support.clients import http_get, raw_http
from tests.support.relays import LeakGuard

NO_TOKEN: dict[str, Any] = {"auth_token": None}


@pytest.mark.parametrize("origin", ["https://evil.example", "null", "http://localhost:3000", "http://127.0.0.1:5173"])
async def test_without_a_token_a_page_from_an_origin_not_allowed_gets_403_and_no_upstream_connection(
        guard: LeakGuard, mock: MockUpstream, origin: str) -> None:
    async with guard.relay(mock, **NO_TOKEN) as server:
        with pytest.raises(InvalidStatus) as refused:
            async with guard.client(server, token=None, origin=origin):
                pass
        assert refused.value.response.status_code == 403
        assert server.metrics.sessions_total == 0
    assert mock.sessions == []


async def test_without_a_token_the_origins_it_was_told_of_and_clients_without_an_origin_connect(
        guard: LeakGuard, mock: MockUpstream) -> None:
    async with guard.relay(mock, allow_origins=["http://localhost:3000"], **NO_TOKEN) as server:
        async with guard.client(server, token=None, origin="http://localhost:3000") as page:
            await page.wait_type("session.created")
        async with guard.client(server, token=None) as sdk:
            await sdk.wait_type("session.created")
        with pytest.raises(InvalidStatus) as refused:
            async with guard.client(server, token=None, origin="http://localhost:3001"):
                pass
    assert refused.value.response.status_code == 403
    assert len(mock.sessions) == 2


async def test_with_a_token_a_page_that_holds_it_connects_from_any_origin(guard: LeakGuard, mock: MockUpstream) -> None:
    async with guard.relay(mock) as server, guard.client(server, origin="https://app.example") as page:
        await page.wait_type("session.created")


# ---- the live inspector ----------------------------------------------------------------------

FEED_UPGRADE = ("GET /inspector/feed HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Protocol: relay-inspector\r\n\r\n")


@pytest.mark.parametrize("name", ["evil.example", "127.0.0.1.nip.io", "localhost.evil.example"])
async def test_a_page_under_another_host_name_cannot_read_the_inspector(
        guard: LeakGuard, mock: MockUpstream, name: str) -> None:
    """DNS rebinding: the attacker's name resolves to 127.0.0.1, so the page's origin and the
    `Host` it sends agree; the name is not one the relay answers to."""
    async with guard.relay(mock, inspector=True, **NO_TOKEN) as server, guard.client(server, token=None) as client:
        await client.wait_type("session.created")
        host = f"{name}:{server.port}"
        rebound = {"Host": host, "Origin": f"http://{host}"}
        sessions, _, body = await http_get(server.port, "/inspector/sessions", rebound)
        page, _, _ = await http_get(server.port, "/inspector", rebound)
        feed, _, _ = await raw_http(server.port, FEED_UPGRADE.format(host=host).encode())
        guard.saw("inspector answer", body)
        own, _, listed = await http_get(server.port, "/inspector/sessions")   # Host: 127.0.0.1:port
        local, _, _ = await http_get(server.port, "/inspector/sessions", {"Host": f"localhost:{server.port}"})
    assert (sessions, page, feed) == (421, 421, 421)
    assert b"rs_" not in body
    assert (own, local) == (200, 200) and b"rs_" in listed
