"""Wire messages the tests build, and readers for the ones they receive: OpenAI Realtime events
first, then Gemini Live messages, then what crossed the mock upstream's sockets."""

from __future__ import annotations

import json
from typing import Any

from relay.mock import MockUpstream, Record

Message = dict[str, Any]


# ---- OpenAI Realtime ---------------------------------------------------------------------------
def user_text(text: str, **extra: Any) -> Message:
    """A `conversation.item.create` with a user text message."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return {"type": "conversation.item.create", "item": item, **extra}


def session_tools(tools: list[Message]) -> Message:
    """A GA `session.update` that declares these tools."""
    return {"type": "session.update", "session": {"type": "realtime", "tools": tools}}


def frame_of_size(size: int) -> str:
    """An `input_audio_buffer.append` of exactly `size` bytes with valid base64 audio."""
    head, tail = '{"type":"input_audio_buffer.append","event_id":"', '","audio":"'
    audio_chars = (size - len(head) - len(tail) - 2) // 4 * 4
    padding = size - len(head) - len(tail) - 2 - audio_chars
    frame = head + "p" * padding + tail + "A" * audio_chars + '"}'
    assert len(frame.encode()) == size
    return frame


def session_created() -> str:
    """The first frame of a bare stand-in upstream: a GA `session.created` with no tools."""
    return json.dumps({"type": "session.created", "event_id": "event_1",
                       "session": {"type": "realtime", "id": "sess_bare", "tools": []}})


def said(event: Message) -> str:
    """What a response.done's output says (transcripts and texts), as JSON text to search."""
    return json.dumps(event["response"]["output"])


def types_of(events: list[Any]) -> list[str]:
    """The types of events given as dicts or as SDK models."""
    return [e["type"] if isinstance(e, dict) else e.type for e in events]


# ---- Gemini Live -------------------------------------------------------------------------------
def function_call(call_id: str, name: str, args: Any = None) -> Message:
    """One FunctionCall of a Gemini `toolCall`."""
    call: Message = {"id": call_id, "name": name}
    if args is not None:
        call["args"] = args
    return call


def tool_call(*calls: Message) -> Message:
    return {"toolCall": {"functionCalls": list(calls)}}


def cancellation(*ids: str) -> Message:
    return {"toolCallCancellation": {"ids": list(ids)}}


def gemini_user_text(text: str) -> Message:
    """A Gemini `clientContent` user turn, complete."""
    return {"clientContent": {"turns": [{"role": "user", "parts": [{"text": text}]}], "turnComplete": True}}


def model_text(text: str) -> Message:
    return {"serverContent": {"modelTurn": {"role": "model", "parts": [{"text": text}]}}}


TURN_COMPLETE = {"serverContent": {"turnComplete": True}}


def model_words(messages: list[Message]) -> str:
    """Everything the Gemini model said in these messages: text parts and output transcriptions."""
    words = []
    for message in messages:
        content = message.get("serverContent") or {}
        for part in (content.get("modelTurn") or {}).get("parts") or []:
            words.append(part.get("text") or "")
        words.append((content.get("outputTranscription") or {}).get("text") or "")
    return "".join(words)


# ---- what crossed the mock upstream ------------------------------------------------------------
def received_types(mock: MockUpstream) -> list[str]:
    """The type of every client event the mock received, in order."""
    return [record.event.get("type") for record in mock.received]


def _output_records(mock: MockUpstream) -> list[Record]:
    return [r for r in mock.received
            if r.event.get("type") == "conversation.item.create"
            and isinstance(r.event.get("item"), dict)
            and r.event["item"].get("type") == "function_call_output"]


def function_call_outputs(mock: MockUpstream, call_id: str | None = None) -> list[Message]:
    """The function_call_output items the mock received (for one call, or all)."""
    return [r.event["item"] for r in _output_records(mock) if call_id in (None, r.event["item"].get("call_id"))]


def outputs_received(mock: MockUpstream) -> list[tuple[int, str]]:
    """(connection index, call_id) of every function_call_output the mock received."""
    return [(r.connection, r.event["item"]["call_id"]) for r in _output_records(mock)]


def model_call_ids(mock: MockUpstream) -> list[str]:
    """call_ids of the function calls the mock's model produced (one per call: the
    `response.output_item.done` of each)."""
    return [r.event["item"]["call_id"] for r in mock.sent
            if r.event.get("type") == "response.output_item.done"
            and r.event["item"].get("type") == "function_call"]


# ---- what a session records ---------------------------------------------------------------------
class ListRecorder:
    """A session recorder (relay.recording.taps.Recorder) keeping every frame it is given, with its
    direction, in order."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, str | bytes]] = []

    def record(self, direction: str, frame: str | bytes) -> None:
        self.frames.append((direction, frame))

    def record_notice(self, kind: str, fields: dict[str, Any]) -> None:
        pass

    def close(self, reason: str) -> None:
        pass
