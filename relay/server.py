"""`relay serve`: the proxy edge. Realtime clients connect here instead of to the provider; each
client gets its own upstream connection and its own engine, and the relay runs its tools inside
the session.

    client --ws--> RelayServer --ws--> provider (OpenAI, Azure OpenAI, Azure AI Foundry, Gemini Live)
                        |
                 Engine (GeminiEngine for Gemini) + SessionLoop (one per client)

The handshake decides everything cheap first (path, origin, the relay's own token) so a refused
client never causes an upstream connection. `/healthz` and `/metrics` share the port. Frames are
moved by `SessionLoop`; this module only accepts, connects, counts, logs and shuts down.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hmac
import ipaddress
import json
import logging
import os
import secrets
import signal
import socket
import ssl
import sys
import time
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Callable, Literal, Sequence
from urllib.parse import parse_qsl, urlsplit

import anyio
from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as websocket_serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from relay import __version__
from relay.dialects import DIALECT_CHOICES, Dialect, DialectError, resolve_dialect
from relay.dialects.base import TOKEN_SUBPROTOCOL
from relay.engine import DEFAULT_HISTORY_LIMIT, EngineConfig, Notice
from relay.engine import Engine, new_engine
from relay.logs import (
    LOG_FORMATS,
    LOG_LEVELS,
    WEBSOCKET_LOGGER,
    AnomalyLog,
    RedactingLogger,
    Redactor,
    configure_logging,
    log_notice,
)
from relay.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from relay.metrics import Metrics, TrafficTap
from relay.recording import RecordingWriter
from relay.policy import (
    DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_QUEUE_BYTES,
    SHUTDOWN_CODE,
    EventBudget,
)
from relay.session import SessionEnd, SessionLoop
from relay.tools import (
    DEFAULT_OUTPUT_LIMIT,
    ToolDefinitionError,
    ToolLoadError,
    ToolRegistry,
    ToolSpec,
    load_tools,
)
from relay.upstream import DEFAULT_UPSTREAM, TokenProvider, Upstream, UpstreamUnavailable, default_upstream

log = logging.getLogger("relay.server")

DEFAULT_PORT = 8000
AUTH_TOKEN_ENV = "RELAY_AUTH_TOKEN"


class ConfigError(ValueError):
    """The server cannot start with this configuration; the message says what to change."""


@dataclass
class ServerConfig:
    """Everything `relay serve` takes. `api_key=None` reads the dialect's variable
    (`OPENAI_API_KEY`, `AZURE_OPENAI_API_KEY`, `GEMINI_API_KEY`) from the environment;
    `token_provider` (an async callable returning an Entra ID `AccessToken`) replaces the key with
    refreshed Bearer tokens."""

    upstream: str = ""     # empty: the dialect's endpoint (Gemini Live's for `gemini`), else OpenAI's
    dialect: str | None = None
    tools: Sequence[str | ToolSpec | Callable[..., Any]] | ToolRegistry = ()
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    auth_token: str | None = None
    insecure_no_auth: bool = False
    allow_origins: Sequence[str] = ()
    expose_tool_events: bool = False
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_queue_bytes: int = DEFAULT_QUEUE_BYTES
    max_client_events_per_second: float = DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND
    open_timeout: float = 10.0
    drain_seconds: float = 10.0
    record_dir: str | Path | None = None
    record_audio: Literal["keep", "drop"] = "keep"
    api_key: str | None = None
    token_provider: TokenProvider | None = None
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    # recent items, responses and finished calls each session's engine keeps (None: all)
    history_limit: int | None = DEFAULT_HISTORY_LIMIT
    reuse_port: bool = False
    # Serve wss:// with this certificate chain and key (PEM files). The google-genai SDK always
    # connects with wss://, so a Gemini client reaches the relay only over TLS (here, or in front).
    tls_cert: str | Path | None = None
    tls_key: str | Path | None = None
    # Python API: called with (session id, notice) for every engine notice (tool calls started
    # and answered, follow-ups, fillers, anomalies, errors): for dashboards, tests and the demo.
    on_notice: Callable[[str, Notice], None] | None = None

    def __post_init__(self) -> None:
        if not self.upstream:
            self.upstream = default_upstream(self.dialect)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def tool_registry(tools: Sequence[str | ToolSpec | Callable[..., Any]] | ToolRegistry) -> ToolRegistry:
    """One registry from what a configuration lists: files or modules by name (`--tools`),
    decorated or plain functions, specs; a registry is used as it is. A tool that cannot be
    loaded or defined is a ConfigError."""
    if isinstance(tools, ToolRegistry):
        return tools
    registry = ToolRegistry()
    try:
        for source in tools:
            if isinstance(source, str):
                for spec in load_tools(source):
                    registry.add(spec)
            else:
                registry.add(source)
    except (ToolLoadError, ToolDefinitionError) as exc:
        raise ConfigError(str(exc)) from None
    return registry


def upstream_dialect(upstream: str, dialect: str | None) -> Dialect:
    """The dialect to speak to a ws:// or wss:// upstream: `dialect` if given, else inferred from
    the URL. ConfigError says what to change."""
    if urlsplit(upstream).scheme not in ("ws", "wss"):
        raise ConfigError(f"--upstream must be a ws:// or wss:// URL, not {upstream!r}")
    try:
        return resolve_dialect(dialect, upstream)
    except DialectError as exc:
        raise ConfigError(str(exc)) from None


def _check(config: ServerConfig) -> Dialect:
    """Refuse a configuration that cannot work or would be unsafe; returns the dialect."""
    dialect = upstream_dialect(config.upstream, config.dialect)
    if not config.auth_token and not config.insecure_no_auth and not is_loopback(config.host):
        raise ConfigError(
            f"refusing to listen on {config.host} without a client token: anyone who reaches it "
            f"would use your provider key. Set --auth-token (or {AUTH_TOKEN_ENV}), or pass "
            "--insecure-no-auth if something in front of the relay authenticates clients"
        )
    if config.max_frame_bytes <= 0 or config.max_queue_bytes <= 0:
        raise ConfigError("frame and queue limits must be positive")
    if not config.max_client_events_per_second >= 0:
        raise ConfigError("--max-client-events-per-second must be >= 0 (0: no limit)")
    if config.drain_seconds < 0 or config.open_timeout <= 0:
        raise ConfigError("--drain-seconds must be >= 0 and the open timeout > 0")
    if config.record_audio not in ("keep", "drop"):
        raise ConfigError(f"--record-audio must be keep or drop, not {config.record_audio!r}")
    if (config.tls_cert is None) != (config.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    return dialect


def _tls_context(config: ServerConfig) -> ssl.SSLContext | None:
    if config.tls_cert is None or config.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(config.tls_cert, config.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot use --tls-cert {config.tls_cert} / --tls-key {config.tls_key}: {exc}") from None
    return context


@dataclass
class ProxySession:
    """One client connection and, once connected, its upstream and engine."""

    id: str
    client: ServerConnection
    remote: str
    path: str
    dialect: Dialect
    started_at: float = field(default_factory=time.time)
    loop: SessionLoop | None = None
    end: SessionEnd | None = None
    anomalies: AnomalyLog = field(default_factory=AnomalyLog)
    _connect_scope: anyio.CancelScope | None = field(default=None, repr=False)
    _closing: tuple[int, str] | None = field(default=None, repr=False)
    _closed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def engine(self) -> Engine | None:
        return self.loop.engine if self.loop is not None else None

    async def wait_closed(self) -> SessionEnd:
        """Wait until the session is over and its sockets are closed; returns how it ended."""
        await self._closed.wait()
        assert self.end is not None
        return self.end

    async def close(self, code: int, reason: str) -> None:
        """End the session from the relay's side (shutdown): the engine abandons its calls,
        both sockets are closed with `code`."""
        self._closing = (code, reason)
        if self.loop is not None:
            await self.loop.finish("relay", code, reason)
        elif self._connect_scope is not None:
            self._connect_scope.cancel()


class RelayServer:
    """The proxy server. Use `async with RelayServer(config) as server:` (stops with a drain on
    exit) or `await server.serve_forever()` (until `request_stop()` or cancellation)."""

    def __init__(self, config: ServerConfig) -> None:
        self.dialect = _check(config)
        self._tls = _tls_context(config)
        self.tools = tool_registry(config.tools)
        self.config = config
        self.metrics = Metrics()
        self.redactor = Redactor([config.auth_token])
        self.upstream = Upstream.configured(config, self.dialect, self.redactor)
        self._engine_config = EngineConfig(
            mode="proxy",
            hide_tool_events=not config.expose_tool_events,
            declare_tools=True,
            hold_client_creates=True,
            output_limit=config.output_limit,
            history_limit=config.history_limit,
        )
        self._sessions: dict[str, ProxySession] = {}
        self._sessions_changed = asyncio.Event()
        self._ws_server: Server | None = None
        self._address: tuple[str, int] | None = None   # kept after shutdown, for messages
        self._stop_requested = asyncio.Event()
        self._hurry = asyncio.Event()
        self._shutdown_done: asyncio.Event | None = None

    # ---- public surface ----------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._bound_address()[1]

    @property
    def host(self) -> str:
        return self._bound_address()[0]

    @property
    def base_url(self) -> str:
        """`ws://host:port` (`wss://` with TLS): what an SDK's base URL points at."""
        host = self.host
        return f"{'wss' if self._tls else 'ws'}://{f'[{host}]' if ':' in host else host}:{self.port}"

    @property
    def url(self) -> str:
        """The client URL: the dialect's client path (`/v1/realtime`, or the Gemini Live path)."""
        return self.base_url + self.dialect.client_path

    @property
    def sessions(self) -> dict[str, ProxySession]:
        """The open sessions by id (a snapshot)."""
        return dict(self._sessions)

    @property
    def draining(self) -> bool:
        return self._shutdown_done is not None

    async def __aenter__(self) -> RelayServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    async def start(self) -> None:
        if self._ws_server is not None:
            return
        config = self.config
        self._ws_server = await websocket_serve(
            self._serve_client,
            config.host,
            config.port,
            process_request=self._process_request,
            select_subprotocol=_select_subprotocol,
            max_size=config.max_frame_bytes,
            compression=None,   # see Upstream.connect: no per-frame deflate on the relay
            close_timeout=1.0,
            server_header=f"relay/{__version__}",
            ssl=self._tls,
            logger=RedactingLogger(logging.getLogger(f"{WEBSOCKET_LOGGER}.client"), self.redactor),
            reuse_port=config.reuse_port or None,
        )
        host, port = next(iter(self._ws_server.sockets)).getsockname()[:2]
        self._address = (host, port)
        if not config.auth_token and is_loopback(config.host):
            log.warning("no client token configured: listening on loopback (%s) only", config.host,
                        extra={"auth": "none"})
        elif not config.auth_token:
            log.warning("no client token configured (--insecure-no-auth): whoever reaches %s uses "
                        "the provider key", config.host, extra={"auth": "none"})
        log.info("listening on %s", self.url, extra={
            "url": self.url, "upstream": self.upstream.host, "dialect": self.dialect.name,
            "tools": self.tools.names, "auth": "token" if config.auth_token else "none",
            "pid": os.getpid(),
        })

    async def serve_forever(self) -> None:
        """Serve until `request_stop()` (then drain) or cancellation (then close at once)."""
        await self.start()
        try:
            await self._stop_requested.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self.shutdown(None if self._stop_requested.is_set() else 0.0)

    def request_stop(self) -> None:
        """Begin a graceful stop (what SIGTERM does); a second call cuts the drain short."""
        if self._stop_requested.is_set():
            self._hurry.set()
            self._sessions_changed.set()
        self._stop_requested.set()

    async def shutdown(self, drain_seconds: float | None = None) -> None:
        """Stop accepting, let open sessions run up to `drain_seconds` (default: the config's),
        then close the rest with 1001 and wait until every connection is gone."""
        if self._ws_server is None:
            return
        if self._shutdown_done is not None:
            await self._shutdown_done.wait()
            return
        self._shutdown_done = asyncio.Event()
        drain = self.config.drain_seconds if drain_seconds is None else drain_seconds
        self._ws_server.server.close()   # no new connections; open ones go on
        if self._sessions and drain > 0:
            log.info("draining %d open sessions for up to %g s", len(self._sessions), drain,
                     extra={"sessions": len(self._sessions), "drain_seconds": drain})
            with anyio.move_on_after(drain):
                while self._sessions and not self._hurry.is_set():
                    self._sessions_changed.clear()
                    await self._sessions_changed.wait()
        async with anyio.create_task_group() as closers:
            for session in list(self._sessions.values()):
                closers.start_soon(session.close, SHUTDOWN_CODE, "relay shutting down")
        self._ws_server.close()
        await self._ws_server.wait_closed()
        log.info("stopped", extra={"sessions_total": self.metrics.sessions_total})
        self._shutdown_done.set()

    def _bound_address(self) -> tuple[str, int]:
        if self._address is None:
            raise RuntimeError("the server is not started")
        return self._address

    # ---- handshake ---------------------------------------------------------------------
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        """Answer HTTP endpoints, and refuse a WebSocket client before any upstream work."""
        path = urlsplit(request.path).path.rstrip("/") or "/"
        if path == "/healthz":
            return _json_response(connection, HTTPStatus.OK, self.health())
        if path == "/metrics":
            response = connection.respond(HTTPStatus.OK, self.metrics.render(open_sessions=len(self._sessions)))
            _set_header(response, "Content-Type", METRICS_CONTENT_TYPE)
            return response
        if path not in self.dialect.client_paths:
            return self._refuse(connection, HTTPStatus.NOT_FOUND,
                                f"no realtime endpoint at {path}; connect to {urlsplit(self.url).path}")
        if not any("websocket" in value.lower() for value in request.headers.get_all("Upgrade")):
            response = self._refuse(connection, HTTPStatus.UPGRADE_REQUIRED,
                                    f"{path} is a WebSocket endpoint; connect with a realtime client")
            _set_header(response, "Upgrade", "websocket")
            return response
        origins = self.config.allow_origins
        if origins:
            offered = request.headers.get_all("Origin")
            if offered and any(origin not in origins for origin in offered):
                return self._refuse(connection, HTTPStatus.FORBIDDEN, "this origin is not allowed")
        if self.config.auth_token and not self._authorized(request):
            response = self._refuse(connection, HTTPStatus.UNAUTHORIZED,
                                    f"missing or wrong relay token ({self.dialect.client_auth_forms})")
            _set_header(response, "WWW-Authenticate", 'Bearer realm="relay"')
            return response
        if any(name.lower() == "call_id" for name, _ in parse_qsl(urlsplit(request.path).query)):
            # with the relay's key, a call_id would join any live call of the account: sideband
            # connections are `relay attach`'s business, never a proxied client's
            return self._refuse(connection, HTTPStatus.BAD_REQUEST,
                                "call_id is not accepted here: the relay opens new sessions only "
                                "(attach to a live call with `relay attach`)")
        return None

    def _refuse(self, connection: ServerConnection, status: HTTPStatus, message: str) -> Response:
        self.metrics.handshakes_refused[status.value] += 1
        log.info("handshake refused: %s", message, extra={
            "status": status.value, "remote": _remote(connection)})
        return _json_response(connection, status, {"error": {
            "type": "invalid_request_error", "code": status.phrase.lower().replace(" ", "_"),
            "message": message}})

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

    def health(self) -> dict[str, Any]:
        return {
            "status": "draining" if self.draining else "ok",
            "version": __version__,
            "sessions": len(self._sessions),
            "upstream": self.upstream.host,
            "dialect": self.dialect.name,
            "pid": os.getpid(),
        }

    # ---- sessions ----------------------------------------------------------------------
    async def _serve_client(self, client: ServerConnection) -> None:
        request = client.request
        assert request is not None
        target = urlsplit(request.path)
        session = ProxySession(
            id="rs_" + secrets.token_hex(6),
            client=client,
            remote=_remote(client),
            path=target.path,
            dialect=self.dialect.for_client(request.headers),
        )
        self._sessions[session.id] = session
        self.metrics.sessions_total += 1
        log.info("session start", extra={
            "session_id": session.id, "remote": session.remote, "path": session.path,
            "dialect": session.dialect.name, "upstream": self.upstream.host})
        try:
            session.end = await self._run_session(session, parse_qsl(target.query, keep_blank_values=True))
        finally:
            end = session.end = session.end or SessionEnd("relay", 1011, "internal error")
            del self._sessions[session.id]
            session._closed.set()
            self._sessions_changed.set()
            self.metrics.sessions_ended[end.by] += 1
            engine = session.engine
            log.info("session end", extra={
                "session_id": session.id, "by": end.by, "code": end.code, "reason": end.reason,
                "seconds": round(time.time() - session.started_at, 3),
                "tool_calls": len(engine.calls) if engine is not None else 0})

    async def _run_session(self, session: ProxySession, query: list[tuple[str, str]]) -> SessionEnd:
        upstream = None
        failure: str | None = None
        async with anyio.create_task_group() as connecting:
            session._connect_scope = connecting.cancel_scope
            connecting.start_soon(_cancel_when_closed, session.client, connecting.cancel_scope)
            try:
                upstream = await self.upstream.connect(session.dialect, query, client_path=session.path)
            except UpstreamUnavailable as exc:
                failure = str(exc)
            connecting.cancel_scope.cancel()
        if failure is not None:
            return await self._upstream_unavailable(session, failure)
        if upstream is None:   # the client left, or the server is closing, while we connected
            code, reason = session._closing or (1000, "client left before the upstream connected")
            await session.client.close(code, reason)
            return SessionEnd("client" if session._closing is None else "relay", code, reason)
        engine = new_engine(self.tools, dialect=session.dialect, config=self._engine_config,
                            session_id=session.id, id_prefix=session.id)
        tap = TrafficTap(self.metrics, self._recording(session, engine))
        loop = SessionLoop(
            engine,
            upstream=upstream,
            client=session.client,
            recorder=tap,
            on_notice=lambda notice: self._on_notice(session, notice),
            max_queue_bytes=self.config.max_queue_bytes,
            close_timeout=1.0,
            client_budget=EventBudget.optional(self.config.max_client_events_per_second),
            redact=self.redactor.frame,
        )
        session.loop = loop
        end: SessionEnd | None = None
        try:
            end = await loop.run()
            return end
        finally:
            tap.close(end.reason if end is not None else "relay error")
            if end is None:   # the loop failed: do not leave the provider connection open
                with anyio.move_on_after(1.0, shield=True):
                    await upstream.close(1011, "relay error")

    async def _upstream_unavailable(self, session: ProxySession, message: str) -> SessionEnd:
        """Tell the client why there is no session, in the protocol's own error event, and close.
        A protocol without one (Gemini Live) has the close reason say it."""
        self.metrics.count_error("relay", UpstreamUnavailable.code)
        log.warning("upstream unavailable: %s", message, extra={"session_id": session.id})
        event = session.dialect.client_error_event(f"{session.id}_e0", UpstreamUnavailable.code, message,
                                                   error_type="server_error")
        try:
            if event is None:
                await session.client.close(1011, f"upstream unavailable: {message}"[:120])
            else:
                frame = json.dumps(event)
                await session.client.send(frame)
                self.metrics.frames["relay>client"] += 1
                self.metrics.frame_bytes["relay>client"] += len(frame)
                await session.client.close(1011, "upstream unavailable")
        except ConnectionClosed:
            pass
        return SessionEnd("relay", 1011, "upstream unavailable")

    def _recording(self, session: ProxySession, engine: Engine) -> RecordingWriter | None:
        if self.config.record_dir is None:
            return None
        return RecordingWriter(
            self.config.record_dir,
            session_id=session.id,
            dialect=session.dialect.name,
            upstream=self.upstream.url,
            tools=self.tools.names,
            mode="proxy",
            record_audio=self.config.record_audio,
            secrets=self.redactor.secrets,
            extra_header=engine.recording_header(),
        )

    def _on_notice(self, session: ProxySession, notice: Notice) -> None:
        self.metrics.count_notice(notice, self.tools)
        if self.config.on_notice is not None:
            self.config.on_notice(session.id, notice)
        log_notice(log, notice, anomalies=session.anomalies, session_id=session.id)


