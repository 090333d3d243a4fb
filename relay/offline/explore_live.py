"""The explorer on GPT-Live (`relay explore --dialect live`): a scripted conversation
(`relay.offline.scripted_delegations`) in Responses delegation or in client delegation
(`Conversation.delegation`), run on one schedule as the other wires' are
(`relay.offline.explore_session`): the upstream's frames paced one every `STEP`, each
perturbation anchored on what the relay did with its Nth call, every invariant checked.

GPT-Live's timeline moves with the input audio only (../shared/GPT-LIVE.md 5.6): while anything
is still to happen (a frame in flight, a handler, a timer, words the model has still to say, an
append not yet acknowledged) the caller sends 100 ms of silence at a time, as a client must.

Responses delegation: a call is announced and complete in one nested event
(`response.output_item.done`: GPT-LIVE.md 4.2), so no perturbation lands before it is complete;
`answered` is its output sent, and the follow-up begins with the relay's `response.create` for
the batch. Client delegation (GPT-LIVE.md 4.1): the relay's call is its delegate's run for one
`session.delegation.created`; `running` is while the delegate runs, `answered` between its
answer's appends and their acknowledgement, and `follow_up` the continuation, once the server
acknowledged the answer's last append (the model then speaks it).

What is perturbed, and the fact each plays:

| kind | what happens | where the fact is |
|---|---|---|
| `barge_in` | the caller speaks a turn while the call's handler runs, between its output and the batch's `response.create` (client: between the appends and their acknowledgement), or during the continuation; nothing is cancelled. Client delegation also at `running` with `step` `LATE`: once the timeline is past the delegation's own words, when the engine applies the delegate's `Interruption` | GPT-LIVE.md 4.1, 4.2: a spoken interruption does not cancel backend work; relay/engine/delegations.py `BARGE_IN_GRACE_MS` |
| `finish`, `past_filler`, `past_timeout`, `raises`, `hangs`, `answers_twice` | the handler's (the delegate's) own behaviours, as on every wire | relay/offline/explore_session.py |
| `interruption` | client delegation: the delegate runs under another `Interruption` (`cancel`, `finish_silently`, `finish_and_speak`) than it was written with | relay/tools/delegation.py |
| `duplicate` | the call's nested `response.output_item.done` (client: its `session.delegation.created`) is delivered twice | GPT-LIVE.md 5.7: events fan out to every connection; claim each `call_id` and delegation id once |
| `drop` | the connection drops while the call runs (client: also while its appends wait to be placed); the session ends | GPT-LIVE.md 6: no resume; a new connection is a new session |
| `reseed` | the connection drops while the call runs or between its answer and the acknowledgement (what was in flight is lost), and the relay carries the session on in a new one, as `relay serve --live-reseed` does: the engine's history-seeded `session.start` goes up on a new connection to a new server session (the model's script carries on where it was), then the session goes on. `step` `OPENING`: that new connection drops too before its `session.started` (what went up on it is lost), and the relay tries again; `FAILS`: no new connection can be made, and the relay ends the session. At most `ATTEMPTS` new sessions: past them the session ends as a dropped one | GPT-LIVE.md 6: a new session seeded with `input`; relay/edges/reseed.py |
| `reconnect` | the sideband drops while the call runs, before its answer is placed (client: between its appends and their acknowledgement) or during the follow-up, and the relay re-attaches to the same session at its first attempt (0.2 s) or its last (12.6 s): what the server sends meanwhile is lost, the caller's audio reaches it all the same (by the call's own media path) | docs/gpt-live.md, Re-attach; relay/offline/explore_outage.py |
| `expired` | the session reaches its duration limit while the call runs (client: also while its appends wait to be placed): pending appends fail (`context_injection_incomplete`), `session.closed` with `reason: expired`, the close | GPT-LIVE.md 2.4, 6: no GoAway or expiry warning |

What `reseed` does not explore: the resume of a client that reconnects itself (`relay serve
--store`: relay/edges/history_resume.py), which needs a second client connection and a store, neither
of which the harness has (tests/store/test_live_resume.py covers it); and the relay's `--live-reseed`
loop itself, whose steps this module plays on the harness's loop as `ReseedingLoop.upstream_lost`
takes them (its attempts, a new connection that cannot be made, one that drops before its session
started). A call carried into the new session is answered there once with `delegation_id: null`
(docs/gpt-live.md: a silent note, and a delegation's message said), so the timeline's invariants do
not owe it an answer naming it (`carried_calls`); an append lost with the dropped connection is not
owed a placement. A delegation's answer sent and never placed before the drop is said in the new
session (tests/test_explore_live_client.py). A Responses backend call whose batch was not
continued at the drop is held to a follow-up like any other: the new session continues it
(docs/gpt-live.md), and the model speaks after its answer; so does the session after a second
drop that came before that continuation began, and so is a batch with the caller's own calls
too, once the caller's part is done (tests/test_explore_reseed.py).
"""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any

