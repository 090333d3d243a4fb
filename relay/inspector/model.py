"""The inspector's model of a session: what a person looks at, built frame by frame.

`SessionModel` is fed the frames of a recording one at a time (`feed`) and can say, at any point,
what the session looks like (`snapshot`) or what changed since it last said (`delta`): the page
renders from the first, and a live view will stream the second. Both have one shape:

    source      what was recorded: file, kind, dialect, mode, session id, tools
    duration    seconds from the first frame to the last (or the end line)
    frames      [[t, direction, text, binary], ...]: every frame but pure audio ones, audio payloads
                elided (`binary` is 1 for a binary WebSocket frame)
    events      {id: event}: responses, tool calls, the relay's own requests, anomalies, the words
                said; each with its lane, start `t0`, end `t1` (None while open), label and the
                indexes of its frames
    audio       {"caller": side, "assistant": side}: the page's audio encoding, rate, segments
                (where on the time axis each stretch of audio played), levels, and a note when
                there is nothing to play
    summary     duration, turns, responses, calls per tool (count, errors, p50/max handler ms),
                errors, anomalies

The model reads what the recording shows, without running an engine: which response the relay
asked for is in its `metadata` (`relay`: `follow_up` or `filler`, `relay_event`, `call_ids`), its
own frames carry event ids with the recording's `id_prefix`, and a call the client never saw has
no frame toward the client.
"""

from __future__ import annotations

import base64
import bisect
import json
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

from relay.dialects.base import canonical_type
from relay.dialects.gemini import field as gemini_field
from relay.dialects.gemini import is_gemini_message
from relay.engine.sequencer import META_CALLS, META_EVENT, META_KIND
from relay.inspector.audio import (
    DEFAULT_MAX_RATE,
    GEMINI_INPUT,
    GEMINI_OUTPUT,
    PCM16_24K,
    AudioFormat,
    SideAudio,
    mime_format,
    openai_format,
)
from relay.recording import Frame, Recording

MODEL_VERSION = 1

CLIENT_IN = "client>relay"
UPSTREAM_OUT = "relay>upstream"
UPSTREAM_IN = "upstream>relay"
CLIENT_OUT = "relay>client"

LANES = (
    ("caller", "caller audio"),
    ("assistant", "assistant audio"),
    ("user_words", "user said"),
    ("assistant_words", "assistant said"),
    ("responses", "responses"),
    ("calls", "tool calls"),
    ("relay", "fillers and follow-ups"),
    ("hidden", "hidden calls"),
    ("anomalies", "anomalies"),
    ("divergences", "divergences"),
)

_AUDIO_IN_TYPES = frozenset({"input_audio_buffer.append"})
_AUDIO_OUT_TYPES = frozenset({"response.output_audio.delta"})
_OUTPUT_DELTAS = frozenset({"response.output_audio.delta", "response.output_text.delta",
                            "response.output_audio_transcript.delta"})
_ASSISTANT_TEXT = {
    "response.output_text.delta": "delta", "response.output_audio_transcript.delta": "delta",
    "response.output_text.done": "text", "response.output_audio_transcript.done": "transcript",
}
_ELIDED = "<{} bytes of audio elided>"


def recording_dialect(header: dict[str, Any] | None, first_event: Any) -> str:
    """The recording's dialect: its header's, else `gemini` when its first event is a Gemini
    message, else `openai`. (The one guess in the inspector; the reader will know it soon.)"""
    named = (header or {}).get("dialect")
    if isinstance(named, str) and named:
        return named
    return "gemini" if is_gemini_message(first_event) else "openai"


@dataclass
class _Call:
    event: dict[str, Any]
    ready: float | None = None
    output_t: float | None = None
    answer_response: str | None = None
    seen_by_client: bool = False


@dataclass
class _Response:
    event: dict[str, Any]
    first_output: float | None = None
    call_ids: list[str] = field(default_factory=list)


