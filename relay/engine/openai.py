"""The sans-I/O session engine: given what happened, it answers with what to do.

    engine.receive_upstream(frame, now)   -> actions
    engine.receive_client(frame, now)     -> actions
    engine.handler_yielded(call_id, value, now)   -> actions   (streaming tools)
    engine.handler_finished(call_id, outcome, now) -> actions
    engine.tick(now)                      -> actions      (timeouts, delayed messages)

It never awaits, never sleeps, never reads a clock and never touches a socket: proxy, sidecar,
replay and fuzzing feed the same object. Every rule about *when* the relay sends something lives
here or in the sequencer.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Iterable

from relay.dialects import OPENAI, Dialect
from relay.dialects.base import canonical_type
from relay.engine.actions import (
    Action,
    CancelHandler,
    Notice,
    Outcome,
    SendClient,
    SendUpstream,
    StartHandler,
)
from relay.engine.core import EngineConfig, SessionEngine
from relay.engine.calls import seconds_text, tool_call_fields
from relay.engine.conversation import ABSENT, ItemRecord, ResponseRecord
from relay.engine.calls import (
    OUTCOME_BAD_ARGUMENTS,
    OUTCOME_CANCELLED,
    OUTCOME_ERROR,
    OUTCOME_OK,
    OUTCOME_TIMEOUT,
    OUTCOME_UNKNOWN_TOOL,
    CallEntry,
    CallState,
    Owner,
)
from relay.engine.peek import has_single_plain_type, peek_type
from relay.engine.sequencer import META_CALLS, META_KIND, Sequencer
from relay.tools import Interruption, Scheduling, ToolRegistry
from relay.tools.errors import ArgumentsError
from relay.tools.render import RenderedOutput, render_error, render_exception, render_value
from relay.tools.spec import ToolSpec

# Frames forwarded as the same text without being parsed.
UPSTREAM_PASSTHROUGH = frozenset({"response.output_audio.delta", "response.audio.delta"})
CLIENT_PASSTHROUGH = frozenset({"input_audio_buffer.append"})

_SAME: Any = object()   # handler result: forward the frame as it came
_CANCEL_STATES = ("cancelled", "failed")
_UNANSWERED = (CallState.READY, CallState.RUNNING, CallState.FINISHED)
_REMEMBERED_EVENTS = 64


class OpenAIEngine(SessionEngine):
    """One OpenAI-family session's state and rules (GA, beta, Azure, Foundry)."""

    def __init__(
        self,
        tools: ToolRegistry | Iterable[ToolSpec | Callable[..., Any]] = (),
        *,
        dialect: Dialect = OPENAI,
        config: EngineConfig | None = None,
        session_id: str = "session",
        id_prefix: str = "relay",
    ) -> None:
        super().__init__(tools, dialect=dialect, config=config, session_id=session_id, id_prefix=id_prefix)
        self.sequencer = Sequencer(new_event_id=self._new_event_id, build_create=self._build_create)
        # event ids of frames the relay sent -> (what, call_id)
        self._our_events: dict[str, tuple[str, str | None]] = {}
        self._relay_item_ids: set[str] = set()
        self._client_item_ids: set[str] = set()
        self._client_call_ids: set[str] = set()
        self._held_creates: list[tuple[str, str | None]] = []
        self._tools_declared = False
        self._delay_fillers: dict[str, float] = {}     # call_id -> when its on_delay is due
        self._pending_updates: dict[str, list[str]] = {}
        self._unlinked_outputs: set[str] = set()     # injected outputs not yet answered by a response

    # ---- the audio fast path: frames the engine only forwards skip its bookkeeping ----
    def receive_upstream(self, frame: str | bytes, now: float) -> list[Action]:
        if type(frame) is str and peek_type(frame) in UPSTREAM_PASSTHROUGH and has_single_plain_type(frame):
            self.frames_in["upstream"] += 1
            return [SendClient(frame)] if self.config.has_client else []
        return super().receive_upstream(frame, now)

    def receive_client(self, frame: str | bytes, now: float) -> list[Action]:
        if type(frame) is str and peek_type(frame) in CLIENT_PASSTHROUGH and has_single_plain_type(frame):
            self.frames_in["client"] += 1
            return [SendUpstream(frame)]
        return super().receive_client(frame, now)

    def _other_deadlines(self) -> Iterable[float]:
        sequencer_deadline = self.sequencer.next_deadline()
        extra = () if sequencer_deadline is None else (sequencer_deadline,)
        return (*self._delay_fillers.values(), *extra)

    # ==== plumbing ======================================================================
    def _after_input(self) -> None:
        self._pump()

    def _new_event_id(self) -> str:
        return self._new_id("e")

    def _new_item_id(self) -> str:
        return self._new_id("i")

    def _remember_event(self, event_id: str, what: str, call_id: str | None) -> None:
        """Which frame an event id of ours was, so an error aimed at it can be attributed. Errors
        come right after the frame: the most recent ones are enough."""
        self._our_events[event_id] = (what, call_id)
        if len(self._our_events) > _REMEMBERED_EVENTS:
            del self._our_events[next(iter(self._our_events))]

    def _send_upstream(self, event: dict[str, Any]) -> None:
        self._out.append(SendUpstream(json.dumps(event, ensure_ascii=False, separators=(",", ":"))))

    def _send_client(self, event: dict[str, Any]) -> None:
        if self.config.has_client:
            self._out.append(SendClient(json.dumps(event, ensure_ascii=False, separators=(",", ":"))))

    def _client_error(self, code: str, message: str, client_event_id: Any = None,
                      param: str | None = None) -> None:
        self._send_client({
            "type": "error",
            "event_id": self._new_event_id(),
            "error": {"type": "invalid_request_error", "code": code, "message": message,
                      "param": param, "event_id": client_event_id},
        })
        self._out.append(Notice("client_error", {"code": code, "message": message}))

    def _parse(self, frame: str) -> dict[str, Any] | None:
        """The frame as an event dict, or None with the reason recorded."""
        try:
            event = json.loads(frame)
        except (ValueError, RecursionError) as exc:
            self._bad_frame("invalid_json", f"frame is not valid JSON: {_short(exc)}")
            return None
        if not isinstance(event, dict):
            self._bad_frame("invalid_event", f"frame is a JSON {type(event).__name__}, not an object")
            return None
        if not isinstance(event.get("type"), str):
            self._bad_frame("missing_type", "event has no string `type` field")
            return None
        return event

    def _bad_frame(self, code: str, message: str) -> None:
        if self._source == "client":
            self._client_error(code, message)
        else:
            self._record_anomaly(message, None)

    def _build_create(self, options: dict[str, Any], event_id: str) -> dict[str, Any]:
        self._remember_event(event_id, "response.create", None)
        return self.dialect.response_create(options, event_id)

    # ==== upstream ======================================================================
    def _upstream_frame(self, frame: str | bytes) -> None:
        self.frames_in["upstream"] += 1
        if not isinstance(frame, str):
            self._record_anomaly("binary frame from upstream dropped", None)
            return
        event = self._parse(frame)
        if event is None:
            return
        event_type = event["type"]
        handler = self._UPSTREAM_HANDLERS.get(canonical_type(event_type))
        result = _SAME if handler is None else handler(self, event)
        if not self.config.has_client or result is None:
            return
        if result is _SAME:
            self._out.append(SendClient(frame))
        else:
            self._send_client(result)

    # ---- session ----
    def _on_session(self, event: dict[str, Any]) -> Any:
        session = event.get("session")
        if not isinstance(session, dict):
            self._record_anomaly(f"{event['type']} without a session object", event["type"])
            return _SAME
        self.conversation.session.update(session)
        if not self._tools_declared and self.config.declare_tools and len(self.tools):
            if self.config.mode == "sidecar" or event["type"] == "session.created":
                self._declare_tools(session.get("tools"))
        if self.config.hide_tool_events:
            return self._without_relay_tools(event, session)
        return _SAME

    def _declare_tools(self, current_tools: Any) -> None:
        """Add the relay's tools to the session with one `session.update`, keeping the tools
        another party declared (only ours are replaced)."""
        others = [t for t in current_tools or [] if not self._is_relay_tool_definition(t)]
        event_id = self._new_event_id()
        self._remember_event(event_id, "session.update", None)
        self._send_upstream(self.dialect.session_update(
            {"tools": others + self.tools.definitions()}, event_id))
        self._tools_declared = True

    def _is_relay_tool_definition(self, definition: Any) -> bool:
        return isinstance(definition, dict) and definition.get("name") in self.tools

    def _without_relay_tools(self, event: dict[str, Any], session: dict[str, Any]) -> Any:
        tools = session.get("tools")
        if not isinstance(tools, list) or not any(self._is_relay_tool_definition(t) for t in tools):
            return _SAME
        visible = [t for t in tools if not self._is_relay_tool_definition(t)]
        return {**event, "session": {**session, "tools": visible}}

    # ---- items ----
    def _item_of(self, event: dict[str, Any]) -> ItemRecord | None:
        """Record the item an item event carries, and who produced it."""
        data = event.get("item")
        if not isinstance(data, dict):
            self._record_anomaly(f"{event['type']} without an item", event["type"])
            return None
        record = self.conversation.upsert(data)
        if record is not None:
            self._classify(record)
        return record

    def _on_item_added(self, event: dict[str, Any]) -> Any:
        record = self._item_of(event)
        if record is None:
            return _SAME
        self.conversation.insert(record.id, event.get("previous_item_id", ABSENT), event["type"])
        if record.origin == "relay":
            self.sequencer.item_confirmed(record.id)
            self._relay_item_ids.discard(record.id)   # its origin is on the record now
        elif record.origin == "client":
            self._client_item_ids.discard(record.id)
        self._track_item_calls(record)
        return self._client_view_of_item_event(event, record)

    def _on_item_done(self, event: dict[str, Any]) -> Any:
        record = self._item_of(event)
        if record is None:
            return _SAME
        if not record.in_conversation and record.origin != "model":
            self.conversation.insert(record.id, event.get("previous_item_id", ABSENT), event["type"])
        self._track_item_calls(record)
        if record.type == "function_call" and record.status == "completed" and record.response_id:
            entry = self.ledger.by_item(record.id)
            if entry is not None:
                self._call_item_complete(entry)
        return self._client_view_of_item_event(event, record)

    def _on_item_retrieved(self, event: dict[str, Any]) -> Any:
        data = event.get("item")
        if isinstance(data, dict):
            record = self.conversation.upsert(data)
            if record is not None:
                record.retrieved = True
                return None if record.hidden else _SAME
        return _SAME

    def _on_item_truncated(self, event: dict[str, Any]) -> Any:
        record = self.conversation.item(event.get("item_id"))
        if record is None:
            self._record_anomaly(f"truncation of unknown item {event.get('item_id')}", event["type"])
            return _SAME
        record.audio_end_ms = event.get("audio_end_ms")
        record.truncated_content_index = event.get("content_index")
        return None if record.hidden else _SAME

    def _on_item_deleted(self, event: dict[str, Any]) -> Any:
        record = self.conversation.delete(str(event.get("item_id")), event["type"])
        return None if record is not None and record.hidden else _SAME

    def _on_transcription(self, event: dict[str, Any]) -> Any:
        item_id = event.get("item_id")
        record = self.conversation.item(item_id)
        if record is None:
            self._record_anomaly(f"transcription for unknown item {item_id}", event["type"])
            return _SAME
        index = _content_index(event)
        kind = event["type"].rsplit(".", 1)[-1]
        if kind == "delta" and isinstance(event.get("delta"), str):
            self.conversation.add_text(record.id, index, event["delta"])
        elif kind == "completed" and isinstance(event.get("transcript"), str):
            self.conversation.set_text(record.id, index, event["transcript"])
        elif kind == "failed":
            error = event.get("error")
            record.transcription_failed = (
                error.get("message") if isinstance(error, dict) else str(error)
            ) or "transcription failed"
        return _SAME

    def _on_committed(self, event: dict[str, Any]) -> Any:
        return self._with_visible_predecessor(event)

    def _classify(self, record: ItemRecord) -> None:
        """Decide who produced an item and whether the client may see it."""
        if record.id in self._relay_item_ids:
            record.origin = "relay"
        elif record.response_id is not None:
            record.origin = "model"
        elif record.origin == "unknown":
            if record.id in self._client_item_ids or (
                record.type == "function_call" and record.call_id in self._client_call_ids
            ):
                record.origin = "client"
            elif record.type == "message" and record.role == "user" and "input_audio" in (record.part_types or ()):
                record.origin = "user_audio"
        if self.config.hide_tool_events and self.config.has_client:
            record.hidden = record.origin == "relay" or self._is_relay_call_item(record)

    def _is_relay_call_item(self, record: ItemRecord) -> bool:
        if record.type == "function_call":
            entry = self.ledger.get(record.call_id)
            if entry is not None:
                return entry.owner is Owner.RELAY
            return record.origin != "client" and record.name in self.tools
        if record.type == "function_call_output":
            entry = self.ledger.get(record.call_id)
            return entry is not None and entry.owner is Owner.RELAY and record.origin != "client"
        return False

    def _track_item_calls(self, record: ItemRecord) -> None:
        if record.type == "function_call":
            self._announce_call(record)
        elif record.type == "function_call_output":
            entry = self.ledger.get(record.call_id)
            if entry is None:
                self._record_anomaly(f"output for unknown call {record.call_id}", "function_call_output")
                return
            if entry.owner is Owner.CLIENT or record.origin == "client":
                entry.output = record.output
                entry.output_item_id = record.id
                entry.output_status = record.status
                if entry.owner is Owner.CLIENT:
                    entry.state = CallState.ANSWERED
                    entry.injected_at = self._now
            elif record.output == entry.output:
                record.output = entry.output   # the echo of ours: keep one copy of the text

    def _client_view_of_item_event(self, event: dict[str, Any], record: ItemRecord) -> Any:
        if record.hidden:
            return None
        return self._with_visible_predecessor(event)

    def _with_visible_predecessor(self, event: dict[str, Any]) -> Any:
        """Rewrite `previous_item_id` when it names an item the client never saw."""
        if not (self.config.hide_tool_events and self.config.has_client):
            return _SAME
        previous = self.conversation.item(event.get("previous_item_id"))
        if previous is None or not previous.hidden:
            return _SAME
        return {**event, "previous_item_id": self.conversation.visible_predecessor(previous.id)
                if previous.in_conversation else None}

    # ---- responses ----
    def _response_of(self, event: dict[str, Any]) -> ResponseRecord | None:
        response_id = event.get("response_id")
        if not isinstance(response_id, str):
            return None
        response = self.conversation.response(response_id, create=False)
        if response is None:
            self._record_anomaly(f"{event['type']} for unknown response {response_id}", event["type"])
            response = self.conversation.response(response_id)
        return response

    def _on_response_created(self, event: dict[str, Any]) -> Any:
        data = event.get("response")
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            self._record_anomaly("response.created without a response id", event["type"])
            return _SAME
        response = self.conversation.response(data["id"])
        assert response is not None
        if response.seen_created or response.done:
            self._record_anomaly(f"response.created for {response.id}, which was already "
                                 f"{'done' if response.done else 'created'}", event["type"])
            return _SAME
        response.seen_created = True
        response.created_at = self._now
        response.metadata = data.get("metadata")
        response.out_of_band = "conversation_id" in data and data.get("conversation_id") is None
        creator, ours = self.sequencer.response_created(response.id, response.metadata, self._now)
        response.creator = creator
        if creator == "relay":
            response.metadata = None   # ours: the creator says it all, and long sessions make many
        if ours is not None and ours.purpose == "follow_up":
            for call_id in ours.call_ids:
                entry = self.ledger.get(call_id)
                if entry is not None:
                    entry.follow_up_event_id = ours.event_id
        if not response.out_of_band:
            self._link_follow_ups(response.id)
        return self._client_view_of_response(event, data)

    def _without_call_ids(self, event: dict[str, Any], data: dict[str, Any]) -> Any:
        """The relay's own responses reach the client, but not the ids of the hidden calls they
        answer (kept in their metadata for the ledger and for replay)."""
        metadata = data.get("metadata")
        if not (self.config.hide_tool_events and self.config.has_client and isinstance(metadata, dict)
                and META_CALLS in metadata and META_KIND in metadata):
            return _SAME
        visible = {k: v for k, v in metadata.items() if k != META_CALLS}
        return {**event, "response": {**data, "metadata": visible}}

    def _link_follow_ups(self, response_id: str) -> None:
        """The first in-conversation response that starts after a call's output landed is the
        one in which the model answers it, whoever asked for it."""
        confirmed = self.sequencer.confirmed_items
        for call_id in list(self._unlinked_outputs):
            entry = self.ledger.get(call_id)
            if entry is None or entry.output_item_id in confirmed:
                self._unlinked_outputs.discard(call_id)
                if entry is not None:
                    entry.follow_up_response_id = response_id

    def _on_output_item(self, event: dict[str, Any]) -> Any:
        data = event.get("item")
        response = self._response_of(event)
        if not isinstance(data, dict):
            self._record_anomaly(f"{event['type']} without an item", event["type"])
            return _SAME
        record = self.conversation.upsert(data)
        if record is None:
            return _SAME
        if response is not None:
            record.response_id = response.id
            record.output_index = event.get("output_index")
            self.conversation.link_output(response, record.id, event.get("output_index"))
        self._classify(record)
        self._track_item_calls(record)
        if (event["type"] == "response.output_item.done" and record.type == "function_call"
                and record.status == "completed"):
            entry = self.ledger.by_item(record.id)
            if entry is not None:
                self._call_item_complete(entry)
        return None if record.hidden else _SAME

    def _on_content_part(self, event: dict[str, Any]) -> Any:
        part = event.get("part")
        if event["type"].endswith(".done") and isinstance(part, dict):
            text = part.get("text") if part.get("text") is not None else part.get("transcript")
            if isinstance(text, str) and text:
                self.conversation.set_text(event.get("item_id"), _content_index(event), text)
        return _SAME

    def _on_text_delta(self, event: dict[str, Any]) -> Any:
        delta = event.get("delta")
        if isinstance(delta, str):
            self.conversation.add_text(event.get("item_id"), _content_index(event), delta)
        return _SAME

    def _on_text_done(self, event: dict[str, Any]) -> Any:
        text = event.get("text") if "text" in event else event.get("transcript")
        if isinstance(text, str):
            self.conversation.set_text(event.get("item_id"), _content_index(event), text)
        return _SAME

    def _on_arguments_delta(self, event: dict[str, Any]) -> Any:
        entry = self._call_of_event(event)
        if entry is None:
            return _SAME
        delta = event.get("delta")
        if isinstance(delta, str):
            entry.arguments += delta
            entry.delta_count += 1
        if entry.state is CallState.ANNOUNCED:
            entry.state = CallState.STREAMING
        return None if self._hide_call(entry) else _SAME

    def _on_arguments_done(self, event: dict[str, Any]) -> Any:
        entry = self._call_of_event(event)
        if entry is None:
            return _SAME
        final = event.get("arguments")
        if isinstance(final, str):
            if entry.delta_count and entry.arguments != final:
                self._record_anomaly(
                    f"arguments of call {entry.call_id} assembled from {entry.delta_count} deltas "
                    f"differ from response.function_call_arguments.done", event["type"])
            entry.arguments_from_done = final
            entry.arguments = final
        return None if self._hide_call(entry) else _SAME

    def _call_of_event(self, event: dict[str, Any]) -> CallEntry | None:
        entry = self.ledger.by_item(event.get("item_id")) or self.ledger.get(event.get("call_id"))
        if entry is None:
            self._record_anomaly(
                f"{event['type']} for unknown call {event.get('call_id') or event.get('item_id')}",
                event["type"])
            call_id, item_id = event.get("call_id"), event.get("item_id")
            if isinstance(call_id, str) and isinstance(item_id, str):
                # a log that elided the item's announcement: keep the arguments, own nothing
                entry = self.ledger.add(CallEntry(call_id, str(event.get("name") or ""), item_id,
                                                  _str_or_none(event.get("response_id")),
                                                  Owner.CLIENT, announced_at=self._now))
        return entry

    def _hide_call(self, entry: CallEntry) -> bool:
        return self.config.hide_tool_events and self.config.has_client and entry.owner is Owner.RELAY

    def _on_response_done(self, event: dict[str, Any]) -> Any:
        data = event.get("response")
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            self._record_anomaly("response.done without a response id", event["type"])
            return _SAME
        response = self.conversation.response(data["id"])
        assert response is not None
        if response.done:
            self._record_anomaly(f"duplicate response.done for {response.id}", event["type"])
            return self._client_view_of_response(event, data)
        if not response.seen_created:
            self._record_anomaly(f"response.done without response.created for {response.id}",
                                 event["type"])
            if response.metadata is None:
                response.metadata = data.get("metadata")
        response.status = sys.intern(str(data.get("status") or "completed"))
        details = data.get("status_details")
        response.status_details = details if isinstance(details, dict) else None
        response.done_at = self._now
        output = data.get("output")
        for index, item in enumerate(output if isinstance(output, list) else []):
            if not isinstance(item, dict):
                continue
            record = self.conversation.upsert(item)
            if record is None:
                continue
            record.response_id = response.id
            self.conversation.link_output(response, record.id, index)
            self._classify(record)
            self._track_item_calls(record)
        self._settle_calls(response)
        self.sequencer.response_done(response.id)
        self.sequencer.forget_confirmed({e.output_item_id for e in map(self.ledger.get, self._unlinked_outputs)
                                         if e is not None and e.output_item_id})
        if response.status == "cancelled" and response.reason == "turn_detected":
            self._barge_in(f"response {response.id} cancelled (turn_detected)")
        elif response.status in _CANCEL_STATES:
            self._interrupt_running_of(response)
        self._inject_ready(response)
        self._forget_old()
        return self._client_view_of_response(event, data)

    def _client_view_of_response(self, event: dict[str, Any], data: dict[str, Any]) -> Any:
        """response.created / response.done as the client may see them: without hidden items."""
        view = self._without_call_ids(event, data)
        output = data.get("output")
        if not (self.config.hide_tool_events and self.config.has_client and isinstance(output, list)):
            return view
        visible = [o for o in output if not self._hidden_item(o)]
        if len(visible) == len(output):
            return view
        base = event if view is _SAME else view
        return {**base, "response": {**base["response"], "output": visible}}

    def _hidden_item(self, item: Any) -> bool:
        if not isinstance(item, dict):
            return False
        record = self.conversation.item(item.get("id"))
        return record is not None and record.hidden

    def _settle_calls(self, response: ResponseRecord) -> None:
        """At `response.done`, every call of the response is either ready or skipped."""
        failed = response.status in _CANCEL_STATES
        for item_id in response.output_item_ids:
            entry = self.ledger.by_item(item_id)
            if entry is None or entry.state not in (CallState.ANNOUNCED, CallState.STREAMING):
                continue
            record = self.conversation.item(item_id)
            item_status = record.status if record is not None else None
            if failed:
                reason = f"response {response.status}" + (f" ({response.reason})" if response.reason else "")
                self._skip(entry, reason)
            elif item_status not in (None, "completed"):
                self._skip(entry, f"item {item_status}")
            else:
                self._call_item_complete(entry)

    def _skip(self, entry: CallEntry, reason: str) -> None:
        entry.state = CallState.SKIPPED
        entry.skip_reason = reason
        if entry.owner is Owner.RELAY:
            self._out.append(Notice("tool_call", tool_call_fields(entry) | {"outcome": "skipped",
                                                                               "reason": reason}))

    # ---- errors ----
    def _on_error(self, event: dict[str, Any]) -> Any:
        error = event.get("error")
        if not isinstance(error, dict):
            self._record_anomaly("error event without an error object", event["type"])
            return _SAME
        event_id = error.get("event_id")
        ours = self._our_events.get(event_id) if isinstance(event_id, str) else None
        if ours is None:
            # not tagged with one of our ids: the client's, unless it is an untagged
            # "already active" refusal while only our create was in flight
            if self.sequencer.upstream_error(event_id, error, self._now) is None:
                return _SAME
            ours = ("response.create", None)
        elif ours[0] == "response.create":
            self.sequencer.upstream_error(event_id, error, self._now)
        what, call_id = ours
        message = f"{error.get('code') or error.get('type')}: {error.get('message')}"
        self._out.append(Notice("upstream_error", {"what": what, "call_id": call_id,
                                                   "code": error.get("code"),
                                                   "message": error.get("message")}))
        entry = self.ledger.get(call_id)
        if entry is not None:
            entry.upstream_errors += (message,)
            if what == "output" and error.get("param") == "previous_item_id":
                self._reinject_appended(entry)
        return None  # errors about the relay's own frames are not the client's business

    def _reinject_appended(self, entry: CallEntry) -> None:
        """The predecessor we chose vanished (deleted meanwhile): append the output instead."""
        if entry.output is None or entry.output_retried:
            return
        entry.output_retried = True
        self._send_output(entry, previous_item_id=None)

    # ---- barge-in ----
    def _on_speech_started(self, event: dict[str, Any]) -> Any:
        self._barge_in("input_audio_buffer.speech_started")
        return _SAME

    # GA event type -> handler returning _SAME (forward as is), None (hide) or a rewritten event
    _UPSTREAM_HANDLERS: dict[str, Callable[["OpenAIEngine", dict[str, Any]], Any]] = {
        "session.created": _on_session,
        "session.updated": _on_session,
        "conversation.item.added": _on_item_added,
        "conversation.item.done": _on_item_done,
        "conversation.item.retrieved": _on_item_retrieved,
        "conversation.item.truncated": _on_item_truncated,
        "conversation.item.deleted": _on_item_deleted,
        "conversation.item.input_audio_transcription.delta": _on_transcription,
        "conversation.item.input_audio_transcription.completed": _on_transcription,
        "conversation.item.input_audio_transcription.failed": _on_transcription,
        "input_audio_buffer.committed": _on_committed,
        "input_audio_buffer.speech_started": _on_speech_started,
        "response.created": _on_response_created,
        "response.output_item.added": _on_output_item,
        "response.output_item.done": _on_output_item,
        "response.content_part.added": _on_content_part,
        "response.content_part.done": _on_content_part,
        "response.output_text.delta": _on_text_delta,
        "response.output_audio_transcript.delta": _on_text_delta,
        "response.output_text.done": _on_text_done,
        "response.output_audio_transcript.done": _on_text_done,
        "response.function_call_arguments.delta": _on_arguments_delta,
        "response.function_call_arguments.done": _on_arguments_done,
        "response.done": _on_response_done,
        "error": _on_error,
    }

    # ==== calls =========================================================================
    def _announce_call(self, record: ItemRecord) -> None:
        call_id = record.call_id
        if not isinstance(call_id, str) or not call_id:
            self._record_anomaly(f"function_call item {record.id} without call_id", "function_call")
            return
        entry = self.ledger.get(call_id)
        name = record.name or ""
        if entry is None:
            client_made = record.origin == "client" or call_id in self._client_call_ids
            owner = Owner.RELAY if (not client_made and self._owns(name)) else Owner.CLIENT
            entry = self.ledger.add(CallEntry(call_id, name, record.id, record.response_id, owner,
                                              announced_at=self._now))
        elif entry.item_id != record.id:
            if entry.item_id is None:
                entry.item_id = record.id
                self.ledger.add(entry)
            else:
                self._record_anomaly(f"call {call_id} announced again with another item {record.id}",
                                     "function_call")
                return
        if entry.response_id is None and record.response_id is not None:
            entry.response_id = record.response_id
        if not entry.name and name:
            entry.name = name
        if record.arguments and record.status == "completed":
            entry.arguments = record.arguments

    def _owns(self, name: str) -> bool:
        return name in self.tools or self.config.unknown_tools == "error"

    def _call_item_complete(self, entry: CallEntry) -> None:
        """The model finished the call's item: a relay call becomes ready (and starts) unless its
        response already ended cancelled or failed."""
        if entry.state not in (CallState.ANNOUNCED, CallState.STREAMING):
            return  # duplicate delivery: a call is started once
        if entry.response_id is None:
            return  # not a response output: never executed
        response = self.conversation.response(entry.response_id, create=False)
        if response is not None and response.done and response.status in _CANCEL_STATES:
            self._skip(entry, f"response {response.status}")
            return
        if entry.owner is Owner.CLIENT:
            entry.state = CallState.COMPLETE
            return
        entry.state = CallState.READY
        entry.ready_at = self._now
        self._start(entry)

    def _start(self, entry: CallEntry) -> None:
        tool = self.tools.get(entry.name)
        if tool is None:
            self._decide(entry, render_error(f"unknown tool {entry.name!r}", limit=self.config.output_limit),
                         OUTCOME_UNKNOWN_TOOL)
            return
        try:
            arguments = tool.parse_arguments(entry.arguments)
        except ArgumentsError as exc:
            self._decide(entry, render_error(str(exc), limit=self.config.output_limit),
                         OUTCOME_BAD_ARGUMENTS, tool)
            return
        entry.state = CallState.RUNNING
        entry.started_at = self._now
        self._handlers_active.add(entry.call_id)
        self._deadlines[entry.call_id] = self._now + tool.timeout
        self._out.append(StartHandler(entry.call_id, tool, arguments))
        self._out.append(Notice("tool_started", {"call_id": entry.call_id, "name": entry.name,
                                                 "arguments": entry.arguments,
                                                 "response_id": entry.response_id}))
        if tool.on_start:
            self.sequencer.request_filler(entry.call_id, "on_start", tool.on_start, self._now)
        if tool.on_delay:
            delay_ms, _text = tool.on_delay
            self._delay_fillers[entry.call_id] = self._now + delay_ms / 1000.0

    def _handler_yielded(self, call_id: str, value: Any) -> None:
        entry = self.ledger.get(call_id)
        if entry is None or call_id not in self._handlers_active:
            return
        tool = self.tools.get(entry.name)
        rendered = render_value(value, limit=self.config.output_limit)
        if entry.state is CallState.RUNNING:
            self._decide(entry, rendered, OUTCOME_ERROR if rendered.is_error else OUTCOME_OK, tool,
                         handler_done=False)
            return
        self._add_update(entry, f"update from {entry.name}: {rendered.output}")

    def _handler_finished(self, call_id: str, outcome: Outcome) -> None:
        entry = self.ledger.get(call_id)
        if entry is None or call_id not in self._handlers_active:
            return  # cancelled or timed out already: its output was decided then
        tool = self.tools.get(entry.name)
        limit = self.config.output_limit
        if entry.state is not CallState.RUNNING:
            # a streaming tool after its first yield
            self._stop_handler(call_id)
            if outcome.error is not None:
                self._add_update(entry, f"update from {entry.name}: failed: "
                                        f"{type(outcome.error).__name__}: {outcome.error}")
            elif not outcome.stream_end:
                self._add_update(entry, f"update from {entry.name}: "
                                        f"{render_value(outcome.value, limit=limit).output}")
            return
        if outcome.error is not None:
            rendered = render_exception(outcome.error, limit=limit)
        elif outcome.stream_end:
            rendered = render_error(f"{entry.name} finished without producing a result", limit=limit)
        else:
            rendered = render_value(outcome.value, limit=limit)
        self._decide(entry, rendered, OUTCOME_ERROR if rendered.is_error else OUTCOME_OK, tool)

    def _stop_handler(self, call_id: str) -> None:
        super()._stop_handler(call_id)
        self._delay_fillers.pop(call_id, None)

    def _decide(self, entry: CallEntry, rendered: RenderedOutput, outcome: str,
                tool: ToolSpec | None = None, *, handler_done: bool = True,
                speak: bool | None = None) -> None:
        """The call's output is now known; it is injected as soon as its response is done."""
        if handler_done:
            self._stop_handler(entry.call_id)
        else:
            self._deadlines.pop(entry.call_id, None)
            self._delay_fillers.pop(entry.call_id, None)
        self.sequencer.drop_fillers(entry.call_id)
        entry.output = rendered.output
        entry.output_status = rendered.status
        entry.is_error = rendered.is_error
        entry.outcome = outcome
        entry.finished_at = self._now
        message = rendered.message
        scheduling = rendered.scheduling
        if tool is not None:
            if message is None:
                message = tool.on_failure if rendered.is_error else tool.on_complete
            if scheduling is None:
                scheduling = tool.scheduling
        entry.message = message
        entry.scheduling = (scheduling or Scheduling.WHEN_IDLE).value
        if speak is not None:
            entry.speak = speak
        entry.state = CallState.FINISHED
        response = self.conversation.response(entry.response_id or "", create=False)
        if response is not None:
            self._inject_ready(response)

    # ---- injection ----
    def _response_calls(self, response: ResponseRecord) -> list[CallEntry]:
        """The relay calls of a response, in call order (output index)."""
        calls = []
        for item_id in response.output_item_ids:
            entry = self.ledger.by_item(item_id)
            if entry is not None and entry.owner is Owner.RELAY:
                calls.append(entry)
        return calls

    def _inject_ready(self, response: ResponseRecord) -> None:
        if not response.done or not self.upstream_connected or self.closed:
            return
        calls = self._response_calls(response)
        for entry in calls:
            if entry.state is CallState.FINISHED:
                self._send_output(entry, previous_item_id=self._output_position(entry, calls, response))
        self._check_batch(response, calls)
        self._release_held_creates()

    def _output_position(self, entry: CallEntry, calls: list[CallEntry], response: ResponseRecord) -> Any:
        """Right after the last item of the call's response, outputs in call order: after the
        output of the nearest earlier call already injected, else after the response's last item."""
        if response.out_of_band:
            return None
        for earlier in reversed(calls[: calls.index(entry)]):
            if earlier.output_item_id and earlier.state is CallState.ANSWERED:
                record = self.conversation.item(earlier.output_item_id)
                if record is None or not record.deleted:
                    return earlier.output_item_id
        return self.conversation.last_item_of_response(response)

    def _send_output(self, entry: CallEntry, *, previous_item_id: Any) -> None:
        item_id = entry.output_item_id or self._new_item_id()
        event_id = self._new_event_id()
        entry.output_item_id = item_id
        entry.output_event_id = event_id
        self._relay_item_ids.add(item_id)
        self._remember_event(event_id, "output", entry.call_id)
        event: dict[str, Any] = {"type": "conversation.item.create", "event_id": event_id}
        if previous_item_id is not None:
            event["previous_item_id"] = previous_item_id
        event["item"] = self.dialect.function_call_output_item(
            item_id=item_id, call_id=entry.call_id, output=entry.output or "",
            status=entry.output_status or "completed", name=entry.name,
            response_id=entry.response_id, created_at=int(self._now))
        self._send_upstream(event)
        if entry.state is not CallState.ANSWERED:
            entry.state = CallState.ANSWERED
            entry.injected_at = self._now
            self._unlinked_outputs.add(entry.call_id)
            self._out.append(Notice("tool_call", tool_call_fields(entry)))
            for text in self._pending_updates.pop(entry.call_id, []):
                self._send_update(entry, text)

    def _check_batch(self, response: ResponseRecord, calls: list[CallEntry]) -> None:
        """Once every relay call of a done response is answered, decide its one follow-up."""
        if response.batch_handled:
            return
        live = [c for c in calls if c.state is not CallState.SKIPPED]
        if not live or any(c.state is not CallState.ANSWERED for c in live):
            return
        response.batch_handled = True
        if self._has_client_calls(response):
            return  # the client answers its calls and asks for the response itself
        speakers = [c for c in live if c.speak and c.scheduling != Scheduling.SILENT.value]
        if not speakers:
            return
        self.sequencer.request_follow_up(
            [c.call_id for c in live],
            interrupt=any(c.scheduling == Scheduling.INTERRUPT.value for c in speakers),
            messages=[c.message for c in speakers if c.message],
            confirm={c.output_item_id for c in live if c.output_item_id},
            now=self._now,
        )

    def _has_client_calls(self, response: ResponseRecord | None) -> bool:
        return response is not None and any(
            e is not None and e.owner is Owner.CLIENT and e.state is not CallState.SKIPPED
            for e in map(self.ledger.by_item, response.output_item_ids))

    # ---- streaming updates ----
    def _add_update(self, entry: CallEntry, text: str) -> None:
        entry.updates += (text,)
        if entry.state is CallState.ANSWERED and self.upstream_connected:
            self._send_update(entry, text)
        else:
            self._pending_updates.setdefault(entry.call_id, []).append(text)

    def _send_update(self, entry: CallEntry, text: str) -> None:
        """A streaming tool's later value: a system message the model can speak about."""
        item_id = self._new_item_id()
        event_id = self._new_event_id()
        self._relay_item_ids.add(item_id)
        self._remember_event(event_id, "update", entry.call_id)
        self._send_upstream({
            "type": "conversation.item.create", "event_id": event_id,
            "item": {"type": "message", "role": "system", "id": item_id,
                     "content": [{"type": "input_text", "text": text}]},
        })
        response = self.conversation.response(entry.response_id or "", create=False)
        if response is None or not response.batch_handled:
            return  # the batch's own follow-up, still to come, covers what this update says
        if entry.speak and entry.scheduling != Scheduling.SILENT.value and not self._has_client_calls(response):
            self.sequencer.request_follow_up(
                [entry.call_id], interrupt=entry.scheduling == Scheduling.INTERRUPT.value,
                messages=[], confirm={item_id}, now=self._now)

    # ---- interruption ----
    def _barge_in(self, cause: str) -> None:
        """The user spoke over the assistant: apply each running tool's interruption policy."""
        for call_id in list(self._handlers_active):
            entry = self.ledger.get(call_id)
            if entry is None or entry.interrupted or (entry.started_at or 0) > self._now:
                continue
            self._interrupt(entry, cause)

    def _interrupt_running_of(self, response: ResponseRecord) -> None:
        for entry in self._response_calls(response):
            if entry.call_id in self._handlers_active and not entry.interrupted:
                self._interrupt(entry, f"response {response.status}")

    def _interrupt(self, entry: CallEntry, cause: str) -> None:
        entry.interrupted = True
        self.sequencer.drop_fillers(entry.call_id)
        tool = self.tools.get(entry.name)
        policy = tool.interruption if tool is not None else Interruption.FINISH_SILENTLY
        if policy is Interruption.CANCEL:
            self._out.append(CancelHandler(entry.call_id, f"interrupted: {cause}"))
            entry.speak = False
            if entry.state is CallState.RUNNING:
                self._decide(entry, render_error("cancelled: the user interrupted", status="incomplete",
                                                 limit=self.config.output_limit),
                             OUTCOME_CANCELLED, None, speak=False)
            else:
                self._stop_handler(entry.call_id)
        elif policy is Interruption.FINISH_SILENTLY:
            entry.speak = False

    # ==== timers ========================================================================
    def _tick(self) -> None:
        now = self._now
        for call_id, deadline in list(self._deadlines.items()):
            if deadline <= now:
                self._timed_out(call_id)
        for call_id, due in list(self._delay_fillers.items()):
            if due <= now:
                del self._delay_fillers[call_id]
                entry = self.ledger.get(call_id)
                tool = self.tools.get(entry.name) if entry else None
                if entry is not None and tool is not None and tool.on_delay and entry.state is CallState.RUNNING:
                    self.sequencer.request_filler(call_id, "on_delay", tool.on_delay[1], now)

    def _timed_out(self, call_id: str) -> None:
        entry = self.ledger.get(call_id)
        self._deadlines.pop(call_id, None)
        if entry is None:
            return
        tool = self.tools.get(entry.name)
        seconds = seconds_text(tool.timeout if tool else 0)
        self._out.append(CancelHandler(call_id, f"timed out after {seconds} s"))
        if entry.state is CallState.RUNNING:
            self._decide(entry, render_error(f"timed out after {seconds} s", status="incomplete",
                                             limit=self.config.output_limit), OUTCOME_TIMEOUT, tool)
        else:
            self._stop_handler(call_id)
            self._add_update(entry, f"update from {entry.name}: stopped after {seconds} s (timeout)")

    # ==== connection lifecycle ==========================================================
    def _on_reconnect(self) -> None:
        super()._on_reconnect()
        self.sequencer.reset_connection()
        for response_id in list(self.conversation.response_order):
            response = self.conversation.responses[response_id]
            if not response.done:
                # its end was lost with the connection: the calls that completed still count
                response.status = "unknown"
                response.done_at = self._now
                self._settle_calls(response)
        for response_id in list(self.conversation.response_order):
            self._inject_ready(self.conversation.responses[response_id])
        for call_id in list(self._pending_updates):
            entry = self.ledger.get(call_id)
            if entry is not None and entry.state is CallState.ANSWERED:
                for text in self._pending_updates.pop(call_id):
                    self._send_update(entry, text)

    def _on_close(self) -> None:
        self._held_creates.clear()

    # ==== client ========================================================================
    def _client_frame(self, frame: str | bytes) -> None:
        self.frames_in["client"] += 1
        if not isinstance(frame, str):
            self._client_error("binary_frame_not_supported",
                               "binary frames are not part of the realtime protocol; send JSON text")
            return
        event = self._parse(frame)
        if event is None:
            return
        if (not self._tools_declared and self.config.declare_tools and len(self.tools)
                and event["type"] != "session.update"):
            # the client acts before session.created reached us: the tools must be there first
            self._declare_tools(None)
        handler = self._CLIENT_HANDLERS.get(event["type"])
        result = _SAME if handler is None else handler(self, event)
        if result is None:
            return
        if result is _SAME:
            self._out.append(SendUpstream(frame))
        else:
            self._send_upstream(result)

    def _refuse_relay_tool_names(self, tools: Any, event: dict[str, Any], where: str) -> bool:
        if tools is None:
            return False
        if not isinstance(tools, list):
            return False
        clashes = [t.get("name") for t in tools if self._is_relay_tool_definition(t)]
        if clashes:
            names = ", ".join(repr(n) for n in clashes)
            self._client_error("relay_tool_redefined",
                               f"{where} defines {names}, which the relay provides; remove "
                               f"{'it' if len(clashes) == 1 else 'them'} from your tools",
                               event.get("event_id"), param=f"{where}.tools")
            return True
        return False

    def _client_session_update(self, event: dict[str, Any]) -> Any:
        session = event.get("session")
        if not isinstance(session, dict) or not self.config.declare_tools or not len(self.tools):
            return _SAME
        tools = session.get("tools")
        if self._refuse_relay_tool_names(tools, event, "session"):
            return None
        if tools is None:
            if self._tools_declared:
                return _SAME
            tools = []
        elif not isinstance(tools, list):
            return _SAME
        self._tools_declared = True
        return {**event, "session": {**session, "tools": list(tools) + self.tools.definitions()}}

    def _client_response_create(self, event: dict[str, Any]) -> Any:
        options = event.get("response")
        if isinstance(options, dict) and isinstance(options.get("tools"), list) and len(self.tools):
            if self._refuse_relay_tool_names(options["tools"], event, "response"):
                return None
            event = {**event, "response": {**options, "tools": options["tools"] + self.tools.definitions()}}
            rewritten = True
        else:
            rewritten = False
        event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
        if self.config.hold_client_creates and self.ledger.unanswered():
            # the model should answer with our results: forward once they are in
            frame = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
            self._held_creates.append((frame, event_id))
            return None
        self.sequencer.client_create_forwarded(event_id, self._now, answers_pending=False)
        return event if rewritten else _SAME

    def _release_held_creates(self) -> None:
        if not self._held_creates or self.ledger.unanswered():
            return
        held, self._held_creates = self._held_creates, []
        for frame, event_id in held:
            self._out.append(SendUpstream(frame))
            self.sequencer.client_create_forwarded(event_id, self._now, answers_pending=True)

    def _client_item_create(self, event: dict[str, Any]) -> Any:
        item = event.get("item")
        if not isinstance(item, dict):
            return _SAME
        if isinstance(item.get("id"), str):
            self._client_item_ids.add(item["id"])
        if item.get("type") == "function_call" and isinstance(item.get("call_id"), str):
            self._client_call_ids.add(item["call_id"])
        if item.get("type") == "function_call_output":
            entry = self.ledger.get(item.get("call_id"))
            if entry is not None and entry.owner is Owner.RELAY:
                self._client_error(
                    "relay_owned_call",
                    f"call {entry.call_id} ({entry.name}) belongs to a relay tool; the relay sends its output",
                    event.get("event_id"), param="item.call_id")
                return None
        return _SAME

    _CLIENT_HANDLERS: dict[str, Callable[["OpenAIEngine", dict[str, Any]], Any]] = {
        "session.update": _client_session_update,
        "response.create": _client_response_create,
        "conversation.item.create": _client_item_create,
    }

    # ==== sequencing ====================================================================
    def _pump(self) -> None:
        """Let the sequencer send what is due now."""
        if not self.upstream_connected:
            return
        for frame in self.sequencer.poll(self._now, cancel_event_id=self._cancel_event_id):
            self._send_upstream(frame)
            if frame["type"] == "response.create":
                metadata = frame.get("response", {}).get("metadata", {})
                self._out.append(Notice("follow_up" if metadata.get(META_KIND) == "follow_up" else "filler",
                                        {"event_id": frame["event_id"],
                                         "call_ids": metadata.get("call_ids", "")}))

    def _cancel_event_id(self) -> str:
        event_id = self._new_event_id()
        self._remember_event(event_id, "response.cancel", None)
        return event_id


def _content_index(event: dict[str, Any]) -> int:
    index = event.get("content_index")
    return index if isinstance(index, int) and index >= 0 else 0


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


__all__ = ["CLIENT_PASSTHROUGH", "OpenAIEngine", "UPSTREAM_PASSTHROUGH"]
