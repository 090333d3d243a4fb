"""One MCP server's connection in this process (`McpConnection`), kept alive by one owner task.

The SDK's `Client` must be entered and left in one task, and it is single-use: so each server has
one owner task that connects (a new `Client` each time), lists the server's tools, keeps its tool
list fresh (the server's `tools/list_changed`, both protocol eras, and one re-listing shortly
after connecting: servers that register tools just after the handshake send the notification
before an HTTP client listens), and reconnects with a growing back-off when the connection ends.
Calls come from the handlers' own tasks (the SDK multiplexes them) and take the live connection.

What a failing server means for a call: a call on a connection that dies fails at once (the owner
fails every call in flight when it sees the end: a stdio server's EOF, an HTTP transport's error);
a call while the server is down makes the owner try again at once rather than after its back-off,
and fails when that attempt fails; a server that hangs is the call's timeout's business (the
engine's: cancelling the call's task cancels the MCP request, and the SDK tells the server). Every
connect, loss, failed attempt and tool-list change is a log line (`relay.mcp`) and an event for
the edge's listeners (its metrics).

Connections are shared per process and event loop: `acquire` hands out the one for a server's
configuration and counts its users; `release` closes it after the last. The `mcp` SDK is imported
when a connection starts, never at import: it is the `mcp` extra's.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import math
import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import anyio

from relay.errors import REDACTED, ConfigError, RelayError
from relay.tools.mcp_config import McpServerConfig
from relay.tools.mcp_tools import IDEMPOTENCY_META_KEY, McpToolInfo

log = logging.getLogger("relay.mcp")

FIRST_BACKOFF = 0.2
MAX_BACKOFF = 5.0
RELIST_AFTER_CONNECT = 0.5
"""Seconds after connecting when the tools are listed again (see the module docstring)."""
CLOSE_TIMEOUT = 5.0
HTTP_TIMEOUT = 30.0        # connect, write and pool, for a server over streamable HTTP
HTTP_READ_TIMEOUT = 300.0  # a response stream (SSE) may stay open for minutes
MODERN_PROTOCOL = "2026-07-28"
STDERR_LINE_CHARS = 4096   # a stdio server's stderr line longer than this is logged in pieces
INSTALL_HINT = "pip install 'realtime-relay[mcp]'"

McpListener = Callable[[str, str, str], None]
"""Called with (server name, event, detail): `connected`, `reconnected`, `lost`, `connect_failed`,
`tools_changed`."""


class McpUnavailable(RelayError):
    """A call could not reach its MCP server: down, unreachable, or lost during the call. The
    message is written for the model's error output: it names the server, never its secrets."""


def require_sdk() -> None:
    """ConfigError with the install command when the `mcp` extra is missing."""
    if importlib.util.find_spec("mcp") is None:
        raise ConfigError(f"MCP servers need the mcp SDK: {INSTALL_HINT}")


@dataclass(eq=False)
class _Generation:
    """One connection of the server, from connect to its end: the calls in flight on it and why
    it ended."""

    client: Any = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = ""
    calls: set[anyio.CancelScope] = field(default_factory=set)

    def end(self, reason: str) -> None:
        if self.ended.is_set():
            return
        self.reason = reason
        self.ended.set()
        for scope in list(self.calls):
            scope.cancel()


