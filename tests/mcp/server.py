"""An MCP server written with the SDK's server API, for the relay's MCP tests (stdio and HTTP).

    python tests/mcp/server.py stdio
    python tests/mcp/server.py http [--port N] [--token T]    # prints PORT=<n> once it listens

Tools: echo (text), forecast (structured content), fail (isError), slow (sleeps), cancellations
(the calls of slow the client cancelled), crash (the process dies mid-call), picture (image
content), meta_key (the idempotency key in the request's `_meta`), pid (which process answers),
add_tool (registers a tool and says the list changed), and `deep` (a schema with $ref, const,
exclusive bounds and a type array: what Gemini refuses).
"""

from __future__ import annotations

import base64
import os
import socket
import sys
from typing import Literal

import anyio
from pydantic import BaseModel, Field

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")

server = MCPServer("relay-test", version="1.0.0")


@server.tool(structured_output=False)
def echo(text: str) -> str:
    """Say the text back."""
    return text


class Forecast(BaseModel):
    city: str
    temperature_c: float
    conditions: str


@server.tool()
def forecast(city: str) -> Forecast:
    """Tomorrow's weather in a city."""
    return Forecast(city=city, temperature_c=21.5, conditions="sunny")


@server.tool(structured_output=False)
def fail(reason: str) -> str:
    """Always fails, with the reason."""
    raise ToolError(f"cannot do it: {reason}")


CANCELLED: list[str] = []
_cancelled: list[anyio.Event] = []


@server.tool(structured_output=False)
async def slow(seconds: float) -> str:
    """Takes its time. A cancelled call (the client's notifications/cancelled) is noted for
    `cancellations`."""
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        CANCELLED.append(f"slow {seconds:g}")
        for waiting in _cancelled:
            waiting.set()
        raise
    return f"slept {seconds:g} s"


@server.tool(structured_output=False)
async def cancellations() -> str:
    """The calls of `slow` cancelled so far, one a line; waits (up to 5 s) for a first one."""
    if not CANCELLED:
        waiting = anyio.Event()
        _cancelled.append(waiting)
        with anyio.move_on_after(5):
            await waiting.wait()
    return "\n".join(CANCELLED)


@server.tool(structured_output=False)
async def crash(after: float = 0.2) -> str:
    """The server process dies during the call."""
    await anyio.sleep(after)
    os._exit(3)


@server.tool()
def picture() -> Image:
    """A 1x1 PNG."""
    return Image(data=PNG, format="png")


@server.tool(structured_output=False)
def pid() -> str:
    """Which process answers."""
    return str(os.getpid())


class Place(BaseModel):
    name: str
    kind: Literal["city"] = "city"


@server.tool(structured_output=False)
def deep(place: Place, days: int = Field(gt=0, le=10), unit: str | None = None) -> str:
    """A schema with what Gemini refuses."""
    return f"{place.name}: {days} days in {unit or 'C'}"


@server.tool(structured_output=False)
def meta_key(ctx: Context) -> str:
    """The idempotency key the request's `_meta` carries ("none" without one)."""
    meta = ctx.request_context.meta or {}
    return str(meta.get("io.realtime-relay/idempotency-key", "none"))


@server.tool(structured_output=False)
async def add_tool(name: str, ctx: Context) -> str:
    """Registers a tool called `name` and says the tool list changed."""

    def added(text: str) -> str:
        return f"{name}: {text}"

    ctx.mcp_server.add_tool(added, name=name, description=f"added at run time: {name}", structured_output=False)
    await ctx.session.send_tool_list_changed()
    await ctx.notify_tools_changed()
    return f"added {name}"


def serve_http(port: int, token: str | None) -> None:
    import uvicorn

    app = server.streamable_http_app()

    async def checked(scope, receive, send):   # the header the relay must send
        if scope["type"] == "http" and token is not None:
            if dict(scope["headers"]).get(b"authorization", b"").decode() != f"Bearer {token}":
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await app(scope, receive, send)

    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listening.bind(("127.0.0.1", port))
    listening.listen(128)   # connections wait in the backlog until uvicorn accepts them
    print(f"PORT={listening.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(checked, log_level="warning", lifespan="on")).run(sockets=[listening])


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        arguments = sys.argv[2:]
        port = int(arguments[arguments.index("--port") + 1]) if "--port" in arguments else 0
        token = arguments[arguments.index("--token") + 1] if "--token" in arguments else None
        serve_http(port, token)
    else:
        if os.environ.get("MCP_TEST_STDERR"):   # what a server says on stderr as it starts
            print(os.environ["MCP_TEST_STDERR"], file=sys.stderr, flush=True)
        server.run()
