"""Reading a delegating wire's frames into the timeline's events (`relay.offline.timeline`): GPT-Live,
read as the Live codec types it (relay/dialects/live.py; the Responses events nested in
`response.event`: relay/dialects/responses_stream.py). The timeline's reader of the
`ToolFlow.DELEGATIONS` flow.

What each event of the session becomes (the kinds: relay/offline/events.py):

    user / spoken   the caller's and the voice model's words, joined from the transcript deltas
                    (a side's words end when the other side speaks or something else happens)
    call            a function call of a Responses backend (read from the nested
                    `response.output_item.done` only), or a client delegation (its id the call's,
                    named `delegation`, `arguments` its offset on the session's timeline; answered
                    by the relay when the relay wrote its answer or decided it)
    output          a `function_call_output` that went up; for a delegation, its answer: the last
                    run of appends naming it (their words joined, `status` the channels)
    append          an append that went up (`status`: thinking, commentary or instructions;
                    `call_id`: the delegation it names), other than the one that is an answer's
                    first: a delegation's progress, or the rest of its answer
    appended        the server placed an append on the session's timeline (`text`: where)
    follow_up       the relay's `response.create` continuing a batch (`call_ids`: the batch)
    create          the client's `response.create`, as it went up
    response / response_done
                    a backend response began or ended (`status`; one still open when a new session
                    carries a dropped one on ended `incomplete` with it)
    error / closed  the upstream refused something; the session closed
"""

from __future__ import annotations

import dataclasses
from typing import Any

from relay.dialects import live as wire
from relay.dialects.peek import has_single_plain_type, peek_type
from relay.offline.delegation_checks import DelegationAppends
from relay.offline.delegation_checks import note as note_append
from relay.offline.events import (
    APPEND,
    APPENDED,
    CALL,
    CLOSED,
    CREATE,
    ERROR,
    FOLLOW_UP,
    OUTPUT,
    RESPONSE,
    RESPONSE_DONE,
    SPOKEN,
    USER,
    Event,
    Reader,
    decoded,
    json_arguments,
)
from relay.recording.format import CLIENT_TO_RELAY, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY, Frame

DELEGATION_CALL = "delegation"
"""The name a client delegation's call has on the timeline (the wire gives it none)."""
_CLIENT = wire.DELEGATION_TARGETS[0]
_CHANNELS = {wire.InstructionsAppend: "instructions", wire.ThinkingAppend: "thinking",
             wire.CommentaryAppend: "commentary"}
_ACKED = {ack: _CHANNELS[append] for append, ack in wire.APPENDED.items()}
_TOLD = (wire.DelegationCreated, wire.ResponseEnvelope, wire.Error, wire.SessionClosed, *wire.APPENDED.values())
"""The server's events that end the words being transcribed (audio and usage do not)."""
_AUDIO = frozenset(wire.AUDIO_EVENTS)
_ENDS = {wire.BackendCompleted: "completed", wire.BackendFailed: "failed", wire.BackendIncomplete: "incomplete"}


