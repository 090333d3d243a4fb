"""`relay attach`: the sidecar edge. Run the relay's tools beside a live call.

Many voice agents carry their audio over WebRTC (browser to provider) or SIP (phone to provider):
no audio passes through a server. OpenAI (and Azure, GA) let a server open a second WebSocket on
the same session with `?call_id=<id>`, the sideband: it receives every server event and may send
client events. The sidecar attaches there, so tools run on the server, next to the application's
secrets and databases, while the call flows elsewhere.

    browser / phone <==audio==> provider <==ws ?call_id==> Sidecar (Engine + SidebandLoop)

The call has another writer (the browser or the SIP gateway) whose events the sidecar never sees.
The engine (mode `sidecar`) copes with that: it answers only the calls of its own tools, never
sends `response.create` while a response is active, and retries one refused as "already active"
after the next `response.done`. This module only connects, reconnects when the sideband drops
while the call lives, logs and records; `relay.webhooks` attaches to incoming calls on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal, Sequence

import anyio
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from relay.dialects import DIALECT_CHOICES, Dialect, GeminiDialect
from relay.engine import DEFAULT_HISTORY_LIMIT, Engine, EngineConfig, Notice, OpenAIEngine
from relay.logs import LOG_FORMATS, LOG_LEVELS, Redactor, configure_logging, log_notice
from relay.recording import RecordingWriter
from relay.server import DEFAULT_MAX_FRAME_BYTES, ConfigError, tool_registry, upstream_dialect
from relay.policy import DEFAULT_QUEUE_BYTES, close_info
from relay.session import Peer, SessionEnd, SessionLoop, close_quietly
from relay.tools import DEFAULT_OUTPUT_LIMIT, ToolRegistry, ToolSpec
from relay.upstream import DEFAULT_UPSTREAM, TokenProvider, Upstream, UpstreamUnavailable

log = logging.getLogger("relay.sidecar")

DEFAULT_RECONNECT_ATTEMPTS = 6
DEFAULT_RECONNECT_DELAY = 0.2
DETACHED_CODE = 1000

ToolSources = Sequence[str | ToolSpec | Callable[..., Any]] | ToolRegistry
Sleep = Callable[[float], Awaitable[None]]
Tap = Callable[[str, str | bytes], None]


class CallEnded(UpstreamUnavailable):
    """The provider does not know the call (the sideband handshake got HTTP 404): it has ended,
    or it never existed."""


@dataclass
class SidecarConfig:
    """Everything `relay attach` takes. `api_key=None` reads the dialect's variable
    (`OPENAI_API_KEY`, `AZURE_OPENAI_API_KEY`) from the environment, as `relay serve` does.

    By default the tools are assumed declared when the call was accepted, and the session is
    left alone; `declare_tools` adds them with one `session.update` that keeps the other party's
    tools. A sideband that drops while the call lives is reopened up to `reconnect_attempts`
    times, `reconnect_delay` seconds before the first attempt and twice as long before each next."""

    tools: ToolSources = ()
    upstream: str = DEFAULT_UPSTREAM
    dialect: str | None = None
    declare_tools: bool = False
    record_dir: str | Path | None = None
    record_audio: Literal["keep", "drop"] = "keep"
    api_key: str | None = None
    token_provider: TokenProvider | None = None
    reconnect_attempts: int = DEFAULT_RECONNECT_ATTEMPTS
    reconnect_delay: float = DEFAULT_RECONNECT_DELAY
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_queue_bytes: int = DEFAULT_QUEUE_BYTES
    open_timeout: float = 10.0
    output_limit: int = DEFAULT_OUTPUT_LIMIT
    # recent items, responses and finished calls each session's engine keeps (None: all)
    history_limit: int | None = DEFAULT_HISTORY_LIMIT
    # Python API: called with (session id, notice) for every engine notice, as in ServerConfig.
    on_notice: Callable[[str, Notice], None] | None = None

    def reconnect_waits(self) -> list[float]:
        """The wait before each reconnect attempt: exponential, bounded in number."""
        return [self.reconnect_delay * 2**attempt for attempt in range(self.reconnect_attempts)]


def _check(config: SidecarConfig) -> Dialect:
    """Refuse a configuration that cannot work; returns the dialect."""
    dialect = upstream_dialect(config.upstream, config.dialect)
    if isinstance(dialect, GeminiDialect):
        raise ConfigError("Gemini Live has no call sideband: attach works with the OpenAI family only")
    if config.record_audio not in ("keep", "drop"):
        raise ConfigError(f"--record-audio must be keep or drop, not {config.record_audio!r}")
    if config.reconnect_attempts < 0 or config.reconnect_delay < 0:
        raise ConfigError("--reconnect-attempts and --reconnect-delay must be >= 0")
    if config.max_frame_bytes <= 0 or config.max_queue_bytes <= 0 or config.open_timeout <= 0:
        raise ConfigError("frame and queue limits and the open timeout must be positive")
    return dialect


class SidecarRuntime:
    """What the sidecars of one configuration share: the dialect, the tool registry, the provider
    connection (URL, credentials, limits) and the engine settings. A webhook server builds it once
    and attaches every incoming call with it; each call still gets its own engine."""

    def __init__(self, config: SidecarConfig) -> None:
        self.dialect = _check(config)
        self.tools = tool_registry(config.tools)
        self.config = config
        self.redactor = Redactor()
        self.upstream = Upstream.configured(config, self.dialect, self.redactor)
        self.engine_config = EngineConfig(
            mode="sidecar",
            hide_tool_events=False,      # there is no client to hide anything from
            declare_tools=config.declare_tools,
            hold_client_creates=False,
            output_limit=config.output_limit,
            history_limit=config.history_limit,
        )


def _may_pass(failure: UpstreamUnavailable) -> bool:
    """Worth another attempt: no answer at all, a server error or rate limiting. A refusal
    (401, 403, 400) stays a refusal."""
    return failure.status is None or failure.status == 429 or failure.status >= 500


class SidebandLoop(SessionLoop):
    """The session loop of a sideband: when the socket drops while the call lives, the engine is
    told (outputs decided meanwhile wait), the socket is reopened, and the loop carries on over
    the new one with what was queued for the old."""

    def __init__(self, engine: Engine, *, reopen: Callable[[], Awaitable[Peer]],
                 context: dict[str, Any], **options: Any) -> None:
        super().__init__(engine, **options)
        self._reopen = reopen
        self._context = context

    async def upstream_lost(self, closed: ConnectionClosed) -> None:
        if self.end is not None:
            return   # the session closed the socket itself
        code, reason = close_info(closed)
        log.warning("sideband lost; reconnecting", extra={**self._context, "code": code, "reason": reason})
        self._apply(self.engine.upstream_disconnected(self.clock()))
        try:
            upstream = await self._reopen()
        except CallEnded:
            log.info("call ended", extra=self._context)
            await self.finish("upstream", 1000, "call ended")
            return
        except UpstreamUnavailable as exc:
            log.error("sideband lost for good: %s", exc, extra=self._context)
            await self.finish("relay", 1011, "sideband lost")
            return
        if self.end is not None:   # stopped while reconnecting
            await close_quietly(upstream, DETACHED_CODE, self.end.reason)
            return
        self.replace_upstream(upstream)
        log.info("sideband reconnected", extra=self._context)
        self._apply(self.engine.upstream_reconnected(self.clock()))


class _Tap:
    """The loop's recorder: the session's recording, if any, and the caller's tap. A tap that
    raises is dropped, never the session."""

    def __init__(self, recording: RecordingWriter | None, tap: Tap | None) -> None:
        self.recording = recording
        self.tap = tap

    def record(self, direction: str, frame: str | bytes) -> None:
        if self.recording is not None:
            self.recording.record(direction, frame)
        if self.tap is not None:
            try:
                self.tap(direction, frame)
            except Exception:
                log.exception("the frame tap failed; it is dropped")
                self.tap = None


class Sidecar:
    """One attached call. `end = await Sidecar(call_id, config).run()` attaches, runs the tools
    until the call ends, and says how it ended; `await sidecar.stop()` detaches earlier.
    `attached` and `ended` are events to wait for.

    `tap(direction, frame)` sees every frame on the sideband (`upstream>relay`,
    `relay>upstream`), e.g. for transcripts; `sleep` waits between reconnect attempts."""

    def __init__(
        self,
        call_id: str,
        setup: SidecarConfig | SidecarRuntime,
        *,
        tap: Tap | None = None,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        self.call_id = call_id
        self.runtime = setup if isinstance(setup, SidecarRuntime) else SidecarRuntime(setup)
        self.id = "sc_" + secrets.token_hex(6)
        self.tap = tap
        self.loop: SidebandLoop | None = None
        self.end: SessionEnd | None = None
        self.attached_at: float | None = None
        self.reconnects = 0
        self.attached = asyncio.Event()
        self.ended = asyncio.Event()
        self._sleep = sleep
        self._running = False
        self._stopping: str | None = None
        self._connect_scope: anyio.CancelScope | None = None

    @property
    def engine(self) -> Engine | None:
        return self.loop.engine if self.loop is not None else None

    @property
    def context(self) -> dict[str, str]:
        """The fields that name this session in its log lines."""
        return {"session_id": self.id, "realtime_call_id": self.call_id}

    async def run(self) -> SessionEnd:
        """Attach and serve the call until it ends or `stop()`; returns how the session ended.
        Raises `UpstreamUnavailable` (`CallEnded` for an unknown call) when it cannot attach."""
        if self._running:
            raise RuntimeError("a Sidecar runs once; make a new one")
        self._running = True
        try:
            upstream = await self._attach()
            if upstream is None:
                self.end = SessionEnd("relay", DETACHED_CODE, self._stopping or "stopped")
            else:
                self.end = await self._serve(upstream)
        except UpstreamUnavailable as exc:
            log.error("cannot attach to the call: %s", exc, extra=self.context)
            self.end = SessionEnd("relay", 1011, str(exc))
            raise
        finally:
            self.end = self.end or SessionEnd("relay", 1011, "interrupted")
            self.ended.set()
        return self.end

    async def stop(self, reason: str = "detached") -> None:
        """Detach: close the sideband (the call goes on, without the relay's tools); calls not
        yet answered are abandoned. `run()` returns."""
        self._stopping = reason
        if self.loop is not None:
            await self.loop.started.wait()
            await self.loop.finish("relay", DETACHED_CODE, reason)
        elif self._connect_scope is not None:
            self._connect_scope.cancel()

    async def _attach(self) -> ClientConnection | None:
        """The sideband, or None when `stop()` came first."""
        upstream: ClientConnection | None = None
        with anyio.CancelScope() as self._connect_scope:
            if self._stopping is None:
                upstream = await self._open(reconnecting=False)
        self._connect_scope = None
        if upstream is not None and self._stopping is not None:
            await close_quietly(upstream, DETACHED_CODE, self._stopping)
            return None
        return upstream

    async def _serve(self, upstream: ClientConnection) -> SessionEnd:
        runtime = self.runtime
        engine = OpenAIEngine(runtime.tools, dialect=runtime.dialect, config=runtime.engine_config,
                        session_id=self.id, id_prefix=self.id)
        recording = self._recording(engine)
        loop = self.loop = SidebandLoop(
            engine,
            reopen=self._reopen,
            context=self.context,
            upstream=upstream,
            recorder=_Tap(recording, self.tap) if recording is not None or self.tap is not None else None,
            on_notice=self._on_notice,
            max_queue_bytes=runtime.config.max_queue_bytes,
        )
        self.attached_at = time.time()
        log.info("session start", extra={**self.context, "mode": "sidecar", "upstream": runtime.upstream.host,
                                         "dialect": runtime.dialect.name, "tools": runtime.tools.names})
        self.attached.set()
        end: SessionEnd | None = None
        try:
            end = await loop.run()
            return end
        finally:
            if recording is not None:
                recording.close(end.reason if end is not None else "relay error")
            if end is None:   # cancelled, or the loop failed: do not leave the sideband open
                with anyio.CancelScope(shield=True):
                    await close_quietly(loop.upstream, 1011, "relay stopped")
            final = end or SessionEnd("relay", 1011, "interrupted")
            log.info("session end", extra={
                **self.context, "by": final.by, "code": final.code, "reason": final.reason,
                "seconds": round(time.time() - self.attached_at, 3), "reconnects": self.reconnects,
                "tool_calls": len(engine.calls)})

    async def _reopen(self) -> Peer:
        self.reconnects += 1
        return await self._open(reconnecting=True)

    async def _open(self, *, reconnecting: bool) -> ClientConnection:
        """Connect to the call, again while the failure may pass. The first attach tries at
        once, then backs off; a reconnect backs off before every attempt. Raises `CallEnded` on a
        404, `UpstreamUnavailable` when the failure is final or the attempts run out."""
        runtime = self.runtime
        waits: list[float | None] = list(runtime.config.reconnect_waits())
        if not reconnecting:
            waits.insert(0, None)
        failure = UpstreamUnavailable("reconnecting is turned off (--reconnect-attempts 0)")
        for attempt, wait in enumerate(waits, 1):
            if wait is not None:
                await self._sleep(wait)
            try:
                return await runtime.upstream.connect_call(runtime.dialect, self.call_id)
            except UpstreamUnavailable as exc:
                if exc.status == 404:
                    raise CallEnded(f"the upstream {runtime.upstream.host} has no live call {self.call_id} "
                                    "(HTTP 404): it ended or never existed", 404) from None
                if not _may_pass(exc):
                    raise
                failure = exc
                log.warning("sideband connection failed: %s", exc,
                            extra={**self.context, "attempt": attempt, "attempts": len(waits)})
        raise failure

    def _recording(self, engine: Engine) -> RecordingWriter | None:
        runtime = self.runtime
        config = runtime.config
        if config.record_dir is None:
            return None
        return RecordingWriter(
            config.record_dir,
            session_id=self.id,
            dialect=runtime.dialect.name,
            upstream=runtime.upstream.url,
            tools=runtime.tools.names,
            mode="sidecar",
            record_audio=config.record_audio,
            secrets=runtime.redactor.secrets,
            extra_header={**engine.recording_header(), "call_id": self.call_id},
        )

    def _on_notice(self, notice: Notice) -> None:
        on_notice = self.runtime.config.on_notice
        if on_notice is not None:
            on_notice(self.id, notice)
        log_notice(log, notice, **self.context)


async def attach(call_id: str, tools: ToolSources = (), **options: Any) -> SessionEnd:
    """Attach to a live call and run `tools` beside it until the call ends, like `relay attach`:

        end = await attach("rtc_...", tools=[get_weather])

    `options` are `SidecarConfig` fields (`upstream`, `dialect`, `declare_tools`, `record_dir`,
    ...). Returns how the session ended. Raises `ConfigError` for a configuration that cannot
    work, `UpstreamUnavailable` (`CallEnded` for an unknown call) when it cannot attach."""
    return await Sidecar(call_id, SidecarConfig(tools=tools, **options)).run()


# ---- command line --------------------------------------------------------------------------

def add_sideband_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments `relay attach` and `relay sidecar` share: tools, upstream, recording,
    reconnecting, logging."""
    parser.add_argument("--tools", action="append", required=True, metavar="SPEC",
                        help="a .py file or module with @tool functions (repeatable)")
    parser.add_argument("--upstream", default=DEFAULT_UPSTREAM, metavar="URL",
                        help=f"provider realtime URL; the call_id is added to it (default {DEFAULT_UPSTREAM})")
    parser.add_argument("--dialect", choices=DIALECT_CHOICES,
                        help="wire dialect of the upstream (default: inferred from the URL)")
    parser.add_argument("--record", metavar="DIR", help="write one recording per attached call into DIR")
    parser.add_argument("--record-audio", choices=("keep", "drop"), default="keep",
                        help="keep or drop audio in recordings (default keep)")
    parser.add_argument("--reconnect-attempts", type=int, default=DEFAULT_RECONNECT_ATTEMPTS, metavar="N",
                        help=f"reopen a dropped sideband up to N times (default {DEFAULT_RECONNECT_ATTEMPTS})")
    parser.add_argument("--reconnect-delay", type=float, default=DEFAULT_RECONNECT_DELAY, metavar="S",
                        help=f"wait before the first reconnect attempt, doubled for each next "
                             f"(default {DEFAULT_RECONNECT_DELAY})")
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="json",
                        help="stderr log lines as JSON (default) or text")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info")


