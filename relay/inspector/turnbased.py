"""The inspector's reading of a turn-based wire, Gemini Live's (or a new family's of the same flow,
through its codec): each frame of a recording, as the codec types it (into the messages of
relay/dialects/gemini_codec.py), into the shared model
(relay/inspector/model.py). The wire has no responses: a model turn (from its first output to
`turnComplete` or `interrupted`) stands for one; calls come in `toolCall`, are withdrawn by
`toolCallCancellation`, and are answered in `toolResponse` (interim answers with `willContinue`).
Audio is 16 kHz in, 24 kHz out unless a blob's mime type says otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from relay.dialects import GEMINI, Dialect
from relay.dialects.gemini import audio_slots, is_error_response, only_media, response_text
from relay.dialects.gemini_codec import (
    ClientContent,
    Content,
    FunctionCall,
    FunctionDeclaration,
    FunctionResponse,
    GoAway,
    Message,
    Part,
    RealtimeInput,
    ServerContent,
    Setup,
    Tool,
    ToolCall,
    ToolCallCancellation,
    ToolResponse,
    Transcription,
    Unknown,
    event_of,
    given,
    messages_of,
    turn_codec,
)
from relay.inspector.audio import GEMINI_INPUT, GEMINI_OUTPUT, elided, mime_format
from relay.inspector.building import ModelBuilding
from relay.inspector.callbook import TrackedResponse
from relay.recording.format import (
    CLIENT_TO_RELAY,
    RELAY_TO_CLIENT,
    RELAY_TO_UPSTREAM,
    UPSTREAM_TO_RELAY,
    Frame,
)


class GeminiParser:
    """Reads a Gemini Live session into `model`, frame by frame, keeping what only this wire
    needs: the model turn in progress and the words still being transcribed."""

    def __init__(self, model: ModelBuilding, dialect: Dialect = GEMINI) -> None:
        self.model = model
        self.codec = turn_codec(dialect)   # None: Gemini Live's own
        self._turn: TrackedResponse | None = None
        self._open_words: dict[str, dict[str, Any] | None] = {"user": None, "assistant": None}

    def feed(self, frame: Frame, event: dict[str, Any], binary: bool) -> None:
        t = frame.t
        direction = frame.direction
        message = (event_of if self.codec is None else self.codec.event_of)(event)
        slots = audio_slots(event)
        caller = [slot for slot in slots if slot.side == "input"]
        model_audio = [slot for slot in slots if slot.side == "output"]
        if isinstance(message, RealtimeInput) and direction in (CLIENT_TO_RELAY, RELAY_TO_UPSTREAM):
            if self.model.caller_direction is None:
                self.model.caller_direction = direction
            if caller:
                self.model.audio_frames += 1
                if direction == self.model.caller_direction:
                    for slot in caller:
                        fmt = mime_format(slot.mime, GEMINI_INPUT)
                        self.model.add_audio("caller", t, fmt, slot.holder.get(slot.key),
                                             frame.audio_dropped // len(caller))
                if only_media(event):
                    return
        audio_only = False
        if isinstance(message, ServerContent) and direction == UPSTREAM_TO_RELAY:
            if model_audio:
                self.model.audio_frames += 1
                turn = self._turn_of(t)
                if turn.first_output is None:
                    turn.first_output = t
                for slot in model_audio:
                    fmt = mime_format(slot.mime, GEMINI_OUTPUT)
                    self.model.add_audio("assistant", t, fmt, slot.holder.get(slot.key),
                                         frame.audio_dropped // len(model_audio))
                audio_only = only_media(event)
        elif isinstance(message, ServerContent) and direction == RELAY_TO_CLIENT:
            if model_audio:
                return     # the client's copy of the audio
        if audio_only:
            return
        index = self.model.store(frame, event, elided=elided(event, audio_slots))
        for one in messages_of(event, self.codec):   # a frame of several: each on its own
            self._read(t, direction, one, index)

    def _read(self, t: float, direction: str, message: Message, index: int) -> None:
        if direction == UPSTREAM_TO_RELAY:
            self._upstream(t, message, index)
        elif direction in (RELAY_TO_UPSTREAM, CLIENT_TO_RELAY):
            self._sent(t, message, index, relay=direction == RELAY_TO_UPSTREAM)
        elif direction == RELAY_TO_CLIENT:
            for call_id in _call_ids(message):
                call = self.model.calls.get(call_id)
                if call is not None and not call.seen_by_client:
                    call.seen_by_client = True
                    self.model.touch(call.event)

    def _turn_of(self, t: float) -> TrackedResponse:
        if self._turn is None:
            response_id = self.model.new_id("turn")
            event = self.model.add_event(f"response:{response_id}", "responses", "response", t,
                                         "model turn (in progress)", response_id=response_id, status="in_progress",
                                         creator="model", out_of_band=False, status_details=None)
            self._turn = TrackedResponse(event)
            self.model.responses[response_id] = self._turn
            self.model.outputs_answered_by(response_id)
        return self._turn

    def _upstream(self, t: float, message: Message, index: int) -> None:
        if isinstance(message, ServerContent):
            turn = self._turn_of(t)
            self.model.touch(turn.event, index)
            model_turn = message.model_turn
            for part in _listed(model_turn.parts if isinstance(model_turn, Content) else None):
                if isinstance(part, Part) and isinstance(part.text, str):
                    self._words("assistant", t, part.text, index, turn)
            for transcription, role in ((message.input_transcription, "user"),
                                        (message.output_transcription, "assistant")):
                if isinstance(transcription, Transcription) and isinstance(transcription.text, str):
                    self._words(role, t, transcription.text, index, turn)
            if message.interrupted:
                self.model.audio["assistant"].restart()
                self._end_turn(t, "interrupted", index)
            elif message.turn_complete:
                self._end_turn(t, "completed", index)
            return
        if isinstance(message, ToolCall):
            turn = self._turn_of(t)
            self.model.touch(turn.event, index)
            for call_data in _listed(message.function_calls):
                if not isinstance(call_data, FunctionCall):
                    continue
                call_id = given(call_data.id)
                call = self.model.track_call(t, call_id, given(call_data.name), turn.event["response_id"], index)
                if call is not None:
                    arguments = given(call_data.args)
                    self.model.call_ready(t, call_id,
                                          json.dumps(arguments if arguments is not None else {}, ensure_ascii=False),
                                          index)
            return
        if isinstance(message, ToolCallCancellation):
            for call_id in _listed(message.ids):
                call = self.model.calls.get(str(call_id))
                if call is not None:
                    self.model.call_cancelled(call, t, "cancelled by the server (toolCallCancellation)", index)
            return
        if isinstance(message, GoAway):
            self.model.anomaly(t, "the server announced it will close the session (goAway)", source="upstream",
                          frames=[index], error=False)

    def _words(self, role: str, t: float, text: str, index: int, turn: TrackedResponse | None) -> None:
        words = self._open_words[role]
        if words is None:
            words = self.model.add_event(self.model.new_id("user" if role == "user" else "said"),
                                         "user_words" if role == "user" else "assistant_words", "words", t, "",
                                         role=role, text="", response_id=turn.event["response_id"] if turn else None)
            self._open_words[role] = words
        words["text"] += text
        words["label"] = words["text"]
        words["t1"] = round(t, 6)
        if role == "assistant" and turn is not None and turn.first_output is None:
            turn.first_output = t
        self.model.touch(words, index)

    def _end_turn(self, t: float, status: str, index: int) -> None:
        turn = self._turn
        self._open_words = {"user": None, "assistant": None}
        if turn is None:
            return
        turn.event["status"] = status
        turn.event["label"] = status
        turn.event["t1"] = round(t, 6)
        self.model.touch(turn.event, index)
        self._turn = None

    def _sent(self, t: float, message: Message, index: int, *, relay: bool) -> None:
        if isinstance(message, Setup):
            if relay:
                names = []
                for tool_entry in _listed(message.tools):
                    declarations = tool_entry.function_declarations if isinstance(tool_entry, Tool) else None
                    for declaration in _listed(declarations):
                        if isinstance(declaration, FunctionDeclaration) and declaration.name in self.model.relay_tools:
                            names.append(declaration.name)
                if names:
                    marker = self.model.relay_marker(t, "declare", f"declares {', '.join(names)}", index)
                    marker["tools"] = names
            return
        if isinstance(message, ClientContent) and not relay:
            for turn_data in _listed(message.turns):
                if isinstance(turn_data, Content) and given(turn_data.role, "user") == "user":
                    text = " ".join(p.text for p in _listed(turn_data.parts)
                                    if isinstance(p, Part) and isinstance(p.text, str))
                    if text:
                        words = self.model.add_event(self.model.new_id("user"), "user_words", "words", t, text,
                                                     role="user", text=text)
                        words["t1"] = words["t0"]
                        self.model.touch(words, index)
            return
        if isinstance(message, RealtimeInput) and not relay and isinstance(message.text, str):
            words = self.model.add_event(self.model.new_id("user"), "user_words", "words", t, message.text,
                                         role="user", text=message.text)
            words["t1"] = words["t0"]
            self.model.touch(words, index)
            return
        if isinstance(message, ToolResponse):
            for answer in _listed(message.function_responses):
                if not isinstance(answer, FunctionResponse):
                    continue
                call = self.model.calls.get(str(given(answer.id)))
                if call is None:
                    continue
                if not relay and self.model.client_answered(call, index):
                    continue   # its forward (relay>upstream) is the answer that counted
                body = given(answer.response)
                text = response_text(body)
                status = "incomplete" if answer.will_continue else "completed"
                self.model.call_output(call, t, text, status, None, index)
                call.event["answers"][-1]["will_continue"] = bool(answer.will_continue)
                scheduling = given(answer.scheduling)
                if scheduling is not None:
                    call.event["answers"][-1]["scheduling"] = scheduling
                if call.event["outcome"] not in ("error",) and is_error_response(body):
                    call.event["outcome"] = "error"


def _listed(value: Any) -> list[Any]:
    """A list field's entries; none when the member is absent or not a list."""
    return value if isinstance(value, list) else []


def _call_ids(message: Message) -> list[str]:
    calls = _listed(message.function_calls) if isinstance(message, ToolCall) else []
    return [c.id for c in calls if isinstance(c, FunctionCall) and isinstance(c.id, str)]
