"""What `relay serve` answers before a session exists: the HTTP endpoints that share its port
(`/healthz`, `/metrics`: GET and HEAD, 405 otherwise; `/healthz` is 503 while the relay drains;
the live inspector's routes when it is on) and the checks that refuse a WebSocket client before
any upstream work (the dialect's paths, a draining relay, the Upgrade header, the browser Origin,
the relay's own token in any form a client of the dialect sends it, a `call_id` that would join
a live call).

Everything cheap is decided here, so a refused client never causes an upstream connection.
`ProbeConnection` lets the requests websockets' own parser cannot read (HEAD and other methods,
HTTP/1.0, a body) reach these rules, and keeps a health check that connects and leaves without
a word out of the error log.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import logging
from http import HTTPStatus
from typing import Any, Callable, Iterable, Protocol, Sequence
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed, InvalidMessage
from websockets.http11 import Request, Response

from relay.dialects import Dialect
from relay.dialects.base import TOKEN_SUBPROTOCOL
from relay.edges.config import ServerConfig
from relay.observe.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from relay.observe.metrics import Metrics

log = logging.getLogger("relay.server")

INSPECTOR_SUBPROTOCOL = "relay-inspector"
"""The subprotocol a page offers (beside the token subprotocol) to open the live inspector's feed."""

ENDPOINT_METHODS = "GET, HEAD"


class Routes(Protocol):
    """More routes on the port (the live inspector's, relay/inspector/live/endpoints.py)."""

    def owns(self, path: str) -> bool: ...
    def process_request(self, connection: ServerConnection, request: Request) -> Response | None: ...


class Handshake:
    """`process_request` for websockets' server: answers the HTTP endpoints, refuses a client
    that may not connect (HTTP status and a JSON error body, counted in the metrics), and lets
    the others through (None)."""

    def __init__(self, config: ServerConfig, dialect: Dialect, metrics: Metrics, *,
                 health: Callable[[], dict[str, Any]], draining: Callable[[], bool] = lambda: False,
                 inspector: Routes | None = None) -> None:
        self.config = config
        self.dialect = dialect
        self.metrics = metrics
        self._health = health
        self._draining = draining
        self._inspector = inspector

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path.rstrip("/") or "/"
        method = request_method(connection)
        if path in ("/healthz", "/metrics"):
            if method not in ("GET", "HEAD"):
                return self._refuse(connection, HTTPStatus.METHOD_NOT_ALLOWED,
                                    f"{path} answers {ENDPOINT_METHODS}, not {method}", Allow=ENDPOINT_METHODS)
            response = self._endpoint(connection, path)
            # HEAD: the same status and headers (Content-Length included), no body
            return dataclasses.replace(response, body=b"") if method == "HEAD" else response
        if self._inspector is not None and self._inspector.owns(path):
            return self._inspector.process_request(connection, request)
        if path not in self.dialect.client_paths:
            return self._refuse(connection, HTTPStatus.NOT_FOUND,
                                f"no realtime endpoint at {path}; connect to {self.dialect.client_path}")
        if method != "GET":
            return self._refuse(connection, HTTPStatus.METHOD_NOT_ALLOWED,
                                f"{path} is a WebSocket endpoint: open it with GET and Upgrade: websocket",
                                Allow="GET")
        if request_version(connection) != "HTTP/1.1":
            return self._refuse(connection, HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                                f"{path} is a WebSocket endpoint: it takes HTTP/1.1")
        if self._draining():
            # the balancer saw /healthz turn 503 too; it retries elsewhere (deploy/haproxy.cfg)
            return self._refuse(connection, HTTPStatus.SERVICE_UNAVAILABLE,
                                "this relay is draining (shutting down) and takes no new sessions; "
                                "connect again to reach another instance", **{"Retry-After": "1"})
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

    def _endpoint(self, connection: ServerConnection, path: str) -> Response:
        """The answer of an HTTP endpoint to GET (HEAD drops its body)."""
        if path == "/healthz":
            status = HTTPStatus.SERVICE_UNAVAILABLE if self._draining() else HTTPStatus.OK
            return _json_response(connection, status, self._health())
        response = connection.respond(HTTPStatus.OK, self.metrics.render())
        _set_header(response, "Content-Type", METRICS_CONTENT_TYPE)
        return response

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
        assert self.config.auth_token is not None
        return presents_token(request.headers.raw_items(), request.path, self.config.auth_token, self.dialect)


def presents_token(headers: Iterable[tuple[str, str]], target: str, token: str, dialect: Dialect | None) -> bool:
    """Whether a request (its headers, and its path with the query) carries the relay token in a
    form a realtime client of `dialect` may send it: a Bearer token, the token subprotocol, the
    dialect's key headers and query parameters. The one check of the relay's token (the realtime
    endpoint's and the inspector's)."""
    expected = token.encode("utf-8", "surrogatepass")
    key_headers = {name.lower() for name in dialect.client_key_headers} if dialect is not None else set()
    presented = []
    for name, value in headers:
        name = name.lower()
        if name == "authorization" and value[:7].lower() == "bearer ":
            presented.append(value[7:].strip())
        elif name in key_headers:
            presented.append(value)
        elif name == "sec-websocket-protocol":
            presented += [p.strip()[len(TOKEN_SUBPROTOCOL):] for p in value.split(",")
                          if p.strip().startswith(TOKEN_SUBPROTOCOL)]
    if dialect is not None and dialect.client_key_params:
        presented += [value for name, value in parse_qsl(urlsplit(target).query) if name in dialect.client_key_params]
    return any(hmac.compare_digest(p.encode("utf-8", "surrogatepass"), expected) for p in presented)


