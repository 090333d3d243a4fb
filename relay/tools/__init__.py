"""What a tool author imports: `@tool`, `ToolResult`, the `Scheduling` and `Interruption`
choices, `IdempotencyKey` (the type of a parameter that asks for the call's idempotency key), `delegate`
and `Delegation` (GPT-Live's client delegations), `ToolRegistry` (to hand a set of tools to `relay.serve`, `relay.attach` or an engine in a
test), and the two errors defining and loading tools raise, for tests that expect them.

    from relay.tools import ToolResult, tool

The relay's own machinery lives in submodules, one job each, and is imported from there:
`result` (ToolResult and the choices), `errors`, `schema` (type hints -> flat JSON Schema, argument
checking), `spec` (ToolSpec, @tool), `registry`, `loading` (importing user files), `render`
(outcomes -> output text), and the second tool source, MCP servers: `mcp_config` (what the operator
configured), `mcp` (one connection per server per process), `mcp_tools` (their tools as specs);
`sources` builds a configuration's tools from both.
"""

from relay.tools.delegation import Delegation, delegate
from relay.tools.errors import ToolDefinitionError, ToolLoadError
from relay.tools.registry import ToolRegistry
from relay.tools.result import IdempotencyKey, Interruption, Scheduling, ToolResult
from relay.tools.spec import tool

__all__ = [
    "Delegation",
    "IdempotencyKey",
    "Interruption",
    "Scheduling",
    "ToolDefinitionError",
    "ToolLoadError",
    "ToolRegistry",
    "ToolResult",
    "delegate",
    "tool",
]
