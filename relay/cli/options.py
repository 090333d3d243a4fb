"""The options the `relay` commands share, each defined once with the configuration field it
sets, and grouped; a command lists the groups and options it takes, and `config_fields` turns
parsed arguments into configuration fields. Adding an option means defining it here (or in its
command's module, if only one command takes it) and naming it in a group or command.

Also what every edge command does first (`start`), and the helpers the commands share.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from relay.dialects import DIALECT_CHOICES
from relay.edges.config import (
    AUTH_TOKEN_ENV,
    DEFAULT_LEASE_SECONDS,
    DEFAULT_PORT,
    DEFAULT_RECONNECT_ATTEMPTS,
    DEFAULT_RECONNECT_DELAY,
    DEFAULT_RESUME_SECONDS,
    EdgeRuntime,
)
from relay.edges.process import LOOPS
from relay.edges.upstream import DEFAULT_UPSTREAM
from relay.engine import DEFAULT_HISTORY_LIMIT
from relay.errors import UnusableInput
from relay.observe.logs import LOG_FORMATS, LOG_LEVELS
from relay.session.policy import (
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_QUEUE_BYTES,
    DEFAULT_STALL_SECONDS,
)
from relay.transports import TRANSPORTS
from relay.tools.mcp_config import McpSettings, settings_from_options


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


def octal_mode(text: str) -> int:
    """An argparse type: a file mode in octal (`600`, `0640`)."""
    try:
        return int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an octal file mode: {text!r}") from None


def option(*flags: str, field: str | None = _OWN_NAME, to: Callable[[Any], Any] = _same,
           default_from: Callable[[], Any] | None = None, **settings: Any) -> Option:
    """An option that sets the configuration field of its own name (`--max-queue-bytes`:
    `max_queue_bytes`), or `field` (None: none)."""
    name = flags[0].lstrip("-").replace("-", "_")
    return Option(flags, settings, name if field == _OWN_NAME else field, to, default_from)


TOOLS = option("--tools", action="append", default=[], metavar="SPEC",
               help="a .py file or module with @tool functions (repeatable); a file's own directory "
                    "goes on the import path, as for a script, so its sibling modules import")
UPSTREAM = option("--upstream", default=None, metavar="URL", to=lambda url: url or "",
                  help=f"provider realtime URL (default {DEFAULT_UPSTREAM}; with --dialect gemini, "
                       "Gemini Live's BidiGenerateContent endpoint)")
DIALECT = option("--dialect", choices=DIALECT_CHOICES,
                 help="wire dialect of the upstream (default: inferred from the URL)")
RECORD = option("--record", field="record_dir", metavar="DIR", help="write one recording per session into DIR")
RECORD_AUDIO = option("--record-audio", choices=("keep", "drop"), default="keep",
                      help="keep or drop audio in recordings (default keep)")
RECORD_MODE = option("--record-mode", type=octal_mode, default=0o600, metavar="MODE",
                     help="file mode of recordings, in octal (default 600: the owner's alone; a directory "
                          "--record creates gets the matching 700, 750 for 640)")
LOG_FORMAT = option("--log-format", field=None, choices=LOG_FORMATS, default="auto",
                    help="stderr log lines as JSON or text (default auto: text when stderr is a "
                         "terminal, JSON otherwise)")
LOG_LEVEL = option("--log-level", field=None, choices=LOG_LEVELS, default="info",
                   help="the least severe log lines shown (default info; debug adds websockets' "
                        "connection lines)")
LOOP = option("--loop", field=None, choices=LOOPS, default="auto",
              help="the event loop: uvloop's or asyncio's own (default auto: uvloop when it is installed, "
                   "as with pip install 'realtime-relay[fast]')")
TRANSPORT = option("--transport", choices=TRANSPORTS, default="auto",
                   help="the WebSocket library of the relay's sockets: picows (its framing in C) or websockets "
                        "(default auto: picows when it is installed, as with pip install 'realtime-relay[fast]')")
HOST = option("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
PORT = option("--port", type=port_number, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 picks one)")
DRAIN_SECONDS = option("--drain-seconds", type=float, default=DEFAULT_DRAIN_SECONDS, metavar="S",
                       help="on SIGTERM/SIGINT, how long open sessions may go on (default 10)")
MAX_FRAME_BYTES = option("--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME_BYTES, metavar="N",
                         help="largest WebSocket message accepted from either side (default 16 MiB)")
MAX_QUEUE_BYTES = option("--max-queue-bytes", type=int, default=DEFAULT_QUEUE_BYTES, metavar="N",
                         help="bytes queued toward a peer before it is closed (default 32 MiB); past 1 MiB "
                              "(or half of N) the other side is no longer read until a quarter is left")
STALL_SECONDS = option("--stall-seconds", type=float, default=DEFAULT_STALL_SECONDS, metavar="S",
                       help="a peer that takes nothing for S seconds while over that mark is not "
                            "reading: closed with 1008 (default 10)")
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
LEASE_SECONDS = option(
    "--lease-seconds", type=float, default=DEFAULT_LEASE_SECONDS, metavar="S",
    help="with a --store: how long a session's lease lasts without renewal (an attached call's, with redis://: "
         "another replica takes the call over once it expires; a proxied session's: the one connection that "
         f"holds it, resumable elsewhere once it expires) (default {DEFAULT_LEASE_SECONDS:g})")
RESUME_SECONDS = option(
    "--resume-seconds", type=float, default=DEFAULT_RESUME_SECONDS, metavar="S",
    help="with a --store: how long after its client left a session may be resumed with its resume token, "
         f"on any replica sharing the store (default {DEFAULT_RESUME_SECONDS:g}; docs/deploy.md)")
STORE = option("--store", default=None, metavar="URL",
               help="where each session's tool calls are written ahead: memory (the default: this "
                    "process) or a redis://HOST:PORT/DB URL (pip install 'realtime-relay[store]'); "
                    "a store that fails degrades sessions, never stops them (docs/guarantees.md)")

MCP = option("--mcp", field=None, action="append", default=[], metavar="[NAME=]SERVER",
             help="an MCP server whose tools join the relay's: a streamable HTTP URL or a stdio command, "
                  "e.g. 'weather=python weather_server.py' (repeatable; docs/mcp.md)")
MCP_CONFIG = option("--mcp-config", field=None, metavar="FILE",
                    help="MCP servers, their tools' settings and the approval policy from a TOML or JSON file")
MCP_HEADER = option("--mcp-header", field=None, action="append", default=[], metavar="SERVER:NAME=VALUE",
                    help="an HTTP header for an MCP server; ${VAR} in VALUE is read from the environment "
                         "(quote it: 'docs:Authorization=Bearer ${DOCS_TOKEN}'; repeatable)")
MCP_PREFIX = option("--mcp-prefix", field=None, action="store_true",
                    help="name every MCP tool NAME_TOOL after its server (else a clash refuses to start)")
MCP_APPROVE = option("--mcp-approve", field=None, action="append", default=[], metavar="LABEL[:TOOL]",
                     help="approve the provider's own MCP calls of this server label (and tool); repeatable")
MCP_DENY = option("--mcp-deny", field=None, action="append", default=[], metavar="LABEL[:TOOL]",
                  help="refuse the provider's own MCP calls of this server label (and tool); repeatable")

# groups, in the order the commands list them
LOGGING = (LOG_FORMAT, LOG_LEVEL)
MCP_SERVERS = (MCP, MCP_CONFIG, MCP_HEADER, MCP_PREFIX)
"""The MCP servers whose tools join the relay's (`mcp_settings` reads them)."""
MCP_OPTIONS = (*MCP_SERVERS, MCP_APPROVE, MCP_DENY)
"""... and the policy for the provider's own MCP approvals: the edges' MCP options."""
RECORDING = (RECORD, RECORD_AUDIO, RECORD_MODE)
LIMITS = (MAX_FRAME_BYTES, MAX_QUEUE_BYTES, STALL_SECONDS, MAX_CLIENT_EVENTS, HISTORY_ITEMS)
SIDEBAND = (
    TOOLS,
    *MCP_OPTIONS,
    UPSTREAM.but(default=DEFAULT_UPSTREAM,
                 help=f"provider realtime URL; the call_id is added to it (default {DEFAULT_UPSTREAM})"),
    DIALECT,
    RECORD.but(help="write one recording per attached call into DIR"),
    RECORD_AUDIO,
    RECORD_MODE,
    RECONNECT_ATTEMPTS,
    RECONNECT_DELAY,
    STORE,
    LEASE_SECONDS,
    *LOGGING,
)
"""What `relay attach` and `relay sidecar` share: tools, upstream, recording, reconnecting, logging."""

