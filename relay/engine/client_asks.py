"""What the client sends for the batches of a GPT-Live session in Responses delegation
(`ResponsesDelegation`'s rules, relay/engine/backend_calls.py): its outputs and its
`response.create`s.

- An output for one of its own calls is seen on its way up (and may complete its batch); one for
  a relay call is refused (`relay_owned_call`).
- A create for a batch of both the relay's calls and its own is that batch's one continuation,
  held until the batch is whole (`Batch.held_create`); a second one is refused
  (`response_create_pending`).
- Any other create while the relay is at work (`_relay_at_work`: a relay call unanswered, a create
  on its way whose response has not begun, a backend response under way, what the relay's own
  create waits for; and a delegation just announced whose response has not begun) is held until
  that work is over, then goes up as it came and continues every batch whole by then, the relay's
  among them (no create of the relay's goes for those). A create names no delegation, so the relay
  reads it as continuing the session's calls, all of them (docs/gpt-live.md, "Responses
  delegation: batches"): sent before a relay call's output is in, it would be a partial batch,
  which the server refuses, with an `error` naming the relay's call to the client. When the
  response it waited for brought a call of the client's own, it also waits for that output
  (`_client_outputs_due`), and the client's own create for it is then not sent
  (`client_create_merged`).
- A create forwarded as it came that the server refuses while the relay is at work (it crossed
  the model's new delegation on the wire) is held as above, the refusal kept from the client
  (`_client_create_refused`); one that came with no event id goes up with one of the relay's
  giving (`CLIENT_ID_PREFIX`), so that the refusal names it.
- The other way round, the relay's own create for a batch of its calls waits while a batch of the
  client's in another delegation has a call unanswered (a partial batch again), or was answered
  less than `CLIENT_ASK_WAIT` seconds ago and the client has not asked: the client's create, when
  it comes, continues the relay's batch too (`_joining`), so one create goes, not two. It also
  waits, as the client's does, for a delegation just announced whose response has not begun (at
  most `CREATE_WAIT` seconds): that response may bring a relay call, which a create sent meanwhile
  would leave out (a partial batch), and once it has begun the create waits for its calls'
  outputs and continues both batches.

`relay explore` found each (docs/gpt-live.md names the conversations). These are a proxy's
rules: a sidecar never sees the client's frames (`EngineConfig.has_client`); its create waits
instead, at most `CLIENT_ASK_WAIT` seconds, for the continuation of the client's batch in another
delegation, the response it sees begin with no create of its own, which continues its batch too
(`_sidecar_wait_ends`, `_sidecar_continued`).
"""

from __future__ import annotations

from typing import Any

from relay.dialects import live
from relay.engine.backend_calls import CREATE_WAIT, DROP, SAME, UNCLAIMED, ResponsesDelegation
from relay.engine.batches import Batch
from relay.engine.calls import UNANSWERED, CallState, Owner

_SETTLED = frozenset({CallState.ANSWERED, CallState.SKIPPED, CallState.ABANDONED})
CLIENT_ASK_WAIT = 5.0
"""Seconds a batch of the relay's waits, at most, for the client to ask for a whole batch of its
own in another delegation (its create then continues both), as long as the relay holds a client's
create for the relay's calls on Realtime (`EngineConfig.hold_limit`)."""
CLIENT_ID_PREFIX = "client_"
"""What the event id the relay gives a client's create that came with none begins with: a create
of the client's, not the relay's (the explorer's checks read it so)."""
MAX_CLIENT_OUTPUTS = 64
"""The client's outputs kept (the latest): what a new session is told of a dropped batch of both."""