def select_subprotocol(connection: ServerConnection, offered: Sequence[str]) -> str | None:
    """`realtime` when offered (the inspector's feed: its own); the token subprotocol is never
    echoed back."""
    for name in ("realtime", INSPECTOR_SUBPROTOCOL):
        if name in offered:
            return name
    return None


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


# ---- requests websockets' parser refuses -------------------------------------------------------

MAX_REQUEST_HEAD = 16 * 1024   # what a probe's request line and headers may take before websockets judges them
_BODY_HEADERS = (b"content-length:", b"transfer-encoding:")


def request_method(connection: ServerConnection) -> str:
    """The method the client sent (`ProbeConnection` keeps it; websockets parses GET only)."""
    return getattr(connection, "request_method", "GET")


def request_version(connection: ServerConnection) -> str:
    return getattr(connection, "request_version", "HTTP/1.1")


class ProbeConnection(ServerConnection):
    """A server connection for load balancers' and orchestrators' probes.

    websockets before 17 reads only `GET ... HTTP/1.1` without a body and drops anything else
    with no answer and an error-level traceback, as it does with a connection that closes before
    its request (a TCP health check); websockets 17 reads other methods but still refuses a body.
    Here a request head that is not a plain GET is rewritten, before websockets parses it, into
    the GET of the same path and headers (without the body's); the real method and version are
    kept on the connection for `Handshake.process_request`, which answers every such request with
    a status (never a WebSocket: the body, if any, is not read). A connection that brings no HTTP
    request at all is logged at debug (nothing came: a TCP probe) or info (something else came),
    and closed; so is one whose peer leaves before the answer goes out (a check that timed out).

    Built on websockets' `create_connection` extension point: `data_received` (asyncio's Protocol
    method) sees the bytes first; `handshake` is the coroutine websockets' server awaits before
    the handler, which closes the connection when it returns without an open WebSocket (the
    failure is read from `protocol.handshake_exc` where websockets 17 keeps it). Checked with
    websockets 14.2, 15.0.1 and 17.4 (tests/server/test_health_probes.py)."""

    request_method = "GET"
    request_version = "HTTP/1.1"
    _head: bytes | None = b""   # the request head being read; None once websockets has it

    def data_received(self, data: bytes) -> None:
        """Reads the request head only: once it is decided, later reads go straight to
        websockets' own `data_received` (an attribute of the instance, found first), so a
        session's frames pay nothing for this class."""
        head = (self._head or b"") + data
        rewritten = _rewritten_head(head)
        if rewritten is None:   # more to come
            self._head = head
            return
        self._head = None
        if rewritten is head:   # a plain GET, or past what a probe sends: websockets decides
            self.data_received = super().data_received   # type: ignore[method-assign]
            super().data_received(head)
            return
        method, version, plain_get = rewritten
        self.request_method, self.request_version = method, version
        self.data_received = _ignore   # type: ignore[method-assign]  (the body, and anything after it)
        super().data_received(plain_get)

    async def handshake(self, *args: Any, **kwargs: Any) -> None:
        try:
            await super().handshake(*args, **kwargs)
        except ConnectionClosed:
            # the peer left before the answer went out: a balancer's check that timed out while
            # the relay was busy, a client that gave up
            log.info("the client left during the handshake", extra={"remote": remote_address(self)})
            return
        except InvalidMessage as exc:
            if self.request is not None:
                raise
            failure: BaseException = exc
        else:   # websockets 17 keeps the failure instead of raising it (and logs it at debug only)
            handshake_exc = getattr(self.protocol, "handshake_exc", None)
            if self.request is not None or handshake_exc is None:
                return
            failure = handshake_exc
        cause = failure.__cause__
        if isinstance(cause, EOFError) and self._head == b"":
            log.debug("connection closed before sending a request", extra={"remote": remote_address(self)})
        else:
            log.info("not an HTTP request: %s", cause or failure, extra={"remote": remote_address(self)})


def _ignore(data: bytes) -> None:
    pass


def _rewritten_head(head: bytes) -> tuple[str, str, bytes] | bytes | None:
    """For the start of a request: None when more is needed; `head` itself when websockets
    should read it as it is (a plain GET, not HTTP at all, or too long); else the method, the
    version and the head rewritten as a plain GET without body headers."""
    line_end = head.find(b"\n")
    if line_end < 0:
        return None if len(head) < MAX_REQUEST_HEAD else head
    parts = head[:line_end].rstrip(b"\r").split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/") or (parts[0] == b"GET" and parts[2] == b"HTTP/1.1"):
        return head
    lines = head.split(b"\n")
    headers: list[bytes] = []
    for line in lines[1:-1]:   # the last piece may be an unfinished line
        line = line.rstrip(b"\r")
        if not line:   # the empty line that ends the head
            method, target, version = parts
            kept = [h for h in headers if not h.lower().startswith(_BODY_HEADERS)]
            plain_get = b"\r\n".join([b"GET " + target + b" HTTP/1.1", *kept, b"", b""])
            return method.decode("ascii", "replace"), version.decode("ascii", "replace"), plain_get
        headers.append(line)
    return None if len(head) < MAX_REQUEST_HEAD else head