AUTH_TOKEN = option("--auth-token", default_from=lambda: os.environ.get(AUTH_TOKEN_ENV) or None, metavar="TOKEN",
                    help=f"token clients must present (default ${AUTH_TOKEN_ENV}; prefer the variable: "
                         "arguments are visible to other users)")

INSPECTOR_TOKEN = dataclasses.replace(
    AUTH_TOKEN.but(help=f"token the --inspector page asks for (default ${AUTH_TOKEN_ENV})"), field=None)
"""attach's and sidecar's: their sessions take no client token, their inspector does."""
def mcp_settings(args: argparse.Namespace) -> McpSettings | None:
    """The MCP settings the MCP options say (None: none given)."""
    settings = settings_from_options(
        specs=getattr(args, "mcp", []), headers=getattr(args, "mcp_header", []),
        prefix=getattr(args, "mcp_prefix", False), config_file=getattr(args, "mcp_config", None),
        approve=getattr(args, "mcp_approve", []), deny=getattr(args, "mcp_deny", []))
    return settings or None


def require_tools(args: argparse.Namespace) -> None:
    """attach and sidecar have nothing to do without tools: `--tools` or an MCP server."""
    if not args.tools and not args.mcp and not args.mcp_config:
        raise UnusableInput("give the tools to run: --tools SPEC (a .py file or module with @tool functions) "
                            "or --mcp SERVER")