from relay.dialects import live as wire
from relay.engine.calls import CallState
from relay.engine.delegations import BARGE_IN_GRACE_MS
from relay.mock import Faults, MockConnection
from relay.mock.gemini import Hangup
from relay.mock.live import LiveMockSession
from relay.offline.events import CALL
from relay.offline.explore_outage import RECONNECT_ATTEMPTS, Outage, away_for
from relay.offline.explore_session import (
    STEP as _STEP,
    Conversation,
    Exploring,
    Observed,
    Perturbation,
    Schedule,
    _ScriptOf,
)
from relay.offline.replaying import json_object as decode
from relay.recording.format import RELAY_TO_UPSTREAM
from relay.offline.scripted_delegations import AUDIO_STEP, CLIENT, RESPONSES, DelegatingSession
from relay.tools import Interruption, ToolRegistry
from relay.tools.sources import tool_registry

BARGE_LINE = "Wait, one more thing."
"""What the caller says when it barges in, unless the conversation gives its own line."""
ANCHORS = ("running", "answered", "follow_up")
"""Where a perturbation can land on a GPT-Live call's life (`explore_session.ANCHORS`, but the
call is never seen before it is complete)."""
SESSION_KINDS = ("expired", "reseed")
"""GPT-Live's own perturbations of the session (the module docstring): at `running`, and `reseed`
at `answered` too."""
REATTACH = "reconnect"
"""The sideband drops and the relay re-attaches to the same session (relay/offline/explore_outage.py),
at each of `ANCHORS`, its `step` the attempt that succeeds (`RECONNECT_ATTEMPTS`)."""
OPENING, FAILS = 1, 2
"""A `reseed`'s `step`: the new connection drops before its `session.started` (the relay tries
again), or none can be made (the relay ends the session); 0: the new session starts."""
ATTEMPTS = 3
"""New sessions the relay opens for one session (relay/edges/reseed.py's `DEFAULT_ATTEMPTS`)."""
INTERRUPTION = "interruption"
"""Client delegation: the delegate runs under another `Interruption` (its `step`: the index in
`POLICIES`)."""
POLICIES = tuple(Interruption)
LATE = 1
"""A barge-in's `step` at `running` in client delegation: the caller speaks once the timeline is
past the delegation's own words (`BARGE_IN_GRACE_MS`), when the engine calls it a barge-in."""
_LATE_WAIT = BARGE_IN_GRACE_MS / 1000 + 2 * AUDIO_STEP
_SILENCE = wire.encode(wire.InputAudioAppend(audio=base64.b64encode(bytes(int(24_000 * 2 * AUDIO_STEP))).decode()))


def client_delegation(conversation: Conversation) -> bool:
    """Whether the conversation is in client delegation (the relay's delegate answers with appends)."""
    return conversation.delegation == CLIENT


