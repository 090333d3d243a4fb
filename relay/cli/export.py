"""`relay export`: a recorded conversation as OpenAI chat, Anthropic, Gemini or Vapi JSON
(relay/offline/export.py)."""

from __future__ import annotations

import argparse

from relay.cli.options import (
    Command,
    option,
)
from relay.offline.export import FORMATS, run_export

EXPORT_OPTIONS = (
    option("recording", field=None, help="a relay recording or a plain event log (JSON lines)"),
    option("--format", required=True, choices=FORMATS, help="the shape of the export"),
    option("--out", metavar="FILE", help="write the JSON here instead of to standard output"),
    option("--allow-incomplete", field=None, action="store_true",
           help="export a recording that lost frames (cut short, no end line) instead of refusing it"),
)

def run(args: argparse.Namespace) -> int:
    return run_export(args.recording, args.format, out=args.out, allow_incomplete=args.allow_incomplete)



COMMAND = Command(EXPORT_OPTIONS, run)
