"""Where the live inspector is served: three routes under a base path (`/inspector` on `relay
serve`'s port and on `relay attach --inspector`'s own; wherever an ASGI app mounts it):

    GET {base}            the page (no session data in it: it asks for the token, then the rest)
    GET {base}/sessions   the live and recent sessions, as JSON                       token needed
    WS  {base}/feed       the live feed (relay/inspector/live/feed.py)                token needed

The token is the relay's client token, checked by the realtime endpoint's own check
(`relay.handshake.presents_token`): a Bearer header (what the page sends to `/sessions`), the
token subprotocol (what the page offers when it opens the feed, beside `relay-inspector`: a
browser cannot set headers on a WebSocket), or the dialect's key forms. The page reads the token
from the fragment of its address (`/inspector#token=...`, which a browser never sends to a server,
so no server or proxy logs it) or from a form, keeps it in the tab's sessionStorage and takes it
out of the address bar. Without a configured token (a relay on loopback) no token is asked.
Whatever the token, a browser page from another origin is refused (`Origin` must be the page's
own host, or one of `--allow-origin`): a site a user visits cannot read a loopback relay's feed.

`InspectorEndpoint` serves the routes on a websockets server (`process_request` answers the HTTP
routes and refuses feeds; `serve_feed` runs an accepted one); `asgi_app` is the same for an ASGI
server (mount it in a Starlette or FastAPI app); `serve_inspector` runs a server of its own.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from relay import __version__
from relay.dialects import Dialect
from relay.dialects.base import TOKEN_SUBPROTOCOL
from relay.edges.handshake import (
    INSPECTOR_SUBPROTOCOL,
    presents_token,
    select_subprotocol,
)
from relay.inspector.live.feed import ChannelClosed, FeedConnection
from relay.inspector.live.hub import LiveHub
from relay.inspector.model import SessionModel
from relay.inspector.page import PAGE_POLICY, asset, fill_template, script_json
from relay.observe.logs import WEBSOCKET_LOGGER, RedactingLogger, Redactor

log = logging.getLogger("relay.inspector")

BASE_PATH = "/inspector"
LIVE_PAGE_POLICY = PAGE_POLICY + "; connect-src 'self'"
"""The live page also talks to where it came from (the session list and the feed), and only there."""
_PAGE_HEADERS = (
    ("Content-Type", "text/html; charset=utf-8"),
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Content-Security-Policy", "frame-ancestors 'none'"),
)

Headers = Iterable[tuple[str, str]]


@functools.lru_cache(maxsize=8)
def render_live_page(base: str) -> str:
    """The live page: the inspector page with no session in it, and the script that lists the
    sessions and shows the one watched, from `base`/sessions and `base`/feed."""
    config = {"base": base, "subprotocol": INSPECTOR_SUBPROTOCOL, "token_subprotocol": TOKEN_SUBPROTOCOL}
    live = (f"<style>\n{asset('live.css')}\n</style>\n"
            f'<script type="application/json" id="live-config">{script_json(config)}</script>\n'
            f"<script>\n{asset('live.js')}\n</script>\n")
    return fill_template({
        "__TITLE__": "relay inspector: live sessions",
        "__CSP__": LIVE_PAGE_POLICY,
        "__CSS__": asset("inspector.css"),
        "__MODEL__": script_json(SessionModel(name="no session open", kind="live").snapshot()),
        "__AUDIO_CALLER__": "",
        "__AUDIO_ASSISTANT__": "",
        "__JS__": asset("inspector.js"),
        "__LIVE__": live,
    })


@dataclass
class Answer:
    """An HTTP answer, whichever server sends it."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


