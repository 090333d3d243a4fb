"""The edges' shared configuration: what `relay serve` (`ServerConfig`), `relay attach` and
`relay sidecar` (`SidecarConfig`) take, the checks that refuse a configuration that cannot work,
the one way a list of tools becomes a registry (`relay.tools.sources`, for serve, attach, sidecar,
replay and export alike), how the upstream's dialect is decided, and `EdgeRuntime`: what every
session of one configuration shares (dialect, tools, provider connection, secrets, engine
settings, recordings).

Each edge module builds on these, side by side: none of them imports another edge. The limits'
defaults are `relay.session.policy`'s.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import ssl
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Literal, Sequence
from urllib.parse import urlsplit

from relay import __version__
from relay.dialects import DIALECTS, Dialect, DialectError, infer_dialect, resolve_dialect
from relay.edges.upstream import TokenProvider, Upstream, default_upstream
from relay.engine import DEFAULT_HISTORY_LIMIT, DEFAULT_HOLD_LIMIT, EngineConfig, Notice
from relay.errors import ConfigError
from relay.mcp.servers import ToolSet
from relay.observe.logs import keep_out_of_logs
from relay.recording.format import session_header
from relay.recording.redact import Redactor
from relay.recording.writer import RECORDING_FILE_MODE, RecordingFilter, RecordingWriter
from relay.session.policy import (
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_OPEN_TIMEOUT,
    DEFAULT_QUEUE_BYTES,
    DEFAULT_STALL_SECONDS,
)
from relay.session.transport import Backend
from relay.store import StoreError, open_store
from relay.store.lease import DEFAULT_LEASE_SECONDS
from relay.store.writeahead import WriteAhead
from relay.tools.render import DEFAULT_OUTPUT_LIMIT
from relay.tools.mcp_config import McpSettings
from relay.tools.registry import ToolRegistry
from relay.tools.sources import ToolSources
from relay.transports import backend_named

DEFAULT_PORT = 8000
AUTH_TOKEN_ENV = "RELAY_AUTH_TOKEN"
DEFAULT_RECONNECT_ATTEMPTS = 6
DEFAULT_RECONNECT_DELAY = 0.2
DEFAULT_RESUME_SECONDS = 600.0   # a session may be resumed this long after its client left

log = logging.getLogger("relay.config")


def upstream_dialect(upstream: str, dialect: str | None) -> Dialect:
    """The dialect to speak to a ws:// or wss:// upstream: `dialect` if given, else inferred from
    the URL (logged when the path alone said it). ConfigError says what to change."""
    if urlsplit(upstream).scheme not in ("ws", "wss"):
        raise ConfigError(f"--upstream must be a ws:// or wss:// URL, not {upstream!r}")
    try:
        resolved = resolve_dialect(dialect, upstream)
    except DialectError as exc:
        raise ConfigError(str(exc)) from None
    if not dialect and infer_dialect(upstream) is None:
        path = urlsplit(upstream).path
        log.info("speaking the %s dialect to the upstream, inferred from its path %s (--dialect chooses another)",
                 resolved.name, path, extra={"dialect": resolved.name, "path": path})
    return resolved


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class EdgeConfig:
    """What every edge takes. `api_key=None` reads the dialect's variable (`OPENAI_API_KEY`,
    `AZURE_OPENAI_API_KEY`, `AZURE_VOICELIVE_API_KEY`, `XAI_API_KEY`, `GEMINI_API_KEY`) from the
    environment; `token_provider` (an async callable returning an Entra ID `AccessToken`)
    replaces the key with refreshed Bearer tokens."""

    tools: ToolSources = ()
    # MCP servers whose tools join `tools`, and the policy for the provider's own MCP approvals
    # (relay/tools/mcp_config.py: --mcp, --mcp-config, ...)
    mcp: McpSettings | None = None
    upstream: str = ""     # empty: the dialect's endpoint (Gemini Live's for `gemini`), else OpenAI's
    dialect: str | None = None
    record_dir: str | Path | None = None
    record_audio: Literal["keep", "drop"] = "keep"
    record_mode: int = RECORDING_FILE_MODE   # of each recording file (its directory's: directory_mode)
    api_key: str | None = None
    token_provider: TokenProvider | None = None
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_queue_bytes: int = DEFAULT_QUEUE_BYTES
    # a peer whose queue is over the back-pressure mark and that takes nothing for this long is closed
    stall_seconds: float = DEFAULT_STALL_SECONDS
    open_timeout: float = DEFAULT_OPEN_TIMEOUT
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    # recent items, responses and finished calls each session's engine keeps (None: all)
    history_limit: int | None = DEFAULT_HISTORY_LIMIT
    # Python API: called with (session id, notice) for every engine notice (tool calls started
    # and answered, follow-ups, fillers, anomalies, errors): for dashboards, tests and the demo.
    on_notice: Callable[[str, Notice], None] | None = None
    # Python API: an OpenTelemetry TracerProvider for the sessions' spans (relay/observe/tracing.py);
    # None: the application's global provider if it set one, else the OTEL_* variables, else none.
    tracer_provider: Any = None
    # the WebSocket library of the edge's sockets (relay.transports.TRANSPORTS): `auto` is picows
    # when installed (the `fast` extra), else websockets
    transport: str = "auto"
    # where the sessions' call records are written ahead (relay/store/): None or `memory` in this
    # process, a `redis://` URL in Redis (the `store` extra)
    store: str | None = None

    def __post_init__(self) -> None:
        if not self.upstream:
            self.upstream = default_upstream(self.dialect)

    def check(self) -> Dialect:
        """Refuse a configuration that cannot work; returns the upstream's dialect."""
        dialect = upstream_dialect(self.upstream, self.dialect)
        if self.record_audio not in ("keep", "drop"):
            raise ConfigError(f"--record-audio must be keep or drop, not {self.record_audio!r}")
        if not 0 <= self.record_mode <= 0o777 or self.record_mode & 0o600 != 0o600:
            raise ConfigError(f"--record-mode must be an octal mode from 600 to 777, not {self.record_mode:o}")
        if self.max_frame_bytes <= 0 or self.max_queue_bytes <= 0 or self.open_timeout <= 0 or self.stall_seconds <= 0:
            raise ConfigError("frame and queue limits, the stall time and the open timeout must be positive")
        return dialect


