"""Exports of a session's conversation: OpenAI chat, Anthropic, Gemini and Vapi shapes.

The GA sessions with parallel calls, error outputs and unanswered calls (no public recording has
them) are played against the mock upstream at test time and written as relay recordings, so what
is exported went through the same reader as a real recording. Real recordings from
../shared/recordings cover an unanswered call and a client output echo."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest
from anthropic.types import MessageParam
from google.genai import types as genai_types
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from relay.cli import main
from relay.engine import OpenAIEngine
from relay.offline.export import (
    AUDIO_WITHOUT_TRANSCRIPT,
    FORMATS,
    Export,
    ExportError,
    export_conversation,
    export_recording,
)
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.recording.format import RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY
from relay.recording.writer import RecordingWriter
from relay.recording.reader import read_recording
from relay.tools import ToolResult, tool
from tests.support.clients import realtime_client
from tests.support.engine import EngineDriver
from tests.support.frames import user_text
from tests.support.local_mock import ENGINE_SCRIPT, LocalMock, model_call
from tests.support.paths import shared_dir
from tests.support.relays import relay_for
from tests.support.tools import get_weather_data

CHAT_MESSAGE = TypeAdapter(ChatCompletionMessageParam)
ANTHROPIC_MESSAGE = TypeAdapter(MessageParam)
UNANSWERED = {"error": "no output: the session ended before the call was answered"}


# ---- recorded sessions, built at test time ----------------------------------------------------


class SessionRecorder:
    """Plays a GA session against the mock upstream and records it as the relay would: what the
    server sent as `upstream>relay`, what went to it as `relay>upstream`."""

    def __init__(self, directory: Path, script: MockScript = ENGINE_SCRIPT) -> None:
        self.mock = LocalMock(script=script)
        self.mock.session.config["instructions"] = ""   # none until a test sets some
        self.writer = RecordingWriter(directory, session_id="export-test", dialect="openai-ga",
                                      upstream="api.openai.com", tools=[], wall_clock=lambda: 0.0)
        self.t = 0.0

    def upstream(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            self.t += 0.01
            self.writer.record(UPSTREAM_TO_RELAY, json.dumps(event), t=self.t)

    def send(self, event: dict[str, Any]) -> None:
        frame = json.dumps(event)
        self.t += 0.01
        self.writer.record(RELAY_TO_UPSTREAM, frame, t=self.t)
        self.upstream(self.mock.receive(frame))

    def output(self, call_id: str, output: Any, **placement: Any) -> None:
        text = output if isinstance(output, str) else json.dumps(output)
        self.send({"type": "conversation.item.create", **placement,
                   "item": {"type": "function_call_output", "call_id": call_id, "output": text}})

    def close(self) -> Path:
        self.writer.close()
        return self.writer.path


def weather_session(directory: Path) -> Path:
    """Instructions, one user turn, two parallel calls answered by the client (one an error),
    then the follow-up."""
    answer = Reply(say="Paris is 21 degrees; I found no Atlantis.")
    session = SessionRecorder(directory, ENGINE_SCRIPT.model_copy(update={"after_outputs": answer}))
    session.upstream(session.mock.connect())
    session.send({"type": "session.update",
                  "session": {"type": "realtime", "instructions": "Be brief."}})
    session.upstream(session.mock.user_turn("Weather in Paris and Atlantis?"))
    session.upstream(session.mock.respond([
        "Let me check both.",
        model_call("get_weather", '{"city": "Paris"}', "call_paris"),
        model_call("get_weather", '{"city": "Atlantis"}', "call_atlantis"),
    ]))
    session.output("call_paris", {"city": "Paris", "temp_c": 21})
    session.output("call_atlantis", {"error": "no such city"})
    session.send({"type": "response.create"})
    return session.close()


def unanswered_session(directory: Path) -> Path:
    """The model calls a tool and the session ends before anyone answers."""
    session = SessionRecorder(directory)
    session.upstream(session.mock.connect())
    session.upstream(session.mock.user_turn("Put me through to a human."))
    session.upstream(session.mock.respond([
        "Transferring you now.", model_call("transfer", '{"to": "supervisor"}', "call_transfer")]))
    return session.close()


def late_output_session(directory: Path) -> Path:
    """The user speaks again before the client appends the output: the output sits after the
    user's message in the conversation."""
    session = SessionRecorder(directory)
    session.upstream(session.mock.connect())
    session.upstream(session.mock.user_turn("Book a table."))
    session.upstream(session.mock.respond([model_call("book", '{"seats": 2}', "call_book")]))
    session.upstream(session.mock.user_turn("For two, please."))
    session.output("call_book", "booked")
    return session.close()