def space(conversation: Conversation, observed: Observed) -> list[Perturbation]:
    """GPT-Live's own perturbations that the conversation's shape allows: each of
    `SESSION_KINDS` on each call whose handler ran in the run as scripted (a proxy's `reseed`
    too, not a sidecar's: the caller's session is its own); in client delegation
    also the late barge-in, `expired` and `drop` between the appends and their acknowledgement,
    and the delegate under each `Interruption` it was not written with."""
    found = [Perturbation(kind, number) for number in range(1, len(observed.calls) + 1)
             if (number, "running") in observed.anchors for kind in SESSION_KINDS]
    if conversation.mode != "sidecar":   # (`relay serve --live-reseed`: a proxy's)
        found += [Perturbation("reseed", number, "answered") for number in range(1, len(observed.calls) + 1)
                  if (number, "answered") in observed.anchors]
    found += [replace(p, step=how) for p in found if p.kind == "reseed" for how in (OPENING, FAILS)]
    found += [Perturbation(REATTACH, number, anchor, attempt) for number in range(1, len(observed.calls) + 1)
              for anchor in ANCHORS if (number, anchor) in observed.anchors for attempt in RECONNECT_ATTEMPTS]
    if not client_delegation(conversation):
        return found
    for number in range(1, len(observed.calls) + 1):
        if (number, "running") in observed.anchors:
            found.append(Perturbation("barge_in", number, "running", LATE))
        if (number, "answered") in observed.anchors:
            found += [Perturbation("expired", number, "answered"), Perturbation("drop", number, "answered")]
    delegate = tool_registry(conversation.tools).delegate
    if delegate is not None and observed.calls:
        found += [Perturbation(INTERRUPTION, 1, step=index) for index, policy in enumerate(POLICIES)
                  if policy is not delegate.interruption]
    return found


def describe(perturbation: Perturbation) -> str | None:
    """A GPT-Live perturbation in words (None: one of every wire's)."""
    call = f"call {perturbation.call}"
    if perturbation.kind == "expired":
        where = " while its appends wait to be placed" if perturbation.anchor == "answered" else ""
        return f"{call}: the session reaches its duration limit{where} (session.closed: expired)"
    if perturbation.kind == "barge_in" and perturbation.step == LATE:
        return f"{call}: the caller barges in while the delegate runs, past the delegation's own words"
    if perturbation.kind == "drop" and perturbation.anchor == "answered":
        return f"{call}: the upstream connection drops while its appends wait to be placed"
    if perturbation.kind == "reseed":
        where = " before its answer is placed" if perturbation.anchor == "answered" else " while it runs"
        then = {OPENING: "; the new one drops too before its session started, and the relay tries again",
                FAILS: "; no new connection can be made, and the relay ends the session"}.get(perturbation.step, "")
        return f"{call}: the upstream connection drops{where}; the relay carries the session on in a new one{then}"
    if perturbation.kind == INTERRUPTION:
        return f"the delegate's interruption policy is {POLICIES[perturbation.step].value}"
    if perturbation.kind == REATTACH:
        where = {"running": " while it runs", "answered": " before its answer is placed",
                 "follow_up": " while the model goes on after it"}.get(perturbation.anchor, "")
        return (f"{call}: the sideband drops{where}; the relay re-attaches to the same session "
                f"{away_for(perturbation.step):g} s later (attempt {max(perturbation.step, 1)})")
    return None


