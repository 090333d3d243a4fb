"""GPT-Live's Responses delegation, as engine rules: the backend's function calls read from their
`response.event` envelopes, run once, answered once, and each batch continued once.

The backend's events arrive wrapped in `response.event`; a function call is read only from the
nested `response.output_item.done` (never from the terminal snapshot, whose `output` is empty), is
recorded in the call book once whatever repeats, and is the relay's when it calls one of its
tools (or a function nobody declared: it is answered with an error, so that its batch can go
on). A relay call's output goes up as one `response.item.create` once its backend response
completed; the batch's one `response.create` when `batches.Batches` says it is due. A client's
output for one of its own calls is passed on (and may complete the batch), one for a relay call
is refused (relay/engine/client_asks.py: what the client sends, its outputs and its creates).
While the upstream is away (a sideband reconnecting) answers wait and go up, in order, on its
return. `delegations.LiveEngine` builds on these rules.
"""

from __future__ import annotations

from typing import Any

from relay.dialects import live
from relay.engine.actions import SendUpstream
from relay.engine.batches import Batch, Batches, CreatesUp
from relay.engine.calls import CallEntry, CallOutcome, CallState, Owner
from relay.engine.core import SessionEngine
from relay.engine.records import Phase
from relay.engine.sequencer import ACK_TIMEOUT
from relay.tools.render import render_error

DELEGATED, BACKEND_CALL = "delegation", "backend call"   # the shapes a relay call arrives in
CREATE_WAIT = ACK_TIMEOUT
"""Seconds a batch's create waits, at most, for the response of a create already up to begin (as
long as the sequencer waits for a create's acknowledgement on Realtime)."""
SAME: Any = object()   # forward the frame as it came
DROP: Any = None       # the other side does not see it
UNCLAIMED: Any = object()   # (`_client_create_refused`) the command was not a client's create


