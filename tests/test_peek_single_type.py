"""`has_single_plain_type` decides whether a frame may be forwarded unparsed on what `peek_type`
read. Its shortcut for frames that end with a string value (audio: `..."<base64>"}`) must keep
the guarantee: a frame it lets through parses to the very type that was peeked. The engine asks
it through `pass_through_test` (one function per set of types, on every frame), which must
decide exactly as `passes_unparsed` does."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

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
    assert passes(frame) == passes_unparsed(frame, KINDS)
    if passes(frame):   # what is forwarded unparsed parses, to the type peeked, whatever follows it
        assert peek_type(frame) in KINDS and has_single_plain_type(frame)
        assert json.loads(frame)["type"] == peek_type(frame)
    assert not passes(frame.encode())   # binary frames are never forwarded unparsed


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
    if pass_through_test(KINDS)(frame):   # raw control characters in strings are not looked for
        assert json.loads(frame, strict=False)["type"] in KINDS
