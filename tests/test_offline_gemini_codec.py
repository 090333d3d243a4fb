"""The offline layer reads Gemini Live through its codec (relay/dialects/gemini_codec.py): both
spellings of every member, and a frame of two messages (which the service refuses) read one
message at a time, in the order the readers always took them: calls, withdrawals, content."""

from __future__ import annotations

import json
from typing import Any

from relay.dialects import gemini_codec as gemini
from relay.offline.events import BARGE_IN, CALL, CANCELLED, OUTPUT, RESPONSE, RESPONSE_DONE, SPOKEN, USER
from relay.offline.replaying import GeminiSends
from relay.offline.timeline import Timeline
from relay.recording.format import CLIENT_TO_RELAY, UPSTREAM_TO_RELAY, Frame


def frames(*sent: tuple[str, dict[str, Any]]) -> list[Frame]:
    return [Frame(t=float(n), direction=direction, event=event, raw=None, binary=None, line_no=n + 1)
            for n, (direction, event) in enumerate(sent)]


def kinds(timeline: Timeline) -> list[tuple[str, Any]]:
    return [(event.kind, event.call_id or event.text) for event in timeline if event.kind not in (RESPONSE, RESPONSE_DONE)]


def test_the_timeline_reads_snake_case_frames_as_camel_case_ones() -> None:
    camel = frames(
        (CLIENT_TO_RELAY, {"clientContent": {"turns": [{"role": "user", "parts": [{"text": "hello"}]}]}}),
        (UPSTREAM_TO_RELAY, {"serverContent": {"inputTranscription": {"text": "and you"},
                                               "modelTurn": {"parts": [{"text": "Hi", "thought": False},
                                                                       {"text": "(thinking)", "thought": True}]},
                                               "outputTranscription": {"text": " there"}}}),
        (UPSTREAM_TO_RELAY, {"toolCall": {"functionCalls": [{"id": "c1", "name": "look", "args": {"q": 1}},
                                                            {"id": "c2", "name": "look", "args": {}}]}}),
        (UPSTREAM_TO_RELAY, {"toolCallCancellation": {"ids": ["c2", "unknown"]}}),
        (CLIENT_TO_RELAY, {"toolResponse": {"functionResponses": [
            {"id": "c1", "name": "look", "response": {"output": "half"}, "willContinue": True, "scheduling": "SILENT"}]}}),
        (CLIENT_TO_RELAY, {"toolResponse": {"functionResponses": [{"id": "c1", "name": "look", "response": {"output": "all"}}]}}),
        (UPSTREAM_TO_RELAY, {"serverContent": {"interrupted": True}}),
        (CLIENT_TO_RELAY, {"realtimeInput": {"text": "again"}}),
        (UPSTREAM_TO_RELAY, {"serverContent": {"modelTurn": {"parts": [{"text": "Done."}]},
                                               "generationComplete": True, "turnComplete": True}}))
    snake = frames(*((f.direction, json.loads(json.dumps(f.event).replace("clientContent", "client_content")
                                               .replace("serverContent", "server_content")
                                               .replace("inputTranscription", "input_transcription")
                                               .replace("outputTranscription", "output_transcription")
                                               .replace("modelTurn", "model_turn")
                                               .replace("toolCallCancellation", "tool_call_cancellation")
                                               .replace("toolCall", "tool_call")
                                               .replace("functionCalls", "function_calls")
                                               .replace("toolResponse", "tool_response")
                                               .replace("functionResponses", "function_responses")
                                               .replace("willContinue", "will_continue")
                                               .replace("realtimeInput", "realtime_input")
                                               .replace("generationComplete", "generation_complete")
                                               .replace("turnComplete", "turn_complete")))
                     for f in camel))
    assert "Calls" not in json.dumps([f.event for f in snake]) and "Content" not in json.dumps([f.event for f in snake])
    read = Timeline.from_frames(camel, dialect="gemini", source="test")
    assert kinds(read) == [(USER, "hello"), (USER, "and you"), (SPOKEN, "Hi there"), (CALL, "c1"), (CALL, "c2"),
                           (CANCELLED, "toolCallCancellation"), (OUTPUT, "c1"), (OUTPUT, "c1"), (BARGE_IN, None),
                           (USER, "again"), (SPOKEN, "Done.")]
    cancelled = next(event for event in read if event.kind == CANCELLED)
    assert cancelled.text == "toolCallCancellation" and cancelled.call_ids == ("c2",)
    assert [event.status for event in read if event.kind == OUTPUT] == ["interim", "completed"]
    assert read.silent_calls == frozenset({"c1"})
    assert [vars(event) for event in Timeline.from_frames(snake, dialect="gemini", source="test")] == \
        [vars(event) for event in read]