def system_message_session(directory: Path) -> Path:
    """A system message added mid-conversation, and a user message inserted at the start after
    everything else (conversation order differs from arrival order)."""
    session = SessionRecorder(directory)
    session.upstream(session.mock.connect())
    session.upstream(session.mock.user_turn("Hi."))
    session.upstream(session.mock.respond(["Hello!"]))
    session.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "system",
        "content": [{"type": "input_text", "text": "The caller is a premium customer."}]}})
    session.send({"type": "conversation.item.create", "previous_item_id": "root", "item": {
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "(context) I called yesterday."}]}})
    return session.close()


def deleted_call_session(directory: Path) -> Path:
    """A call whose item the client deleted after answering it: its output has no call left."""
    session = SessionRecorder(directory)
    session.upstream(session.mock.connect())
    session.upstream(session.mock.user_turn("Cancel my order."))
    session.upstream(session.mock.respond([model_call("cancel_order", "{}", "call_cancel")]))
    session.output("call_cancel", "cancelled")
    call_item = next(i for i in session.mock.items if i["type"] == "function_call")
    session.upstream([{"type": "conversation.item.deleted", "event_id": "event_del",
                       "item_id": call_item["id"]}])
    return session.close()


def cancelled_call_session(directory: Path) -> Path:
    """The user barges in while the model streams a call's arguments: the response is cancelled,
    the call item stays in the conversation, incomplete, with half its arguments."""
    session = SessionRecorder(directory)
    mock = session.mock
    session.upstream(mock.connect())
    session.upstream(mock.user_turn("Look it up."))
    session.upstream(mock.respond([model_call("lookup", '{"query": "opening hours"}', "call_cut")],
                                  stop=lambda e: e["type"] == "response.function_call_arguments.delta"))
    session.upstream(mock.barge_in())
    return session.close()


def client_items_session(directory: Path) -> Path:
    """Items a client created: a user message with an image, an assistant message without
    words, a second output for a call, and a second item for the same call."""
    session = SessionRecorder(directory)
    session.upstream(session.mock.connect())
    session.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is on this photo?"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]}})
    session.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": ""}]}})
    session.upstream(session.mock.respond([model_call("describe", "{}", "call_describe")]))
    session.output("call_describe", "a cat")
    session.output("call_describe", "a dog")
    session.send({"type": "conversation.item.create", "item": {
        "type": "function_call", "call_id": "call_describe", "name": "describe", "arguments": "{}"}})
    return session.close()


# ---- relay-owned calls, from a live engine ---------------------------------------------------


@tool
def find_city(city: str) -> ToolResult:
    """Look a city up."""
    return ToolResult(error="no such city", message="I could not find that city.")


@tool
def raw_error_payload(city: str) -> dict:
    """Returns data that merely looks like an error object."""
    return {"error": "none"}


def relay_engine() -> OpenAIEngine:
    harness = EngineDriver([get_weather_data, find_city, raw_error_payload])
    harness.connect()
    harness.upstream(harness.mock.user_turn("Weather in Paris? And where is Atlantis?"))
    harness.respond([model_call("get_weather", '{"city": "Paris"}', "call_w"),
                     model_call("find_city", '{"city": "Atlantis"}', "call_f"),
                     model_call("raw_error_payload", '{"city": "X"}', "call_r")])
    harness.run_all()
    return harness.engine


# ---- helpers -----------------------------------------------------------------------------------


def recording(name: str) -> Path:
    return next((shared_dir() / "recordings").glob(f"{name}*.jsonl"))