class DelegationReader(Reader):
    """Reads a GPT-Live session's frames (see the module docstring)."""

    def __init__(self, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.words: dict[str, list[str]] = {USER: [], SPOKEN: []}
        self.words_t: dict[str, float] = {}          # when a side's words being joined began
        self.batch: tuple[str, ...] = ()              # the calls of the last completed backend response
        self.response_calls: dict[str, list[str]] = {}
        self.open_response: str | None = None
        self.follow_up_pending: tuple[str, ...] | None = None
        self.client_creates = 0
        self.appends: dict[str, Event] = {}           # an append's event id -> its event
        self.relay_answers: set[str] = set()          # delegations the relay's appends answered
        self.sessions = 0                             # the server sessions started (a reseed starts another)
        self.appends_seen = DelegationAppends(None)   # the relay's appends and the server's answers to them

    def wants(self, frame: Frame) -> bool:
        """The session's audio (the caller's appends, the model's track: most of its frames, each
        kilobytes of base64) says nothing to this reader: a frame whose only `type` is one of
        `wire.AUDIO_EVENTS` is not decoded."""
        raw = frame.raw
        return raw is None or peek_type(raw) not in _AUDIO or not has_single_plain_type(raw)

    def event_of(self, frame: Frame) -> Any:
        """The frame's typed event (an `Unknown` for none), its text decoded straight into it, and
        noted in `appends_seen` (a relay append, the server's answer to one: what the explorer's checks
        read of them); what that refuses, through the decoded object (None: no JSON object, not
        read)."""
        raw = frame.raw
        if raw is not None:
            typed = wire.decode(raw)
            if not isinstance(typed, wire.Unknown):
                note_append(self.appends_seen, frame, typed)
                return typed
        event = decoded(frame)
        return None if event is None else wire.event_of(event)

    def dispatch(self, direction: str, typed: Any) -> None:
        if not isinstance(typed, wire.Unknown):
            self.route(direction, typed, _dict(typed.error) if isinstance(typed, wire.Error) else None)

    # ---- words ------------------------------------------------------------------------------------
    def heard(self, kind: str, text: Any) -> None:
        other = SPOKEN if kind == USER else USER
        self.flush(other)
        if isinstance(text, str):
            if not self.words[kind]:
                self.words_t[kind] = self.t
            self.words[kind].append(text)

    def flush(self, *kinds: str) -> None:
        for kind in kinds or (USER, SPOKEN):
            said = "".join(self.words[kind]).strip()
            self.words[kind] = []
            if said:
                now, self.t = self.t, self.words_t.get(kind, self.t)   # the words' event is when they began
                self.add(kind, text=said, by="caller" if kind == USER else "model")
                self.t = now

    # ---- upstream ---------------------------------------------------------------------------------
    def upstream(self, typed: Any) -> None:
        if isinstance(typed, wire.InputTranscriptDelta):
            self.heard(USER, typed.delta)
            return
        if isinstance(typed, wire.OutputTranscriptDelta):
            self.heard(SPOKEN, typed.delta)
            return
        if isinstance(typed, _TOLD):
            self.flush()
        if isinstance(typed, wire.SessionStarted):
            self.session_started()
        elif isinstance(typed, wire.DelegationCreated):
            delegation = typed.delegation
            if delegation.target == _CLIENT:
                self.call(delegation.id, DELEGATION_CALL, {"offset_ms": typed.offset_ms})
        elif isinstance(typed, wire.ResponseEnvelope):
            self.backend(wire.backend_event(typed))
        elif type(typed) in _ACKED:
            append = self.appends.get(str(typed.client_event_id))
            self.add(APPENDED, call_id=append.call_id if append else None, status=_ACKED[type(typed)],
                     text=f"placed at {typed.start_ms}-{typed.end_ms} ms", by="upstream")
        elif isinstance(typed, wire.Error):
            error = _dict(typed.error)
            self.add(ERROR, status=str(error.get("code") or "error"), text=str(error.get("message") or ""),
                     by="upstream")
        elif isinstance(typed, wire.SessionClosed):
            self.add(CLOSED, by="upstream", text=str(typed.reason or ""))

    def session_started(self) -> None:
        """A session started: after the first, a new one that carries a dropped one on
        (`relay serve --live-reseed`), and the backend response the dropped one had open ended
        with it."""
        if self.sessions and self.open_response is not None:
            self.flush()
            self.add(RESPONSE_DONE, response_id=self.open_response, status="incomplete", by="server")
            self.open_response = None
        if self.sessions and self.follow_up_pending is not None:
            # the dropped session's follow-up, lost with it: no response will answer that request
            self.flush()
            self.add(RESPONSE, status="lost", by="relay follow-up", call_ids=self.follow_up_pending)
            self.add(RESPONSE_DONE, status="lost", by="server")
            self.follow_up_pending = None
        self.batch = ()
        self.sessions += 1

    def backend(self, nested: Any) -> None:
        if isinstance(nested, wire.BackendCreated):
            response_id = _dict(nested.response).get("id")
            if isinstance(response_id, str):
                self.open_response = response_id
                follow_up = self.follow_up_pending
                self.follow_up_pending = None
                self.add(RESPONSE, response_id=response_id, status="in_progress",
                         by="relay follow-up" if follow_up is not None else "server", call_ids=follow_up or ())
        elif isinstance(nested, wire.BackendItemDone):
            item = _dict(nested.item)
            if item.get("type") == wire.FUNCTION_CALL:
                call_id = item.get("call_id")
                self.call(call_id, item.get("name"), json_arguments(item.get("arguments")), self.open_response)
                batch = self.response_calls.setdefault(self.open_response, []) if self.open_response else None
                if isinstance(call_id, str) and batch is not None and call_id not in batch:
                    batch.append(call_id)   # once, though the call be delivered twice (GPT-LIVE.md 5.7)
        elif type(nested) in _ENDS:
            response_id = _dict(nested.response).get("id")
            status = _ENDS[type(nested)]
            self.batch = tuple(self.response_calls.get(str(response_id), ())) if status == "completed" else ()
            self.open_response = None
            self.add(RESPONSE_DONE, response_id=response_id if isinstance(response_id, str) else None,
                     status=status, by="server")

    # ---- what went up -----------------------------------------------------------------------------
    def sent(self, direction: str, typed: Any) -> None:
        if isinstance(typed, wire.ResponseItemCreate):
            item = _dict(typed.item)
            if item.get("type") == wire.FUNCTION_CALL_OUTPUT:
                self.flush()
                self.output(direction, item.get("call_id"), str(item.get("output") or ""), "completed")
        elif isinstance(typed, wire.ResponseCreate):
            self.create(direction)
        elif type(typed) in _CHANNELS:
            self.append(direction, typed)

    def create(self, direction: str) -> None:
        if direction == CLIENT_TO_RELAY and self.upstream_bound == RELAY_TO_UPSTREAM:
            self.client_creates += 1   # its forward is the one that goes up
            return
        if direction != self.upstream_bound:
            return
        self.flush()
        batch, self.batch = self.batch, ()
        if direction == CLIENT_TO_RELAY or self.client_creates:
            self.client_creates = max(0, self.client_creates - 1)
            self.add(CREATE, call_ids=batch, by="client")
        else:
            self.follow_up_pending = batch
            self.add(FOLLOW_UP, call_ids=batch, by="relay")

    def append(self, direction: str, typed: Any) -> None:
        by_client = direction == CLIENT_TO_RELAY
        if by_client and self.upstream_bound == RELAY_TO_UPSTREAM:
            self.client_answers[(str(typed.delegation_id), str(typed.content))] += 1
            return
        if direction != self.upstream_bound:
            return
        key = (str(typed.delegation_id), str(typed.content))
        if by_client or self.client_answers[key]:
            self.client_answers[key] = max(0, self.client_answers[key] - 1)
            by = "client"
        else:
            by = "relay"
        self.flush()
        delegation_id = typed.delegation_id if isinstance(typed.delegation_id, str) else None
        if by == "relay" and delegation_id is not None:
            self.relay_answers.add(delegation_id)
        event = self.add(APPEND, call_id=delegation_id, text=str(typed.content or ""),
                         status=_CHANNELS[type(typed)], by=by)
        if isinstance(typed.event_id, str):
            self.appends[typed.event_id] = event

    # ---- the end ----------------------------------------------------------------------------------
    def finish(self) -> None:
        """The frames are over: each delegation's last run of appends becomes its answer (the
        run's first append an `output` holding the run's words), and a delegation the relay
        answered or decided is the relay's call."""
        self.flush()
        last_runs: dict[str, list[int]] = {}
        run: list[int] | None = None                  # the indexes of the run of appends going on
        for event in self.events:
            if event.kind == APPENDED:
                continue
            if event.kind != APPEND or event.call_id not in self.calls:
                run = None
            elif run is not None and self.events[run[0]].call_id == event.call_id:
                run.append(event.index)
            else:
                run = last_runs[str(event.call_id)] = [event.index]
        for call_id, call in self.calls.items():
            if call.name != DELEGATION_CALL:
                continue
            owner = "relay" if call_id in self.relay_answers or call_id in self.outcomes else "client"
            if owner != call.by:
                self.events[call.index] = self.calls[call_id] = dataclasses.replace(call, by=owner)
            indexes = last_runs.get(call_id)
            if not indexes:
                continue
            first = self.events[indexes[0]]
            words = " ".join(self.events[i].text or "" for i in indexes)
            channels = "+".join(str(self.events[i].status) for i in indexes)
            self.events[first.index] = dataclasses.replace(
                first, kind=OUTPUT, name=DELEGATION_CALL, text=words, status=channels,
                outcome=self.outcomes.get(call_id) if first.by == "relay" else None)
            self.open_calls.discard(call_id)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


__all__ = ["DELEGATION_CALL", "DelegationReader"]
