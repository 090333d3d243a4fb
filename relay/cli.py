"""The `relay` command line: one subcommand per job.

The options the edges share (tools, upstream, dialect, recording, logging, listening, limits,
reconnecting) are defined once here, each with the configuration field it sets, and grouped; a
command lists the groups and options it takes, and `config_fields` turns parsed arguments into
configuration fields. Adding an option means defining it and naming it in a group or command.

COMMANDS maps each subcommand to where it is defined: a module name (the module provides
`configure(parser)` and `run(args) -> int`), or `module:NAME` for an object there with the same
two, as the `Command`s below.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import logging
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from relay import __version__
from relay.config import (
    AUTH_TOKEN_ENV,
    DEFAULT_PORT,
    DEFAULT_RECONNECT_ATTEMPTS,
    DEFAULT_RECONNECT_DELAY,
    EdgeRuntime,
    ServerConfig,
    SidecarConfig,
    is_loopback,
    tool_registry,
)
from relay.demo import EXAMPLE_TOOLS, run_demo_command
from relay.dialects import DIALECT_CHOICES
from relay.engine import DEFAULT_HISTORY_LIMIT
from relay.exits import (
    INTERNAL_ERROR,
    INTERRUPTED,
    TRACEBACK_ENV,
    UNUSABLE,
    UnusableInput,
    cannot_listen,
    one_line,
    refusal,
)
from relay.export import FORMATS, run_export
from relay.inspector.live import LiveHub, serve_inspector
from relay.logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from relay.metrics import metrics_for_workers
from relay.policy import (
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_QUEUE_BYTES,
)
from relay.process import run_until_signalled, run_workers
from relay.replay import DEFAULT_GATE_TIMEOUT, run_replay
from relay.server import RelayServer, run_server
from relay.sidecar import Sidecar, SidecarRuntime
from relay.upstream import DEFAULT_UPSTREAM, UpstreamUnavailable
from relay.webhooks import DEFAULT_MODEL, DEFAULT_REST_BASE, SidecarServer, SidecarServerConfig
from relay.webhooks import DEFAULT_PORT as WEBHOOK_PORT

# subcommand -> (where it is defined, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("relay.cli:DEMO", "see the relay at work on the embedded mock upstream (no key needed)"),
    "mock": ("relay.mock.cli", "run the mock realtime upstream (no key, no network)"),
    "replay": ("relay.cli:REPLAY",
               "replay a recorded session against your tools and report what changed"),
    "inspect": ("relay.inspector.cli",
                "write a recorded session as one HTML page: a timeline to look at and listen to"),
    "export": ("relay.cli:EXPORT",
               "export a recorded conversation as OpenAI chat, Anthropic, Gemini or Vapi JSON"),
    "serve": ("relay.cli:SERVE",
              "proxy realtime clients to OpenAI, Azure, Foundry or Gemini Live and run tools in their sessions"),
    "attach": ("relay.cli:ATTACH",
               "attach to a live WebRTC or SIP call by call_id and run tools beside it"),
    "sidecar": ("relay.cli:SIDECAR",
                "accept incoming SIP calls from signed webhooks and attach to each with tools"),
}


# ---- options ---------------------------------------------------------------------------------

def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Option:
    """One command-line option: its flags and argparse settings, and the configuration field it
    sets (`to` converts the parsed value; None: an option the command reads itself).
    `default_from` computes the default when the parser is built (from the environment)."""

    flags: tuple[str, ...]
    settings: dict[str, Any]
    field: str | None
    to: Callable[[Any], Any] = _same
    default_from: Callable[[], Any] | None = None

    def but(self, **settings: Any) -> Option:
        """The same option with some settings changed (another default or help for one command)."""
        return dataclasses.replace(self, settings={**self.settings, **settings})

    @property
    def dest(self) -> str:
        return self.flags[0].lstrip("-").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser) -> None:
        settings = self.settings
        if self.default_from is not None:
            settings = {**settings, "default": self.default_from()}
        parser.add_argument(*self.flags, **settings)


_OWN_NAME = "<own name>"


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535 (0: the system picks one)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, not {port}")
    return port


def option(*flags: str, field: str | None = _OWN_NAME, to: Callable[[Any], Any] = _same,
           default_from: Callable[[], Any] | None = None, **settings: Any) -> Option:
    """An option that sets the configuration field of its own name (`--max-queue-bytes`:
    `max_queue_bytes`), or `field` (None: none)."""
    name = flags[0].lstrip("-").replace("-", "_")
    return Option(flags, settings, name if field == _OWN_NAME else field, to, default_from)


TOOLS = option("--tools", action="append", default=[], metavar="SPEC",
               help="a .py file or module with @tool functions (repeatable)")
UPSTREAM = option("--upstream", default=None, metavar="URL", to=lambda url: url or "",
                  help=f"provider realtime URL (default {DEFAULT_UPSTREAM}; with --dialect gemini, "
                       "Gemini Live's BidiGenerateContent endpoint)")
DIALECT = option("--dialect", choices=DIALECT_CHOICES,
                 help="wire dialect of the upstream (default: inferred from the URL)")
RECORD = option("--record", field="record_dir", metavar="DIR", help="write one recording per session into DIR")
RECORD_AUDIO = option("--record-audio", choices=("keep", "drop"), default="keep",
                      help="keep or drop audio in recordings (default keep)")
LOG_FORMAT = option("--log-format", field=None, choices=LOG_FORMATS, default="auto",
                    help="stderr log lines as JSON or text (default auto: text when stderr is a "
                         "terminal, JSON otherwise)")
LOG_LEVEL = option("--log-level", field=None, choices=LOG_LEVELS, default="info",
                   help="the least severe log lines shown (default info; debug adds websockets' "
                        "connection lines)")
HOST = option("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
PORT = option("--port", type=port_number, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks one)")
DRAIN_SECONDS = option("--drain-seconds", type=float, default=DEFAULT_DRAIN_SECONDS, metavar="S",
                       help="on SIGTERM/SIGINT, how long open sessions may go on (default 10)")
MAX_FRAME_BYTES = option("--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME_BYTES, metavar="N",
                         help="largest WebSocket message accepted from either side (default 16 MiB)")
MAX_QUEUE_BYTES = option("--max-queue-bytes", type=int, default=DEFAULT_QUEUE_BYTES, metavar="N",
                         help="bytes queued toward a peer that is not reading before it is closed "
                              "(default 32 MiB)")
MAX_CLIENT_EVENTS = option(
    "--max-client-events-per-second", type=float, default=DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND, metavar="N",
    help="a client sending more events than this (bursts: twice as many) gets an "
         "error event and is closed with 1008 (default 1000; 0: no limit)")
HISTORY_ITEMS = option("--history-items", field="history_limit", to=lambda items: items or None,
                       type=int, default=DEFAULT_HISTORY_LIMIT, metavar="N",
                       help="recent items, responses and finished calls each session keeps in memory "
                            f"(default {DEFAULT_HISTORY_LIMIT}; 0: all; the recording keeps everything)")
RECONNECT_ATTEMPTS = option(
    "--reconnect-attempts", type=int, default=DEFAULT_RECONNECT_ATTEMPTS, metavar="N",
    help=f"reopen a dropped sideband up to N times (default {DEFAULT_RECONNECT_ATTEMPTS})")
RECONNECT_DELAY = option(
    "--reconnect-delay", type=float, default=DEFAULT_RECONNECT_DELAY, metavar="S",
    help=f"wait before the first reconnect attempt, doubled for each next (default {DEFAULT_RECONNECT_DELAY})")

# groups, in the order the commands list them
LOGGING = (LOG_FORMAT, LOG_LEVEL)
RECORDING = (RECORD, RECORD_AUDIO)
LIMITS = (MAX_FRAME_BYTES, MAX_QUEUE_BYTES, MAX_CLIENT_EVENTS, HISTORY_ITEMS)
SIDEBAND = (
    TOOLS.but(required=True, default=None),
    UPSTREAM.but(default=DEFAULT_UPSTREAM,
                 help=f"provider realtime URL; the call_id is added to it (default {DEFAULT_UPSTREAM})"),
    DIALECT,
    RECORD.but(help="write one recording per attached call into DIR"),
    RECORD_AUDIO,
    RECONNECT_ATTEMPTS,
    RECONNECT_DELAY,
    *LOGGING,
)
"""What `relay attach` and `relay sidecar` share: tools, upstream, recording, reconnecting, logging."""

AUTH_TOKEN = option("--auth-token", default_from=lambda: os.environ.get(AUTH_TOKEN_ENV) or None, metavar="TOKEN",
                    help=f"token clients must present (default ${AUTH_TOKEN_ENV}; prefer the variable: "
                         "arguments are visible to other users)")

INSPECTOR_TOKEN = dataclasses.replace(
    AUTH_TOKEN.but(help=f"token the --inspector page asks for (default ${AUTH_TOKEN_ENV})"), field=None)
"""attach's and sidecar's: their sessions take no client token, their inspector does."""

SERVE_OPTIONS = (
    UPSTREAM, DIALECT, TOOLS, HOST, PORT,
    AUTH_TOKEN,
    option("--insecure-no-auth", action="store_true",
           help="allow listening beyond loopback without a client token"),
    option("--allow-origin", field="allow_origins", action="append", default=[], metavar="ORIGIN",
           help="browser Origin allowed to connect (repeatable; default: any)"),
    option("--expose-tool-events", action="store_true",
           help="let clients see the relay's tools, calls and outputs"),
    *LIMITS,
    DRAIN_SECONDS,
    option("--workers", field=None, type=int, default=1, metavar="N",
           help="processes sharing the port with SO_REUSEPORT (default 1)"),
    option("--tls-cert", metavar="PEM", help="serve wss:// with this certificate chain"),
    option("--tls-key", metavar="PEM", help="the private key of --tls-cert"),
    option("--inspector", action="store_true",
           help="serve the live session inspector at /inspector on this port, behind the client token "
                "(open http://HOST:PORT/inspector#token=TOKEN)"),
    *RECORDING,
    *LOGGING,
)
ATTACH_OPTIONS = (
    option("--call-id", field=None, required=True, metavar="ID",
           help="the call to attach to (rtc_...: from the WebRTC answer or the SIP webhook)"),
    *SIDEBAND,
    option("--declare-tools", action="store_true",
           help="add the tools to the session (keeping the other party's) instead of "
                "assuming they were declared when the call was accepted"),
    option("--inspector", field=None, metavar="HOST:PORT",
           help="serve the live inspector of this call at http://HOST:PORT/inspector (a token is "
                "needed beyond loopback: --auth-token)"),
    INSPECTOR_TOKEN,
)
SIDECAR_OPTIONS = (
    HOST,
    PORT.but(default=WEBHOOK_PORT, help=f"port (default {WEBHOOK_PORT}; 0 picks one)"),
    *SIDEBAND,
    option("--instructions", field=None, metavar="FILE", help="session instructions for accepted calls, from a file"),
    option("--model", default=DEFAULT_MODEL, help=f"model of accepted calls (default {DEFAULT_MODEL})"),
    option("--rest-base", default=DEFAULT_REST_BASE, metavar="URL",
           help=f"provider REST API that accepts calls (default {DEFAULT_REST_BASE})"),
    DRAIN_SECONDS.but(help="on SIGTERM/SIGINT, how long attached calls keep their tools (default 10)"),
    option("--inspector", field=None, action="store_true",
           help="serve the live inspector of the attached calls at /inspector on this port, behind "
                "--auth-token (required beyond loopback)"),
    INSPECTOR_TOKEN,
)
# replay, export and demo read their arguments themselves: no configuration object
REPLAY_OPTIONS = (
    option("recording", field=None, help="a relay recording (.jsonl) or a plain event log"),
    TOOLS,
    DIALECT.but(help="override the recording's dialect"),
    option("--json", field=None, action="store_true", help="print the result as JSON"),
    option("--realtime", action="store_true", help="keep the recorded pacing"),
    option("--gate-timeout", type=float, default=DEFAULT_GATE_TIMEOUT,
           help="seconds to wait for a handler before calling a recorded send missing"),
    option("--html", metavar="PAGE", help="also write the inspector page, divergences marked"),
    option("--allow-empty", field=None, action="store_true",
           help="replay a plain event log (no relay sends recorded: nothing to compare) instead of "
                "refusing it, to see what the relay would do"),
    option("--allow-incomplete", field=None, action="store_true",
           help="replay a recording that lost frames (cut short, no end line) instead of refusing it"),
)
EXPORT_OPTIONS = (
    option("recording", field=None, help="a relay recording or a plain event log (JSON lines)"),
    option("--format", required=True, choices=FORMATS, help="the shape of the export"),
    option("--out", metavar="FILE", help="write the JSON here instead of to standard output"),
    option("--allow-incomplete", field=None, action="store_true",
           help="export a recording that lost frames (cut short, no end line) instead of refusing it"),
)
DEMO_OPTIONS = (
    option("--tools", default=str(EXAMPLE_TOOLS),
           help=f"a .py file or module with @tool functions (default: {EXAMPLE_TOOLS}, the example "
                "tools the package ships; examples/tools.py in a checkout)"),
    RECORD.but(default="recordings", help="where to write the session's recording (default: ./recordings)"),
    option("--no-record", field=None, action="store_true", help="do not record the session"),
    option("--color", field=None, choices=("auto", "always", "never"), default="auto",
           help="colour the timeline (default auto: when standard output is a terminal)"),
)


def config_fields(args: argparse.Namespace, options: Sequence[Option]) -> dict[str, Any]:
    """The configuration fields the parsed `args` set, from the options that name one."""
    return {opt.field: opt.to(getattr(args, opt.dest)) for opt in options if opt.field is not None}


# ---- commands --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    """A subcommand whose options are defined here: `configure` adds them, `run` does the job."""

    options: tuple[Option, ...]
    run: Callable[[argparse.Namespace], int]

    def configure(self, parser: argparse.ArgumentParser) -> None:
        for opt in self.options:
            opt.add_to(parser)


def _start(args: argparse.Namespace) -> None:
    """What every edge command does first (`main` has set up logging as asked): `--record` is
    checked, and `--tools mymodule` finds a module next to the user, as `python -m` would."""
    _check_record_dir(args.record)
    _tools_from_working_directory()


def _check_record_dir(record: str | None) -> None:
    """A `--record` that names a file would fail every session's recording: refuse it at once
    (the library's edges only log such a failure, the session goes on)."""
    if record is not None and Path(record).exists() and not Path(record).is_dir():
        raise UnusableInput(f"--record {record} is a file: recordings go into a directory")


def _tools_from_working_directory() -> None:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def _run_serve(args: argparse.Namespace) -> int:
    log = logging.getLogger("relay.server")
    _start(args)
    if args.workers < 1:
        raise UnusableInput("--workers must be at least 1")
    if args.inspector and args.workers > 1:
        raise UnusableInput("--inspector shows the sessions of one process: it cannot be used with --workers")
    server = _edge(lambda: RelayServer(ServerConfig(**config_fields(args, SERVE_OPTIONS))), log)

    def run_worker(port: int) -> int:
        server.config = dataclasses.replace(server.config, port=port, reuse_port=True)
        return run_server(server, (signal.SIGTERM,))

    with metrics_for_workers(args.workers) as worker_exited:   # several workers share /metrics
        if args.workers == 1:
            return run_server(server)
        return run_workers(server.config.host, server.config.port, args.workers, run_worker, worker_exited)


def _run_attach(args: argparse.Namespace) -> int:
    log = logging.getLogger("relay.sidecar")
    _start(args)
    runtime = _edge(lambda: SidecarRuntime(SidecarConfig(**config_fields(args, ATTACH_OPTIONS))), log)
    listen = _inspector_address(args.inspector, args.auth_token) if args.inspector else None
    if listen is not None:
        runtime.redactor.add(args.auth_token)
    hub = LiveHub() if listen is not None else None
    sidecar = Sidecar(args.call_id, runtime, live=hub)

    async def attached() -> int:
        try:
            end = await sidecar.run()
        except UpstreamUnavailable:
            return 1   # logged by run()
        return 1 if end.code not in (1000, 1001) else 0

    async def work() -> int:
        if hub is None or listen is None:
            return await attached()
        host, port = listen
        async with contextlib.AsyncExitStack() as stack:
            try:
                url = await stack.enter_async_context(
                    serve_inspector(hub, host, port, token=args.auth_token, dialect=runtime.dialect,
                                    redactor=runtime.redactor))
            except OSError as exc:
                raise cannot_listen(host, port, exc, what="--inspector") from None
            log.info("live inspector at %s", url, extra={"inspector": url, **sidecar.context})
            return await attached()

    async def detach(signal_name: str, again: bool) -> None:
        if not again:
            log.info("%s: detaching from the call", signal_name, extra=sidecar.context)
            await sidecar.stop(f"{signal_name}: detached")

    return run_until_signalled(work, detach)


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


def _run_sidecar(args: argparse.Namespace) -> int:
    log = logging.getLogger("relay.webhooks")
    _start(args)
    instructions = read_text_input(args.instructions, "--instructions") if args.instructions else None
    if args.inspector and not args.auth_token and not is_loopback(args.host):
        raise UnusableInput(f"refusing to serve the inspector on {args.host} without a token: set --auth-token "
                            f"(or {AUTH_TOKEN_ENV}), or listen on loopback")
    hub = LiveHub() if args.inspector else None
    server = _edge(lambda: SidecarServer(SidecarServerConfig(**config_fields(args, SIDECAR_OPTIONS),
                                                             instructions=instructions),
                                         live=hub, inspector_token=args.auth_token), log)

    async def work() -> int:
        try:
            await server.run()
        except OSError as exc:
            raise cannot_listen(args.host, args.port, exc) from None
        return 0

    async def drain(signal_name: str, again: bool) -> None:
        if not again:
            log.info("%s: no new calls; draining attached calls", signal_name,
                     extra={"drain_seconds": args.drain_seconds})
            server.request_stop()

    return run_until_signalled(work, drain)


Edge = TypeVar("Edge", RelayServer, SidecarRuntime, SidecarServer)


def _edge(build: Callable[[], Edge], log: logging.Logger) -> Edge:
    """The edge `build` makes from its configuration (a refused configuration raises
    ConfigError: `main` says it in one line); a missing provider key is worth a warning."""
    edge = build()
    runtime: EdgeRuntime = edge.runtime if isinstance(edge, SidecarServer) else edge
    warning = runtime.missing_key()
    if warning is not None:
        log.warning("%s", warning)
    return edge


def _run_replay(args: argparse.Namespace) -> int:
    _tools_from_working_directory()
    tools = tool_registry(args.tools)
    return run_replay(args.recording, tools, dialect=args.dialect, as_json=args.json, realtime=args.realtime,
                      gate_timeout=args.gate_timeout, html=args.html, allow_empty=args.allow_empty,
                      allow_incomplete=args.allow_incomplete)


def _run_export(args: argparse.Namespace) -> int:
    return run_export(args.recording, args.format, out=args.out, allow_incomplete=args.allow_incomplete)


def _run_demo(args: argparse.Namespace) -> int:
    if not args.no_record:
        _check_record_dir(args.record)
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty())
    return run_demo_command(tools=args.tools, record_dir=None if args.no_record else args.record, color=color)


