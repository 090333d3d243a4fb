"""Where the live inspector is served: three routes under a base path (`/inspector` on `relay
serve`'s port and on `relay attach --inspector`'s own; wherever an ASGI app mounts it):

    GET {base}            the page (no session data in it: it asks for the token, then the rest)
    GET {base}/sessions   the live and recent sessions, as JSON                       token needed
    WS  {base}/feed       the live feed (relay/inspector/live/feed.py)                token needed

The token is the relay's client token, checked by the realtime endpoint's own check
(`relay.session.access.presents_token`): a Bearer header (what the page sends to `/sessions`), the
token subprotocol (what the page offers when it opens the feed, beside `relay-inspector`: a
browser cannot set headers on a WebSocket), or the dialect's key forms. The page reads the token
from the fragment of its address (`/inspector#token=...`, which a browser never sends to a server,
so no server or proxy logs it) or from a form, keeps it in the tab's sessionStorage and takes it
out of the address bar. Without a configured token (a relay on loopback) no token is asked.
Whatever the token, a browser page from another origin is refused (`Origin` must be the page's
own host, or one of `--allow-origin`): a site a user visits cannot read a loopback relay's feed.
And the page's own host must be one of the relay's names (`hosts`: loopback's, the address it
listens on, its `--allow-origin` hosts; `relay.session.access.page_hosts`), else 421: a site
whose name an attacker points at the relay's address (DNS rebinding) is not the page's origin.

`InspectorEndpoint` serves the routes on a transport's server (relay/session/transport.py:
`decide` answers the HTTP routes and refuses feeds; `serve_feed` runs an accepted one);
`asgi_app` is the same for an ASGI server (mount it in a Starlette or FastAPI app);
`serve_inspector` runs a server of its own.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from http import HTTPStatus
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

import anyio

from relay import __version__
from relay.dialects import Dialect
from relay.dialects.base import TOKEN_SUBPROTOCOL
from relay.inspector.live.feed import ChannelClosed, FeedConnection
from relay.inspector.live.hub import LiveHub
from relay.inspector.model import SessionModel
from relay.inspector.page import PAGE_POLICY, asset, fill_template, script_json
from relay.observe.logs import WEBSOCKET_LOGGER, RedactingLogger, Redactor
from relay.session.access import (
    INSPECTOR_SUBPROTOCOL,
    foreign_host,
    own_origin,
    page_hosts,
    presents_token,
    select_subprotocol,
)
from relay.session.http import Answer, Request
from relay.session.policy import POLICY_VIOLATION
from relay.session.transport import Backend, Frame, Transport, TransportClosed
from relay.transports.websockets import BACKEND as WEBSOCKETS

log = logging.getLogger("relay.inspector")

BASE_PATH = "/inspector"
FEED_MAX_MESSAGE_BYTES = 1024 * 1024   # what a page sends on its feed is a few words of JSON
FEED_MAX_WAITING = 64                  # its messages not read yet: more and it is cut off
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


class InspectorRoutes:
    """The routes and their checks, independent of the server (see the module docstring).
    `token` None: nothing is asked (the edge allows that on loopback only). `hosts` None: any
    `Host` (an application that mounts the ASGI app checks its own)."""

    def __init__(self, hub: LiveHub, *, token: str | None, dialect: Dialect | None = None,
                 allow_origins: Sequence[str] = (), hosts: frozenset[str] | None = None) -> None:
        self.hub = hub
        self.token = token
        self.dialect = dialect
        self.allow_origins = tuple(allow_origins)
        self.hosts = hosts

    def http(self, route: str, headers: Headers, target: str, base: str) -> Answer:
        """The answer to a GET of `route` (the path under the base)."""
        route = route.rstrip("/")
        headers = list(headers)
        misdirected = self.misdirected(headers)
        if misdirected is not None:
            return misdirected
        if route == "":
            return Answer(200, _PAGE_HEADERS, render_live_page(base).encode())
        if route == "/sessions":
            refusal = self.refusal(headers, target)
            if refusal is not None:
                return refusal
            return Answer.json(200, self.hub.sessions())
        if route == "/feed":
            return Answer.error(HTTPStatus.UPGRADE_REQUIRED, "the live feed is a WebSocket", Upgrade="websocket")
        return Answer.error(HTTPStatus.NOT_FOUND, f"nothing at {base}{route}; the inspector is at {base}")

    def misdirected(self, headers: Headers) -> Answer | None:
        """The refusal of a request that names a host the relay is not known by (None: it is)."""
        host = foreign_host(headers, self.hosts)
        if host is None:
            return None
        log.info("inspector refused a request for another host name", extra={"host": host})
        return Answer.error(HTTPStatus.MISDIRECTED_REQUEST, "this relay is not known by that host name")

    def refusal(self, headers: Headers, target: str) -> Answer | None:
        """Why a request for the sessions or the feed is refused (None: it is not)."""
        headers = list(headers)
        misdirected = self.misdirected(headers)
        if misdirected is not None:
            return misdirected
        origin = own_origin(headers, self.allow_origins)
        if origin is not None:
            log.info("inspector refused a page from another origin", extra={"origin": origin})
            return Answer.error(HTTPStatus.FORBIDDEN, "this origin is not allowed")
        if self.token is not None and not presents_token(headers, target, self.token, self.dialect):
            log.info("inspector refused a request without the relay token", extra={"status": 401})
            return Answer.error(HTTPStatus.UNAUTHORIZED, "missing or wrong relay token (Authorization: Bearer, or the "
                                f"{TOKEN_SUBPROTOCOL}<token> subprotocol)",
                                **{"WWW-Authenticate": 'Bearer realm="relay"'})
        return None


# ---- a transport's server ---------------------------------------------------------------------
class InspectorEndpoint:
    """The routes on a transport's server, under `base` (`relay serve` hands it the requests
    under /inspector; `serve_inspector` all of them)."""

    def __init__(self, hub: LiveHub, *, token: str | None, dialect: Dialect | None = None,
                 allow_origins: Sequence[str] = (), hosts: frozenset[str] | None = None,
                 base: str = BASE_PATH) -> None:
        self.routes = InspectorRoutes(hub, token=token, dialect=dialect, allow_origins=allow_origins, hosts=hosts)
        self.base = base

    def owns(self, path: str) -> bool:
        return path == self.base or path.startswith(self.base + "/")

    def is_feed(self, target: str) -> bool:
        return urlsplit(target).path.rstrip("/") == self.base + "/feed"

    def decide(self, request: Request) -> Answer | None:
        """The answer to a request under the base (GET and HEAD); None lets an accepted feed open."""
        route = request.path[len(self.base):]
        headers = list(request.headers)
        if request.method not in ("GET", "HEAD"):
            return Answer.error(HTTPStatus.METHOD_NOT_ALLOWED, "the inspector answers GET only", Allow="GET, HEAD")
        if route.rstrip("/") == "/feed" and request.upgrade and request.method == "GET":
            return self.routes.refusal(headers, request.target)
        answer = self.routes.http(route, headers, request.target, self.base)
        return answer.for_head() if request.method == "HEAD" else answer

    async def serve_feed(self, transport: Transport) -> None:
        """Run an accepted feed until the page leaves."""
        channel = TransportChannel(transport)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(channel.pump)
            await FeedConnection(self.routes.hub, channel).run()
            tasks.cancel_scope.cancel()


class TransportChannel:
    """The feed's `Channel` over a `Transport`: the page's text messages, as the transport
    delivers them, wait here for the feed's reader (`pump` is the task that receives)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._incoming, self._received = anyio.create_memory_object_stream[str](FEED_MAX_WAITING)

    async def pump(self) -> None:
        try:
            await self.transport.receive(self._deliver)
        except TransportClosed:
            pass
        except anyio.WouldBlock:   # a page that floods its feed with messages is not worth reading
            await self.transport.close(None, abort=True)
        finally:
            self._incoming.close()

    def _deliver(self, message: Frame, more: bool) -> None:
        if isinstance(message, str):
            self._incoming.send_nowait(message)

    async def send(self, text: str) -> None:
        try:
            await self.transport.send([text])
        except TransportClosed:
            raise ChannelClosed from None

    async def receive(self) -> str | None:
        try:
            return await self._received.receive()
        except anyio.EndOfStream:
            return None

    async def close(self, code: int, reason: str) -> None:
        await self.transport.close(code, reason)