async def _cancel_when_closed(client: ServerConnection, scope: anyio.CancelScope) -> None:
    await client.wait_closed()
    scope.cancel()


def _select_subprotocol(connection: ServerConnection, offered: Sequence[str]) -> str | None:
    """`realtime` when offered; the token subprotocol is never echoed back."""
    return "realtime" if "realtime" in offered else None


def _remote(connection: ServerConnection) -> str:
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


# ---- running it ----------------------------------------------------------------------------

def run_until_signalled(server: RelayServer, signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT)) -> int:
    """Run the server in a new event loop until one of `signals` (then drain; a second signal
    ends the drain). Returns the exit status."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        for signum in signals:   # before "listening on": a signal right after it must drain
            loop.add_signal_handler(signum, _on_signal, server, signum)
        try:
            await server.start()
        except OSError as exc:
            log.error("cannot listen on %s:%s: %s", server.config.host, server.config.port, exc.strerror or exc)
            return 1
        await server.serve_forever()
        return 0

    return asyncio.run(main())


def _on_signal(server: RelayServer, signum: int) -> None:
    name = signal.Signals(signum).name
    if server.draining:
        log.info("%s again: closing open sessions now", name)
    else:
        log.info("%s: no new connections; draining open sessions", name,
                 extra={"drain_seconds": server.config.drain_seconds})
    server.request_stop()


def run_workers(server: RelayServer, workers: int) -> int:
    """Fork `workers` processes that each listen on the same port (SO_REUSEPORT: the kernel
    spreads connections over them). The parent only supervises: SIGTERM or SIGINT is passed on
    as SIGTERM, so every worker drains."""
    if not hasattr(os, "fork") or not hasattr(socket, "SO_REUSEPORT"):
        log.error("--workers needs fork() and SO_REUSEPORT (Linux, BSD, macOS)")
        return 2
    config = server.config
    family, _, _, _, address = socket.getaddrinfo(config.host, config.port, type=socket.SOCK_STREAM)[0]
    reservation = socket.socket(family, socket.SOCK_STREAM)
    reservation.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        reservation.bind(address)   # holds the port (chosen here when 0) without accepting on it
    except OSError as exc:
        log.error("cannot listen on %s:%s: %s", config.host, config.port, exc.strerror or exc)
        reservation.close()
        return 1
    server.config = dataclasses.replace(config, port=reservation.getsockname()[1], reuse_port=True)
    children: list[int] = []
    for _ in range(workers):
        pid = os.fork()
        if pid == 0:   # the worker: the parent tells it when to stop
            status = 1
            try:
                reservation.close()
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                status = run_until_signalled(server, (signal.SIGTERM,))
            finally:
                os._exit(status)
        children.append(pid)

    def forward(signum: int, frame: object) -> None:
        for child in children:
            try:
                os.kill(child, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    while children:
        pid, wait_status = os.waitpid(-1, 0)
        if pid in children:
            children.remove(pid)
            code = os.waitstatus_to_exitcode(wait_status)
            if code != 0:
                log.error("worker %d exited with status %d", pid, code)
                status = status or 1
    reservation.close()
    return status


def serve(tools: Sequence[str | ToolSpec | Callable[..., Any]] | ToolRegistry = (), **options: Any) -> int:
    """Run the proxy in this process until SIGTERM/SIGINT, like `relay serve`:

        relay.serve([get_weather], port=8000, auth_token="...")

    `options` are `ServerConfig` fields. This blocks; inside a running asyncio application use
    `RelayServer` instead. Logs go to stderr as text unless logging is already configured."""
    server = RelayServer(ServerConfig(tools=tools, **options))
    if not logging.getLogger().handlers:
        configure_logging("text")
    return run_until_signalled(server)


# ---- command line --------------------------------------------------------------------------

def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream", default=None, metavar="URL",
                        help=f"provider realtime URL (default {DEFAULT_UPSTREAM}; with --dialect gemini, "
                             "Gemini Live's BidiGenerateContent endpoint)")
    parser.add_argument("--dialect", choices=DIALECT_CHOICES,
                        help="wire dialect of the upstream (default: inferred from the URL)")
    parser.add_argument("--tools", action="append", default=[], metavar="SPEC",
                        help="a .py file or module with @tool functions (repeatable)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks one)")
    parser.add_argument("--auth-token", default=os.environ.get(AUTH_TOKEN_ENV) or None, metavar="TOKEN",
                        help=f"token clients must present (default ${AUTH_TOKEN_ENV}; prefer the variable: "
                             "arguments are visible to other users)")
    parser.add_argument("--insecure-no-auth", action="store_true",
                        help="allow listening beyond loopback without a client token")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="browser Origin allowed to connect (repeatable; default: any)")
    parser.add_argument("--expose-tool-events", action="store_true",
                        help="let clients see the relay's tools, calls and outputs")
    parser.add_argument("--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME_BYTES, metavar="N",
                        help="largest WebSocket message accepted from either side (default 16 MiB)")
    parser.add_argument("--max-queue-bytes", type=int, default=DEFAULT_QUEUE_BYTES, metavar="N",
                        help="bytes queued toward a peer that is not reading before it is closed "
                             "(default 32 MiB)")
    parser.add_argument("--max-client-events-per-second", type=float, default=DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND,
                        metavar="N", help="a client sending more events than this (bursts: twice as many) gets an "
                                          "error event and is closed with 1008 (default 1000; 0: no limit)")
    parser.add_argument("--history-items", type=int, default=DEFAULT_HISTORY_LIMIT, metavar="N",
                        help="recent items, responses and finished calls each session keeps in memory "
                             f"(default {DEFAULT_HISTORY_LIMIT}; 0: all; the recording keeps everything)")
    parser.add_argument("--drain-seconds", type=float, default=10.0, metavar="S",
                        help="on SIGTERM/SIGINT, how long open sessions may go on (default 10)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="processes sharing the port with SO_REUSEPORT (default 1)")
    parser.add_argument("--tls-cert", metavar="PEM", help="serve wss:// with this certificate chain")
    parser.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    parser.add_argument("--record", metavar="DIR", help="write one recording per session into DIR")
    parser.add_argument("--record-audio", choices=("keep", "drop"), default="keep",
                        help="keep or drop audio in recordings (default keep)")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="json",
                        help="stderr log lines as JSON (default) or text")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info")


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_format, level=args.log_level)
    if args.workers < 1:
        log.error("--workers must be at least 1")
        return 2
    # `--tools mymodule` should find a module next to the user, as `python -m` would.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        server = RelayServer(ServerConfig(
            upstream=args.upstream or "",
            dialect=args.dialect,
            tools=args.tools,
            host=args.host,
            port=args.port,
            auth_token=args.auth_token,
            insecure_no_auth=args.insecure_no_auth,
            allow_origins=args.allow_origin,
            expose_tool_events=args.expose_tool_events,
            max_frame_bytes=args.max_frame_bytes,
            max_queue_bytes=args.max_queue_bytes,
            max_client_events_per_second=args.max_client_events_per_second,
            drain_seconds=args.drain_seconds,
            history_limit=args.history_items or None,
            record_dir=args.record,
            record_audio=args.record_audio,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
        ))
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    if server.upstream.api_key is None:
        log.warning("no provider key in the environment (%s): connecting to the upstream without credentials",
                    " or ".join(server.dialect.key_env))
    if args.workers > 1:
        return run_workers(server, args.workers)
    return run_until_signalled(server)
