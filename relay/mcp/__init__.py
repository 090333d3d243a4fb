"""The MCP servers whose tools the relay runs, as I/O: one connection per server per process, kept
by its owner task (`connection`), and a configuration's servers and tools together (`servers`).
What an MCP tool is as data (its spec, its result, its entry in a recording's header) is
`relay.tools.mcp_tools`'s, so that the engine, which sees only specs, loads none of this."""
