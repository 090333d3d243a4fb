"""`relay sidecar`: accept incoming SIP calls from the provider's signed webhooks and attach to
each with the tools (relay/edges/sidecar.py)."""

from __future__ import annotations

import argparse
import logging

from relay.cli.options import (
    DRAIN_SECONDS,
    HOST,
    INSPECTOR_TOKEN,
    LOOP,
    PORT,
    SIDEBAND,
    TRANSPORT,
    Command,
    config_fields,
    mcp_settings,
    option,
    read_text_input,
    require_tools,
    require_credentials,
    start,
)
from relay.edges.config import AUTH_TOKEN_ENV, is_loopback
from relay.edges.process import run_until_signalled
from relay.edges.sidecar import (
    DEFAULT_LIVE_MODEL,
    DEFAULT_MODEL,
    DELEGATIONS,
    DEFAULT_REST_BASE,
    SidecarServer,
    SidecarServerConfig,
)
from relay.edges.sidecar import DEFAULT_PORT as WEBHOOK_PORT
from relay.errors import ANOTHER_PORT, UnusableInput, cannot_listen
from relay.inspector.live import LiveHub

SIDECAR_OPTIONS = (
    HOST,
    PORT.but(default=WEBHOOK_PORT, help=f"port (default {WEBHOOK_PORT}; 0 picks one)"),
    *SIDEBAND,
    option("--instructions", field=None, metavar="FILE", help="session instructions for accepted calls, from a file"),
    option("--model", default=None,
           help=f"model of accepted calls (default {DEFAULT_MODEL}; with --dialect live, {DEFAULT_LIVE_MODEL})"),
    option("--delegation", default=None, choices=DELEGATIONS,
           help="GPT-Live: the delegation accepted calls get (default client with a @delegate among the "
                "tools, else responses: the tools in delegation.responses.tools)"),
    option("--responses-model", default=None, metavar="MODEL",
           help="GPT-Live: the backend model of Responses delegation (required for it)"),
    option("--rest-base", default=DEFAULT_REST_BASE, metavar="URL",
           help=f"provider REST API that accepts calls (default {DEFAULT_REST_BASE})"),
    DRAIN_SECONDS.but(help="on SIGTERM/SIGINT, how long attached calls keep their tools (default 10)"),
    option("--inspector", field=None, action="store_true",
           help="serve the live inspector of the attached calls at /inspector on this port, behind "
                "--auth-token (required beyond loopback)"),
    INSPECTOR_TOKEN,
    LOOP,
    TRANSPORT,
)

def run(args: argparse.Namespace) -> int:
    log = logging.getLogger("relay.webhooks")
    start(args)
    require_tools(args)
    instructions = read_text_input(args.instructions, "--instructions") if args.instructions else None
    if args.inspector and not args.auth_token and not is_loopback(args.host):
        raise UnusableInput(f"refusing to serve the inspector on {args.host} without a token: set --auth-token "
                            f"(or {AUTH_TOKEN_ENV}), or listen on loopback")
    hub = LiveHub() if args.inspector else None
    server = SidecarServer(SidecarServerConfig(**config_fields(args, SIDECAR_OPTIONS),
                                                             instructions=instructions, mcp=mcp_settings(args)),
                                         live=hub, inspector_token=args.auth_token)
    require_credentials(server.runtime, log)

    async def work() -> int:
        try:
            await server.run()
        except OSError as exc:
            raise cannot_listen(args.host, args.port, exc, if_in_use=ANOTHER_PORT) from None
        return 0

    async def drain(signal_name: str, again: bool) -> None:
        if not again:
            log.info("%s: no new calls; draining attached calls", signal_name,
                     extra={"drain_seconds": args.drain_seconds})
            server.request_stop()

    return run_until_signalled(work, drain, loop=args.loop)



COMMAND = Command(SIDECAR_OPTIONS, run)
