"""`relay inspect RECORDING`: write the inspector page of a recording (or plain event log).

Input it cannot use (a missing, empty or unreadable file, a directory, a file that is not a
recording, an incomplete recording without `--allow-incomplete`) raises; `relay.cli.main` makes
it one line on stderr and exit status 2 (`relay.exits`).
"""

from __future__ import annotations

import argparse
import sys
import webbrowser
from pathlib import Path

from relay.errors import UnusableInput
from relay.inspector.audio import DEFAULT_MAX_RATE
from relay.inspector.model import build_model
from relay.inspector.page import write_page
from relay.recording.reader import load_recording


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recording", help="a relay recording (.jsonl) or a plain event log")
    parser.add_argument("--out", metavar="PAGE",
                        help="where to write the page (default: the recording's name with .html, here)")
    parser.add_argument("--open", action="store_true", help="open the page in the default browser")
    parser.add_argument("--audio-rate", type=int, default=DEFAULT_MAX_RATE, metavar="HZ",
                        help="highest sample rate of the audio embedded in the page (default 16000; "
                             "8000 halves the page of a 16 kHz session)")
    parser.add_argument("--no-audio", action="store_true", help="leave the audio out of the page")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="show a recording that lost frames (cut short, no end line) instead of refusing it")


def run(args: argparse.Namespace) -> int:
    if args.audio_rate < 4000:
        raise UnusableInput("--audio-rate must be at least 4000")
    recording = load_recording(args.recording, allow_incomplete=args.allow_incomplete)
    out = Path(args.out) if args.out else Path.cwd() / (recording.path.stem + ".html")
    for warning in recording.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    model = build_model(recording, max_audio_rate=args.audio_rate, embed_audio=not args.no_audio, release=True)
    try:
        write_page(model, out)
    except OSError as exc:
        raise UnusableInput(f"cannot write {out}: {exc.strerror or exc}") from None
    print(out)
    if args.open:
        webbrowser.open(out.resolve().as_uri())
    return 0
