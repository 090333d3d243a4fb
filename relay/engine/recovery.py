"""The calls a sideband's reconnect lost, learnt back from what the wire still says (the OpenAI
family).

While the upstream is away the provider goes on: the model may make a call, and every frame of it
(its items, its `response.done`) is lost with the connection. A re-attached Realtime sideband is
sent `session.created` and what happens from then on, no history; but what comes after names
what came before. Two ways, both read here:

- **a response's end, late**: a response whose end the reconnect took for lost (its status
  `END_LOST`) may still end on the new connection; its `response.done` lists every output item,
  calls the relay never saw among them (`OpenAIEngine._on_response_done`).
- **a `previous_item_id` the relay does not know**, named by an item event or a committed input
  buffer after the reconnect: the item right before it in the conversation. The relay asks for
  it (`conversation.item.retrieve`) and a `function_call` it has no entry for, `completed`,
  becomes a call of a response whose end was lost (the retrieved item names no response; Foundry's
  `response_id` field, when there, is used). Its output goes in right after it and its batch
  gets its one follow-up, as any call's.

A call the model was still making when the connection went (its item seen, not done) may have
been finished or cut short meanwhile. It stays open at the reconnect (`CallWatcher.settle`), and
the relay asks for its item at once: its later events on the new connection complete it, or the
answer does (`CallWatcher.learnt`: completed, it runs; `incomplete`, it is skipped). A question
the server refuses (an `error` naming it), or leaves unanswered for `ASK_WAIT` seconds of
connection, skips the call (`refused`, `overdue`): it never runs on a guess, and its batch goes
on without it (its follow-up is never held by a question nobody answers).

What the wire gives no way to learn: a lost item no later event names. Each item event names the
one item before it, so of several items lost in a row only the last is named (a response that
made two calls while the sideband was away, neither seen: the second is answered, the first is
not). The window is written down in docs/guarantees.md. The relay asks only while the gap is
open: from the reconnect until a response begun after it ends (everything lost lies before that
response's items), for at most `MAX_ASKED` items. A question still unanswered when the connection
drops again went with it, or its answer did: the relay asks it again on each new connection until
it is answered or the item comes another way (the questions outstanding stay at most `MAX_ASKED`).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from relay.dialects import items as wire
from relay.dialects.openai import FUNCTION_CALL
from relay.engine.calls import CallEntry, CallState
from relay.engine.context import OpenAIContext
from relay.engine.conversation import ItemRecord, ResponseRecord
from relay.engine.injection import Injector
from relay.engine.sequencer import ACK_TIMEOUT
from relay.engine.watching import CallWatcher

RETRIEVE = "retrieve"
"""What the relay's `conversation.item.retrieve` is remembered as (an error aimed at it says so)."""
END_LOST = "unknown"
"""The status of a response whose end was lost with the connection (no wire status is this)."""
MAX_ASKED = 16
"""Items asked for in one gap, at most: the relay's own requests stay bounded whatever the wire
names."""
ASK_WAIT = ACK_TIMEOUT
"""Seconds the relay waits, connected, for the answer (or a refusal) to its question about the item
of a call it was making when the connection went, before it takes the question as refused. A
server answers each question at once; this bounds one that never does, which would otherwise hold
the call's batch, and the model's next words, for good."""


