"""What the OpenAI family's items and events say about calls (GA, beta, Azure, Foundry).

A `function_call` item announces a call (its owner decided then, once), argument deltas and
`response.function_call_arguments.done` build its arguments, its item done in a live response
completes it, and at `response.done` each call of the response that was still open is complete
or skipped. A `function_call_output` item is an answer: the client's to its own call, or the echo
of the relay's. `CallWatcher` records new calls in the call book and reports the rest to the
core's rules (`context.CallRules`), through the session's context only.
"""

from __future__ import annotations

from relay.dialects import items as wire
from relay.dialects.openai import FUNCTION_CALL, FUNCTION_CALL_OUTPUT
from relay.engine.calls import CallEntry, CallState, Owner
from relay.engine.context import OpenAIContext
from relay.engine.conversation import ItemRecord, ResponseRecord

CANCEL_STATES = ("cancelled", "failed")
IN_PROGRESS = "in_progress"
_OPEN = (CallState.ANNOUNCED, CallState.STREAMING)


class CallWatcher:
    """The calls of one OpenAI-family session, as its items and events tell them."""

    def __init__(self, ctx: OpenAIContext) -> None:
        self.ctx = ctx

    def track(self, record: ItemRecord) -> None:
        """An item was seen (added, done, or in a response's output): a call item announces its
        call, an output item answers one."""
        if record.type == FUNCTION_CALL:
            self._announce(record)
        elif record.type == FUNCTION_CALL_OUTPUT:
            ctx = self.ctx
            entry = ctx.ledger.get(record.call_id)
            if entry is None:
                ctx.anomaly(f"output for unknown call {record.call_id}", FUNCTION_CALL_OUTPUT)
                return
            if entry.owner is Owner.CLIENT or record.origin == "client":
                entry.output = record.output
                entry.output_item_id = record.id
                entry.output_status = record.status
                if entry.owner is Owner.CLIENT:
                    ctx.rules.client_answered(entry)
            elif record.output == entry.output:
                record.output = entry.output   # the echo of ours: keep one copy of the text

    def _announce(self, record: ItemRecord) -> None:
        ctx = self.ctx
        call_id = record.call_id
        if not isinstance(call_id, str) or not call_id:
            ctx.anomaly(f"function_call item {record.id} without call_id", FUNCTION_CALL)
            return
        entry = ctx.ledger.get(call_id)
        name = record.name or ""
        if entry is None:
            client_made = record.origin == "client" or ctx.origins.client_made_call(call_id)
            entry = ctx.ledger.add(CallEntry(call_id, name, record.id, record.response_id,
                                             ctx.rules.owner_of(name, client_made=client_made),
                                             announced_at=ctx.now))
        elif entry.item_id != record.id:
            if entry.item_id is None:
                entry.item_id = record.id
                ctx.ledger.add(entry)
            else:
                ctx.anomaly(f"call {call_id} announced again with another item {record.id}", FUNCTION_CALL)
                return
        if entry.response_id is None and record.response_id is not None:
            entry.response_id = record.response_id
        if not entry.name and name:
            entry.name = name
        if record.arguments and record.status == "completed":
            entry.arguments = record.arguments

    def arguments_delta(self, event: wire.FunctionCallArgumentsDelta) -> CallEntry | None:
        """An arguments delta: its call (None when unknown)."""
        entry = self._call_of_event(event)
        if entry is None:
            return None
        delta = event.delta
        if isinstance(delta, str):
            entry.arguments += delta
            entry.delta_count += 1
        if entry.state is CallState.ANNOUNCED:
            self.ctx.ledger.move(entry, CallState.STREAMING, self.ctx.now)
        return entry

    def arguments_done(self, event: wire.FunctionCallArgumentsDone) -> CallEntry | None:
        """The arguments done: the final arguments win over the deltas."""
        entry = self._call_of_event(event)
        if entry is None:
            return None
        final = event.arguments
        if isinstance(final, str):
            if entry.delta_count and entry.arguments != final:
                event_type = wire.wire_type(event)
                self.ctx.anomaly(
                    f"arguments of call {entry.call_id} assembled from {entry.delta_count} deltas "
                    f"differ from {event_type}", event_type)
            entry.arguments_from_done = final
            entry.arguments = final
        return entry

    def _call_of_event(self, event: wire.FunctionCallArgumentsDelta | wire.FunctionCallArgumentsDone) -> CallEntry | None:
        ctx = self.ctx
        call_id, item_id = event.call_id, event.item_id
        entry = ctx.ledger.by_item(item_id) or ctx.ledger.get(call_id)
        if entry is None:
            event_type = wire.wire_type(event)
            ctx.anomaly(f"{event_type} for unknown call {call_id or item_id}", event_type)
            if isinstance(call_id, str) and isinstance(item_id, str):
                # a log that elided the item's announcement: keep the arguments, own nothing
                response_id = event.response_id
                entry = ctx.ledger.add(CallEntry(call_id, str(getattr(event, "name", None) or ""), item_id,
                                                 response_id if isinstance(response_id, str) else None,
                                                 Owner.CLIENT, announced_at=ctx.now))
        return entry

    def item_complete(self, entry: CallEntry) -> None:
        """The model finished the call's item: it may run unless it is a repeat, not a
        response's output, or its response already ended cancelled or failed."""
        if entry.state not in _OPEN:
            return  # duplicate delivery: a call is started once
        if entry.response_id is None:
            return  # not a response output: never executed
        rules = self.ctx.rules
        response = self.ctx.conversation.response(entry.response_id, create=False)
        if response is not None and response.done and response.status in CANCEL_STATES:
            rules.skip(entry, f"response {response.status}")
            return
        rules.complete(entry)

    def settle(self, response: ResponseRecord, *, end_lost: bool = False) -> list[CallEntry]:
        """At `response.done`, every call of the response is either complete or skipped. When its
        end was lost with the connection (`end_lost`), a call whose item was still being made is
        neither: the model may have finished it or been cut short while the relay was away. It
        stays open, for its later events or the relay's question for its item to say which
        (relay/engine/recovery.py); those calls are returned."""
        ctx = self.ctx
        failed = response.status in CANCEL_STATES
        unknown: list[CallEntry] = []
        for item_id in response.output_item_ids:
            entry = ctx.ledger.by_item(item_id)
            if entry is None or entry.state not in _OPEN:
                continue
            record = ctx.conversation.item(item_id)
            item_status = record.status if record is not None else None
            if failed:
                reason = f"response {response.status}" + (f" ({response.reason})" if response.reason else "")
                ctx.rules.skip(entry, reason)
            elif end_lost and item_status == IN_PROGRESS:
                unknown.append(entry)
            elif item_status not in (None, "completed"):
                ctx.rules.skip(entry, f"item {item_status}")
            else:
                self.item_complete(entry)
        return unknown

    def learnt(self, entry: CallEntry, record: ItemRecord) -> bool:
        """What the relay's question for an open call's item answered (`record`, its latest form):
        complete, the call may run; cut short, it is skipped; still being made, it waits for its
        later events. True when the call is settled by it."""
        if entry.state not in _OPEN:
            return False
        if record.status == "completed":
            self.track(record)   # its final arguments
            self.item_complete(entry)
            return True
        if record.status != IN_PROGRESS:
            self.ctx.rules.skip(entry, f"item {record.status}")
            return True
        return False