@dataclass
class ServerConfig(EdgeConfig):
    """Everything `relay serve` takes: the edge's settings, where to listen, who may connect,
    and how to stop."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    auth_token: str | None = None
    insecure_no_auth: bool = False
    allow_origins: Sequence[str] = ()
    expose_tool_events: bool = False
    # GPT-Live: a session whose upstream connection drops is carried on in a new session seeded
    # with its configuration and conversation (relay/edges/reseed.py)
    live_reseed: bool = False
    # how long a client's response.create waits for the relay's running tools before it goes up
    # without their outputs (None: until they are in); clients give up on their own creates
    hold_limit: float | None = DEFAULT_HOLD_LIMIT
    # the relay's fillers join the provider's conversation, where a client that keeps what it
    # hears (the voice frameworks) has them too, instead of staying out of band
    fillers_in_conversation: bool = False
    max_client_events_per_second: float = DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    max_sessions: int | None = None   # sessions open at once in this process; None: no limit
    reuse_port: bool = False
    # Serve wss:// with this certificate chain and key (PEM files). The google-genai SDK always
    # connects with wss://, so a Gemini client reaches the relay only over TLS (here, or in front).
    tls_cert: str | Path | None = None
    tls_key: str | Path | None = None
    # Serve the live session inspector at /inspector on the same port, behind the same token.
    inspector: bool = False
    # with a store: how long after its client left a session may be resumed with its token, and
    # the lease that holds a session for one connection at a time (relay/edges/resume.py)
    resume_seconds: float = DEFAULT_RESUME_SECONDS
    lease_seconds: float = DEFAULT_LEASE_SECONDS

    def check(self) -> Dialect:
        """Refuse a configuration that cannot work or would be unsafe; returns the dialect."""
        dialect = super().check()
        if not self.auth_token and not self.insecure_no_auth and not is_loopback(self.host):
            raise ConfigError(
                f"refusing to listen on {self.host} without a client token: anyone who reaches it "
                f"would use your provider key. Set --auth-token (or {AUTH_TOKEN_ENV}), or pass "
                "--insecure-no-auth if something in front of the relay authenticates clients"
            )
        if self.hold_limit is not None and not self.hold_limit > 0:
            raise ConfigError("--hold-limit must be a positive number of seconds")
        if not self.max_client_events_per_second >= 0:
            raise ConfigError("--max-client-events-per-second must be >= 0 (0: no limit)")
        if self.drain_seconds < 0:
            raise ConfigError("--drain-seconds must be >= 0")
        if self.max_sessions is not None and self.max_sessions < 1:
            raise ConfigError("--max-sessions must be >= 1 (0: no limit)")
        if not self.resume_seconds > 0 or not self.lease_seconds > 0:
            raise ConfigError("--resume-seconds and --lease-seconds must be > 0")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("--tls-cert and --tls-key go together")
        return dialect

    def tls_context(self) -> ssl.SSLContext | None:
        """The server side of TLS, when a certificate is configured."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot use --tls-cert {self.tls_cert} / --tls-key {self.tls_key}: {exc}") from None
        return context


