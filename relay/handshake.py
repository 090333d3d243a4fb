"""What `relay serve` answers before a session exists: the HTTP endpoints that share its port
(`/healthz`, `/metrics`) and the checks that refuse a WebSocket client before any upstream work
(the dialect's paths, the Upgrade header, the browser Origin, the relay's own token in any form
a client of the dialect sends it, a `call_id` that would join a live call).

Everything cheap is decided here, so a refused client never causes an upstream connection.
"""

from __future__ import annotations

import hmac
import json
import logging
from http import HTTPStatus
from typing import Any, Callable, Sequence
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from relay.config import ServerConfig
from relay.dialects import Dialect
from relay.dialects.base import TOKEN_SUBPROTOCOL
from relay.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from relay.metrics import Metrics

log = logging.getLogger("relay.server")


class Handshake:
    """`process_request` for websockets' server: answers the HTTP endpoints, refuses a client
    that may not connect (HTTP status and a JSON error body, counted in the metrics), and lets
    the others through (None)."""

    def __init__(self, config: ServerConfig, dialect: Dialect, metrics: Metrics, *,
                 health: Callable[[], dict[str, Any]]) -> None:
        self.config = config
        self.dialect = dialect
        self.metrics = metrics
        self._health = health

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path.rstrip("/") or "/"
        if path == "/healthz":
            return _json_response(connection, HTTPStatus.OK, self._health())
        if path == "/metrics":
            response = connection.respond(HTTPStatus.OK, self.metrics.render())
            _set_header(response, "Content-Type", METRICS_CONTENT_TYPE)
            return response
        if path not in self.dialect.client_paths:
            return self._refuse(connection, HTTPStatus.NOT_FOUND,
                                f"no realtime endpoint at {path}; connect to {self.dialect.client_path}")
        if not any("websocket" in value.lower() for value in request.headers.get_all("Upgrade")):
            return self._refuse(connection, HTTPStatus.UPGRADE_REQUIRED,
                                f"{path} is a WebSocket endpoint; connect with a realtime client",
                                Upgrade="websocket")
        origins = self.config.allow_origins
        if origins:
            offered = request.headers.get_all("Origin")
            if offered and any(origin not in origins for origin in offered):
                return self._refuse(connection, HTTPStatus.FORBIDDEN, "this origin is not allowed")
        if self.config.auth_token and not self._authorized(request):
            return self._refuse(connection, HTTPStatus.UNAUTHORIZED,
                                f"missing or wrong relay token ({self.dialect.client_auth_forms})",
                                **{"WWW-Authenticate": 'Bearer realm="relay"'})
        if any(name.lower() == "call_id" for name, _ in parse_qsl(urlsplit(request.path).query)):
            # with the relay's key, a call_id would join any live call of the account: sideband
            # connections are `relay attach`'s business, never a proxied client's
            return self._refuse(connection, HTTPStatus.BAD_REQUEST,
                                "call_id is not accepted here: the relay opens new sessions only "
                                "(attach to a live call with `relay attach`)")
        return None

    def _refuse(self, connection: ServerConnection, status: HTTPStatus, message: str, **headers: str) -> Response:
        """A JSON error response (with `headers`), counted and logged."""
        self.metrics.handshake_refused(status.value)
        log.info("handshake refused: %s", message, extra={
            "status": status.value, "remote": remote_address(connection)})
        response = _json_response(connection, status, {"error": {
            "type": "invalid_request_error", "code": status.phrase.lower().replace(" ", "_"),
            "message": message}})
        for name, value in headers.items():
            _set_header(response, name, value)
        return response

    def _authorized(self, request: Request) -> bool:
        """The relay token in any form a client of this dialect can send it: a Bearer token, the
        dialect's key headers and query parameters, the token subprotocol."""
        assert self.config.auth_token is not None
        headers, dialect = request.headers, self.dialect
        expected = self.config.auth_token.encode("utf-8", "surrogatepass")
        presented = [v[7:].strip() for v in headers.get_all("Authorization") if v[:7].lower() == "bearer "]
        for name in dialect.client_key_headers:
            presented += headers.get_all(name)
        if dialect.client_key_params:
            presented += [value for name, value in parse_qsl(urlsplit(request.path).query)
                          if name in dialect.client_key_params]
        presented += [
            p.strip()[len(TOKEN_SUBPROTOCOL):]
            for value in headers.get_all("Sec-WebSocket-Protocol") for p in value.split(",")
            if p.strip().startswith(TOKEN_SUBPROTOCOL)
        ]
        return any(hmac.compare_digest(p.encode("utf-8", "surrogatepass"), expected) for p in presented)


def select_subprotocol(connection: ServerConnection, offered: Sequence[str]) -> str | None:
    """`realtime` when offered; the token subprotocol is never echoed back."""
    return "realtime" if "realtime" in offered else None


def remote_address(connection: ServerConnection) -> str:
    address = connection.remote_address
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


def _set_header(response: Response, name: str, value: str) -> None:
    if name in response.headers:
        del response.headers[name]
    response.headers[name] = value


def _json_response(connection: ServerConnection, status: HTTPStatus, body: dict[str, Any]) -> Response:
    response = connection.respond(status, json.dumps(body) + "\n")
    _set_header(response, "Content-Type", "application/json")
    return response
