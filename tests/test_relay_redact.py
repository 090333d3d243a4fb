"""`relay redact`: recordings made safe to keep. On every shared real recording, checked with the
test's own patterns (not the redactor's): no phone number or e-mail address is left, and a replay
gives the same verdict before and after. Planted personal data is found wherever it sits (split
across deltas, JSON inside JSON, Gemini `args`), the same value always becomes the same placeholder,
and a redacted relay recording still replays without divergence."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest

from relay.cli import main
from relay.offline.scrub import Scrubber, luhn_ok
from relay.testing import Script, Turn, call, replay
from relay.tools import tool
from tests.support.paths import REPO, shared_dir

SHARED = sorted((shared_dir() / "recordings").glob("*.jsonl"))
SHARED_TOOLS = str(REPO / "tests" / "fixtures" / "shared_recording_tools.py")
NOTES_LOG = "realtime-notes-idx1781683788_beta_fc"

# The test's own idea of what personal data looks like, written apart from the redactor's.
EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
PHONE = re.compile(r"\+?\(?\d[\d ().-]{7,}\d")
FAKE_EMAIL = re.compile(r"user\d+@example\.com")
PATTERNS = "# people named in the shared sessions\nSarah\nsupervisor: Marco\norder: /ORD-\\d{6}/\n"


def strings(value: Any, key: Any = None) -> Iterator[str]:
    """Every JSON string that is text: not an id, not an audio payload."""
    if isinstance(value, dict):
        for name, inner in value.items():
            if name in ("id", "ids", "type") or str(name).endswith(("_id", "Id")):
                continue
            if name in ("audio", "data") or (name == "delta" and str(value.get("type")).endswith("audio.delta")):
                continue
            yield from strings(inner, name)
    elif isinstance(value, list):
        for inner in value:
            yield from strings(inner, key)
    elif isinstance(value, str):
        yield value


def personal_data(path: Path) -> list[str]:
    """Phone numbers (nine to fifteen digits, not the fictional 555-01xx), card numbers (Luhn-valid,
    13 to 19 digits, not a 4000 0000 test number) and e-mail addresses (not at example.com) in the
    file's text."""
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        text = "\n".join(strings(obj))
        found += [m.group() for m in EMAIL.finditer(text) if not FAKE_EMAIL.fullmatch(m.group())]
        for match in PHONE.finditer(text):
            digits = re.sub(r"\D", "", match.group())
            if 9 <= len(digits) <= 15 and not digits.endswith(tuple(f"55501{n:02d}" for n in range(100))):
                found.append(match.group())
            elif 13 <= len(digits) <= 19 and luhn_ok(digits) and not digits.startswith("40000000"):
                found.append(match.group())
    return found


def test_a_recording_an_editor_saved_with_a_bom_and_crlf_is_redacted_as_the_recording_it_is(
        tmp_path: Path, capsys) -> None:
    """A UTF-8 byte order mark before the header (and CRLF line ends), as an editor on Windows
    saves the file: replay reads it, and so does redact (it took the file for an event log none
    of whose lines is a realtime event)."""
    script = Script(Turn(calls=[call("register", email="bo@corp.example.net", phone="(212) 555-7788")]),
                    Turn(say="Registered {output}"))
    with script.start([register]) as session:
        session.user("Register bo@corp.example.net, my number is (212) 555-7788")
        session.advance(1)
    saved = session.save(tmp_path / "saved")
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(b"\xef\xbb\xbf" + saved.read_bytes().replace(b"\n", b"\r\n"))
    assert replay(edited, [register]).ok
    target = tmp_path / "redacted.jsonl"
    status, out = redact(edited, target, capsys=capsys)
    assert status == 0, out
    header = json.loads(target.read_text().splitlines()[0])
    assert header["format"] == json.loads(saved.read_text().splitlines()[0])["format"]
    assert personal_data(target) == [] and replay(target, [register]).ok


def verdict(path: Path) -> tuple[Any, ...]:
    result = replay(path, [SHARED_TOOLS])
    return (result.verdict(), [(c.name, c.outcome, c.status, c.skipped) for c in result.calls],
            [d.describe() for d in result.divergences])


