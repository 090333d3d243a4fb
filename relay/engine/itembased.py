"""The engine of an item-based wire, the OpenAI family's (GA, beta, Azure, Foundry, xAI, Voice
Live): a conversation of items with a response lifecycle, translated into the shared conversation,
call book and sequencer, and back into frames.

Upstream events keep the conversation (items in `previous_item_id` order, responses, words) and
say what happens to calls: announced by their item, complete when it is done, skipped when their
response is cancelled; `response.done` lets outputs in (`injection.Injector`), a cancelled
`turn_detected` response or `speech_started` is a barge-in. What the core decides (`core`) comes
back as frames through the dialect's shapes (Foundry's `name`, beta's `modalities`). What the
items and events say of calls is `watching.CallWatcher`'s; what the client may see of the relay's
tools is `hiding.ClientView`'s; when `response.create` goes up is the sequencer's. The helpers act
through the session's context (`context.OpenAIContext`) only. The frames the dialect passes
through (audio) are forwarded without being parsed (`receive_upstream`/`receive_client`); every
other frame is decoded once by the family's codec (`dialect.codec`; the OpenAI family's is
`relay.dialects.openai_codec`) into its typed event (`relay.dialects.items`, the flow's
vocabulary), handled by what it is (its GA event, whatever name it arrived by), and what the engine
writes is a typed command the codec encodes in the variant's names.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable

from relay.dialects import items as wire
from relay.dialects.base import ToolFlow
from relay.dialects.openai import FUNCTION_CALL, OPENAI, OpenAIFamily
from relay.dialects.peek import pass_through_test
from relay.engine.actions import Action, Notice, SendClient, SendUpstream
from relay.engine.approving import APPROVAL_REQUEST, McpApprovals
from relay.engine.calls import CallEntry, CallOutcome, CallState
from relay.engine.context import OpenAIContext, Source
from relay.engine.conversation import ABSENT, ItemRecord, ResponseRecord
from relay.engine.core import SessionEngine
from relay.engine.hiding import SAME as _SAME
from relay.engine.hiding import ClientView
from relay.engine.injection import Injector
from relay.engine.records import CallRecord
from relay.engine.recovery import RETRIEVE, LostItems
from relay.engine.sequencer import sent_notice
from relay.engine.watching import CANCEL_STATES, CallWatcher
from relay.tools.render import RenderedOutput
from relay.tools.spec import ToolSpec


class OpenAIEngine(SessionEngine):
    """One OpenAI-family session's state and rules (GA, beta, Azure, Foundry)."""

    default_dialect: OpenAIFamily = OPENAI
    dialect: OpenAIFamily
    context_class = OpenAIContext
    ctx: OpenAIContext

    def __init__(self, *args: Any, **options: Any) -> None:
        """As `SessionEngine`: tools, and the dialect, config, session_id and id_prefix options."""
        super().__init__(*args, **options)
        if getattr(self.dialect, "flow", None) is not ToolFlow.ITEMS:
            raise TypeError(f"OpenAIEngine runs the item-based tool flow, not {self.dialect.name}'s")
        # the audio fast path: the dialect's pass-through sets, each as one test of a frame
        self.forwards_upstream = pass_through_test(self.dialect.upstream_passthrough)   # type: ignore[method-assign]
        self.forwards_client = pass_through_test(self.dialect.client_passthrough)   # type: ignore[method-assign]
        self._frame = ""   # the upstream frame being handled (its text)
        self.sequencer = self.ctx.sequencer     # when response.create (or response.cancel) goes up
        self.watcher = CallWatcher(self.ctx)    # what items and events say of calls
        self.view = ClientView(self.ctx)        # what the client sees of the relay's tools
        self.injector = Injector(self.ctx)      # where and when outputs go in, and the follow-up
        self.lost = LostItems(self.ctx, self.watcher, self.injector, self.view.classify)   # calls a reconnect lost
        # the provider's own MCP approval requests the operator's policy answers
        self.approvals = self.view.approvals = McpApprovals(self.ctx, self.config.mcp_approvals)

    # ---- the audio fast path: frames the engine only forwards skip its bookkeeping ----
    def receive_upstream(self, frame: str | bytes, now: float) -> list[Action]:
        if self.forwards_upstream(frame):
            return [SendClient(frame)] if self.config.has_client else []
        return super().receive_upstream(frame, now)

    def receive_client(self, frame: str | bytes, now: float) -> list[Action]:
        if self.forwards_client(frame):
            return [SendUpstream(frame)]
        return super().receive_client(frame, now)

    def _other_deadlines(self) -> Iterable[float]:
        if not self.ctx.upstream_connected:
            # nothing the sequencer waits for (an acknowledgement, a response) can come while the
            # upstream is away, and `_pump`, which ends its waits, does not run: a deadline of its
            # that passed would stay in the past. Its waits are looked at again once reconnected
            # (a create in flight then is the edge's to resend, see `Sequencer.reset_connection`).
            return ()
        deadlines = (self.sequencer.next_deadline(), self.view.hold_deadline(), self.lost.deadline())
        return [deadline for deadline in deadlines if deadline is not None]   # (no generator: every round)

    # ==== plumbing ======================================================================
    def _after_input(self) -> None:
        self.view.release_held_creates()
        self._pump()

    # ==== upstream ======================================================================
    def _upstream_frame(self, frame: str | bytes) -> None:
        if not isinstance(frame, str):
            self.ctx.anomaly("binary frame from upstream dropped", None)
            return
        event = self.ctx.read(frame)
        if event is None:
            return
        self._frame = frame
        handler = self._UPSTREAM_HANDLERS.get(wire.kind_of(event))
        result = _SAME if handler is None else handler(self, event)
        if not self.config.has_client or result is None:
            return
        if result is _SAME:
            self.ctx.out.append(SendClient(frame))   # the engine's own outbox: no call on the way
        else:
            self.ctx.write_client(result)

    # ---- session ----
    def _on_session(self, event: wire.SessionCreated | wire.SessionUpdated) -> Any:
        session = self.ctx.part(event, event.session, "a session object")
        if session is None:
            return _SAME
        self.conversation.session.update(session)
        self.view.session_said(wire.wire_type(event), session)
        return self.view.session_event(event, session)

    def _on_conversation_created(self, event: wire.ConversationCreated) -> Any:
        self.view.opening(wire.wire_type(event))
        return _SAME

    # ---- items ----
    def _item_of(self, event: wire.ItemAdded | wire.ItemDone) -> ItemRecord | None:
        """Record the item an item event carries, and who produced it."""
        data = self.ctx.part(event, event.item, "an item")
        if data is None:
            return None
        record = self.conversation.upsert(data)
        if record is not None:
            self.view.classify(record)
        return record

    def _previous(self, event: wire.ItemAdded | wire.ItemDone) -> Any:
        """Where an item event places its item: `previous_item_id` (None: first), or ABSENT when
        its frame does not say."""
        return event.previous_item_id if self.ctx.codec.said_previous(event, self._frame) else ABSENT

    def _on_item_added(self, event: wire.ItemAdded) -> Any:
        record = self._item_of(event)
        if record is None:
            return _SAME
        self.lost.named(previous := self._previous(event), record.id)   # asked for if a reconnect lost it
        self.conversation.insert(record.id, previous, wire.wire_type(event))
        if record.origin == "relay":
            self.sequencer.item_confirmed(record.id)
            self.injector.output_echoed(record.id)
        self.ctx.origins.placed(record)
        self.watcher.track(record)
        return self.view.item_event(event, record)

    def _on_item_done(self, event: wire.ItemDone) -> Any:
        record = self._item_of(event)
        if record is None:
            return _SAME
        if not record.in_conversation and record.origin != "model":
            self.lost.named(previous := self._previous(event), record.id)
            self.conversation.insert(record.id, previous, wire.wire_type(event))
        self.watcher.track(record)
        if record.type == FUNCTION_CALL and record.status == "completed" and record.response_id:
            entry = self.ledger.by_item(record.id)
            if entry is not None:
                self.watcher.item_complete(entry)
        elif record.type == APPROVAL_REQUEST:
            self.approvals.item_done(record)
        return self.view.item_event(event, record)

    def _on_item_edit(self, event: wire.ItemRetrieved | wire.ItemTruncated | wire.ItemDeleted) -> Any:
        if isinstance(event, wire.ItemRetrieved) and self.lost.retrieved(event):
            return None   # the relay's own request, for an item a reconnect lost
        record = self.conversation.apply_edit(event)
        return None if record is not None and record.hidden else _SAME

    def _on_words(self, event: wire.Event) -> Any:
        self.conversation.apply_words(event)
        return _SAME

    def _on_committed(self, event: wire.InputAudioCommitted) -> Any:
        self.lost.named(event.previous_item_id, event.item_id)
        return self.view.with_visible_predecessor(event)

    # ---- responses ----
    def _on_response_created(self, event: wire.ResponseCreated) -> Any:
        data = self.ctx.part(event, event.response, "a response id", with_id=True)
        if data is None:
            return _SAME
        response = self.conversation.response(data["id"])
        assert response is not None
        if response.seen_created or response.done:
            event_type = wire.wire_type(event)
            self.ctx.anomaly(f"{event_type} for {response.id}, which was already "
                             f"{'done' if response.done else 'created'}", event_type)
            return _SAME
        response.seen_created = True
        response.created_at = self.ctx.now
        response.metadata = data.get("metadata")
        response.out_of_band = "conversation_id" in data and data.get("conversation_id") is None
        creator, ours = self.sequencer.response_created(response.id, response.metadata, self.ctx.now)
        response.creator = creator
        if creator == "relay":
            response.metadata = None   # ours: the creator says it all, and long sessions make many
        self.ctx.response_notice(response, "created", ours)
        self.lost.response_began(response)
        self.injector.response_started(response, ours)
        return self.view.response_event(event, data)

    def _on_output_item(self, event: wire.OutputItemAdded | wire.OutputItemDone) -> Any:
        response = self.conversation.response_of(event.response_id, wire.wire_type(event))
        data = self.ctx.part(event, event.item, "an item")
        if data is None:
            return _SAME
        record = self._output_item(response, data, event.output_index)
        if record is None:
            return _SAME
        if response is not None:
            record.output_index = event.output_index
        if isinstance(event, wire.OutputItemDone) and record.type == FUNCTION_CALL and record.status == "completed":
            entry = self.ledger.by_item(record.id)
            if entry is not None:
                self.watcher.item_complete(entry)
        return None if record.hidden else _SAME

    def _output_item(self, response: ResponseRecord | None, data: dict[str, Any], index: Any) -> ItemRecord | None:
        """An output item of a response, as `response.output_item.*` or `response.done` carry it."""
        record = self.conversation.upsert(data)
        if record is None:
            return None
        if response is not None:
            record.response_id = response.id
            self.conversation.link_output(response, record.id, index)
        self.view.classify(record)
        self.watcher.track(record)
        return record

    def _on_arguments_delta(self, event: wire.FunctionCallArgumentsDelta) -> Any:
        entry = self.watcher.arguments_delta(event)
        return None if entry is not None and self.view.hides_call(entry) else _SAME

    def _on_arguments_done(self, event: wire.FunctionCallArgumentsDone) -> Any:
        entry = self.watcher.arguments_done(event)
        return None if entry is not None and self.view.hides_call(entry) else _SAME

    def _on_response_done(self, event: wire.ResponseDone) -> Any:
        data = self.ctx.part(event, event.response, "a response id", with_id=True)
        if data is None:
            return _SAME
        response = self.conversation.response(data["id"])
        assert response is not None
        event_type = wire.wire_type(event)
        if response.done:
            if not self.lost.late_end(response, data, self._output_item):   # not an end the reconnect lost
                self.ctx.anomaly(f"duplicate {event_type} for {response.id}", event_type)
            return self.view.response_event(event, data)
        if not response.seen_created:
            self.ctx.anomaly(f"{event_type} without {_RESPONSE_CREATED} for {response.id}", event_type)
            if response.metadata is None:
                response.metadata = data.get("metadata")
        response.status = sys.intern(str(data.get("status") or "completed"))
        details = data.get("status_details")
        response.status_details = details if isinstance(details, dict) else None
        response.done_at = self.ctx.now
        self.ctx.response_notice(response, "done")
        output = data.get("output")
        for index, item in enumerate(output if isinstance(output, list) else []):
            if isinstance(item, dict):
                self._output_item(response, item, index)
        self.watcher.settle(response)
        self.lost.response_ended(response)
        self.sequencer.response_done(response.id)
        self.injector.response_ended(response)
        self.approvals.response_done(response)
        self.sequencer.forget_confirmed(self.injector.unlinked_item_ids())
        if response.status == "cancelled" and response.reason == "turn_detected":
            self._barge_in(f"response {response.id} cancelled (turn_detected)")
        elif response.status in CANCEL_STATES:
            self._interrupt_running_of(response)
        self.injector.inject_ready(response)
        # the client's view first: the response's items are the newest, not always the last in
        # the conversation's order (an item learnt back after a reconnect goes where the server has
        # it), and a history limit could forget them before the view hides its calls
        view = self.view.response_event(event, data)
        self.ctx.forget_old()
        return view

    # ---- errors ----
    def _on_error(self, event: wire.Error) -> Any:
        error = self.ctx.part(event, event.error, "an error object")
        if error is None:
            return _SAME
        if (ours := self.sequencer.error_about(error, self.ctx.now)) is None:
            return _SAME
        what, call_id = ours
        self.injector.follow_up_refused(self.sequencer.follow_up_call_ids(retrying=True))
        self.ctx.emit(Notice("upstream_error", {"what": what, "call_id": call_id, "code": error.get("code"),
                                                "message": error.get("message")}))
        entry = self.ledger.get(call_id)
        if entry is not None:
            entry.upstream_errors += (f"{error.get('code') or error.get('type')}: {error.get('message')}",)
            if what == "output":
                self.injector.output_refused(entry, error)
            elif what == RETRIEVE:
                self.lost.refused(entry)
        return None  # errors about the relay's own frames are not the client's business

    # ---- barge-in ----
    def _on_speech_started(self, event: wire.SpeechStarted) -> Any:
        self._barge_in(wire.event_name(wire.SpeechStarted))
        return _SAME

    # GA event -> handler returning _SAME (forward as is), None (hide) or a rewritten event
    _UPSTREAM_HANDLERS: dict[type[wire.Event], Callable[["OpenAIEngine", Any], Any]] = {
        wire.SessionCreated: _on_session,
        wire.SessionUpdated: _on_session,
        wire.ConversationCreated: _on_conversation_created,
        wire.ItemAdded: _on_item_added,
        wire.ItemDone: _on_item_done,
        wire.ItemRetrieved: _on_item_edit,
        wire.ItemTruncated: _on_item_edit,
        wire.ItemDeleted: _on_item_edit,
        wire.InputTranscriptionDelta: _on_words,
        wire.InputTranscriptionCompleted: _on_words,
        wire.InputTranscriptionFailed: _on_words,
        wire.InputAudioCommitted: _on_committed,
        wire.SpeechStarted: _on_speech_started,
        wire.ResponseCreated: _on_response_created,
        wire.OutputItemAdded: _on_output_item,
        wire.OutputItemDone: _on_output_item,
        wire.ContentPartAdded: _on_words,
        wire.ContentPartDone: _on_words,
        wire.TextDelta: _on_words,
        wire.AudioTranscriptDelta: _on_words,
        wire.TextDone: _on_words,
        wire.AudioTranscriptDone: _on_words,
        wire.FunctionCallArgumentsDelta: _on_arguments_delta,
        wire.FunctionCallArgumentsDone: _on_arguments_done,
        wire.ResponseDone: _on_response_done,
        wire.Error: _on_error,
    }

    # ==== calls =========================================================================
    def _handler_started(self, entry: CallEntry, tool: ToolSpec) -> None:
        self.sequencer.tool_started(entry.call_id, tool.on_start, tool.on_delay, self.ctx.now)

    def _streamed(self, entry: CallEntry, value: Any, rendered: RenderedOutput) -> None:
        """A streaming tool's first value is its output; later values are updates."""
        if entry.state is CallState.RUNNING:
            self._decide(entry, rendered, CallOutcome.ERROR if rendered.is_error else CallOutcome.OK,
                         self.tools.get(entry.name), handler_done=False)
        else:
            self.injector.add_update(entry, f"update from {entry.name}: {rendered.output}")

    def _after_output(self, entry: CallEntry, text: str) -> None:
        self.injector.add_update(entry, text)

    def _drop_fillers(self, call_id: str) -> None:
        self.sequencer.drop_fillers(call_id)

    def _deliver(self, entry: CallEntry, rendered: RenderedOutput) -> None:
        """Outputs go in once their response is done (see `Injector`)."""
        response = self.conversation.response(entry.response_id or "", create=False)
        if response is not None:
            self.injector.inject_ready(response)

    # ---- interruption ----
    def _interrupt_running_of(self, response: ResponseRecord) -> None:
        for entry in self.injector.response_calls(response):
            if entry.call_id in self.running and not entry.interrupted:
                self._interrupt(entry, f"response {response.status}")

    def seed(self, items: list[dict[str, Any]], session: dict[str, Any], now: float) -> list[Action]:
        """A resumed session's start (relay/edges/resume.py): `ClientView.seed`."""
        return self._run(now, Source.CLIENT, self.view.seed, items, session)

    def adopt_follow_ups(self, records: list[CallRecord], now: float) -> list[Action]:
        """Calls another relay answered and owed a follow-up for when it stopped (a session taken
        over, relay/edges/takeover.py): the model is asked to speak about them once."""
        return self._run(now, Source.UPSTREAM, self.injector.adopt_follow_ups, records)

    # ==== timers ========================================================================
    def _tick(self) -> None:
        super()._tick()
        self.sequencer.promote_due_fillers(self.ctx.now)
        self.lost.overdue()

    # ==== connection lifecycle ==========================================================
    def _on_reconnect(self) -> None:
        super()._on_reconnect()
        self.sequencer.reset_connection()
        self.lost.reconnected(self.view.held.waiting())
        self.injector.send_pending_updates()

    def _on_close(self) -> None:
        self.view.held.drop()

    # ==== client ========================================================================
    def _client_frame(self, frame: str | bytes) -> None:
        if not isinstance(frame, str):
            self.ctx.client_error("binary_frame_not_supported",
                                  "binary frames are not part of the realtime protocol; send JSON text")
            return
        event = self.ctx.read(frame)
        if event is None:
            return
        if (self.view.may_declare() and not isinstance(event, wire.SessionUpdate)
                and self.dialect.updates_before_opening):
            # the client acts before session.created reached us: the tools must be there first
            # (a server that ignores an update before its opening gets them when it is over)
            self.view.declare(None)
        result = self.view.client_event(event)
        if result is None:
            return
        if result is _SAME:
            self.ctx.out.append(SendUpstream(frame))
        else:
            self.ctx.write_upstream(result)

    # ==== sequencing ====================================================================
    def _pump(self) -> None:
        """Let the sequencer send what is due now."""
        if not self.ctx.upstream_connected:
            return
        ctx = self.ctx
        for command in self.sequencer.poll(ctx.now):
            if isinstance(command, wire.ResponseCreate):   # recorded "followed_up" before it goes
                self.injector.follow_up_going(self.sequencer.follow_up_call_ids())
            ctx.write_upstream(command)
            notice = sent_notice(command)
            if notice is not None:
                ctx.emit(notice)


_RESPONSE_CREATED = wire.event_name(wire.ResponseCreated)




__all__ = ["OpenAIEngine"]
