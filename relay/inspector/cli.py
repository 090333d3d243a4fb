"""`relay inspect RECORDING`: write the inspector page of a recording (or plain event log).

Bad input (a missing, empty or unreadable file, a directory, a file that is not a recording) is
one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import webbrowser
from pathlib import Path

from relay.dialects.gemini import is_gemini_message
from relay.inspector.audio import DEFAULT_MAX_RATE
from relay.inspector.model import build_model
from relay.inspector.page import write_page
from relay.recording import Recording, RecordingError, read_recording


class InspectError(Exception):
    """Input the inspector cannot use; its message is the one line the user sees."""


def load_recording(path: str | Path) -> Recording:
    """Read `path` as a recording, or raise InspectError saying in one line why it is not one."""
    source = Path(path)
    if not source.exists():
        raise InspectError(f"{source}: no such file")
    if source.is_dir():
        raise InspectError(f"{source} is a directory, not a recording")
    try:
        if source.stat().st_size == 0:
            raise InspectError(f"{source} is empty, not a recording")
        recording = read_recording(source)
    except RecordingError as exc:
        raise InspectError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise InspectError(f"cannot read {source}: {exc}") from None
    if recording.kind == "event-log" and not any(_is_realtime_event(f.event) for f in recording.frames):
        raise InspectError(f"{source} is JSON but not a recording: no line is a realtime event "
                           "(an object with a `type`, or a Gemini Live message)")
    return recording


def _is_realtime_event(event: object) -> bool:
    return isinstance(event, dict) and (isinstance(event.get("type"), str) or is_gemini_message(event))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recording", help="a relay recording (.jsonl) or a plain event log")
    parser.add_argument("--out", metavar="PAGE",
                        help="where to write the page (default: the recording's name with .html, here)")
    parser.add_argument("--open", action="store_true", help="open the page in the default browser")
    parser.add_argument("--audio-rate", type=int, default=DEFAULT_MAX_RATE, metavar="HZ",
                        help="highest sample rate of the audio embedded in the page (default 16000; "
                             "8000 halves the page of a 16 kHz session)")
    parser.add_argument("--no-audio", action="store_true", help="leave the audio out of the page")


def run(args: argparse.Namespace) -> int:
    if args.audio_rate < 4000:
        print("relay inspect: --audio-rate must be at least 4000", file=sys.stderr)
        return 2
    try:
        recording = load_recording(args.recording)
    except InspectError as exc:
        print(f"relay inspect: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path.cwd() / (recording.path.stem + ".html")
    for warning in recording.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    model = build_model(recording, max_audio_rate=args.audio_rate, embed_audio=not args.no_audio, release=True)
    try:
        write_page(model, out)
    except OSError as exc:
        print(f"relay inspect: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(out)
    if args.open:
        webbrowser.open(out.resolve().as_uri())
    return 0
