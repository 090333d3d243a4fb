"""`relay redact`: a production recording made safe to keep as a test fixture.

Phone numbers, e-mail addresses, card numbers (Luhn-checked) and the user's own patterns are
replaced wherever they are said or passed: every JSON string of every frame, the arguments and
outputs that are JSON inside JSON (their text is searched as it is, so their formatting stays),
transcripts and text streamed in pieces (the pieces of one stream are searched together, so a
number split across two deltas is found, and the pieces still add up to the redacted whole),
Gemini's `args` objects, the relay's own notes. Identifiers (`id`, `*_id`, `ids`) and audio
payloads are not text and are left alone.

One value always becomes the same placeholder, everywhere in the file, so that a call's arguments,
the tool's output and what the model said about it stay consistent and the redacted recording
replays as the original did. Placeholders look like their kind: `user1@example.com` (a reserved
domain), a phone number of the same layout whose digits are fives but the last four (the fictional
555-01xx range: `0101`, ..., `0199`, then `0200` and up), a card number of the same length that passes
the Luhn check (a 4000 0000... test number), `name-1` for a pattern's matches (its label, `name` for a
plain word). The detectors know these shapes: a placeholder is never found again, and nothing that
overlaps one is, so a redacted file passes `--check` and redacting it again changes nothing. Audio is
dropped unless kept (`--keep-audio`): a caller's voice is personal data too.

A patterns file has one pattern a line (`#` starts a comment): a plain line is a name or a word,
matched whole and in any case; `/.../` is a regular expression; either may start with `label:` to
name its kind in the report and the placeholders (`order: /ORD-\\d{6}/`).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from relay.dialects import gemini_codec as gemini
from relay.dialects.openai import AUDIO_EVENTS
from relay.errors import UnusableInput
from relay.offline.replaying import json_object as _json_object
from relay.recording.audio import drop_audio
from relay.recording.format import dumps
from relay.recording.reader import NO_REALTIME_EVENT, archive_of, is_realtime_event, no_json_object

PHONE, EMAIL, CARD = "phone", "email", "card"
BUILT_IN = (CARD, EMAIL, PHONE)   # the order in which overlapping matches are preferred

_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
# digits in groups, with one separator (space, dot, dash) between groups, a `+` country code or an
# area code in brackets; which of these are phone numbers is decided in `_is_phone`
_PHONE = re.compile(r"(?<![\w+@/.-])(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,5}\)[ .-]?)?\d+(?:[ .-]\d+)*(?![\w@-]|\.\d)")
_CARD = re.compile(r"(?<![\w.-])\d(?:[ -]?\d){12,18}(?![\w-])")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
# the placeholders' own shapes (see `_fake`)
_FAKE_EMAIL = re.compile(r"user[1-9]\d*@example\.com")
_FAKE_PHONE_DIGITS = re.compile(r"5{3,}0[1-9]\d{2,3}")
_FAKE_CARD_DIGITS = re.compile(r"40000000\d{5,11}")
_PATTERN_LINE = re.compile(r"^(?:(?P<label>[a-z][a-z0-9_]*):\s*)?(?P<body>.+)$")


def luhn_ok(digits: str) -> bool:
    total = 0
    for position, digit in enumerate(reversed(digits)):
        value = int(digit)
        if position % 2:
            value *= 2
            value -= 9 if value > 9 else 0
        total += value
    return total % 10 == 0


def _digits(text: str) -> str:
    return "".join(ch for ch in text if ch.isdigit())


def _is_phone(text: str) -> bool:
    """Whether a digit run found by `_PHONE` reads as a phone number rather than a date, an amount,
    a timestamp or an id."""
    digits = _digits(text)
    if not 7 <= len(digits) <= 15 or _ISO_DATE.fullmatch(text):
        return False
    if text.startswith("+") or "(" in text:
        return True
    separators = [ch for ch in text if not ch.isdigit()]
    if not separators:   # one run: a national number (2-9 then 9 digits, or 0/1 then 10), not a timestamp
        return (len(digits) == 10 and digits[0] in "23456789") or (len(digits) == 11 and digits[0] in "01")
    if set(separators) == {"."} and len(separators) == 1:
        return False     # a decimal number
    groups = re.split(r"[ .-]", text)
    return all(1 <= len(group) <= 5 for group in groups) and len(groups[-1]) >= 2


@dataclass(frozen=True)
class UserPattern:
    label: str
    regex: re.Pattern[str]


def load_patterns(path: str | Path) -> list[UserPattern]:
    """A patterns file (see the module docstring); a bad one raises UnusableInput naming the line."""
    source = Path(path)
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UnusableInput(f"--patterns {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UnusableInput(f"cannot read --patterns {path}: {getattr(exc, 'strerror', None) or exc}") from None
    patterns = []
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        found = _PATTERN_LINE.match(line)
        assert found is not None
        body = found.group("body").strip()
        if len(body) > 2 and body.startswith("/") and body.endswith("/"):
            try:
                regex = re.compile(body[1:-1])
            except re.error as exc:
                raise UnusableInput(f"--patterns {path} line {number}: not a regular expression: {exc}") from None
            if regex.search(""):
                raise UnusableInput(f"--patterns {path} line {number}: the expression matches empty text")
            patterns.append(UserPattern(found.group("label") or "pattern", regex))
        else:
            regex = re.compile(r"(?<!\w)" + re.escape(body) + r"(?!\w)", re.IGNORECASE)
            patterns.append(UserPattern(found.group("label") or "name", regex))
    return patterns


@dataclass
class Scrubber:
    """Finds what to hide in text and remembers the placeholder each value got."""

    patterns: list[UserPattern] = field(default_factory=list)
    placeholders: dict[tuple[str, str], str] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    """Occurrences replaced, by kind."""
    counting: bool = True
    """Whether `text` adds to `counts` (off while a recording's second pass writes what the
    first one counted)."""

    def __post_init__(self) -> None:
        self._numbers = Counter(kind for kind, _ in self.placeholders)   # placeholders given, by kind

    def spans(self, text: str) -> list[tuple[int, int, str, str]]:
        """(start, end, kind, placeholder) of everything to hide in `text`, in order, not overlapping."""
        found: list[tuple[int, int, int, str]] = []    # start, end, preference, kind
        for rank, pattern in enumerate(self.patterns):
            found += [(m.start(), m.end(), rank, pattern.label) for m in pattern.regex.finditer(text) if m.end() > m.start()]
        base = len(self.patterns)
        if "@" in text:
            found += [(m.start(), m.end(), base, EMAIL) for m in _EMAIL.finditer(text)]
        if sum(ch.isdigit() for ch in text) >= 7:
            found += [(m.start(), m.end(), base + 1, CARD) for m in _CARD.finditer(text)
                      if luhn_ok(_digits(m.group())) and len(set(_digits(m.group()))) > 1]
            found += [(m.start(), m.end(), base + 2, PHONE) for m in _PHONE.finditer(text)
                      if _is_phone(m.group()) or _is_placeholder(PHONE, m.group())]
        placeholders = [(start, stop) for start, stop, _, kind in found if _is_placeholder(kind, text[start:stop])]
        if self.patterns:
            labels = "|".join(sorted({re.escape(pattern.label) for pattern in self.patterns}))
            placeholders += [m.span() for m in re.finditer(rf"(?<![\w-])(?:{labels})-[1-9]\d*(?![\w-])", text)]
        chosen: list[tuple[int, int, str, str]] = []
        end = 0
        for start, stop, _, kind in sorted(found, key=lambda f: (f[0], f[2], -f[1])):
            if any(start < taken_stop and taken_start < stop for taken_start, taken_stop in placeholders):
                continue   # a placeholder, or a part of one: already redacted
            if start >= end:
                chosen.append((start, stop, kind, self._placeholder(kind, text[start:stop])))
                end = stop
        return chosen

    def text(self, text: str) -> str:
        spans = self.spans(text)
        if not spans:
            return text
        out, at = [], 0
        for start, stop, kind, placeholder in spans:
            out += (text[at:start], placeholder)
            at = stop
            if self.counting:
                self.counts[kind] += 1
        out.append(text[at:])
        return "".join(out)

    def _placeholder(self, kind: str, value: str) -> str:
        key = (kind, _normal(kind, value))
        placeholder = self.placeholders.get(key)
        if placeholder is None:
            self._numbers[kind] += 1
            placeholder = _fake(kind, value, self._numbers[kind])
            self.placeholders[key] = placeholder
        return placeholder


def _normal(kind: str, value: str) -> str:
    if kind in (PHONE, CARD):
        return _digits(value)
    return value.casefold()


def _is_placeholder(kind: str, value: str) -> bool:
    """Whether `value`, found as `kind`, has the shape `_fake` gives that kind."""
    if kind == EMAIL:
        return _FAKE_EMAIL.fullmatch(value) is not None
    if kind == PHONE:
        return _FAKE_PHONE_DIGITS.fullmatch(_digits(value)) is not None
    if kind == CARD:
        return _FAKE_CARD_DIGITS.fullmatch(_digits(value)) is not None
    return False


def _fake(kind: str, value: str, number: int) -> str:
    if kind == EMAIL:
        return f"user{number}@example.com"
    if kind == PHONE:
        digits = _digits(value)
        fake = ("0" + str(100 + number)).rjust(len(digits), "5")[-len(digits):]   # 5...50101, 5...50102, ...
        return _same_layout(value, fake)
    if kind == CARD:
        digits = _digits(value)
        body = ("4000" + str(number).rjust(len(digits) - 5, "0"))[:len(digits) - 1]
        check = next(str(d) for d in range(10) if luhn_ok(body + str(d)))
        return _same_layout(value, body + check)
    return f"{kind}-{number}"


def _same_layout(original: str, digits: str) -> str:
    """`digits` written with the original's separators and brackets."""
    out, feed = [], iter(digits)
    for ch in original:
        out.append(next(feed) if ch.isdigit() else ch)
    return "".join(out)