def sideband_settings(args: argparse.Namespace) -> dict[str, Any]:
    """`SidecarConfig` fields from the shared arguments; sets up logging and the import path."""
    configure_logging(args.log_format, level=args.log_level)
    # `--tools mymodule` should find a module next to the user, as `python -m` would.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return {
        "tools": args.tools,
        "upstream": args.upstream,
        "dialect": args.dialect,
        "record_dir": args.record,
        "record_audio": args.record_audio,
        "reconnect_attempts": args.reconnect_attempts,
        "reconnect_delay": args.reconnect_delay,
    }


def warn_without_key(runtime: SidecarRuntime) -> None:
    if runtime.upstream.api_key is None:
        log.warning("no provider key in the environment (%s): connecting to the upstream without credentials",
                    " or ".join(runtime.dialect.key_env))


def run_until_signalled(work: Callable[[], Awaitable[int]], stop: Callable[[str], Awaitable[None]]) -> int:
    """Run `work` in a new event loop and return its status. SIGTERM or SIGINT call
    `stop(signal name)` once, after which `work` is expected to finish."""

    async def main() -> int:
        signalled = asyncio.Event()
        received: list[str] = []

        def on_signal(signum: int) -> None:
            received.append(signal.Signals(signum).name)
            signalled.set()

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)

        async def stop_when_signalled() -> None:
            await signalled.wait()
            await stop(received[0])

        async with anyio.create_task_group() as group:
            group.start_soon(stop_when_signalled)
            status = await work()
            group.cancel_scope.cancel()
        return status

    return asyncio.run(main())


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--call-id", required=True, metavar="ID",
                        help="the call to attach to (rtc_...: from the WebRTC answer or the SIP webhook)")
    add_sideband_arguments(parser)
    parser.add_argument("--declare-tools", action="store_true",
                        help="add the tools to the session (keeping the other party's) instead of "
                             "assuming they were declared when the call was accepted")


def run(args: argparse.Namespace) -> int:
    settings = sideband_settings(args)
    try:
        runtime = SidecarRuntime(SidecarConfig(**settings, declare_tools=args.declare_tools))
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    warn_without_key(runtime)
    sidecar = Sidecar(args.call_id, runtime)

    async def work() -> int:
        try:
            end = await sidecar.run()
        except UpstreamUnavailable:
            return 1   # logged by run()
        return 1 if end.code not in (1000, 1001) else 0

    async def stop(signal_name: str) -> None:
        log.info("%s: detaching from the call", signal_name, extra=sidecar.context)
        await sidecar.stop(f"{signal_name}: detached")

    return run_until_signalled(work, stop)
