"""The one redactor (relay.recording.redact): each of its rules, and that every place a secret
could leave the relay uses it."""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from relay.errors import ConfigError
from relay.errors import REDACTED
from relay.recording.format import UPSTREAM_TO_RELAY
from relay.recording.reader import read_recording
from relay.recording.redact import Redactor, anchor_of
from relay.recording.writer import RecordingWriter

KEY = "sk-proj-Zq9XvB2mT7wLkP4sR8nY"


def test_a_secret_is_replaced_in_text_and_in_bytes() -> None:
    redactor = Redactor([KEY])
    assert redactor.text(f"key {KEY}!") == f"key {REDACTED}!"
    assert redactor(f"key {KEY}!") == f"key {REDACTED}!"             # logs call it
    assert redactor.data(f"key {KEY}!".encode()) == f"key {REDACTED}!".encode()
    assert redactor.frame(f"key {KEY}!") == f"key {REDACTED}!"
    assert redactor.frame(f"key {KEY}!".encode()) == f"key {REDACTED}!".encode()


def test_a_secret_that_holds_another_is_replaced_whole() -> None:
    redactor = Redactor(["abcdef12", "abcdef12-longer", "abcdef12"])
    assert redactor.secrets == ["abcdef12", "abcdef12-longer"]
    assert redactor("x abcdef12-longer y abcdef12") == f"x {REDACTED} y {REDACTED}"


def test_a_secret_with_a_slash_is_also_found_as_json_escapes_it() -> None:
    redactor = Redactor(["tok/en+9a8b7c"])
    assert redactor('{"echo":"tok\\/en+9a8b7c","plain":"tok/en+9a8b7c"}') == \
        f'{{"echo":"{REDACTED}","plain":"{REDACTED}"}}'
    assert redactor.data(b'{"echo":"tok\\/en+9a8b7c"}') == f'{{"echo":"{REDACTED}"}}'.encode()


def test_each_spelling_is_searched_behind_a_character_audio_frames_do_not_hold() -> None:
    # base64 and JSON's punctuation make up audio frames: a key's "-" is the anchor; a secret made
    # only of such characters has none and is searched for in full
    assert anchor_of("sk-proj-Zq9X") == "-" and anchor_of("tok/en.9") == "."
    assert anchor_of("0123abcdef0123abcdef") == ""
    redactor = Redactor([KEY, "0123abcdef0123abcdef"])
    frame = f'{{"type":"response.output_audio.delta","delta":"AAAA{KEY}BBBB0123abcdef0123abcdefCC"}}'
    assert redactor.frame(frame) == f'{{"type":"response.output_audio.delta","delta":"AAAA{REDACTED}BBBB{REDACTED}CC"}}'
    near_miss = '{"delta":"sk-proj-", "x":"Zq9XvB2mT7wLkP4sR8nY"}'   # the anchor, not the key
    assert redactor.frame(near_miss) is near_miss


@settings(max_examples=200, deadline=None)
@given(secret=st.text(alphabet=string.ascii_letters + string.digits + "-_.~+/=", min_size=8, max_size=40),
       before=st.text(alphabet=string.ascii_letters + string.digits + '+/={}:,"_ ', max_size=60),
       after=st.text(alphabet=string.ascii_letters + string.digits + '+/={}:,"_ ', max_size=60))
def test_a_secret_is_never_left_in_a_frame_whatever_its_characters(secret: str, before: str, after: str) -> None:
    assume(secret not in REDACTED)   # the placeholder itself holds it: nothing to look for
    redactor = Redactor([secret])
    for frame in (before + secret + after, before + secret.replace("/", "\\/") + after):
        assert secret not in redactor.frame(frame)
        assert secret.encode() not in redactor.frame(frame.encode())   # type: ignore[operator]
        assert secret not in redactor.text(frame)


@pytest.mark.parametrize("secret", ['ab"cd', "ab\\cd", "ab\ncd", "ab\x00cd"])
def test_a_secret_json_would_escape_is_refused_when_given_or_added(secret: str) -> None:
    with pytest.raises(ConfigError, match="may not hold quotes"):
        Redactor([secret])
    redactor = Redactor([KEY])
    with pytest.raises(ValueError, match="may not hold quotes"):
        redactor.add(secret)
    assert redactor.secrets == [KEY]


def test_nothing_and_the_empty_string_are_not_secrets() -> None:
    redactor = Redactor([None, ""])
    redactor.add(None)
    assert redactor.secrets == [] and redactor("a b") == "a b"


def test_a_secret_added_later_is_redacted_and_a_discarded_one_no_longer() -> None:
    redactor = Redactor([KEY])
    redactor.add("entra/token-2")
    assert redactor("entra\\/token-2 entra/token-2") == f"{REDACTED} {REDACTED}"
    redactor.discard("entra/token-2")
    redactor.discard("never known")
    assert redactor("entra\\/token-2") == "entra\\/token-2"
    assert redactor(KEY) == REDACTED


def test_the_recording_of_an_edge_shares_its_redactor_so_a_token_refreshed_mid_session_is_kept_out(
        tmp_path: Path) -> None:
    redactor = Redactor([KEY])
    with RecordingWriter(tmp_path, session_id="s", dialect="openai", upstream="wss://x", tools=[],
                         secrets=redactor) as writer:
        redactor.add("entra-token-2")
        writer.record(UPSTREAM_TO_RELAY, json.dumps({"echo": f"{KEY} entra-token-2"}))
    [frame] = read_recording(writer.path).frames
    assert frame.event == {"echo": f"{REDACTED} {REDACTED}"}


def test_every_place_a_secret_could_leave_the_relay_uses_the_one_redactor() -> None:
    import relay.edges.config
    import relay.edges.upstream
    import relay.observe.logs
    import relay.recording.writer

    for module in (relay.edges.config, relay.edges.upstream, relay.observe.logs, relay.recording.writer):
        assert module.Redactor is Redactor, module.__name__
