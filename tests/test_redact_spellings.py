"""The redactor finds a secret in every spelling a client could read it in: JSON escapes of any of
its characters, a text cut short in the middle of it, pieces of one streamed text split anywhere
(relay/recording/redact.py: `Redactor`, `Echoes`)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from relay.errors import REDACTED
from relay.recording.redact import SHOWN, Echoes, Redactor, unescaped

SECRET = "sk-proj-SPELLING-0123456789abcdef/xyz"


def shown_whole(text: str, secret: str = SECRET) -> bool:
    """More than SHOWN characters of the secret, anywhere in `text`, in a row."""
    return any(secret[i:i + SHOWN + 1] in text for i in range(len(secret) - SHOWN))


def escaped(text: str, which: set[int]) -> str:
    return "".join(f"\\u{ord(ch):04x}" if i in which else ch for i, ch in enumerate(text))


@settings(max_examples=100, deadline=None)
@given(which=st.sets(st.integers(0, len(SECRET) - 1)), binary=st.booleans())
def test_a_secret_in_json_escapes_is_redacted_wherever_it_is_escaped(which: set[int], binary: bool) -> None:
    frame = '{"type":"error","error":{"message":"key ' + escaped(SECRET, which) + ' bad \\n \\\\u0041"}}'
    redacted = Redactor([SECRET]).frame(frame.encode() if binary else frame)
    event = json.loads(redacted)
    assert event["error"]["message"] == f"key {REDACTED} bad \n \\u0041"


def test_an_escaped_backslash_before_u_is_not_read_as_an_escape() -> None:
    assert unescaped('"\\\\u0073k"') == '"\\\\u0073k"'
    assert unescaped('"\\u0073k\\/\\u0022"') == '"sk/\\u0022"'


def test_a_frame_without_a_secret_is_left_as_it_came() -> None:
    frame = '{"type":"x","text":"caf\\u00e9 \\ud83d\\ude00 sk-"}'
    assert Redactor([SECRET]).frame(frame) is frame


@given(kept=st.integers(0, len(SECRET) - 1))
def test_a_text_cut_short_in_a_secret_keeps_no_more_than_its_first_characters(kept: int) -> None:
    reason = Redactor([SECRET]).cut("bye " + SECRET[:kept])
    assert reason == ("bye " + SECRET[:kept] if kept <= SHOWN else f"bye {REDACTED}")


def delta(text: str, item: str = "item_1") -> str:
    return json.dumps({"type": "response.output_audio_transcript.delta", "item_id": item, "content_index": 0,
                       "delta": text})


@settings(max_examples=150, deadline=None)
@given(cuts=st.lists(st.integers(0, len(SECRET) + 10), max_size=6), before=st.text(max_size=8),
       after=st.text(max_size=8))
def test_a_secret_split_across_deltas_anywhere_is_never_shown_whole(cuts: list[int], before: str, after: str) -> None:
    text = f"{before}{SECRET}{after}"
    points = sorted({0, *(min(cut, len(text)) for cut in cuts), len(text)})
    echoes = Echoes(Redactor([SECRET]))
    said = "".join(json.loads(echoes.frame(delta(text[a:b])))["delta"] for a, b in zip(points, points[1:]))
    assert not shown_whole(said) and REDACTED in said


@settings(max_examples=100, deadline=None)
@given(words=st.lists(st.text(alphabet="abcdefghijklmnopqrstuvwxyz -.", max_size=12), max_size=8))
def test_streamed_text_that_is_no_secret_passes_as_it_came(words: list[str]) -> None:
    echoes = Echoes(Redactor([SECRET]))
    frames = [delta(word, item=f"item_{i % 3}") for i, word in enumerate(words)]
    assert [echoes.frame(frame) for frame in frames] == frames


def test_gemini_text_parts_and_transcriptions_are_followed_across_messages() -> None:
    echoes = Echoes(Redactor([SECRET]))
    pieces = [SECRET[:12], SECRET[12:]]
    said = []
    for piece in pieces:
        message = {"serverContent": {"outputTranscription": {"text": piece}}}
        said.append(json.loads(echoes.frame(json.dumps(message).encode()))["serverContent"]["outputTranscription"]["text"])
    assert not shown_whole("".join(said))


def test_audio_deltas_are_only_redacted_not_parsed() -> None:
    echoes = Echoes(Redactor([SECRET]))
    audio = '{"type":"response.output_audio.delta","delta":"' + "QUJD" * 100 + '"}'
    assert echoes.frame(audio) is audio


def test_a_frame_nested_past_the_parser_goes_on_redacted_as_written() -> None:
    echoes = Echoes(Redactor([SECRET]))
    nested = '{"type":"response.output_text.delta","delta":"' + SECRET + '","a":' + "[" * 100_000 + "]" * 100_000 + "}"
    sent = echoes.frame(nested)
    assert SECRET not in sent and sent.startswith('{"type":"response.output_text.delta","delta":"[redacted]"')
