"""The inspector's reading of an item-based wire, the OpenAI family's (GA, beta, Azure, Foundry,
xAI, Voice Live): a conversation of items, and responses a client or the relay asks for. Each frame
of a recording goes into the shared model (relay/inspector/model.py): words, responses, calls and their
outputs, the relay's own requests (follow-ups, fillers, a client's create it held), errors.

Who asked for a response is read from its `metadata` (the relay's `follow_up` or `filler`, and
the event id of its request) or from the client's `response.create` it forwarded; the relay's own
frames carry event ids with the recording's `id_prefix`. `RelayRequests` keeps that lane: the
relay's own requests and the client's creates it held; `OpenAIParser` reads the conversation.
The wire's facts (event names, where audio sits) are the recording's dialect's: frames are read
as the family's typed events (`relay.dialects.openai_codec`), by what they are, not by their names.
"""

from __future__ import annotations

from typing import Any

from relay.dialects import OPENAI, Dialect, OpenAIFamily
from relay.dialects import openai_codec as wire
from relay.dialects.openai import AUDIO_EVENTS, audio_slots
from relay.engine.sequencer import META_CALLS, META_EVENT, META_KIND
from relay.inspector.audio import PCM16_24K, AudioFormat, elided, openai_format
from relay.inspector.building import ModelBuilding, as_dict
from relay.inspector.callbook import TrackedResponse
from relay.recording.format import (
    CLIENT_TO_RELAY,
    RELAY_TO_CLIENT,
    RELAY_TO_UPSTREAM,
    UPSTREAM_TO_RELAY,
    Frame,
)

_OUTPUT_DELTAS = frozenset({wire.TextDelta, wire.AudioTranscriptDelta})
_ASSISTANT_TEXT: dict[type, str] = {
    wire.TextDelta: "delta", wire.AudioTranscriptDelta: "delta",
    wire.TextDone: "text", wire.AudioTranscriptDone: "transcript",
}