BUILDERS: dict[str, Callable[[Path], Path]] = {
    "parallel-and-error": weather_session,
    "unanswered": unanswered_session,
    "late-output": late_output_session,
    "system-message": system_message_session,
    "deleted-call": deleted_call_session,
    "cancelled-call": cancelled_call_session,
    "client-items": client_items_session,
    "banyan-unanswered": lambda d: recording("banyan-landing_log1"),
    "realtimechat-output-echo": lambda d: recording("realtimechat-idx13146878824_beta_fc_output"),
    "untranscribed-audio": lambda d: recording("bravedigger-sip-gateway_ga_block"),
}


def exported(source: str, fmt: str, directory: Path) -> Export:
    if source == "relay-engine":
        return export_conversation(relay_engine(), fmt)
    return export_recording(BUILDERS[source](directory), fmt)


def plain(value: Any) -> Any:
    """`value` with every lazily validated iterable consumed (which runs its validation)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, Iterator)):
        return [plain(item) for item in value]
    return value


def notes_of(export: Export, kind: str) -> list[str]:
    return [note.message for note in export.report if note.kind == kind]


def tool_messages(export: Export) -> list[dict[str, Any]]:
    return [m for m in export.document["messages"] if m["role"] == "tool"]


# ---- every export is valid for its API --------------------------------------------------------


@pytest.mark.parametrize("source", [*BUILDERS, "relay-engine"])
def test_openai_chat_export_validates_and_answers_every_call(source: str, tmp_path: Path) -> None:
    messages = exported(source, "openai-chat", tmp_path).document["messages"]
    for message in messages:
        # nothing dropped by validation: every key we wrote is one the type knows
        assert plain(CHAT_MESSAGE.validate_python(message)) == message
    for index, message in enumerate(messages):
        calls = [c["id"] for c in message.get("tool_calls", [])]
        if calls:  # the tool messages for these calls follow at once, in call order
            following = messages[index + 1: index + 1 + len(calls)]
            assert [(m["role"], m["tool_call_id"]) for m in following] == [("tool", c) for c in calls]


@pytest.mark.parametrize("source", [*BUILDERS, "relay-engine"])
def test_anthropic_export_validates_alternates_and_answers_every_call(source: str,
                                                                     tmp_path: Path) -> None:
    document = exported(source, "anthropic", tmp_path).document
    assert set(document) <= {"system", "messages"}
    assert isinstance(document.get("system", ""), str)
    messages = document["messages"]
    for message in messages:
        assert plain(ANTHROPIC_MESSAGE.validate_python(message)) == message
    roles = [m["role"] for m in messages]
    assert all(a != b for a, b in zip(roles, roles[1:]))
    for message, following in zip(messages, messages[1:] + [None]):
        uses = [b["id"] for b in message["content"] if b["type"] == "tool_use"]
        if uses:
            assert following is not None and following["role"] == "user"
            results = [b for b in following["content"] if b["type"] == "tool_result"]
            # tool results first in the next user message, one per tool use, in order
            assert following["content"][: len(results)] == results
            assert [r["tool_use_id"] for r in results] == uses
            assert all(isinstance(r["is_error"], bool) for r in results)


@pytest.mark.parametrize("source", [*BUILDERS, "relay-engine"])
def test_gemini_export_validates_and_answers_every_call(source: str, tmp_path: Path) -> None:
    document = exported(source, "gemini", tmp_path).document
    assert set(document) <= {"systemInstruction", "contents"}
    if "systemInstruction" in document:
        genai_types.Content.model_validate(document["systemInstruction"])
    contents = [genai_types.Content.model_validate(c) for c in document["contents"]]
    assert all(c.role in ("user", "model") for c in contents)
    calls = [p.function_call.id for c in contents for p in c.parts or [] if p.function_call]
    answers = [p.function_response for c in contents for p in c.parts or [] if p.function_response]
    assert [a.id for a in answers] == calls
    assert all(set(a.response) in ({"output"}, {"error"}) for a in answers)


# ---- parallel calls and an error output, each format ------------------------------------------


def test_openai_chat_parallel_calls_and_an_error_output(tmp_path: Path) -> None:
    export = export_recording(weather_session(tmp_path), "openai-chat")
    assert export.document == {"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Atlantis?"},
        {"role": "assistant", "content": "Let me check both.", "tool_calls": [
            {"id": "call_paris", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_atlantis", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Atlantis"}'}}]},
        {"role": "tool", "tool_call_id": "call_paris", "content": '{"city": "Paris", "temp_c": 21}'},
        {"role": "tool", "tool_call_id": "call_atlantis", "content": '{"error": "no such city"}'},
        {"role": "assistant", "content": "Paris is 21 degrees; I found no Atlantis."},
    ]}
    assert export.report == []


def test_anthropic_parallel_calls_and_an_error_output(tmp_path: Path) -> None:
    export = export_recording(weather_session(tmp_path), "anthropic")
    assert export.document == {"system": "Be brief.", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris and Atlantis?"}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Let me check both."},
            {"type": "tool_use", "id": "call_paris", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "call_atlantis", "name": "get_weather",
             "input": {"city": "Atlantis"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_paris",
             "content": '{"city": "Paris", "temp_c": 21}', "is_error": False},
            {"type": "tool_result", "tool_use_id": "call_atlantis",
             "content": '{"error": "no such city"}', "is_error": True}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Paris is 21 degrees; I found no Atlantis."}]},
    ]}


def test_gemini_parallel_calls_and_an_error_output(tmp_path: Path) -> None:
    export = export_recording(weather_session(tmp_path), "gemini")
    assert export.document == {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris and Atlantis?"}]},
            {"role": "model", "parts": [
                {"text": "Let me check both."},
                {"functionCall": {"id": "call_paris", "name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"id": "call_atlantis", "name": "get_weather",
                                  "args": {"city": "Atlantis"}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"id": "call_paris", "name": "get_weather",
                                      "response": {"output": {"city": "Paris", "temp_c": 21}}}},
                {"functionResponse": {"id": "call_atlantis", "name": "get_weather",
                                      "response": {"error": "no such city"}}}]},
            {"role": "model", "parts": [{"text": "Paris is 21 degrees; I found no Atlantis."}]},
        ]}


def test_vapi_parallel_calls_and_an_error_output(tmp_path: Path) -> None:
    export = export_recording(weather_session(tmp_path), "vapi")
    assert export.document == {"results": [
        {"toolCallId": "call_paris", "name": "get_weather", "result": '{"city": "Paris", "temp_c": 21}'},
        {"toolCallId": "call_atlantis", "name": "get_weather", "error": "no such city"},
    ]}


# ---- calls without an output ------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_unanswered_call_is_reported_and_answered_synthetically(fmt: str, tmp_path: Path) -> None:
    export = export_recording(unanswered_session(tmp_path), fmt)
    [note] = [n for n in export.report if n.kind == "unanswered_call"]
    assert note.call_id == "call_transfer" and "transfer" in note.message
    document = export.document
    if fmt == "openai-chat":
        assert document["messages"][-1] == {"role": "tool", "tool_call_id": "call_transfer",
                                            "content": json.dumps(UNANSWERED)}
    elif fmt == "anthropic":
        assert document["messages"][-1] == {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_transfer", "content": json.dumps(UNANSWERED),
             "is_error": True}]}
    elif fmt == "gemini":
        assert document["contents"][-1] == {"role": "user", "parts": [{"functionResponse": {
            "id": "call_transfer", "name": "transfer", "response": UNANSWERED}}]}
    else:  # Vapi results hold what was answered, nothing is made up
        assert document == {"results": []}


def test_banyan_transfer_to_supervisor_never_answered() -> None:
    export = export_recording(recording("banyan-landing_log1"), "anthropic")
    [note] = [n for n in export.report if n.kind == "unanswered_call"]
    assert "transferToSupervisor" in note.message
    *_, assistant, answer = export.document["messages"]
    [use] = [b for b in assistant["content"] if b["type"] == "tool_use"]
    assert use["id"] == note.call_id and use["name"] == "transferToSupervisor"
    assert use["input"]["destination_agent_name"] == "marco_supervisor_biller"
    assert answer["content"] == [{"type": "tool_result", "tool_use_id": note.call_id,
                                  "content": json.dumps(UNANSWERED), "is_error": True}]
    assert export.document["system"].lstrip().startswith("# Personality and Tone")
    # barge-ins cut the assistant's audio: said in the report, not hidden
    assert len(notes_of(export, "truncated_audio")) == 5


def test_realtimechat_client_output_echo_becomes_the_tool_result() -> None:
    export = export_recording(recording("realtimechat-idx13146878824_beta_fc_output"), "openai-chat")
    [assistant] = [m for m in export.document["messages"] if m.get("tool_calls")]
    [call] = assistant["tool_calls"]
    assert call["function"]["name"] == "navigate"
    assert json.loads(call["function"]["arguments"]) == {"page": "/about"}
    [result] = tool_messages(export)
    assert result["tool_call_id"] == call["id"]
    assert json.loads(result["content"]) == {"response": "Tool call navigate executed successfully."}
    assert notes_of(export, "unanswered_call") == []
    vapi = export_recording(recording("realtimechat-idx13146878824_beta_fc_output"), "vapi")
    assert vapi.document["results"] == [{"toolCallId": call["id"], "name": "navigate",
                                         "result": result["content"]}]


# ---- relay-owned calls: the ledger says what is an error, and what to say ---------------------


def test_relay_calls_take_is_error_and_message_from_the_ledger() -> None:
    engine = relay_engine()
    vapi = export_conversation(engine, "vapi").document["results"]
    assert vapi == [
        {"toolCallId": "call_w", "name": "get_weather", "result": '{"city":"Paris","temp_c":21}'},
        {"toolCallId": "call_f", "name": "find_city", "error": "no such city",
         "message": {"type": "request-failed", "content": "I could not find that city."}},
        # the handler returned this dict as its result: not an error, whatever it looks like
        {"toolCallId": "call_r", "name": "raw_error_payload", "result": '{"error":"none"}'},
    ]
    anthropic = export_conversation((engine.conversation, engine.ledger), "anthropic").document
    results = [b for m in anthropic["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert [(r["tool_use_id"], r["is_error"]) for r in results] == [
        ("call_w", False), ("call_f", True), ("call_r", False)]
    gemini = export_conversation(engine, "gemini").document
    responses = [p["functionResponse"] for c in gemini["contents"] for p in c["parts"]
                 if "functionResponse" in p]
    assert [r["response"] for r in responses] == [
        {"output": {"city": "Paris", "temp_c": 21}}, {"error": "no such city"},
        {"output": {"error": "none"}}]


# ---- order, placement, system prompts, audio -------------------------------------------------


def test_an_output_placed_later_follows_its_call_and_is_reported(tmp_path: Path) -> None:
    export = export_recording(late_output_session(tmp_path), "openai-chat")
    assert [(m["role"], m["content"]) for m in export.document["messages"]] == [
        ("user", "Book a table."), ("assistant", None), ("tool", "booked"),
        ("user", "For two, please.")]
    [note] = [n for n in export.report if n.kind == "moved_output"]
    assert note.call_id == "call_book"


def test_conversation_order_and_system_messages_in_each_format(tmp_path: Path) -> None:
    path = system_message_session(tmp_path)
    chat = export_recording(path, "openai-chat")
    assert [(m["role"], m["content"]) for m in chat.document["messages"]] == [
        ("user", "(context) I called yesterday."),   # inserted at "root", arrived last
        ("user", "Hi."), ("assistant", "Hello!"),
        ("system", "The caller is a premium customer.")]
    assert notes_of(chat, "system_moved") == []
    anthropic = export_recording(path, "anthropic")
    assert anthropic.document["system"] == "The caller is a premium customer."
    assert anthropic.document["messages"][0] == {"role": "user", "content": [
        {"type": "text", "text": "(context) I called yesterday."}, {"type": "text", "text": "Hi."}]}
    assert len(notes_of(anthropic, "system_moved")) == 1
    gemini = export_recording(path, "gemini")
    assert gemini.document["systemInstruction"] == {
        "parts": [{"text": "The caller is a premium customer."}]}
    assert [c["role"] for c in gemini.document["contents"]] == ["user", "model"]


def test_audio_without_transcript_is_marked_not_dropped() -> None:
    export = export_recording(recording("bravedigger-sip-gateway_ga_block"), "openai-chat")
    [note] = [n for n in export.report if n.kind == "untranscribed_audio"]
    assert {"role": "user", "content": AUDIO_WITHOUT_TRANSCRIPT} in export.document["messages"]
    assert note.item_id and AUDIO_WITHOUT_TRANSCRIPT in note.message


def test_an_output_whose_call_was_deleted_is_left_out_and_reported(tmp_path: Path) -> None:
    export = export_recording(deleted_call_session(tmp_path), "openai-chat")
    assert tool_messages(export) == []
    [note] = [n for n in export.report if n.kind == "orphan_output"]
    assert note.call_id == "call_cancel"


def test_a_call_cut_by_a_barge_in_is_answered_as_not_run(tmp_path: Path) -> None:
    path = cancelled_call_session(tmp_path)
    chat = export_recording(path, "openai-chat")
    [assistant] = [m for m in chat.document["messages"] if m.get("tool_calls")]
    partial = assistant["tool_calls"][0]["function"]["arguments"]
    assert partial and partial != '{"query": "opening hours"}'  # kept as far as it was streamed
    not_run = {"error": "no output: the call was not run (response cancelled (turn_detected))"}
    assert tool_messages(chat) == [{"role": "tool", "tool_call_id": "call_cut",
                                    "content": json.dumps(not_run)}]
    anthropic = export_recording(path, "anthropic")
    [use] = [b for m in anthropic.document["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert use["input"] == {}  # Anthropic needs an object; the partial text is in the report
    [note] = [n for n in anthropic.report if n.kind == "bad_arguments"]
    assert note.call_id == "call_cut" and repr(partial) in note.message


def test_what_cannot_be_carried_is_reported(tmp_path: Path) -> None:
    export = export_recording(client_items_session(tmp_path), "openai-chat")
    assert export.document["messages"] == [
        {"role": "user", "content": "What is on this photo?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_describe", "type": "function",
             "function": {"name": "describe", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_describe", "content": "a cat"},
    ]
    assert {note.kind for note in export.report} == {
        "unsupported_content", "empty_message", "duplicate_output", "duplicate_call"}
    [image] = notes_of(export, "unsupported_content")
    assert "input_image" in image


# ---- errors and the command line ---------------------------------------------------------------


def test_unknown_format_and_unreadable_sources_raise_export_error(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="unknown export format 'csv'"):
        export_recording(recording("banyan-landing_log1"), "csv")
    with pytest.raises(ExportError, match="cannot read"):
        export_recording(tmp_path / "missing.jsonl", "vapi")


def test_a_damaged_recording_is_exported_with_the_reader_warnings(tmp_path: Path) -> None:
    path = weather_session(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:-1]))  # the relay stopped before writing the end line
    export = export_recording(path, "openai-chat")
    intact = export_recording(weather_session(tmp_path / "intact"), "openai-chat")
    assert export.document == intact.document
    assert [n.message for n in export.report if n.kind == "recording"] == [
        "no end line: the session did not close cleanly or is still open"]


def test_cli_writes_the_export_and_reports_on_stderr(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = unanswered_session(tmp_path)
    out = tmp_path / "export.json"
    assert main(["export", str(path), "--format", "anthropic", "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == export_recording(path, "anthropic").document
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "unanswered_call: call call_transfer (transfer) has no output" in captured.err

    assert main(["export", str(path), "--format", "openai-chat"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith('{\n  "messages": [')  # pretty-printed on stdout
    assert json.loads(captured.out) == export_recording(path, "openai-chat").document


def test_cli_errors_are_unusable_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(tmp_path / "missing.jsonl"), "--format", "vapi"]) == 2
    assert "relay export: " in capsys.readouterr().err
    assert main(["export", str(tmp_path / "missing.jsonl"), "--format", "csv"]) == 2
    assert capsys.readouterr().err.startswith("relay export: argument --format: invalid choice: 'csv'")
    path = unanswered_session(tmp_path)
    unwritable = tmp_path / "no" / "dir.json"
    assert main(["export", str(path), "--format", "vapi", "--out", str(unwritable)]) == 2
    assert "cannot write" in capsys.readouterr().err


# ---- what the relay decided to say, recorded beside the frames (issue 20, point 8) ------------


@tool
def book_table(restaurant: str) -> ToolResult:
    """Book a table."""
    return ToolResult(result={"booked": True}, message="Your table at Chez Nous is booked.")


@tool(on_failure="I could not find that city.")
def locate_city(name: str) -> dict:
    """Find a city."""
    raise LookupError(f"no city called {name}")


@tool
def looks_like_an_error() -> dict:
    """Returns a result that only looks like an error."""
    return {"error": "none"}


SPOKEN_SCRIPT = MockScript(
    rules=(Rule(match="book", say="One moment.",
                calls=(ToolCall(name="book_table", arguments={"restaurant": "Chez Nous"}),
                       ToolCall(name="locate_city", arguments={"name": "Atlantis"}),
                       ToolCall(name="looks_like_an_error"))),),
    after_outputs=Reply(say="Done."),
)
SPOKEN_RESULTS = [
    {"toolCallId": "call_book", "name": "book_table", "result": '{"booked":true}',
     "message": {"type": "request-complete", "content": "Your table at Chez Nous is booked."}},
    {"toolCallId": "call_city", "name": "locate_city", "error": "LookupError: no city called Atlantis",
     "message": {"type": "request-failed", "content": "I could not find that city."}},
    {"toolCallId": "call_raw", "name": "looks_like_an_error", "result": '{"error":"none"}'},
]


async def recorded_proxy_session(record_dir: Path) -> Path:
    """A session through `relay serve` and the mock, recorded: three relay calls in one response,
    one with a ToolResult message, one failing with on_failure, one whose result looks like an
    error; the relay's follow-up speaks the messages."""
    script = SPOKEN_SCRIPT.model_copy(update={"rules": (SPOKEN_SCRIPT.rules[0].model_copy(update={"calls": tuple(
        call.model_copy(update={"call_id": call_id}) for call, call_id in
        zip(SPOKEN_SCRIPT.rules[0].calls, ("call_book", "call_city", "call_raw")))}),)})
    async with MockUpstream(script=script) as mock:
        async with relay_for(mock, tools=[book_table, locate_city, looks_like_an_error], record_dir=record_dir) as server:
            async with realtime_client(server) as client:
                await client.send(user_text("book a table, please"))
                await client.send({"type": "response.create"})
                await client.wait_for(lambda e: e["type"] == "response.done"
                                      and (e["response"].get("metadata") or {}).get("relay") == "follow_up")
    [path] = record_dir.glob("*.jsonl")
    return path


