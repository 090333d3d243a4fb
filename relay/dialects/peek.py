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
backslash, by the scans the test makes anyway: the payload is never walked by a parser, the rest
of the object (its head, a hundred characters) is matched by one regular expression, or only its
part before the tail the last head ended with (the frames of an audio stream differ in their
`event_id` and payload alone: `pass_through_test`). Otherwise (a
ping ending with its timestamp) the whole object is matched. Anything else (garbage after the
object, an array nested in it, a second `type`) is parsed in full, where bad JSON gets its error
event.
"""

from __future__ import annotations

import re
from typing import Callable

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
# the same head in two parts, for the test's memory of the last head's tail (`pass_through_test`):
# the members after the type's value up to a tail already seen; and where such a tail may begin
# (after the first member, which is where a frame's own `event_id` sits)
_HEAD_BEFORE_TAIL = re.compile(rf':{_STRING}(?:,{_KEY}:{_SCALAR})*+')
_TAIL_START = re.compile(rf':{_STRING}(?:,{_KEY}:{_SCALAR}(?=,))?+')
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
    Called on every audio frame (as `pass_through_test(kinds)`): the compact `type`-first case
    costs two string scans and the check of `has_single_plain_type`, nothing more."""
    return pass_through_test(kinds)(frame)


def pass_through_test(kinds: frozenset[str]) -> Callable[[str | bytes], bool]:
    """`passes_unparsed` over `kinds` as one function of the frame alone (a binary frame never
    passes): what the engine asks of every frame a reader hands over. The same decision, taken
    with the fewest C calls (on CPython 3.11 `rfind` and its kin parse their arguments with
    `PyArg_ParseTuple`, at about the cost of a scan of the frame):
    the compact `type`-first case is one `startswith` over the kinds' own prefixes (the type's
    closing quote included), then `has_single_plain_type` inline, its second `type` looked for
    between the first one and the last quote before the frame's end."""
    prefixes = tuple(f'{_COMPACT_TYPE_FIRST}{kind}"' for kind in sorted(kinds))
    after_type = len('{"type"')
    compact_head = _COMPACT_HEAD.fullmatch
    compact_object = _COMPACT_OBJECT.fullmatch
    head_before_tail = _HEAD_BEFORE_TAIL.fullmatch
    tail_start = _TAIL_START.match
    # The tail of the last head that matched, from its second member on (`,"<key>":<scalar>` any
    # number of times, then `,"<payload key>":`): an audio stream's frames differ in their first
    # member (the `event_id`) and their payload only, so the next frame's head ends with the same
    # tail, and only what lies between its type and that tail is matched (a few dozen characters
    # instead of the whole head: the regular expression costs about 20 instructions a character).
    # Sound: the head is in `_COMPACT_HEAD`'s language exactly when its part before a tail that
    # matched once is in `_MEMBERS`' (no backslash in the frame, so its quotes pair up as strings).
    # A backslash (in no frame that gets here) stands for "none yet".
    tail = "\\"

    def passes(frame: str | bytes) -> bool:
        nonlocal tail
        try:
            typed = frame.startswith(prefixes)   # type: ignore[arg-type]
        except TypeError:   # bytes: a binary frame never passes
            return False
        if not typed:
            # compact with another type, or not compact: read the type the slow way
            return (not frame.startswith(_COMPACT_TYPE_FIRST) and peek_type(frame) in kinds   # type: ignore[arg-type]
                    and has_single_plain_type(frame) and is_flat_object(frame))   # type: ignore[arg-type]
        # a str from here on (startswith took str prefixes): it holds no backslash, and it ends
        # with its payload's closing quote and brace, its head (up to the payload's opening
        # quote, the last before that end) matching; or it is a flat object whose last value is
        # no string
        if "\\" in frame:   # type: ignore[operator]
            return False
        if frame.endswith('"}'):   # type: ignore[arg-type]
            end = frame.rfind('"', 0, -2)   # type: ignore[union-attr]
            cut = end - len(tail)
            if frame[cut:end] == tail:   # a slice: `endswith` with bounds parses its arguments at more cost
                return head_before_tail(frame, after_type, cut) is not None   # type: ignore[arg-type]
            if compact_head(frame, after_type, end) is None:   # type: ignore[arg-type]
                return False
            tail = frame[tail_start(frame, after_type, end).end():end]   # type: ignore[union-attr, index]
            return True
        return compact_object(frame, after_type) is not None   # type: ignore[arg-type]

    # what a lane over raw payloads tests the same way (relay.session.transport.ForwardRule)
    passes.prefixes = prefixes   # type: ignore[attr-defined]
    passes.after_type = after_type   # type: ignore[attr-defined]
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
