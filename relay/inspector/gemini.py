"""The inspector's reading of Gemini Live's wire: each frame of a recording into the shared model
(relay/inspector/model.py). Gemini has no responses: a model turn (from its first output to
`turnComplete` or `interrupted`) stands for one; calls come in `toolCall`, are withdrawn by
`toolCallCancellation`, and are answered in `toolResponse` (interim answers with `willContinue`).
Audio is 16 kHz in, 24 kHz out unless a blob's mime type says otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from relay.dialects.gemini import field as gemini_field
from relay.inspector.audio import GEMINI_INPUT, GEMINI_OUTPUT, mime_format
from relay.inspector.model import (
    CLIENT_IN,
    CLIENT_OUT,
    ELIDED_AUDIO,
    UPSTREAM_IN,
    UPSTREAM_OUT,
    SessionModel,
    TrackedResponse,
)
from relay.recording.format import Frame


class GeminiParser:
    """Reads a Gemini Live session into `model`, frame by frame, keeping what only this wire
    needs: the model turn in progress and the words still being transcribed."""

    def __init__(self, model: SessionModel) -> None:
        self.model = model
        self._turn: TrackedResponse | None = None
        self._open_words: dict[str, dict[str, Any] | None] = {"user": None, "assistant": None}

    def feed(self, frame: Frame, event: dict[str, Any], binary: bool) -> None:
        t = frame.t
        direction = frame.direction
        realtime = gemini_field(event, "realtimeInput")
        if isinstance(realtime, dict) and direction in (CLIENT_IN, UPSTREAM_OUT):
            if self.model.caller_direction is None:
                self.model.caller_direction = direction
            blobs = _gemini_input_audio(realtime)
            if blobs:
                self.model.audio_frames += 1
                if direction == self.model.caller_direction:
                    for blob in blobs:
                        fmt = mime_format(gemini_field(blob, "mimeType"), GEMINI_INPUT)
                        self.model.add_audio("caller", t, fmt, blob.get("data"), frame.audio_dropped // len(blobs))
                if set(realtime) <= {"audio", "mediaChunks", "media_chunks"}:
                    return
        content = gemini_field(event, "serverContent")
        audio_only = False
        if isinstance(content, dict) and direction == UPSTREAM_IN:
            blobs = _gemini_output_audio(content)
            if blobs:
                self.model.audio_frames += 1
                turn = self._turn_of(t)
                if turn.first_output is None:
                    turn.first_output = t
                for blob in blobs:
                    fmt = mime_format(gemini_field(blob, "mimeType"), GEMINI_OUTPUT)
                    self.model.add_audio("assistant", t, fmt, blob.get("data"), frame.audio_dropped // len(blobs))
                parts = gemini_field(gemini_field(content, "modelTurn"), "parts") or []
                audio_only = set(content) <= {"modelTurn", "model_turn"} and all(
                    isinstance(p, dict) and gemini_field(p, "inlineData") is not None for p in parts)
        elif isinstance(content, dict) and direction == CLIENT_OUT:
            if _gemini_output_audio(content):
                return     # the client's copy of the audio
        if audio_only:
            return
        index = self.model.store(frame, event, elided=_elide_gemini(event))
        if direction == UPSTREAM_IN:
            self._upstream(t, event, index)
        elif direction in (UPSTREAM_OUT, CLIENT_IN):
            self._sent(t, event, index, relay=direction == UPSTREAM_OUT)
        elif direction == CLIENT_OUT:
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
                text = _gemini_answer_text(body)
                status = "incomplete" if gemini_field(answer, "willContinue") else "completed"
                self.model.call_output(call, t, text, status, None, index)
                call.event["answers"][-1]["will_continue"] = bool(gemini_field(answer, "willContinue"))
                scheduling = gemini_field(answer, "scheduling")
                if scheduling is not None:
                    call.event["answers"][-1]["scheduling"] = scheduling
                if call.event["outcome"] not in ("error",) and isinstance(body, dict) and "error" in body:
                    call.event["outcome"] = "error"


def _gemini_call_ids(event: dict[str, Any]) -> list[str]:
    calls = gemini_field(gemini_field(event, "toolCall"), "functionCalls") or []
    return [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]


def _gemini_answer_text(body: Any) -> str:
    if isinstance(body, dict):
        if set(body) == {"output"} and isinstance(body["output"], str):
            return body["output"]
        if "error" in body:
            return json.dumps({"error": body["error"]}, ensure_ascii=False)
        if "output" in body:
            return json.dumps(body["output"], ensure_ascii=False)
    return json.dumps(body, ensure_ascii=False)


def _is_audio_blob(blob: Any) -> bool:
    if not isinstance(blob, dict):
        return False
    mime = gemini_field(blob, "mimeType")
    return not isinstance(mime, str) or mime.startswith("audio/")


def _gemini_input_audio(realtime: dict[str, Any]) -> list[dict[str, Any]]:
    blobs = []
    audio = realtime.get("audio")
    if isinstance(audio, dict):
        blobs.append(audio)
    chunks = gemini_field(realtime, "mediaChunks")
    if isinstance(chunks, list):
        blobs.extend(chunk for chunk in chunks if _is_audio_blob(chunk))
    return blobs


def _gemini_output_audio(content: dict[str, Any]) -> list[dict[str, Any]]:
    parts = gemini_field(gemini_field(content, "modelTurn"), "parts")
    blobs = []
    for part in parts if isinstance(parts, list) else []:
        blob = gemini_field(part, "inlineData")
        if _is_audio_blob(blob):
            blobs.append(blob)
    return blobs


def _elided_blob(blob: dict[str, Any]) -> dict[str, Any]:
    data = blob.get("data")
    if isinstance(data, str) and data:
        return {**blob, "data": ELIDED_AUDIO.format(len(data) * 3 // 4)}
    return blob


def _elide_gemini(event: dict[str, Any]) -> dict[str, Any] | None:
    realtime_key = "realtimeInput" if "realtimeInput" in event else "realtime_input" if "realtime_input" in event else None
    if realtime_key is not None and isinstance(event[realtime_key], dict):
        realtime = dict(event[realtime_key])
        if isinstance(realtime.get("audio"), dict):
            realtime["audio"] = _elided_blob(realtime["audio"])
        for key in ("mediaChunks", "media_chunks"):
            if isinstance(realtime.get(key), list):
                realtime[key] = [_elided_blob(c) if _is_audio_blob(c) else c for c in realtime[key]]
        return {**event, realtime_key: realtime}
    content_key = "serverContent" if "serverContent" in event else "server_content" if "server_content" in event else None
    if content_key is not None and isinstance(event[content_key], dict):
        content = dict(event[content_key])
        for turn_key in ("modelTurn", "model_turn"):
            turn = content.get(turn_key)
            if isinstance(turn, dict) and isinstance(turn.get("parts"), list):
                parts = []
                for part in turn["parts"]:
                    if isinstance(part, dict):
                        for blob_key in ("inlineData", "inline_data"):
                            if _is_audio_blob(part.get(blob_key)):
                                part = {**part, blob_key: _elided_blob(part[blob_key])}
                    parts.append(part)
                content[turn_key] = {**turn, "parts": parts}
        return {**event, content_key: content}
    return None