def config_fields(args: argparse.Namespace, options: Sequence[Option]) -> dict[str, Any]:
    """The configuration fields the parsed `args` set, from the options that name one."""
    return {opt.field: opt.to(getattr(args, opt.dest)) for opt in options if opt.field is not None}



@dataclass(frozen=True)
class Command:
    """A subcommand whose options are defined in its module: `configure` adds them, `run` does
    the job."""

    options: tuple[Option, ...]
    run: Callable[[argparse.Namespace], int]

    def configure(self, parser: argparse.ArgumentParser) -> None:
        for opt in self.options:
            opt.add_to(parser)


def start(args: argparse.Namespace) -> None:
    """What every edge command does first (`main` has set up logging as asked): `--record` is
    checked, and `--tools mymodule` finds a module next to the user, as `python -m` would."""
    check_record_dir(args.record)
    tools_from_working_directory()


def check_record_dir(record: str | None, option: str = "--record") -> None:
    """A `--record` (or `relay explore --out`) where no recording can be written (a file, a
    directory that cannot be made or written to) would fail every session's recording: refuse it
    at once (the library's edges only log such a failure, the session goes on). The directory is
    made here if need be."""
    if record is None:
        return
    place = Path(record)
    if place.exists() and not place.is_dir():
        raise UnusableInput(f"{option} {record} is a file: recordings go into a directory")
    try:
        place.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnusableInput(f"{option} {record}: cannot create the directory: {exc.strerror or exc}") from None
    if not os.access(place, os.W_OK | os.X_OK):
        raise UnusableInput(f"{option} {record}: the directory is not writable")


def tools_from_working_directory() -> None:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


@contextmanager
def users_prints_to_stderr() -> Iterator[None]:
    """While the user's code runs (tools and invariants imported and called), what it prints goes
    to stderr, so that the command's stdout carries its report alone (`--json` parses). It swaps
    `sys.stdout`, which every thread writes through (a sync tool's thread too), and points file
    descriptor 1 at stderr's file, so that what is written to the descriptor itself (a subprocess
    the tool starts, `os.write(1, ...)`, a C library's `printf`) goes there as well; both are put
    back after."""
    saved = _point_stdout_at_stderr()
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def _point_stdout_at_stderr() -> int | None:
    """Descriptor 1 made a copy of descriptor 2; the copy of the old descriptor 1 that puts it
    back. None when either descriptor is closed (nothing to swap: `sys.stdout` still is)."""
    try:
        sys.stdout.flush()   # what the command wrote before goes to its own stdout
    except (OSError, ValueError):
        pass
    try:
        saved = os.dup(1)
    except OSError:
        return None
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(saved)
        return None
    return saved


def require_credentials(runtime: EdgeRuntime, log: logging.Logger) -> None:
    """The warning for an upstream that is neither loopback nor a provider's, without a key. (No
    provider key for a provider's URL is a configuration error: the runtime refused to be made,
    ConfigError: one line, exit 2.)"""
    warning = runtime.credentials_warning
    if warning is not None:
        log.warning("%s", warning)


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
