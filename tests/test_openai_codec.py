"""The OpenAI family's codec (`relay.dialects.openai_codec`): every frame of the real recordings
reads into the same event from its text and from its decoded object; other names of an event read
as the GA event; what is outside the set is kept; commands are written as the variant's server
names them; audio is told without decoding."""

from __future__ import annotations

import json
from dataclasses import replace

import msgspec
import pytest

from relay.dialects import OPENAI, OPENAI_BETA
from relay.dialects import openai_codec as wire
from tests.support.paths import shared_dir


def recorded_lines() -> list[str]:
    return [line for path in sorted((shared_dir() / "recordings").glob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_every_recorded_frame_reads_the_same_from_its_text_and_its_object() -> None:
    lines = recorded_lines()
    known = 0
    for line in lines:
        from_text, from_object = wire.decode(line), wire.event_of(json.loads(line))
        assert type(from_text) is type(from_object), line
        if isinstance(from_text, wire.Unknown):
            assert from_text.raw == line
            continue
        known += 1
        assert msgspec.structs.asdict(from_text) == msgspec.structs.asdict(from_object)
        assert wire.wire_type(from_text) == json.loads(line)["type"]
    assert known > len(lines) * 0.8   # the recordings are mostly events of the set


@pytest.mark.parametrize("name, event", [
    ("response.audio_transcript.delta", wire.AudioTranscriptDelta),
    ("response.text.done", wire.TextDone),
    ("conversation.item.created", wire.ItemAdded),
    ("output_audio_buffer.audio_started", wire.OutputAudioStarted),
])
def test_other_names_read_as_the_ga_event(name: str, event: type) -> None:
    decoded = wire.decode(json.dumps({"type": name, "event_id": "e1"}))
    assert isinstance(decoded, event) and wire.wire_type(decoded) == name and decoded.event_id == "e1"


def test_a_variant_s_own_names_are_data() -> None:
    variant = replace(OPENAI, name="toy", renamed_events={"toy.said": "response.output_text.done"})
    decoded = wire.event_of({"type": "toy.said", "text": "hi"}, variant)
    assert isinstance(decoded, wire.TextDone) and decoded.text == "hi"
    assert isinstance(wire.event_of({"type": "toy.said"}), wire.Unknown)   # not OpenAI's
    assert wire.encode(wire.TextDone(text="hi"), variant) == '{"type":"toy.said","text":"hi"}'


@pytest.mark.parametrize("frame", ['{"type":"no.such.event"}', "[1]", "not json", b'{"type": 3}', '{"a":1}'])
def test_what_is_outside_the_set_is_kept(frame: str | bytes) -> None:
    assert wire.decode(frame) == wire.Unknown(frame)


def test_commands_are_written_as_the_server_names_them() -> None:
    output = {"type": wire.FUNCTION_CALL_OUTPUT, "call_id": "call_1", "output": "{}"}
    command = wire.ItemCreate(event_id="relay_e1", item=output)
    assert json.loads(wire.encode(command)) == {"type": "conversation.item.create", "event_id": "relay_e1",
                                                "item": output}
    assert wire.decode(wire.encode(command)) == command
    delta = wire.AudioTranscriptDelta(response_id="r", delta="he")
    assert json.loads(wire.encode(delta, OPENAI_BETA))["type"] == "response.audio_transcript.delta"
    assert json.loads(wire.encode(delta))["type"] == "response.output_audio_transcript.delta"


def test_audio_is_told_without_decoding() -> None:
    upstream, client = wire.audio_peek(), wire.audio_peek(upstream=False)
    assert upstream('{"type":"response.output_audio.delta","delta":"AAAA"}')
    assert upstream('{"type":"response.audio.delta","delta":"AAAA"}')
    assert not upstream('{"type":"response.output_text.delta","delta":"hi"}')
    assert client('{"type":"input_audio_buffer.append","audio":"AAAA"}')
    assert not client(b"\x00\x01")


def test_the_set_is_closed_and_names_each_event_once() -> None:
    assert len(wire.EVENTS) == len(set(wire.EVENTS.values()))
    assert wire.COMMANDS <= set(wire.EVENTS.values())
    assert all(issubclass(event, wire.Event) for event in wire.EVENTS.values())


def test_a_frame_object_is_what_encode_writes_and_event_of_reads() -> None:
    delta = wire.AudioTranscriptDelta(event_id="e1", response_id="r", item_id="i", output_index=0, content_index=0,
                                      delta="he", obfuscation="x9")
    for family in (OPENAI, OPENAI_BETA):
        frame = wire.frame_object(delta, family)
        assert frame == json.loads(wire.encode(delta, family))
        assert list(frame)[:2] == ["type", "event_id"]
        read = wire.event_of(frame, family)
        assert wire.kind_of(read) is wire.AudioTranscriptDelta   # the beta name reads as the GA event
        assert msgspec.structs.asdict(read) == msgspec.structs.asdict(delta)
    item = {"id": "item_1", "type": wire.MESSAGE, "content": []}
    added = wire.frame_object(wire.ItemAdded(event_id="e2", item=item))
    assert added == {"type": "conversation.item.added", "event_id": "e2", "previous_item_id": None, "item": item}
    assert added["item"] is not item   # the frame shares nothing with the event
    assert wire.event_name(wire.ItemDone) == "conversation.item.done"
