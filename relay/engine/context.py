"""What one session's engine and its helpers share, and the only way the helpers act.

The engine builds one context per session and sets `now` and `source` at each input. A helper
(`hiding.ClientView`, `injection.Injector`, `watching.CallWatcher`, `turns.Turns`) is given the
context and uses nothing else of the engine. What it may do: make ids, send a frame upstream or
to the client, emit a notice, record an anomaly, tell the client what the relay refused, and
report a call's facts to the core's rules (`CallRules`). What it may know: the time of the input,
the session's configuration, tools and dialect, the conversation and the call book (which the
helpers that translate the wire write: `Turns` its records, `CallWatcher` new calls, their
arguments and their one step of their own, to `streaming`), whether the upstream is connected
and the session closed; for the OpenAI family (`OpenAIContext`) also the sequencer (its questions
and requests) and whose each item is (`ItemOrigins`). The OpenAI family's context reads a frame
into its typed event (`relay.dialects.items`) and writes typed commands, both through the
family's codec (`dialect.codec`: the OpenAI family's is `relay.dialects.openai_codec`), in the
names and shapes of the session's variant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from enum import StrEnum
from typing import Any, Callable, Literal

from relay.dialects import items as wire
from relay.dialects.items import ItemCodec
from relay.dialects.jsontext import compact_json
from relay.engine.actions import Action, Notice, Remember, SendClient, SendUpstream
from relay.engine.calls import CallEntry, CallLedger, CallState, Owner
from relay.engine.records import CallRecord, Phase, idempotency_key
from relay.engine.conversation import Conversation, ItemOrigins, ResponseRecord
from relay.engine.limits import LIMIT_CODE, MAX_ANOMALIES_KEPT
from relay.engine.sequencer import Sequencer
from relay.tools import ToolRegistry

_OPEN = frozenset({CallState.ANNOUNCED, CallState.STREAMING, CallState.READY, CallState.RUNNING, CallState.FINISHED})
"""A relay call's states before its answer is sent."""


class Source(StrEnum):
    """Where the input an engine handles came from; an anomaly's notice records the value."""

    UPSTREAM = "upstream"
    CLIENT = "client"
    HANDLER = "handler"
    TIMER = "timer"


@dataclass(frozen=True, slots=True)
class Anomaly:
    at: float
    message: str
    event_type: str | None = None
    source: Source = Source.UPSTREAM
    internal: bool = False   # the engine's own failure (a bug), not something odd in the input


@dataclass(frozen=True, slots=True)
class CallRules:
    """The core's rules of a call's life, as a helper reports to them what the wire said; each
    makes its step through the call book (`CallLedger.move`)."""

    owner_of: Callable[..., Owner]               # who answers a new call of a name
    complete: Callable[..., None]                # the model finished the call: ready (and run) or complete
    skip: Callable[[CallEntry, str], None]       # it will never be answered (and why)
    client_answered: Callable[[CallEntry], None]  # the client's answer to its own call was seen
    output_sent: Callable[[CallEntry], None]     # a relay call's output went upstream: answered


# the call steps a store keeps, as the phase of their record
_PHASES = {CallState.READY: Phase.READY, CallState.RUNNING: Phase.STARTED, CallState.FINISHED: Phase.DECIDED,
           CallState.ANSWERED: Phase.SENT, CallState.SKIPPED: Phase.SKIPPED}

# what json.dumps(event, ensure_ascii=False, separators=(",", ":")) writes, without building an
# encoder for every frame, and always encodable (a lone surrogate as its escape)
_compact = compact_json


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


