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

from dataclasses import replace
from typing import Any, Iterable

from relay.dialects import items as wire
from relay.engine.actions import Remember
from relay.engine.calls import CallEntry, CallState, Owner
from relay.engine.context import OpenAIContext
from relay.engine.conversation import ResponseRecord
from relay.engine.records import CallRecord, Phase
from relay.engine.sequencer import META_CALLS, META_KIND, SentCreate
from relay.tools import Scheduling

_SILENT = Scheduling.SILENT.value
_INTERRUPT = Scheduling.INTERRUPT.value
_SETTLED = frozenset({CallState.ANSWERED, CallState.SKIPPED})
_SENT_PHASES = frozenset({Phase.SENT, Phase.FOLLOW_UP, Phase.FOLLOWED_UP})
DUPLICATE_ITEM = "duplicate_item_id"   # the provider's refusal of an item id it already has


class Injector:
    """The outputs of one session's relay calls on their way into the conversation."""

    def __init__(self, ctx: OpenAIContext) -> None:
        self.ctx = ctx
        self.pending_updates: dict[str, list[str]] = {}   # call_id -> updates waiting for its output
        self.unlinked_outputs: set[str] = set()           # call ids injected, not yet answered by a response
        # calls whose follow-up is owed until a response about them begins: this engine's
        # entries, and the records of calls a takeover adopted (`follow_up_going` says which)
        self.owed: dict[str, CallEntry | CallRecord] = {}
        self._going: set[str] = set()           # owed calls recorded "followed_up": their create goes
        self._adopted_waiting: list[str] = []   # adopted owed follow-ups not yet requested
        self._unechoed: dict[str, str] = {}     # output item id -> call id, until the provider echoes it
        self.awaiting: dict[str, bool] = {}     # call id -> followed_up, for outputs resent on a takeover

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
        self._unechoed[item_id] = entry.call_id
        ctx.origins.relay_sent(item_id)
        ctx.send_tagged(ctx.codec.output_create(
            ctx.dialect, event_id, previous_item_id, item_id=item_id, call_id=entry.call_id,
            output=entry.output or "", status=entry.output_status or "completed", name=entry.name,
            response_id=entry.response_id, created_at=int(ctx.now)), "output", entry.call_id)
        if entry.state is not CallState.ANSWERED:
            ctx.rules.output_sent(entry)
            self.unlinked_outputs.add(entry.call_id)
            for text in self.pending_updates.pop(entry.call_id, []):
                self._send_update(entry, text)

    # ==== delivery: the provider's echo of an output, and outputs sent again ==========
    # An output marked "sent" may still be lost (a process killed with the frame in its socket),
    # so a record says `delivered` once the provider echoed the output's item. A new owner sends
    # an undelivered output again with the same item id (`resend_as`): the provider takes it (it
    # was lost, and whatever the old owner sent after it too) or refuses it as a duplicate (it was
    # delivered); the batch's follow-up waits for that verdict.
    def resend_as(self, call_id: str, item_id: str, *, followed_up: bool) -> None:
        """The call's output goes again as `item_id` (its old owner's); `followed_up`: its old
        record said the follow-up went too (it did, if the output turns out delivered)."""
        entry = self.ctx.ledger.get(call_id)
        if entry is not None:
            entry.output_item_id = item_id
            self.awaiting[call_id] = followed_up

    def output_echoed(self, item_id: str) -> None:
        """The provider echoed a relay item: a call's output is delivered (recorded so)."""
        call_id = self._unechoed.pop(item_id, None)
        entry = None if call_id is None else self.ctx.ledger.get(call_id)
        if entry is not None and not entry.delivered:
            self._delivered(entry)
            self._verdict(entry, followed_up=False)   # lost before: what followed it was lost too

    def output_refused(self, entry: CallEntry, error: dict[str, Any]) -> None:
        """The provider refused a call's output: placed after an item that vanished (sent again,
        appended), or, sent again after a takeover, a duplicate (the old owner's was delivered)."""
        if error.get("param") == "previous_item_id":
            self.reinject_appended(entry)
        elif error.get("code") == DUPLICATE_ITEM and entry.call_id in self.awaiting:
            self._unechoed.pop(entry.output_item_id or "", None)
            self._delivered(entry)
            self._verdict(entry, followed_up=self.awaiting[entry.call_id])

    def _delivered(self, entry: CallEntry) -> None:
        entry.delivered = True
        if entry.recorded is not None and entry.recorded[0] in _SENT_PHASES:
            phase, follow_up = entry.recorded
            self.ctx.remember(entry, phase, follow_up=follow_up)

    def _verdict(self, entry: CallEntry, *, followed_up: bool) -> None:
        """A resent output's verdict is in: its batch's follow-up is decided now (none for it if
        its follow-up had gone with the delivered original)."""
        if self.awaiting.pop(entry.call_id, None) is None:
            return
        if followed_up:
            entry.speak = False
        response = self.ctx.conversation.response(entry.response_id or "", create=False)
        if response is not None:
            self._check_batch(response, self.response_calls(response))

    def reinject_appended(self, entry: CallEntry) -> None:
        """The predecessor we chose vanished (deleted meanwhile): append the output instead."""
        if entry.output is None or entry.output_retried:
            return
        entry.output_retried = True
        self.send_output(entry, previous_item_id=None)

    def _check_batch(self, response: ResponseRecord, calls: list[CallEntry]) -> None:
        """Once every relay call of a done response is answered, decide its one follow-up."""
        if response.batch_handled or any(c.call_id in self.awaiting for c in calls):
            return
        live = [c for c in calls if c.state is not CallState.SKIPPED]
        if not live or any(c.state is not CallState.ANSWERED for c in live):
            return
        response.batch_handled = True
        if self.has_client_calls(response) and not response.asked_before_outputs:
            self._request_adopted()
            return  # the client answers its calls and asks for the response itself
        speakers = [c for c in live if c.speak and c.scheduling != _SILENT]
        if not speakers:
            self._request_adopted()
            return
        for entry in live:   # written ahead of the create the sequencer sends for them
            self.ctx.remember(entry, Phase.FOLLOW_UP, follow_up=True)
            self.owed[entry.call_id] = entry
        self.ctx.sequencer.request_follow_up(
            [c.call_id for c in live] + self._take_adopted(),
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
            for call_id in ours.call_ids:   # recorded "followed_up" as its create went
                self.owed.pop(call_id, None)
                self._going.discard(call_id)
        elif ours is None and not response.out_of_band:
            if not self.ctx.config.has_client:
                self._continued_unseen()
            # someone else's response answers the outputs already in (the sequencer drops the
            # follow-ups it takes over by the same rule)
            sequencer = self.ctx.sequencer
            self._followed_up([call_id for call_id, owed in self.owed.items()
                               if isinstance(owed, CallRecord) or sequencer.is_confirmed(owed.output_item_id)])
        if not response.out_of_band:
            self._link_follow_ups(response.id)

    def _continued_unseen(self) -> None:
        """A sidecar saw a response begin that it did not ask for. A batch of both its calls and
        the client's, whose response is done, whose client calls are all answered and whose relay
        calls still run, has been continued by the client (which asks for its batch itself,
        unseen): that response was asked for before the relay's outputs were in and cannot speak
        them, so the relay asks for its own follow-up once they are (`asked_before_outputs`, as a
        proxy does for a client's create that went up at its hold limit). A response begun while
        a client call of the batch is still unanswered is not its continuation (the caller
        spoke): the client's ask, when it comes, is looked at again then."""
        responses = self.ctx.conversation.responses
        for entry in self.ctx.ledger.unanswered():
            response = responses.get(entry.response_id or "")
            if response is None or not response.done or response.batch_handled or response.asked_before_outputs:
                continue
            client_calls = [e for e in map(self.ctx.ledger.by_item, response.output_item_ids)
                            if e is not None and e.owner is Owner.CLIENT and e.state is not CallState.SKIPPED]
            if client_calls and all(e.output is not None for e in client_calls):
                response.asked_before_outputs = True

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

    # ==== the follow-up owed, recorded until it is sent =================================
    # "follow_up" (owed) is recorded once a batch's outputs are in; "followed_up" (sent) ahead of
    # the create that asks for it, as an output's "sent" is ahead of the output, so that an owner
    # taking the session over sends it if and only if this one did not (but for the time it takes
    # to write the frame); a create refused as "already active", to go again, makes it owed again.
    def follow_up_going(self, call_ids: Iterable[str]) -> None:
        """The relay's follow-up create about `call_ids` goes up next (after these records)."""
        for call_id in call_ids:
            owed = self.owed.get(call_id)
            if owed is not None and call_id not in self._going:
                self._going.add(call_id)
                self._record(owed, Phase.FOLLOWED_UP)

    def follow_up_refused(self, call_ids: Iterable[str]) -> None:
        """That create was refused and waits to go again: the follow-up is owed again."""
        for call_id in call_ids:
            owed = self.owed.get(call_id)
            if owed is not None and call_id in self._going:
                self._going.discard(call_id)
                self._record(owed, Phase.FOLLOW_UP)

    def adopt_follow_ups(self, records: list[CallRecord]) -> None:
        """Calls another relay answered and owed a follow-up for when it stopped (a takeover:
        their outputs are in the conversation, "follow_up" is their record). One follow-up is
        requested for them, with the next batch's if a relay call is still unanswered, else now;
        any in-conversation response that begins from now on answers them (it comes after their
        outputs), and so does the old owner's own follow-up if its end is seen
        (`response_ended`)."""
        for record in records:
            if record.call_id not in self.owed:
                self.owed[record.call_id] = record
                self._adopted_waiting.append(record.call_id)
        self._request_adopted()

    def _take_adopted(self) -> list[str]:
        """The adopted follow-ups to request now: once no relay call is left unanswered."""
        if not self._adopted_waiting or any(
                entry.owner is Owner.RELAY and entry.state not in _SETTLED for entry in self.ctx.ledger):
            return []
        waiting, self._adopted_waiting = self._adopted_waiting, []
        return waiting

    def _request_adopted(self) -> None:
        call_ids = self._take_adopted()
        if call_ids:
            self.ctx.sequencer.request_follow_up(call_ids, interrupt=False, messages=[], confirm=set(),
                                                 now=self.ctx.now)

    def response_ended(self, response: ResponseRecord) -> None:
        """A response not ours, whose metadata says it is a relay's follow-up about some calls,
        ended: for calls adopted with their follow-up owed, the old owner had sent it after all
        (its response ran on while no replica was attached). Ours for them does not go up."""
        metadata = response.metadata
        if response.creator == "relay" or not isinstance(metadata, dict) or metadata.get(META_KIND) != "follow_up":
            return
        named = str(metadata.get(META_CALLS) or "").split(",")
        adopted = {call_id for call_id in named if isinstance(self.owed.get(call_id), CallRecord)}
        if adopted:
            self._adopted_waiting = [call_id for call_id in self._adopted_waiting if call_id not in adopted]
            self.ctx.sequencer.answered_elsewhere(adopted)
            self._followed_up(adopted)

    def _followed_up(self, call_ids: Iterable[str]) -> None:
        """A response about these calls began that was not the relay's follow-up: "followed_up"
        is recorded for those whose follow-up was owed (their follow-up is no longer asked for)."""
        for call_id in list(call_ids):
            owed = self.owed.pop(call_id, None)
            if owed is not None and call_id not in self._going:
                self._record(owed, Phase.FOLLOWED_UP)
            self._going.discard(call_id)

    def _record(self, owed: CallEntry | CallRecord, phase: Phase) -> None:
        if isinstance(owed, CallRecord):
            self.ctx.out.append(Remember(replace(owed, phase=phase, at=self.ctx.now)))
        else:
            self.ctx.remember(owed, phase, follow_up=True)

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
        ctx.send_tagged(ctx.codec.system_message_create(event_id, item_id, text), "update", entry.call_id)
        response = ctx.conversation.response(entry.response_id or "", create=False)
        if response is None or not response.batch_handled:
            return  # the batch's own follow-up, still to come, covers what this update says
        if entry.speak and entry.scheduling != _SILENT and not self.has_client_calls(response):
            ctx.sequencer.request_follow_up(
                [entry.call_id], interrupt=entry.scheduling == _INTERRUPT,
                messages=[], confirm={item_id}, now=ctx.now)