# ---- a recording, line by line --------------------------------------------------------------------
def _is_identifier(key: Any) -> bool:
    return isinstance(key, str) and (key in ("id", "ids", "type", "object") or key.endswith(("_id", "Id", "_ids")))


@dataclass
class _Piece:
    """One string of a stream of text pieces (a delta): its place among all the pieces of the
    file, in the order they come, and its text."""

    number: int
    text: str


@dataclass
class RedactionReport:
    counts: Counter[str]
    distinct: Counter[str]
    audio_frames: int
    audio: str
    lines: int

    def render(self, source: Path, target: Path) -> str:
        kinds = sorted(set(self.counts) | set(BUILT_IN))
        found = ", ".join(f"{kind}: {self.counts[kind]} ({self.distinct[kind]} distinct)" for kind in kinds)
        audio = (f"audio: {self.audio_frames} frame(s) {'dropped' if self.audio == 'drop' else 'kept'}"
                 if self.audio_frames else "audio: none")
        return f"redacted {source} -> {target} ({self.lines} lines)\n  replaced: {found}\n  {audio}"


class RecordingRedactor:
    """Redacts one recording or event log (see the module docstring), in two passes over its
    lines, each holding one line at a time: the first finds every value to hide and gives it its
    placeholder (the pieces of each stream are searched together once it has seen them all), the
    second writes each line redacted. The pieces' text is all it keeps in between."""

    def __init__(self, scrubber: Scrubber, *, keep_audio: bool = False) -> None:
        self.scrubber = scrubber
        self.keep_audio = keep_audio
        self.audio_frames = 0
        self.objects = 0   # lines that hold a JSON object (first pass)
        self.events = 0    # of them, a relay recording's lines or an event log's realtime events
        self._streams: dict[tuple[Any, ...], list[_Piece]] = {}
        self._piece_holders: set[int] = set()   # ids of the dicts of the line being read that hold a piece
        self._pieces: list[str] = []    # every piece's text, in the order they come; redacted after the first pass
        self._piece_at = 0              # the second pass's next piece
        self._second = False
        self._relay: bool | None = None   # a relay recording (else an event log): its first object says

    def redact_lines(self, lines: list[str]) -> list[str]:
        """The file's lines, redacted (line breaks kept; a line that is not JSON is redacted as text)."""
        for line in lines:
            self.read(line)
        self.found()
        return [self.write(line) for line in lines]

    def read(self, line: str) -> None:
        """The first pass, one line: what it holds is found and given placeholders."""
        self._line(line)

    def found(self) -> None:
        """The first pass is over: the streams are searched, and the second pass may begin."""
        for pieces in self._streams.values():
            self._redact_stream(pieces)
        self._streams.clear()
        self._second, self._relay, self._piece_at = True, None, 0
        self.scrubber.counting = False

    def write(self, line: str) -> str:
        """The second pass, one line: the line redacted."""
        return self._line(line)

    def _line(self, line: str) -> str:
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            obj = None
        kind = self._kind(obj)
        if not self._second and isinstance(obj, dict):
            self.objects += 1
            if kind != "event" or is_realtime_event(obj):
                self.events += 1
        self._piece_holders.clear()
        stored_events = []
        for event, stored in self._events(obj, kind):
            stored_events.append((event, stored))
            self._audio(event, obj if kind == "frame" else None)
            self._collect_streams(event)
            self._walk(event, in_stream=True)
        if kind == "note" and isinstance(obj.get("relay"), dict):
            self._walk(obj["relay"])
        if not self._second:
            return ""
        if obj is None:   # counted now, after the streams, as the first pass leaves it
            self.scrubber.counting = True
            try:
                return self.scrubber.text(line.rstrip("\n")) + "\n" if line.strip() else line
            finally:
                self.scrubber.counting = False
        if kind in ("header", "end"):
            return line if line.endswith("\n") else line + "\n"
        for event, stored in stored_events:
            if stored != "inline":
                obj[stored] = self._stored(event, stored)
        return dumps(obj) + "\n"

    def _kind(self, obj: Any) -> str:
        """What a line is: `text` (no JSON object), `event` (an event log's), or in a recording
        its `header` (the first object), a `frame`, a `note` (a relay line) or the `end`."""
        if not isinstance(obj, dict):
            return "text"
        if self._relay is None:
            self._relay = "format" in obj and "type" not in obj
            if self._relay:
                return "header"
        if not self._relay:
            return "event"
        if "end" in obj and "dir" not in obj:
            return "end"
        if "relay" in obj and "dir" not in obj:
            return "note"
        return "frame"

    # -- what each line holds
    def _events(self, obj: Any, kind: str) -> Iterator[tuple[dict[str, Any], str]]:
        """The realtime events a line carries, and where: `inline` (the line is the event, or its
        `event` field), `raw` (JSON text) or `binary` (base64 of JSON bytes)."""
        if kind == "event":
            yield obj, "inline"
        elif kind == "frame":
            if isinstance(obj.get("event"), dict):
                yield obj["event"], "inline"
            elif isinstance(obj.get("raw"), str):
                decoded = _json_object(obj["raw"])
                if decoded is None:
                    obj["raw"] = self.scrubber.text(obj["raw"])
                else:
                    yield decoded, "raw"
            elif isinstance(obj.get("binary"), str):
                try:
                    decoded = _json_object(base64.b64decode(obj["binary"], validate=True))
                except ValueError:
                    decoded = None
                if decoded is not None:
                    yield decoded, "binary"

    @staticmethod
    def _stored(event: dict[str, Any], stored: str) -> str:
        text = dumps(event)
        return text if stored == "raw" else base64.b64encode(text.encode()).decode("ascii")

    # -- audio
    def _audio(self, event: dict[str, Any], line: dict[str, Any] | None) -> None:
        probe = copy.deepcopy(event)
        if not drop_audio(probe):
            return
        if not self._second:
            self.audio_frames += 1
        if self.keep_audio:
            self._mark_audio(event, probe)
            return
        dropped = drop_audio(event)
        if line is not None:
            line["audio_dropped"] = int(line.get("audio_dropped") or 0) + dropped

    def _mark_audio(self, event: Any, probe: Any) -> None:
        """Replace each audio string of `event` (blank in `probe`) by a holder the walk skips."""
        pairs = event.items() if isinstance(event, dict) else enumerate(event) if isinstance(event, list) else ()
        for key, value in list(pairs):
            blank = probe[key]
            if isinstance(value, str) and value and blank == "":
                event[key] = _Audio(value)
            elif isinstance(value, (dict, list)):
                self._mark_audio(value, blank)

    # -- streams of pieces
    def _collect_streams(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if isinstance(kind, str):
            if kind.endswith(".delta") and kind not in AUDIO_EVENTS and isinstance(event.get("delta"), str):
                key = (kind, event.get("item_id"), event.get("content_index"), event.get("call_id"))
                self._piece(key, event, "delta")
            return
        holders, ended = gemini.streamed_text(event)
        for stream, holder in holders:
            self._piece(("gemini", stream), holder, "text")
        if ended:
            for key in [key for key in self._streams if key[0] == "gemini"]:
                self._streams[("gemini-done", len(self._streams), *key)] = self._streams.pop(key)

    def _piece(self, stream: tuple[Any, ...], container: dict[str, Any], key: str) -> None:
        """A piece of a stream: kept (first pass), or given its redacted text (second pass)."""
        self._piece_holders.add(id(container))
        if self._second:
            container[key] = self._pieces[self._piece_at]
            self._piece_at += 1
            return
        self._streams.setdefault(stream, []).append(_Piece(len(self._pieces), container[key]))
        self._pieces.append(container[key])

    def _redact_stream(self, pieces: list[_Piece]) -> None:
        """Search the pieces' text as one; give each piece its share of the redacted text."""
        whole = "".join(piece.text for piece in pieces)
        spans = self.scrubber.spans(whole)
        if not spans:
            return
        start = 0
        for piece in pieces:
            stop = start + len(piece.text)
            out, at = [], start
            for begin, end, kind, placeholder in spans:
                if end <= at or begin >= stop:
                    continue
                if begin >= at:
                    out.append(whole[at:begin])
                    out.append(placeholder)
                    self.scrubber.counts[kind] += 1
                at = max(at, min(end, stop))
            out.append(whole[at:stop])
            self._pieces[piece.number] = "".join(out)
            start = stop

    # -- every other string
    def _walk(self, value: Any, key: Any = None, in_stream: bool = False) -> Any:
        if isinstance(value, dict):
            for name, inner in value.items():
                if _is_identifier(name) or isinstance(inner, _Audio):
                    if isinstance(inner, _Audio):
                        value[name] = inner.text
                    continue
                if in_stream and name in ("delta", "text") and id(value) in self._piece_holders:
                    continue   # a piece of a stream: redacted with its stream
                value[name] = self._walk(inner, name, in_stream)
            return value
        if isinstance(value, list):
            for position, inner in enumerate(value):
                value[position] = inner.text if isinstance(inner, _Audio) else self._walk(inner, key, in_stream)
            return value
        if isinstance(value, str):
            return self.scrubber.text(value)
        return value


@dataclass(frozen=True)
class _Audio:
    """An audio payload kept as it is (the walk leaves it alone)."""

    text: str


def redact_file(source: str | Path, target: str | Path, *, patterns: list[UserPattern] = (),  # type: ignore[assignment]
                keep_audio: bool = False) -> RedactionReport:
    """Redact `source` into `target` (and its `.meta.json`, for a plain event log that has one)."""
    source, target = Path(source), Path(target)
    if not source.is_file():
        raise UnusableInput(f"{source}: no such file" if not source.exists() else f"{source} is not a file")
    if source.stat().st_size == 0:
        raise UnusableInput(f"{source} is empty, not a recording")
    if target.resolve() == source.resolve():
        raise UnusableInput(f"--out {target} is the recording itself: write the redacted copy elsewhere")
    scrubber = Scrubber(list(patterns))
    redactor = RecordingRedactor(scrubber, keep_audio=keep_audio)
    lines = 0
    try:
        for line in _lines(source):
            redactor.read(line)
            lines += 1
    except UnicodeDecodeError as exc:
        archive = archive_of(source)
        if archive:
            raise UnusableInput(f"{source}: not a recording but {archive}") from None
        raise UnusableInput(f"{source} is not UTF-8 text (byte {exc.start} of a line); not a recording") from None
    except OSError as exc:
        raise UnusableInput(f"cannot read {source}: {exc.strerror or exc}") from None
    if not redactor.objects:
        raise UnusableInput(f"{source}: {no_json_object(source)}")
    if not redactor.events:
        raise UnusableInput(f"{source} {NO_REALTIME_EVENT}")
    redactor.found()
    meta = source.with_name(source.stem + ".meta.json")
    try:
        # a lone surrogate the recording carried (as `\\ud800`): written as that escape again
        with open(target, "w", encoding="utf-8", errors="backslashreplace", newline="") as out:
            for line in _lines(source):
                out.write(redactor.write(line))
        scrubber.counting = True
        if meta.is_file():
            meta_object = _json_object(meta.read_text(encoding="utf-8"))
            if meta_object is not None:
                redactor._walk(meta_object)
                target.with_name(target.stem + ".meta.json").write_text(json.dumps(meta_object, indent=1,
                                                                                  ensure_ascii=False) + "\n",
                                                                       encoding="utf-8", errors="backslashreplace")
    except OSError as exc:
        raise UnusableInput(f"cannot write {target}: {exc.strerror or exc}") from None
    distinct = Counter(kind for kind, _ in scrubber.placeholders)
    return RedactionReport(scrubber.counts, distinct, redactor.audio_frames, "keep" if keep_audio else "drop", lines)


def _lines(source: Path) -> Iterator[str]:
    """The lines of a file, one at a time, each with its `\\n` (the last maybe without); a UTF-8
    byte order mark before the first (an editor's on Windows) left out, as the recording reader
    leaves it out (`json.loads` of bytes does)."""
    with open(source, "rb") as file:
        for number, line in enumerate(file):
            yield line.decode("utf-8-sig" if number == 0 else "utf-8")