async def test_the_vapi_export_of_a_recording_says_what_the_relay_decided_to_say(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = await recorded_proxy_session(tmp_path / "recordings")
    assert export_recording(path, "vapi").document["results"] == SPOKEN_RESULTS
    assert main(["export", str(path), "--format", "vapi"]) == 0
    assert json.loads(capsys.readouterr().out)["results"] == SPOKEN_RESULTS
    notes = read_recording(path).tool_calls_decided()
    assert {call_id: (note["outcome"], note["is_error"]) for call_id, note in notes.items()} == {
        "call_book": ("ok", False), "call_city": ("error", True), "call_raw": ("ok", False)}


async def test_an_older_recording_without_relay_lines_still_reads_and_exports(tmp_path: Path) -> None:
    path = await recorded_proxy_session(tmp_path / "recordings")
    old = tmp_path / "old.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    kinds = [json.loads(line)["relay"]["kind"] for line in lines if "relay" in json.loads(line)]
    assert sorted(kinds) == ["handler_finished"] * 3 + ["tool_call"] * 3   # each call's finish, and its outcome
    old.write_text("".join(line for line in lines if "relay" not in json.loads(line)))
    recording = read_recording(old)
    assert recording.complete and not recording.notes and not recording.warnings
    results = export_recording(old, "vapi").document["results"]
    # without the relay's lines: no messages, and errors are told by the output alone
    assert results == [{key: value for key, value in result.items() if key != "message"}
                       for result in SPOKEN_RESULTS[:2]] + [
        {"toolCallId": "call_raw", "name": "looks_like_an_error", "error": "none"}]
