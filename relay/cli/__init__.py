"""The `relay` command line: one subcommand per job, each in a module of its own here.

COMMANDS maps each subcommand to its module (which provides `COMMAND`: `configure(parser)` and
`run(args) -> int`, or the two as module functions) and its one-line help. Only the module of the
command being run is imported: `relay --help` and `relay --version` import none of them, so the
command starts at once, and a command imports only what it uses. The options the commands share
are defined once in `relay.cli.options`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import select
import sys
import traceback
from typing import Any, NoReturn, Sequence

from relay import __version__
from relay.cli.exits import (
    INTERNAL_ERROR,
    INTERRUPTED,
    OUTPUT_CLOSED,
    TRACEBACK_ENV,
    UNUSABLE,
    one_line,
    refusal,
)

# subcommand -> (where it is defined, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("relay.cli.demo", "see the relay at work on the embedded mock upstream (no key needed)"),
    "mock": ("relay.cli.mock", "run the mock realtime upstream (no key, no network)"),
    "replay": ("relay.cli.replay",
               "replay a recorded session against your tools and report what changed"),
    "explore": ("relay.cli.explore",
                "run a recording or a script under every schedule a session could take; check the invariants"),
    "inspect": ("relay.cli.inspect",
                "write a recorded session as one HTML page: a timeline to look at and listen to"),
    "export": ("relay.cli.export",
               "export a recorded conversation as OpenAI chat, Anthropic, Gemini or Vapi JSON"),
    "redact": ("relay.cli.redact",
               "make a recording safe to keep: phone numbers, e-mails, cards and your patterns replaced"),
    "serve": ("relay.cli.serve",
              "proxy realtime clients to OpenAI, Azure, Foundry or Gemini Live and run tools in their sessions"),
    "attach": ("relay.cli.attach",
               "attach to a live WebRTC or SIP call by call_id and run tools beside it"),
    "sidecar": ("relay.cli.sidecar",
                "accept incoming SIP calls from signed webhooks and attach to each with tools"),
}


def _command(module_name: str) -> Any:
    """What configures and runs a subcommand: its module's `COMMAND`, or the module itself."""
    module = importlib.import_module(module_name)
    return getattr(module, "COMMAND", module)


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand `argv` names (the first argument that is not an option), if any."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


class UsageError(Exception):
    """A command line the parser cannot take; `str()` is its one line, `relay COMMAND: ...`."""


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but a usage error is one line (what is wrong, after the command's name)
    that `main` prints with exit status 2, not the whole usage before it: the usage of `relay
    serve` alone is seventeen lines, and the one that matters came last."""

    commands: dict[str, argparse.ArgumentParser]

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {one_line(message)}")

    def extra(self, arguments: list[str]) -> UsageError:
        """The error for arguments left over once the command took its own."""
        if any(argument.startswith("-") for argument in arguments):
            return UsageError(f"{self.prog}: unrecognized arguments: {' '.join(arguments)} "
                              f"({self.prog} --help lists the options)")
        takes = " ".join(str(action.metavar or action.dest) for action in self._actions if not action.option_strings)
        return UsageError(f"{self.prog}: too many arguments: {' '.join(arguments)} "
                          f"(usage: {self.prog} [options] {takes})")


def build_parser(only: str | None = None) -> _Parser:
    """The parser of every command, or one where only the command `only` names (none, for "")
    has its options and the others carry their help line alone: what `main` builds, so that only
    the command being run is imported."""
    parser = _Parser(
        prog="relay",
        description="Run an application's tools server-side in realtime speech-to-speech sessions.",
    )
    parser.add_argument("--version", action="version", version=f"relay {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.commands = {}
    for name, (module_name, help_text) in COMMANDS.items():
        command_parser = parser.commands[name] = sub.add_parser(name, help=help_text, description=help_text)
        if only is None or name == only:
            command = _command(module_name)
            command.configure(command_parser)
            command_parser.set_defaults(_run=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status (`relay.cli.exits`). The one place that turns what a command
    raises into one line on stderr: a log line for the commands that log (JSON or text, as
    `--log-format` says), `relay COMMAND: ...` for the others; never a traceback."""
    argv = sys.argv[1:] if argv is None else argv
    chosen = _chosen(argv)
    parser = build_parser(only=chosen if chosen in COMMANDS else "")   # "": none configured
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:
            raise parser.commands.get(getattr(args, "command", None) or "", parser).extra(extra)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return UNUSABLE
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return UNUSABLE
    _escape_surrogates()
    logs = hasattr(args, "log_format")
    if logs:
        from relay.observe.logs import configure_logging

        configure_logging(args.log_format, level=args.log_level)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError as exc:
        if not _output_closed():
            return _refuse(args.command, exc, logs=logs)
        # its reader went away (`| head`): what is left to print goes nowhere, not to a traceback
        # at exit, when Python flushes stdout once more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OUTPUT_CLOSED
    except Exception as exc:
        return _refuse(args.command, exc, logs=logs)


def _escape_surrogates() -> None:
    """What a command prints may quote a recording or a tool's output, which JSON lets carry a
    lone surrogate (`"\\ud800"`) that UTF-8 cannot encode: stdout and stderr write one as its
    `\\udXXX` escape (inside JSON, the same character) instead of failing the command."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")


def _output_closed() -> bool:
    """Whether stdout is a pipe whose reading end is closed (the poll says an error on it)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):   # no real file behind stdout (a test's capture)
        return False


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