@asynccontextmanager
async def serve_inspector(hub: LiveHub, host: str, port: int, *, token: str | None,
                          dialect: Dialect | None = None, redactor: Redactor | None = None,
                          backend: Backend = WEBSOCKETS) -> AsyncIterator[str]:
    """A server of its own for the inspector (`relay attach --inspector HOST:PORT`), on
    `backend`'s transport; yields the page's URL. `/` leads to the page. The library's own log
    lines (handshake headers at debug level, the token subprotocol among them) go through
    `redactor` (default: one that knows the token). It answers to the names `page_hosts` gives
    for `host`."""
    endpoint = InspectorEndpoint(hub, token=token, dialect=dialect, hosts=page_hosts(host, (), token))
    logger = RedactingLogger(logging.getLogger(f"{WEBSOCKET_LOGGER}.inspector"), redactor or Redactor([token]))

    def decide(request: Request) -> Answer | None:
        path = request.path
        if path == "/":
            return Answer(HTTPStatus.FOUND.value, (("Location", BASE_PATH),))
        if not endpoint.owns(path):
            return Answer.error(HTTPStatus.NOT_FOUND, f"nothing at {path}; the inspector is at {BASE_PATH}")
        return endpoint.decide(request)

    async def serve_feed(transport: Transport, request: Request) -> None:
        await endpoint.serve_feed(transport)

    listener = await backend.serve(serve_feed, host, port, decide=decide, subprotocol=select_subprotocol,
                                   max_frame_bytes=FEED_MAX_MESSAGE_BYTES, server_header=f"relay/{__version__}",
                                   logger=logger)
    try:
        bound_host, bound_port = listener.address
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        yield f"http://{shown}:{bound_port}{BASE_PATH}"
    finally:
        listener.close()
        with anyio.CancelScope(shield=True):
            await listener.wait_closed()


