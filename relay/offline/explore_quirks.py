"""The explorer's perturbations of the connection and of the provider's server beyond the session's
own (relay/offline/explore_session.py), as data: each kind names the fact it plays (the dialect's
field, the mock's quirk, the section of the protocol notes), the dialects it applies to and where
on a call's life it lands.

| kind | what happens | where the fact is |
|---|---|---|
| `reconnect` | the upstream connection drops (while the call is made, while it runs, before its follow-up or during it), frames in flight are lost, the relay reconnects at its first attempt (0.2 s) or its last (12.6 s) (`upstream_disconnected` / `upstream_reconnected`; played by relay/offline/explore_outage.py, as on GPT-Live) | `Dialect.call_sideband`: the attached call reopens its sideband |
| `server_cancel` | the server ends the call's response `cancelled` (OpenAI family: the rest of its items `incomplete`; Gemini: `toolCallCancellation` without a barge-in) | a call is safe only when its response did not end cancelled; Gemini's `toolCallCancellation` |
| `late_arguments` | the response is cancelled while the call's arguments stream, and its arguments and item arrive after `response.done` | the `.done` events are also sent for the items of a cancelled response |
| `end_first` | Gemini: the caller barges in while the call runs, and the server ends the interrupted turn (`turnComplete`) before it cancels the call | an interrupted turn goes through `interrupted` > `turn_complete` (google-genai's `LiveServerContent`); where its `toolCallCancellation` comes is not documented |
| `no_cancellation` | Gemini: the caller barges in while a BLOCKING call runs, and the server drops the call: no `toolCallCancellation` names it, and its answer gets no reply (the mock's `Quirks.drops_blocking`) | a user's report (Google AI forum, docs/gemini.md "A call dropped with no cancellation") |
| `goes_away` | Gemini warns (`goAway`, one second left) and closes the connection | connections last about ten minutes; `goAway` warns before the close |
| `expiry` | the OpenAI family's session reaches its maximum duration: `error` `session_expired`, then the close | sessions last at most 60 minutes (Azure: 30) |
| `mcp_dies` | the MCP server of a relay MCP tool dies while the call is in flight: the call fails as the connection fails it | relay/mcp/connection.py: a call in flight fails when its connection ends |

Gemini Live has no sideband to reconnect: its `goAway` goes to the client (which resumes the session
on a new connection: a new relay session), unless the client enabled session resumption, when
`relay serve` resumes upstream itself (relay/edges/going_away.py; the explored conversations'
client does not), so Gemini gets `goes_away`, not `reconnect`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any, Callable

from msgspec.structs import replace as struct_replace

from relay.dialects import Dialect, OpenAIFamily
from relay.dialects import openai_codec as wire
from relay.dialects.openai import SESSION_EXPIRED, expiry_message
from relay.engine import StartHandler
from relay.engine.calls import CallState
from relay.mock.quirks import Quirks, quirks_of
from relay.offline.explore_outage import RECONNECT_ATTEMPTS, Outage, away_for
from relay.offline.explore_session import STEP, Conversation, ExploredSession, Observed, Perturbation
from relay.offline.replaying import json_object as decode
from relay.offline.withdrawn_calls import ended_before_cancelled, withdrawn_in_flight
from relay.recording.format import RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY
from relay.tools.mcp_tools import McpToolHandler

_OPEN = (CallState.ANNOUNCED, CallState.STREAMING)
GO_AWAY_LEFT = "1s"
"""The time a `goAway` gives before the connection closes."""


@dataclass(frozen=True)
class QuirkKind:
    """One kind of perturbation of this module: `applies` to a dialect (with the provider's quirks
    the session plays) and lands at `anchors` of each call it applies to."""

    kind: str
    text: str
    anchors: tuple[str, ...]
    fact: str
    applies: Callable[[Dialect, Quirks], bool]
    handler: bool = False   # a handler behaviour: at most one per call (see relay.offline.explore)


def _openai(dialect: Dialect, quirks: Quirks) -> bool:
    return isinstance(dialect, OpenAIFamily)


def _streamed(dialect: Dialect, quirks: Quirks) -> bool:
    """The OpenAI family where calls stream (not xAI's reported `calls: in_done`)."""
    return isinstance(dialect, OpenAIFamily) and quirks.calls == "streamed"


KINDS: dict[str, QuirkKind] = {kind.kind: kind for kind in (
    QuirkKind("reconnect", "the upstream connection drops and the relay reconnects",
              ("announced", "running", "answered", "follow_up"),
              "Dialect.call_sideband (the attached call reopens its sideband)",
              lambda dialect, quirks: dialect.call_sideband),
    QuirkKind("server_cancel", "the server cancels the call's response", ("announced", "running"),
              "PROTOCOL.md 1 and 4: a call is safe only when its response did not end cancelled; toolCallCancellation",
              lambda dialect, quirks: True),
    QuirkKind("late_arguments", "the response is cancelled and the call's arguments arrive after it", ("announced",),
              "PROTOCOL.md 1: the .done events are also sent for items of a cancelled response", _streamed),
    QuirkKind("end_first", "the caller barges in, and the server ends the turn before it cancels the call",
              ("running",), "google-genai LiveServerContent: interrupted > turn_complete; the cancellation's place "
              "is not documented (docs/gemini.md, The model interrupted)",
              lambda dialect, quirks: not isinstance(dialect, OpenAIFamily)),
    QuirkKind("no_cancellation", "the caller barges in, and the server drops the call with no toolCallCancellation",
              ("running",), "a user's report (Google AI forum): with a BLOCKING function an interrupting turn "
              "drops the pending call, no toolCallCancellation comes, and an answer sent after gets no reply "
              "(docs/gemini.md, A call dropped with no cancellation)",
              lambda dialect, quirks: not isinstance(dialect, OpenAIFamily)),
    QuirkKind("goes_away", "the server says goAway and closes the connection", ("running",),
              "PROTOCOL.md 4: goAway warns before the connection closes",
              lambda dialect, quirks: not isinstance(dialect, OpenAIFamily)),
    QuirkKind("expiry", "the session expires (error session_expired) and the connection closes", ("running",),
              "PROTOCOL.md 1 and 3: sessions last at most 60 minutes (Azure: 30)", _openai),
    QuirkKind("mcp_dies", "its MCP server dies while the call is in flight", ("running",),
              "relay/mcp/connection.py: a call in flight fails when its connection ends",
              lambda dialect, quirks: True, handler=True),
)}

SESSION_KINDS = frozenset(kind for kind, spec in KINDS.items() if not spec.handler)
HANDLER_KINDS = frozenset(kind for kind, spec in KINDS.items() if spec.handler)


def describe(perturbation: Perturbation) -> str:
    """What a perturbation does, in words (this module's kinds and the session's own)."""
    spec = KINDS.get(perturbation.kind)
    if spec is None:
        return perturbation.describe()
    where = "" if len(spec.anchors) == 1 else {
        "announced": " before the call is complete", "running": " while its handler runs",
        "answered": " between its output and the follow-up",
        "follow_up": " during its follow-up"}.get(perturbation.anchor, "")
    if spec.kind == "reconnect":
        where += f", {away_for(perturbation.step):g} s later (attempt {max(perturbation.step, 1)})"
    return f"call {perturbation.call}: {spec.text}{where}"


def space(conversation: Conversation, observed: Observed, tool_names: dict[str, str]) -> list[Perturbation]:
    """This module's perturbations that the conversation's shape allows: each kind that applies to
    its dialect, at each anchor each call reached in the run as scripted (`mcp_dies` on the calls
    of an MCP tool, `no_cancellation` on those of a BLOCKING one; `tool_names`: call id -> the
    tool's name)."""
    from relay.dialects import get_dialect
    from relay.tools.sources import tool_registry

    dialect = get_dialect(conversation.dialect)
    quirks = conversation.quirks or quirks_of(conversation.dialect)
    registry = tool_registry(conversation.tools)
    found: list[Perturbation] = []
    for number, call_id in enumerate(observed.calls, start=1):
        for spec in KINDS.values():
            if not spec.applies(dialect, quirks):
                continue
            tool = registry.get(tool_names.get(call_id, ""))
            if spec.kind == "mcp_dies" and (tool is None or not isinstance(tool.handler, McpToolHandler)):
                continue
            if spec.kind == "no_cancellation" and (tool is None or tool.non_blocking):
                continue
            steps = RECONNECT_ATTEMPTS if spec.kind == "reconnect" else (0,)
            found += [Perturbation(spec.kind, number, anchor, step) for anchor in spec.anchors for step in steps
                      if (number, anchor) in observed.anchors]
    return found


class PerturbedSession(Outage, ExploredSession):
    """An explored session that also plays this module's perturbations (see the module docstring)."""

    def __init__(self, conversation: Conversation, schedule: tuple[Perturbation, ...], **options: Any) -> None:
        self._outage()
        self._closing = False           # the server said it closes (goAway): the close is still to come
        self._deaths = {p.call: p for p in schedule if p.kind in HANDLER_KINDS}
        if any(p.kind == "no_cancellation" for p in schedule):   # the service the report describes, all session long
            quirks = conversation.quirks or quirks_of(conversation.dialect)
            conversation = replace(conversation, quirks=replace(quirks, drops_blocking=True))
        super().__init__(conversation, schedule, **options)
        self._pending = sorted([*self._pending, *(p for p in schedule if p.kind in SESSION_KINDS)])

    def pending(self) -> bool:
        return self._closing or super().pending()

    def unseen_calls(self) -> set[str]:
        """The calls the server made that nothing the relay received tells it of: every frame of
        theirs lost while away, and their item named by no frame after (a later item's
        `previous_item_id` names it, and the relay asks for it: relay/engine/recovery.py). The
        relay owes these nothing (docs/guarantees.md: the window a reconnect leaves). Nor a call
        whose item the relay asked for when the session ended before the answer came: it never
        learnt that the item was a call."""
        if not self._lost:
            return set()
        from relay.offline.events import CALL

        items: dict[Any, Any] = {}   # call id -> its item's id, as the lost frames carry it
        for _, frame in self._lost:
            typed = _typed(frame.raw if frame.raw is not None else frame.binary, self.dialect)
            response = getattr(typed, "response", None)
            for item in [getattr(typed, "item", None), *((response or {}).get("output") or []
                                                        if isinstance(response, dict) else [])]:
                if isinstance(item, dict) and item.get("type") == wire.FUNCTION_CALL:
                    items[item.get("call_id")] = item.get("id")
        received = [frame.raw for frame in self.frames if frame.direction == UPSTREAM_TO_RELAY and frame.raw]
        unanswered: set[str] = set()   # items the relay asked for, no answer come when the session ended
        if self.closed:
            for frame in self.frames:
                if frame.raw and f'"{wire.ItemRetrieve.__struct_config__.tag}"' in frame.raw:
                    asked = decode(frame.raw).get("item_id")
                    if frame.direction == RELAY_TO_UPSTREAM and isinstance(asked, str):
                        unanswered.add(asked)
            unanswered = {item_id for item_id in unanswered
                          if not any(f'"{item_id}"' in text and f'"{wire.ItemRetrieved.__struct_config__.tag}"' in text
                                     for text in received)}
        return {event.call_id for event in self.timeline.of(CALL)
                if event.call_id and self.engine.ledger.get(event.call_id) is None
                and (items.get(event.call_id) in unanswered
                     or not any(isinstance(items.get(event.call_id), str) and f'"{items[event.call_id]}"' in text
                                for text in received))}

    def _happen(self, perturbation: Perturbation) -> None:
        act = _SESSION_ACTS.get(perturbation.kind)
        if act is None:
            super()._happen(perturbation)
        elif not self.closed:
            act(self, perturbation)

    def _go_away(self, perturbation: Perturbation) -> None:
        self.mark("fault", f"the server says goAway ({GO_AWAY_LEFT} left)")
        self._closing = True
        self._queue_first(self.model._carry(self.model.mock.go_away(GO_AWAY_LEFT)))   # type: ignore[attr-defined]
        self.loop.call_at(self.now + float(GO_AWAY_LEFT.rstrip("s")), self._server_closes)

    def _expiry(self, perturbation: Perturbation) -> None:
        self.mark("fault", "the session reaches its maximum duration")
        self._closing = True
        error = wire.Error(error={"type": "invalid_request_error", "code": SESSION_EXPIRED,
                                  "message": expiry_message(self.dialect), "param": None, "event_id": None})
        self._queue_first([wire.encode(error, self.dialect), self._server_closes])   # type: ignore[arg-type]

    def _server_closes(self) -> list[str | bytes]:
        self._closing = False
        if not self.closed:
            self.mark("fault", "the upstream connection closed")
            self.loop.call_soon(self.end, "upstream closed the session")
        return []

    # ---- the response --------------------------------------------------------------------------
    def _server_cancel(self, perturbation: Perturbation) -> None:
        self.mark("fault", "the server cancels the response")
        if self.gemini:   # a call withdrawn before it reached the relay was never made (relay/offline/withdrawn_calls.py)
            self._queue_first([lambda: withdrawn_in_flight(
                self._paced, self.model._carry(self.model.mock.withdraw()),   # type: ignore[attr-defined]
                {entry.call_id for entry in self.engine.ledger})])
            return
        self._cut(perturbation, late=False)

    def _end_first(self, perturbation: Perturbation) -> None:
        """A Gemini barge-in whose interrupted turn's `turnComplete` comes before the cancellation."""
        self.mark("fault", "the caller barges in; the server ends the turn before it cancels the call")
        text = self.conversation.barge_text
        self._queue_first([lambda: ended_before_cancelled(self._gemini_speech(text))])

    def _no_cancellation(self, perturbation: Perturbation) -> None:
        """A Gemini barge-in on a server that drops the BLOCKING calls it interrupts, with no
        cancellation (the mock's `Quirks.drops_blocking`, on for this session)."""
        self.mark("fault", "the caller barges in; the server drops the call with no toolCallCancellation")
        text = self.conversation.barge_text
        self._queue_first([lambda: self._gemini_speech(text)])

    def _late_arguments(self, perturbation: Perturbation) -> None:
        self.mark("fault", "the response is cancelled while the call's arguments stream")
        self._cut(perturbation, late=True)

    def _cut(self, perturbation: Perturbation, *, late: bool) -> None:
        """The call's response ends `cancelled` now: its `response.done` (rewritten: its items not
        done yet `incomplete`, those not begun gone) goes ahead of its frames still in flight,
        which are dropped (an `incomplete` `response.output_item.done` for each item begun) or,
        `late`, delivered after it as they were."""
        entry = self.engine.ledger.get(self.observed.calls[perturbation.call - 1])
        response_id = entry.response_id if entry is not None else None
        if response_id is None:
            return
        ours, others, done = _split(list(self._paced), response_id, self.dialect)
        if done is None:
            return   # its end has been delivered already: nothing is left to cancel
        begun = _item_ids(ours, wire.OutputItemAdded, self.dialect)
        # a call the relay has seen complete (its `conversation.item.done` came first) stays complete
        seen_done = {entry.item_id for entry in self.engine.ledger if entry.state not in _OPEN}
        unfinished = _item_ids(ours, wire.OutputItemDone, self.dialect) - seen_done
        output = [item if item.get("id") not in unfinished else {**item, "status": "incomplete"}
                  for item in (done.response or {}).get("output") or [] if late or item.get("id") not in begun]
        cancelled = struct_replace(done, response={**(done.response or {}), "status": "cancelled", "output": output,
                                            "status_details": {"type": "cancelled", "reason": "turn_detected"}})
        head = [wire.encode(cancelled, self.dialect)]
        if late:
            head += [frame for frame in ours if not isinstance(_typed(frame, self.dialect), wire.ResponseDone)]
        else:
            head = [wire.encode(wire.OutputItemDone(response_id=response_id, output_index=index, item=item),
                                self.dialect)
                    for index, item in enumerate(output) if item.get("id") in unfinished] + head
        self._paced.clear()
        self._paced.extend(others)
        self._queue_first(head)

    # ---- handlers ------------------------------------------------------------------------------
    def _handler(self, action: StartHandler) -> Callable[[], Any]:
        number = self.observed.calls.index(action.call_id) + 1 if action.call_id in self.observed.calls else 0
        death = self._deaths.get(number)
        handler = action.tool.handler
        if death is None or not isinstance(handler, McpToolHandler):
            return super()._handler(action)
        self.observed.fired.append(death)
        dying = McpToolHandler(_DyingServer(handler.connection), handler.tool)
        return super()._handler(replace(action, tool=replace(action.tool, handler=dying)))


_SESSION_ACTS: dict[str, Callable[[PerturbedSession, Perturbation], None]] = {
    "reconnect": PerturbedSession._reconnect,
    "server_cancel": PerturbedSession._server_cancel,
    "late_arguments": PerturbedSession._late_arguments,
    "end_first": PerturbedSession._end_first,
    "no_cancellation": PerturbedSession._no_cancellation,
    "goes_away": PerturbedSession._go_away,
    "expiry": PerturbedSession._expiry,
}


class _DyingServer:
    """An MCP server's connection that dies while the call is in flight: the call fails as
    `relay.mcp.connection.McpConnection.call` fails it when its connection ends."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.name = connection.name

    async def call(self, tool: str, arguments: dict[str, Any], *, idempotency_key: str | None = None) -> Any:
        from relay.mcp.connection import McpUnavailable

        await asyncio.sleep(STEP / 2)   # the request is out; the server dies before it answers
        raise McpUnavailable(f"MCP server {self.name} was lost during the call (the server closed the connection); "
                             "the relay is reconnecting")


def _typed(frame: Any, dialect: Dialect) -> Any:
    event = decode(frame) if isinstance(frame, (str, bytes)) else None
    return wire.event_of(event, dialect) if event is not None else None   # type: ignore[arg-type]


def _split(frames: list[Any], response_id: str, dialect: Dialect) -> tuple[list[Any], list[Any], Any]:
    """The frames in flight of one response (its events and its items'), the others, and its
    `response.done` (None when it has been delivered)."""
    items: set[Any] = set()
    ours: list[Any] = []
    others: list[Any] = []
    done = None
    for frame in frames:
        typed = _typed(frame, dialect)
        mine = False
        if isinstance(typed, (wire.ResponseDone, wire.ResponseCreated)):
            mine = (typed.response or {}).get("id") == response_id
            if mine and isinstance(typed, wire.ResponseDone):
                done = typed
                items.update(item.get("id") for item in (typed.response or {}).get("output") or [])
        elif typed is not None and getattr(typed, "response_id", None) is not None:
            mine = typed.response_id == response_id
            if mine and isinstance(getattr(typed, "item", None), dict):
                items.add(typed.item.get("id"))
        (ours if mine else others).append(frame)
    # conversation.item.* of its items carry no response id
    ours += [frame for frame in others if isinstance(_typed(frame, dialect), (wire.ItemAdded, wire.ItemDone))
             and (_typed(frame, dialect).item or {}).get("id") in items]
    others = [frame for frame in others if frame not in ours]
    return ours, others, done


def _item_ids(frames: list[Any], kind: type, dialect: Dialect) -> set[Any]:
    """The ids of the items whose `kind` event (`response.output_item.added` or `.done`) is among
    `frames` (still in flight)."""
    return {typed.item.get("id") for typed in (_typed(frame, dialect) for frame in frames)
            if isinstance(typed, kind) and isinstance(typed.item, dict)}


__all__ = ["GO_AWAY_LEFT", "HANDLER_KINDS", "KINDS", "PerturbedSession", "QuirkKind", "SESSION_KINDS", "describe",
           "space"]