@dataclass
class SidecarConfig(EdgeConfig):
    """Everything `relay attach` takes: the edge's settings, and how to treat the call.

    By default the tools are assumed declared when the call was accepted, and the session is
    left alone; `declare_tools` adds them with one `session.update` that keeps the other party's
    tools. A sideband that drops while the call lives is reopened up to `reconnect_attempts`
    times, `reconnect_delay` seconds before the first attempt and twice as long before each next."""

    declare_tools: bool = False
    reconnect_attempts: int = DEFAULT_RECONNECT_ATTEMPTS
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY
    # with a shared store (redis://): each attached call is held under a lease of this many
    # seconds, which another replica takes over once it expires (relay/store/lease.py)
    lease_seconds: float = DEFAULT_LEASE_SECONDS

    def check(self) -> Dialect:
        dialect = super().check()
        if not dialect.call_sideband:
            raise ConfigError(f"the {dialect.name} dialect has no call sideband: attach works with the OpenAI family only")
        if self.reconnect_attempts < 0 or self.reconnect_delay < 0:
            raise ConfigError("--reconnect-attempts and --reconnect-delay must be >= 0")
        if not self.lease_seconds > 0:
            raise ConfigError("--lease-seconds must be > 0")
        return dialect

    def reconnect_waits(self) -> list[float]:
        """The wait before each reconnect attempt: exponential, bounded in number."""
        return [self.reconnect_delay * 2**attempt for attempt in range(self.reconnect_attempts)]


