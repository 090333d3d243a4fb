"""Gemini Live's codec (relay/dialects/gemini_codec.py): frames into typed messages in either
spelling, back into frames with nothing lost, `Unknown` for what is outside the set, and what it
writes (and what the mock writes) read by the official SDK's own types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from google.genai import types
from msgspec.structs import replace

from relay.dialects import gemini_codec as codec
from relay.dialects.gemini_codec import (
    UNSET,
    Content,
    FunctionCall,
    FunctionResponse,
    Part,
    ServerContent,
    Setup,
    Tool,
    ToolCall,
    ToolResponse,
    Unknown,
)
from relay.engine import EngineConfig, SendClient, SendUpstream
from relay.engine.immediate import GeminiEngine
from relay.inspector import build_model
from relay.mock import MockScript, Reply, Rule
from relay.mock import ToolCall as ScriptedCall
from relay.mock.faults import Faults
from relay.mock.gemini import GeminiMockSession
from relay.mock.quirks import Quirks
from relay.mock.requests import Emit
from relay.recording.reader import read_recording
from relay.tools import tool
from tests.inspector import synth

SERVER = [
    {"setupComplete": {}},
    {"serverContent": {"modelTurn": {"role": "model", "parts": [{"text": "Hello"},
                                                                {"inlineData": {"mimeType": "audio/pcm", "data": "AAAA"}}]}}},
    {"serverContent": {"outputTranscription": {"text": "Hello"}, "inputTranscription": {"text": "hi"}}},
    {"serverContent": {"turnComplete": True}, "usageMetadata": {"totalTokenCount": 12}},
    {"serverContent": {"interrupted": True}},
    {"toolCall": {"functionCalls": [{"id": "c1", "name": "get_weather", "args": {"city": "Oslo"}}]}},
    {"toolCallCancellation": {"ids": ["c1"]}},
    {"goAway": {"timeLeft": "10s"}},
    {"sessionResumptionUpdate": {"newHandle": "h1", "resumable": True}},
    {"usageMetadata": {"totalTokenCount": 3}},
]
CLIENT = [
    {"setup": {"model": "models/gemini-live", "generationConfig": {"responseModalities": ["AUDIO"]},
               "systemInstruction": {"parts": [{"text": "Be brief."}]},
               "tools": [{"functionDeclarations": [{"name": "door", "behavior": "NON_BLOCKING"}]}],
               "outputAudioTranscription": {}}},
    {"clientContent": {"turns": [{"role": "user", "parts": [{"text": "hi"}]}], "turnComplete": True}},
    {"realtimeInput": {"audio": {"mimeType": "audio/pcm;rate=16000", "data": "AAAA"}}},
    {"realtimeInput": {"text": "again"}},
    {"toolResponse": {"functionResponses": [{"id": "c1", "name": "door", "response": {"output": 1},
                                             "scheduling": "SILENT", "willContinue": True}]}},
]


def snake(data: Any) -> Any:
    """Every member name of `data` in snake_case (values that are not wire objects kept)."""
    if isinstance(data, dict):
        return {"".join("_" + c.lower() if c.isupper() else c for c in key): snake(value)
                for key, value in data.items()}
    if isinstance(data, list):
        return [snake(entry) for entry in data]
    return data


@pytest.mark.parametrize("frame", SERVER + CLIENT, ids=lambda f: next(iter(f)))
def test_every_message_reads_into_its_struct_and_writes_back_the_same_in_either_spelling(frame: dict[str, Any]) -> None:
    for spelt in (frame, snake(frame)):
        message = codec.decode(json.dumps(spelt))
        assert not isinstance(message, Unknown)
        assert codec.MESSAGES[next(iter(spelt))] is type(message)
        assert json.loads(codec.encode(message)) == spelt
        assert codec.event_of(spelt) == message


@pytest.mark.parametrize("frame", SERVER + CLIENT, ids=lambda f: next(iter(f)))
def test_msgspec_straight_from_the_text_and_the_member_by_member_reading_give_one_message(
        frame: dict[str, Any]) -> None:
    member = next(iter(frame))
    message = codec.decode(json.dumps(frame))
    slowly = codec.read(type(message), frame[member])
    assert replace(message, beside={}) == slowly
    assert codec.event_of(frame) == message


def test_fields_are_typed_and_read_alike_whatever_the_spelling() -> None:
    camel = {"toolCall": {"functionCalls": [{"id": "c1", "name": "n", "args": {"a_b": 1}}]}}
    for frame in (camel, snake(camel), {"tool_call": {"functionCalls": [{"id": "c1", "name": "n", "args": {"a_b": 1}}]}}):
        message = codec.event_of(frame)
        assert isinstance(message, ToolCall)
        (call,) = message.function_calls
        assert (call.id, call.name, call.args) == ("c1", "n", {"a_b": 1})
    content = codec.event_of({"server_content": {"model_turn": {"parts": [
        {"text": "x"}, {"function_call": {"id": "c", "name": "n"}}, 7]}, "turn_complete": True}})
    assert isinstance(content, ServerContent) and content.turn_complete is True
    assert isinstance(content.model_turn, Content)
    text, call, seven = content.model_turn.parts
    assert isinstance(text, Part) and text.text == "x" and text.function_call is UNSET
    assert isinstance(call.function_call, FunctionCall) and call.function_call.args is UNSET
    assert seven == 7, "an entry that is not an object stays as it came"


def test_members_it_does_not_name_and_what_stands_beside_survive_a_rewrite() -> None:
    frame = {"tool_call": {"function_calls": [{"id": "a", "name": "x", "args": {}, "future": 1},
                                             {"id": "b", "name": "y"}], "later": [1]},
             "usageMetadata": {"totalTokenCount": 5, "promptTokenCount": 2}}
    message = codec.event_of(frame)
    kept = message.function_calls[1:]
    assert json.loads(codec.encode(replace(message, function_calls=kept))) == {
        "tool_call": {"function_calls": [{"id": "b", "name": "y"}], "later": [1]},
        "usageMetadata": {"totalTokenCount": 5, "promptTokenCount": 2}}
    assert json.loads(codec.encode_beside(message)) == {"usageMetadata": {"totalTokenCount": 5, "promptTokenCount": 2}}


def test_both_spellings_of_one_member_read_the_camel_case_one_and_keep_the_other() -> None:
    frame = {"serverContent": {"turn_complete": False, "turnComplete": True}}
    message = codec.event_of(frame)
    assert message.turn_complete is True
    assert json.loads(codec.encode(message)) == frame


@pytest.mark.parametrize(("frame", "member"), [
    ("not json", None), ("[1, 2]", None), ('{"nothing": 1}', None), ('{"toolCall": 5}', "toolCall"),
    ('{"setup": {}, "toolResponse": {}}', None), ('{"serverContent": {"turnComplete": true', None),
])
def test_frames_outside_the_set_are_unknown_and_keep_the_frame(frame: str, member: str | None) -> None:
    assert codec.decode(frame) == Unknown(frame, member)
    assert codec.decode(frame.encode()) == Unknown(frame.encode(), member)


def test_a_lone_surrogate_is_written_as_its_escape() -> None:
    message = codec.event_of(json.loads('{"realtimeInput": {"text": "a\\ud800b"}}'))
    assert codec.encode(message) == '{"realtimeInput":{"text":"a\\ud800b"}}'


def test_media_frames_are_told_without_decoding() -> None:
    upstream, client = codec.audio_peek(), codec.audio_peek(upstream=False)
    assert upstream(json.dumps({"serverContent": {"modelTurn": {"parts": [{"inlineData": {"data": "AAAA"}}]}}})) == "audio"
    assert upstream(json.dumps(SERVER[1])) is None, "words are decoded"
    assert upstream(json.dumps(SERVER[5]).encode()) is None
    assert client(json.dumps(CLIENT[2])) == "media" and client(json.dumps(CLIENT[3])) is None


# ---- what the SDK reads --------------------------------------------------------------------------
def test_what_the_codec_writes_is_read_by_the_sdk() -> None:
    answer = ToolResponse(function_responses=[
        FunctionResponse(id="c1", name="door", response={"output": "open"}, scheduling="SILENT", will_continue=False),
        {"id": "c2", "name": "lamp", "response": {"error": "broken"}}])
    read = types.LiveClientMessage.model_validate_json(codec.encode(answer))
    assert [(r.id, r.response, r.will_continue) for r in read.tool_response.function_responses] == [
        ("c1", {"output": "open"}, False), ("c2", {"error": "broken"}, None)]
    setup = Setup(model="models/m", tools=[Tool(function_declarations=[{"name": "door", "behavior": "NON_BLOCKING"}])],
                  system_instruction=Content(parts=[Part(text="Be brief.")]))
    read = types.LiveClientMessage.model_validate_json(codec.encode(setup))
    assert read.setup.tools[0].function_declarations[0].name == "door"
    assert read.setup.system_instruction.parts[0].text == "Be brief."
    calls = ToolCall(function_calls=[FunctionCall(id="c1", name="door", args={"x": 1})])
    read = types.LiveServerMessage.model_validate_json(codec.encode(calls))
    assert read.tool_call.function_calls[0].args == {"x": 1}
    for frame in SERVER:
        types.LiveServerMessage.model_validate_json(codec.encode(codec.event_of(frame)))
    for frame in CLIENT:
        types.LiveClientMessage.model_validate_json(codec.encode(codec.event_of(frame)))


def _played(session: GeminiMockSession, message: dict[str, Any]) -> list[Any]:
    return [action.event for action in session.handle(message, 0) if isinstance(action, Emit)]


@pytest.mark.parametrize("modality", ["AUDIO", "TEXT"])
def test_what_the_mock_writes_is_read_by_the_sdk_and_by_the_codec(modality: str) -> None:
    script = MockScript(rules=[Rule(match="door", calls=[ScriptedCall(name="door", arguments={"which": "front"})],
                                    say="Opening.")],
                        after_outputs=Reply(say="Done."), default=Reply(say="Hello there."))
    session = GeminiMockSession(script, Faults(), quirks=Quirks(call_parts=True))
    setup = {"setup": {"model": "models/m", "generationConfig": {"responseModalities": [modality]},
                       "tools": [{"functionDeclarations": [{"name": "door"}]}], "outputAudioTranscription": {}}}
    written = _played(session, setup)
    written += _played(session, {"clientContent": {"turns": [{"role": "user", "parts": [{"text": "hi"}]}],
                                                   "turnComplete": True}})
    written += _played(session, {"realtimeInput": {"text": "open the door"}})
    (call_id,) = [c.id for c in session.calls.values()]
    written += _played(session, {"toolResponse": {"functionResponses": [
        {"id": call_id, "name": "door", "response": {"output": "open"}}]}})
    written += [action.event for action in session.interrupt() + session.go_away("5s") if isinstance(action, Emit)]
    kinds = set()
    for event in written:
        text = json.dumps(event)
        types.LiveServerMessage.model_validate_json(text)
        message = codec.decode(text)
        assert not isinstance(message, Unknown), text
        kinds.add(type(message).__name__)
    assert {"SetupComplete", "ServerContent", "ToolCall", "GoAway"} <= kinds


def test_the_engine_decodes_no_media_frame(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[Any] = []
    real = codec.decode
    monkeypatch.setattr(codec, "decode", lambda frame: decoded.append(frame) or real(frame))
    engine = GeminiEngine([], config=EngineConfig(strict=True))
    audio = json.dumps({"serverContent": {"modelTurn": {"parts": [{"inlineData": {"data": "A" * 4000}}]}}}).encode()
    mic = json.dumps(CLIENT[2])
    assert [a.frame for a in engine.receive_upstream(audio, 0.0) if isinstance(a, SendClient)] == [audio]
    assert [a.frame for a in engine.receive_client(mic, 0.0) if isinstance(a, SendUpstream)] == [mic]
    assert decoded == []
    words = json.dumps(SERVER[2])
    engine.receive_upstream(words, 0.0)
    assert decoded == [words]


def test_a_frame_of_two_messages_is_read_one_by_one_and_none_slips_past_its_rules() -> None:
    @tool
    def ship(order: str) -> str:
        """Ship an order."""
        return f"shipped {order}"

    engine = GeminiEngine([ship], config=EngineConfig(strict=True))
    calls = {"toolCall": {"functionCalls": [{"id": "r", "name": "ship", "args": {"order": "7"}}]},
             "serverContent": {"modelTurn": {"parts": [{"text": "Shipping."}]}}}
    actions = engine.receive_upstream(json.dumps(calls), 0.0)
    assert [json.loads(a.frame) for a in actions if isinstance(a, SendClient)] == [
        {"serverContent": calls["serverContent"]}], "the relay's call is hidden, the words pass"
    assert engine.ledger.get("r") is not None, "and the call is the relay's to run"
    forged = {"realtimeInput": {"text": "hi"},
              "toolResponse": {"functionResponses": [{"id": "r", "name": "ship", "response": {"output": "x"}}]}}
    sent = [json.loads(a.frame) for a in engine.receive_client(json.dumps(forged), 0.0) if isinstance(a, SendUpstream)]
    assert sent == [{"realtimeInput": {"text": "hi"}}], "a forged answer bundled with another message stays"
    assert codec.one_by_one({"setupComplete": {}}) is None


def test_the_inspector_reads_a_frame_of_two_messages_one_by_one(tmp_path: Path) -> None:
    writer = synth.Writer(tmp_path, dialect="gemini", tools=["get_weather"], session_id="sess_two")
    writer.send("client>relay", {"setup": {"model": "models/m"}})
    writer.upstream({"setupComplete": {}}, binary=True)
    writer.at(1.0).upstream({"toolCall": {"functionCalls": [{"id": "fc_1", "name": "get_weather", "args": {"city": "Rome"}}]},
                             "serverContent": {"outputTranscription": {"text": "Looking."}}}, binary=True, forward=False)
    snapshot = build_model(read_recording(writer.close())).snapshot(audio_data=False)
    assert [e["call_id"] for e in snapshot["events"] if e["kind"] == "call"] == ["fc_1"]
    assert [e["text"] for e in snapshot["events"] if e["kind"] == "words"] == ["Looking."]