SERVE = Command(SERVE_OPTIONS, _run_serve)
ATTACH = Command(ATTACH_OPTIONS, _run_attach)
SIDECAR = Command(SIDECAR_OPTIONS, _run_sidecar)
REPLAY = Command(REPLAY_OPTIONS, _run_replay)
EXPORT = Command(EXPORT_OPTIONS, _run_export)
DEMO = Command(DEMO_OPTIONS, _run_demo)
configure_serve = SERVE.configure   # `relay serve`'s options on another parser (a program embedding it)


# ---- the parser ------------------------------------------------------------------------------

def _command(target: str) -> Any:
    """The module, or the `module:NAME` object, that configures and runs a subcommand."""
    module_name, _, name = target.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, name) if name else module


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relay",
        description="Run an application's tools server-side in realtime speech-to-speech sessions.",
    )
    parser.add_argument("--version", action="version", version=f"relay {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (target, help_text) in COMMANDS.items():
        command = _command(target)
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        command.configure(command_parser)
        command_parser.set_defaults(_run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (`relay.exits`). The one place that turns what a command
    raises into one line on stderr: a log line for the commands that log (JSON or text, as
    `--log-format` says), `relay COMMAND: ...` for the others; never a traceback."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return UNUSABLE
    logs = hasattr(args, "log_format")
    if logs:
        configure_logging(args.log_format, level=args.log_level)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return INTERRUPTED
    except Exception as exc:
        return _refuse(args.command, exc, logs=logs)


def _refuse(command: str, exc: Exception, *, logs: bool) -> int:
    """Say in one line why `command` stopped; the status: 2 for input it cannot use, 70 for a
    bug (its traceback only with RELAY_TRACEBACK=1)."""
    line = refusal(exc)
    status = UNUSABLE
    if line is None:
        status = INTERNAL_ERROR
        cause: BaseException = exc
        while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
            cause = cause.exceptions[0]
        line = f"internal error, a bug in relay: {type(cause).__name__}: {one_line(str(cause))}"
        if os.environ.get(TRACEBACK_ENV):
            traceback.print_exception(exc, file=sys.stderr)
        else:
            line += f" ({TRACEBACK_ENV}=1 shows the traceback)"
    if logs:
        logging.getLogger("relay.cli").error("%s", line, extra={"command": command})
    else:
        print(f"relay {command}: {line}", file=sys.stderr)
    return status


def read_text_input(path: str, option: str) -> str:
    """The UTF-8 text of a file an option names, or UnusableInput saying why it cannot be had."""
    source = Path(path)
    if source.is_dir():
        raise UnusableInput(f"{option} {path} is a directory, not a file")
    try:
        return source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UnusableInput(f"{option} {path}: no such file") from None
    except OSError as exc:
        raise UnusableInput(f"cannot read {option} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UnusableInput(f"{option} {path} is not UTF-8 text (byte {exc.start})") from None