# ---- ASGI -----------------------------------------------------------------------------------
Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def asgi_app(hub: LiveHub, *, token: str | None, dialect: Dialect | None = None,
             allow_origins: Sequence[str] = (), hosts: frozenset[str] | None = None
             ) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The inspector as an ASGI application, to mount where a web app serves (Starlette:
    `Mount("/inspector", app=asgi_app(hub, token=...))`; FastAPI: `app.mount(...)`). Its routes
    are relative to where it is mounted (the scope's `root_path`). `hosts`: the `Host` names it
    answers to (`relay.session.access.page_hosts`); None, any (the application checks)."""
    routes = InspectorRoutes(hub, token=token, dialect=dialect, allow_origins=allow_origins, hosts=hosts)

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
                Answer.error(HTTPStatus.METHOD_NOT_ALLOWED, "the inspector answers GET only")
            await send({"type": "http.response.start", "status": answer.status,
                        "headers": [(n.lower().encode("latin-1"), v.encode("latin-1")) for n, v in answer.headers]})
            await send({"type": "http.response.body", "body": answer.body if scope.get("method") != "HEAD" else b""})
            return
        if scope["type"] != "websocket":
            return
        refusal = (routes.refusal(headers, target) if route.rstrip("/") == "/feed"
                   else Answer.error(HTTPStatus.NOT_FOUND, f"no WebSocket at {base}{route}; the feed is {base}/feed"))
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
        await send({"type": "websocket.close", "code": POLICY_VIOLATION})


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