class InspectorRoutes:
    """The routes and their checks, independent of the server (see the module docstring).
    `token` None: nothing is asked (the edge allows that on loopback only)."""

    def __init__(self, hub: LiveHub, *, token: str | None, dialect: Dialect | None = None,
                 allow_origins: Sequence[str] = ()) -> None:
        self.hub = hub
        self.token = token
        self.dialect = dialect
        self.allow_origins = tuple(allow_origins)

    def http(self, route: str, headers: Headers, target: str, base: str) -> Answer:
        """The answer to a GET of `route` (the path under the base)."""
        route = route.rstrip("/")
        if route == "":
            return Answer(200, _PAGE_HEADERS, render_live_page(base).encode())
        if route == "/sessions":
            refusal = self.refusal(headers, target)
            if refusal is not None:
                return refusal
            return _json(200, self.hub.sessions())
        if route == "/feed":
            return _error(HTTPStatus.UPGRADE_REQUIRED, "the live feed is a WebSocket", Upgrade="websocket")
        return _error(HTTPStatus.NOT_FOUND, f"nothing at {base}{route}; the inspector is at {base}")

    def refusal(self, headers: Headers, target: str) -> Answer | None:
        """Why a request for the sessions or the feed is refused (None: it is not)."""
        headers = list(headers)
        origins = [value for name, value in headers if name.lower() == "origin"]
        if origins:
            hosts = [value for name, value in headers if name.lower() == "host"]
            for origin in origins:
                allowed = origin in self.allow_origins if self.allow_origins else (
                    bool(hosts) and urlsplit(origin).netloc == hosts[0])
                if not allowed:
                    log.info("inspector refused a page from another origin", extra={"origin": origin})
                    return _error(HTTPStatus.FORBIDDEN, "this origin is not allowed")
        if self.token is not None and not presents_token(headers, target, self.token, self.dialect):
            log.info("inspector refused a request without the relay token", extra={"status": 401})
            return _error(HTTPStatus.UNAUTHORIZED, "missing or wrong relay token (Authorization: Bearer, or the "
                          f"{TOKEN_SUBPROTOCOL}<token> subprotocol)", **{"WWW-Authenticate": 'Bearer realm="relay"'})
        return None


# ---- websockets -----------------------------------------------------------------------------
class InspectorEndpoint:
    """The routes on a websockets server, under `base` (`relay serve` hands it the requests
    under /inspector; `serve_inspector` all of them)."""

    def __init__(self, hub: LiveHub, *, token: str | None, dialect: Dialect | None = None,
                 allow_origins: Sequence[str] = (), base: str = BASE_PATH) -> None:
        self.routes = InspectorRoutes(hub, token=token, dialect=dialect, allow_origins=allow_origins)
        self.base = base

    def owns(self, path: str) -> bool:
        return path == self.base or path.startswith(self.base + "/")

    def is_feed(self, target: str) -> bool:
        return urlsplit(target).path.rstrip("/") == self.base + "/feed"

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """The answer to a request under the base; None lets an accepted feed open."""
        path = urlsplit(request.path).path
        headers = list(request.headers.raw_items())
        route = path[len(self.base):]
        if route.rstrip("/") == "/feed" and any("websocket" in v.lower() for v in request.headers.get_all("Upgrade")):
            refusal = self.routes.refusal(headers, request.path)
            return None if refusal is None else _response(connection, refusal)
        return _response(connection, self.routes.http(route, headers, request.path, self.base))

    async def serve_feed(self, connection: ServerConnection) -> None:
        await FeedConnection(self.routes.hub, _WebsocketsChannel(connection)).run()


class _WebsocketsChannel:
    def __init__(self, connection: ServerConnection) -> None:
        self.connection = connection

    async def send(self, text: str) -> None:
        try:
            await self.connection.send(text)
        except ConnectionClosed:
            raise ChannelClosed from None

    async def receive(self) -> str | None:
        while True:
            try:
                message = await self.connection.recv()
            except ConnectionClosed:
                return None
            if isinstance(message, str):
                return message

    async def close(self, code: int, reason: str) -> None:
        await self.connection.close(code, reason)


def _response(connection: ServerConnection, answer: Answer) -> Response:
    response = connection.respond(answer.status, "")
    response.body = answer.body
    del response.headers["Content-Type"]
    del response.headers["Content-Length"]
    for name, value in answer.headers:
        response.headers[name] = value
    response.headers["Content-Length"] = str(len(answer.body))
    return response


