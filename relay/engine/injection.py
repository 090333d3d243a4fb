"""Where and when the relay's outputs enter an OpenAI-family conversation, and the one follow-up
the model is asked for after them.

A relay call's output goes in once its response is done (an output sent earlier would land
inside a response still writing), right after that response's items and in call order. Once
every relay call of the response is answered, one `response.create` is requested from the
sequencer — none when the response also holds calls the client answers (the client then asks
for the response itself), or when every output is silent or interrupted. A streaming tool's later
values go in as system messages, each spoken about once its batch has been. `Injector` does this
for the engine, through the session's context only (`context.OpenAIContext`); the sequencer
decides when a requested create may go.
"""

from __future__ import annotations

from typing import Any

from relay.dialects import openai_codec as wire
from relay.engine.calls import CallEntry, CallState, Owner
from relay.engine.context import OpenAIContext
from relay.engine.conversation import ResponseRecord
from relay.engine.records import Phase
from relay.engine.sequencer import SentCreate
from relay.tools import Scheduling

_SILENT = Scheduling.SILENT.value
_INTERRUPT = Scheduling.INTERRUPT.value


class Injector:
    """The outputs of one session's relay calls on their way into the conversation."""

    def __init__(self, ctx: OpenAIContext) -> None:
        self.ctx = ctx
        self.pending_updates: dict[str, list[str]] = {}   # call_id -> updates waiting for its output
        self.unlinked_outputs: set[str] = set()           # call ids injected, not yet answered by a response

    # ==== outputs =======================================================================
    def response_calls(self, response: ResponseRecord) -> list[CallEntry]:
        """The relay calls of a response, in call order (output index)."""
        calls = []
        for item_id in response.output_item_ids:
            entry = self.ctx.ledger.by_item(item_id)
            if entry is not None and entry.owner is Owner.RELAY:
                calls.append(entry)
        return calls

    def inject_ready(self, response: ResponseRecord) -> None:
        """Send the decided outputs of a done response, then settle its follow-up."""
        ctx = self.ctx
        if not response.done or not ctx.upstream_connected or ctx.closed:
            return
        calls = self.response_calls(response)
        for entry in calls:
            if entry.state is CallState.FINISHED:
                self.send_output(entry, previous_item_id=self._output_position(entry, calls, response))
        self._check_batch(response, calls)

    def _output_position(self, entry: CallEntry, calls: list[CallEntry], response: ResponseRecord) -> Any:
        """Right after the last item of the call's response, outputs in call order: after the
        output of the nearest earlier call already injected, else after the response's last item."""
        if response.out_of_band:
            return None
        conversation = self.ctx.conversation
        for earlier in reversed(calls[: calls.index(entry)]):
            if earlier.output_item_id and earlier.state is CallState.ANSWERED:
                record = conversation.item(earlier.output_item_id)
                if record is None or not record.deleted:
                    return earlier.output_item_id
        return conversation.last_item_of_response(response)

    def send_output(self, entry: CallEntry, *, previous_item_id: Any) -> None:
        """The call's `function_call_output`, with this wire's fields (Foundry's `name`...)."""
        ctx = self.ctx
        item_id = entry.output_item_id or ctx.new_id("i")
        event_id = ctx.new_event_id()
        entry.output_item_id = item_id
        entry.output_event_id = event_id
        ctx.origins.relay_sent(item_id)
        ctx.send_tagged(wire.output_create(
            ctx.dialect, event_id, previous_item_id, item_id=item_id, call_id=entry.call_id,
            output=entry.output or "", status=entry.output_status or "completed", name=entry.name,
            response_id=entry.response_id, created_at=int(ctx.now)), "output", entry.call_id)
        if entry.state is not CallState.ANSWERED:
            ctx.rules.output_sent(entry)
            self.unlinked_outputs.add(entry.call_id)
            for text in self.pending_updates.pop(entry.call_id, []):
                self._send_update(entry, text)

    def reinject_appended(self, entry: CallEntry) -> None:
        """The predecessor we chose vanished (deleted meanwhile): append the output instead."""
        if entry.output is None or entry.output_retried:
            return
        entry.output_retried = True
        self.send_output(entry, previous_item_id=None)

    def _check_batch(self, response: ResponseRecord, calls: list[CallEntry]) -> None:
        """Once every relay call of a done response is answered, decide its one follow-up."""
        if response.batch_handled:
            return
        live = [c for c in calls if c.state is not CallState.SKIPPED]
        if not live or any(c.state is not CallState.ANSWERED for c in live):
            return
        response.batch_handled = True
        if self.has_client_calls(response) and not response.asked_before_outputs:
            return  # the client answers its calls and asks for the response itself
        speakers = [c for c in live if c.speak and c.scheduling != _SILENT]
        if not speakers:
            return
        for entry in live:   # written ahead of the create the sequencer sends for them
            self.ctx.remember(entry, Phase.FOLLOW_UP, follow_up=True)
        self.ctx.sequencer.request_follow_up(
            [c.call_id for c in live],
            interrupt=any(c.scheduling == _INTERRUPT for c in speakers),
            messages=[c.message for c in speakers if c.message],
            confirm={c.output_item_id for c in live if c.output_item_id},
            now=self.ctx.now,
        )

    def has_client_calls(self, response: ResponseRecord | None) -> bool:
        return response is not None and any(
            e is not None and e.owner is Owner.CLIENT and e.state is not CallState.SKIPPED
            for e in map(self.ctx.ledger.by_item, response.output_item_ids))

    def response_started(self, response: ResponseRecord, ours: SentCreate | None) -> None:
        """Link the calls a response answers: the calls of our follow-up; and, for the first
        in-conversation response that starts after a call's output landed, the call (the model
        answers it there, whoever asked for that response)."""
        if ours is not None and ours.purpose == "follow_up":
            for call_id in ours.call_ids:
                entry = self.ctx.ledger.get(call_id)
                if entry is not None:
                    entry.follow_up_event_id = ours.event_id
        if not response.out_of_band:
            self._link_follow_ups(response.id)

    def _link_follow_ups(self, response_id: str) -> None:
        ledger, sequencer = self.ctx.ledger, self.ctx.sequencer
        for call_id in list(self.unlinked_outputs):
            entry = ledger.get(call_id)
            if entry is None or sequencer.is_confirmed(entry.output_item_id):
                self.unlinked_outputs.discard(call_id)
                if entry is not None:
                    entry.follow_up_response_id = response_id

    def unlinked_item_ids(self) -> set[str]:
        """The output items whose answering response has not started yet."""
        ledger = self.ctx.ledger
        return {e.output_item_id for e in map(ledger.get, self.unlinked_outputs) if e is not None and e.output_item_id}

    # ==== streaming updates =============================================================
    def add_update(self, entry: CallEntry, text: str) -> None:
        entry.updates += (text,)
        if entry.state is CallState.ANSWERED and self.ctx.upstream_connected:
            self._send_update(entry, text)
        else:
            self.pending_updates.setdefault(entry.call_id, []).append(text)

    def send_pending_updates(self) -> None:
        """After a reconnect: the updates of answered calls that waited for the connection."""
        for call_id in list(self.pending_updates):
            entry = self.ctx.ledger.get(call_id)
            if entry is not None and entry.state is CallState.ANSWERED:
                for text in self.pending_updates.pop(call_id):
                    self._send_update(entry, text)

    def _send_update(self, entry: CallEntry, text: str) -> None:
        """A streaming tool's later value: a system message the model can speak about."""
        ctx = self.ctx
        item_id = ctx.new_id("i")
        event_id = ctx.new_event_id()
        ctx.origins.relay_sent(item_id)
        ctx.send_tagged(wire.system_message_create(event_id, item_id, text), "update", entry.call_id)
        response = ctx.conversation.response(entry.response_id or "", create=False)
        if response is None or not response.batch_handled:
            return  # the batch's own follow-up, still to come, covers what this update says
        if entry.speak and entry.scheduling != _SILENT and not self.has_client_calls(response):
            ctx.sequencer.request_follow_up(
                [entry.call_id], interrupt=entry.scheduling == _INTERRUPT,
                messages=[], confirm={item_id}, now=ctx.now)
