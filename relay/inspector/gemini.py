"""The inspector's reading of Gemini Live's wire: each frame of a recording into the shared model
(relay/inspector/model.py). Gemini has no responses: a model turn (from its first output to
`turnComplete` or `interrupted`) stands for one; calls come in `toolCall`, are withdrawn by
`toolCallCancellation`, and are answered in `toolResponse` (interim answers with `willContinue`).
Audio is 16 kHz in, 24 kHz out unless a blob's mime type says otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from relay.dialects.gemini import (
    audio_slots,
    is_error_response,
    only_media,
    response_text,
)
from relay.dialects.gemini import field as gemini_field
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

    def __init__(self, model: ModelBuilding) -> None:
        self.model = model
        self._turn: TrackedResponse | None = None
        self._open_words: dict[str, dict[str, Any] | None] = {"user": None, "assistant": None}

    def feed(self, frame: Frame, event: dict[str, Any], binary: bool) -> None:
        t = frame.t
        direction = frame.direction
        slots = audio_slots(event)
        caller = [slot for slot in slots if slot.side == "input"]
        model_audio = [slot for slot in slots if slot.side == "output"]
        realtime = gemini_field(event, "realtimeInput")
        if isinstance(realtime, dict) and direction in (CLIENT_TO_RELAY, RELAY_TO_UPSTREAM):
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
        content = gemini_field(event, "serverContent")
        audio_only = False
        if isinstance(content, dict) and direction == UPSTREAM_TO_RELAY:
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
        elif isinstance(content, dict) and direction == RELAY_TO_CLIENT:
            if model_audio:
                return     # the client's copy of the audio
        if audio_only:
            return
        index = self.model.store(frame, event, elided=elided(event, audio_slots))
        if direction == UPSTREAM_TO_RELAY:
            self._upstream(t, event, index)
        elif direction in (RELAY_TO_UPSTREAM, CLIENT_TO_RELAY):
            self._sent(t, event, index, relay=direction == RELAY_TO_UPSTREAM)
        elif direction == RELAY_TO_CLIENT:
            for call_id in _gemini_call_ids(event):
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

    def _upstream(self, t: float, event: dict[str, Any], index: int) -> None:
        content = gemini_field(event, "serverContent")
        if isinstance(content, dict):
            turn = self._turn_of(t)
            self.model.touch(turn.event, index)
            parts = gemini_field(gemini_field(content, "modelTurn"), "parts") or []
            for part in parts if isinstance(parts, list) else []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    self._words("assistant", t, part["text"], index, turn)
            for key, role in (("inputTranscription", "user"), ("outputTranscription", "assistant")):
                text = gemini_field(gemini_field(content, key), "text")
                if isinstance(text, str):
                    self._words(role, t, text, index, turn)
            if gemini_field(content, "interrupted"):
                self.model.audio["assistant"].restart()
                self._end_turn(t, "interrupted", index)
            elif gemini_field(content, "turnComplete"):
                self._end_turn(t, "completed", index)
            return
        tool_call = gemini_field(event, "toolCall")
        if isinstance(tool_call, dict):
            turn = self._turn_of(t)
            self.model.touch(turn.event, index)
            for call_data in gemini_field(tool_call, "functionCalls") or []:
                if not isinstance(call_data, dict):
                    continue
                call = self.model.track_call(t, call_data.get("id"), call_data.get("name"),
                                             turn.event["response_id"], index)
                if call is not None:
                    arguments = call_data.get("args")
                    self.model.call_ready(t, call_data.get("id"),
                                          json.dumps(arguments if arguments is not None else {}, ensure_ascii=False),
                                          index)
            return
        cancellation = gemini_field(event, "toolCallCancellation")
        if isinstance(cancellation, dict):
            for call_id in gemini_field(cancellation, "ids") or []:
                call = self.model.calls.get(str(call_id))
                if call is not None:
                    self.model.call_cancelled(call, t, "cancelled by the server (toolCallCancellation)", index)
            return
        if gemini_field(event, "goAway") is not None:
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

    def _sent(self, t: float, event: dict[str, Any], index: int, *, relay: bool) -> None:
        setup = gemini_field(event, "setup")
        if isinstance(setup, dict):
            if relay:
                names = []
                for tool_entry in gemini_field(setup, "tools") or []:
                    for declaration in gemini_field(tool_entry, "functionDeclarations") or []:
                        if isinstance(declaration, dict) and declaration.get("name") in self.model.relay_tools:
                            names.append(declaration["name"])
                if names:
                    marker = self.model.relay_marker(t, "declare", f"declares {', '.join(names)}", index)
                    marker["tools"] = names
            return
        client_content = gemini_field(event, "clientContent")
        if isinstance(client_content, dict) and not relay:
            for turn_data in gemini_field(client_content, "turns") or []:
                if isinstance(turn_data, dict) and turn_data.get("role", "user") == "user":
                    text = " ".join(p["text"] for p in turn_data.get("parts") or ()
                                    if isinstance(p, dict) and isinstance(p.get("text"), str))
                    if text:
                        words = self.model.add_event(self.model.new_id("user"), "user_words", "words", t, text,
                                                     role="user", text=text)
                        words["t1"] = words["t0"]
                        self.model.touch(words, index)
            return
        realtime = gemini_field(event, "realtimeInput")
        if isinstance(realtime, dict) and not relay and isinstance(realtime.get("text"), str):
            words = self.model.add_event(self.model.new_id("user"), "user_words", "words", t, realtime["text"],
                                         role="user", text=realtime["text"])
            words["t1"] = words["t0"]
            self.model.touch(words, index)
            return
        tool_response = gemini_field(event, "toolResponse")
        if isinstance(tool_response, dict):
            for answer in gemini_field(tool_response, "functionResponses") or []:
                if not isinstance(answer, dict):
                    continue
                call = self.model.calls.get(str(answer.get("id")))
                if call is None:
                    continue
                if not relay:
                    call.event["owner"] = "client" if call.event["name"] not in self.model.relay_tools else "relay"
                    if self.model.kind == "relay":
                        self.model.touch(call.event, index)
                        continue   # its forward (relay>upstream) is the answer that counted
                body = answer.get("response")
                text = response_text(body)
                status = "incomplete" if gemini_field(answer, "willContinue") else "completed"
                self.model.call_output(call, t, text, status, None, index)
                call.event["answers"][-1]["will_continue"] = bool(gemini_field(answer, "willContinue"))
                scheduling = gemini_field(answer, "scheduling")
                if scheduling is not None:
                    call.event["answers"][-1]["scheduling"] = scheduling
                if call.event["outcome"] not in ("error",) and is_error_response(body):
                    call.event["outcome"] = "error"


def _gemini_call_ids(event: dict[str, Any]) -> list[str]:
    calls = gemini_field(gemini_field(event, "toolCall"), "functionCalls") or []
    return [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]
