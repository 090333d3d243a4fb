"""`relay replay`: a recorded session against the tools as they are now, and what changed
(relay/offline/replay.py)."""

from __future__ import annotations

import argparse
import json
import sys

from relay.cli.options import (
    DIALECT,
    MCP_SERVERS,
    TOOLS,
    Command,
    mcp_settings,
    option,
    tools_from_working_directory,
    users_prints_to_stderr,
)
from relay.cli.explore import own_invariants
from relay.errors import UnusableInput
from relay.offline.replay import (
    DEFAULT_GATE_TIMEOUT,
    MCP_ANSWERS,
    render_report,
    replay,
)
from relay.recording.reader import load_recording
from relay.tools.mcp_config import McpSettings
from relay.tools.sources import ToolSources

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
           help="virtual seconds to wait for a handler before calling a recorded send missing"),
    option("--html", metavar="PAGE", help="also write the inspector page, divergences marked"),
    option("--allow-empty", field=None, action="store_true",
           help="replay a plain event log (no relay sends recorded: nothing to compare) instead of "
                "refusing it, to see what the relay would do"),
    option("--allow-incomplete", field=None, action="store_true",
           help="replay a recording that lost frames (cut short, no end line) instead of refusing it"),
    option("--invariant", field=None, action="append", default=[], metavar="FILE:FUNCTION",
           help="an invariant of your own (repeatable), as `relay explore` takes it: a function of the replay's "
                "result returning what broke or None; its `reset` attribute, if any, is called before the replay"),
)

ALLOW_EMPTY_OPTION = "--allow-empty"


def run_replay(path: str, tools: ToolSources, *, dialect: str | None = None, as_json: bool = False,
               realtime: bool = False, gate_timeout: float = DEFAULT_GATE_TIMEOUT, html: str | None = None,
               allow_empty: bool = False, allow_incomplete: bool = False, mcp_answers: str = "recording",
               mcp: McpSettings | None = None, invariants: list[str] | None = None) -> int:
    """`relay replay`: print the report (or its JSON); 0 without divergence or broken invariant
    (`invariants`: `FILE:FUNCTION` specs of the caller's own), 1 with. Input it
    cannot use raises (`relay.cli.exits`): a file that is not a recording, an incomplete recording
    (unless `allow_incomplete`), and one with nothing to compare, a plain event log that records
    no relay sends (unless `allow_empty`: then the report says what the relay would do)."""
    if gate_timeout < 0:
        raise UnusableInput("--gate-timeout must be >= 0")
    # the page shows the audio; the replay itself holds none (it streams the file again)
    recording = load_recording(path, allow_incomplete=allow_incomplete, audio="keep" if html else "drop")
    if not allow_empty and (recording.kind == "event-log" or not recording.frames):
        what = "a plain event log: it records no relay sends" if recording.frames else "a recording without frames"
        raise UnusableInput(f"{path} is {what}, so there is nothing to compare; pass {ALLOW_EMPTY_OPTION} "
                            "to see what the relay would do with it")
    from relay.offline.replay_checks import builtin_invariants   # the explorer's: not loaded with the command

    with users_prints_to_stderr():
        own, reset = own_invariants(list(invariants or ()))
        if reset is not None:
            reset()
        progress = _ProgressBar(len(recording.frames)) if len(recording.frames) > 2000 and sys.stderr.isatty() else None
        result = replay(recording, tools, dialect=dialect, realtime=realtime, gate_timeout=gate_timeout,
                        progress=progress, mcp_answers=mcp_answers, mcp=mcp, invariants={**builtin_invariants(), **own})
        if progress is not None:
            progress.close()
    if html:
        from relay.inspector.replay import write_replay_page
        try:
            page = write_replay_page(recording, result, html)
        except OSError as exc:
            raise UnusableInput(f"cannot write {html}: {exc.strerror or exc}") from None
        print(f"inspector page: {page}", file=sys.stderr)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if as_json:
        print(json.dumps(result.to_json(), indent=2, ensure_ascii=False))
    else:
        print(render_report(result))
    return 0 if result.ok else 1


def run(args: argparse.Namespace) -> int:
    tools_from_working_directory()
    return run_replay(args.recording, args.tools, dialect=args.dialect, as_json=args.json, realtime=args.realtime,
                      gate_timeout=args.gate_timeout, html=args.html, allow_empty=args.allow_empty,
                      allow_incomplete=args.allow_incomplete, mcp_answers=args.mcp_answers,
                      mcp=mcp_settings(args), invariants=args.invariant)


class _ProgressBar:
    def __init__(self, total: int) -> None:
        self.total = total
        self.shown = -1

    def __call__(self, done: int, total: int) -> None:
        percent = done * 100 // max(total, 1)
        if percent != self.shown:
            self.shown = percent
            filled = percent // 4
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (25 - filled)}] {percent:3d}% {done}/{total} frames")
            sys.stderr.flush()

    def close(self) -> None:
        sys.stderr.write("\n")


COMMAND = Command(REPLAY_OPTIONS, run)