class ExploredLiveSession(Outage, Exploring, DelegatingSession):
    """A scripted GPT-Live conversation (Responses or client delegation) run on one schedule."""

    express_lane = True   # most of its frames are audio (the caller's silence, the model's track)

    def __init__(self, conversation: Conversation, schedule: Schedule, **options: Any) -> None:
        self._explore(conversation, schedule)
        self._outage()
        self._pending = sorted([*self._pending, *(p for p in schedule if p.kind in SESSION_KINDS or p.kind == REATTACH)])
        self._twice = {p.call for p in schedule if p.kind == "duplicate"}
        self._delivered: list[str] = []   # the relay's calls, in the order the backend delivered them
        self._delivered_twice: set[str] = set()
        self._late = 0   # late barge-ins waiting for the timeline to pass the delegation's words
        self.reseeds: list[float] = []   # when the relay carried the session on in a new one (`reseed`)
        self._dead: int | None = None   # the new connection (its `reseeds` index) that drops before its session starts
        self._carried: set[str] = set()   # the relay's calls a `reseed` answered in the new session
        self._client = client_delegation(conversation)
        tools = conversation.tools
        policy = next((p for p in schedule if p.kind == INTERRUPTION), None)
        if policy is not None and self._client:
            tools = _with_policy(tool_registry(tools), POLICIES[policy.step])
            self.observed.fired.append(policy)
        options.setdefault("config", conversation.engine_config())
        super().__init__(_ScriptOf(conversation.script, conversation.turns), tools,
                         dialect=conversation.dialect, delegation=CLIENT if self._client else RESPONSES,
                         client_tools=conversation.client_tools, **options)
        self._watch_forgetting()

    # ---- the caller ------------------------------------------------------------------------------
    def say_now(self, text: str) -> None:
        """The caller says `text` (the model answers as its script says)."""
        self.from_upstream(self._carry(self.mock.user_turn(text)))

    def settle(self, limit: float) -> None:
        """Until nothing is left to happen, the caller's silence moving the timeline. While the
        sideband is away (`reconnect`) the caller's audio reaches the server all the same, by the
        call's own media path, and what the server sends meanwhile is lost."""
        start = self.now
        while not self.closed and self.pending() and self.now - start < limit:
            if self._away and not self.sidecar:   # (a sidecar's caller always talks to the server)
                self._queue_upstream(self._upstream_receive(_SILENCE))
            else:
                self.from_caller([_SILENCE])
            self._run(self.now + AUDIO_STEP)

    def pending(self) -> bool:
        return super().pending() or bool(self.mock.speech or self.mock.pending or self._late) or self._dead is not None

    def _happen(self, perturbation: Perturbation) -> None:
        if self.closed:
            return
        if perturbation.kind == "drop":
            super()._happen(perturbation)
            return
        if perturbation.kind == "expired":
            self.mark("fault", "the session reaches its duration limit")
            self._queue_first([self._expire])
            return
        if perturbation.kind == "reseed":
            self._reseed(perturbation.step)
            return
        if perturbation.kind == REATTACH:
            self._reconnect(perturbation)
            return
        if perturbation.kind == "barge_in" and perturbation.step == LATE:
            self._late += 1
            self.loop.call_later(_LATE_WAIT, self._barge_late)
            return
        self._barge_in()

    def _barge_late(self) -> None:
        self._late -= 1
        if not self.closed:
            self._barge_in()

    def _barge_in(self) -> None:
        """The caller speaks: the conversation's barge-in line, answered as the script says; else
        `BARGE_LINE`, answered with the script's default reply, so that the words the script has
        for its own lines (a recording's turns) stay theirs, as on the other wires, where a caller
        who only speaks over the assistant takes no turn of the script."""
        self.mark("fault", "the caller barges in")
        text = self.conversation.barge_text
        reply = None if text is not None else self.mock.script.default
        # behind the frames in flight: GPT-Live cancels nothing at a barge-in, and what the server
        # sent before it heard the caller (a backend response's end) reaches the relay first
        self._paced.append(lambda: self._carry(self.mock.user_turn(text or BARGE_LINE, reply)))
        self._schedule_release()

    def _expire(self) -> list[Any]:
        """The server's side of `expired`, when its turn to be delivered comes: an error for each
        append still pending, `session.closed`, then (once they are delivered) the close."""
        said = self._carry([action for action in self.mock.close("expired") if not isinstance(action, Hangup)])
        return [*said, self._closes]

    def _reseed(self, how: int = 0) -> None:
        """`relay serve --live-reseed` (relay/edges/reseed.py, `ReseedingLoop.upstream_lost`): the
        upstream connection drops (what was in flight is lost), the engine builds the
        `session.start` of a new session that carries this one on, the relay opens a new
        connection to a new server session and sends it first, then carries on over it. The
        model's script goes on where it was (its turns and the conversation: what the new
        session's `input` tells it). `how`: `OPENING`, that connection drops as well before its
        `session.started` (half a `STEP` on: the server's answer comes a `STEP` after the start),
        and this happens again; `FAILS`, none can be made, and the relay ends the session. Past
        `ATTEMPTS` new sessions the session ends as a dropped one."""
        self._paced.clear()
        self._dead = None
        self.reseeds.append(self.now)
        if len(self.reseeds) > ATTEMPTS:   # as a dropped connection without `--live-reseed`
            self.mark("fault", "the upstream connection dropped; no attempt is left")
            self.loop.call_soon(self.end, "upstream closed the session")
            return
        self.mark("fault", "the upstream connection dropped; the relay starts a new session")
        self._carried.update(entry.call_id for entry in self.engine.ledger if entry.relay_owned and not (
            entry.state in _OVER or entry.state is CallState.ANSWERED and entry.delivered))
        self._engine_input(lambda: self.engine.upstream_disconnected(self.now))
        start, actions = self.engine.new_session(self.now)   # type: ignore[attr-defined]
        self._engine_input(lambda: actions)
        if start is None or self.closed:
            self.loop.call_soon(self.end, "upstream closed the session")
            return
        if how == FAILS:
            self.mark("fault", "no new upstream connection can be made")
            self.loop.call_soon(self.end, "upstream lost")
            return
        old = self.mock
        self.mock = LiveMockSession(old.script, Faults(), wall=old.wall)
        self.mock.picks, self.mock.items = old.picks, old.items
        self.mock.connected(MockConnection(index=0, path=wire.LIVE_PATH, query={}, headers={}, auth="bearer"))
        self._log(RELAY_TO_UPSTREAM, start)   # as the live loop records what it sends before it carries on
        if how == OPENING:
            self._dead = len(self.reseeds)
            self.loop.call_later(_STEP / 2, self._drops_opening, self._dead)
        else:
            self._queue_upstream(self._upstream_receive(start))
        self._engine_input(lambda: self.engine.upstream_reconnected(self.now))

    def _drops_opening(self, connection: int) -> None:
        if not self.closed and self._dead == connection:
            self.mark("fault", "the new upstream connection dropped before its session started")
            self._reseed()

    def unseen_calls(self) -> set[str]:
        """The calls (client delegation: the delegations) the server made while the sideband was
        away and that nothing the relay received names: GPT-Live documents no way to ask for what
        a sideband missed (../shared/GPT-LIVE.md 6), so the relay owes these nothing
        (docs/gpt-live.md, Re-attach)."""
        if not self._lost:
            return set()
        ledger = self.engine.ledger
        return {event.call_id for event in self.timeline.of(CALL) if event.call_id and ledger.get(event.call_id) is None}

    def strands_follow_ups(self) -> float | None:
        """When the first call was made that the relay never saw, the sideband away
        (`unseen_calls`); None when there is none, or in client delegation. In Responses
        delegation such a call holds its batch open: GPT-Live continues a batch only once every
        output is in, and refuses a partial one, so no create of the relay's continues the
        session after it. The relay cannot answer a call it never saw: a create of its sent
        after then and refused is not held against it (the explorer's `spoke_after_tools` and
        `appends_placed`; docs/gpt-live.md, Re-attach)."""
        if self._client:
            return None
        unseen = self.unseen_calls()
        if not unseen:
            return None
        return min(event.t for event in self.timeline.of(CALL) if event.call_id in unseen)

    def carried_calls(self) -> set[str]:
        """The relay's calls not yet answered to the server, or whose answer it had not placed, when
        a `reseed` dropped their session: the relay answers each once in the new session with
        `delegation_id: null` (a note, or history in its `input`; a delegation's message said:
        docs/gpt-live.md). The timeline's invariants do not count them owed an answer naming them."""
        return set(self._carried)

    def _closes(self) -> list[Any]:
        if not self.closed:
            self.mark("closed", "the upstream closed the session (expired)")
            self.loop.call_soon(self.end, "upstream closed the session")
        return []

    # ---- the backend's deliveries ----------------------------------------------------------------
    def _deliveries(self, frame: str | bytes) -> list[str | bytes]:
        """Twice, the frame that hands the relay a call a `duplicate` names (numbered as the
        relay's calls are, in the order the server delivers them): a backend call's nested
        `response.output_item.done`, or a client delegation's `session.delegation.created`."""
        if not self._twice or not isinstance(frame, str):
            return [frame]
        call_id = self._delegation_of(frame) if self._client else self._backend_call_of(frame)
        if call_id is None:
            return [frame]
        if call_id not in self._delivered:
            self._delivered.append(call_id)
        if self._delivered.index(call_id) + 1 in self._twice and call_id not in self._delivered_twice:
            self._delivered_twice.add(call_id)
            return [frame, frame]
        return [frame]

    def _backend_call_of(self, frame: str) -> str | None:
        """The call id of a relay tool's call the frame delivers (Responses delegation)."""
        if '"function_call"' not in frame:
            return None
        event = wire.event_of(decode(frame))
        nested = wire.backend_event(event) if isinstance(event, wire.ResponseEnvelope) else None
        item = nested.item if isinstance(nested, wire.BackendItemDone) and isinstance(nested.item, dict) else {}
        call_id = item.get("call_id")
        if item.get("type") != wire.FUNCTION_CALL or item.get("name") not in self.tools or not isinstance(call_id, str):
            return None
        return call_id

    def _delegation_of(self, frame: str) -> str | None:
        """The id of a client delegation the frame creates (client delegation)."""
        if _CREATED not in frame:
            return None
        event = wire.event_of(decode(frame))
        if not isinstance(event, wire.DelegationCreated) or event.delegation.target != CLIENT:
            return None
        return event.delegation.id

    def _repeated(self) -> set[Any]:
        return set(self._delivered_twice)

    # ---- anchors ---------------------------------------------------------------------------------
    def _look(self) -> None:
        """Client delegation: a delegation's continuation begins when the server acknowledged the
        last append of its answer (`CallEntry.delivered`): the model speaks the result then."""
        super()._look()
        if not self._client:
            return
        ledger = self.engine.ledger
        for number, call_id in enumerate(self.observed.calls, start=1):
            entry = ledger.get(call_id)
            if entry is not None and entry.delivered:
                self._reached(number, "follow_up")

    def _upstream_gets(self, frame: str | bytes) -> None:
        """The batch's `response.create` begins the follow-up of every call answered before it.
        On a connection that dropped before its session started (`OPENING`) a frame is lost."""
        if self._dead is None:
            super()._upstream_gets(frame)
        if isinstance(frame, str) and '"response.create"' in frame:
            self._look()   # the outputs it follows went up in the same step
            for number in range(1, len(self.observed.calls) + 1):
                if (number, "answered") in self.observed.anchors:
                    self._reached(number, "follow_up")


def _with_policy(tools: ToolRegistry, policy: Interruption) -> ToolRegistry:
    """The same tools, their delegate under `policy`."""
    delegate = tools.delegate
    return ToolRegistry([*tools, *([replace(delegate, interruption=policy)] if delegate is not None else [])])


_OVER = (CallState.SKIPPED, CallState.ABANDONED)
_CREATED = f'"{wire.DelegationCreated.__struct_config__.tag}"'


__all__ = ["ANCHORS", "ATTEMPTS", "BARGE_LINE", "FAILS", "INTERRUPTION", "LATE", "OPENING", "POLICIES", "REATTACH",
           "SESSION_KINDS", "ExploredLiveSession", "client_delegation", "describe", "space"]
