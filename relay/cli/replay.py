"""`relay replay`: a recorded session against the tools as they are now, and what changed
(relay/offline/replay.py)."""

from __future__ import annotations

import argparse

from relay.cli.options import (
    DIALECT,
    MCP_SERVERS,
    TOOLS,
    Command,
    mcp_settings,
    option,
    tools_from_working_directory,
)
from relay.offline.replay import DEFAULT_GATE_TIMEOUT, MCP_ANSWERS, run_replay

REPLAY_OPTIONS = (
    option("recording", field=None, help="a relay recording (.jsonl) or a plain event log"),
    TOOLS,
    option("--mcp-answers", field=None, choices=MCP_ANSWERS, default="recording",
           help="answer the recording's MCP tools from the recording (default: offline, at the recorded "
                "moments) or from live servers (give them with --mcp or --mcp-config)"),
    *MCP_SERVERS,
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

def run(args: argparse.Namespace) -> int:
    tools_from_working_directory()
    return run_replay(args.recording, args.tools, dialect=args.dialect, as_json=args.json, realtime=args.realtime,
                      gate_timeout=args.gate_timeout, html=args.html, allow_empty=args.allow_empty,
                      allow_incomplete=args.allow_incomplete, mcp_answers=args.mcp_answers,
                      mcp=mcp_settings(args))



COMMAND = Command(REPLAY_OPTIONS, run)
