#!/usr/bin/env python3
"""The MCP server of the tool-turnaround benchmark (scripts/bench_suite.py): one tool, `instant`,
that returns its number at once, so the figure is the relay's turnaround plus the MCP round trip
(JSON-RPC over the server's stdin/stdout, or an HTTP request to it).

    python scripts/bench_mcp_server.py stdio
    python scripts/bench_mcp_server.py http      # prints its URL (http://127.0.0.1:PORT/mcp) once it listens
"""

from __future__ import annotations

import socket
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("relay-bench")


@server.tool(structured_output=False)
def instant(n: int) -> str:
    """Return the number at once."""
    return f'{{"n": {n}}}'


def serve_http() -> None:
    import uvicorn

    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    listening.listen(128)
    print(f"http://127.0.0.1:{listening.getsockname()[1]}/mcp", flush=True)
    uvicorn.Server(uvicorn.Config(server.streamable_http_app(), log_level="warning", lifespan="on",
                                  access_log=False)).run(sockets=[listening])


if __name__ == "__main__":
    serve_http() if sys.argv[1:2] == ["http"] else server.run()
