"""The explorer on GPT-Live (`relay explore --dialect live`): a scripted conversation of Responses
delegation (`relay.offline.scripted_delegations`) run on one schedule, as the other wires' are
(`relay.offline.explore_session`): the upstream's frames paced one every `STEP`, each
perturbation anchored on what the relay did with its Nth call, every invariant checked.

GPT-Live's timeline moves with the input audio only (../shared/GPT-LIVE.md 5.6): while anything
is still to happen (a frame in flight, a handler, a timer, words the model has still to say, an
append not yet acknowledged) the caller sends 100 ms of silence at a time, as a client must.

What is perturbed, and the fact each plays:

| kind | what happens | where the fact is |
|---|---|---|
| `barge_in` | the caller speaks a turn while the call's handler runs, between its output and the batch's `response.create`, or during the continuation; nothing is cancelled | GPT-LIVE.md 4.1, 4.2: a spoken interruption does not cancel backend work |
| `finish`, `past_filler`, `past_timeout`, `raises`, `hangs`, `answers_twice` | the handler's own behaviours, as on every wire | relay/offline/explore_session.py |
| `duplicate` | the call's nested `response.output_item.done` is delivered twice | GPT-LIVE.md 5.7: events fan out to every connection; claim each `call_id` once |
| `drop` | the connection drops while the call runs | GPT-LIVE.md 6: no resume; a new connection is a new session |
| `expired` | the session reaches its duration limit while the call runs: pending appends fail (`context_injection_incomplete`), `session.closed` with `reason: expired`, the close | GPT-LIVE.md 2.4, 6: no GoAway or expiry warning |

A call is announced and complete in one nested event (`response.output_item.done`: GPT-LIVE.md
4.2), so no perturbation lands before it is complete; the follow-up begins with the relay's
`response.create` for the batch. Client delegation (the relay's delegate answering with appends)
is not explored yet.
"""

from __future__ import annotations

import base64
from typing import Any

from relay.dialects import live as wire
from relay.mock.gemini import Hangup
from relay.offline.explore_session import (
    Conversation,
    Exploring,
    Observed,
    Perturbation,
    Schedule,
    _ScriptOf,
)
from relay.offline.replaying import json_object as decode
from relay.offline.scripted_delegations import AUDIO_STEP, RESPONSES, DelegatingSession

BARGE_LINE = "Wait, one more thing."
"""What the caller says when it barges in, unless the conversation gives its own line."""
ANCHORS = ("running", "answered", "follow_up")
"""Where a perturbation can land on a GPT-Live call's life (`explore_session.ANCHORS`, but the
call is never seen before it is complete)."""
SESSION_KINDS = ("expired",)
"""GPT-Live's own perturbations of the session (the module docstring), each at `running`."""
_SILENCE = wire.encode(wire.InputAudioAppend(audio=base64.b64encode(bytes(int(24_000 * 2 * AUDIO_STEP))).decode()))


def space(conversation: Conversation, observed: Observed) -> list[Perturbation]:
    """GPT-Live's own perturbations that the conversation's shape allows: each of
    `SESSION_KINDS` on each call whose handler ran in the run as scripted."""
    return [Perturbation(kind, number) for number in range(1, len(observed.calls) + 1)
            if (number, "running") in observed.anchors for kind in SESSION_KINDS]


def describe(perturbation: Perturbation) -> str | None:
    """A GPT-Live perturbation in words (None: one of every wire's)."""
    if perturbation.kind == "expired":
        return f"call {perturbation.call}: the session reaches its duration limit (session.closed: expired)"
    return None


class ExploredLiveSession(Exploring, DelegatingSession):
    """A scripted GPT-Live conversation (Responses delegation) run on one schedule."""

    def __init__(self, conversation: Conversation, schedule: Schedule, **options: Any) -> None:
        self._explore(conversation, schedule)
        self._pending = sorted([*self._pending, *(p for p in schedule if p.kind in SESSION_KINDS)])
        self._twice = {p.call for p in schedule if p.kind == "duplicate"}
        self._delivered: list[str] = []   # the relay's calls, in the order the backend delivered them
        self._delivered_twice: set[str] = set()
        super().__init__(_ScriptOf(conversation.script, conversation.turns), conversation.tools,
                         dialect=conversation.dialect, delegation=RESPONSES,
                         client_tools=conversation.client_tools, **options)

    # ---- the caller ------------------------------------------------------------------------------
    def say_now(self, text: str) -> None:
        """The caller says `text` (the model answers as its script says)."""
        self.from_upstream(self._carry(self.mock.user_turn(text)))

    def settle(self, limit: float) -> None:
        """Until nothing is left to happen, the caller's silence moving the timeline."""
        start = self.now
        while not self.closed and self.pending() and self.now - start < limit:
            self.from_caller([_SILENCE])
            self._run(self.now + AUDIO_STEP)

    def pending(self) -> bool:
        return super().pending() or bool(self.mock.speech or self.mock.pending)

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
        self.mark("fault", "the caller barges in")
        text = self.conversation.barge_text or BARGE_LINE
        self._queue_first([lambda: self._carry(self.mock.user_turn(text))])

    def _expire(self) -> list[Any]:
        """The server's side of `expired`, when its turn to be delivered comes: an error for each
        append still pending, `session.closed`, then (once they are delivered) the close."""
        said = self._carry([action for action in self.mock.close("expired") if not isinstance(action, Hangup)])
        return [*said, self._closes]

    def _closes(self) -> list[Any]:
        if not self.closed:
            self.mark("closed", "the upstream closed the session (expired)")
            self.loop.call_soon(self.end, "upstream closed the session")
        return []

    # ---- the backend's deliveries ----------------------------------------------------------------
    def _deliveries(self, frame: str | bytes) -> list[str | bytes]:
        """Twice, the nested `response.output_item.done` of a call a `duplicate` names (numbered
        as the relay's calls are, in the order the backend delivers them)."""
        if not self._twice or not isinstance(frame, str) or '"function_call"' not in frame:
            return [frame]
        event = wire.event_of(decode(frame))
        nested = wire.backend_event(event) if isinstance(event, wire.ResponseEnvelope) else None
        item = nested.item if isinstance(nested, wire.BackendItemDone) and isinstance(nested.item, dict) else {}
        call_id = item.get("call_id")
        if item.get("type") != wire.FUNCTION_CALL or item.get("name") not in self.tools or not isinstance(call_id, str):
            return [frame]
        if call_id not in self._delivered:
            self._delivered.append(call_id)
        if self._delivered.index(call_id) + 1 in self._twice and call_id not in self._delivered_twice:
            self._delivered_twice.add(call_id)
            return [frame, frame]
        return [frame]

    def _repeated(self) -> set[Any]:
        return set(self._delivered_twice)

    # ---- anchors ---------------------------------------------------------------------------------
    def _upstream_gets(self, frame: str | bytes) -> None:
        """The batch's `response.create` begins the follow-up of every call answered before it."""
        super()._upstream_gets(frame)
        if isinstance(frame, str) and '"response.create"' in frame:
            self._look()   # the outputs it follows went up in the same step
            for number in range(1, len(self.observed.calls) + 1):
                if (number, "answered") in self.observed.anchors:
                    self._reached(number, "follow_up")


__all__ = ["ANCHORS", "BARGE_LINE", "SESSION_KINDS", "ExploredLiveSession", "describe", "space"]
