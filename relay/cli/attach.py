"""`relay attach`: attach to a live WebRTC or SIP call by its call_id and run tools beside it
(relay/edges/sideband.py); with `--inspector`, the call's live inspector on a port of its own."""

from __future__ import annotations

import argparse
import contextlib
import logging

from relay.cli.exits import FINDING, OK, UNUSABLE
from relay.cli.options import (
    INSPECTOR_TOKEN,
    LOOP,
    SIDEBAND,
    TRANSPORT,
    Command,
    config_fields,
    mcp_settings,
    option,
    require_tools,
    require_credentials,
    start,
)
from relay.edges.config import AUTH_TOKEN_ENV, SidecarConfig, is_loopback
from relay.edges.process import run_until_signalled
from relay.edges.sideband import CallEnded, Sidecar, SidecarRuntime
from relay.edges.upstream import UpstreamUnavailable
from relay.errors import UnusableInput, cannot_listen
from relay.session.policy import CLEAN_CLOSE_CODES

ATTACH_OPTIONS = (
    option("--call-id", field=None, required=True, metavar="ID",
           help="the call to attach to (rtc_...: from the WebRTC answer or the SIP webhook; "
                "live_...: a GPT-Live session, attached at /v1/live/sessions/ID/attach)"),
    *SIDEBAND,
    option("--declare-tools", action="store_true",
           help="add the tools to the session (keeping the other party's) instead of "
                "assuming they were declared when the call was accepted"),
    option("--inspector", field=None, metavar="HOST:PORT",
           help="serve the live inspector of this call at http://HOST:PORT/inspector (a token is "
                "needed beyond loopback: --auth-token)"),
    INSPECTOR_TOKEN,
    LOOP,
    TRANSPORT,
)

def run(args: argparse.Namespace) -> int:
    log = logging.getLogger("relay.sidecar")
    start(args)
    require_tools(args)
    listen = _inspector_address(args.inspector, args.auth_token) if args.inspector else None
    runtime = SidecarRuntime(SidecarConfig(**config_fields(args, ATTACH_OPTIONS), mcp=mcp_settings(args)))
    require_credentials(runtime, log)
    if listen is not None:
        runtime.redactor.add(args.auth_token)
    hub = None
    if listen is not None:   # imported here: an attach without the inspector starts sooner
        from relay.inspector.live import LiveHub
        hub = LiveHub()
    sidecar = Sidecar(args.call_id, runtime, live=hub)

    async def attached() -> int:
        try:
            end = await sidecar.run()
        except CallEnded:
            return UNUSABLE   # logged by run(): no such call (any more), a call id that cannot be used
        except UpstreamUnavailable:
            return FINDING    # logged by run()
        return OK if end.code in CLEAN_CLOSE_CODES else FINDING

    async def work() -> int:
        if hub is None or listen is None:
            return await attached()
        from relay.inspector.live import serve_inspector
        host, port = listen
        async with contextlib.AsyncExitStack() as stack:
            try:
                url = await stack.enter_async_context(
                    serve_inspector(hub, host, port, token=args.auth_token, dialect=runtime.dialect,
                                    redactor=runtime.redactor, backend=runtime.backend))
            except OSError as exc:
                raise cannot_listen(host, port, exc, what="--inspector") from None
            log.info("live inspector at %s", url, extra={"inspector": url, **sidecar.context})
            return await attached()

    async def detach(signal_name: str, again: bool) -> None:
        if not again:
            log.info("%s: detaching from the call", signal_name, extra=sidecar.context)
            await sidecar.stop(f"{signal_name}: detached")

    return run_until_signalled(work, detach, loop=args.loop)


def _inspector_address(value: str, token: str | None) -> tuple[str, int]:
    """`HOST:PORT` of `relay attach --inspector` (`[::1]:PORT` for IPv6); UnusableInput says why
    it cannot be used."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or int(port) > 65535:
        raise UnusableInput(f"--inspector takes HOST:PORT (e.g. 127.0.0.1:8123), not {value!r}")
    if not token and not is_loopback(host):
        raise UnusableInput(f"refusing to serve the inspector on {host} without a token: set --auth-token "
                            f"(or {AUTH_TOKEN_ENV}), or listen on loopback")
    return host, int(port)



COMMAND = Command(ATTACH_OPTIONS, run)