class SessionModel:
    """Builds the inspector's model from frames fed in order. See the module docstring."""

    def __init__(
        self,
        *,
        name: str = "session",
        header: dict[str, Any] | None = None,
        kind: str = "relay",
        max_audio_rate: int = DEFAULT_MAX_RATE,
        embed_audio: bool = True,
        strict: bool = False,
    ) -> None:
        self.strict = strict
        self.header = header or {}
        self.kind = kind
        self.name = name
        self.dialect: str | None = None
        self.gemini = False
        self.id_prefix = self.header.get("id_prefix") if isinstance(self.header.get("id_prefix"), str) else None
        self.relay_tools = {t for t in self.header.get("tools") or () if isinstance(t, str)}
        self.record_audio = self.header.get("record_audio")
        self.embed_audio = embed_audio
        self.duration = 0.0
        self.frames: list[list[Any]] = []
        self.events: dict[str, dict[str, Any]] = {}
        self.warnings: list[str] = []
        self.end: dict[str, Any] | None = None
        self.audio_frames = 0
        self.frame_count = 0
        self.audio = {
            "caller": SideAudio("caller", max_rate=max_audio_rate, keep_data=embed_audio),
            "assistant": SideAudio("assistant", max_rate=max_audio_rate, keep_data=embed_audio),
        }
        self._caller_direction: str | None = None
        self._formats: dict[str, AudioFormat | None] = {"input": None, "output": None}
        self._formats_confirmed = False
        self._has_client = False
        self._calls: dict[str, _Call] = {}
        self._responses: dict[str, _Response] = {}
        self._items_text: dict[str, dict[str, Any]] = {}      # item id -> words event
        self._relay_creates: dict[str, dict[str, Any]] = {}   # relay event id -> relay-lane event
        self._relay_frames: dict[str, str] = {}               # relay event id -> event it belongs to
        self._client_creates: list[dict[str, Any]] = []       # client creates not yet forwarded
        self._unanswered_outputs: list[str] = []              # calls whose output awaits a response
        self._counters: dict[str, int] = {}
        self._user_turn: dict[str, Any] | None = None         # VAD turn awaiting its item
        self._gemini_turn: _Response | None = None
        self._gemini_open_words: dict[str, dict[str, Any] | None] = {"user": None, "assistant": None}
        self._dirty: set[str] = set()
        self._sent_frames = 0
        self._sent_audio: dict[str, tuple[int, int, int]] = {"caller": (0, 0, 0), "assistant": (0, 0, 0)}
        self._extra: dict[str, Any] = {}

    # ==== feeding ====================================================================
    def feed(self, frame: Frame) -> None:
        """Take the next frame of the session. A frame the model cannot make sense of becomes a
        warning (the page still opens) unless the model is `strict` (tests)."""
        try:
            self._feed(frame)
        except Exception as exc:
            if self.strict:
                raise
            self.warnings.append(f"line {frame.line_no}: the inspector could not read this frame "
                                 f"({type(exc).__name__}: {exc})")

    def _feed(self, frame: Frame) -> None:
        self.frame_count += 1
        t = frame.t
        if t > self.duration:
            self.duration = t
        event = frame.event
        binary = False
        if event is None and frame.binary is not None:
            event = _json_object(frame.binary)
            binary = event is not None
        if frame.direction in (CLIENT_IN, CLIENT_OUT):
            self._has_client = True
        if self.dialect is None and (event is not None or self.header):
            self.dialect = recording_dialect(self.header, event)
            self.gemini = self.dialect == "gemini"
        if event is None:
            index = self._store(frame, None)
            if frame.direction in (UPSTREAM_IN, CLIENT_IN):
                what = "text" if frame.raw is not None else "binary"
                source = "the upstream" if frame.direction == UPSTREAM_IN else "the client"
                self._anomaly(t, f"{source} sent a {what} frame that is not a JSON object",
                              source="upstream" if frame.direction == UPSTREAM_IN else "client",
                              frames=[index], error=False)
            return
        if self.gemini:
            self._gemini(frame, event, binary)
        else:
            self._openai(frame, event)

    def finish(self, end: dict[str, Any] | None, warnings: Iterable[str] = ()) -> None:
        """The recording is over: its end line (if any) and the reader's warnings."""
        self.end = end
        self.warnings.extend(warnings)
        if end is not None:
            if end.get("failed"):
                self._anomaly(self.duration, f"the recording failed: {end.get('failure')} "
                              f"({end.get('lost_frames')} frames lost)", source="recording")
            reason = str(end.get("reason") or "")
            if reason.startswith("error"):
                self._anomaly(self.duration, f"the session ended with {reason}", source="relay")
        for call in self._calls.values():
            event = call.event
            if event["outcome"] in ("pending", "running"):
                event["outcome"] = "unanswered"
                self._touch(event)

    def add_divergence(self, t: float, label: str, *, diff: str = "", recorded: Any = None, produced: Any = None,
                       related: str | None = None) -> dict[str, Any]:
        """A difference between the recording and a replay of it, marked at `t`."""
        event = self._event(self._new_id("divergence"), "divergences", "divergence", t, label, diff=diff,
                            recorded=recorded, produced=produced, related=related)
        event["t1"] = event["t0"]
        return event

    def call_event(self, call_id: str) -> dict[str, Any] | None:
        call = self._calls.get(call_id)
        return call.event if call is not None else None

    def set_extra(self, key: str, value: Any) -> None:
        """Extra top-level data for the page (the replay's verdict)."""
        self._extra[key] = value

    # ==== frames =====================================================================
    def _store(self, frame: Frame, event: dict[str, Any] | None, *, elided: dict[str, Any] | None = None) -> int:
        if event is not None:
            text = json.dumps(elided if elided is not None else event, ensure_ascii=False, separators=(",", ":"))
        elif frame.raw is not None:
            text = frame.raw
        elif frame.binary is not None:
            text = f"<binary frame, {len(frame.binary)} bytes, not JSON>"
        else:
            text = ""
        self.frames.append([round(frame.t, 6), frame.direction, text, 1 if frame.binary is not None else 0])
        return len(self.frames) - 1

    def _new_id(self, prefix: str) -> str:
        number = self._counters.get(prefix, 0) + 1
        self._counters[prefix] = number
        return f"{prefix}:{number}"

    def _event(self, event_id: str, lane: str, kind: str, t0: float, label: str, **fields: Any) -> dict[str, Any]:
        event = {"id": event_id, "lane": lane, "kind": kind, "t0": round(t0, 6), "t1": None,
                 "label": label, "frames": [], **fields}
        self.events[event_id] = event
        self._dirty.add(event_id)
        return event

    def _touch(self, event: dict[str, Any], frame_index: int | None = None) -> None:
        frames = event["frames"]
        if frame_index is not None:
            if not frames or frames[-1] < frame_index:
                frames.append(frame_index)
            elif frame_index not in frames:
                bisect.insort(frames, frame_index)
        self._dirty.add(event["id"])

    def _anomaly(self, t: float, message: str, *, source: str, frames: list[int] = (),  # type: ignore[assignment]
                 related: str | None = None, error: bool = True) -> dict[str, Any]:
        """Something off in the session; `error` when it is an error (an error event, a refusal,
        a failed response or recording), which the summary counts."""
        event = self._event(self._new_id("anomaly"), "anomalies", "anomaly", t, message,
                            source=source, related=related, error=error)
        event["t1"] = event["t0"]
        event["frames"] = list(frames)
        return event

    def _ours(self, event: dict[str, Any]) -> bool:
        event_id = event.get("event_id")
        return bool(self.id_prefix) and isinstance(event_id, str) and event_id.startswith(f"{self.id_prefix}_e")

    # ==== OpenAI family ==============================================================
    def _openai(self, frame: Frame, event: dict[str, Any]) -> None:
        t = frame.t
        direction = frame.direction
        raw_type = event.get("type")
        event_type = canonical_type(raw_type) if isinstance(raw_type, str) else ""
        if direction == UPSTREAM_IN and self._client_creates:
            for pending in self._client_creates:
                if pending["forwarded"] is None:
                    pending["upstream_since"] += 1
        if event_type in _AUDIO_IN_TYPES:
            self.audio_frames += 1
            if self._caller_direction is None and direction in (CLIENT_IN, UPSTREAM_OUT):
                self._caller_direction = direction
            if direction == self._caller_direction:
                self._add_audio("caller", t, self._format("input", PCM16_24K), event.get("audio"), frame.audio_dropped)
            return
        if event_type in _AUDIO_OUT_TYPES:
            self.audio_frames += 1
            if direction == UPSTREAM_IN:
                self._add_audio("assistant", t, self._format("output", PCM16_24K), event.get("delta"),
                                frame.audio_dropped)
                response = self._responses.get(str(event.get("response_id")))
                if response is not None and response.first_output is None:
                    response.first_output = t
            return
        index = self._store(frame, event, elided=_elide_openai(event))
        handler = {
            UPSTREAM_IN: self._openai_upstream, UPSTREAM_OUT: self._openai_relay_sent,
            CLIENT_IN: self._openai_client, CLIENT_OUT: self._openai_to_client,
        }.get(direction)
        if handler is not None:
            handler(t, event_type, event, index)

    def _format(self, side: str, default: AudioFormat) -> AudioFormat:
        return self._formats[side] or default

    def _add_audio(self, side: str, t: float, fmt: AudioFormat, payload: Any, dropped_chars: int) -> None:
        data: bytes | None = None
        if isinstance(payload, str) and payload:
            try:
                data = base64.b64decode(payload)
            except ValueError:
                data = None
        if data:
            self.audio[side].add(t, fmt, data)
        elif dropped_chars:
            self.audio[side].add(t, fmt, None, dropped_chars * 3 // 4)

    def _session_formats(self, session: Any, confirmed: bool) -> None:
        if confirmed:
            self._formats_confirmed = True
        elif self._formats_confirmed:
            return
        for side in ("input", "output"):
            found = openai_format(session, side)  # type: ignore[arg-type]
            if found is not None:
                self._formats[side] = found

    # -- upstream -> relay
    def _openai_upstream(self, t: float, event_type: str, event: dict[str, Any], index: int) -> None:
        if event_type in ("session.created", "session.updated"):
            self._session_formats(event.get("session"), confirmed=True)
            return
        if event_type == "input_audio_buffer.speech_started":
            self.audio["assistant"].restart()
            turn = self._event(self._new_id("user"), "user_words", "words", t, "(speech, no transcript)", role="user",
                               text="", item_id=event.get("item_id"))
            self._touch(turn, index)
            self._user_turn = turn
            if isinstance(event.get("item_id"), str):
                self._items_text[event["item_id"]] = turn
            return
        if event_type in ("input_audio_buffer.speech_stopped", "input_audio_buffer.committed"):
            turn = self._items_text.get(str(event.get("item_id"))) or self._user_turn
            if turn is not None:
                if turn["t1"] is None or event_type == "input_audio_buffer.speech_stopped":
                    turn["t1"] = round(t, 6)
                if isinstance(event.get("item_id"), str):
                    turn["item_id"] = event["item_id"]
                    self._items_text[event["item_id"]] = turn
                self._touch(turn, index)
            return
        if event_type in ("conversation.item.added", "conversation.item.done", "conversation.item.retrieved"):
            self._item(t, event.get("item"), index, event.get("response_id"))
            return
        if event_type.startswith("conversation.item.input_audio_transcription."):
            turn = self._user_words(t, event.get("item_id"), index)
            if event_type.endswith(".delta") and isinstance(event.get("delta"), str):
                turn["text"] += event["delta"]
            elif event_type.endswith(".completed") and isinstance(event.get("transcript"), str):
                turn["text"] = event["transcript"]
            elif event_type.endswith(".failed"):
                turn["text"] = turn["text"] or "(transcription failed)"
            turn["label"] = turn["text"] or turn["label"]
            return
        if event_type == "conversation.item.truncated":
            self.audio["assistant"].restart()
            words = self._items_text.get(str(event.get("item_id")))
            if words is not None:
                words["truncated_ms"] = event.get("audio_end_ms")
                self._touch(words, index)
            return
        if event_type == "response.created":
            self._response_created(t, event.get("response"), index)
            return
        if event_type == "response.done":
            self._response_done(t, event.get("response"), index)
            return
        if event_type in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item")
            self._item(t, item, index, event.get("response_id"))
            if (event_type == "response.output_item.done" and isinstance(item, dict)
                    and item.get("type") == "function_call"):
                self._call_ready(t, item.get("call_id"), item.get("arguments"), index)
            self._link_response(event.get("response_id"), index)
            return
        if event_type in ("response.function_call_arguments.delta", "response.function_call_arguments.done"):
            call = self._call(t, event.get("call_id"), event.get("name"), event.get("response_id"), index)
            if call is not None and event_type.endswith(".done"):
                self._call_ready(t, event.get("call_id"), event.get("arguments"), index)
            elif call is not None and isinstance(event.get("delta"), str) and call.ready is None:
                call.event["arguments"] += event["delta"]
            self._link_response(event.get("response_id"), index)
            return
        if event_type in _ASSISTANT_TEXT:
            self._assistant_words(t, event, _ASSISTANT_TEXT[event_type], index)
            response = self._responses.get(str(event.get("response_id")))
            if response is not None and response.first_output is None and event_type in _OUTPUT_DELTAS:
                response.first_output = t
            self._link_response(event.get("response_id"), index)
            return
        if event_type == "error":
            self._upstream_error(t, event, index)
            return
        if isinstance(event.get("response_id"), str):
            self._link_response(event["response_id"], index)

    def _item(self, t: float, item: Any, index: int, response_id: Any) -> None:
        if not isinstance(item, dict):
            return
        item_type = item.get("type")
        if item_type == "function_call":
            call = self._call(t, item.get("call_id"), item.get("name"), response_id or item.get("response_id"), index)
            if call is not None and item.get("status") == "completed" and isinstance(item.get("arguments"), str):
                if call.ready is None and item.get("arguments"):
                    call.event["arguments"] = item["arguments"]
        elif item_type == "function_call_output":
            call = self._calls.get(str(item.get("call_id")))
            if call is not None:
                if call.event["output"] is None and isinstance(item.get("output"), str):
                    # an event log shows outputs only as the server's echo of them
                    self._call_output(call, t, item.get("output"), item.get("status"), item.get("id"), index)
                else:
                    self._touch(call.event, index)
        elif item_type == "message":
            role = item.get("role")
            item_id = item.get("id")
            text = _item_text(item)
            if role == "user":
                words = self._user_words(t, item_id, index, text)
                if text and not words["text"]:
                    words["text"] = text
                    words["label"] = text
                    if words["t1"] is None:
                        words["t1"] = words["t0"]
            elif role == "assistant" and isinstance(item_id, str):
                words = self._items_text.get(item_id)
                if words is not None:
                    if text and not words["text"]:
                        words["text"] = words["label"] = text
                    self._touch(words, index)
            elif role == "system" and isinstance(item_id, str) and item_id in self._relay_frames:
                self._touch(self.events[self._relay_frames[item_id]], index)

    def _user_words(self, t: float, item_id: Any, index: int, text: str = "") -> dict[str, Any]:
        words = self._items_text.get(str(item_id)) if item_id is not None else None
        if words is None:
            pending = self._user_turn
            if pending is not None and pending.get("item_id") in (None, item_id) \
                    and (not pending["text"] or pending["text"] == text):
                words = self._user_turn
            else:
                words = self._event(self._new_id("user"), "user_words", "words", t, "(no transcript)",
                                    role="user", text="")
            words["item_id"] = item_id
            if isinstance(item_id, str):
                self._items_text[item_id] = words
        self._user_turn = None if words is self._user_turn else self._user_turn
        self._touch(words, index)
        return words

    def _assistant_words(self, t: float, event: dict[str, Any], key: str, index: int) -> None:
        item_id = event.get("item_id")
        words = self._items_text.get(str(item_id))
        if words is None:
            words = self._event(self._new_id("said"), "assistant_words", "words", t, "", role="assistant",
                                text="", item_id=item_id, response_id=event.get("response_id"))
            if isinstance(item_id, str):
                self._items_text[item_id] = words
        value = event.get(key)
        if isinstance(value, str):
            words["text"] = words["text"] + value if key == "delta" else value
            words["label"] = words["text"]
        words["t1"] = round(t, 6)
        self._touch(words, index)

    # -- responses
    def _response_created(self, t: float, data: Any, index: int) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return
        response_id = data["id"]
        existing = self._responses.get(response_id)
        if existing is not None:
            self._touch(existing.event, index)
            return
        metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        kind = metadata.get(META_KIND)
        relay_event = self._relay_creates.get(str(metadata.get(META_EVENT)))
        if kind in ("follow_up", "filler") or relay_event is not None:
            creator = f"relay {str(kind).replace('_', '-')}"
        elif any(c["forwarded"] is not None or self.kind != "relay" for c in self._client_creates):
            creator = "client"
            request = next(c for c in self._client_creates if c["forwarded"] is not None or self.kind != "relay")
            self._client_creates.remove(request)
        else:
            creator = "server"
        out_of_band = "conversation_id" in data and data.get("conversation_id") is None or kind == "filler"
        event = self._event(f"response:{response_id}", "responses", "response", t, f"{response_id} (in progress)",
                            response_id=response_id, status="in_progress", creator=creator,
                            out_of_band=out_of_band, status_details=None)
        self._touch(event, index)
        if creator == "client":
            for asked in (request["index"], request["forwarded"]):
                if asked is not None:
                    self._touch(event, asked)
        response = _Response(event)
        self._responses[response_id] = response
        if relay_event is not None:
            for asked in relay_event["frames"]:
                self._touch(event, asked)
            relay_event["response_id"] = response_id
            relay_event["t1"] = event["t0"]
            self._touch(relay_event, index)
            event["requested_by"] = relay_event["id"]
        if not out_of_band:
            for call_id in self._unanswered_outputs:
                call = self._calls.get(call_id)
                if call is not None and call.answer_response is None:
                    call.answer_response = response_id
                    call.event["answered_by"] = response_id
                    self._touch(call.event)
            self._unanswered_outputs = []

    def _response_done(self, t: float, data: Any, index: int) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return
        response = self._responses.get(data["id"])
        if response is None:
            self._response_created(t, data, index)
            response = self._responses[data["id"]]
        event = response.event
        status = str(data.get("status") or "completed")
        details = data.get("status_details") if isinstance(data.get("status_details"), dict) else None
        event["status"] = status
        event["status_details"] = details
        event["t1"] = round(t, 6)
        reason = _dict(details).get("reason") or _dict(_dict(details).get("error")).get("code")
        event["label"] = f"{status}" + (f" ({reason})" if reason else "")
        if isinstance(data.get("usage"), dict):
            event["usage"] = data["usage"]
        self._touch(event, index)
        for item in data.get("output") if isinstance(data.get("output"), list) else []:
            if isinstance(item, dict) and item.get("type") == "function_call":
                call = self._call(t, item.get("call_id"), item.get("name"), data["id"], index)
                if call is not None and call.ready is None and status == "completed":
                    self._call_ready(t, item.get("call_id"), item.get("arguments"), index)
        if status in ("cancelled", "failed", "incomplete"):
            self.audio["assistant"].restart()
            for call_id in response.call_ids:
                call = self._calls[call_id]
                if call.ready is None and call.event["outcome"] == "pending":
                    call.event["outcome"] = "skipped"
                    call.event["skip_reason"] = f"response {status}"
                    self._touch(call.event)
        if status == "failed":
            error = _dict(_dict(details).get("error"))
            self._anomaly(t, f"response {data['id']} failed: {error.get('code') or error.get('type') or ''} "
                          f"{error.get('message') or ''}".strip(), source="upstream", frames=[index],
                          related=event["id"])

    def _link_response(self, response_id: Any, index: int) -> None:
        response = self._responses.get(str(response_id)) if response_id is not None else None
        if response is not None:
            self._touch(response.event, index)

    # -- calls
    def _call(self, t: float, call_id: Any, name: Any, response_id: Any, index: int) -> _Call | None:
        if not isinstance(call_id, str) or not call_id:
            return None
        call = self._calls.get(call_id)
        if call is None:
            name = name if isinstance(name, str) else ""
            owner = "relay" if name in self.relay_tools else ("client" if self.kind == "relay" else "application")
            event = self._event(f"call:{call_id}", "calls", "call", t, name or "(unnamed call)",
                                call_id=call_id, name=name, arguments="", output=None, status=None,
                                outcome="pending", owner=owner, response_id=response_id if isinstance(response_id, str) else None,
                                output_item_id=None, answered_by=None, handler_ms=None, end_to_end_ms=None,
                                ready_t=None, output_t=None, answers=[])
            call = _Call(event)
            self._calls[call_id] = call
            response = self._responses.get(str(response_id))
            if response is not None:
                response.call_ids.append(call_id)
                response.event.setdefault("call_ids", []).append(call_id)
        event = call.event
        if isinstance(name, str) and name and not event["name"]:
            event["name"] = event["label"] = name
            if name in self.relay_tools:
                event["owner"] = "relay"
        if isinstance(response_id, str) and event["response_id"] is None:
            event["response_id"] = response_id
        self._touch(event, index)
        return call

    def _call_ready(self, t: float, call_id: Any, arguments: Any, index: int) -> None:
        call = self._calls.get(str(call_id))
        if call is None:
            return
        if isinstance(arguments, str) and arguments:
            call.event["arguments"] = arguments
        if call.ready is None:
            call.ready = t
            call.event["ready_t"] = round(t, 6)
            if call.event["outcome"] == "pending":
                call.event["outcome"] = "running"
        self._touch(call.event, index)

    def _call_output(self, call: _Call, t: float, output: Any, status: Any, item_id: Any, index: int) -> None:
        event = call.event
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        event["answers"].append({"t": round(t, 6), "output": text, "status": status})
        if event["output"] is not None:
            self._touch(event, index)
            return
        event["output"] = text
        event["status"] = status if isinstance(status, str) else None
        event["output_item_id"] = item_id if isinstance(item_id, str) else None
        event["t1"] = event["output_t"] = round(t, 6)
        call.output_t = t
        start = call.ready if call.ready is not None else event["t0"]
        event["handler_ms"] = round((t - start) * 1000, 3)
        event["outcome"] = _outcome(text, status)
        self._unanswered_outputs.append(event["call_id"])
        self._touch(event, index)

    def _call_outcome_cancelled(self, call: _Call, t: float, reason: str, index: int) -> None:
        event = call.event
        if event["output"] is None:
            event["outcome"] = "cancelled"
            event["skip_reason"] = reason
            event["t1"] = round(t, 6)
        self._touch(event, index)

    # -- relay -> upstream: the relay's own frames, and what it forwarded
    def _openai_relay_sent(self, t: float, event_type: str, event: dict[str, Any], index: int) -> None:
        ours = self._ours(event)
        if event_type == "session.update":
            self._session_formats(event.get("session"), confirmed=False)
            if ours:
                names = [d.get("name") for d in _dict(event.get("session")).get("tools") or ()
                         if isinstance(d, dict) and d.get("name") in self.relay_tools]
                marker = self._relay_marker(t, "declare", f"declares {', '.join(names) or 'its tools'}", index)
                marker["tools"] = names
            return
        if event_type == "conversation.item.create":
            item = event.get("item") if isinstance(event.get("item"), dict) else {}
            if item.get("type") == "function_call_output":
                call = self._calls.get(str(item.get("call_id")))
                if call is None:
                    call = self._call(t, item.get("call_id"), item.get("name"), None, index)
                if call is not None:
                    if ours:
                        call.event["owner"] = "relay"
                    self._call_output(call, t, item.get("output"), item.get("status"), item.get("id"), index)
                    if isinstance(event.get("event_id"), str):
                        self._relay_frames[event["event_id"]] = call.event["id"]
                return
            if ours and item.get("type") == "message":
                text = _item_text(item)
                marker = self._relay_marker(t, "update", f"streaming update: {text}", index)
                if isinstance(item.get("id"), str):
                    self._relay_frames[item["id"]] = marker["id"]
                return
            return
        if event_type == "response.create":
            response = event.get("response") if isinstance(event.get("response"), dict) else {}
            metadata = response.get("metadata") if isinstance(response.get("metadata"), dict) else {}
            kind = metadata.get(META_KIND)
            if kind in ("follow_up", "filler") or ours:
                call_ids = [c for c in str(metadata.get(META_CALLS) or "").split(",") if c]
                names = [self._calls[c].event["name"] for c in call_ids if c in self._calls]
                what = "follow-up" if kind == "follow_up" else f"filler ({metadata.get('filler') or 'message'})"
                label = f"{what} for {', '.join(names) or 'no call'}"
                marker = self._relay_marker(t, "follow_up" if kind == "follow_up" else "filler", label, index)
                marker["call_ids"] = call_ids
                marker["instructions"] = response.get("instructions")
                marker["response_id"] = None
                marker["t1"] = None
                event_id = metadata.get(META_EVENT) or event.get("event_id")
                if isinstance(event_id, str):
                    self._relay_creates[event_id] = marker
                    self._relay_frames[event_id] = marker["id"]
                for call_id in call_ids:
                    call = self._calls.get(call_id)
                    if call is not None:
                        call.event["follow_up"] = marker["id"]
                        self._touch(call.event, index)
                return
            self._client_create_forwarded(t, index)
            return
        if event_type == "response.cancel" and ours:
            marker = self._relay_marker(t, "cancel", f"cancels {event.get('response_id') or 'the active response'}",
                                        index)
            if isinstance(event.get("event_id"), str):
                self._relay_frames[event["event_id"]] = marker["id"]

    def _relay_marker(self, t: float, kind: str, label: str, index: int) -> dict[str, Any]:
        event = self._event(self._new_id(kind), "relay", kind, t, label)
        event["t1"] = event["t0"]
        self._touch(event, index)
        return event

    def _client_create_forwarded(self, t: float, index: int) -> None:
        pending = next((c for c in self._client_creates if c.get("forwarded") is None), None)
        if pending is None:
            return
        pending["forwarded"] = index
        if pending["upstream_since"]:
            marker = self._event(self._new_id("held"), "relay", "held",
                                 pending["t"], "held the client's response.create until the outputs were in")
            marker["t1"] = round(t, 6)
            marker["frames"] = [pending["index"], index]

    # -- client -> relay
    def _openai_client(self, t: float, event_type: str, event: dict[str, Any], index: int) -> None:
        if event_type == "session.update":
            self._session_formats(event.get("session"), confirmed=False)
        elif event_type == "response.create":
            self._client_creates.append({"t": round(t, 6), "index": index, "upstream_since": 0, "forwarded": None})
            if len(self._client_creates) > 64:
                del self._client_creates[0]
        elif event_type == "conversation.item.create":
            item = event.get("item") if isinstance(event.get("item"), dict) else {}
            if item.get("type") == "function_call_output":
                call = self._calls.get(str(item.get("call_id")))
                if call is not None:
                    if call.event["owner"] == "relay":
                        self._touch(call.event, index)   # the relay refuses it (see its error)
                    else:
                        self._call_output(call, t, item.get("output"), item.get("status"), item.get("id"), index)
            elif item.get("type") == "message" and item.get("role") == "user":
                text = _item_text(item)
                words = self._event(self._new_id("user"), "user_words", "words", t, text or "(user message)",
                                    role="user", text=text, item_id=item.get("id"))
                words["t1"] = words["t0"]
                self._touch(words, index)
                self._user_turn = words if not isinstance(item.get("id"), str) else None
                if isinstance(item.get("id"), str):
                    self._items_text[item["id"]] = words
        elif event_type in ("conversation.item.truncate", "output_audio_buffer.clear"):
            self.audio["assistant"].restart()

    # -- relay -> client
    def _openai_to_client(self, t: float, event_type: str, event: dict[str, Any], index: int) -> None:
        for call_id in _call_ids_in(event):
            call = self._calls.get(call_id)
            if call is not None:
                call.seen_by_client = True
                self._touch(call.event, index)
        response_id = event.get("response_id") or _dict(event.get("response")).get("id")
        if isinstance(response_id, str):
            self._link_response(response_id, index)
        item_id = event.get("item_id") or _dict(event.get("item")).get("id")
        words = self._items_text.get(item_id) if isinstance(item_id, str) else None
        if words is not None:
            self._touch(words, index)
        if event_type == "error":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            if self._ours(event) or not self.id_prefix:
                code = error.get("code") or error.get("type") or "error"
                self._anomaly(t, f"the relay refused a client frame: {code}: {error.get('message')}",
                              source="relay", frames=[index])

    def _upstream_error(self, t: float, event: dict[str, Any], index: int) -> None:
        error = event.get("error") if isinstance(event.get("error"), dict) else {}
        code = error.get("code") or error.get("type") or "error"
        target = error.get("event_id")
        related = self._relay_frames.get(target) if isinstance(target, str) else None
        if related is not None:
            owner = self.events[related]
            message = f"the upstream refused the relay's {owner['kind'].replace('_', '-')}: {code}: {error.get('message')}"
            if owner["lane"] == "relay" and owner["t1"] is None:
                owner["t1"] = round(t, 6)
                owner["refused"] = code
            self._touch(owner, index)
        else:
            message = f"upstream error {code}: {error.get('message')}"
        self._anomaly(t, message, source="upstream", frames=[index], related=related)

    # ==== Gemini Live ================================================================
    def _gemini(self, frame: Frame, event: dict[str, Any], binary: bool) -> None:
        t = frame.t
        direction = frame.direction
        realtime = gemini_field(event, "realtimeInput")
        if isinstance(realtime, dict) and direction in (CLIENT_IN, UPSTREAM_OUT):
            if self._caller_direction is None:
                self._caller_direction = direction
            blobs = _gemini_input_audio(realtime)
            if blobs:
                self.audio_frames += 1
                if direction == self._caller_direction:
                    for blob in blobs:
                        fmt = mime_format(gemini_field(blob, "mimeType"), GEMINI_INPUT)
                        self._add_audio("caller", t, fmt, blob.get("data"), frame.audio_dropped // len(blobs))
                if set(realtime) <= {"audio", "mediaChunks", "media_chunks"}:
                    return
        content = gemini_field(event, "serverContent")
        audio_only = False
        if isinstance(content, dict) and direction == UPSTREAM_IN:
            blobs = _gemini_output_audio(content)
            if blobs:
                self.audio_frames += 1
                turn = self._gemini_turn_of(t)
                if turn.first_output is None:
                    turn.first_output = t
                for blob in blobs:
                    fmt = mime_format(gemini_field(blob, "mimeType"), GEMINI_OUTPUT)
                    self._add_audio("assistant", t, fmt, blob.get("data"), frame.audio_dropped // len(blobs))
                parts = gemini_field(gemini_field(content, "modelTurn"), "parts") or []
                audio_only = set(content) <= {"modelTurn", "model_turn"} and all(
                    isinstance(p, dict) and gemini_field(p, "inlineData") is not None for p in parts)
        elif isinstance(content, dict) and direction == CLIENT_OUT:
            if _gemini_output_audio(content):
                return     # the client's copy of the audio
        if audio_only:
            return
        index = self._store(frame, event, elided=_elide_gemini(event))
        if direction == UPSTREAM_IN:
            self._gemini_upstream(t, event, index)
        elif direction in (UPSTREAM_OUT, CLIENT_IN):
            self._gemini_sent(t, event, index, relay=direction == UPSTREAM_OUT)
        elif direction == CLIENT_OUT:
            for call_id in _gemini_call_ids(event):
                call = self._calls.get(call_id)
                if call is not None and not call.seen_by_client:
                    call.seen_by_client = True
                    self._touch(call.event)

    def _gemini_turn_of(self, t: float) -> _Response:
        if self._gemini_turn is None:
            response_id = self._new_id("turn")
            event = self._event(f"response:{response_id}", "responses", "response", t, "model turn (in progress)",
                                response_id=response_id, status="in_progress", creator="model",
                                out_of_band=False, status_details=None)
            self._gemini_turn = _Response(event)
            self._responses[response_id] = self._gemini_turn
            for call_id in self._unanswered_outputs:
                call = self._calls.get(call_id)
                if call is not None and call.answer_response is None:
                    call.answer_response = response_id
                    call.event["answered_by"] = response_id
                    self._touch(call.event)
            self._unanswered_outputs = []
        return self._gemini_turn

    def _gemini_upstream(self, t: float, event: dict[str, Any], index: int) -> None:
        content = gemini_field(event, "serverContent")
        if isinstance(content, dict):
            turn = self._gemini_turn_of(t)
            self._touch(turn.event, index)
            parts = gemini_field(gemini_field(content, "modelTurn"), "parts") or []
            for part in parts if isinstance(parts, list) else []:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    self._gemini_words("assistant", t, part["text"], index, turn)
            for key, role in (("inputTranscription", "user"), ("outputTranscription", "assistant")):
                text = gemini_field(gemini_field(content, key), "text")
                if isinstance(text, str):
                    self._gemini_words(role, t, text, index, turn)
            if gemini_field(content, "interrupted"):
                self.audio["assistant"].restart()
                self._end_gemini_turn(t, "interrupted", index)
            elif gemini_field(content, "turnComplete"):
                self._end_gemini_turn(t, "completed", index)
            return
        tool_call = gemini_field(event, "toolCall")
        if isinstance(tool_call, dict):
            turn = self._gemini_turn_of(t)
            self._touch(turn.event, index)
            for call_data in gemini_field(tool_call, "functionCalls") or []:
                if not isinstance(call_data, dict):
                    continue
                call = self._call(t, call_data.get("id"), call_data.get("name"), turn.event["response_id"], index)
                if call is not None:
                    arguments = call_data.get("args")
                    self._call_ready(t, call_data.get("id"), json.dumps(arguments if arguments is not None else {},
                                                                        ensure_ascii=False), index)
            return
        cancellation = gemini_field(event, "toolCallCancellation")
        if isinstance(cancellation, dict):
            for call_id in gemini_field(cancellation, "ids") or []:
                call = self._calls.get(str(call_id))
                if call is not None:
                    self._call_outcome_cancelled(call, t, "cancelled by the server (toolCallCancellation)", index)
            return
        if gemini_field(event, "goAway") is not None:
            self._anomaly(t, "the server announced it will close the session (goAway)", source="upstream",
                          frames=[index], error=False)

    def _gemini_words(self, role: str, t: float, text: str, index: int, turn: _Response | None) -> None:
        words = self._gemini_open_words[role]
        if words is None:
            words = self._event(self._new_id("user" if role == "user" else "said"),
                                "user_words" if role == "user" else "assistant_words", "words", t, "",
                                role=role, text="", response_id=turn.event["response_id"] if turn else None)
            self._gemini_open_words[role] = words
        words["text"] += text
        words["label"] = words["text"]
        words["t1"] = round(t, 6)
        if role == "assistant" and turn is not None and turn.first_output is None:
            turn.first_output = t
        self._touch(words, index)

    def _end_gemini_turn(self, t: float, status: str, index: int) -> None:
        turn = self._gemini_turn
        self._gemini_open_words = {"user": None, "assistant": None}
        if turn is None:
            return
        turn.event["status"] = status
        turn.event["label"] = status
        turn.event["t1"] = round(t, 6)
        self._touch(turn.event, index)
        self._gemini_turn = None

    def _gemini_sent(self, t: float, event: dict[str, Any], index: int, *, relay: bool) -> None:
        setup = gemini_field(event, "setup")
        if isinstance(setup, dict):
            if relay:
                names = []
                for tool_entry in gemini_field(setup, "tools") or []:
                    for declaration in gemini_field(tool_entry, "functionDeclarations") or []:
                        if isinstance(declaration, dict) and declaration.get("name") in self.relay_tools:
                            names.append(declaration["name"])
                if names:
                    marker = self._relay_marker(t, "declare", f"declares {', '.join(names)}", index)
                    marker["tools"] = names
            return
        client_content = gemini_field(event, "clientContent")
        if isinstance(client_content, dict) and not relay:
            for turn_data in gemini_field(client_content, "turns") or []:
                if isinstance(turn_data, dict) and turn_data.get("role", "user") == "user":
                    text = " ".join(p["text"] for p in turn_data.get("parts") or ()
                                    if isinstance(p, dict) and isinstance(p.get("text"), str))
                    if text:
                        words = self._event(self._new_id("user"), "user_words", "words", t, text, role="user", text=text)
                        words["t1"] = words["t0"]
                        self._touch(words, index)
            return
        realtime = gemini_field(event, "realtimeInput")
        if isinstance(realtime, dict) and not relay and isinstance(realtime.get("text"), str):
            words = self._event(self._new_id("user"), "user_words", "words", t, realtime["text"], role="user",
                                text=realtime["text"])
            words["t1"] = words["t0"]
            self._touch(words, index)
            return
        tool_response = gemini_field(event, "toolResponse")
        if isinstance(tool_response, dict):
            for answer in gemini_field(tool_response, "functionResponses") or []:
                if not isinstance(answer, dict):
                    continue
                call = self._calls.get(str(answer.get("id")))
                if call is None:
                    continue
                if not relay:
                    call.event["owner"] = "client" if call.event["name"] not in self.relay_tools else "relay"
                    if self.kind == "relay":
                        self._touch(call.event, index)
                        continue   # its forward (relay>upstream) is the answer that counted
                body = answer.get("response")
                text = _gemini_answer_text(body)
                status = "incomplete" if gemini_field(answer, "willContinue") else "completed"
                self._call_output(call, t, text, status, None, index)
                call.event["answers"][-1]["will_continue"] = bool(gemini_field(answer, "willContinue"))
                scheduling = gemini_field(answer, "scheduling")
                if scheduling is not None:
                    call.event["answers"][-1]["scheduling"] = scheduling
                if call.event["outcome"] not in ("error",) and isinstance(body, dict) and "error" in body:
                    call.event["outcome"] = "error"

    # ==== the model ==================================================================
    def snapshot(self, *, audio_data: bool = True) -> dict[str, Any]:
        """The whole model (audio bytes included as base64 unless `audio_data` is False)."""
        self._dirty.clear()
        self._sent_frames = len(self.frames)
        self._refresh()
        audio = {}
        for side, track in self.audio.items():
            audio[side] = self._audio_part(track, 0, 0, 0, audio_data)
            self._sent_audio[side] = (len(track.segments), len(track.levels), len(track.data))
        return {
            "version": MODEL_VERSION,
            "source": self._source(),
            "lanes": [{"id": lane, "label": label} for lane, label in LANES],
            "duration": round(self._duration(), 6),
            "frames": list(self.frames),
            "events": list(self.events.values()),
            "audio": audio,
            "audio_note": self.audio_note(),
            "summary": self.summary(),
            "warnings": list(self.warnings),
            **self._extra,
        }

    def delta(self) -> dict[str, Any]:
        """What changed since the last `snapshot` or `delta`, in the same shape: new frames, new
        and changed events, the audio added (segments and levels from the first one changed)."""
        self._refresh()
        frames = self.frames[self._sent_frames:]
        self._sent_frames = len(self.frames)
        events = [self.events[event_id] for event_id in sorted(self._dirty, key=_event_order) if event_id in self.events]
        self._dirty.clear()
        audio = {}
        for side, track in self.audio.items():
            segments_sent, levels_sent, data_sent = self._sent_audio[side]
            audio[side] = self._audio_part(track, max(segments_sent - 1, 0), max(levels_sent - 1, 0), data_sent, True)
            self._sent_audio[side] = (len(track.segments), len(track.levels), len(track.data))
        return {"version": MODEL_VERSION, "source": self._source(), "duration": round(self._duration(), 6),
                "frames": frames, "frames_from": self._sent_frames - len(frames), "events": events,
                "audio": audio, "audio_note": self.audio_note(), "summary": self.summary(), **self._extra}

    def audio_bytes(self, side: str) -> bytes:
        """A side's audio as the page carries it (8-bit mu-law at `audio[side].rate`)."""
        return bytes(self.audio[side].data)

    def _audio_part(self, track: SideAudio, segments_from: int, levels_from: int, data_from: int,
                    with_data: bool) -> dict[str, Any]:
        part: dict[str, Any] = {
            "encoding": "mulaw",
            "rate": track.rate,
            "source": track.source.describe() if track.source else None,
            "samples": track.samples,
            "recorded_seconds": round(track.recorded_seconds, 6),
            "playable": bool(track.data) and self.embed_audio,
            "segments_from": segments_from,
            "segments": [list(s) for s in track.segments[segments_from:]],
            "levels_from": levels_from,
            "levels": base64.b64encode(bytes(track.levels[levels_from:])).decode("ascii"),
        }
        if with_data:
            part["data_from"] = data_from
            part["data"] = base64.b64encode(bytes(track.data[data_from:])).decode("ascii") if self.embed_audio else ""
        return part

    def audio_note(self) -> str | None:
        """Why a side has no player, or None when both sides that had audio can be played."""
        dropped = sum(track.dropped_chunks for track in self.audio.values())
        if self.record_audio == "drop" or (dropped and not any(track.data for track in self.audio.values())):
            return ("no audio to play: this session was recorded with --record-audio drop, which keeps "
                    "the events but not the audio; the audio lanes show when audio flowed")
        if not any(track.chunks for track in self.audio.values()):
            if self.kind == "event-log":
                return "no audio to play: this event log holds no audio frames"
            return "no audio to play: no audio crossed the relay in this session"
        if not self.embed_audio:
            return "no audio to play: the page was made without its audio (--no-audio)"
        return None

    def snapshot_duration(self) -> float:
        return round(self._duration(), 6)

    def _duration(self) -> float:
        end_t = max((t for t in (self.duration,) if t is not None), default=0.0)
        for track in self.audio.values():
            if track.segments and track.rate:
                last = track.segments[-1]
                end_t = max(end_t, last[0] + last[2] / track.rate)
        return end_t

    def _source(self) -> dict[str, Any]:
        header = self.header
        return {
            "name": self.name,
            "kind": self.kind,
            "dialect": self.dialect or recording_dialect(header, None),
            "mode": header.get("mode") or ("event log" if self.kind == "event-log" else None),
            "session_id": header.get("session_id"),
            "started_at": header.get("started_at"),
            "upstream": header.get("upstream"),
            "tools": sorted(self.relay_tools),
            "record_audio": self.record_audio,
            "end": self.end,
            "frames": self.frame_count,
            "audio_frames": self.audio_frames,
        }

    def _refresh(self) -> None:
        """Derived facts that depend on frames seen later: end-to-end times, hidden calls."""
        hiding = self._has_client and self.kind == "relay"
        for call in self._calls.values():
            event = call.event
            answer = self._responses.get(str(call.answer_response)) if call.answer_response else None
            start = call.ready if call.ready is not None else event["t0"]
            if answer is not None:
                reached = answer.first_output if answer.first_output is not None else None
                end_to_end = None if reached is None else round((reached - start) * 1000, 3)
                if end_to_end != event["end_to_end_ms"]:
                    event["end_to_end_ms"] = end_to_end
                    self._dirty.add(event["id"])
            hidden_id = f"hidden:{event['call_id']}"
            hidden = hiding and event["owner"] == "relay" and not call.seen_by_client
            existing = self.events.get(hidden_id)
            if hidden:
                if existing is None:
                    existing = self._event(hidden_id, "hidden", "hidden", event["t0"],
                                           f"{event['name']}: the client never saw this call", call=event["id"])
                if existing["t1"] != event["t1"] or existing["frames"] != event["frames"] or existing.get("gone"):
                    existing["t1"] = event["t1"]
                    existing["frames"] = list(event["frames"])
                    existing["gone"] = False
                    self._dirty.add(hidden_id)
            elif existing is not None and not existing.get("gone"):
                existing["gone"] = True
                self._dirty.add(hidden_id)

    def summary(self) -> dict[str, Any]:
        tools: dict[str, dict[str, Any]] = {}
        for call in self._calls.values():
            event = call.event
            entry = tools.setdefault(event["name"] or "(unnamed)", {"calls": 0, "errors": 0, "unanswered": 0,
                                                                   "latencies": []})
            entry["calls"] += 1
            if event["outcome"] in ("error", "timeout"):
                entry["errors"] += 1
            if event["outcome"] in ("unanswered", "pending", "running"):
                entry["unanswered"] += 1
            if event["handler_ms"] is not None:
                entry["latencies"].append(event["handler_ms"])
        for entry in tools.values():
            latencies = entry.pop("latencies")
            entry["p50_ms"] = round(statistics.median(latencies), 3) if latencies else None
            entry["max_ms"] = round(max(latencies), 3) if latencies else None
        events = self.events.values()
        responses = [e for e in events if e["kind"] == "response"]
        anomalies = [e for e in events if e["kind"] == "anomaly"]
        errors = (sum(1 for e in anomalies if e.get("error"))
                  + sum(1 for c in self._calls.values() if c.event["outcome"] in ("error", "timeout")))
        return {
            "duration": round(self._duration(), 6),
            "turns": sum(1 for e in events if e["kind"] == "words" and e.get("role") == "user"),
            "responses": len(responses),
            "responses_by_status": _count(e["status"] for e in responses),
            "calls": len(self._calls),
            "tools": dict(sorted(tools.items())),
            "errors": errors,
            "anomalies": len(anomalies),
            "frames": self.frame_count,
        }


# ==== building from a recording =========================================================
def build_model(recording: Recording, *, max_audio_rate: int = DEFAULT_MAX_RATE,
                embed_audio: bool = True, release: bool = False, strict: bool = False) -> SessionModel:
    """The model of a whole recording. With `release`, frames are dropped from the recording as
    they are read (an hour of audio is hundreds of megabytes of frames)."""
    model = SessionModel(name=recording.path.name, header=recording.header, kind=recording.kind,
                         max_audio_rate=max_audio_rate, embed_audio=embed_audio, strict=strict)
    frames = recording.frames
    for position in range(len(frames)):
        model.feed(frames[position])
        if release:
            frames[position] = None  # type: ignore[call-overload]
    model.finish(recording.end, recording.warnings)
    return model


# ==== helpers ===========================================================================
def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _event_order(event_id: str) -> tuple[str, int]:
    prefix, _, number = event_id.partition(":")
    return (prefix, int(number)) if number.isdigit() else (event_id, 0)


def _count(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def _item_text(item: dict[str, Any]) -> str:
    parts = []
    for part in item.get("content") or ():
        if isinstance(part, dict):
            text = part.get("text") if isinstance(part.get("text"), str) else part.get("transcript")
            if isinstance(text, str) and text:
                parts.append(text)
    return " ".join(parts)


def _outcome(output: str, status: Any) -> str:
    try:
        value = json.loads(output)
    except ValueError:
        value = None
    if isinstance(value, dict) and set(value) == {"error"}:
        message = str(value["error"])
        if message.startswith("timed out"):
            return "timeout"
        if message.startswith("cancelled"):
            return "cancelled"
        return "error"
    return "ok" if status in (None, "completed") else str(status)


def _call_ids_in(event: dict[str, Any]) -> list[str]:
    found = []
    if isinstance(event.get("call_id"), str):
        found.append(event["call_id"])
    item = event.get("item")
    if isinstance(item, dict) and isinstance(item.get("call_id"), str):
        found.append(item["call_id"])
    response = event.get("response")
    if isinstance(response, dict):
        for output in response.get("output") or ():
            if isinstance(output, dict) and isinstance(output.get("call_id"), str):
                found.append(output["call_id"])
    return found


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
        return {**blob, "data": _ELIDED.format(len(data) * 3 // 4)}
    return blob


def _elide_openai(event: dict[str, Any]) -> dict[str, Any] | None:
    """The event with its audio payloads replaced by a note (None: it holds none)."""
    event_type = event.get("type")
    if isinstance(event_type, str) and event_type.startswith("conversation.item."):
        item = event.get("item")
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("audio") for p in content):
            parts = [{**p, "audio": _ELIDED.format(len(p["audio"]) * 3 // 4)}
                     if isinstance(p, dict) and isinstance(p.get("audio"), str) and p["audio"] else p
                     for p in content]
            return {**event, "item": {**item, "content": parts}}
    return None


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