class SessionContext:
    """One session's clock, ids and outbox, and the state its rules read."""

    def __init__(self, *, config: Any, tools: ToolRegistry, dialect: Any, id_prefix: str, rules: CallRules,
                 session_id: str = "session") -> None:
        self.session_id = session_id
        self.config = config
        self.tools = tools
        self.dialect = dialect
        self.rules = rules
        self.anomalies: list[Anomaly] = []   # the first MAX_ANOMALIES_KEPT
        self.anomalies_dropped = 0           # and how many came after
        self.limits_reached: set[str] = set()   # the limits a peer reached (each logged once)
        self.conversation = Conversation(self.anomaly)
        self.ledger = CallLedger(strict=config.strict, on_refused=self.refused_step, on_step=self._stepped)
        self.now = 0.0                     # the time of the input being handled
        self.source = Source.UPSTREAM      # where the input being handled came from
        self.out: list[Action] = []        # what the engine answers to it, in order
        self.upstream_connected = True
        self.closed = False
        self.id_prefix = id_prefix[:16]
        self._counter = 0
        # what an engine adds to a call's record beyond the call book's (GPT-Live: its delegation)
        self.record_extras: Callable[[CallEntry], dict[str, Any]] | None = None

    def new_id(self, kind: str) -> str:
        """A new id for something the relay makes: `e` an event, `i` an item, `r` a response."""
        self._counter += 1
        return f"{self.id_prefix}_{kind}{self._counter}"

    def new_event_id(self) -> str:
        return self.new_id("e")

    def emit(self, action: Action) -> None:
        self.out.append(action)

    def send_upstream(self, event: dict[str, Any]) -> None:
        self.out.append(SendUpstream(_compact(event)))

    def send_client(self, event: dict[str, Any]) -> None:
        """To the client, when there is one (proxy mode)."""
        if self.config.has_client:
            self.out.append(SendClient(_compact(event)))

    def notice(self, kind: str, fields: dict[str, Any]) -> None:
        self.out.append(Notice(kind, fields))

    def _stepped(self, entry: CallEntry) -> None:
        """A relay call made a step the store keeps (`_PHASES`): its record, written ahead of what
        the step leads to (the handler's start, the output's send, the follow-up). A call gets its
        idempotency key as it becomes ready. Abandoned calls keep their last record: owed still."""
        phase = _PHASES.get(entry.state)
        if phase is None or entry.owner is not Owner.RELAY:
            return
        if phase is Phase.READY:
            entry.idempotency_key = idempotency_key(self.session_id, entry.call_id, entry.arguments)
        self.remember(entry, phase)

    def remember(self, entry: CallEntry, phase: Phase, *, follow_up: bool = False) -> None:
        """A relay call's record, ahead of the actions it guards (`Remember`)."""
        entry.recorded = (phase, follow_up)
        self.out.append(Remember(CallRecord(
            session_id=self.session_id, call_id=entry.call_id, name=entry.name, phase=phase, at=self.now,
            arguments=entry.arguments, idempotency_key=entry.idempotency_key, response_id=entry.response_id,
            output=entry.output, outcome=None if entry.outcome is None else str(entry.outcome),
            follow_up=follow_up, item_id=entry.output_item_id or "", delivered=entry.delivered,
            **(self.record_extras(entry) if self.record_extras is not None else {}))))

    def anomaly(self, message: str, event_type: str | None, *, internal: bool = False) -> None:
        """Something odd in the input (or a refused step; `internal`: the engine's own failure):
        kept, and told as a notice."""
        if len(self.anomalies) < MAX_ANOMALIES_KEPT:
            self.anomalies.append(Anomaly(self.now, message, event_type, self.source, internal))
        else:
            self.anomalies_dropped += 1
        self.out.append(Notice("anomaly", {"message": message, "event_type": event_type, "source": self.source,
                                           "internal": internal}))

    def refused_step(self, message: str) -> None:
        """A step a lifecycle table refused (outside strict mode): an anomaly."""
        self.anomaly(message, None)

    def client_error(self, code: str, message: str, client_event_id: Any = None, param: str | None = None) -> None:
        """Tell the client what the relay refused: the dialect's `error` event where its protocol
        has one (Gemini Live has none: the edge closes with a reason instead), and a notice."""
        if self.config.has_client:
            frame = self._client_error_frame(code, message, param=param, client_event_id=client_event_id)
            if frame is not None:
                self.out.append(SendClient(frame))
        self.out.append(Notice("client_error", {"code": code, "message": message}))

    def _client_error_frame(self, code: str, message: str, **details: Any) -> str | None:
        """The dialect's `error` event, as a frame (None: its protocol has none)."""
        event = self.dialect.client_error_event("", code, message, **details)
        if event is None:
            return None
        event["event_id"] = self.new_id("e")
        return _compact(event)

    def limit_reached(self, what: str, limit: str, client_event_id: Any = None) -> None:
        """The client's event would make the session keep more than `relay.engine.limits` allows
        (`what`: what is kept, `limit`: how much of it at most, in words): refused with an `error`
        event, and the first time in a session for `what`, a `limit` notice (logged)."""
        self.client_error(LIMIT_CODE, f"refused: the relay keeps at most {limit} per session ({what}); "
                          "wait until the upstream has answered those", client_event_id)
        if what not in self.limits_reached:
            self.limits_reached.add(what)
            self.out.append(Notice("limit", {"what": what, "limit": limit}))

    def response_notice(self, response: ResponseRecord, phase: Literal["created", "done"], made_by: Any = None) -> None:
        """A `response` notice: a response began or ended (what traces hang tool calls on).
        `made_by`: the relay's create that made it (its `event_id` and `purpose`)."""
        fields: dict[str, Any] = {"phase": phase, "response_id": response.id, "creator": response.creator}
        if made_by is not None:
            fields["event_id"] = made_by.event_id
            fields["purpose"] = made_by.purpose
        if phase == "done":
            fields["status"] = response.status
            fields["reason"] = response.reason
        self.out.append(Notice("response", fields))

    def decode(self, frame: str | bytes) -> dict[str, Any] | None:
        """The frame as a JSON object, or None with the reason told (`bad_frame`)."""
        try:
            message = json.loads(frame)
        except (ValueError, RecursionError) as exc:   # bad UTF-8 in a binary frame is a ValueError
            self.bad_frame("invalid_json", f"frame is not valid JSON: {_short(exc)}")
            return None
        if not isinstance(message, dict):
            self.bad_frame("invalid_event", f"frame is a JSON {type(message).__name__}, not an object")
            return None
        return message

    def bad_frame(self, code: str, message: str) -> None:
        """A frame the engine cannot read: an anomaly."""
        self.anomaly(message, None)

    def forget_old(self) -> None:
        """Bounded history (EngineConfig.history_limit): called at the end of each turn. What a
        call still open needs stays, whatever its age: its item, and its response with that
        response's items (its output goes in after them, where it would go with no limit); and a
        call of a response still remembered (delivered again, it is known)."""
        limit = self.config.history_limit
        if limit is not None:
            self.conversation.forget_old(limit, self._in_use())
            self.ledger.forget_old(limit, self.conversation.responses)

    def _in_use(self) -> set[str]:
        responses = self.conversation.responses
        in_use: set[str] = set()
        for entry in self.ledger:
            if entry.state not in _OPEN:
                continue
            if entry.item_id is not None:
                in_use.add(entry.item_id)
            response = responses.get(entry.response_id or "")
            if response is not None:
                in_use.add(response.id)
                in_use.update(response.output_item_ids)
        return in_use


