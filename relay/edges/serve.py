"""`relay serve`: the proxy edge. Realtime clients connect here instead of to the provider; each
client gets its own upstream connection and its own engine, and the relay runs its tools inside
the session.

    client --ws--> RelayServer --ws--> provider (OpenAI, Azure OpenAI, Azure AI Foundry, Gemini Live)
                        |
                 Engine (GeminiEngine for Gemini) + SessionLoop (one per client)

The handshake (relay/edges/handshake.py) decides everything cheap first (path, origin, the
relay's own token) so a refused client never causes an upstream connection; `/healthz` and
`/metrics` share the port. The sockets are the transport backend's (relay/transports/: it
listens, and opens the upstream connections); frames are moved by `SessionLoop`; this module
keeps each session's life: it accepts, connects, counts, logs and shuts down. The configuration
is relay/edges/config.py's, process control relay/edges/process.py's, the command line
relay/cli/'s.

A stop (SIGTERM) drains: the listener stays open so that a load balancer sees `/healthz` turn 503
and new sessions refused with 503 (and sends them elsewhere) while open sessions run to their
end, up to `drain_seconds`; then the listener closes and what is left is closed with 1001
(policy.SHUTDOWN_CODE).

With a store (`--store`), a session of the OpenAI Realtime family is resumable: its client gets a
resume token and may reconnect with it to any replica sharing the store and carry the session on
(relay/edges/resume.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import anyio

from relay import __version__
from relay.dialects import Dialect
from relay.edges.config import EdgeRuntime, ServerConfig, is_loopback
from relay.edges.handle_resume import GeminiResumingLoop
from relay.edges.going_away import GoingAwayLoop
from relay.edges.handshake import Handshake
from relay.edges.process import run_until_signalled
from relay.edges.history_resume import PLANS as LIVE_PLANS
from relay.edges.history_resume import LiveResumingLoop, live_loop_options
from relay.edges.reseed import ReseedingLoop
from relay.edges.resume import (
    RESUME_QUERY,
    ResumeKeeper,
    ResumeRefused,
    Resumes,
    ResumingLoop,
    Resumption,
    new_token,
    resume_token_of,
    run_resumable,
)
from relay.edges.upstream import UpstreamUnavailable
from relay.engine import Engine, GeminiEngine, LiveEngine, Notice, OpenAIEngine, new_engine
from relay.engine.actions import TOOL_CALL
from relay.errors import ANOTHER_PORT, ConfigError, cannot_listen
from relay.inspector.live import InspectorEndpoint, LiveHub, LiveTap
from relay.observe.logs import (
    WEBSOCKET_LOGGER,
    AnomalyLog,
    RedactingLogger,
    configure_logging,
    log_notice,
)
from relay.observe.metrics import Metrics
from relay.observe.tracing import (
    TRACE_PARAMS,
    SessionTrace,
    Tracing,
    trace_carrier,
    tracing_for,
)
from relay.recording.format import RELAY_TO_CLIENT
from relay.recording.taps import Taps
from relay.recording.writer import RecordingWriter
from relay.session.access import page_hosts, select_subprotocol
from relay.session.http import Request
from relay.session.loop import SessionEnd, SessionLoop
from relay.session.policy import (
    INTERNAL_ERROR,
    NORMAL_CLOSURE,
    POLICY_VIOLATION,
    SHUTDOWN_CODE,
    TRY_AGAIN_LATER,
    EventBudget,
    ended_in_failure,
    short_close_reason,
)
from relay.session.transport import Listener, Transport, TransportClosed
from relay.tools.sources import ToolSources

__all__ = ["ConfigError", "ProxySession", "RelayServer", "ServerConfig", "run_server", "serve"]

log = logging.getLogger("relay.server")


@dataclass
class ProxySession:
    """One client connection and, once connected, its upstream and engine."""

    id: str
    client: Transport
    remote: str
    path: str
    dialect: Dialect
    started_at: float = field(default_factory=time.time)
    loop: SessionLoop | None = None
    end: SessionEnd | None = None
    anomalies: AnomalyLog = field(default_factory=AnomalyLog)
    trace: SessionTrace | None = None   # its spans, when tracing is on
    resume_token: str | None = None   # the token the client presented to resume a session
    keeper: ResumeKeeper | None = None   # its resume state in the store, when resumable
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


class RelayServer(EdgeRuntime):
    """The proxy server. Use `async with RelayServer(config) as server:` (stops with a drain on
    exit) or `await server.serve_forever()` (until `request_stop()` or cancellation). Raises
    ConfigError for a configuration that cannot work (a provider's URL without its key among
    them) or would be unsafe."""

    config: ServerConfig

    def __init__(self, config: ServerConfig) -> None:
        super().__init__(config, secrets=[config.auth_token])
        self._tls = config.tls_context()
        self.metrics = Metrics()
        self.mcp_listeners.append(self.metrics.count_mcp)
        self.store_listeners.append(self.metrics.count_store)
        self.store_latency_listeners.append(self.metrics.observe_store_write)
        self._engine_config = self.engine_settings(
            mode="proxy",
            hide_tool_events=not config.expose_tool_events,
            declare_tools=True,
            hold_limit=config.hold_limit,
            fillers_in_conversation=config.fillers_in_conversation,
        )
        # the live inspector (relay/inspector/live/): off unless asked for
        self.live: LiveHub | None = LiveHub() if config.inspector else None
        self._inspector = (InspectorEndpoint(self.live, token=config.auth_token, dialect=self.dialect,
                                             allow_origins=config.allow_origins,
                                             hosts=page_hosts(config.host, config.allow_origins, config.auth_token))
                           if self.live is not None else None)
        self._handshake = Handshake(config, self.dialect, self.metrics, health=self.health,
                                    draining=lambda: self.draining, sessions=lambda: len(self._sessions),
                                    inspector=self._inspector)
        self._sessions: dict[str, ProxySession] = {}
        self._sessions_changed = asyncio.Event()
        self._listener: Listener | None = None
        self._address: tuple[str, int] | None = None   # kept after shutdown, for messages
        self._stop_requested = asyncio.Event()
        self._draining = False
        self._hurry = asyncio.Event()
        self._shutdown_done: asyncio.Event | None = None
        self._tracing: Tracing | None = None   # decided in start(): in the process that serves
        # resumable sessions, with a store (relay/edges/resume.py)
        self.resumes = Resumes(self.write_ahead, credential=config.auth_token, seconds=config.resume_seconds,
                               lease_seconds=config.lease_seconds,
                               owner=f"{os.uname().nodename}:{os.getpid()}:{secrets.token_hex(3)}",
                               plans=LIVE_PLANS) if config.store else None
        if self.resumes is not None:
            self.resumes.on_count = self.metrics.count_resume

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
        """The client URL: the dialect's client path (`/v1/realtime`, Voice Live's
        `/voice-live/realtime`, or the Gemini Live path)."""
        return self.base_url + self.dialect.client_path

    @property
    def sessions(self) -> dict[str, ProxySession]:
        """The open sessions by id (a snapshot)."""
        return dict(self._sessions)

    @property
    def draining(self) -> bool:
        """Stopping: `/healthz` answers 503 and new sessions are refused; open ones go on."""
        return self._draining

    async def __aenter__(self) -> RelayServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.shutdown()

    async def start(self) -> None:
        if self._listener is not None:
            return
        config = self.config
        self._tracing = tracing_for(config.tracer_provider)
        self.metrics.ready()
        await self.start_tools()   # the MCP servers' tools, before the first session
        try:
            self._listener = await self.backend.serve(
                self._serve_client,
                config.host,
                config.port,
                decide=self._handshake.decide,
                subprotocol=select_subprotocol,
                max_frame_bytes=config.max_frame_bytes,
                server_header=f"relay/{__version__}",
                logger=RedactingLogger(logging.getLogger(f"{WEBSOCKET_LOGGER}.client"), self.redactor),
                tls=self._tls,
                reuse_port=config.reuse_port,
            )
        except BaseException:
            await self.close_tools()
            raise
        self._address = self._listener.address
        if not config.auth_token and is_loopback(config.host):
            log.warning("no client token configured: listening on loopback (%s) only", config.host,
                        extra={"auth": "none"})
        elif not config.auth_token:
            log.warning("no client token configured (--insecure-no-auth): whoever reaches %s uses "
                        "the provider key", config.host, extra={"auth": "none"})
        if self._inspector is not None:
            log.info("live inspector at %s%s", self.base_url.replace("ws", "http", 1), self._inspector.base,
                     extra={"inspector": self.base_url.replace("ws", "http", 1) + self._inspector.base})
        log.info("listening on %s", self.url, extra={
            "url": self.url, "upstream": self.upstream.host, "dialect": self.dialect.name,
            "tools": self.tools.names, "auth": "token" if config.auth_token else "none",
            "pid": os.getpid(),
        })
        if not self.tools.names:
            log.info("no tools given (--tools): relaying only; the clients' own tools work as without the relay")

    async def serve_forever(self) -> None:
        """Serve until `request_stop()` (then drain) or cancellation (then close at once)."""
        await self.start()
        try:
            await self._stop_requested.wait()
        finally:
            with anyio.CancelScope(shield=True):
                await self.shutdown(None if self._stop_requested.is_set() else 0.0)

    def request_stop(self) -> None:
        """Begin a graceful stop (what SIGTERM does): from now on `/healthz` answers 503 and new
        sessions are refused; a second call cuts the drain short."""
        if self._stop_requested.is_set():
            self._hurry.set()
            self._sessions_changed.set()
        self._draining = True
        self._stop_requested.set()

    async def shutdown(self, drain_seconds: float | None = None) -> None:
        """Refuse new sessions (503, `/healthz` too) while open ones run up to `drain_seconds`
        (default: the config's), then stop listening, close the rest with 1001 and wait until
        every connection is gone. The listener stays open during the drain so that a load
        balancer's health check sees the 503 rather than a refused connection."""
        if self._listener is None:
            return
        if self._shutdown_done is not None:
            await self._shutdown_done.wait()
            return
        self._shutdown_done = asyncio.Event()
        self._draining = True
        drain = self.config.drain_seconds if drain_seconds is None else drain_seconds
        if self._sessions and drain > 0:
            log.info("draining %d open sessions for up to %g s", len(self._sessions), drain,
                     extra={"sessions": len(self._sessions), "drain_seconds": drain})
            with anyio.move_on_after(drain):
                while self._sessions and not self._hurry.is_set():
                    self._sessions_changed.clear()
                    await self._sessions_changed.wait()
        self._listener.stop_accepting()   # no new connections at all from here on
        async with anyio.create_task_group() as closers:
            for session in list(self._sessions.values()):
                closers.start_soon(session.close, SHUTDOWN_CODE, "relay shutting down")
        self._listener.close()
        await self._listener.wait_closed()
        await self.close_tools()
        self._handshake.failures.flush()
        log.info("stopped", extra={"sessions_total": self.metrics.sessions_total})
        if self._tracing is not None:
            await anyio.to_thread.run_sync(self._tracing.flush)
        self._shutdown_done.set()

    def _bound_address(self) -> tuple[str, int]:
        if self._address is None:
            raise RuntimeError("the server is not started")
        return self._address

    # ---- health -----------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """`/healthz`: open sessions of every worker (`relay serve --workers N`: from the shared
        metrics), by worker pid, and which worker answered (`pid`)."""
        by_worker = self.metrics.open_sessions_by_worker()
        fields = self.health_fields(draining=self.draining, sessions=sum(by_worker.values())) | {
            "workers": {str(pid): sessions for pid, sessions in by_worker.items()}}
        if self.resumes is not None:
            fields["resumes"] = dict(self.resumes.counts)
        return fields

    # ---- sessions ----------------------------------------------------------------------
    async def _serve_client(self, client: Transport, request: Request) -> None:
        if self._inspector is not None and self._inspector.is_feed(request.target):
            await self._inspector.serve_feed(client)
            return
        limit = self.config.max_sessions
        if limit is not None and len(self._sessions) >= limit:   # handshakes that passed at once
            await client.close(TRY_AGAIN_LATER, "the relay has its maximum of sessions open")
            return
        session = ProxySession(
            id="rs_" + secrets.token_hex(6),
            client=client,
            remote=request.remote,
            path=request.path,
            dialect=self.dialect.for_client(request.headers),
            resume_token=resume_token_of(request),
        )
        query = [(name, value) for name, value in request.query if name != RESUME_QUERY]
        if self._tracing is not None:
            session.trace = self._tracing.session(
                session_id=session.id, mode="proxy", dialect=session.dialect.name, upstream=self.upstream.host,
                carrier=trace_carrier(request.headers, query), **{"client.address": session.remote.rpartition(":")[0]})
        self._sessions[session.id] = session
        self.metrics.session_started()
        log.info("session start", extra={
            "session_id": session.id, "remote": session.remote, "path": session.path,
            "dialect": session.dialect.name, "upstream": self.upstream.host, "pid": os.getpid()})
        try:
            session.end = await self._run_session(session, [(name, value) for name, value in query
                                                            if name not in TRACE_PARAMS])
        finally:
            end = session.end = session.end or SessionEnd("relay", INTERNAL_ERROR, "internal error")
            del self._sessions[session.id]
            session._closed.set()
            self._sessions_changed.set()
            self.metrics.session_ended(end.by)
            engine = session.engine
            if session.trace is not None:
                session.trace.end(by=end.by, code=end.code, reason=end.reason, failed=ended_in_failure(end.by, end.code),
                                  tool_calls=len(engine.calls) if engine is not None else 0)
            log.info("session end", extra={
                "session_id": session.id, "by": end.by, "code": end.code, "reason": end.reason,
                "seconds": round(time.time() - session.started_at, 3),
                "tool_calls": len(engine.calls) if engine is not None else 0})

    async def _run_session(self, session: ProxySession, query: list[tuple[str, str]]) -> SessionEnd:
        resumption: Resumption | None = None
        lease = None
        if session.resume_token is not None:
            try:
                resumption, lease = await self._resumed(session)
            except ResumeRefused as refused:
                return await self._refuse(session, refused.code, str(refused), POLICY_VIOLATION, "resume refused")
        try:
            return await self._connect_and_run(session, query, resumption, lease)
        finally:
            if lease is not None and session.keeper is None:   # never ran: let the session go
                with anyio.CancelScope(shield=True):
                    await lease.end()

    async def _resumed(self, session: ProxySession) -> tuple[Resumption, Any]:
        """The session a client's resume token names, held for this connection (ResumeRefused)."""
        assert session.resume_token is not None
        if self.resumes is None:
            raise ResumeRefused("resume_not_supported", "this relay keeps no sessions to resume (no --store)")
        try:
            resumption, lease = await self.resumes.find(session.resume_token, session.dialect, self.tools, session.id,
                                                        lambda reason: self._lose(session, reason))
        except ResumeRefused as refused:
            self.resumes.count(f"refused_{refused.code}")
            raise
        self.resumes.count("resumed")
        log.info("session resumed", extra={"session_id": session.id, "resumes": resumption.state.session_id,
                                           "items": len(resumption.seed), **resumption.adoption.counts()})
        return resumption, lease

    def _lose(self, session: ProxySession, reason: str) -> None:
        if isinstance(session.loop, ResumingLoop):
            session.loop.lose(reason)

    async def _connect_and_run(self, session: ProxySession, query: list[tuple[str, str]],
                               resumption: Resumption | None, lease: Any) -> SessionEnd:
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
        if upstream is not None and session._closing is not None:   # connected as the server began closing
            await upstream.close(None, abort=True)
            upstream = None
        if upstream is None:   # the client left, or the server is closing, while we connected
            code, reason = session._closing or (NORMAL_CLOSURE, "client left before the upstream connected")
            await session.client.close(code, reason)
            return SessionEnd("client" if session._closing is None else "relay", code, reason)
        try:
            session.loop, recorder = self._session_loop(session, upstream, query, resumption)
        except BaseException:   # the upstream connection is the session's until its loop owns it
            await upstream.close(None, abort=True)   # drops it before it awaits anything
            raise
        if not isinstance(session.loop, ResumingLoop):
            return await session.loop.run(on_end=recorder.close)
        assert self.resumes is not None
        if lease is None and not self.write_ahead.degraded:   # a new session: held for this connection
            lease = self.resumes.lease(session.loop.engine.session_id, session.id,
                                       lambda reason: self._lose(session, reason))
            if not await lease.hold():
                lease = None
            self.resumes.count("issued")
        session.keeper = session.loop.keeper(self.resumes, lease, resumption)
        return await run_resumable(session.loop, session.keeper, resumption, recorder.close)

    def _session_loop(self, session: ProxySession, upstream: Transport, query: list[tuple[str, str]],
                      resumption: Resumption | None = None) -> tuple[SessionLoop, Taps | LiveTap]:
        """The engine, recording and loop of a session whose upstream just connected (a GPT-Live
        session under `--live-reseed`: a `ReseedingLoop`, which reconnects with `query`; with a
        store, an OpenAI Realtime session: a `ResumingLoop`, `resumption` its start if resumed, and
        a GPT-Live one a `LiveResumingLoop`, which also reseeds under `--live-reseed`; a
        Gemini Live session: a `GoingAwayLoop`, which resumes upstream when the service says goAway)."""
        engine = new_engine(self.tools, dialect=session.dialect, config=self._engine_config,
                            session_id=resumption.state.session_id if resumption else session.id,
                            id_prefix=session.id)
        recording = self.recording(session_id=session.id, dialect=session.dialect, mode="proxy",
                                   extra_header=engine.recording_header(), writer=RecordingWriter)
        taps = Taps(self.metrics.tap(), recording)
        recorder: Taps | LiveTap = taps
        if self.live is not None:
            header = self.session_header(session_id=session.id, dialect=session.dialect, mode="proxy",
                                         extra_header=engine.recording_header())
            recorder = self.live.open_session(session.id, header=header, as_recorded=self.recording_filter(recording),
                                              recording=recording, taps=taps)
        loop_type: Any = SessionLoop
        reseeding: dict[str, Any] = {}
        reconnect = {"reconnect": lambda: self.upstream.connect(session.dialect, query, client_path=session.path)}
        if self.resumes is not None and isinstance(engine, LiveEngine):   # relay/edges/history_resume.py
            loop_type, reseeding = LiveResumingLoop, live_loop_options(
                session.resume_token, self.config.resume_seconds, reconnect, self.config.live_reseed)
        elif self.config.live_reseed and isinstance(engine, LiveEngine):
            loop_type, reseeding = ReseedingLoop, reconnect
        elif isinstance(engine, GeminiEngine) and self.resumes is not None:   # relay/edges/handle_resume.py
            loop_type, reseeding = GeminiResumingLoop, {**reconnect, "resumes": self.resumes, "connection": session.id}
        elif isinstance(engine, GeminiEngine):   # a goAway is met by resuming (relay/edges/going_away.py)
            loop_type, reseeding = GoingAwayLoop, reconnect
        elif self.resumes is not None and self.resumes.supports(session.dialect) and isinstance(engine, OpenAIEngine):
            loop_type, reseeding = ResumingLoop, {"token": session.resume_token or new_token(),
                                                  "expires_in": self.config.resume_seconds}
        loop = loop_type(
            engine,
            **reseeding,
            upstream=upstream,
            client=session.client,
            recorder=recorder,
            on_notice=lambda notice: self._on_notice(session, notice),
            max_queue_bytes=self.config.max_queue_bytes,
            stall_seconds=self.config.stall_seconds,
            close_timeout=1.0,
            client_budget=EventBudget.optional(self.config.max_client_events_per_second),
            redactor=self.redactor,
            handler_scope=session.trace.handler_scope if session.trace is not None else None,
            write_ahead=self.write_ahead,
        )
        return loop, recorder

    async def _upstream_unavailable(self, session: ProxySession, message: str) -> SessionEnd:
        return await self._refuse(session, UpstreamUnavailable.code, message, INTERNAL_ERROR, "upstream unavailable")

    async def _refuse(self, session: ProxySession, code: str, message: str, close_code: int, what: str) -> SessionEnd:
        """Tell the client why there is no session (`what`: `message`), in the protocol's own error
        event, and close with `close_code`. A protocol without one (Gemini Live) has the close
        reason say it."""
        self.metrics.count_error("relay", code)
        log.warning("%s: %s", what, message, extra={"session_id": session.id})
        event = session.dialect.client_error_event(f"{session.id}_e0", code, message, error_type="server_error")
        try:
            if event is None:
                await session.client.close(close_code, short_close_reason(f"{what}: {message}"))
            else:
                frame = json.dumps(event)
                await session.client.send([frame])
                self.metrics.count_frame(RELAY_TO_CLIENT, frame)
                await session.client.close(close_code, what)
        except TransportClosed:
            pass
        return SessionEnd("relay", close_code, what)

    def _on_notice(self, session: ProxySession, notice: Notice) -> None:
        self.metrics.count_notice(notice, self.tools)
        if session.keeper is not None and (notice.kind == TOOL_CALL or notice.fields.get("phase") == "done"):
            session.keeper.changed()   # a call answered, a response ended: its resume state is written
        if session.trace is not None:
            session.trace.notice(notice)
        if self.config.on_notice is not None:
            self.config.on_notice(session.id, notice)
        log_notice(log, notice, anomalies=session.anomalies, session_id=session.id)


