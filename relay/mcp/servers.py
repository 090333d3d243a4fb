"""A configuration's MCP servers and their tools, reached and kept up to date: `McpTools` (the
servers' tools as specs, made when the servers are first listed, a name clash refused then with
one line, made again when a server's list changes) and `ToolSet` (the `@tool` registry and the
MCP servers' tools together, what a session starting now gets)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

from relay.errors import ConfigError
from relay.mcp.connection import McpConnection, McpListener, acquire, release
from relay.tools.mcp_config import McpSettings
from relay.tools.mcp_tools import McpToolHandler, mcp_spec, relay_name, reserved_names
from relay.tools.registry import ToolRegistry
from relay.tools.sources import ToolSources, tool_registry
from relay.tools.spec import TOOL_NAME_PATTERN, ToolSpec

log = logging.getLogger("relay.mcp")


class McpTools:
    """The tools of a configuration's MCP servers (one connection each, shared in the process).
    `await start(reserved)` connects and lists them (ConfigError: a server cannot be reached, or a
    name clashes with `reserved` or another server's); `specs` are the current ones;
    `on_change` hears when a server's list changed them; `await close()` lets go."""

    def __init__(self, settings: McpSettings, *, listener: McpListener | None = None) -> None:
        self.settings = settings
        self.listener = listener
        self.connections: list[McpConnection] = []
        self.specs: list[ToolSpec] = []
        self.on_change: list[Callable[[], None]] = []
        self._reserved: Mapping[str, str] = {}

    async def start(self, reserved: Mapping[str, str]) -> None:
        """Connect to every server (at once) and list their tools. `reserved`: the names already
        taken (the `@tool` functions), with what took each."""
        self._reserved = reserved
        attempts = await asyncio.gather(*(acquire(server) for server in self.settings.servers),
                                        return_exceptions=True)
        failures = [a for a in attempts if isinstance(a, BaseException)]
        self.connections = [a for a in attempts if isinstance(a, McpConnection)]
        if failures:
            await self.close()
            raise failures[0]
        for connection in self.connections:
            if self.listener is not None:
                connection.listeners.append(self.listener)
                self.listener(connection.name, "connected", connection.config.describe())
            connection.tool_listeners.append(self._tools_changed)
        try:
            self.specs = self._specs(strict=True)
        except ConfigError:
            await self.close()
            raise

    async def close(self) -> None:
        connections, self.connections = self.connections, []
        for connection in connections:
            if self.listener in connection.listeners:
                connection.listeners.remove(self.listener)
            if self._tools_changed in connection.tool_listeners:
                connection.tool_listeners.remove(self._tools_changed)
        await asyncio.gather(*(release(connection) for connection in connections), return_exceptions=True)

    def _tools_changed(self) -> None:
        self.specs = self._specs(strict=False)
        for listener in list(self.on_change):
            listener()

    def _specs(self, *, strict: bool) -> list[ToolSpec]:
        """The current specs. A clash is refused (strict: at start) or leaves the later tool out,
        with a warning (a list that changed while sessions run)."""
        taken = dict(self._reserved)
        specs = []
        for connection in self.connections:
            config = connection.config
            for info in connection.tools:
                if not config.offers(info.name):
                    continue
                name = relay_name(config, info.name)
                problem = _clash(name, f"MCP server {config.name}'s tool {info.name}", taken.get(name))
                if problem is None and not TOOL_NAME_PATTERN.fullmatch(name):
                    problem = f"MCP server {config.name}'s tool {info.name}: no usable name"
                if problem is not None:
                    if strict:
                        raise ConfigError(problem)
                    log.warning("%s: left out", problem, extra={"mcp_server": config.name})
                    continue
                taken[name] = f"MCP server {config.name}'s tool {info.name}"
                specs.append(mcp_spec(config, info, McpToolHandler(connection, info.name)))
        return specs


def _clash(name: str, what: str, taken_by: str | None) -> str | None:
    if taken_by is None:
        return None
    return (f"tool name {name!r} is taken twice: by {taken_by} and by {what}; give the server a prefix "
            "(prefix = \"NAME_\" in --mcp-config, or --mcp-prefix for every server)")


class ToolSet:
    """A configuration's tools: its `@tool` functions (`tool_registry`) and the tools of its MCP
    servers (relay.tools.mcp_tools), which are known once the servers are listed (`start`) and
    change when a server's list does. `registry()` is the tools now: what a session starting now
    gets and keeps for its life (a session's tools never change under it).

    `start` and `close` count their callers: the servers are reached at the first start and let go
    at the last close, so that an edge and the sessions it runs can each hold them."""

    def __init__(self, tools: ToolSources = (), mcp: McpSettings | None = None, *,
                 listener: McpListener | None = None) -> None:
        self.static = tool_registry(tools)
        self.mcp = McpTools(mcp, listener=listener) if mcp is not None and mcp.servers else None
        self._registry = self.static
        self._users = 0
        if self.mcp is not None:
            self.mcp.on_change.append(self._rebuild)

    def registry(self) -> ToolRegistry:
        return self._registry

    @property
    def started(self) -> bool:
        return self.mcp is None or self._users > 0

    async def start(self) -> None:
        """Reach the MCP servers and list their tools (the first caller; the others count).
        ConfigError: a server cannot be reached, or a tool name clashes."""
        self._users += 1
        if self._users > 1 or self.mcp is None:
            return
        try:
            await self.mcp.start(reserved_names(self.static))
        except BaseException:
            self._users -= 1
            raise
        self._rebuild()

    async def close(self) -> None:
        if self._users == 0:
            return
        self._users -= 1
        if self._users == 0 and self.mcp is not None:
            await self.mcp.close()
            self._registry = self.static

    def _rebuild(self) -> None:
        assert self.mcp is not None
        self._registry = ToolRegistry([*self.static, *self.mcp.specs])