class RelayRequests:
    """The relay's lane of an OpenAI-family session: what the relay asked for itself (follow-ups,
    fillers, streaming updates, cancels, its outputs), which frames belong to which of its
    requests (so that a refusal or a response finds its request), and the client's
    `response.create`s, which the relay may hold until the outputs are in."""

    def __init__(self, model: ModelBuilding) -> None:
        self.model = model
        self._creates: dict[str, dict[str, Any]] = {}         # relay event id -> relay-lane event
        self._frames: dict[str, str] = {}                     # relay event or item id -> event it belongs to
        self._client_creates: list[dict[str, Any]] = []       # client creates not yet forwarded

    def ours(self, event: dict[str, Any]) -> bool:
        """Whether the relay wrote this frame (its event id carries the recording's prefix)."""
        event_id = event.get("event_id")
        prefix = self.model.id_prefix
        return bool(prefix) and isinstance(event_id, str) and event_id.startswith(f"{prefix}_e")

    def owner_of(self, frame_id: Any) -> dict[str, Any] | None:
        """The event a relay frame or item (by its id) belongs to, if any."""
        event_id = self._frames.get(frame_id) if isinstance(frame_id, str) else None
        return self.model.events[event_id] if event_id is not None else None

    # -- the client's creates
    def upstream_frame(self) -> None:
        """An upstream frame went by: the client's creates not yet forwarded waited through it."""
        for pending in self._client_creates:
            if pending["forwarded"] is None:
                pending["upstream_since"] += 1

    def client_create(self, t: float, index: int) -> None:
        self._client_creates.append({"t": round(t, 6), "index": index, "upstream_since": 0, "forwarded": None})
        if len(self._client_creates) > 64:
            del self._client_creates[0]

    def _client_create_forwarded(self, t: float, index: int) -> None:
        pending = next((c for c in self._client_creates if c.get("forwarded") is None), None)
        if pending is None:
            return
        pending["forwarded"] = index
        if pending["upstream_since"]:
            marker = self.model.add_event(self.model.new_id("held"), "relay", "held",
                                          pending["t"], "held the client's response.create until the outputs were in")
            marker["t1"] = round(t, 6)
            marker["frames"] = [pending["index"], index]

    # -- who asked for a response
    def claim(self, metadata: dict[str, Any]) -> tuple[str, list[int], dict[str, Any] | None]:
        """Who asked for a response with this `metadata`: its creator's name, the frames of the
        request, and the relay's request marker when the relay asked."""
        kind = metadata.get(META_KIND)
        marker = self._creates.get(str(metadata.get(META_EVENT)))
        if kind in ("follow_up", "filler") or marker is not None:
            return f"relay {str(kind).replace('_', '-')}", list(marker["frames"]) if marker else [], marker
        request = next((c for c in self._client_creates
                        if c["forwarded"] is not None or self.model.kind != "relay"), None)
        if request is not None:
            self._client_creates.remove(request)
            return "client", [i for i in (request["index"], request["forwarded"]) if i is not None], None
        return "server", [], None

    # -- relay -> upstream
    def sent(self, t: float, typed: wire.Event | wire.Unknown, event: dict[str, Any], index: int) -> None:
        """A frame the relay sent upstream: its own requests, or what it forwarded."""
        ours = self.ours(event)
        if isinstance(typed, wire.SessionUpdate):
            if ours:
                names = [d.get("name") for d in as_dict(typed.session).get("tools") or ()
                         if isinstance(d, dict) and d.get("name") in self.model.relay_tools]
                marker = self.model.relay_marker(t, "declare", f"declares {', '.join(names) or 'its tools'}", index)
                marker["tools"] = names
        elif isinstance(typed, wire.ItemCreate):
            self._item_sent(t, event, index, ours)
        elif isinstance(typed, wire.ResponseCreate):
            self._create_sent(t, event, index, ours)
        elif isinstance(typed, wire.ResponseCancel) and ours:
            marker = self.model.relay_marker(t, "cancel", f"cancels {event.get('response_id') or 'the active response'}",
                                             index)
            if isinstance(event.get("event_id"), str):
                self._frames[event["event_id"]] = marker["id"]

    def _item_sent(self, t: float, event: dict[str, Any], index: int, ours: bool) -> None:
        item = event.get("item") if isinstance(event.get("item"), dict) else {}
        if item.get("type") == wire.FUNCTION_CALL_OUTPUT:
            call = self.model.calls.get(str(item.get("call_id")))
            if call is None:
                call = self.model.track_call(t, item.get("call_id"), item.get("name"), None, index)
            if call is not None:
                if ours:
                    call.event["owner"] = "relay"
                self.model.call_output(call, t, item.get("output"), item.get("status"), item.get("id"), index)
                if isinstance(event.get("event_id"), str):
                    self._frames[event["event_id"]] = call.event["id"]
        elif ours and item.get("type") == wire.MESSAGE:
            text = _item_text(item)
            marker = self.model.relay_marker(t, "update", f"streaming update: {text}", index)
            if isinstance(item.get("id"), str):
                self._frames[item["id"]] = marker["id"]

    def _create_sent(self, t: float, event: dict[str, Any], index: int, ours: bool) -> None:
        response = event.get("response") if isinstance(event.get("response"), dict) else {}
        metadata = response.get("metadata") if isinstance(response.get("metadata"), dict) else {}
        kind = metadata.get(META_KIND)
        if kind not in ("follow_up", "filler") and not ours:
            self._client_create_forwarded(t, index)
            return
        call_ids = [c for c in str(metadata.get(META_CALLS) or "").split(",") if c]
        names = [self.model.calls[c].event["name"] for c in call_ids if c in self.model.calls]
        what = "follow-up" if kind == "follow_up" else f"filler ({metadata.get('filler') or 'message'})"
        label = f"{what} for {', '.join(names) or 'no call'}"
        marker = self.model.relay_marker(t, "follow_up" if kind == "follow_up" else "filler", label, index)
        marker["call_ids"] = call_ids
        marker["instructions"] = response.get("instructions")
        marker["response_id"] = None
        marker["t1"] = None
        event_id = metadata.get(META_EVENT) or event.get("event_id")
        if isinstance(event_id, str):
            self._creates[event_id] = marker
            self._frames[event_id] = marker["id"]
        for call_id in call_ids:
            call = self.model.calls.get(call_id)
            if call is not None:
                call.event["follow_up"] = marker["id"]
                self.model.touch(call.event, index)


