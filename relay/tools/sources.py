"""Where a configuration's tools come from, and the one way they become a registry: `relay
serve`, `attach`, `sidecar`, `replay`, `export` and users' tests all build theirs here
(`tool_registry` for `@tool` functions, `ToolSet` when MCP servers add theirs)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from relay.errors import ConfigError
from relay.tools.errors import ToolDefinitionError, ToolLoadError
from relay.tools.loading import load_tools
from relay.tools.mcp import McpListener
from relay.tools.mcp_config import McpSettings
from relay.tools.mcp_tools import McpTools, reserved_names
from relay.tools.registry import ToolRegistry
from relay.tools.spec import ToolSpec

ToolSources = Sequence[str | ToolSpec | Callable[..., Any]] | ToolRegistry
"""What a configuration lists as its tools: files or modules by name (`--tools`), decorated or
plain functions, specs; or a ready registry."""


def tool_registry(tools: ToolSources) -> ToolRegistry:
    """One registry from what a configuration lists (see `ToolSources`); a registry is used as it
    is. A tool that cannot be loaded or defined is a ConfigError."""
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