def test_the_timeline_reads_a_frame_of_two_messages_calls_first() -> None:
    both = {"serverContent": {"modelTurn": {"parts": [{"text": "Checking."}]}, "turnComplete": True},
            "toolCall": {"functionCalls": [{"id": "c1", "name": "look", "args": {}}]}}
    apart = frames((UPSTREAM_TO_RELAY, {"toolCall": both["toolCall"]}),
                   (UPSTREAM_TO_RELAY, {"serverContent": both["serverContent"]}))
    together = Timeline.from_frames(frames((UPSTREAM_TO_RELAY, both)), dialect="gemini", source="test")
    assert kinds(together) == [(CALL, "c1"), (SPOKEN, "Checking.")]
    assert kinds(together) == kinds(Timeline.from_frames(apart, dialect="gemini", source="test"))


def test_a_frame_that_answers_is_read_for_its_answers_only() -> None:
    frame = {"toolResponse": {"functionResponses": [{"id": "c1", "response": {"output": "ok"}}, "not an object"]},
             "realtimeInput": {"text": "ignored"}}
    read = Timeline.from_frames(frames((CLIENT_TO_RELAY, frame)), dialect="gemini", source="test")
    assert kinds(read) == [(OUTPUT, "c1")]


def test_replay_keys_and_shows_snake_case_frames() -> None:
    sends = GeminiSends()
    answer = {"tool_response": {"function_responses": [{"id": "a", "response": {"output": "x"}, "will_continue": True}]}}
    [(key, part)] = sends(answer)
    assert key == ("answer", "a", "0") and part == answer["tool_response"]["function_responses"][0]
    assert sends.answer(key, part) == ("a", "x", "interim")
    assert sends({"setup": {"model": "m", "generation_config": {"response_modalities": ["AUDIO"]}}}) == \
        [(("setup",), {"model": "m", "generation_config": {"response_modalities": ["AUDIO"]}})]

    def shown(event: dict[str, Any]) -> list[str]:
        text = json.dumps(event)
        return sends.timeline(Frame(t=0.0, direction=UPSTREAM_TO_RELAY, event=None, raw=None,
                                    binary=text.encode(), line_no=1))

    assert shown({"tool_call_cancellation": {"ids": ["a", "b"]}}) == ["recv  cancellation of a, b"]
    assert shown({"tool_call_cancellation": {"ids": ["a"]}, "tool_call": {"function_calls": [
        {"id": "b", "name": "look", "args": {"q": 1}}, 7]}}) == \
        ["recv  call look({\"q\": 1}) call_id=b", "recv  cancellation of a"]
    assert shown({"serverContent": {"turnComplete": True}}) == []


def test_the_codec_lists_a_frame_s_messages() -> None:
    assert [type(m) for m in gemini.messages_of({"toolCall": {}, "server_content": {}})] == \
        [gemini.ToolCall, gemini.ServerContent]
    assert [type(m) for m in gemini.messages_of({"goAway": {}, "usageMetadata": {}})] == [gemini.GoAway]
    assert gemini.messages_of({"toolCall": 3}) == [] and gemini.messages_of(None) == []
    calls = gemini.messages_of({"toolCall": {"functionCalls": [{"id": "a"}, "b", None]}})[0]
    assert [call.id for call in gemini.entries(calls.function_calls, gemini.FunctionCall)] == ["a"]
    assert gemini.entries(gemini.UNSET, gemini.FunctionCall) == []


def test_the_codec_finds_a_server_frame_s_streamed_text_in_place() -> None:
    frame = {"server_content": {"output_transcription": {"text": "a"}, "inputTranscription": {"text": "b"},
                                "model_turn": {"parts": [{"text": "c"}, {"inlineData": {}}, "d"]},
                                "turn_complete": True}}
    holders, ended = gemini.streamed_text(frame)
    assert [(stream, holder["text"]) for stream, holder in holders] == \
        [("output_transcription", "a"), ("input_transcription", "b"), ("text", "c")]
    assert holders[0][1] is frame["server_content"]["output_transcription"], "the frame's own object"
    assert not ended, "as the redaction always read it: only a camelCase turnComplete ends the streams"
    assert gemini.streamed_text({"serverContent": {"interrupted": True}}) == ([], True)
    assert gemini.streamed_text({"toolCall": {}}) == ([], False) and gemini.streamed_text([1]) == ([], False)