@asynccontextmanager
async def serve_inspector(hub: LiveHub, host: str, port: int, *, token: str | None,
                          dialect: Dialect | None = None, redactor: Redactor | None = None) -> AsyncIterator[str]:
    """A server of its own for the inspector (`relay attach --inspector HOST:PORT`); yields the
    page's URL. `/` leads to the page. websockets' own log lines (handshake headers at debug
    level, the token subprotocol among them) go through `redactor` (default: one that knows the
    token)."""
    endpoint = InspectorEndpoint(hub, token=token, dialect=dialect)
    logger = RedactingLogger(logging.getLogger(f"{WEBSOCKET_LOGGER}.inspector"), redactor or Redactor([token]))

    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        path = urlsplit(request.path).path
        if path == "/":
            response = connection.respond(HTTPStatus.FOUND, "")
            response.headers["Location"] = BASE_PATH
            return response
        if not endpoint.owns(path):
            return _response(connection, _error(HTTPStatus.NOT_FOUND, f"nothing at {path}; the inspector is at "
                                                                      f"{BASE_PATH}"))
        return endpoint.process_request(connection, request)

    async with serve(endpoint.serve_feed, host, port, process_request=process_request,
                     select_subprotocol=select_subprotocol, compression=None, close_timeout=1.0,
                     server_header=f"relay/{__version__}", logger=logger) as server:
        bound_host, bound_port = next(iter(server.sockets)).getsockname()[:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        yield f"http://{shown}:{bound_port}{BASE_PATH}"


# ---- ASGI -----------------------------------------------------------------------------------
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def asgi_app(hub: LiveHub, *, token: str | None, dialect: Dialect | None = None,
             allow_origins: Sequence[str] = ()) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The inspector as an ASGI application, to mount where a web app serves (Starlette:
    `Mount("/inspector", app=asgi_app(hub, token=...))`; FastAPI: `app.mount(...)`). Its routes
    are relative to where it is mounted (the scope's `root_path`)."""
    routes = InspectorRoutes(hub, token=token, dialect=dialect, allow_origins=allow_origins)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        base = scope.get("root_path", "")
        route = _route_path(scope)
        headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in scope.get("headers", ())]
        target = scope.get("path", "") + ("?" + scope["query_string"].decode("latin-1")
                                          if scope.get("query_string") else "")
        if scope["type"] == "http":
            answer = routes.http(route, headers, target, base) if scope.get("method") in ("GET", "HEAD") else \
                _error(HTTPStatus.METHOD_NOT_ALLOWED, "the inspector answers GET only")
            await send({"type": "http.response.start", "status": answer.status,
                        "headers": [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in answer.headers]})
            await send({"type": "http.response.body", "body": answer.body if scope.get("method") != "HEAD" else b""})
            return
        if scope["type"] != "websocket":
            return
        refusal = (routes.refusal(headers, target) if route.rstrip("/") == "/feed"
                   else _error(HTTPStatus.NOT_FOUND, f"no WebSocket at {base}{route}; the feed is {base}/feed"))
        if refusal is not None:
            await _deny(scope, receive, send, refusal)
            return
        offered = scope.get("subprotocols") or []
        await send({"type": "websocket.accept",
                    **({"subprotocol": INSPECTOR_SUBPROTOCOL} if INSPECTOR_SUBPROTOCOL in offered else {})})
        await FeedConnection(hub, _AsgiChannel(receive, send)).run()

    return app


def _route_path(scope: Scope) -> str:
    """The path under the mount: Starlette keeps the full `path` and extends `root_path`; some
    servers strip it."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


async def _deny(scope: Scope, receive: Receive, send: Send, answer: Answer) -> None:
    """Refuse a WebSocket with the HTTP answer where the server can send one (the ASGI denial
    response extension), else by closing it before it opens (the server answers 403)."""
    await receive()   # websocket.connect
    if "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": answer.status,
                    "headers": [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in answer.headers]})
        await send({"type": "websocket.http.response.body", "body": answer.body})
    else:
        await send({"type": "websocket.close", "code": 1008})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class _AsgiChannel:
    def __init__(self, receive: Receive, send: Send) -> None:
        self._receive = receive
        self._send = send
        self._closed = False

    async def send(self, text: str) -> None:
        if self._closed:
            raise ChannelClosed
        try:
            await self._send({"type": "websocket.send", "text": text})
        except OSError:   # servers raise their own errors for a gone client; most are OSErrors
            self._closed = True
            raise ChannelClosed from None

    async def receive(self) -> str | None:
        while True:
            message = await self._receive()
            if message["type"] == "websocket.disconnect":
                self._closed = True
                return None
            if message["type"] == "websocket.receive" and message.get("text") is not None:
                return message["text"]

    async def close(self, code: int, reason: str) -> None:
        if not self._closed:
            self._closed = True
            await self._send({"type": "websocket.close", "code": code, "reason": reason})


# ---- answers --------------------------------------------------------------------------------
def _json(status: int, body: Any, *headers: tuple[str, str]) -> Answer:
    return Answer(status, (("Content-Type", "application/json"), ("Cache-Control", "no-store"), *headers),
                  (json.dumps(body) + "\n").encode())


def _error(status: HTTPStatus, message: str, **headers: str) -> Answer:
    return _json(status.value, {"error": {"type": "invalid_request_error",
                                          "code": status.phrase.lower().replace(" ", "_"), "message": message}},
                 *headers.items())
