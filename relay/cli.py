"""The `relay` command line: one subcommand per job, each living in the module that does the job.

Each module named in COMMANDS provides `configure(parser)` (adds its arguments) and
`run(args) -> int` (does the work, returns the exit status). Keeping the argument definitions next
to the code that uses them means a subcommand can be read in one place.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from relay import __version__

# subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("relay.demo", "see the relay at work on the embedded mock upstream (no key needed)"),
    "mock": ("relay.mock.cli", "run the mock realtime upstream (no key, no network)"),
    "replay": ("relay.replay",
               "replay a recorded session against your tools and report what changed"),
    "inspect": ("relay.inspector.cli",
                "write a recorded session as one HTML page: a timeline to look at and listen to"),
    "export": ("relay.export",
               "export a recorded conversation as OpenAI chat, Anthropic, Gemini or Vapi JSON"),
    "serve": ("relay.server",
              "proxy realtime clients to OpenAI, Azure, Foundry or Gemini Live and run tools in their sessions"),
    "attach": ("relay.sidecar",
               "attach to a live WebRTC or SIP call by call_id and run tools beside it"),
    "sidecar": ("relay.webhooks",
                "accept incoming SIP calls from signed webhooks and attach to each with tools"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="relay",
        description="Run an application's tools server-side in realtime speech-to-speech sessions.",
    )
    parser.add_argument("--version", action="version", version=f"relay {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.configure(command_parser)
        command_parser.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
