"""`has_single_plain_type` decides whether a frame may be forwarded unparsed on what `peek_type`
read. Its shortcut for frames that end with a string value (audio: `..."<base64>"}`) must keep
the guarantee: a frame it lets through parses to the very type that was peeked."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from relay.dialects.peek import has_single_plain_type, peek_type

KEYS = st.sampled_from(["type", "event_id", "delta", "audio", "item"])
VALUES = st.one_of(
    st.sampled_from(["type", "input_audio_buffer.append", "session.update", "response.output_audio.delta"]),
    st.text(alphabet="AZaz09+/=type", max_size=40),
    st.integers(),
    st.just({"type": "message"}),
)


@given(st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=6))
def test_a_frame_let_through_parses_to_the_peeked_type(members: list[tuple[str, object]]) -> None:
    frame = "{" + ",".join(f"{json.dumps(key)}:{json.dumps(value, separators=(',', ':'))}"
                           for key, value in members) + "}"
    peeked = peek_type(frame)
    if peeked is not None and has_single_plain_type(frame):
        assert json.loads(frame)["type"] == peeked


def test_a_second_type_key_before_a_trailing_string_is_seen() -> None:
    smuggled = '{"type":"input_audio_buffer.append","type":"session.update","audio":"AAAA"}'
    assert not has_single_plain_type(smuggled)
    assert not has_single_plain_type('{"type":"input_audio_buffer.append","audio":"AAAA","type":"x"}')
    assert has_single_plain_type('{"type":"input_audio_buffer.append","event_id":"e1","audio":"AAAA"}')
    assert not has_single_plain_type('"}')
