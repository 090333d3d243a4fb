"""Cheap look at a typed frame's event type without parsing the whole frame (the OpenAI family's
frames; Gemini Live's have no `type` and are peeked in `relay.dialects.gemini`).

Most of a session's bytes are audio (`input_audio_buffer.append`, `response.output_audio.delta`):
the relay forwards those untouched, so decoding their base64-heavy JSON would be pure waste. Real
servers and SDKs put `type` first; when they do not, a small scanner walks the top-level keys,
skipping scalar values, until it finds `type`. Anything it cannot skip cheaply (a nested object or
array before `type`, an escaped key) returns None, and the caller parses the frame in full.
`passes_unparsed` is the whole test a frame passes to be forwarded as the same text;
`pass_through_test` makes it one function per set of event types, what the engine calls on every
frame.

A frame forwarded unparsed is one JSON object the upstream (or the client) parses as the event it
claims to be (raw control characters inside its strings aside, see `_STRING`): a flat object (its
values strings, numbers, `true`, `false` or `null`), nothing after its closing brace. When its
last value is a string (audio's payload), that string is only checked to hold no quote and no
backslash, by C scans (`in`, `find`): the payload is never walked by a parser. The rest of the
object (its head, a hundred characters) is matched by one regular expression the first time; an
audio stream's next frames differ from it only in their payload and the value of their first
member (the `event_id`), so the test remembers where that value and the payload lie and compares
the rest as two slices (`pass_through_test`). Otherwise (a ping ending with its timestamp) the
whole object is matched. Anything else (garbage after the object, an array nested in it, a second
`type`) is parsed in full, where bad JSON gets its error event.
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable


def _compiled_test() -> Any:
    """The compiled test's class (relay/dialects/_peek.pyx) when setup.py built it and
    RELAY_COMPILED is not 0, else None (the Python test then runs alone)."""
    if os.environ.get("RELAY_COMPILED", "1") == "0":
        return None
    try:
        from relay.dialects._peek import CompactTest
    except ImportError:
        return None
    return CompactTest


# read by `pass_through_test` at each call (the framing benchmark sets it to None for a while)
compiled_test = _compiled_test()

_COMPACT_TYPE_FIRST = '{"type":"'
_COMPACT_TYPE_START = len(_COMPACT_TYPE_FIRST)
_TYPE_FIRST = re.compile(r'\s*\{\s*"type"\s*:\s*"([^"\\]*)"')
_WHITESPACE = " \t\r\n"

# The head of a frame forwarded unparsed: what lies between its type's value and the opening
# quote of its last value, the payload (`,"event_id":"e1","output_index":0,"delta":`). Keys and
# string values hold no quote (and no backslash: none is in the frame); no key is a second
# `type`. Possessive repeats: a head that does not match fails at once. Raw control characters
# inside strings are not looked for (a class of them would triple the match's cost, and the
# payload is never walked): JSON read leniently (`json.loads(..., strict=False)`) takes them.
_STRING = r'"[^"]*+"'
_KEY = r'"(?!type")[^"]*+"'
_SCALAR = rf'(?:{_STRING}|-?+(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:[eE][-+]?+[0-9]++)?+|true|false|null)'
# compact, matched from just after `{"type"`: `:"<kind>"` (the kind checked by the prefix), the
# other members, the payload's key; or, when the last value is no string, the whole object
_COMPACT_HEAD = re.compile(rf':{_STRING}(?:,{_KEY}:{_SCALAR})*+,{_KEY}:')
# where the value of the first member after the type lies (group 1), when that value is a string
# and not the payload (matched up to the payload's opening quote): what the test lets vary from
# frame to frame (`pass_through_test`)
_FIRST_STRING = re.compile(r':"[^"]*+","[^"]*+":"([^"]*+)"')
_COMPACT_OBJECT = re.compile(rf':{_STRING}(?:,{_KEY}:{_SCALAR})*+\}}')
# with whitespace, matched from the frame's start (`type` anywhere, found by `peek_type`; that it
# is there once is `has_single_plain_type`'s)
_SPACE = "[ \t\r\n]*+"
_LOOSE_HEAD = re.compile(rf'{_SPACE}\{{{_SPACE}(?:{_STRING}{_SPACE}:{_SPACE}{_SCALAR}{_SPACE},{_SPACE})*+'
                         rf'{_STRING}{_SPACE}:{_SPACE}')
_LOOSE_END = re.compile(rf'"{_SPACE}\}}{_SPACE}')
_LOOSE_OBJECT = re.compile(rf'{_SPACE}\{{{_SPACE}(?:{_STRING}{_SPACE}:{_SPACE}{_SCALAR}{_SPACE},{_SPACE})*+'
                           rf'{_STRING}{_SPACE}:{_SPACE}{_SCALAR}{_SPACE}\}}{_SPACE}')


def peek_type(frame: str) -> str | None:
    """The top-level `type` of a JSON object frame, or None when unsure (parse it in full then)."""
    # Compact JSON with `type` first (what the servers send): plain string scans, half the
    # regular expression's cost, on every audio frame.
    if frame.startswith(_COMPACT_TYPE_FIRST):
        end = frame.find('"', _COMPACT_TYPE_START)
        if end >= 0:
            value = frame[_COMPACT_TYPE_START:end]
            if "\\" not in value:
                return value
    match = _TYPE_FIRST.match(frame)
    if match is not None:
        return match.group(1)
    return _scan_for_type(frame)


def passes_unparsed(frame: str, kinds: frozenset[str]) -> bool:
    """Whether a text frame is of one of the event types `kinds` and may be forwarded as the same
    text without being parsed: its `type` is read cheaply and no second `type` can hide in it.
    Called on every audio frame (as `pass_through_test(kinds)`, which remembers the last audio
    frame's layout: this call starts with none)."""
    return pass_through_test(kinds)(frame)


def pass_through_test(kinds: frozenset[str]) -> Callable[[str | bytes], bool]:
    """`passes_unparsed` over `kinds` as one function of the frame alone (a binary frame never
    passes): what the engine asks of every frame a reader hands over. The same decision, taken
    with the fewest operations of the interpreter (each costs about a thousand instructions: a
    slice compared, a method called; `in` a third of that, with its scan in C).

    The frames of an audio stream differ only in their payload and their `event_id`, whose value
    keeps its length (real servers' ids are of fixed length; the bench's carry a 19-digit
    timestamp). So the test remembers the layout of the last compact frame whose head it matched:
    the `lead` (from `{` to the opening quote of its first member's value, its type included),
    the `tail` (from that value's closing quote to the payload's opening quote) and where each
    lies. A frame that has the same lead and tail at the same places, no backslash, no quote in
    that value and none in its payload, which ends the frame with `"}`, is the same flat object
    with other string contents: it passes with no regular expression run (two slices compared,
    three C scans). Any other frame takes the full test below, and a compact audio frame that
    passes it becomes the layout remembered. When the first member is the payload itself, or no
    string, the lead is the whole head (up to the payload's opening quote) and the tail is empty.

    Where the compiled test is built (`compiled_test`, relay/dialects/_peek.pyx), the test
    returned is that one: a compact ASCII frame of one of the kinds gets the same verdict from C
    scans, for a tenth of the instructions, and every other frame goes to the function described
    here.

    The full test: the compact `type`-first case is one `startswith` over the kinds' own
    prefixes (the type's closing quote included); the frame holds no backslash; it ends with its
    payload's closing quote and brace and its head (up to the payload's opening quote, the last
    before that end) matches `_COMPACT_HEAD`, or it is a flat object whose last value is no
    string (`_COMPACT_OBJECT`). A frame that is not compact is read the slow way (`peek_type`,
    `has_single_plain_type`, `is_flat_object`)."""
    prefixes = tuple(f'{_COMPACT_TYPE_FIRST}{kind}"' for kind in sorted(kinds))
    after_type = len('{"type"')
    compact_head = _COMPACT_HEAD.fullmatch
    compact_object = _COMPACT_OBJECT.fullmatch
    first_string = _FIRST_STRING.match
    # The layout remembered: frame[:lead_end] is `lead`, frame[value_end:payload_at] is `tail`
    # (the value's closing quote to the payload's opening one, both included), and what lies
    # between (the first member's value) or after (the payload) holds no quote. Sound: the last
    # frame with this layout matched in full, and with no backslash anywhere its quotes pair up
    # as strings, so a frame that differs from it only inside those two strings is the same flat
    # object. A lead of a backslash (in no frame that gets past the lead) stands for "none yet".
    lead, lead_end, tail, value_end, payload_at = "\\", 1, "", 0, 0

    def passes(frame: str | bytes) -> bool:
        nonlocal lead, lead_end, tail, value_end, payload_at
        # (a binary frame: bytes compare unequal to the lead, a str)
        if (frame[:lead_end] == lead and frame[value_end:payload_at] == tail and "\\" not in frame
                and '"' not in frame[lead_end:value_end]   # type: ignore[operator]
                and frame.find('"', payload_at) == len(frame) - 2 and frame[-1] == "}"):   # type: ignore[arg-type]
            return True
        try:
            typed = frame.startswith(prefixes)   # type: ignore[arg-type]
        except TypeError:   # bytes: a binary frame never passes
            return False
        if not typed:
            # compact with another type, or not compact: read the type the slow way
            return (not frame.startswith(_COMPACT_TYPE_FIRST) and peek_type(frame) in kinds   # type: ignore[arg-type]
                    and has_single_plain_type(frame) and is_flat_object(frame))   # type: ignore[arg-type]
        # a str from here on (startswith took str prefixes)
        if "\\" in frame:   # type: ignore[operator]
            return False
        if not frame.endswith('"}'):   # type: ignore[arg-type]
            return compact_object(frame, after_type) is not None   # type: ignore[arg-type]
        end = frame.rfind('"', 0, -2)   # type: ignore[union-attr]
        if compact_head(frame, after_type, end) is None:   # type: ignore[arg-type]
            return False
        first = first_string(frame, after_type, end)   # type: ignore[arg-type]
        payload_at = end + 1
        lead_end, value_end = first.span(1) if first is not None else (payload_at, payload_at)
        lead, tail = frame[:lead_end], frame[value_end:payload_at]   # type: ignore[assignment]
        return True

    # what a lane over raw payloads tests the same way (relay.session.pipe.ForwardRule)
    passes.prefixes = prefixes   # type: ignore[attr-defined]
    passes.after_type = after_type   # type: ignore[attr-defined]
    if compiled_test is not None:   # the compact ASCII frames in C, the rest by `passes`
        return compiled_test(prefixes, after_type, passes)   # type: ignore[no-any-return]
    return passes


def _skip_ws(frame: str, pos: int) -> int:
    length = len(frame)
    while pos < length and frame[pos] in _WHITESPACE:
        pos += 1
    return pos


def _string_end(frame: str, start: int) -> int:
    """Index just past the string literal whose opening quote is at `start`, or -1."""
    pos = start + 1
    while True:
        end = frame.find('"', pos)
        if end < 0:
            return -1
        backslashes = 0
        back = end - 1
        while frame[back] == "\\":
            backslashes += 1
            back -= 1
        if backslashes % 2 == 0:
            return end + 1
        pos = end + 1


def _scan_for_type(frame: str) -> str | None:
    pos = _skip_ws(frame, 0)
    if pos >= len(frame) or frame[pos] != "{":
        return None
    pos += 1
    length = len(frame)
    while True:
        pos = _skip_ws(frame, pos)
        if pos >= length or frame[pos] != '"':
            return None
        key_end = _string_end(frame, pos)
        if key_end < 0:
            return None
        key = frame[pos + 1 : key_end - 1]
        if "\\" in key:
            return None
        pos = _skip_ws(frame, key_end)
        if pos >= length or frame[pos] != ":":
            return None
        pos = _skip_ws(frame, pos + 1)
        if pos >= length:
            return None
        first = frame[pos]
        if first == '"':
            value_end = _string_end(frame, pos)
            if value_end < 0:
                return None
            if key == "type":
                value = frame[pos + 1 : value_end - 1]
                return None if "\\" in value else value
            pos = value_end
        elif first in "{[" or key == "type":
            return None
        else:
            while pos < length and frame[pos] not in ",}":
                pos += 1
        pos = _skip_ws(frame, pos)
        if pos >= length or frame[pos] != ",":
            return None
        pos += 1


def has_single_plain_type(frame: str) -> bool:
    """True when the frame cannot hold a second `type` key: no escape anywhere, and `"type"`
    exactly once. JSON parsers keep the *last* of repeated keys, so a decision to forward a frame
    unparsed, taken on the first `type`, must be sure there is no other: otherwise a frame could
    peek as an audio append and reach the upstream as any other event, past the relay's checks.
    Both scans run at C speed; base64 audio holds neither backslashes nor quotes.

    The count stops at the last quote before the frame's last two characters, found by a reverse
    byte search. In valid JSON a key is followed by `:`, a value and `}`, so the closing quote of
    every key lies at or before that quote: no key is missed. An audio frame ends with its
    payload, `..."<base64>"}`, and that last quote is the payload's opening one: the count then
    skips the 1.3 KB of base64 it would otherwise walk, most of this check's cost."""
    if "\\" in frame:
        return False
    return frame.count('"type"', 0, frame.rfind('"', 0, len(frame) - 2) + 1) == 1


def may_be(frame: str, kinds: frozenset[str]) -> bool:
    """Whether a text frame may be an event of one of `kinds`, read without parsing it: its peeked
    `type` is one, or another `type` may hide in it (`has_single_plain_type`). A reader that
    decodes only such frames skips the rest, most of them audio, kilobytes each."""
    return peek_type(frame) in kinds or not has_single_plain_type(frame)


def is_flat_object(frame: str) -> bool:
    """True when a frame without backslashes is a flat JSON object, whitespace allowed: when only
    `}` and whitespace follow its last string, what comes before that string matches (the string
    itself is not walked); otherwise the whole object matches."""
    closing = frame.rfind('"')
    if closing < 0:
        return False
    if _LOOSE_END.fullmatch(frame, closing) is None:
        return _LOOSE_OBJECT.fullmatch(frame) is not None
    return _LOOSE_HEAD.fullmatch(frame, 0, frame.rfind('"', 0, closing)) is not None