class McpConnection:
    """One server's connection in this process (see the module docstring). `await start()`
    returns after the first attempt (ConfigError when it failed: a server the relay starts with
    must be there); `tools` is the current list; `await call(name, arguments)` gives the SDK's
    `CallToolResult` or raises McpUnavailable; `await close()` ends it."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.tools: tuple[McpToolInfo, ...] = ()
        self.listeners: list[McpListener] = []
        self.tool_listeners: list[Callable[[], None]] = []
        self.state = "new"          # connecting | up | down | closed
        self.last_error = ""
        self.connects = 0
        self._attempt = 0           # the number of the latest connection attempt
        self._failed = 0            # the number of the latest attempt that failed
        self._live: _Generation | None = None
        self._changed = asyncio.Event()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._stale = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connect_scope: anyio.CancelScope | None = None

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def calls_in_flight(self) -> int:
        live = self._live
        return len(live.calls) if live is not None else 0

    # ---- life --------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the owner task (once) and wait for its first attempt: ConfigError when it
        failed (the caller closes the connection then)."""
        if self._task is None:
            require_sdk()
            self.config.resolved_headers()   # a header or env naming an unset variable: ConfigError now
            self.config.resolved_env()
            self._task = asyncio.get_running_loop().create_task(self._own(), name=f"mcp server {self.name}")
        while self.state in ("new", "connecting"):
            await self._wait_change()
        if self.state != "up" and self.connects == 0:
            raise ConfigError(f"cannot reach MCP server {self.name} ({self.config.describe()}): {self.last_error}")

    async def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._live is not None:
            self._live.end("closed")
        if self._connect_scope is not None:
            self._connect_scope.cancel()
        task, self._task = self._task, None
        if task is None:
            return
        done, _ = await asyncio.wait([task], timeout=CLOSE_TIMEOUT)
        if not done:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        self._set_state("closed")

    def _set_state(self, state: str) -> None:
        self.state = state
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _wait_change(self) -> None:
        await self._changed.wait()

    def _emit(self, event: str, detail: str = "") -> None:
        for listener in list(self.listeners):
            try:
                listener(self.name, event, detail)
            except Exception:   # a listener's failure is not the connection's
                log.exception("MCP event listener failed")

    # ---- the owner task ----------------------------------------------------------------------
    async def _own(self) -> None:
        """Connect, serve, and connect again: at once after a connection that lasted, after the
        back-off (growing from FIRST_BACKOFF to MAX_BACKOFF) after a failed attempt or a
        connection lost as soon as it was made (a server that dies at every start)."""
        backoff = FIRST_BACKOFF
        while not self._stop.is_set():
            generation = _Generation()
            self._attempt += 1
            self._set_state("connecting")
            started = anyio.current_time()
            connected = await self._connection(generation)
            if not connected:
                self._failed = self._attempt
            if self._stop.is_set():
                break
            lasted = connected and anyio.current_time() - started > MAX_BACKOFF
            if connected:
                log.warning("MCP server %s lost: %s; reconnecting", self.name, generation.reason,
                            extra={"mcp_server": self.name, "reason": generation.reason})
                self._emit("lost", generation.reason)
            else:
                log.warning("MCP server %s: cannot connect (%s): %s", self.name, self.config.describe(),
                            self.last_error, extra={"mcp_server": self.name, "reason": self.last_error})
                self._emit("connect_failed", self.last_error)
            self._set_state("down")
            self._wake.clear()
            if lasted:
                backoff = FIRST_BACKOFF
                continue
            with anyio.move_on_after(backoff):
                await self._wake.wait()
            backoff = min(backoff * 2, MAX_BACKOFF)

    async def _connection(self, generation: _Generation) -> bool:
        """One connection, from connect to its end; whether it was made."""
        from mcp import Client

        connected = False
        try:
            with anyio.CancelScope() as scope:
                self._connect_scope = scope   # close() cancels a connect in progress
                scope.deadline = anyio.current_time() + self.config.connect_timeout
                async with Client(self._transport(generation), message_handler=self._on_message,
                                  cache=None) as client:
                    await self._list_tools(client)
                    scope.deadline = math.inf
                    self._connect_scope = None
                    if self._stop.is_set():
                        return False
                    connected = True
                    generation.client = client
                    self._live = generation
                    self.connects += 1
                    first = self.connects == 1
                    log.info("MCP server %s %s (%s, protocol %s): %d tools", self.name,
                             "connected" if first else "reconnected", self.config.describe(),
                             client.protocol_version, len(self.tools),
                             extra={"mcp_server": self.name, "tools": [t.name for t in self.tools]})
                    self._set_state("up")
                    self._emit("connected" if first else "reconnected", client.protocol_version)
                    async with anyio.create_task_group() as watchers:
                        watchers.start_soon(self._keep_tools_fresh, client)
                        if client.protocol_version == MODERN_PROTOCOL:
                            watchers.start_soon(self._listen, client)
                        await generation.ended.wait()
                        watchers.cancel_scope.cancel()
            if scope.cancelled_caught and not connected:
                self.last_error = f"no answer within {self.config.connect_timeout:g} s"
        except Exception as exc:   # an ExceptionGroup from the transport, a connect error, a dead process
            if connected:
                generation.reason = generation.reason or _failure_text(exc, self.config.secrets())
            else:
                self.last_error = _failure_text(exc, self.config.secrets())
        finally:
            self._connect_scope = None
            if self._live is generation:
                self._live = None
            generation.end(generation.reason or "connection closed")
        return connected

    @contextlib.asynccontextmanager
    async def _transport(self, generation: _Generation) -> AsyncIterator[tuple[Any, Any]]:
        """The SDK transport for the server, its read stream watched for its end (a stdio server's
        EOF says nothing to the client until the next call)."""
        async with contextlib.AsyncExitStack() as stack:
            if self.config.command:
                from mcp import StdioServerParameters
                from mcp.client.stdio import stdio_client

                command = self.config.command
                parameters = StdioServerParameters(command=command[0], args=list(command[1:]),
                                                   env=self.config.resolved_env() or None, cwd=self.config.cwd)
                errlog = await stack.enter_async_context(_stderr_logged(self.name))
                read, write = await stack.enter_async_context(stdio_client(parameters, errlog=errlog))
            else:
                import httpx2   # the HTTP client the SDK takes (its own dependency)
                from mcp.client.streamable_http import streamable_http_client

                # the SDK's way to give the server's headers: a client of ours, with the timeouts
                # its own default client has (a response stream may stay open for minutes)
                timeout = httpx2.Timeout(HTTP_TIMEOUT, read=HTTP_READ_TIMEOUT)
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers=self.config.resolved_headers(), timeout=timeout))
                read, write = await stack.enter_async_context(
                    streamable_http_client(self.config.url or "", http_client=http))
            yield _EndWatch(read, lambda: generation.end("the server closed the connection")), write

    async def _on_message(self, message: Any) -> None:
        """The SDK's notifications (2025-era sessions): a tool-list change makes the list stale."""
        if type(message).__name__ == "ToolListChangedNotification":
            self._stale.set()

    async def _listen(self, client: Any) -> None:
        """2026-era sessions announce tool-list changes only to a subscription."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self._stale.set()
        except Exception as exc:   # the server does not offer it, or the connection went
            log.debug("MCP server %s: no tool-list subscription: %s", self.name, exc)

    async def _keep_tools_fresh(self, client: Any) -> None:
        with anyio.move_on_after(RELIST_AFTER_CONNECT):
            await self._stale.wait()
        while True:
            self._stale.clear()
            try:
                with anyio.fail_after(self.config.connect_timeout):
                    await self._list_tools(client)
            except Exception as exc:
                log.warning("MCP server %s: listing its tools failed: %s", self.name,
                            _failure_text(exc, self.config.secrets()),
                            extra={"mcp_server": self.name})
            await self._stale.wait()

    async def _list_tools(self, client: Any) -> None:
        listed: list[McpToolInfo] = []
        cursor = None
        while True:
            page = await client.list_tools(cursor=cursor)
            for tool in page.tools:
                annotations = tool.annotations.model_dump(exclude_none=True) if tool.annotations else None
                listed.append(McpToolInfo(tool.name, tool.description or tool.title or "",
                                          dict(tool.input_schema or {}), annotations))
            cursor = page.next_cursor
            if not cursor:
                break
        tools = tuple(listed)
        if tools == self.tools:
            return
        changed = bool(self.tools) or self.connects > 0
        self.tools = tools
        if changed:
            log.info("MCP server %s: its tools changed: %s", self.name, ", ".join(t.name for t in tools),
                     extra={"mcp_server": self.name, "tools": [t.name for t in tools]})
            self._emit("tools_changed", ", ".join(t.name for t in tools))
        for listener in list(self.tool_listeners):
            listener()

    # ---- calls -------------------------------------------------------------------------------
    async def call(self, tool: str, arguments: dict[str, Any], *, idempotency_key: str | None = None) -> Any:
        """The server's `CallToolResult` for one call (the call's idempotency key in the request's
        `_meta`, as `IDEMPOTENCY_META_KEY`). McpUnavailable when the server cannot be
        reached or the connection ends during the call; `MCPError` (the SDK's) for a protocol
        error the server answered."""
        from mcp import MCPError
        from mcp_types.jsonrpc import CONNECTION_CLOSED

        generation = await self._usable()
        scope = anyio.CancelScope()
        generation.calls.add(scope)
        try:
            with scope:
                meta: Any = {IDEMPOTENCY_META_KEY: idempotency_key} if idempotency_key else None
                return await generation.client.call_tool(tool, arguments, meta=meta)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise
            generation.end("the server closed the connection")
        finally:
            generation.calls.discard(scope)
        raise McpUnavailable(f"MCP server {self.name} was lost during the call ({generation.reason}); "
                             "the relay is reconnecting")

    async def _usable(self) -> _Generation:
        """The live connection; else wait for the attempt in progress, or make the owner try at
        once, and fail when that attempt fails."""
        # the first attempt whose failure this call accepts: the one in progress, else the next
        accepted = self._attempt if self.state == "connecting" else self._attempt + 1
        while True:
            live = self._live
            if live is not None and not live.ended.is_set():
                return live
            if self._stop.is_set():
                raise McpUnavailable(f"MCP server {self.name} is closed")
            if self.state == "down":
                if self._failed >= accepted:
                    raise McpUnavailable(f"MCP server {self.name} is unreachable: {self.last_error}")
                self._wake.set()   # try now, not after the back-off
            await self._wait_change()


class _EndWatch:
    """A transport's read stream that says when it ends."""

    def __init__(self, stream: Any, on_end: Callable[[], None]) -> None:
        self._stream = stream
        self._on_end = on_end

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._stream.__anext__()
        except (StopAsyncIteration, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _EndWatch:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._stream.__aexit__(*exc_info)

    def __getattr__(self, name: str) -> Any:   # the SDK reads `last_context` when there is one
        return getattr(self._stream, name)


@contextlib.asynccontextmanager
async def _stderr_logged(name: str) -> AsyncIterator[TextIO]:
    """Where a stdio server's stderr goes: a pipe whose lines become the relay's log lines
    (`relay.mcp`, info, with `mcp_server` and `stream`), so that what the server writes comes out
    in the relay's log format (JSON lines for a collector) and names its server, rather than raw
    in the middle of the relay's own stream. What is still in the pipe when the connection ends is
    read then; the reading stops there, whoever else holds the pipe's other end."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    lines = _StderrLines(name)
    errlog = os.fdopen(write_fd, "w")
    follower = asyncio.get_running_loop().create_task(lines.follow(read_fd), name=f"mcp server {name} stderr")
    try:
        yield errlog
    finally:
        follower.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait([follower])   # before the descriptor closes: its number may be reused
        errlog.close()
        while lines.take(read_fd) > 0:
            pass
        lines.flush()
        os.close(read_fd)


class _StderrLines:
    """A stdio server's stderr cut into lines, each logged as it is complete (blank ones left out,
    one longer than STDERR_LINE_CHARS logged in pieces of that size)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._pending = b""

    async def follow(self, fd: int) -> None:
        """Log the lines as they come, until the pipe's writers are all gone (or cancelled)."""
        while True:
            await anyio.wait_readable(fd)
            if self.take(fd) == 0:
                return

    def take(self, fd: int) -> int:
        """Read what the pipe holds now and log its complete lines: the bytes read, 0 at the
        pipe's end (no writer left), -1 when it holds nothing for now."""
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return -1
        if not data:
            return 0
        *complete, self._pending = (self._pending + data).split(b"\n")
        for line in complete:
            self._log(line)
        while len(self._pending) > STDERR_LINE_CHARS:
            self._log(self._pending[:STDERR_LINE_CHARS])
            self._pending = self._pending[STDERR_LINE_CHARS:]
        return len(data)

    def flush(self) -> None:
        self._log(self._pending)
        self._pending = b""

    def _log(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            log.info("MCP server %s: %s", self.name, text, extra={"mcp_server": self.name, "stream": "stderr"})


def _failure_text(exc: BaseException, secrets: Sequence[str] = ()) -> str:
    """What went wrong, in one line: the innermost error of an exception group (the transports
    wrap theirs twice), its type and message; an MCP error with its code. Each of `secrets` in it
    (the server's: the HTTP client's errors quote the whole URL, `?api_key=...` included) is
    replaced, longest first: the line goes to logs and into the model's error outputs."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    code = getattr(getattr(exc, "error", None), "code", None)
    text = " ".join(str(exc).split()) or type(exc).__name__
    if code is not None:
        text = f"{getattr(exc.error, 'message', text)} (MCP error {code})"   # type: ignore[attr-defined]
    elif type(exc).__name__ not in text:
        text = f"{type(exc).__name__}: {text}"
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


# ---- one connection per server per process ------------------------------------------------------
_SHARED: dict[tuple[int, McpServerConfig], tuple[McpConnection, int]] = {}


async def acquire(config: McpServerConfig) -> McpConnection:
    """The process's connection to the server `config` describes (on this event loop), started;
    one more user of it. ConfigError when it cannot be reached."""
    key = (id(asyncio.get_running_loop()), config)
    shared = _SHARED.get(key)
    if shared is not None:
        connection, users = shared
        _SHARED[key] = (connection, users + 1)
    else:
        connection = McpConnection(config)
        _SHARED[key] = (connection, 1)
    try:
        await connection.start()
    except BaseException:
        await release(connection)
        raise
    return connection


async def release(connection: McpConnection) -> None:
    """One user fewer; the last closes the connection."""
    key = (id(asyncio.get_running_loop()), connection.config)
    shared = _SHARED.get(key)
    if shared is None or shared[0] is not connection:
        await connection.close()
        return
    users = shared[1] - 1
    if users > 0:
        _SHARED[key] = (connection, users)
        return
    del _SHARED[key]
    await connection.close()
