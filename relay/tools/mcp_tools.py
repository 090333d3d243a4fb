"""MCP servers' tools as the relay's own: each becomes a `ToolSpec` whose handler calls the server
(`McpToolHandler`), so the call book, timeouts (which cancel the MCP request), fillers,
`on_failure`, scheduling, interruption, recordings, replay and the inspector treat it as any
`@tool`. `relay.mcp.servers.McpTools` keeps the specs of a configuration's servers (this module
is pure data: the connections and their owner tasks are `relay.mcp`'s).

A call's `CallToolResult` becomes the tool's answer (`call_result`): `isError` an error output,
`structuredContent` JSON, text joined, and the other content kinds (images, audio, resources)
described in a line each rather than dropped or pasted as base64.

A recording's header lists the MCP tools of its session (`recorded_tools`): what a replay needs to
declare the same tools and answer them without the server (`recorded_spec`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from relay.errors import ConfigError
from relay.tools.mcp_config import McpServerConfig, ToolSettings, tool_settings
from relay.tools.registry import ToolRegistry
from relay.tools.result import ToolResult
from relay.tools.spec import TOOL_NAME_PATTERN, HandlerKind, ToolSpec


@dataclass(frozen=True)
class McpToolInfo:
    """A tool as the server lists it: what the relay keeps of it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] | None = None


class ToolCaller(Protocol):
    """What a handler needs of a server's connection (`relay.mcp.connection.McpConnection`)."""

    name: str

    async def call(self, tool: str, arguments: dict[str, Any], *, idempotency_key: str | None = None) -> Any: ...


KEY_ARGUMENT = "_relay_idempotency_key"
"""The argument an MCP tool's handler is given the call's idempotency key in (`ToolSpec.key_parameter`;
a name no model's argument takes from it: the runner's value replaces any)."""
IDEMPOTENCY_META_KEY = "io.realtime-relay/idempotency-key"
"""Where the key goes in an MCP `tools/call` request's `_meta`."""


class McpToolHandler:
    """The handler of an MCP tool's spec: one call of `tool` on the server's connection."""

    def __init__(self, connection: ToolCaller, tool: str) -> None:
        self.connection = connection
        self.server = connection.name
        self.tool = tool
        self.__qualname__ = f"mcp:{self.server}/{tool}"   # what registry messages name it by

    async def __call__(self, **arguments: Any) -> ToolResult:
        key = arguments.pop(KEY_ARGUMENT, None)
        return call_result(await self.connection.call(self.tool, arguments, idempotency_key=key or None))

    def __repr__(self) -> str:
        return f"<MCP tool {self.tool} of {self.server}>"


def relay_name(config: McpServerConfig, tool: str) -> str:
    """The relay's name of a server's tool: its prefix and the name, with what a realtime tool name
    cannot hold (`[a-zA-Z0-9_-]`, 64 characters) replaced by `_`."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", config.prefix + tool)[:64] or "_"


def mcp_spec(config: McpServerConfig, info: McpToolInfo, handler: Callable[..., Any]) -> ToolSpec:
    """The spec of one MCP tool: the server's description and input schema (self-contained), the
    configuration's settings. Its arguments are a JSON object passed on whole: the server checks them
    against its schema, and its refusal is an error output the model reads."""
    from relay.tools.schema import OpenArguments, self_contained
    return ToolSpec(
        name=relay_name(config, info.name),
        description=info.description,
        parameters=self_contained(info.input_schema),
        handler=handler,
        kind=HandlerKind.ASYNC,
        arguments_model=OpenArguments,
        key_parameter=KEY_ARGUMENT,
        **config.settings_for(info.name).spec_fields(),
    )


# ---- results -------------------------------------------------------------------------------------
def call_result(result: Any) -> ToolResult:
    """A `CallToolResult` as the tool's answer (see the module docstring)."""
    parts = [content_text(block) for block in getattr(result, "content", None) or ()]
    text = "\n".join(part for part in parts if part)
    if getattr(result, "is_error", False):
        return ToolResult(error=text or "the tool failed without saying why")
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        return ToolResult(result=structured)
    return ToolResult(result=text)


def content_text(block: Any) -> str:
    """One content block as text: text as it is, other kinds described in one line."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return getattr(block, "text", "") or ""
    if kind in ("image", "audio"):
        return f"[{kind}: {getattr(block, 'mime_type', None) or 'unknown type'}, {_decoded_size(getattr(block, 'data', ''))} bytes]"
    if kind == "resource_link":
        described = f"[resource link: {getattr(block, 'name', '')} {getattr(block, 'uri', '')}"
        mime = getattr(block, "mime_type", None)
        return described + (f" ({mime})]" if mime else "]")
    if kind == "resource":
        resource = getattr(block, "resource", None)
        uri = getattr(resource, "uri", "")
        text = getattr(resource, "text", None)
        if isinstance(text, str):
            return f"[resource {uri}]\n{text}"
        return (f"[resource: {uri}, {getattr(resource, 'mime_type', None) or 'unknown type'}, "
                f"{_decoded_size(getattr(resource, 'blob', ''))} bytes]")
    return f"[{kind or 'unknown'} content]"


def _decoded_size(data: Any) -> int:
    """The size of base64 data once decoded."""
    if not isinstance(data, str):
        return 0
    stripped = data.rstrip("=")
    return len(stripped) * 3 // 4


# ---- recordings ----------------------------------------------------------------------------------
def recorded_tools(tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """The MCP tools among `tools`, as a recording's header lists them: the relay's name, the
    server and the tool's own name, what the model was told (description, parameters) and the
    call settings."""
    entries = []
    for spec in tools:
        handler = spec.handler
        if not isinstance(handler, McpToolHandler):
            continue
        settings = ToolSettings(timeout=spec.timeout, scheduling=spec.scheduling, interruption=spec.interruption,
                                on_start=spec.on_start, on_complete=spec.on_complete, on_failure=spec.on_failure,
                                on_delay=spec.on_delay)
        entries.append({"name": spec.name, "server": handler.server, "tool": handler.tool,
                        "description": spec.description, "parameters": spec.parameters,
                        "settings": settings.as_json()})
    return entries


def recorded_spec(entry: Mapping[str, Any], handler: Callable[..., Any]) -> ToolSpec:
    """A recorded MCP tool (an entry of `recorded_tools`) with another handler: what a replay
    declares and runs in its place. ConfigError for an entry that is not one."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        raise ConfigError(f"the recording's header lists an MCP tool it does not describe: {entry!r}")
    from relay.tools.schema import OpenArguments
    settings = entry.get("settings") if isinstance(entry.get("settings"), Mapping) else {}
    return ToolSpec(
        name=entry["name"],
        description=entry.get("description") if isinstance(entry.get("description"), str) else "",
        parameters=entry.get("parameters") if isinstance(entry.get("parameters"), dict) else
        {"type": "object", "properties": {}},
        handler=handler,
        kind=HandlerKind.ASYNC,
        arguments_model=OpenArguments,
        **tool_settings(settings, f"MCP tool {entry['name']} in the recording's header").spec_fields(),
    )


def reserved_names(registry: ToolRegistry) -> dict[str, str]:
    """The names `@tool` functions hold, with what holds each (for clash messages)."""
    return {spec.name: f"@tool {getattr(spec.handler, '__module__', '')}.{spec.name}".replace(" .", " ")
            for spec in registry}
