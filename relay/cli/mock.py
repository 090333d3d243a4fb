"""`relay mock`: run the mock realtime upstream until interrupted.

The first line on stdout is the WebSocket URL (scripts and tests read it to learn the port when
`--port 0` is given); the REST URL follows on the second line. Logs (a script's call to a tool
the session lacks, for one) go to stderr like the other commands' logs.
"""

from __future__ import annotations

import argparse
import asyncio

from pydantic import ValidationError

from relay.cli.exits import validation_line
from relay.cli.options import LOGGING, LOOP, port_number, read_text_input
from relay.edges.process import run_until_signalled
from relay.errors import ANOTHER_PORT, UnusableInput, cannot_listen
from relay.mock.gemini import GEMINI
from relay.mock.script import MockScript
from relay.mock.server import MockUpstream, RestPortUnavailable
from relay.mock.live import LIVE
from relay.mock.wire import DIALECTS

DEFAULT_PORT = 8765


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                        help=f"WebSocket port, 0 for any free port (default: {DEFAULT_PORT})")
    parser.add_argument("--rest-port", type=port_number, default=None,
                        help="port of the fake REST API (default: --port + 1, or any if --port is 0)")
    parser.add_argument("--script", metavar="FILE", help="JSON script of what the mock model says and calls")
    parser.add_argument("--dialect", choices=(*DIALECTS, GEMINI, LIVE), default="openai",
                        help="protocol flavour (default: openai; gemini serves Gemini Live, live GPT-Live)")
    parser.add_argument("--api-key", default=None, help="require this key from clients (default: accept any)")
    for opt in (*LOGGING, LOOP):
        opt.add_to(parser)


def rest_port_of(args: argparse.Namespace) -> int:
    """The REST API's port: `--rest-port`, else the WebSocket port + 1 (any free one with port 0)."""
    if args.rest_port is not None:
        return args.rest_port
    return args.port + 1 if args.port else 0


def load_script(path: str) -> MockScript:
    """The script in `path`, or UnusableInput saying in one line why it cannot be used."""
    text = read_text_input(path, "--script")
    try:
        return MockScript.model_validate_json(text)
    except ValidationError as exc:
        raise UnusableInput(f"cannot use script {path}: {validation_line(exc)}") from None


async def _serve(args: argparse.Namespace, script: MockScript, stop: asyncio.Event) -> int:
    rest_port = rest_port_of(args)
    try:
        mock = MockUpstream(script=script, dialect=args.dialect, api_key=args.api_key, host=args.host,
                            port=args.port, rest_port=rest_port)
        await mock.start()
    except RestPortUnavailable as exc:
        hint = ("choose another --rest-port" if args.rest_port is not None else
                "that port is --port + 1 unless --rest-port names another; choose a free one with "
                "--rest-port (0 picks one)")
        raise cannot_listen(args.host, exc.port, exc, what="the fake REST API", hint=hint) from None
    except OSError as exc:
        raise cannot_listen(args.host, args.port, exc, what="the WebSocket API",
                            hint=ANOTHER_PORT) from None
    try:
        print(mock.url, flush=True)
        print(mock.rest_url, flush=True)
        await stop.wait()
    finally:
        await mock.stop()
    return 0


def run(args: argparse.Namespace) -> int:
    script = load_script(args.script) if args.script else MockScript()
    stop = asyncio.Event()

    async def on_signal(name: str, again: bool) -> None:
        stop.set()

    return run_until_signalled(lambda: _serve(args, script, stop), on_signal, loop=args.loop)
