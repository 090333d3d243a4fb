"""GPT-Live's calls as the records a shared store keeps, and their adoption by the engine of a
replica that takes the session over (relay/edges/takeover.py decides what each owed call gets).

A Live session's relay calls are recorded as the Realtime family's are (relay/engine/records.py:
ready, started, decided, sent; a batch's follow-up owed, then sent, written ahead of its
`response.create` by relay/engine/backend_calls.py), with what a new owner needs beyond the call
book's: the delegation a call answers or belongs to (a client delegation's own id, a backend
call's batch), what the answer asks the model to say and whether it stays silent, and, for a
client delegation, the recent transcript the delegate was given (`TRANSCRIPT_TURNS` turns of at
most `TRANSCRIPT_CHARS` characters: what a delegate run again works the request out from).

Delivered. The record of a sent answer also names what the provider echoes once it has it
(`item_id`): the event id of the answer's last append, which the provider's
`session.*.appended` names as `client_event_id` once the append is on the timeline (appends are
placed in order, so the last one's acknowledgement says every one of them is in). A backend
call's `response.item.create` gets no acknowledgement; its batch's continuation (the nested
`response.created` of the delegation after the relay's `response.create`) shows every output of
the batch was taken. Either way the record then says `delivered` (one more write, which nothing
waits for). Nothing on GPT-Live's wire refuses an answer sent twice (an append carries no id the
provider would refuse again, and the SDK's types have no way to read a session's history back),
so a new owner never sends again an answer recorded as sent, delivered or not: never twice, where
the Realtime family's duplicate item id lets a new owner send an undelivered output again.

Adoption (`adopt_records`): each owed call is told to the new engine as it first came, rebuilt
from its record: a client delegation as the delegate's call (given its recorded transcript), a
backend call in its delegation's batch, whose response is over (the outputs go up as they are
decided, then the batch's one `response.create`); each then starts, and the edge's loop answers
it by its `Decision` (run, refused as "interrupted; not retried", or answered with the recorded
output). A call that had started keeps its `started` record until its next step, so that another
takeover in between still sees that it may have run. A batch whose follow-up was owed
(`follow_up` recorded, `followed_up` not: its create never left) gets its `response.create`, once.

Resumed (`resume_with`, relay/edges/history_resume.py): a client reconnected, and this engine's
upstream session is a new one. The client's `session.start` is seeded with the conversation so
far, and the owed calls are told as the earlier session's (`_carried`): each is answered once in
this session as a silent note (a delegation's message, or failure, said: `delegation_id: null`
commentary), never as an answer to a delegation or batch this session never had. Carried on after
a drop (`LiveEngine.new_session`), a delegation's answer the dropped session never placed is said
in the new one likewise (`_unplaced`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from relay.dialects import live
from relay.dialects.jsontext import utf8_size
from relay.engine.actions import Action, Remember
from relay.engine.backend_calls import BACKEND_CALL, CREATE_WAIT, DELEGATED, SAME
from relay.engine.client_asks import ClientAsks
from relay.engine.appends import Channel, answer_appends, split_text
from relay.engine.calls import CallEntry, CallState, Owner
from relay.engine.context import Source
from relay.engine.records import CallRecord, Phase
from relay.engine.reseed import MAX_INPUT_TOKENS, done_note, result_to_say, seeded_session
from relay.tools.delegation import Delegation, Turn, delegation_parameter

TRANSCRIPT_TURNS = 8
TRANSCRIPT_CHARS = 1000
CARRIED_WAIT = CREATE_WAIT
"""Seconds a carried batch's continuation waits for backend work of the new session under way
(as long as the sequencer waits for a create's acknowledgement, relay/engine/sequencer.py): past
them its results are said instead (`LiveRecords._continue_carried`)."""


class LiveRecords(ClientAsks):
    """The records of a GPT-Live session's calls, their delivery, and their adoption."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self._offsets: dict[str, int] = {}        # a running delegation's offset (ms)
        self._witnesses: dict[str, str] = {}      # the event id of an answer's last append -> its delegation
        self._turns_of: dict[str, str] = {}       # a delegation -> its transcript when delegated (JSON)
        self._carried: set[str] = set()           # relay calls of an earlier session, answered in this one
        self._notes: set[str] = set()             # what seeded a new session of what the relay's tools did
        self._answer_notes: dict[str, str] = {}   # the relay's answered calls -> their notes (`_injected`)
        self._resumed: tuple[tuple[Turn, ...], list[str], list[CallRecord]] | None = None
        self._unheard: list[CallEntry] = []       # answers a dropped session never placed, to say in the new one
        self._uncontinued: list[str] = []         # backend calls whose batch a dropped session never continued
        self._gated: list[str] = []               # such calls of a batch with the client's calls too
        self._client_carried: dict[str, bool] = {}   # the client's calls of such a batch -> told in a new session
        self._client_notes: dict[str, str] = {}   # what new sessions are told of those the client had answered
        self._asks_owed = 0                       # such batches whose client has not asked for their continuation
        self._continuing: list[str] = []          # carried calls whose new-session continuation has not begun
        self._carried_create: str | None = None   # the event id of the create that continues them
        self._carried_wait: float | None = None   # until when their create waits for backend work under way
        self._said: list[str] = []                # carried calls said in place of a continuation, not yet placed
        self._new_one_starting = False            # a new session's `session.start` went up, its `started` not back
        self.ctx.record_extras = self._record_extras

    def _record_extras(self, entry: CallEntry) -> dict[str, Any]:
        if DELEGATED in entry.delivered_as:
            return {"delegation_id": entry.call_id, "message": entry.message, "silent": not entry.speak,
                    "transcript": self._turns_of.get(entry.call_id, "")}
        batch = self.batches.of_call(entry.call_id)
        return {"delegation_id": batch.key if batch is not None else ""}

    # ==== a client delegation, as the delegate's call ======================================
    def _take_delegation(self, delegation_id: str, offset: int | None, turns: tuple[Turn, ...]) -> CallEntry:
        """The delegate's call for a delegation: recorded ready, then started."""
        assert self.delegate is not None
        entry = self.ledger.add(CallEntry(
            delegation_id, self.delegate.name, None, None, Owner.RELAY,
            announced_at=self.ctx.now, delivered_as=(DELEGATED,),
            arguments=json.dumps({"delegation_id": delegation_id, "offset_ms": offset})))
        entry.arguments_from_done = entry.arguments
        if offset is not None:
            self._offsets[delegation_id] = offset
        kept = [[turn.speaker, turn.text[-TRANSCRIPT_CHARS:]] for turn in turns[-TRANSCRIPT_TURNS:]]
        self._turns_of[delegation_id] = json.dumps(kept, ensure_ascii=False) if kept else ""
        self._call_complete(entry, {delegation_parameter(self.delegate): Delegation(delegation_id, offset, turns)})
        return entry

    # ==== delivered: what the provider echoes ===============================================
    def _answer(self, entry: CallEntry, events: list[live.Event]) -> None:
        """An answer's frames get their event ids before they go (or wait): the last one's is
        what its record names, and what the appends' acknowledgement echoes."""
        for event in events:
            if event.event_id is None:
                event.event_id = self.ctx.new_event_id()
        if events and entry is not None:
            entry.output_item_id = events[-1].event_id
            if DELEGATED in entry.delivered_as and entry.output_item_id is not None:
                self._witnesses[entry.output_item_id] = entry.call_id
        super()._answer(entry, events)

    def _on_appended(self, event: live.InstructionsAppended | live.ThinkingAppended | live.CommentaryAppended) -> Any:
        """An append reached the timeline: the last of a delegation's answer delivers it."""
        call_id = self._witnesses.pop(event.client_event_id, None) if isinstance(event.client_event_id, str) else None
        entry = self.ledger.get(call_id) if call_id is not None else None
        if entry is not None:
            self._delivered([entry])
        return SAME

    # ==== a dropped session's answers, in the session that carries it on ===================
    def _carried_answer(self, entry: CallEntry, output: str, is_error: bool) -> list[live.Event]:
        """The answer of a call of an earlier session, in this one, once, with `delegation_id:
        null` (this session knows none of the earlier one's ids): what ran, told as silent context
        (the note); and for a delegation what the caller was to hear (its message, or its
        failure), said (`_spoken`)."""
        return _silent_note(done_note(entry.name, _asked(entry), output)) + self._spoken(entry, output, is_error)

    def _spoken(self, entry: CallEntry, output: str, is_error: bool) -> list[live.Event]:
        """A delegation's answer's spoken part, as `session.commentary.append` with `delegation_id:
        null`: speakable context of no delegation (the SDK's `CommentaryAppendEventParam`), which
        the model communicates. A backend call's result has no spoken part of its own (its batch's
        continuation spoke it), so none here: its note stays silent."""
        if not entry.speak or DELEGATED not in entry.delivered_as:
            return []
        return self._commentary(entry, output, is_error, entry.message)

    def _commentary(self, entry: CallEntry, output: str, is_error: bool, message: str | None) -> list[live.Event]:
        """What of a call's answer is to be said (`message`, or the failure), as commentary of no
        delegation."""
        tool = self.tools.get(entry.name)
        appends = answer_appends(output, is_error=is_error, message=message, speak=True,
                                 on_failure=tool.on_failure if tool is not None else None)
        return [live.CommentaryAppend(delegation_id=None, content=append.content)
                for append in appends if append.channel is Channel.COMMENTARY]

    def _unplaced(self, entry: CallEntry) -> None:
        """At a drop: a delegation's answer, decided or sent, that the dropped session never placed
        (its last append not acknowledged, so never spoken). The new session's `input` tells what
        ran; what the caller was to hear is said in it once it is up (`_on_reconnect`), or the
        caller hears nothing of what they asked (the explorer's `spoke_after_tools`)."""
        if not entry.delivered and entry.output is not None and self._spoken(entry, entry.output, entry.is_error):
            self._unheard.append(entry)

    def _carry_over(self) -> list[str]:
        """At a drop (`LiveEngine.new_session`): what the new session's `input` tells of the calls
        (a note each, of what ran and returned), and what becomes of them: the relay's answered
        one is told by its note (one decided and not sent is answered by it, once), one still to
        answer is carried (`_carried`: answered in the new session), the batches the dropped
        session never continued are continued there (`_uncontinued_batches`); of what waited for
        the connection only the carried calls' answers are kept."""
        client_notes = self._uncontinued_batches()
        held = {entry.call_id for entry in self.ledger}
        notes = [note for call_id, note in self._answer_notes.items() if call_id not in held]   # forgotten since
        for entry in self.ledger:
            if entry.owner is not Owner.RELAY:
                continue
            if entry.state in (CallState.FINISHED, CallState.ANSWERED) and entry.output is not None:
                notes.append(done_note(entry.name, _asked(entry), entry.output))
                self._unplaced(entry)   # what the caller was to hear and has not: said in the new session
                if entry.state is CallState.FINISHED:
                    self._injected(entry)   # answered by the note, once
            elif entry.state in (CallState.READY, CallState.RUNNING):
                self._carried.add(entry.call_id)
        self._unsent = [(entry, events) for entry, events in self._unsent
                        if entry is not None and entry.call_id in self._carried]
        return notes + client_notes

    def _injected(self, entry: CallEntry) -> None:
        """As any engine's; and a relay call's answer is noted for a new session, should the
        connection drop: a history limit forgets the call from the call book, not from what a new
        session is told (the latest answers, as many as its seeded input holds)."""
        super()._injected(entry)   # type: ignore[misc]
        if entry.owner is Owner.RELAY and entry.state is CallState.ANSWERED and entry.output is not None:
            notes = self._answer_notes
            notes[entry.call_id] = done_note(entry.name, _asked(entry), entry.output)
            while len(notes) > 1 and sum(utf8_size(note) for note in notes.values()) > MAX_INPUT_TOKENS:
                del notes[next(iter(notes))]

    def _uncontinued_batches(self) -> list[str]:
        """At a drop: the relay's backend calls whose batch the dropped session never continued,
        or whose continuation it never showed (its nested `response.created`: the create may have
        been lost with the connection). Their results were to be spoken by that continuation; the
        new session makes it (`_continue_carried`). The same for calls an earlier drop carried into
        the session that dropped now, whose continuation there never began (a second drop before it
        showed, or before its create went up): the next new session continues them.

        A batch with the client's calls too (`_gated`) is continued once the client's part of it is
        done, as its create is the client's to ask for: each of its calls told in the new session
        (answered before the drop: a note in its `input`, returned here; after it: a note when the
        client's output comes, `_carried_client_output`), and its create asked for, before the drop
        or after it (`_client_asks_carried`). The client's output for a call of the dropped session
        would be refused by the new one, which never had the call."""
        self._uncontinued += [call_id for call_id in self._continuing + self._said if call_id not in self._uncontinued
                              and (entry := self.ledger.get(call_id)) is not None and not entry.delivered]
        self._continuing, self._said, self._carried_wait = [], [], None
        for batch in self.batches:
            relay = [entry.call_id for entry in self.batches.relay_calls(batch) if not entry.delivered
                     and entry.state in (CallState.RUNNING, CallState.FINISHED, CallState.ANSWERED)]
            if not relay:
                continue
            if not self.batches.has_client_calls(batch):
                self._uncontinued += relay
                continue
            self._gated += relay
            for call_id in batch.calls:
                entry, output = self.ledger.get(call_id), self._client_outputs.get(call_id)
                if entry is None or entry.owner is not Owner.CLIENT:
                    continue
                if entry.state is CallState.ANSWERED and output is not None:
                    self._client_notes[call_id] = done_note(entry.name, entry.arguments, output)
                else:
                    self._client_carried[call_id] = False
            if batch.held_create is None and not batch.continued:
                self._asks_owed += 1
        return list(self._client_notes.values())

    def _continue_carried(self, *, overdue: bool = False) -> None:
        """The new session's one `response.create` for the calls of the dropped session's batches
        that were not continued, once each is told (its result in the seeded `input`, or its note
        sent) and, for a batch with the client's calls, the client's part done (`_gated`): the
        backend's continuation speaks their results, as each batch's own would have. The caller
        who asked hears the answer (issue 48's "no silence"). Not while backend work of the new
        session is under way (`_backend_busy`: a create then could be refused as a partial batch,
        or start a second response at once): once it is over, or, `overdue`, once it has been under
        way `CARRIED_WAIT` seconds (nothing on the wire ends a delegation whose response never
        begins, and a batch of the client's calls waits for the client): then their results are
        said instead (`_say_carried`), and no create goes up for them."""
        whole = not self._asks_owed and all(self._client_carried.values())
        pool = self._uncontinued + (self._gated if whole else [])
        entries = [entry for call_id in pool if (entry := self.ledger.get(call_id)) is not None]
        if self._new_one_starting or any(entry.state in (CallState.READY, CallState.RUNNING, CallState.FINISHED) for entry in entries):
            return   # the new session not up yet, or a carried call still to be told
        busy = bool(entries) and self._backend_busy()
        if busy and not overdue:
            if self._carried_wait is None:
                self._carried_wait = self.ctx.now + CARRIED_WAIT
            return   # not into backend work under way (`_backend_quiet` comes back, or the tick)
        self._carried_wait = None
        told = [entry.call_id for entry in entries if entry.state is CallState.ANSWERED]
        self._uncontinued = []
        if whole:
            self._gated, self._client_carried = [], {}
        if not told:
            return
        if busy:
            self._say_carried(told)
            return
        self._continuing += told   # until the continuation begins (`_backend_response_started`)
        create = live.ResponseCreate(event_id=self.ctx.new_event_id())
        self._carried_create = create.event_id
        self._command([create])
        self.ctx.notice("follow_up", {"event_id": create.event_id, "call_ids": ",".join(told), "delegation_id": None,
                                      "response_id": None, "by": "relay"})

    def _say_carried(self, call_ids: list[str]) -> None:
        """Carried calls whose continuation cannot be made: each result said, once, as
        `session.commentary.append` with `delegation_id: null` (speakable context, which the model
        communicates: GPT-LIVE.md 4.1). Until the last append of it is placed (its
        acknowledgement), a drop continues the call in the next session instead. A call that wants
        no speech (`speak` off) is told by its note alone."""
        for call_id in call_ids:
            entry = self.ledger.get(call_id)
            if entry is None or not entry.speak:
                continue
            output = entry.output or ""
            events = self._commentary(entry, output, entry.is_error, entry.message or result_to_say(entry.name, output))
            for event in events:
                event.event_id = self.ctx.new_event_id()
            if events:   # its last append's acknowledgement delivers it (`_on_appended`)
                self._witnesses[events[-1].event_id] = call_id   # type: ignore[index]
            self._command(events)
            self._said.append(call_id)
        self.ctx.anomaly(f"backend work of the new session under way for {CARRIED_WAIT:g} s, or a refused create: "
                         f"the results of {', '.join(call_ids)} of the dropped session are said, not continued", None)

    def _backend_quiet(self) -> None:
        if self._uncontinued or self._gated:
            self._continue_carried()

    def _other_deadlines(self) -> list[float]:
        return [*super()._other_deadlines(), *([] if self._carried_wait is None else [self._carried_wait])]

    def _tick(self) -> None:
        super()._tick()
        if self._carried_wait is not None and self._carried_wait <= self.ctx.now:
            self._continue_carried(overdue=True)

    def _command_refused(self, event_id: Any) -> None:
        """As the base's; and when the refused create is the carried calls' continuation, it
        starts none: their results are said instead (`_say_carried`)."""
        super()._command_refused(event_id)
        if self._continuing and isinstance(event_id, str) and event_id == self._carried_create:
            refused, self._continuing, self._carried_create = self._continuing, [], None
            self._say_carried(refused)

    def _carried_client_output(self, entry: CallEntry, output: str) -> bool:
        """The client's output for its call of a dropped batch the relay carries (`_gated`): told
        in this session as a silent note, once (the session never had the call: the output itself
        would be refused), then the batch continued if that was all it waited for."""
        if entry.call_id not in self._client_carried:
            return False
        if not self._client_carried[entry.call_id]:
            self._client_carried[entry.call_id] = True
            self._client_answered(entry)
            note = self._client_notes[entry.call_id] = done_note(entry.name, entry.arguments, output)
            self._command(_silent_note(note))
            self._continue_carried()
        return True

    def _client_asks_carried(self) -> bool:
        """The client's `response.create` while a dropped batch with its calls waits for it to ask
        (`_gated`): that batch's create, which the relay sends once the batch is whole; not
        forwarded."""
        if not self._asks_owed:
            return False
        self._asks_owed -= 1
        self._continue_carried()
        return True

    def _backend_response_started(self, create: str | None) -> None:
        """A backend response began (its nested `response.created`): when it is the one the
        carried calls' create started (`_started_by`), their continuation is under way and their
        results are in; a later drop does not continue them again. Any other (the caller's new
        turn's delegation, another batch's continuation, the client's own create) is not it: a
        drop before it began continues them in the next session."""
        if self._continuing and create is not None and create == self._carried_create:
            self._delivered([entry for call_id in self._continuing if (entry := self.ledger.get(call_id)) is not None])
            self._continuing = []

    def _on_reconnect(self) -> None:
        super()._on_reconnect()
        unheard, self._unheard = self._unheard, []
        for entry in unheard:
            for event in self._spoken(entry, entry.output or "", entry.is_error):
                self._send(event)
        self._continue_carried()

    # ==== adoption: the calls a replica takes over =========================================
    def adopt_records(self, owed: list[CallRecord], follow_ups: list[CallRecord], now: float) -> list[Action]:
        """The calls another relay owed when it stopped (a session taken over): each told to
        this engine as it first came, and each batch whose follow-up was owed continued once."""
        return self._run(now, Source.UPSTREAM, self._adopt, owed, follow_ups)

    def _adopt(self, owed: list[CallRecord], follow_ups: list[CallRecord]) -> None:
        batches: dict[str, list[CallRecord]] = {}
        for record in owed:
            if record.call_id in self.ledger:
                continue   # seen already (the provider told this replica of it)
            if self.delegate is not None and record.delegation_id == record.call_id and record.name == self.delegate.name:
                self._adopt_delegation(record)
            else:
                batches.setdefault(record.delegation_id or record.response_id or record.call_id, []).append(record)
        for key, records in batches.items():
            self.batches.open(key, records[0].response_id)
            for record in records:
                self._announce({"type": live.FUNCTION_CALL, "call_id": record.call_id, "name": record.name,
                                "arguments": record.arguments}, key)
                self._keep_record(record)
            self._response_over(key, failed=False)
        by_batch: dict[str, list[CallRecord]] = {}
        for record in follow_ups:
            by_batch.setdefault(record.delegation_id or record.response_id or record.call_id, []).append(record)
        for key, records in by_batch.items():
            create = live.ResponseCreate(event_id=self.ctx.new_event_id())
            for record in records:   # written ahead of the create, as the old owner's would have been
                self.ctx.emit(Remember(replace(record, phase=Phase.FOLLOWED_UP, at=self.ctx.now)))
            self._send(create)
            self.ctx.notice("follow_up", {"event_id": create.event_id, "call_ids": ",".join(r.call_id for r in records),
                                          "delegation_id": key, "response_id": records[0].response_id,
                                          "by": "relay", "adopted": True})

    def _adopt_delegation(self, record: CallRecord) -> None:
        try:
            offset = json.loads(record.arguments or "{}").get("offset_ms")
            kept = json.loads(record.transcript) if record.transcript else []
            turns = tuple(Turn(speaker, text) for speaker, text in kept)
        except (ValueError, TypeError, AttributeError):
            offset, turns = None, ()
        entry = self._take_delegation(record.call_id, offset if isinstance(offset, int) else None, turns)
        self._turns_of[record.call_id] = record.transcript
        if record.silent:
            entry.speak = False
        self._keep_record(record)

    def _keep_record(self, record: CallRecord) -> None:
        """A call taken over keeps its record (`started`, `decided`) until it makes a step past
        it: a takeover in between must not run as never started a call that may have run, nor
        lose an output that was decided."""
        earlier = _EARLIER.get(record.phase, frozenset())
        self.ctx.out[:] = [action for action in self.ctx.out if not (
            isinstance(action, Remember) and action.record.call_id == record.call_id
            and action.record.phase in earlier)]


    # ==== a client's session resumed on a new connection (relay/edges/history_resume.py) ========
    def resume_with(self, turns: tuple[Turn, ...], notes: list[str], owed: list[CallRecord]) -> None:
        """This session carries on one whose client reconnected: its client's `session.start`
        is seeded with `turns` and `notes` (`seeded_start`), and the `owed` calls are then told to
        this engine as calls of the earlier session, each answered once in this one as silent
        context (a note: the earlier session's delegations and batches are not this one's)."""
        self._resumed = (turns, notes, owed)

    def seeded_start(self, session: dict[str, Any]) -> dict[str, Any]:
        """The client's `session.start` of a resumed session: its `input` the conversation so far;
        the owed calls start (their answers go up after this start). Unchanged when not resumed."""
        if self._resumed is None:
            return session
        turns, notes, owed = self._resumed
        self._resumed = None
        self._notes.update(notes)
        for record in owed:
            if record.call_id in self.ledger:
                continue
            self._carried.add(record.call_id)
            if self.delegate is not None and record.delegation_id == record.call_id and record.name == self.delegate.name:
                self._adopt_delegation(record)
                self._offsets.pop(record.call_id, None)   # the earlier session's timeline, not this one's
            else:
                entry = self.ledger.add(CallEntry(
                    record.call_id, record.name, None, None, Owner.RELAY, arguments=record.arguments or "",
                    arguments_from_done=record.arguments or "", announced_at=self.ctx.now, delivered_as=(BACKEND_CALL,)))
                self._call_complete(entry)
                self._keep_record(record)
        return seeded_session(session, turns, notes)


def _asked(entry: CallEntry) -> str | None:
    """A call's arguments as its note tells them (a delegation's are the relay's own: none)."""
    return None if DELEGATED in entry.delivered_as else entry.arguments


def _silent_note(note: str) -> list[live.Event]:
    """A note told to the session as silent context of no delegation (`delegation_id: null`: a new
    session knows none of a dropped one's ids), in appends of the size the server takes."""
    return [live.ThinkingAppend(delegation_id=None, content=piece) for piece in split_text(note)]


_EARLIER = {Phase.STARTED: frozenset({Phase.READY}), Phase.DECIDED: frozenset({Phase.READY, Phase.STARTED})}


__all__ = ["CARRIED_WAIT", "LiveRecords", "TRANSCRIPT_CHARS", "TRANSCRIPT_TURNS"]