def redact(source: Path, target: Path, *options: str, capsys: Any = None) -> tuple[int, str]:
    status = main(["redact", str(source), "--out", str(target), *options])
    out = capsys.readouterr().out if capsys is not None else ""
    return status, out


@pytest.mark.parametrize("path", SHARED, ids=[p.stem for p in SHARED])
def test_a_shared_recording_keeps_no_phone_or_email_and_replays_the_same(path: Path, tmp_path: Path, capsys) -> None:
    patterns = tmp_path / "patterns.txt"
    patterns.write_text(PATTERNS)
    target = tmp_path / path.name
    status, out = redact(path, target, "--patterns", str(patterns), capsys=capsys)
    assert status == 0
    assert re.search(r"replaced: card: \d+ \(\d+ distinct\), email: \d+ \(\d+ distinct\)", out)
    assert personal_data(target) == []
    assert verdict(target) == verdict(path)
    if "Sarah" in path.read_text():
        assert "Sarah" not in target.read_text() and "name-1" in target.read_text()


def planted(tmp_path: Path) -> Path:
    """The notes event log with personal data planted where real sessions carry it: the call's
    arguments (split across two deltas, in the middle of the phone number; and whole in every event
    that repeats them), the spoken answer."""
    source = shared_dir() / "recordings" / f"{NOTES_LOG}.jsonl"
    text = source.read_text().replace("Hamrah Aval (MCI) energy consumption", f"mail {PLANTED_MAIL} or call {PLANTED_PHONE}")
    lines = [json.loads(line) for line in text.splitlines()]
    arguments = json.dumps({"text": f"mail {PLANTED_MAIL} or call {PLANTED_PHONE}"}, separators=(",", ":"))
    cut = arguments.index("415") + 4
    at = next(i for i, e in enumerate(lines) if e["type"] == "response.function_call_arguments.delta")
    lines[at]["delta"] = arguments[:cut]
    lines.insert(at + 1, dict(lines[at], delta=arguments[cut:]))
    for event in lines:
        if event["type"] == "response.audio_transcript.done":
            event["transcript"] = "I will write to ANA.LIMA@mail.example.org, card 4111 1111 1111 1111."
    target = tmp_path / f"{NOTES_LOG}.jsonl"
    target.write_text("".join(json.dumps(e) + "\n" for e in lines))
    meta = json.loads((source.with_name(f"{NOTES_LOG}.meta.json")).read_text())
    meta["directions"].insert(at + 1, "server")
    target.with_name(f"{NOTES_LOG}.meta.json").write_text(json.dumps(meta))
    return target


PLANTED_MAIL, PLANTED_PHONE = "ana.lima@mail.example.org", "+1 415 555 2671"


