"""`relay mock`: run the mock realtime upstream until interrupted.

The first line on stdout is the WebSocket URL (scripts and tests read it to learn the port when
`--port 0` is given); the REST URL follows on the second line.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from pydantic import ValidationError

from relay.mock.gemini import GEMINI
from relay.mock.script import MockScript
from relay.mock.server import MockUpstream
from relay.mock.wire import DIALECTS


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="WebSocket port, 0 for any free port (default: 8765)")
    parser.add_argument(
        "--rest-port", type=int, default=None, help="port of the fake REST API (default: --port + 1, or any if 0)"
    )
    parser.add_argument("--script", metavar="FILE", help="JSON script of what the mock model says and calls")
    parser.add_argument("--dialect", choices=(*DIALECTS, GEMINI), default="openai",
                        help="protocol flavour (default: openai; gemini serves Gemini Live)")
    parser.add_argument("--api-key", default=None, help="require this key from clients (default: accept any)")


async def _serve(args: argparse.Namespace, script: MockScript) -> None:
    rest_port = args.rest_port if args.rest_port is not None else (args.port + 1 if args.port else 0)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with MockUpstream(
        script=script, dialect=args.dialect, api_key=args.api_key, host=args.host, port=args.port, rest_port=rest_port
    ) as mock:
        print(mock.url, flush=True)
        print(mock.rest_url, flush=True)
        await stop.wait()


def run(args: argparse.Namespace) -> int:
    try:
        script = MockScript.load(args.script) if args.script else MockScript()
    except (OSError, ValidationError) as exc:
        print(f"relay mock: cannot use script {args.script}: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(args, script))
    except OSError as exc:
        print(f"relay mock: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0