class ResponsesDelegation(SessionEngine):
    """The Responses delegation's rules of a GPT-Live session (see the module)."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self._hiding = self.config.hide_tool_events and self.config.has_client
        self.delegate = self.tools.delegate
        self.batches = Batches(self.ledger.get)
        self._client_tools: set[str] | None = None    # functions the client declared (None: not seen)
        self._relay_items: set[str] = set()           # backend item ids of relay calls (hidden)
        self._unsent: list[tuple[CallEntry | None, list[live.Event]]] = []   # while the upstream is away
        self._after_forward: list[Batch] = []         # batches to look at once a client's frame went up
        self._owed_by_create: dict[str, list[CallEntry]] = {}   # the relay's create -> the calls it follows up
        self._creates_up = CreatesUp()                # this session's creates whose response has not begun
        self._create_of: dict[str, str | None] = {}   # a continued batch -> the create that continued it
        self._delegated: dict[str, str | None] = {}   # a delegation announced -> its response id, not begun yet
        self._begun: set[str] = set()                 # backend responses whose beginning was taken
        self._client_outputs: dict[str, str] = {}     # the client's outputs for its calls, as they went up
        self._since_create = (False, False)           # since the client's last create: (an output, other input)

    def _send(self, event: live.Event) -> None:
        """One of the relay's commands upstream, with an event id of its own."""
        if event.event_id is None:
            event.event_id = self.ctx.new_event_id()
        if isinstance(event, live.ResponseCreate):
            self._create_went_up(event.event_id)
        self.ctx.emit(SendUpstream(live.encode(event)))

    def _on_backend(self, envelope: live.ResponseEnvelope) -> Any:
        nested = live.backend_event(envelope)
        key = envelope.delegation_id if isinstance(envelope.delegation_id, str) else None
        if isinstance(nested, (live.BackendCreated, live.BackendInProgress)):
            # a response begins at its `response.created`, or at its `response.in_progress` alone
            # (Azure's continuations may send no `response.created`: GPT-LIVE.md 1, inferred);
            # whichever comes first, once
            response_id = _response_id(nested.response)
            if response_id in self._begun or (response_id is None and isinstance(nested, live.BackendInProgress)):
                return SAME
            if response_id is not None:
                self._begun.add(response_id)
            self._continuation_began(self.batches.get(key or ""))   # the batch's own: its outputs are in
            create = self._started_by(envelope, key, response_id)
            if create is not None:   # the other batches that create continued (`_continue`) are over too
                for other_key in [k for k, c in self._create_of.items() if c == create and k != key]:
                    del self._create_of[other_key]
                    self._continuation_began(self.batches.get(other_key))
            self.batches.response_started(key or "", response_id)
            self._backend_response_started(create)
        elif isinstance(nested, live.BackendItemAdded):
            return self._call_item(nested.item, announce=False)
        elif isinstance(nested, live.BackendItemDone):
            return self._call_item(nested.item, announce=True, key=key)
        elif isinstance(nested, (live.BackendArgumentsDelta, live.BackendArgumentsDone)):
            return DROP if self._hiding and nested.item_id in self._relay_items else SAME
        elif isinstance(nested, live.BackendCompleted):
            self._response_over(key or "", failed=False)
        elif isinstance(nested, (live.BackendFailed, live.BackendIncomplete)):
            self._response_over(key or "", failed=True)
        return SAME

    def _continuation_began(self, batch: Batch | None) -> None:
        """A response that continues `batch` began: its answered relay calls' outputs are in."""
        if batch is not None and batch.continued:
            self._delivered([entry for entry in self.batches.relay_calls(batch) if entry.state is CallState.ANSWERED])

    def _call_item(self, item: Any, *, announce: bool, key: str | None = None) -> Any:
        """A backend output item: a function call is read (once) from its `output_item.done`;
        a relay call's items are hidden from the client."""
        if not isinstance(item, dict) or item.get("type") != live.FUNCTION_CALL:
            return SAME
        call_id, name = item.get("call_id"), item.get("name")
        if isinstance(item.get("id"), str) and self._owner_of(name if isinstance(name, str) else "") is Owner.RELAY:
            self._relay_items.add(item["id"])
        if announce:
            entry = self._announce(item, key)
            relay = entry is not None and entry.owner is Owner.RELAY
        else:
            relay = isinstance(item.get("id"), str) and item["id"] in self._relay_items
        if isinstance(call_id, str) and self.ledger.get(call_id) is not None:
            relay = self.ledger.get(call_id).owner is Owner.RELAY   # type: ignore[union-attr]
        return DROP if self._hiding and relay else SAME

    def _announce(self, item: dict[str, Any], key: str | None) -> CallEntry | None:
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if not isinstance(call_id, str) or not call_id:
            self.ctx.anomaly(f"function call {name!r} without a call_id: left to the client", live.FUNCTION_CALL)
            return None
        existing = self.ledger.get(call_id)
        if existing is not None:
            self.ctx.anomaly(f"call {call_id} delivered again; run once", live.FUNCTION_CALL)
            return existing
        if key is None:
            self.ctx.anomaly(f"call {call_id} arrived in an uncorrelated response.event", live.FUNCTION_CALL)
        elif self.batches.get(key) is None:
            self.ctx.anomaly(f"call {call_id} for delegation {key}, which the relay never saw created", live.FUNCTION_CALL)
        batch = self.batches.open(key or "")
        name = name if isinstance(name, str) else ""
        arguments = arguments if isinstance(arguments, str) else ""
        entry = self.ledger.add(CallEntry(
            call_id, name, item.get("id") if isinstance(item.get("id"), str) else None, batch.response_id,
            self._owner_of(name), arguments=arguments, arguments_from_done=arguments, announced_at=self.ctx.now,
            delivered_as=(BACKEND_CALL,)))
        self.batches.add_call(batch, call_id, entry.owner)
        if entry.owner is Owner.RELAY and self.delegate is not None and name == self.delegate.name:
            # the delegate answers delegations, not calls: a call by its name is of an unknown tool
            self.ledger.move(entry, CallState.READY, self.ctx.now)
            self._decide(entry, render_error(f"unknown tool {name!r}", limit=self.config.output_limit),
                         CallOutcome.UNKNOWN_TOOL)
        else:
            self._call_complete(entry)
        return entry

    def _response_over(self, key: str, *, failed: bool) -> None:
        """The backend response of `key` ended: its decided outputs go up, and the batch is
        continued if that made it whole. A failed response cannot be continued."""
        batch = self.batches.get(key)
        if batch is None:
            return
        batch.completed, batch.failed, batch.completed_at = True, failed, self.ctx.now
        if failed and self.batches.has_relay_calls(batch):
            self.ctx.anomaly(f"backend response of {key} ended without completing: its batch is not continued",
                             "backend")
        for entry in self.batches.relay_calls(batch):
            if entry.state is CallState.FINISHED:
                self._send_output(entry)
        self._continue(batch)
        self._backend_quiet()

    # ==== answers =======================================================================
    def _owner_of(self, name: str, *, client_made: bool = False) -> Owner:
        """As the core's, and a call of a function the client did not declare (its session is
        known) is the relay's to answer: with an error, so that its batch can go on."""
        owner = super()._owner_of(name, client_made=client_made)
        if owner is Owner.CLIENT and not client_made and self._client_tools is not None:
            return Owner.CLIENT if name in self._client_tools else Owner.RELAY
        return owner

    def _client_declares(self, name: str) -> bool:
        return self._client_tools is not None and name in self._client_tools

    def _send_output(self, entry: CallEntry) -> None:
        self._answer(entry, [self.dialect.function_call_output(entry.call_id, entry.output or "")])

    def _answer(self, entry: CallEntry, events: list[live.Event]) -> None:
        """A call's (or a delegation's) answer upstream, once; kept while the upstream is away."""
        if not self.ctx.upstream_connected:
            self._unsent.append((entry, events))
            return
        for event in events:
            self._send(event)
        self._injected(entry)

    def _continue(self, batch: Batch) -> None:
        """The batch's one `response.create`, when it is due (`Batches.due`): the relay's own for a
        batch of relay calls only; for a batch of both, the client's (it asks, as on Realtime),
        held until then. A batch of both whose client has not asked yet waits for it. It waits
        while another delegation's work is under way, and then continues every batch whole by
        then too (a create names no delegation: it continues the session's pending calls)."""
        if not self.batches.due(batch):
            return
        mixed = self.batches.has_client_calls(batch)
        if mixed and batch.held_create is None:
            return
        if self._creates_up.wait_ends(self.ctx.now, CREATE_WAIT) is not None or self.batches.others_under_way(
                batch, self._begun):
            return   # (`_continue_waiting` looks again after each round)
        event = batch.held_create if mixed else live.ResponseCreate(event_id=self.ctx.new_event_id())
        batch.held_create = None
        assert event is not None
        self._create_for(batch, event, by_client=mixed)

    def _create_for(self, batch: Batch, event: live.ResponseCreate, *, by_client: bool) -> None:
        """`event` goes up, continuing `batch` and the batches of the relay's calls whole by now
        (`by_client`: the client's create for a batch of both, its follow-up the client's)."""
        joining = [other for other in self._joining() if other is not batch]
        for continued in (batch, *joining):
            continued.continued = True
            self._create_of[continued.key] = event.event_id
            if not (continued is batch and by_client):
                self._follow_up_owed(continued, event)
        self._command([event])
        for continued in (batch, *joining):
            self._told_continued(continued, event.event_id, "client" if continued is batch and by_client else "relay")

    def _joining(self) -> list[Batch]:
        """The batches of the relay's calls only that a create now continues: whole, not continued."""
        return [batch for batch in self.batches if self.batches.due(batch) and not self.batches.has_client_calls(batch)]

    def _told_continued(self, batch: Batch, event_id: str | None, by: str) -> None:
        """The `follow_up` notice of a batch a create continued (`event_id`: None for a create the
        relay did not see), asked for `by` the client or the relay."""
        self.ctx.notice("follow_up", {"event_id": event_id, "call_ids": ",".join(batch.calls),
                                      "delegation_id": batch.key, "response_id": batch.response_id, "by": by})

    def _other_deadlines(self) -> list[float]:
        """A batch waiting for a create on its way goes when that wait ends."""
        waiting = (self._creates_up.wait_ends(self.ctx.now, CREATE_WAIT)
                   if any(self.batches.due(batch) for batch in self.batches) else None)
        return [*super()._other_deadlines(), *([] if waiting is None else [waiting])]

    def _continue_waiting(self) -> None:
        """After every round of the engine (`LiveEngine._after_input`): a batch that waited for
        another delegation's work (a response ended, a call answered, a wait ran out) goes once it
        is over."""
        for batch in self.batches:
            self._continue(batch)   # (a batch another's create took is no longer due)

    # ==== the follow-up's records (a replica taking the session over reads them) ===========
    def _follow_up_owed(self, batch: Batch, create: live.ResponseCreate) -> None:
        """The relay's create for `batch` is due: each of its answered calls is recorded as owed
        a follow-up (written ahead), as on Realtime (relay/engine/injection.py)."""
        calls = [entry for entry in self.batches.relay_calls(batch) if entry.state is CallState.ANSWERED]
        for entry in calls:
            self.ctx.remember(entry, Phase.FOLLOW_UP, follow_up=True)
        if create.event_id is not None:   # (one create may continue several batches)
            self._owed_by_create.setdefault(create.event_id, []).extend(calls)

    def _command(self, events: list[live.Event]) -> None:
        """Commands of no one call (a create, a silent note) upstream now, or, while the upstream is
        away, kept for its return (`_on_reconnect` sends them, in order)."""
        if not self.ctx.upstream_connected:
            self._unsent.append((None, events))
            return
        for event in events:
            self._send_create(event)

    def _send_create(self, event: live.Event) -> None:
        """A create upstream; the relay's own follows its calls' `followed_up` records (written
        ahead of it: a new owner that finds `follow_up` knows it never left)."""
        for entry in self._owed_by_create.pop(event.event_id or "", []):
            self.ctx.remember(entry, Phase.FOLLOWED_UP, follow_up=True)
        self._send(event)

    # ==== which create a backend response answers ===========================================
    def _create_went_up(self, event_id: str | None) -> None:
        """A `response.create` went up (the relay's, or the client's as it came): its response is
        still to begin (`CreatesUp` keeps no refused or lost one for ever)."""
        self._creates_up.went_up(event_id, self.ctx.now)

    def _create_refused(self, event_id: Any) -> None:
        """This create's response is not to begin (it began, or was refused): no longer outstanding."""
        if isinstance(event_id, str):
            self._creates_up.remove(event_id)

    def _client_create_refused(self, event_id: Any, error: dict[str, Any]) -> Any:
        """An `error` named this command: what becomes of the error (`SAME`, `DROP`) if the command
        was a client's create (relay/engine/client_asks.py), else `UNCLAIMED`."""
        return UNCLAIMED

    def _command_refused(self, event_id: Any) -> None:
        """An `error` named this command: if it was a create, it starts no response, and a batch
        it was to continue has no continuation under way (the work it waited for is over)."""
        self._create_refused(event_id)
        if not isinstance(event_id, str):
            return
        for key in [key for key, create in self._create_of.items() if create == event_id]:
            del self._create_of[key]
            self._backend_quiet()

    def _delegated_to_backend(self, delegation_id: str, response_id: Any) -> None:
        """A Responses delegation (`session.delegation.created`): its batch, and its response,
        which the voice model's delegating begins (not a create)."""
        response_id = response_id if isinstance(response_id, str) else None
        self.batches.open(delegation_id, response_id)
        self._delegated[delegation_id] = response_id

    def _new_backend(self) -> None:
        """A new session carries a dropped one on: its batches, and the creates and delegations
        whose responses are to begin, start afresh (none of the dropped session's begins in it)."""
        self.batches = Batches(self.ledger.get)
        self._creates_up.clear()
        self._create_of.clear()
        self._delegated.clear()

    def _started_by(self, envelope: live.ResponseEnvelope, key: str | None, response_id: str | None) -> str | None:
        """The event id of the create whose response this `response.created` begins, or None (a
        delegation's own response, which the voice model started; or none outstanding). In order:
        the command the server names (`client_event_id`: the SDK's `ResponseEvent` carries the
        event id of the client command associated with it, when supplied); none for the first
        response of a delegation this session announced (`session.delegation.created`, its
        `response_id` or its delegation's id on the envelope); the create that continued the
        batch it names (the relay's, or the client's for a batch of its own calls: a
        continuation keeps its delegation, GPT-LIVE.md 4.2); else the earliest create whose
        response has not begun (one socket's commands are taken in the order they went up)."""
        named = envelope.client_event_id if isinstance(envelope.client_event_id, str) else None
        if named is not None:
            self._create_refused(named)   # answered: no longer outstanding
            return named
        own = key if key in self._delegated else next(
            (delegation for delegation, its in self._delegated.items() if its is not None and its == response_id), None)
        if own is not None:
            del self._delegated[own]
            return None
        if key is not None and key in self._create_of:
            create = self._create_of.pop(key)
            self._creates_up.remove(create)
            return create
        return self._creates_up.pop_earliest()

    def _backend_busy(self) -> bool:
        """Whether a create now would meet backend work under way: a response announced or begun
        and not ended, a batch with calls waiting for its outputs or its create (a create then is
        a partial batch, which the server refuses: GPT-LIVE.md 4.2), or a continuation asked for
        whose response has not begun."""
        return any(batch.key in self._create_of or not batch.failed and (
            not batch.completed or batch.calls and not batch.continued) for batch in self.batches)

    def _backend_quiet(self) -> None:
        """A backend response ended: a subclass's carried batch may go (delegation_records.py)."""

    def _carried_client_output(self, entry: CallEntry, output: str) -> bool:
        """Whether the client's output is one a dropped session owed (delegation_records.py)."""
        return False

    def _client_asks_carried(self) -> bool:
        """Whether the client's create asks for a dropped session's batch (delegation_records.py)."""
        return False

    def _backend_response_started(self, create: str | None) -> None:
        """A backend response began (its nested `response.created`), the one `create` started
        (`_started_by`): what a subclass owes it (relay/engine/delegation_records.py: a carried
        batch's continuation under way)."""

    def _delivered(self, entries: list[CallEntry]) -> None:
        """The provider showed it has these answers: their records say `delivered`."""
        for entry in entries:
            if not entry.delivered:
                entry.delivered = True
                if entry.recorded is not None and entry.recorded[0] in _SENT_PHASES:
                    self.ctx.remember(entry, entry.recorded[0], follow_up=entry.recorded[1])

    # ==== lifecycle =====================================================================
    def _on_reconnect(self) -> None:
        super()._on_reconnect()
        unsent, self._unsent = self._unsent, []
        for entry, events in unsent:
            if entry is None:
                for event in events:
                    self._send_create(event)
            elif entry.state is CallState.FINISHED:
                self._answer(entry, events)
                batch = self.batches.of_call(entry.call_id)
                if batch is not None:   # its output may have been the last the batch waited for
                    self._continue(batch)
        for batch in [batch for batch in self.batches if not (batch.completed or batch.failed)
                      and (batch.calls or batch.response_id in self._begun)]:
            # a backend response under way at the drop whose end never came: it ended while the
            # sideband was away (its calls were complete before it), as Realtime's does
            # (docs/guarantees.md: the window a reconnect leaves); its answers go up, and the batch on
            self._response_over(batch.key, failed=False)


_SENT_PHASES = frozenset({Phase.SENT, Phase.FOLLOW_UP, Phase.FOLLOWED_UP})


def _response_id(response: Any) -> str | None:
    found = response.get("id") if isinstance(response, dict) else None
    return found if isinstance(found, str) else None


__all__ = ["BACKEND_CALL", "DELEGATED", "DROP", "SAME", "UNCLAIMED", "ResponsesDelegation"]