def test_planted_personal_data_is_found_wherever_it_sits_and_replaced_consistently(tmp_path: Path, capsys) -> None:
    source = planted(tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    target = out_dir / source.name
    status, out = redact(source, target, capsys=capsys)
    assert status == 0
    assert re.search(r"replaced: card: 1 \(1 distinct\), email: \d+ \(1 distinct\), phone: \d+ \(1 distinct\)", out)
    assert "ana.lima" not in out.lower() and "2671" not in out       # the report never shows a value
    assert len(personal_data(source)) > 0 and personal_data(target) == []
    events = [json.loads(line) for line in target.read_text().splitlines()]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    done = next(e["arguments"] for e in events if e["type"] == "response.function_call_arguments.done")
    assert deltas == done == '{"text":"mail user1@example.com or call +5 555 555 0101"}'
    said = next(e["transcript"] for e in events if e["type"] == "response.audio_transcript.done")
    assert said.startswith("I will write to user1@example.com, card 4000 0000 0000 0")
    assert luhn_ok(re.sub(r"\D", "", said.split("card ")[1]))
    # the redacted log replays as the planted one did: same calls, same outcomes
    before, after = replay(source, [SHARED_TOOLS]), replay(target, [SHARED_TOOLS])
    assert [(c.name, c.outcome) for c in after.calls] == [(c.name, c.outcome) for c in before.calls]
    assert after.calls[0].arguments == done


@tool
def register(email: str, phone: str) -> dict:
    """Echoes what it was given, as many real tools do (a confirmation)."""
    return {"registered": email, "callback": phone}


@pytest.mark.parametrize("dialect", ["openai", "gemini"])
def test_a_redacted_relay_recording_still_replays_without_divergence(dialect: str, tmp_path: Path, capsys) -> None:
    script = Script(Turn(calls=[call("register", email="bo@corp.example.net", phone="(212) 555-7788")]),
                    Turn(say="Registered {output}"))
    with script.start([register], dialect=dialect) as session:
        session.user("Register bo@corp.example.net, my number is (212) 555-7788")
        session.advance(1)
    original = session.save(tmp_path)
    target = tmp_path / "redacted.jsonl"
    status, out = redact(original, target, "--keep-audio", capsys=capsys)
    assert status == 0 and "audio: " in out and "kept" in out
    text = target.read_text()
    assert "bo@corp.example.net" not in text and "555-7788" not in text
    assert personal_data(target) == []
    result = replay(target, [register])
    assert result.ok, [d.describe() for d in result.divergences]
    assert json.loads(result.calls[0].output) == {"registered": "user1@example.com", "callback": "(555) 555-0101"}


def test_audio_is_dropped_by_default_and_kept_untouched_when_asked(tmp_path: Path, capsys) -> None:
    digits_in_audio = "QUJD4155552671QUJDbo@x.io"   # base64-ish audio that happens to look like data
    source = tmp_path / "log.jsonl"
    source.write_text(json.dumps({"type": "response.output_audio.delta", "event_id": "e1", "response_id": "r",
                                  "item_id": "i", "output_index": 0, "content_index": 0,
                                  "delta": digits_in_audio}) + "\n")
    _, dropped_out = redact(source, tmp_path / "dropped.jsonl", capsys=capsys)
    assert json.loads((tmp_path / "dropped.jsonl").read_text())["delta"] == ""
    assert "audio: 1 frame(s) dropped" in dropped_out
    redact(source, tmp_path / "kept.jsonl", "--keep-audio", capsys=capsys)
    assert json.loads((tmp_path / "kept.jsonl").read_text())["delta"] == digits_in_audio


def test_check_counts_without_writing_and_finds_with_exit_1(tmp_path: Path, capsys) -> None:
    source = planted(tmp_path)
    assert main(["redact", str(source), "--check"]) == 1
    assert "phone: 0" not in capsys.readouterr().out
    clean = tmp_path / "clean.jsonl"
    shutil.copy(shared_dir() / "recordings" / "bravedigger-sip-gateway_ga_block.jsonl", clean)
    assert main(["redact", str(clean), "--check"]) == 0
    assert not (tmp_path / "clean.redacted.jsonl").exists()


@pytest.mark.parametrize("content, message", [
    ("order: /ORD-(\\d{6}/\n", "--patterns {path} line 1: not a regular expression: missing ), unterminated subpattern"),
    ("ok\n/a*/\n", "--patterns {path} line 2: the expression matches empty text"),
])
def test_a_bad_patterns_file_is_one_line_and_exit_2(content: str, message: str, tmp_path: Path, capsys) -> None:
    patterns = tmp_path / "patterns.txt"
    patterns.write_text(content)
    status = main(["redact", str(shared_dir() / "recordings" / f"{NOTES_LOG}.jsonl"), "--out",
                   str(tmp_path / "x.jsonl"), "--patterns", str(patterns)])
    err = capsys.readouterr().err
    assert status == 2
    [line] = err.splitlines()
    assert line.startswith(f"relay redact: {message.format(path=patterns)}")


def test_unusable_input_is_exit_2(tmp_path: Path, capsys) -> None:
    assert main(["redact", str(tmp_path / "missing.jsonl")]) == 2
    assert capsys.readouterr().err.strip().endswith("missing.jsonl: no such file")
    source = tmp_path / "log.jsonl"
    source.write_text('{"type": "session.created"}\n')
    assert main(["redact", str(source), "--out", str(source)]) == 2
    assert "is the recording itself" in capsys.readouterr().err


@pytest.mark.parametrize("text, kinds", [
    ("call 415-555-2671 or +44 20 7946 0958", ["phone", "phone"]),
    ("model gpt-4o-realtime-preview-2024-12-17 at 1748037062, 19.99 EUR, v1.2.3, 10.0.0.12", []),
    ("card 4111-1111-1111-1111 (not 4111-1111-1111-1112)", ["card"]),
    ("Sarah and SARAH, not Sarahs", ["name", "name"]),
])
def test_what_counts_as_personal_data(text: str, kinds: list[str]) -> None:
    from relay.offline.scrub import UserPattern

    scrubber = Scrubber([UserPattern("name", re.compile(r"(?<!\w)Sarah(?!\w)", re.IGNORECASE))])
    assert [kind for _, _, kind, _ in scrubber.spans(text)] == kinds


# Every kind the redactor finds, in the layouts it finds them in: e-mail addresses, phone numbers
# (country code, brackets, dashes, dots, one national run), card numbers (16, 15 and 13 digits, with
# and without separators) and a patterns file's words and expressions (one labelled as its own word).
EVERY_KIND = [
    "mail ana.lima@mail.example.org or BO@Corp.Example.Net",
    "call +1 415 555 2671, +44 20 7946 0958, (212) 555-7788, 030-1234-5678, 415.555.2671 or 4155552671",
    "or 01632960123, +55 11 98765 4321 and +49 (0)30 1234567",
    "card 4111 1111 1111 1111, 4111-1111-1111-1111, amex 3782 822463 10005, 4222222222222",
    "Sarah said marco asked about ORD-123456",
]
EVERY_KIND_PATTERNS = "Sarah\nmarco: Marco\norder: /ORD-\\d{6}/\ndigits: /\\b\\d{4}\\b/\n"


def every_kind_log(path: Path, many: int = 0) -> Path:
    """An event log saying each of EVERY_KIND (in a transcript and, split in two, in a call's
    arguments), then `many` distinct phone numbers, e-mail addresses and cards more: past a hundred
    of a kind, the placeholders take another shape."""
    texts = list(EVERY_KIND)
    texts += [f"+1 212 {300 + n:03d} {1000 + n:04d}, p{n}.q@corp.test.org" for n in range(many)]
    texts += [" ".join(number[:-1] + next(d for d in "0123456789" if luhn_ok(number[:-1] + d)) for number in
                       [f"5{n:014d}0"]) for n in range(many)]
    events = []
    for n, text in enumerate(texts):
        events.append({"type": "response.audio_transcript.done", "event_id": f"t{n}", "response_id": "r",
                       "item_id": f"i{n}", "output_index": 0, "content_index": 0, "transcript": text})
        arguments = json.dumps({"note": text})
        half = len(arguments) // 2
        for piece in (arguments[:half], arguments[half:]):
            events.append({"type": "response.function_call_arguments.delta", "event_id": f"d{n}",
                           "response_id": "r", "item_id": f"c{n}", "output_index": 0, "call_id": f"call{n}",
                           "delta": piece})
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    return path


@pytest.mark.parametrize("many", [0, 120])
def test_check_passes_on_what_redact_wrote_for_every_kind(many: int, tmp_path: Path, capsys) -> None:
    patterns = tmp_path / "patterns.txt"
    patterns.write_text(EVERY_KIND_PATTERNS)
    source = every_kind_log(tmp_path / "log.jsonl", many)
    assert main(["redact", str(source), "--check", "--patterns", str(patterns)]) == 1
    out = capsys.readouterr().out
    for kind in ("card", "email", "phone", "name", "marco", "order", "digits"):
        assert re.search(rf"\b{kind}: [1-9]", out), (kind, out)
    target = tmp_path / "log.redacted.jsonl"
    assert main(["redact", str(source), "--patterns", str(patterns)]) == 0
    capsys.readouterr()
    assert main(["redact", str(target), "--check", "--patterns", str(patterns)]) == 0, capsys.readouterr().out
    assert main(["redact", str(target), "--check"]) == 0
    # redacting the redacted copy again changes nothing
    again = tmp_path / "again.jsonl"
    assert main(["redact", str(target), "--out", str(again), "--patterns", str(patterns)]) == 0
    assert again.read_text() == target.read_text()


class CountingPlaceholders(dict):  # type: ignore[type-arg]
    """The scrubber's placeholders, counting how many of them are walked over (and stopping a
    quadratic walk early: past `budget`, it fails)."""

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.walked = 0
        self.budget = budget

    def __iter__(self) -> Iterator[Any]:
        for key in super().__iter__():
            self.walked += 1
            assert self.walked <= self.budget, "the placeholders are walked over once per new one"
            yield key


LONG_RECORDING_LINES = 10_000
"""The long recording's length, quoted by docs/guarantees.md. The counts below are exact per line,
so a quadratic step (a placeholder walking the others, a line parsed again) shows at any length
past a few lines: at 10,000 it would walk 50 million placeholders against a budget of 100,000."""


def test_a_long_recording_is_redacted_in_two_passes_a_line_at_a_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Time linear and memory bounded, counted rather than timed: each line is read twice (once to
    find, once to write), the scrubber searches each text a bounded number of times, a new
    placeholder never walks the others, and the file is never read whole."""
    from relay.offline import scrub

    lines = LONG_RECORDING_LINES
    source = tmp_path / "long.jsonl"
    with open(source, "w", encoding="utf-8") as out:
        out.write(json.dumps({"format": "relay-recording", "version": 1, "session_id": "s", "dialect": "openai-ga",
                              "upstream": "api.openai.com", "started_at": "2026-01-01T00:00:00Z",
                              "relay_version": "0", "tools": [], "mode": "proxy", "record_audio": "drop"}) + "\n")
        for index in range(1, lines):
            event = {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": f"write to person{index}@corp.test"}]}}
            if index % 2:
                out.write(json.dumps({"t": index / 1000, "dir": "c2r", "event": event}) + "\n")
            else:   # a frame kept as its raw text
                out.write(json.dumps({"t": index / 1000, "dir": "c2r", "raw": json.dumps(event)}) + "\n")
    placeholders = CountingPlaceholders(budget=10 * lines)
    monkeypatch.setattr(scrub, "Scrubber", lambda patterns: Scrubber(patterns, placeholders=placeholders))
    parsed = []

    class CountingJson:
        dumps = staticmethod(json.dumps)

        @staticmethod
        def loads(text: str) -> Any:
            parsed.append(1)
            return json.loads(text)
    monkeypatch.setattr(scrub, "json", CountingJson)
    searched = []
    real_spans = Scrubber.spans
    monkeypatch.setattr(Scrubber, "spans", lambda self, text: searched.append(1) or real_spans(self, text))

    def whole(*_: Any, **__: Any) -> Any:
        raise AssertionError("the recording is read whole")
    monkeypatch.setattr(Path, "read_text", whole)
    monkeypatch.setattr(Path, "read_bytes", whole)

    report = scrub.redact_file(source, tmp_path / "out.jsonl")
    assert report.lines == lines and report.counts["email"] == lines - 1 and report.distinct["email"] == lines - 1
    assert placeholders.walked <= lines   # once, for the report's count of distinct values
    assert len(parsed) == 2 * lines   # each line parsed once a pass
    assert len(searched) <= 4 * lines
    with open(tmp_path / "out.jsonl", encoding="utf-8") as redacted:
        last_two = list(redacted)[-2:]
    assert [f"user{index}@example.com" in line for index, line in zip((lines - 2, lines - 1), last_two)] == [True, True]
    assert "corp.test" not in "".join(last_two)


def test_the_guarantees_page_quotes_the_long_recordings_length_and_its_test() -> None:
    page = (REPO / "docs" / "guarantees.md").read_text()
    claim = re.search(r"a ([\d,]+)-line recording is counted, not timed\s+\(`([^`]+)`\)", page)
    assert claim is not None, "docs/guarantees.md no longer says how long a recording `relay redact` counts"
    assert claim.group(1) == f"{LONG_RECORDING_LINES:,}"
    assert claim.group(2) == "tests/test_relay_redact.py::" + test_a_long_recording_is_redacted_in_two_passes_a_line_at_a_time.__name__