async def _cancel_when_closed(client: Transport, scope: anyio.CancelScope) -> None:
    await client.close(None)   # no close of ours: until the client's (nobody reads it meanwhile)
    scope.cancel()



# ---- running it ----------------------------------------------------------------------------

async def run_until_stopped(server: RelayServer) -> int:
    """Listen and serve until `request_stop()`, then drain; the exit status. An address that
    cannot be listened on raises UnusableInput (`relay.cli.exits`)."""
    try:
        await server.start()
    except OSError as exc:
        raise cannot_listen(server.config.host, server.config.port, exc, if_in_use=ANOTHER_PORT) from None
    await server.serve_forever()
    return 0


async def drain_on_signal(server: RelayServer, name: str, again: bool) -> None:
    """A stop signal: new sessions are refused, open sessions drain; a second one ends the drain."""
    server.request_stop()
    if again:
        log.info("%s again: closing open sessions now", name)
    else:
        log.info("%s: draining: /healthz answers 503, new sessions are refused, open ones go on", name,
                 extra={"drain_seconds": server.config.drain_seconds, "sessions": len(server.sessions)})


def run_server(server: RelayServer, signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT), *,
               loop: str = "auto") -> int:
    """Run the server in a new event loop (`loop`: relay.edges.process.LOOPS) until one of
    `signals` (then drain; a second signal ends the drain). Returns the exit status."""
    return run_until_signalled(lambda: run_until_stopped(server),
                               lambda name, again: drain_on_signal(server, name, again), signals, loop=loop)


def serve(tools: ToolSources = (), **options: Any) -> int:
    """Run the proxy in this process until SIGTERM/SIGINT, like `relay serve`:

        relay.serve([get_weather], port=8000, auth_token="...")

    `options` are `ServerConfig` fields. This blocks; inside a running asyncio application use
    `RelayServer` instead. Logs go to stderr as text unless logging is already configured. Returns
    the exit status; from then on SIGTERM and SIGINT are ignored in this process, which is on its
    way out (a late signal does not interrupt what the caller does after)."""
    server = RelayServer(ServerConfig(tools=tools, **options))
    if not logging.getLogger().handlers:
        configure_logging("text")
    return run_server(server)