class EdgeRuntime:
    """What the sessions of one configuration share: the checked configuration, its dialect, the
    tools (`tool_set`: the `@tool` functions, and the MCP servers' once `start_tools` reached
    them), the transport backend its sockets use (`config.transport`: relay/transports/), the
    provider connection (URL, credentials, limits) and the secrets kept out of logs and recordings
    (the MCP servers' headers and env among them). Raises ConfigError for a configuration that
    cannot work."""

    def __init__(self, config: EdgeConfig, *, secrets: Sequence[str | None] = ()) -> None:
        self.dialect = config.check()
        self.mcp_listeners: list[Callable[[str, str, str], None]] = []
        self.store_listeners: list[Callable[[str], None]] = []   # the store's events (the metric)
        self.store_latency_listeners: list[Callable[[float], None]] = []   # each write's seconds
        self.tool_set = ToolSet(config.tools, config.mcp, listener=self._mcp_event)
        self.config = config
        store_password = urlsplit(config.store).password if config.store else None
        self.redactor = Redactor([*secrets, *(config.mcp.secrets() if config.mcp is not None else ()), store_password])
        keep_out_of_logs(self.redactor)
        self.backend: Backend = backend_named(config.transport)
        self.upstream = Upstream.configured(config, self.dialect, self.redactor, self.backend)
        self.credentials_warning = self.missing_credentials()   # or ConfigError, here for every edge
        try:
            store = open_store(config.store)
        except StoreError as exc:
            raise ConfigError(f"--store: {exc}") from None
        self.write_ahead = WriteAhead(store, on_event=self._store_event,   # the sessions' call records
                                      on_latency=self._store_latency)

    @property
    def tools(self) -> ToolRegistry:
        """The tools a session starting now gets (see ToolSet)."""
        return self.tool_set.registry()

    async def start_tools(self) -> None:
        """Reach the MCP servers and list their tools, when there are any (the edges call it when
        they start; counted, see ToolSet). ConfigError: a server cannot be reached, a name clashes.
        Reach the call store too: one that does not answer degrades the sessions, never stops them."""
        await self.write_ahead.open()
        await self.tool_set.start()

    async def close_tools(self) -> None:
        await self.tool_set.close()
        await self.write_ahead.close()

    def _store_event(self, event: str) -> None:
        for listener in list(self.store_listeners):
            listener(event)

    def _store_latency(self, seconds: float) -> None:
        for listener in list(self.store_latency_listeners):
            listener(seconds)

    def _mcp_event(self, server: str, event: str, detail: str) -> None:
        for listener in list(self.mcp_listeners):
            listener(server, event, detail)

    def engine_settings(self, **settings: Any) -> EngineConfig:
        """The engine settings of this edge's sessions: `settings` and the configured limits."""
        mcp = self.config.mcp
        return EngineConfig(output_limit=self.config.output_limit, history_limit=self.config.history_limit,
                            mcp_approvals=mcp.approvals if mcp is not None and mcp.approvals else None, **settings)

    def recording(self, *, session_id: str, dialect: Dialect, mode: str, extra_header: dict[str, Any],
                  writer: Callable[..., RecordingWriter] = RecordingWriter) -> RecordingWriter | None:
        """A session's recording, when the configuration asks for recordings (`writer` makes it:
        a test gives one that fails like a full disk)."""
        config = self.config
        if config.record_dir is None:
            return None
        return writer(config.record_dir, **self._header_fields(session_id, dialect, mode, extra_header),
                      secrets=self.redactor, file_mode=config.record_mode)

    def session_header(self, *, session_id: str, dialect: Dialect, mode: str,
                       extra_header: dict[str, Any]) -> dict[str, Any]:
        """The header a recording of a session starting now begins with, whether or not it is
        recorded: what the live inspector's model of the session starts from."""
        return session_header(**self._header_fields(session_id, dialect, mode, extra_header),
                              started_at=f"{datetime.now(timezone.utc):%Y-%m-%dT%H:%M:%S.%fZ}")

    def recording_filter(self, recording: RecordingWriter | None) -> RecordingFilter:
        """What the recording of a session holds of its frames (`recording`'s own filter), or, for
        a session not recorded, a filter with the same rules: what the live inspector shows."""
        if recording is not None:
            return recording.filter
        return RecordingFilter(self.redactor, self.config.record_audio)

    def _header_fields(self, session_id: str, dialect: Dialect, mode: str,
                       extra_header: dict[str, Any]) -> dict[str, Any]:
        return {"session_id": session_id, "dialect": dialect.name, "upstream": self.upstream.url,
                "tools": self.tools.names, "mode": mode, "record_audio": self.config.record_audio,
                "extra_header": extra_header}

    def health_fields(self, *, draining: bool, **open_now: int) -> dict[str, Any]:
        """What `/healthz` says: `ok` or `draining`, what is open now (`sessions=3`), and which
        upstream and dialect this process serves."""
        fields = {"status": "draining" if draining else "ok", "version": __version__, **open_now,
                  "upstream": self.upstream.host, "dialect": self.dialect.name, "pid": os.getpid()}
        if self.config.store:   # asked for: what the call store is doing
            fields["store"] = self.write_ahead.health()
        return fields

    def missing_credentials(self) -> str | None:
        """Refuse a provider's upstream without a key or a token provider: every session would
        fail at the provider's door (ConfigError). Without credentials, an upstream on loopback
        (the mock, a local proxy) is normal: None; any other host gets a warning (a gateway in
        front of the provider may add them)."""
        upstream = self.upstream
        if upstream.api_key is not None or upstream.tokens is not None:
            return None
        host = (urlsplit(upstream.url).hostname or "").lower()
        if is_loopback(host):
            return None
        variables = " or ".join(self.dialect.key_env)
        if any(dialect.serves_host(host) for dialect in DIALECTS.values()):
            raise ConfigError(f"no provider key for {upstream.host}: set {variables} in the relay's environment")
        return f"no provider key in the environment ({variables}): connecting to {upstream.host} without credentials"