class OpenAIContext(SessionContext):
    """An OpenAI-family session's context: with the sequencer, which decides when a
    `response.create` goes up, and whose each item is."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.codec: ItemCodec = self.dialect.codec   # the family's: every frame read and written through it
        self.sequencer = Sequencer(new_event_id=self.new_event_id, build_create=partial(self.codec.response_create, self.dialect),
                                   strict=self.config.strict, on_refused=self.refused_step,
                                   fillers_in_conversation=self.config.fillers_in_conversation,
                                   calls_open=self._relay_calls_open)
        self.origins = ItemOrigins()

    def _relay_calls_open(self) -> bool:
        """Whether a relay call of a response that ended is still unanswered (its item not yet
        complete, its handler running, or its output not yet sent): the sequencer's follow-ups
        wait for it, so that one `response.create` goes up after every output."""
        responses = self.conversation.responses
        for entry in self.ledger:
            if entry.owner is Owner.RELAY and entry.state in _OPEN:
                response = responses.get(entry.response_id or "")
                if response is not None and response.done:
                    return True
        return False

    def bad_frame(self, code: str, message: str) -> None:
        """A frame the engine cannot read: the client is told of its own (an `error` event)."""
        if self.source is Source.CLIENT:
            self.client_error(code, message)
        else:
            self.anomaly(message, None)

    def read(self, frame: str) -> wire.Event | wire.Unknown | None:
        """The frame as its typed event, or None with the reason recorded. A frame the codec does
        not read (not JSON, not an object, no string `type`, a type outside the family's set, or
        JSON the codec refuses and `json` takes) is looked at again as JSON, to tell which: an
        event of another type is an `Unknown` (forwarded as it came)."""
        event = self.codec.decode(frame, self.dialect)
        if not isinstance(event, wire.Unknown):
            return event
        data = self.decode(frame)
        if data is None:
            return None
        if not isinstance(data.get("type"), str):
            self.bad_frame("missing_type", "event has no string `type` field")
            return None
        return self.codec.event_of(data, self.dialect)

    def part(self, event: wire.Event, value: Any, missing: str, *, with_id: bool = False) -> dict[str, Any] | None:
        """The object an event carries (`value`; with a string `id` if `with_id`), or None with
        "<type> without <missing>" recorded."""
        if isinstance(value, dict) and (not with_id or isinstance(value.get("id"), str)):
            return value
        event_type = wire.wire_type(event)
        self.anomaly(f"{event_type} without {missing}", event_type)
        return None

    def write_upstream(self, command: wire.Event) -> None:
        """A command upstream, in the names and shapes of the session's variant (the codec's)."""
        self.out.append(SendUpstream(self.codec.encode(command, self.dialect)))

    def write_client(self, event: wire.Event) -> None:
        """An event to the client, when there is one (proxy mode), as the codec writes it."""
        if self.config.has_client:
            self.out.append(SendClient(self.codec.encode(event, self.dialect)))

    def send_tagged(self, command: wire.Event, what: str | None = None, call_id: str | None = None) -> None:
        """Send one of the relay's own commands upstream, remembered (as `what`, by default its
        name, about `call_id`) so that an error the upstream aims at it is known for the relay's."""
        self.sequencer.remember(command.event_id, what or wire.wire_type(command), call_id)
        self.write_upstream(command)

    def _client_error_frame(self, code: str, message: str, **details: Any) -> str | None:
        codec = self.codec
        return codec.encode(codec.client_error(self.dialect, self.new_id("e"), code, message, **details), self.dialect)
