"""`has_single_plain_type` decides whether a frame may be forwarded unparsed on what `peek_type`
read. Its shortcut for frames that end with a string value (audio: `..."<base64>"}`) must keep
the guarantee: a frame it lets through parses to the very type that was peeked. The engine asks
it through `pass_through_test` (one function per set of types, on every frame), which must
decide exactly as `passes_unparsed` does. Where the compiled test is built
(relay/dialects/_peek.pyx), `pass_through_test` returns it, and every verdict here is checked on
both: the compiled one and the Python one (`python_test`), alike."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from relay.dialects import peek
from relay.dialects.peek import has_single_plain_type, pass_through_test, passes_unparsed, peek_type

KEYS = st.sampled_from(["type", "event_id", "delta", "audio", "item"])
VALUES = st.one_of(
    st.sampled_from(["type", "input_audio_buffer.append", "session.update", "response.output_audio.delta",
                     "response.output_audio.deltas", 'input_audio_buffer.append"']),
    st.text(alphabet='AZaz09+/=type"\\', max_size=40),
    st.integers(),
    st.just({"type": "message"}),
)
KINDS = frozenset({"input_audio_buffer.append", "response.output_audio.delta"})


def python_test(kinds: frozenset[str]):   # type: ignore[no-untyped-def]
    """`pass_through_test(kinds)` as it is without the compiled test: the Python function."""
    compiled, peek.compiled_test = peek.compiled_test, None
    try:
        return pass_through_test(kinds)
    finally:
        peek.compiled_test = compiled


def frame_of(members: list[tuple[str, object]], spaced: bool) -> str:
    separator = ", " if spaced else ","
    return "{" + separator.join(f"{json.dumps(key)}:{json.dumps(value, separators=(',', ':'))}"
                                for key, value in members) + "}"


@given(st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=6))
def test_a_frame_let_through_parses_to_the_peeked_type(members: list[tuple[str, object]]) -> None:
    frame = frame_of(members, spaced=False)
    peeked = peek_type(frame)
    if peeked is not None and has_single_plain_type(frame):
        assert json.loads(frame)["type"] == peeked


def test_a_second_type_key_before_a_trailing_string_is_seen() -> None:
    smuggled = '{"type":"input_audio_buffer.append","type":"session.update","audio":"AAAA"}'
    assert not has_single_plain_type(smuggled)
    assert not has_single_plain_type('{"type":"input_audio_buffer.append","audio":"AAAA","type":"x"}')
    assert has_single_plain_type('{"type":"input_audio_buffer.append","event_id":"e1","audio":"AAAA"}')
    assert not has_single_plain_type('"}')


@given(st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=6), st.booleans(), st.sampled_from(["", " ", "}", '"}']))
def test_the_engine_s_one_call_test_decides_as_passes_unparsed(members: list[tuple[str, object]], spaced: bool,
                                                              tail: str) -> None:
    frame = frame_of(members, spaced) + tail
    passes = pass_through_test(KINDS)
    assert passes(frame) == passes_unparsed(frame, KINDS) == python_test(KINDS)(frame)
    if passes(frame):   # what is forwarded unparsed parses, to the type peeked, whatever follows it
        assert peek_type(frame) in KINDS and has_single_plain_type(frame)
        assert json.loads(frame)["type"] == peek_type(frame)
    assert not passes(frame.encode())   # binary frames are never forwarded unparsed
    assert not python_test(KINDS)(frame.encode())


# pieces of frames, JSON's structure among them, to be put together in any order
PIECES = st.sampled_from(['{"type":"input_audio_buffer.append"', '{ "type": "input_audio_buffer.append"',
                          '"', "'", ",", ":", " ", "\n", "{", "}", "[", "]", "\\", "\x01", "0", "-1", "1.", "2e5", ".5",
                          "true", "null", "nul", '"audio":', '"type":', '"AAAA"', "garbage", '"}'])


@given(st.lists(PIECES, max_size=16))
def test_a_frame_forwarded_unparsed_is_json_of_the_type_it_claims(pieces: list[str]) -> None:
    """The fast path's test takes only what a JSON parser reads as one object of a forwarded type
    (anything else is parsed in full, where bad JSON gets its error event), raw control characters
    inside strings aside."""
    frame = "".join(pieces)
    passes = pass_through_test(KINDS)(frame)
    assert passes == python_test(KINDS)(frame)
    if passes:   # raw control characters in strings are not looked for
        assert json.loads(frame, strict=False)["type"] in KINDS


def audio_frame(members: list[tuple[str, object]], payload: str) -> str:
    """A compact output-audio delta: its type, `members`, then its payload."""
    head = "".join(f",{json.dumps(key)}:{json.dumps(value, separators=(',', ':'))}" for key, value in members)
    return f'{{"type":"response.output_audio.delta"{head},"delta":{json.dumps(payload)}}}'


MEMBERS = st.lists(st.tuples(KEYS, st.one_of(st.text(alphabet='ab"_{}[],:', max_size=6), st.integers(),
                                             st.sampled_from([True, None, [1], {"a": 1}]))), max_size=4)


@given(st.lists(st.one_of(st.tuples(MEMBERS, st.sampled_from(["AAAA", "", "A}"])), st.lists(PIECES, max_size=12)),
                min_size=1, max_size=8))
def test_the_test_remembers_the_last_layout_without_changing_a_verdict(frames: list[object]) -> None:
    """The test compares a frame with the layout of the last audio frame it matched in full (an
    audio stream's frames differ in their event ids and payloads): over any sequence of frames,
    alike or not, one test function decides each frame as a fresh one does."""
    remembering = python_test(KINDS)
    for drawn in frames:
        if isinstance(drawn, tuple):
            members, payload = drawn
            frame = audio_frame(members, payload)
        else:
            frame = "".join(drawn)
        assert remembering(frame) == python_test(KINDS)(frame) == pass_through_test(KINDS)(frame), frame
    same_layout = audio_frame([("event_id", "e1"), ("item", "i1")], "AAAA")
    assert remembering(same_layout) and remembering(same_layout.replace('"e1"', '"e2"'))
    assert remembering(same_layout.replace('"AAAA"', '"BBBBBBBB"'))   # the payload's length is free
    assert not remembering(same_layout.replace('"e1"', '"e2" '))   # what lies outside the value is compared
    assert not remembering(same_layout.replace('"e1"', '"["]'))
    assert not remembering(same_layout.replace('"e1"', '""1"'))   # a quote in the value, its length kept
    assert not remembering(same_layout.replace('"event_id":"e1"', '"type":"session.update"'))


# what a frame of the remembered layout may have in place of any of its characters: JSON's
# punctuation, a backslash, a control character, the start of a second `type`
SUBSTITUTES = '"\\{}[],: \x01tA0-'
LAYOUTS = [[("event_id", "event_0123")], [("event_id", "e1"), ("item_id", "item_1"), ("output_index", 0)], [],
           [("output_index", 0)], [("event_id", "")], [("event_id", "e1"), ("type_of", "t")]]


@pytest.mark.parametrize("members", LAYOUTS)
@pytest.mark.parametrize("payload", ["AAAA", ""])
def test_a_frame_like_the_remembered_one_passes_only_as_a_fresh_test_lets_it(
        members: list[tuple[str, object]], payload: str) -> None:
    """The remembered layout's shortcut, attacked where it is weakest: frames of the remembered
    one's length (so its slices line up) with any one character replaced by JSON punctuation, a
    backslash or a control character (in the lead, the event id, the tail, the payload, its
    closing quote and brace), or removed. Each is decided as a fresh test decides it, only JSON
    of a forwarded type passes, and the layout remembered still serves afterwards."""
    remembering = python_test(KINDS)
    remembered = audio_frame(members, payload)
    assert remembering(remembered)
    variants = [remembered[:at] + substitute + remembered[at + 1:]
                for at in range(len(remembered)) for substitute in SUBSTITUTES]
    variants += [remembered[:at] + remembered[at + 1:] for at in range(len(remembered))]
    for frame in variants:
        assert remembering(frame) == python_test(KINDS)(frame) == pass_through_test(KINDS)(frame), frame
        if remembering(frame):
            assert json.loads(frame, strict=False)["type"] in KINDS
        assert remembering(remembered)


@given(st.sampled_from(LAYOUTS), st.sampled_from(["AAAA", "", "AB+/=="]), st.sampled_from(["", "A", "}", '"}']),
       st.data())
def test_frames_changed_in_several_places_are_decided_as_fresh(
        members: list[tuple[str, object]], payload: str, suffix: str, data: st.DataObject) -> None:
    """The same, with up to three characters replaced at once, and the frame cut short or grown."""
    remembering = python_test(KINDS)
    remembered = audio_frame(members, payload)
    assert remembering(remembered)
    characters = list(remembered)
    changes = data.draw(st.lists(st.tuples(st.integers(0, len(characters) - 1), st.sampled_from(SUBSTITUTES)),
                                 min_size=1, max_size=3))
    for position, substitute in changes:
        characters[position] = substitute
    for frame in ("".join(characters), "".join(characters)[:-1], "".join(characters) + suffix):
        assert remembering(frame) == python_test(KINDS)(frame) == pass_through_test(KINDS)(frame), frame
        if remembering(frame):
            assert json.loads(frame, strict=False)["type"] in KINDS
        assert remembering(remembered)


def test_the_compiled_test_is_built_and_taken() -> None:
    """The environment the tests run in builds the compiled test (setup.py, scripts/test), so the
    checks above compare it with the Python one; RELAY_COMPILED=0 turns it off."""
    if os.environ.get("RELAY_COMPILED", "1") == "0":
        assert peek.compiled_test is None and pass_through_test(KINDS) is not None
        return
    assert peek.compiled_test is not None, "relay/dialects/_peek.pyx is not built (pip install -e .)"
    passes = pass_through_test(KINDS)
    assert isinstance(passes, peek.compiled_test)
    assert (passes.prefixes, passes.after_type) == (python_test(KINDS).prefixes, python_test(KINDS).after_type)


@given(st.lists(st.one_of(st.tuples(MEMBERS, st.sampled_from(["AAAA", "", "A}", "AéA", "\u2028"])),
                          st.lists(st.one_of(PIECES, st.sampled_from(["é", "AéA", "\\u00e9"])), max_size=12)),
                min_size=1, max_size=8))
def test_the_compiled_test_decides_as_the_python_one(frames: list[object]) -> None:
    """The compiled test decides a compact ASCII frame of the kinds itself and hands every other
    (not ASCII, another type, spaced, binary) to the Python test: alike on all of them."""
    compiled, python = pass_through_test(KINDS), python_test(KINDS)
    for drawn in frames:
        if isinstance(drawn, tuple):   # a payload not ASCII, raw (json.dumps would escape it)
            members, payload = drawn
            frame = audio_frame(members, "AAAA").replace('"AAAA"}', f'"{payload}"}}')
        else:
            frame = "".join(drawn)
        assert compiled(frame) == python(frame), frame
        assert not compiled(frame.encode())
    assert compiled('{"type":"input_audio_buffer.append","audio":"AéA"}')   # the Python test's verdict
