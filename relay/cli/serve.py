"""`relay serve`: the proxy. Clients connect to the relay instead of the provider; the relay holds
the provider key, adds its tools and relays everything else (relay/edges/serve.py)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal

from relay.cli.options import (
    AUTH_TOKEN,
    DIALECT,
    DRAIN_SECONDS,
    HOST,
    LEASE_SECONDS,
    LIMITS,
    LOGGING,
    LOOP,
    MCP_OPTIONS,
    PORT,
    RECORDING,
    RESUME_SECONDS,
    STORE,
    TOOLS,
    TRANSPORT,
    UPSTREAM,
    Command,
    config_fields,
    mcp_settings,
    option,
    require_credentials,
    start,
)
from relay.edges.config import DEFAULT_HOLD_LIMIT, ServerConfig
from relay.edges.process import run_in_loop, run_workers
from relay.edges.serve import RelayServer, run_server
from relay.errors import UnusableInput
from relay.mcp.servers import ToolSet
from relay.observe.metrics import metrics_for_workers

SERVE_OPTIONS = (
    UPSTREAM, DIALECT, TOOLS, *MCP_OPTIONS, HOST, PORT,
    AUTH_TOKEN,
    option("--insecure-no-auth", action="store_true",
           help="allow listening beyond loopback without a client token"),
    option("--allow-origin", field="allow_origins", action="append", default=[], metavar="ORIGIN",
           help="browser Origin allowed to connect (repeatable; default: any with a client token, none without)"),
    option("--expose-tool-events", action="store_true",
           help="let clients see the relay's tools, calls and outputs"),
    option("--hold-limit", type=float, default=DEFAULT_HOLD_LIMIT, metavar="SECONDS",
           help="the longest a client's response.create waits for the relay's running tools before "
                f"it goes up without their outputs, which follow with their own response (default {DEFAULT_HOLD_LIMIT:g})"),
    option("--live-reseed", action="store_true",
           help="GPT-Live: when the upstream connection drops, carry the session on in a new one seeded with "
                "its configuration and conversation, for the client (docs/gpt-live.md, Recovery)"),
    option("--fillers-in-conversation", action="store_true",
           help="let the relay's fillers join the provider's conversation, as a client that keeps what it hears "
                "(pipecat, LiveKit Agents, the Agents SDK) has them, instead of staying out of band"),
    *LIMITS,
    DRAIN_SECONDS,
    option("--max-sessions", type=int, default=0, metavar="N", to=lambda sessions: sessions or None,
           help="sessions open at once (per worker); a client past them gets 503 at the handshake "
                "(default 0: no limit)"),
    option("--workers", field=None, type=int, default=1, metavar="N",
           help="processes sharing the port with SO_REUSEPORT (default 1)"),
    option("--tls-cert", metavar="PEM", help="serve wss:// with this certificate chain"),
    option("--tls-key", metavar="PEM", help="the private key of --tls-cert"),
    option("--inspector", action="store_true",
           help="serve the live session inspector at /inspector on this port, behind the client token "
                "(open http://HOST:PORT/inspector#token=TOKEN)"),
    *RECORDING,
    STORE,
    RESUME_SECONDS,
    LEASE_SECONDS,
    *LOGGING,
    LOOP,
    TRANSPORT,
)

def run(args: argparse.Namespace) -> int:
    log = logging.getLogger("relay.server")
    start(args)
    if args.workers < 1:
        raise UnusableInput("--workers must be at least 1")
    if args.inspector and args.workers > 1:
        raise UnusableInput("--inspector shows the sessions of one process: it cannot be used with --workers")
    server = RelayServer(ServerConfig(**config_fields(args, SERVE_OPTIONS), mcp=mcp_settings(args)))
    require_credentials(server, log)
    if args.workers > 1 and server.tool_set.mcp is not None:
        # each worker reaches the MCP servers itself (one connection per server per process):
        # an unreachable server or a name clash is found here first, once, before any fork (with a
        # tool set of its own: the server's metrics must not be made before the workers' directory)
        run_in_loop(lambda: _reach_tools(ToolSet(server.config.tools, server.config.mcp)), args.loop)

    def run_worker(port: int) -> int:
        server.config = dataclasses.replace(server.config, port=port, reuse_port=True)
        return run_server(server, (signal.SIGTERM,), loop=args.loop)

    with metrics_for_workers(args.workers) as worker_exited:   # several workers share /metrics
        if args.workers == 1:
            return run_server(server, loop=args.loop)
        return run_workers(server.config.host, server.config.port, args.workers, run_worker, worker_exited)



async def _reach_tools(tools: ToolSet) -> None:
    await tools.start()
    await tools.close()


COMMAND = Command(SERVE_OPTIONS, run)
configure = COMMAND.configure   # `relay serve`'s options on another parser (a program embedding it)