class LostItems:
    """One session's items lost to a reconnect, asked for by the ids later events name."""

    def __init__(self, ctx: OpenAIContext, watcher: CallWatcher, injector: Injector,
                 classify: Callable[[ItemRecord], None]) -> None:
        self.ctx = ctx
        self.watcher = watcher
        self.injector = injector
        self.classify = classify   # who made an item and whether the client may see it (`ClientView`)
        self.open = False                       # a reconnect happened and no response since has ended
        self.asked: dict[str, Any] = {}         # item id asked for -> the item that named it (None: a call's own)
        self._began: set[str] = set()           # responses created since the reconnect
        self._waiting: dict[str, float] = {}    # a call's own item asked for -> when (`ASK_WAIT`)

    # ---- the gap -------------------------------------------------------------------------
    def reconnected(self, client_asks_held: bool = False) -> None:
        """The upstream is back: a response still running when it went is taken as ended (its end
        was lost with the connection; the calls of it that completed still count), a batch the
        client was to continue is the relay's to continue (`_ask_unknown`; not while a create of
        the client's is held, which will: `client_asks_held`), the outputs that waited go in, and
        the gap opens."""
        ctx = self.ctx
        conversation = ctx.conversation
        unknown: list[str] = []   # items of calls the model was making when the connection went
        for response_id in list(conversation.response_order):
            response = conversation.responses[response_id]
            if not response.done:
                response.status = END_LOST
                response.done_at = ctx.now
                ctx.response_notice(response, "done")
                unknown += [entry.item_id for entry in self.watcher.settle(response, end_lost=True)
                            if entry.item_id is not None]
        for response_id in list(conversation.response_order):
            if not client_asks_held:
                self._ask_unknown(conversation.responses[response_id])
            self.injector.inject_ready(conversation.responses[response_id])
        self.open = True
        self._began.clear()
        for item_id in list(self.asked):
            if self._known(item_id):
                del self.asked[item_id]   # come meanwhile by another way
                self._waiting.pop(item_id, None)
            else:                         # the question or its answer went with the connection
                self._ask(item_id)
        for item_id in unknown:
            if item_id in self.asked:
                continue
            if len(self.asked) < MAX_ASKED:
                self.asked[item_id] = None   # (known: nothing to place it before)
                self._ask(item_id)
            elif (entry := ctx.ledger.by_item(item_id)) is not None:
                self.refused(entry)   # no question left to ask: as if refused, never left open

    def _ask_unknown(self, response: ResponseRecord) -> None:
        """A batch of both the relay's calls and the client's, which the client continues (it
        asks), that no response has answered yet when the connection comes back: the client's ask
        may have reached the server while the relay was away (a sidecar's client talks to it
        directly), and the one response about the batch with it, before the relay's outputs were
        in. Nothing on the wire says so, so the relay asks for the follow-up itself once its
        outputs are in (`asked_before_outputs`, as for a client's create that went up at the hold
        limit): a client that asks after that has a second response, not a batch unspoken."""
        if (not response.done or response.out_of_band or response.asked_before_outputs
                or not self.injector.has_client_calls(response)):
            return   # (asked before its outputs: the relay asks already)
        calls = [entry for entry in self.injector.response_calls(response) if entry.state is not CallState.SKIPPED]
        if not calls or any(entry.follow_up_response_id is not None or entry.follow_up_event_id is not None
                            for entry in calls):
            return
        response.asked_before_outputs = True
        response.batch_handled = False   # decided again, once its outputs are in

    def _ask(self, item_id: str) -> None:
        """`conversation.item.retrieve` for an item asked about; for a call's own item, tagged
        with the call, so that a refusal settles it (`refused`)."""
        entry = self.ctx.ledger.by_item(item_id) if self.asked.get(item_id, "") is None else None
        if entry is not None:
            self._waiting[item_id] = self.ctx.now
        self.ctx.send_tagged(wire.ItemRetrieve(event_id=self.ctx.new_event_id(), item_id=item_id), RETRIEVE,
                             entry.call_id if entry is not None else None)

    def refused(self, entry: CallEntry, why: str = "its item could not be retrieved after a reconnect") -> None:
        """The server refused the relay's question for the item of a call it was making when the
        connection went (an `error` naming it), left it unanswered (`overdue`), or the questions
        outstanding are at `MAX_ASKED`: nothing will say whether the model finished it, so it is
        skipped, never run on a guess, and its batch goes on without it."""
        if entry.item_id is not None:
            self.asked.pop(entry.item_id, None)
            self._waiting.pop(entry.item_id, None)
        if entry.state not in (CallState.ANNOUNCED, CallState.STREAMING):
            return
        self.ctx.rules.skip(entry, why)
        self._batch_goes_on(entry)

    def deadline(self) -> float | None:
        """When the oldest question about a call's own item is overdue (None: none waits)."""
        return min(self._waiting.values()) + ASK_WAIT if self._waiting else None

    def overdue(self) -> None:
        """The questions about calls' own items unanswered for `ASK_WAIT` seconds, connected, are
        taken as refused. While the upstream is away none is: each is asked again, and waited for
        anew, on the next connection (`reconnected`)."""
        if not self._waiting or not self.ctx.upstream_connected:
            return
        now = self.ctx.now
        for item_id in [item_id for item_id, asked_at in self._waiting.items() if asked_at + ASK_WAIT <= now]:
            del self._waiting[item_id]
            entry = self.ctx.ledger.by_item(item_id)
            if entry is None:
                self.asked.pop(item_id, None)
            else:
                self.refused(entry, f"its item's retrieve got no answer in {ASK_WAIT:g} s after a reconnect")

    def _batch_goes_on(self, entry: CallEntry) -> None:
        """A call held open after a reconnect is settled: its response's outputs and follow-up may
        go now (`Injector.inject_ready`)."""
        response = self.ctx.conversation.response(entry.response_id, create=False) if entry.response_id else None
        if response is not None:
            self.injector.inject_ready(response)

    def _known(self, item_id: str) -> bool:
        """Whether what the relay asked about this item is known by now: the item, and, for a call
        it was making, whether that call was finished or cut short."""
        if self.ctx.conversation.item(item_id) is None:
            return False
        entry = self.ctx.ledger.by_item(item_id)
        return entry is None or entry.state not in (CallState.ANNOUNCED, CallState.STREAMING)

    def response_began(self, response: ResponseRecord) -> None:
        if self.open:
            self._began.add(response.id)

    def response_ended(self, response: ResponseRecord) -> None:
        """A response begun after the reconnect ended with items in the conversation: what was
        lost lies before them, and has been named by now if anything names it."""
        if response.id in self._began and not response.out_of_band and response.output_item_ids:
            self.open = False
            self._began.clear()

    def named(self, previous: Any, following: Any) -> None:
        """An event placed `following` right after `previous`: an item the relay does not know,
        named while the gap is open, is asked for (once); one it knew and forgot (a history limit)
        is not lost."""
        if not self.open or not isinstance(previous, str) or not previous or previous == "root":
            return
        conversation = self.ctx.conversation
        if (previous in self.asked or conversation.item(previous) is not None or previous in conversation.forgotten
                or len(self.asked) >= MAX_ASKED):
            return
        self.asked[previous] = following
        self._ask(previous)

    # ---- what the provider answers ---------------------------------------------------------
    def retrieved(self, event: wire.ItemRetrieved) -> bool:
        """`conversation.item.retrieved`: True when it answers the relay's own request (the
        client, if any, never asked for it); a lost call in it becomes a call."""
        item = event.item
        item_id = item.get("id") if isinstance(item, dict) else None
        if not isinstance(item_id, str) or item_id not in self.asked:
            return False
        following = self.asked.pop(item_id)
        self._waiting.pop(item_id, None)
        ctx = self.ctx
        known = ctx.conversation.item(item_id) is not None
        record = ctx.conversation.upsert(item)   # type: ignore[arg-type]
        if record is not None and known and record.type == FUNCTION_CALL:
            # a call it was making when the connection went: finished or cut short meanwhile
            entry = ctx.ledger.by_item(item_id)
            if entry is not None and self.watcher.learnt(entry, record):
                self._batch_goes_on(entry)
        if record is None or known:
            return True   # it arrived meanwhile by another way: what said so handled it
        # as any item the wire brings: a call of a relay tool, or an output of the relay's, stays
        # hidden from the client (never named as the item before one it sees)
        self.classify(record)
        ctx.conversation.insert_before(item_id, following)
        call_id = record.call_id
        if (record.type != FUNCTION_CALL or record.status != "completed" or not isinstance(call_id, str)
                or ctx.ledger.get(call_id) is not None):
            # not a call; or one still being made (its later events announce it) or cut short
            # (an incomplete item is never run); or a call the relay already has
            return True
        response = self._response_of(item)
        record.response_id = response.id
        ctx.origins.classify(record)   # the model's, now that it has its response
        ctx.conversation.link_output(response, item_id, None)
        if response.batch_handled:   # (Foundry names it) its batch had its follow-up: one of its own
            response = self.rest_of(response, [item_id])
        self.watcher.track(record)
        entry = ctx.ledger.by_item(item_id)
        if entry is not None:
            self.watcher.item_complete(entry)
        self.injector.inject_ready(response)
        return True

    def late_end(self, response: ResponseRecord, data: dict[str, Any],
                 read_output: Callable[[ResponseRecord, dict[str, Any], Any], Any]) -> bool:
        """`response.done` for a response already done: True when it is the end of one the
        reconnect took for lost, come on the new connection (False: a duplicate). Its
        output (each item read by `read_output`) lists every item, calls the relay never saw among
        them. What was decided at the reconnect stands; a call first seen here runs unless this
        end says it was cut short."""
        if response.status != END_LOST:
            return False
        response.status = sys.intern(str(data.get("status") or "completed"))
        details = data.get("status_details")
        response.status_details = details if isinstance(details, dict) else None
        before = set(response.output_item_ids)
        output = data.get("output")
        for index, item in enumerate(output if isinstance(output, list) else []):
            if isinstance(item, dict):
                read_output(response, item, index)
        fresh = [item_id for item_id in response.output_item_ids if item_id not in before]
        if fresh and response.batch_handled:
            response = self.rest_of(response, fresh)   # a batch of their own: one follow-up each
        self.watcher.settle(response)
        self.ctx.sequencer.response_done(response.id)   # a create refused while it ran goes now
        self.injector.inject_ready(response)
        return True

    def rest_of(self, response: ResponseRecord, item_ids: list[str]) -> ResponseRecord:
        """The items of `response` first seen at its late end, when the batch of its calls seen
        before had its follow-up already: moved to a response of their own (ended as it did), so
        that they get one follow-up and those calls no second one."""
        ctx = self.ctx
        rest = ctx.conversation.response(ctx.new_id("r"))
        assert rest is not None
        rest.status, rest.status_details, rest.done_at = response.status, response.status_details, ctx.now
        for item_id in item_ids:
            response.output_item_ids.remove(item_id)
            ctx.conversation.link_output(rest, item_id, None)
            record = ctx.conversation.item(item_id)
            if record is not None:
                record.response_id = rest.id
            entry = ctx.ledger.by_item(item_id)
            if entry is not None:
                entry.response_id = rest.id
        return rest

    def _response_of(self, item: dict[str, Any]) -> ResponseRecord:
        """The response a retrieved call was made in: the one its item names (Foundry's
        `response_id`), else one of the relay's making; its end was lost with the connection
        unless it began on this one (then its `response.done` is still to come here). A named
        response the relay never saw begin (its `response.created` was lost too) would otherwise
        wait for an end that never comes, and its call for its output."""
        conversation = self.ctx.conversation
        named = item.get("response_id")
        response = conversation.response(named if isinstance(named, str) and named else self.ctx.new_id("r"))
        assert response is not None
        if not response.done and response.id not in self._began:
            response.status = END_LOST
            response.done_at = self.ctx.now
        return response


__all__ = ["END_LOST", "MAX_ASKED", "RETRIEVE", "LostItems"]
