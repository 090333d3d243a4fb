"""`relay serve --dialect gemini` on raw sockets: paths, the relay token in the forms Gemini
clients send it, credentials that never travel upstream, the API version carried over, refusals
and failures as close codes, and the configuration around it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.exceptions import InvalidStatus

from relay.cli.serve import configure
from relay.dialects import GEMINI, infer_dialect
from relay.dialects.gemini import DEFAULT_URL
from relay.edges.config import ServerConfig
from relay.edges.serve import RelayServer
from relay.edges.upstream import Upstream, key_from_environment
from relay.errors import ConfigError
from relay.mock import MockUpstream
from relay.observe.logs import Redactor
from tests.support.clients import Certificate, gemini_client
from tests.support.frames import model_words
from tests.support.keys import GEMINI_KEY, RELAY_TOKEN
from tests.support.tools import GEMINI_DOOR, GEMINI_SCRIPT, GEMINI_WEATHER, get_weather

V1ALPHA = "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContent"


@asynccontextmanager
async def gemini_relay(**options: Any) -> AsyncIterator[tuple[RelayServer, MockUpstream]]:
    async with MockUpstream(script=GEMINI_SCRIPT, dialect="gemini", api_key=GEMINI_KEY) as mock:
        settings: dict[str, Any] = {"upstream": mock.url, "dialect": "gemini", "tools": [get_weather], "port": 0,
                                    "api_key": GEMINI_KEY, "auth_token": RELAY_TOKEN, "drain_seconds": 0.0}
        async with RelayServer(ServerConfig(**(settings | options))) as server:
            yield server, mock


async def test_a_session_through_the_relay_keeps_binary_frames_and_hides_the_relay_call() -> None:
    async with gemini_relay() as (server, mock):
        async with gemini_client(server.base_url, key=RELAY_TOKEN) as client:
            await client.setup(tools=[{"functionDeclarations": [GEMINI_DOOR]}],
                               generationConfig={"responseModalities": ["TEXT"]})
            await client.say("weather")
            await client.turn()
    assert all(client.binary), "server frames reach the client as binary, as the service sends them"
    assert not any("toolCall" in m for m in client.messages)
    assert "sunny in Paris" in model_words(client.messages)
    connection = mock.sessions[0].connections[0]
    assert connection.headers["x-goog-api-key"] == GEMINI_KEY, "the relay's key goes upstream, not the token"
    assert RELAY_TOKEN not in str(connection.headers)


async def test_a_client_redefining_a_relay_tool_is_closed_before_anything_goes_upstream() -> None:
    async with gemini_relay() as (server, mock):
        async with gemini_client(server.base_url, key=RELAY_TOKEN) as client:
            await client.send({"setup": {"model": "models/m", "tools": [{"functionDeclarations": [GEMINI_WEATHER]}]}})
            code, reason = await client.closed()
    assert code == 1008 and "get_weather" in reason
    assert mock.received == []


@pytest.mark.parametrize(("key", "query"), [
    (RELAY_TOKEN, ""),                       # what the google-genai SDK sends
    (None, f"?key={RELAY_TOKEN}"),           # browsers: no headers
])
async def test_the_relay_token_is_accepted_as_the_sdk_and_browsers_send_it(key: str | None, query: str) -> None:
    async with gemini_relay() as (server, mock):
        async with gemini_client(server.base_url, key=key, query=query) as client:
            await client.setup()
    connection = mock.sessions[0].connections[0]
    assert "key" not in connection.query and connection.auth == "x-goog-api-key"


@pytest.mark.parametrize(("path", "key", "status"), [
    (None, "wrong-token", 401),
    (None, None, 401),
    ("/v1/realtime", RELAY_TOKEN, 404),
])
async def test_handshakes_are_refused_before_any_upstream_connection(path: str | None, key: str | None,
                                                                      status: int) -> None:
    async with gemini_relay() as (server, mock):
        with pytest.raises(InvalidStatus) as refused:
            async with gemini_client(server.base_url, key=key, **({"path": path} if path else {})):
                pass
    assert refused.value.response.status_code == status
    assert mock.sessions == []


async def test_the_clients_api_version_carries_over_to_the_upstream() -> None:
    async with gemini_relay() as (server, mock):
        async with gemini_client(server.base_url, path=V1ALPHA, key=RELAY_TOKEN) as client:
            await client.setup()
    assert mock.sessions[0].connections[0].path == V1ALPHA


async def test_an_unreachable_upstream_closes_the_client_with_1011() -> None:
    async with gemini_relay(upstream="ws://127.0.0.1:9" + V1ALPHA) as (server, _mock):
        async with gemini_client(server.base_url, key=RELAY_TOKEN) as client:
            code, reason = await client.closed()
    assert code == 1011 and reason.startswith("upstream unavailable: cannot reach the upstream 127.0.0.1:9")


def test_gemini_defaults_key_and_header() -> None:
    server = RelayServer(ServerConfig(dialect="gemini", api_key="gemini-key-of-the-defaults-test"))
    assert server.upstream.url == DEFAULT_URL and server.dialect is GEMINI
    assert infer_dialect(DEFAULT_URL) is GEMINI
    assert key_from_environment(GEMINI, {"GEMINI_API_KEY": " g-key ", "OPENAI_API_KEY": "o"}) == "g-key"


async def test_the_provider_key_goes_up_as_x_goog_api_key() -> None:
    upstream = Upstream(DEFAULT_URL, api_key="g-key", max_frame_bytes=1024, redactor=Redactor([]))
    assert await upstream.headers(GEMINI) == {"x-goog-api-key": "g-key"}


@pytest.mark.parametrize(("client_path", "expected"), [
    (V1ALPHA, DEFAULT_URL.replace("v1beta", "v1alpha")),
    ("/elsewhere", DEFAULT_URL),
    (None, DEFAULT_URL),
])
def test_upstream_url_follows_the_clients_version(client_path: str | None, expected: str) -> None:
    assert GEMINI.upstream_url(DEFAULT_URL, client_path) == expected
    assert GEMINI.upstream_url("wss://proxy.example/custom", client_path) == "wss://proxy.example/custom"


def test_tls_needs_both_files_and_readable_ones(tmp_path: Any, loopback_certificate: Certificate) -> None:
    with pytest.raises(ConfigError, match="go together"):
        RelayServer(ServerConfig(dialect="gemini", tls_cert=loopback_certificate.cert))
    with pytest.raises(ConfigError, match="cannot use --tls-cert"):
        RelayServer(ServerConfig(dialect="gemini", tls_cert=tmp_path / "missing.pem", tls_key=tmp_path / "k.pem",
                                 api_key=GEMINI_KEY))
    server = RelayServer(ServerConfig(dialect="gemini", tls_cert=loopback_certificate.cert,
                                      tls_key=loopback_certificate.key, port=0, api_key=GEMINI_KEY))
    assert server._tls is not None


def test_serve_takes_the_gemini_dialect_and_tls_files() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["--dialect", "gemini", "--tls-cert", "c.pem", "--tls-key", "k.pem"])
    assert (args.dialect, args.upstream, args.tls_cert, args.tls_key) == ("gemini", None, "c.pem", "k.pem")


def test_attach_refuses_gemini_which_has_no_call_sideband() -> None:
    from relay.edges.config import SidecarConfig
    from relay.edges.sideband import SidecarRuntime

    with pytest.raises(ConfigError, match="no call sideband"):
        SidecarRuntime(SidecarConfig(dialect="gemini", upstream=DEFAULT_URL))
