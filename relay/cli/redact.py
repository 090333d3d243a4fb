"""`relay redact RECORDING`: a production recording made safe to keep as a fixture: phone numbers,
e-mail addresses, card numbers and your own patterns replaced by placeholders of their kind, the
same value by the same placeholder everywhere, audio dropped unless kept (relay/offline/scrub.py).
It prints what it replaced, counted per kind (never the values). `--check` only counts: exit 1
when something would be replaced (a CI guard), 0 when nothing would."""

from __future__ import annotations

import argparse
from pathlib import Path

from relay.cli.exits import FINDING, OK
from relay.offline.scrub import load_patterns, redact_file


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("recording", help="a relay recording (.jsonl) or a plain event log")
    parser.add_argument("--out", metavar="FILE",
                        help="where to write the redacted copy (default: NAME.redacted.jsonl beside it)")
    parser.add_argument("--patterns", metavar="FILE",
                        help="your own patterns, one a line: a name or word, or /a regular expression/, "
                             "each optionally `label: ...`")
    audio = parser.add_mutually_exclusive_group()
    audio.add_argument("--drop-audio", dest="keep_audio", action="store_false",
                       help="empty the audio payloads (the default: a voice is personal data too)")
    audio.add_argument("--keep-audio", dest="keep_audio", action="store_true", help="keep the audio as it is")
    parser.set_defaults(keep_audio=False)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when something would be replaced")


def run(args: argparse.Namespace) -> int:
    patterns = load_patterns(args.patterns) if args.patterns else []
    source = Path(args.recording)
    if args.check:
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            report = redact_file(source, Path(scratch) / source.name, patterns=patterns, keep_audio=True)
        print(report.render(source, Path("(nothing written: --check)")))
        return FINDING if sum(report.counts.values()) else OK
    target = Path(args.out) if args.out else source.with_name(source.stem + ".redacted.jsonl")
    report = redact_file(source, target, patterns=patterns, keep_audio=args.keep_audio)
    print(report.render(source, target))
    return OK
