"""Where a configuration's tools come from, and the one way they become a registry: `relay
serve`, `attach`, `sidecar`, `replay`, `export` and users' tests all build theirs here
(`tool_registry` for `@tool` functions; `relay.mcp.servers.ToolSet` when MCP servers add theirs)."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from relay.errors import ConfigError
from relay.tools.errors import ToolDefinitionError, ToolLoadError
from relay.tools.loading import load_tools
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