class ClientAsks(ResponsesDelegation):
    """The client's outputs and creates in Responses delegation (see the module)."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self._held_for_relay: live.ResponseCreate | None = None   # the client's create waiting for the relay's work
        self._announced_at: dict[str, float] = {}   # a delegation announced, its response not begun -> when
        self._answered_at: float | None = None   # the client's latest output for a call of its own
        self._held_at = 0.0   # when the client's create now held came
        self._answered_since: list[str] = []   # the client's calls it answered since its latest create
        self._asked_already: set[str] = set()   # its calls a create the relay released continued before it asked
        self._client_creates: dict[str, tuple[live.ResponseCreate, bool]] = {}   # forwarded, not begun -> (it, id ours)

    def _client_item(self, event: live.ResponseItemCreate) -> Any:
        """A client's backend item: its output for a call of its own is seen (and may complete a
        batch); one for a relay call is refused."""
        item = event.item if isinstance(event.item, dict) else {}
        output, other = self._since_create
        self._since_create = (True, other) if item.get("type") == live.FUNCTION_CALL_OUTPUT else (output, True)
        if item.get("type") != live.FUNCTION_CALL_OUTPUT:
            return SAME
        entry = self.ledger.get(item.get("call_id"))
        if entry is None:
            return SAME
        if entry.owner is Owner.RELAY:
            self.ctx.client_error("relay_owned_call", f"call {entry.call_id} ({entry.name}) belongs to a relay tool; "
                                  "the relay answers it", event.event_id)
            return DROP
        output = item.get("output")
        output = output if isinstance(output, str) else str(output)
        if self._carried_client_output(entry, output):
            return DROP   # a call of a dropped session: told in this one (relay/engine/delegation_records.py)
        self._client_outputs[entry.call_id] = output
        if len(self._client_outputs) > MAX_CLIENT_OUTPUTS:
            del self._client_outputs[next(iter(self._client_outputs))]
        self._client_answered(entry)
        self._answered_since.append(entry.call_id)
        batch = self.batches.of_call(entry.call_id)
        if batch is not None:   # once the client's output went up: it may complete the batch
            batch.answered_at = self._answered_at = self.ctx.now
            self._after_forward.append(batch)
        return SAME

    def _forwarded(self) -> None:
        """A client's frame went up: the batches it may have completed are continued now."""
        batches, self._after_forward = self._after_forward, []
        for batch in batches:
            self._continue(batch)

    def _client_create(self, event: live.ResponseCreate) -> Any:
        """A client's `response.create` (see the module): for a batch of both the relay's calls and
        its own, the batch's one create, held until the batch is whole, then sent as it came (a
        second one for the same batch is not sent); else held while the relay is at work, and,
        once it goes, continuing the relay's batches whole by then too. A create that follows input
        items of the client's own (a typed message, an image) and no output since its last create
        asks for that input: it is not a dropped session's batch's (`_client_asks_carried`)."""
        output, other = self._since_create
        self._since_create = (False, False)
        answered, self._answered_since = self._answered_since, []
        if answered and output and not other and set(answered) <= self._asked_already:
            self._asked_already.difference_update(answered)
            self.ctx.notice("client_create_merged", {"event_id": event.event_id, "call_ids": ",".join(answered)})
            return DROP   # the create the relay released for its earlier ask continued these too (`_release_held`)
        for batch in self.batches.awaiting_relay():
            if not self.batches.has_client_calls(batch):
                continue
            if batch.held_create is not None:
                self.ctx.client_error("response_create_pending", "the batch's response.create is already "
                                      "waiting for its outputs; this one was not forwarded", event.event_id)
                return DROP
            batch.held_create = event
            self._held_for_relay = None   # (this one, the batch's, continues what that one asked for too)
            if not self.batches.due(batch):
                self.ctx.notice("client_create_held", {"delegation_id": batch.key, "event_id": event.event_id,
                                                       "missing": self.batches.missing(batch)})
            self._continue(batch)
            return DROP
        if (output or not other) and self._client_asks_carried():
            return DROP   # it asks for the continuation of a batch of a dropped session (delegation_records.py)
        if self.config.has_client and (self._held_for_relay is not None or self._relay_at_work()):
            if self._held_for_relay is not None:
                self.ctx.client_error("response_create_pending", "a response.create is already waiting for the "
                                      "relay's work; this one was not forwarded", event.event_id)
                return DROP
            self._held_for_relay, self._held_at = event, self.ctx.now
            self.ctx.notice("client_create_held", {"event_id": event.event_id, "missing": self._relay_calls_open()})
            return DROP
        if any(self._joining()):   # it continues the relay's batches whole by now too: sent by the relay
            self._send_continuing(event)
            return DROP
        ours = event.event_id is None
        if ours:   # an id, so that the server's refusal names it (`_client_create_refused`); `client_`: not the relay's
            event.event_id = CLIENT_ID_PREFIX + self.ctx.new_event_id()
        self._client_creates[event.event_id] = (event, ours)
        if len(self._client_creates) > MAX_CLIENT_OUTPUTS:
            del self._client_creates[next(iter(self._client_creates))]
        self._command([event])   # as it came: a continuation of a batch of its own calls, or new work
        self._continues_own(event.event_id)
        return DROP

    def _client_create_refused(self, event_id: Any, error: dict[str, Any]) -> Any:
        """The server refused a create of the client's the relay forwarded. Refused while the relay
        is at work (the model delegated again as it went up, and its response brought a relay call:
        a partial batch), it is the relay's to send again once that work is over, as a create held
        for it (`_release_held`), and the refusal, which names the relay's call, is not the
        client's to see. Otherwise the client is told, as without the relay (with no event id
        when the one the create went up with was the relay's)."""
        forwarded = self._client_creates.pop(event_id, None) if isinstance(event_id, str) else None
        if forwarded is None:
            return UNCLAIMED
        event, ours = forwarded
        if self._relay_at_work():
            if self._held_for_relay is None:
                if ours:
                    event.event_id = None
                self._held_for_relay, self._held_at = event, self.ctx.now
                self.ctx.notice("client_create_held", {"event_id": event.event_id, "missing": self._relay_calls_open(),
                                                       "refused": True})
            return DROP
        if not ours:
            return SAME
        self.ctx.client_error(str(error.get("code") or "invalid_request_error"), str(error.get("message") or ""))
        return DROP

    def _continues_own(self, create: str | None) -> None:
        """The client's create went up: it continues the whole batches of the client's own calls."""
        for batch in self._own_batches():
            if not self.batches.missing(batch):
                self._create_of[batch.key] = create

    def _own_batches(self) -> list[Batch]:
        """The batches of the client's own calls only whose response completed, not continued yet."""
        return [batch for batch in self.batches if batch.completed and not batch.failed and batch.calls
                and batch.key not in self._create_of and not self.batches.has_relay_calls(batch)]

    def _client_outputs_due(self) -> bool:
        """Whether a batch of the client's own calls made since its held create waits for an output
        of the client's, for at most `CLIENT_ASK_WAIT` seconds from that create: released before
        it, the create would be a partial batch."""
        return self.ctx.now < self._held_at + CLIENT_ASK_WAIT and any(
            self.batches.missing(batch) for batch in self._own_batches())

    # ---- the client's create held for the relay's work ----
    def _relay_calls_open(self) -> list[str]:
        """The relay's calls not answered yet, of batches not continued (nor failed)."""
        return [entry.call_id for batch in self.batches if not batch.continued and not batch.failed
                for entry in self.batches.relay_calls(batch) if entry.state in UNANSWERED]

    def _relay_at_work(self) -> bool:
        """Whether a create now could meet work of the relay's: a relay call unanswered (before its
        output a create is a partial batch), a create on its way whose response has not begun,
        another delegation's backend response under way (what the relay's own create waits for,
        `_continue`), or one announced whose response has not begun yet, for at most `CREATE_WAIT`
        seconds (any of them may bring relay calls)."""
        return bool(self._relay_calls_open()) or self._wait_ends() is not None \
            or self.batches.others_under_way(None, self._begun)

    def _wait_ends(self) -> float | None:
        """When the wait for the creates on their way and the delegations announced ends (None:
        nothing to wait for)."""
        waits = [wait for wait in (self._creates_up.wait_ends(self.ctx.now, CREATE_WAIT), self._announced_wait())
                 if wait is not None]
        return min(waits) if waits else None

    def _announced_wait(self) -> float | None:
        """When the wait for the delegations announced whose responses have not begun ends, at
        most `CREATE_WAIT` seconds after each was announced (None: none is awaited)."""
        now = self.ctx.now
        return min((at + CREATE_WAIT for key, at in self._announced_at.items()
                    if at + CREATE_WAIT > now and self._awaited(key)), default=None)

    def _awaited(self, key: str) -> bool:
        """Whether delegation `key`'s response is still to begin: no `response.created` took it,
        and none of its events came (a continuation may send no `response.created`)."""
        batch = self.batches.get(key)
        return key in self._delegated and (batch is None or not (batch.calls or batch.completed))

    def _started_by(self, envelope: live.ResponseEnvelope, key: str | None, response_id: str | None) -> str | None:
        """As `ResponsesDelegation`'s; and a response that neither a create nor an announced
        delegation claims (it names none of them: an uncorrelated one) is taken for the earliest
        announced delegation's, which no longer holds a create."""
        awaited = [delegation for delegation in self._announced_at if self._awaited(delegation)]
        create = super()._started_by(envelope, key, response_id)
        if create is not None:
            self._client_creates.pop(create, None)   # begun: no refusal of it is to come
        elif not self.config.has_client:
            self._sidecar_continued(key)
        if create is None and awaited and all(delegation in self._delegated for delegation in awaited):
            del self._announced_at[awaited[0]]
        return create

    def _delegated_to_backend(self, delegation_id: str, response_id: Any) -> None:
        super()._delegated_to_backend(delegation_id, response_id)
        self._announced_at = {key: at for key, at in self._announced_at.items() if key in self._delegated}
        self._announced_at[delegation_id] = self.ctx.now

    def _other_deadlines(self) -> list[float]:
        """A held create waiting for a create on its way goes when that wait ends; a batch of the
        relay's waiting for the client to ask, when that wait does."""
        own = super()._other_deadlines()
        now, latest = self.ctx.now, self._answered_at
        announced = self._announced_wait() if self._announced_at else None
        if not self.config.has_client:   # a sidecar's waits: the client's continuation, a delegation announced
            extra = [wait for wait in (self._sidecar_wait_ends(), announced) if wait is not None]
            return [*own, *extra] if extra and any(self._joining()) else own
        if self._held_for_relay is None and announced is None and (latest is None or now >= latest + CLIENT_ASK_WAIT):
            return own   # (no client's create held, no delegation awaited, no client's output lately, every round)
        waits = [self._wait_ends() if self._held_for_relay is not None else None]
        if self._held_for_relay is not None and self._client_outputs_due():
            waits.append(self._held_at + CLIENT_ASK_WAIT)
        if announced is not None and any(self._joining()):
            waits.append(announced)
        asks = [other.answered_at + CLIENT_ASK_WAIT for other in self.batches
                if other.answered_at is not None and now < other.answered_at + CLIENT_ASK_WAIT]
        if asks and any(self._joining()):
            waits += asks
        return [*own, *(wait for wait in waits if wait is not None)]

    def _continue(self, batch: Batch) -> None:
        if not self.config.has_client and self._sidecar_continues(batch):
            return
        if not self.batches.due(batch):
            return   # (after every round, for every batch: the cheap test first)
        if not self.batches.has_client_calls(batch):
            if self._held_for_relay is not None or self._client_to_ask():
                return   # the client's create continues it (`_release_held`, `_client_create`)
            if self._announced_at and self._announced_wait() is not None:
                return   # a delegation just announced may bring relay calls: one create for them all
        super()._continue(batch)

    def _client_to_ask(self) -> bool:
        """Whether another delegation's batch of the client's own calls, not continued yet, is the
        client's to ask for first: a call of it unanswered (a create before its output is a
        partial batch), or all answered less than `CLIENT_ASK_WAIT` seconds ago and the client's
        create not seen (it will come, and continue the relay's batch with it: one create, not
        two). A client that never asks leaves the relay's batch to the relay after that. A sidecar
        sees neither the client's outputs nor its creates: it waits for such a batch's continuation,
        the response it sees begin, at most `CLIENT_ASK_WAIT` seconds from the batch's end
        (`_sidecar_wait_ends`)."""
        if not self.config.has_client:
            return self._sidecar_wait_ends() is not None
        now = self.ctx.now
        for other in self.batches:
            if (other.continued or other.failed or not other.completed or other.key in self._create_of
                    or not self.batches.has_client_calls(other)):
                continue
            client = [entry for call_id in other.calls if other.owners.get(call_id) is Owner.CLIENT
                      and (entry := self.ledger.get(call_id)) is not None]
            if any(entry.state not in _SETTLED for entry in client):
                return True
            if client and other.answered_at is not None and now < other.answered_at + CLIENT_ASK_WAIT:
                return True
        return False

    def _sidecar_wait_ends(self) -> float | None:
        """A sidecar: when the wait ends for another delegation's batch of the client's own calls
        whose response completed and whose continuation has not begun (None: none is awaited). Its
        calls look unanswered to a sideband whatever the client did: a create of the relay's now
        could be a partial batch, which the server refuses; the client's create, once it has
        answered, continues the relay's batch too (`_sidecar_continued`)."""
        now = self.ctx.now
        return min((other.completed_at + CLIENT_ASK_WAIT for other in self.batches
                    if other.completed and not other.continued and not other.failed and other.completed_at is not None
                    and now < other.completed_at + CLIENT_ASK_WAIT and other.key not in self._create_of
                    and self.batches.has_client_calls(other) and not self.batches.has_relay_calls(other)
                    and self.batches.missing(other)), default=None)

    def _sidecar_continued(self, key: str | None) -> None:
        """A sidecar saw a response begin that no create of the relay's started, continuing a batch
        of the client's own calls (`key`): the client asked, and its create continued the relay's
        batches whole by then too; no create of the relay's goes for those."""
        batch = self.batches.get(key) if key is not None else None
        if batch is None or not batch.completed or batch.failed or not self.batches.has_client_calls(batch):
            return
        for joined in self._joining():
            joined.continued = True
            self._create_of[joined.key] = None
            self._delivered([entry for entry in self.batches.relay_calls(joined) if entry.state is CallState.ANSWERED])
            self._told_continued(joined, None, "client")

    def _sidecar_continues(self, batch: Batch) -> bool:
        """A sidecar, a batch of both its calls and the client's: the client's outputs never reach
        a sideband (the server acknowledges none), so the batch never looks whole to the relay,
        and the client, which cannot see the relay's outputs, may have asked before they were in
        (the server refuses a partial batch, and tells only the client). Once its response
        completed and the relay's calls are answered, the relay asks for the continuation itself,
        once: the client's outputs in, it continues the batch; not yet, the server refuses it as
        partial, and the client's own create, sent with its outputs, continues the batch (the
        relay sees that response begin: `_sidecar_continued`). Whether the batch is the
        sidecar's to decide (else the base's rules decide it)."""
        batches = self.batches
        if not (batches.has_client_calls(batch) and batches.has_relay_calls(batch)):
            return False
        if batch.continued or batch.failed or not batch.completed or batch.key in self._create_of:
            return True
        if any(entry.state not in _SETTLED for entry in batches.relay_calls(batch)):
            return True   # the relay's outputs first
        if self._creates_up.wait_ends(self.ctx.now, CREATE_WAIT) is not None or batches.others_under_way(
                batch, self._begun):
            return True   # (looked at again after each round)
        self._create_for(batch, live.ResponseCreate(event_id=self.ctx.new_event_id()), by_client=False)
        return True

    def _send_continuing(self, event: live.ResponseCreate) -> None:
        """The client's create, sent by the relay as it came (an event id of the relay's if it had
        none), continuing the relay's batches whole by now and a whole batch of the client's own."""
        if event.event_id is None:
            event.event_id = self.ctx.new_event_id()
        joining = self._joining()
        for batch in joining:
            batch.continued = True
            self._create_of[batch.key] = event.event_id
            self._follow_up_owed(batch, event)
        self._continues_own(event.event_id)
        self._command([event])
        for batch in joining:
            self._told_continued(batch, event.event_id, "client")

    def _continue_waiting(self) -> None:
        if self._held_for_relay is not None:
            self._release_held()
        super()._continue_waiting()

    def _release_held(self) -> None:
        """The client's create held for the relay's work goes once that work is over, as it came
        (with an event id of the relay's if it had none), continuing every batch whole by then.
        A batch of the client's own calls that its response made meanwhile is waited for too, its
        outputs then in (`_client_outputs_due`): the create continues it, and the client's own
        create for it, when it comes, is not sent (`client_create_merged`): one response, not a
        partial batch and then a second one."""
        event = self._held_for_relay
        if event is None or self._relay_at_work() or self._client_outputs_due():
            return
        self._held_for_relay = None
        self._asked_already.update(self._answered_since)   # the client's create for these is to come
        self._send_continuing(event)


__all__ = ["CLIENT_ASK_WAIT", "CLIENT_ID_PREFIX", "MAX_CLIENT_OUTPUTS", "ClientAsks"]