class OpenAIParser:
    """Reads an OpenAI-family session into `model`, frame by frame, keeping what only this wire
    needs: items' words, the session's audio formats and its responses; the relay's own lane is
    `RelayRequests`'. Events are read by their GA names, in the recording's dialect."""

    def __init__(self, model: ModelBuilding, dialect: Dialect = OPENAI) -> None:
        self.model = model
        self.dialect = dialect if isinstance(dialect, OpenAIFamily) else OPENAI
        self.requests = RelayRequests(model)
        self._formats: dict[str, AudioFormat | None] = {"input": None, "output": None}
        self._formats_confirmed = False
        self._items_text: dict[str, dict[str, Any]] = {}      # item id -> words event
        self._user_turn: dict[str, Any] | None = None         # VAD turn awaiting its item

    def feed(self, frame: Frame, event: dict[str, Any], binary: bool) -> None:
        t = frame.t
        direction = frame.direction
        raw_type = event.get("type")
        event_type = self.dialect.canonical_type(raw_type) if isinstance(raw_type, str) else ""
        if direction == UPSTREAM_TO_RELAY:
            self.requests.upstream_frame()
        audio = AUDIO_EVENTS.get(event_type)
        if audio is not None:
            self._audio(frame, event.get(audio.key), audio.side, event.get("response_id"))
            return
        index = self.model.store(frame, event, elided=elided(event, audio_slots))
        typed = wire.event_of(event, self.dialect)
        if direction == UPSTREAM_TO_RELAY:
            self._upstream(t, typed, event, index)
        elif direction == RELAY_TO_UPSTREAM:
            if isinstance(typed, wire.SessionUpdate):
                self._session_formats(typed.session, confirmed=False)
            self.requests.sent(t, typed, event, index)
        elif direction == CLIENT_TO_RELAY:
            self._client(t, typed, event, index)
        elif direction == RELAY_TO_CLIENT:
            self._to_client(t, typed, event, index)

    # -- audio
    def _audio(self, frame: Frame, data: Any, side: str, response_id: Any) -> None:
        """An audio event: the caller's (as the relay received it, or forwarded it when the
        recording has no client side) or the model's, as the relay received it."""
        model, t, direction = self.model, frame.t, frame.direction
        model.audio_frames += 1
        if side == "input":
            if model.caller_direction is None and direction in (CLIENT_TO_RELAY, RELAY_TO_UPSTREAM):
                model.caller_direction = direction
            if direction == model.caller_direction:
                model.add_audio("caller", t, self._format("input", PCM16_24K), data, frame.audio_dropped)
        elif direction == UPSTREAM_TO_RELAY:
            model.add_audio("assistant", t, self._format("output", PCM16_24K), data, frame.audio_dropped)
            response = model.responses.get(str(response_id))
            if response is not None and response.first_output is None:
                response.first_output = t

    def _format(self, side: str, default: AudioFormat) -> AudioFormat:
        return self._formats[side] or default

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
    def _upstream(self, t: float, typed: wire.Event | wire.Unknown, event: dict[str, Any], index: int) -> None:
        if isinstance(typed, (wire.SessionCreated, wire.SessionUpdated)):
            self._session_formats(typed.session, confirmed=True)
            return
        if isinstance(typed, wire.SpeechStarted):
            self.model.audio["assistant"].restart()
            turn = self.model.add_event(self.model.new_id("user"), "user_words", "words", t, "(speech, no transcript)",
                                        role="user", text="", item_id=typed.item_id)
            self.model.touch(turn, index)
            self._user_turn = turn
            if isinstance(typed.item_id, str):
                self._items_text[typed.item_id] = turn
            return
        if isinstance(typed, (wire.SpeechStopped, wire.InputAudioCommitted)):
            turn = self._items_text.get(str(typed.item_id)) or self._user_turn
            if turn is not None:
                if turn["t1"] is None or isinstance(typed, wire.SpeechStopped):
                    turn["t1"] = round(t, 6)
                if isinstance(typed.item_id, str):
                    turn["item_id"] = typed.item_id
                    self._items_text[typed.item_id] = turn
                self.model.touch(turn, index)
            return
        if isinstance(typed, (wire.ItemAdded, wire.ItemDone, wire.ItemRetrieved)):
            self._item(t, typed.item, index, event.get("response_id"))
            return
        if isinstance(typed, (wire.InputTranscriptionDelta, wire.InputTranscriptionCompleted,
                              wire.InputTranscriptionFailed, wire.InputTranscriptionSegment)):
            turn = self._user_words(t, typed.item_id, index)
            if isinstance(typed, wire.InputTranscriptionDelta) and isinstance(typed.delta, str):
                turn["text"] += typed.delta
            elif isinstance(typed, wire.InputTranscriptionCompleted) and isinstance(typed.transcript, str):
                turn["text"] = typed.transcript
            elif isinstance(typed, wire.InputTranscriptionFailed):
                turn["text"] = turn["text"] or "(transcription failed)"
            turn["label"] = turn["text"] or turn["label"]
            return
        if isinstance(typed, wire.ItemTruncated):
            self.model.audio["assistant"].restart()
            words = self._items_text.get(str(typed.item_id))
            if words is not None:
                words["truncated_ms"] = typed.audio_end_ms
                self.model.touch(words, index)
            return
        if isinstance(typed, wire.ResponseCreated):
            self._response_created(t, typed.response, index)
            return
        if isinstance(typed, wire.ResponseDone):
            self._response_done(t, typed.response, index)
            return
        if isinstance(typed, (wire.OutputItemAdded, wire.OutputItemDone)):
            item = typed.item
            self._item(t, item, index, typed.response_id)
            if (isinstance(typed, wire.OutputItemDone) and isinstance(item, dict)
                    and item.get("type") == wire.FUNCTION_CALL):
                self.model.call_ready(t, item.get("call_id"), item.get("arguments"), index)
            self._link_response(typed.response_id, index)
            return
        if isinstance(typed, (wire.FunctionCallArgumentsDelta, wire.FunctionCallArgumentsDone)):
            call = self.model.track_call(t, typed.call_id, event.get("name"), typed.response_id, index)
            if call is not None and isinstance(typed, wire.FunctionCallArgumentsDone):
                self.model.call_ready(t, typed.call_id, typed.arguments, index)
            elif call is not None and isinstance(event.get("delta"), str) and call.ready is None:
                call.event["arguments"] += event["delta"]
            self._link_response(typed.response_id, index)
            return
        key = _ASSISTANT_TEXT.get(wire.kind_of(typed)) if not isinstance(typed, wire.Unknown) else None
        if key is not None:
            self._assistant_words(t, event, key, index)
            response = self.model.responses.get(str(event.get("response_id")))
            if response is not None and response.first_output is None and wire.kind_of(typed) in _OUTPUT_DELTAS:
                response.first_output = t
            self._link_response(event.get("response_id"), index)
            return
        if isinstance(typed, wire.Error):
            self._upstream_error(t, event, index)
            return
        if isinstance(event.get("response_id"), str):
            self._link_response(event["response_id"], index)

    def _item(self, t: float, item: Any, index: int, response_id: Any) -> None:
        if not isinstance(item, dict):
            return
        item_type = item.get("type")
        if item_type == wire.FUNCTION_CALL:
            call = self.model.track_call(t, item.get("call_id"), item.get("name"),
                                         response_id or item.get("response_id"), index)
            if call is not None and item.get("status") == "completed" and isinstance(item.get("arguments"), str):
                if call.ready is None and item.get("arguments"):
                    call.event["arguments"] = item["arguments"]
        elif item_type == wire.FUNCTION_CALL_OUTPUT:
            call = self.model.calls.get(str(item.get("call_id")))
            if call is not None:
                if call.event["output"] is None and isinstance(item.get("output"), str):
                    # an event log shows outputs only as the server's echo of them
                    self.model.call_output(call, t, item.get("output"), item.get("status"), item.get("id"), index)
                else:
                    self.model.touch(call.event, index)
        elif isinstance(item_type, str) and item_type.startswith("mcp_"):
            self._provider_mcp(t, item, index)
        elif item_type == wire.MESSAGE:
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
                    self.model.touch(words, index)
            elif role == "system":
                owner = self.requests.owner_of(item_id)
                if owner is not None:
                    self.model.touch(owner, index)

    def _provider_mcp(self, t: float, item: dict[str, Any], index: int) -> None:
        """The provider's own MCP items (not the relay's calls): a listing, a call with its
        output or error, an approval asked and answered; one event per item, updated as the item
        grows."""
        item_id = item.get("id")
        if not isinstance(item_id, str):
            return
        event = self.model.events.get(f"mcp_{item_id}")
        if event is None:
            event = self.model.add_event(f"mcp_{item_id}", "provider_mcp", item["type"], t, item["type"],
                                         item_id=item_id)
        event["t1"] = round(t, 6)
        event["label"] = _provider_mcp_label(item)
        for key in ("server_label", "name", "arguments", "output", "error", "approve", "approval_request_id"):
            if item.get(key) not in (None, ""):
                event[key] = item[key]
        self.model.touch(event, index)

    def _user_words(self, t: float, item_id: Any, index: int, text: str = "") -> dict[str, Any]:
        words = self._items_text.get(str(item_id)) if item_id is not None else None
        if words is None:
            pending = self._user_turn
            if pending is not None and pending.get("item_id") in (None, item_id) \
                    and (not pending["text"] or pending["text"] == text):
                words = self._user_turn
            else:
                words = self.model.add_event(self.model.new_id("user"), "user_words", "words", t, "(no transcript)",
                                             role="user", text="")
            words["item_id"] = item_id
            if isinstance(item_id, str):
                self._items_text[item_id] = words
        self._user_turn = None if words is self._user_turn else self._user_turn
        self.model.touch(words, index)
        return words

    def _assistant_words(self, t: float, event: dict[str, Any], key: str, index: int) -> None:
        item_id = event.get("item_id")
        words = self._items_text.get(str(item_id))
        if words is None:
            words = self.model.add_event(self.model.new_id("said"), "assistant_words", "words", t, "", role="assistant",
                                         text="", item_id=item_id, response_id=event.get("response_id"))
            if isinstance(item_id, str):
                self._items_text[item_id] = words
        value = event.get(key)
        if isinstance(value, str):
            words["text"] = words["text"] + value if key == "delta" else value
            words["label"] = words["text"]
        words["t1"] = round(t, 6)
        self.model.touch(words, index)

    # -- responses
    def _response_created(self, t: float, data: Any, index: int) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return
        response_id = data["id"]
        existing = self.model.responses.get(response_id)
        if existing is not None:
            self.model.touch(existing.event, index)
            return
        metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        creator, asked, request = self.requests.claim(metadata)
        out_of_band = "conversation_id" in data and data.get("conversation_id") is None \
            or metadata.get(META_KIND) == "filler"
        event = self.model.add_event(f"response:{response_id}", "responses", "response", t, f"{response_id} (in progress)",
                                     response_id=response_id, status="in_progress", creator=creator,
                                     out_of_band=out_of_band, status_details=None)
        self.model.touch(event, index)
        for frame_index in asked:
            self.model.touch(event, frame_index)
        self.model.responses[response_id] = TrackedResponse(event)
        if request is not None:
            request["response_id"] = response_id
            request["t1"] = event["t0"]
            self.model.touch(request, index)
            event["requested_by"] = request["id"]
        if not out_of_band:
            self.model.outputs_answered_by(response_id)

    def _response_done(self, t: float, data: Any, index: int) -> None:
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return
        response = self.model.responses.get(data["id"])
        if response is None:
            self._response_created(t, data, index)
            response = self.model.responses[data["id"]]
        event = response.event
        status = str(data.get("status") or "completed")
        details = data.get("status_details") if isinstance(data.get("status_details"), dict) else None
        event["status"] = status
        event["status_details"] = details
        event["t1"] = round(t, 6)
        reason = as_dict(details).get("reason") or as_dict(as_dict(details).get("error")).get("code")
        event["label"] = f"{status}" + (f" ({reason})" if reason else "")
        if isinstance(data.get("usage"), dict):
            event["usage"] = data["usage"]
        self.model.touch(event, index)
        for item in data.get("output") if isinstance(data.get("output"), list) else []:
            if isinstance(item, dict) and item.get("type") == wire.FUNCTION_CALL:
                call = self.model.track_call(t, item.get("call_id"), item.get("name"), data["id"], index)
                if call is not None and call.ready is None and status == "completed":
                    self.model.call_ready(t, item.get("call_id"), item.get("arguments"), index)
        if status in ("cancelled", "failed", "incomplete"):
            self.model.audio["assistant"].restart()
            for call_id in response.call_ids:
                call = self.model.calls[call_id]
                if call.ready is None and call.event["outcome"] == "pending":
                    call.event["outcome"] = "skipped"
                    call.event["skip_reason"] = f"response {status}"
                    self.model.touch(call.event)
        if status == "failed":
            error = as_dict(as_dict(details).get("error"))
            self.model.anomaly(t, f"response {data['id']} failed: {error.get('code') or error.get('type') or ''} "
                               f"{error.get('message') or ''}".strip(), source="upstream", frames=[index],
                               related=event["id"])

    def _link_response(self, response_id: Any, index: int) -> None:
        response = self.model.responses.get(str(response_id)) if response_id is not None else None
        if response is not None:
            self.model.touch(response.event, index)

    # -- client -> relay
    def _client(self, t: float, typed: wire.Event | wire.Unknown, event: dict[str, Any], index: int) -> None:
        if isinstance(typed, wire.SessionUpdate):
            self._session_formats(typed.session, confirmed=False)
        elif isinstance(typed, wire.ResponseCreate):
            self.requests.client_create(t, index)
        elif isinstance(typed, wire.ItemCreate):
            item = typed.item if isinstance(typed.item, dict) else {}
            if item.get("type") == wire.FUNCTION_CALL_OUTPUT:
                call = self.model.calls.get(str(item.get("call_id")))
                if call is not None:
                    if call.event["owner"] == "relay":
                        self.model.touch(call.event, index)   # the relay refuses it (see its error)
                    else:
                        self.model.call_output(call, t, item.get("output"), item.get("status"), item.get("id"), index)
            elif item.get("type") == wire.MESSAGE and item.get("role") == wire.USER:
                text = _item_text(item)
                words = self.model.add_event(self.model.new_id("user"), "user_words", "words", t, text or "(user message)",
                                             role="user", text=text, item_id=item.get("id"))
                words["t1"] = words["t0"]
                self.model.touch(words, index)
                self._user_turn = words if not isinstance(item.get("id"), str) else None
                if isinstance(item.get("id"), str):
                    self._items_text[item["id"]] = words
        elif isinstance(typed, (wire.ItemTruncate, wire.OutputAudioClear)):
            self.model.audio["assistant"].restart()

    # -- relay -> client
    def _to_client(self, t: float, typed: wire.Event | wire.Unknown, event: dict[str, Any], index: int) -> None:
        for call_id in _call_ids_in(event):
            call = self.model.calls.get(call_id)
            if call is not None:
                call.seen_by_client = True
                self.model.touch(call.event, index)
        response_id = event.get("response_id") or as_dict(event.get("response")).get("id")
        if isinstance(response_id, str):
            self._link_response(response_id, index)
        item_id = event.get("item_id") or as_dict(event.get("item")).get("id")
        words = self._items_text.get(item_id) if isinstance(item_id, str) else None
        if words is not None:
            self.model.touch(words, index)
        if isinstance(typed, wire.Error):
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            if self.requests.ours(event) or not self.model.id_prefix:
                code = error.get("code") or error.get("type") or "error"
                self.model.anomaly(t, f"the relay refused a client frame: {code}: {error.get('message')}",
                                   source="relay", frames=[index])

    def _upstream_error(self, t: float, event: dict[str, Any], index: int) -> None:
        error = event.get("error") if isinstance(event.get("error"), dict) else {}
        code = error.get("code") or error.get("type") or "error"
        owner = self.requests.owner_of(error.get("event_id"))
        related = owner["id"] if owner is not None else None
        if owner is not None:
            message = f"the upstream refused the relay's {owner['kind'].replace('_', '-')}: {code}: {error.get('message')}"
            if owner["lane"] == "relay" and owner["t1"] is None:
                owner["t1"] = round(t, 6)
                owner["refused"] = code
            self.model.touch(owner, index)
        else:
            message = f"upstream error {code}: {error.get('message')}"
        self.model.anomaly(t, message, source="upstream", frames=[index], related=related)


def _provider_mcp_label(item: dict[str, Any]) -> str:
    label = item.get("server_label") or "?"
    kind = item.get("type")
    if kind == wire.MCP_LIST_TOOLS:
        tools = item.get("tools") if isinstance(item.get("tools"), list) else []
        return f"{label}: {len(tools)} tools listed"
    if kind == wire.MCP_CALL:
        error = item.get("error")
        result = (f"error: {error.get('message') if isinstance(error, dict) else error}" if error
                  else item.get("output") or "…")
        return f"{label}.{item.get('name')} → {str(result)[:80]}"
    if kind == wire.MCP_APPROVAL_REQUEST:
        return f"approval asked: {label}.{item.get('name')}"
    if kind == wire.MCP_APPROVAL_RESPONSE:
        return f"approval {'given' if item.get('approve') else 'refused'} for {item.get('approval_request_id')}"
    return str(kind)


def _item_text(item: dict[str, Any]) -> str:
    parts = []
    for part in item.get("content") or ():
        if isinstance(part, dict):
            text = part.get("text") if isinstance(part.get("text"), str) else part.get("transcript")
            if isinstance(text, str) and text:
                parts.append(text)
    return " ".join(parts)


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
