"""The backends a GPT-Live mock session delegates to: a Responses backend (its nested
`response.event` stream, the batch of function calls it waits on, the continuation after every
output and one `response.create`) and a Decision backend (`decision.event` answers to the
configured questions, `decision.item.*` inputs). `relay.mock.live.LiveMockSession` owns one
`Backend` and hands it the commands that drive it; every event it writes is the codec's
(relay/dialects/live.py, relay/dialects/responses_stream.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from relay.dialects import live as wire
from relay.mock.live_config import LiveRefusal
from relay.mock.requests import Emit
from relay.mock.script import ToolCall, warn_not_offered
from relay.mock.wire import new_call_id, new_id

if TYPE_CHECKING:
    from relay.mock.script import MockScript, Reply

_DECISION_ITEMS = ("message", wire.FUNCTION_CALL, wire.FUNCTION_CALL_OUTPUT, "custom_tool_call", "custom_tool_call_output")
_ROLES = ("user", "developer", "system", "assistant")


@dataclass(frozen=True)
class LiveOptions:
    """How a Live mock session behaves where the service leaves room: `ack_delay_ms`, how far
    past the timeline an append is placed (a delegation config's `acknowledgement_delay_ms`
    wins); `usage_every_ms`, the timeline between `session.usage.updated`; `expires_in_s`, the
    `expires_at` it reports; `decision_answers`, each decision question's answer by name (a
    predicate's probability, a choice's value, a score's value)."""

    ack_delay_ms: int = 600
    usage_every_ms: int = 15000
    expires_in_s: int = 1800
    decision_answers: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class LiveDelegation:
    """A delegation the mock model made: its id, mode, where on the timeline, the scripted calls'
    names, and the results a client gave it (acknowledged commentary)."""

    id: str
    target: str
    offset_ms: int
    names: tuple[str, ...]
    response_id: str | None = None
    results: list[str] = field(default_factory=list)


class Delegator(Protocol):
    """What a backend reads of the Live session it serves (`relay.mock.live.LiveMockSession`)."""

    id: str
    config: dict[str, Any] | None
    options: LiveOptions
    script: MockScript
    items: list[dict[str, Any]]
    wall: Callable[[], float]

    @property
    def mode(self) -> str: ...

    def next_reply(self) -> Reply: ...

    def pieces(self, text: str) -> list[str]: ...

    def speak(self, text: str) -> None: ...


@dataclass
class BackendCall:
    """A function call of a Responses backend response, and the output it got."""

    call_id: str
    name: str
    arguments: str
    delegation_id: str | None
    output: str | None = None


class Backend:
    """The session's Responses or Decision backend (`session.mode` says which)."""

    def __init__(self, session: Delegator) -> None:
        self.session = session
        self.batch: dict[str, BackendCall] = {}   # the calls the next create continues (every delegation's)
        self.batch_delegation: str | None = None
        self.calls: dict[str, BackendCall] = {}
        self.creates = 0                          # response.create's that continued a batch
        self.decision_items: dict[str, dict[str, Any]] = {}
        self._decision_event_ids: set[str] = set()
        self._sequence = 0
        self._warned: set[str] = set()

    def call_names(self) -> dict[str, str]:
        return {call.call_id: call.name for call in self.calls.values()}

    # -- a delegation --------------------------------------------------------------------------
    def delegated(self, delegation: LiveDelegation, calls: tuple[ToolCall, ...]) -> list[Emit]:
        if delegation.target == "responses":
            return self._run_calls(delegation.id, delegation.response_id or new_id("resp"), calls)
        if delegation.target == "decisions":
            return [self._decision(delegation.id)]
        return []

    def command(self, event: wire.Event) -> list[Emit]:
        if isinstance(event, (wire.ResponseItemCreate, wire.ResponseCreate)):
            if self.session.mode != "responses":
                raise LiveRefusal("invalid_request_error", f"{wire.wire_type(event)} requires Responses delegation.",
                                  "type")
            return self._item(event) if isinstance(event, wire.ResponseItemCreate) else self._create(event)
        if self.session.mode != "decisions":
            raise LiveRefusal("invalid_request_error", f"{wire.wire_type(event)} requires Decisions delegation.", "type")
        if isinstance(event, wire.DecisionCreate):
            if not isinstance(event.event_id, str) or event.event_id in self._decision_event_ids:
                raise LiveRefusal("invalid_value", "decision.create needs an event_id not used before.", "event_id")
            self._decision_event_ids.add(event.event_id)
            return [self._decision(None)]
        if isinstance(event, wire.DecisionItemCreate):
            return [self._decision_item(event)]
        assert isinstance(event, wire.DecisionItemDelete)
        if self.decision_items.pop(event.item_id, None) is None:
            raise LiveRefusal("invalid_value", f"No decision item {event.item_id!r}.", "item_id")
        return [self._emit(wire.DecisionItemDeleted(event_id=new_id("event"), client_event_id=event.event_id,
                                                    item_id=event.item_id))]

    # -- Responses -----------------------------------------------------------------------------
    def _run_calls(self, delegation_id: str | None, response_id: str, calls: tuple[ToolCall, ...]) -> list[Emit]:
        """A backend response that makes `calls`: created, each call's item added and done,
        completed with `output: []` (the calls are read from the items only)."""
        offered = self._offered()
        made = []
        for call in calls:
            if self.session.script.options.strict_tools and call.name not in offered:
                warn_not_offered(self._warned, call.name, offered, self.session.id)
                continue
            made.append(BackendCall(call.call_id or new_call_id(), call.name, call.arguments_text(), delegation_id))
        events: list[wire.BackendEvent] = [wire.BackendCreated(response=self._snapshot(response_id, "in_progress"))]
        for index, call in enumerate(made):
            item = {"type": wire.FUNCTION_CALL, "id": new_id("fc"), "call_id": call.call_id, "name": call.name,
                    "arguments": call.arguments}
            events += [wire.BackendItemAdded(output_index=index, item={**item, "arguments": "", "status": "in_progress"}),
                       wire.BackendArgumentsDone(item_id=item["id"], output_index=index, name=call.name,
                                                 arguments=call.arguments),
                       wire.BackendItemDone(output_index=index, item={**item, "status": "completed"})]
            self.calls[call.call_id] = call
            self.session.items.append({"type": wire.FUNCTION_CALL, "call_id": call.call_id, "name": call.name,
                                       "arguments": call.arguments})
        events.append(wire.BackendCompleted(response=self._snapshot(response_id, "completed")))
        # the calls a create is to continue: this response's, and any an earlier delegation's
        # response made that no create continued yet (a create names no delegation)
        self.batch.update((call.call_id, call) for call in made)
        self.batch_delegation = delegation_id
        return [self._envelope(delegation_id, event) for event in events]

    def _item(self, event: wire.ResponseItemCreate) -> list[Emit]:
        item = event.item
        if not isinstance(item, dict):
            raise LiveRefusal("invalid_type", "Invalid type for 'item': expected an object.", "item")
        if item.get("type") == wire.FUNCTION_CALL_OUTPUT:
            call = self.batch.get(item.get("call_id"))   # type: ignore[arg-type]
            if call is None:
                raise LiveRefusal("invalid_value", f"No pending function call with call_id {item.get('call_id')!r}.",
                                  "item.call_id")
            if call.output is not None:
                raise LiveRefusal("invalid_value", f"The function call {call.call_id} already has its output.",
                                  "item.call_id")
            if not isinstance(item.get("output"), (str, list)):
                raise LiveRefusal("invalid_type", "Invalid type for 'item.output': expected a string.", "item.output")
            call.output = item["output"] if isinstance(item["output"], str) else str(item["output"])
            self.session.items.append({"type": wire.FUNCTION_CALL_OUTPUT, "call_id": call.call_id,
                                       "output": call.output})
        elif item.get("type", "message") == "message" and item.get("role") in _ROLES:
            self.session.items.append(copy.deepcopy(item))
        else:
            raise LiveRefusal("invalid_value", f"Invalid item type {item.get('type')!r}.", "item.type")
        return []   # no acknowledgement on success

    def _create(self, event: wire.ResponseCreate) -> list[Emit]:
        missing = [call.call_id for call in self.batch.values() if call.output is None]
        if missing:
            raise LiveRefusal("invalid_request_error", "A partial batch is rejected: response.create needs a "
                              f"function_call_output for every call of the response (missing: {', '.join(missing)}).",
                              None)
        delegation_id = self.batch_delegation
        if self.batch:
            self.creates += 1
        self.batch, self.batch_delegation = {}, None
        reply = self.session.next_reply()
        response_id = new_id("resp")
        if reply.calls:
            return self._run_calls(delegation_id, response_id, reply.calls)
        text = reply.say or ""
        message = {"type": "message", "id": new_id("msg"), "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]}
        events: list[wire.BackendEvent] = [
            wire.BackendCreated(response=self._snapshot(response_id, "in_progress")),
            wire.BackendItemAdded(output_index=0, item={**message, "status": "in_progress", "content": []})]
        events += [wire.BackendTextDelta(item_id=message["id"], output_index=0, content_index=0, delta=piece, logprobs=[])
                   for piece in self.session.pieces(text)]
        events += [wire.BackendTextDone(item_id=message["id"], output_index=0, content_index=0, text=text, logprobs=[]),
                   wire.BackendItemDone(output_index=0, item=message),
                   wire.BackendCompleted(response=self._snapshot(response_id, "completed"))]
        if text:
            self.session.speak(text)   # the voice model says the continuation's text
        return [self._envelope(delegation_id, event) for event in events]

    def _offered(self) -> list[str]:
        settings = (self.session.config or {}).get("delegation", {}).get("responses") or {}
        return [tool["name"] for tool in settings.get("tools") or [] if tool.get("type") == "function"]

    def _snapshot(self, response_id: str, status: str) -> dict[str, Any]:
        """A forwarded snapshot: `output`, `tools` empty and no instructions, even with calls pending."""
        settings = (self.session.config or {}).get("delegation", {}).get("responses") or {}
        return {"id": response_id, "object": "response", "created_at": int(self.session.wall()),
                "model": settings.get("model", "gpt-5"), "status": status, "output": [],
                "parallel_tool_calls": settings.get("parallel_tool_calls", True),
                "tool_choice": settings.get("tool_choice", "auto"), "tools": [], "instructions": None}

    def _envelope(self, delegation_id: str | None, event: wire.BackendEvent) -> Emit:
        event.sequence_number = self._sequence
        self._sequence += 1
        return self._emit(wire.ResponseEnvelope(event_id=new_id("event"), delegation_id=delegation_id, event=event))

    # -- Decisions -----------------------------------------------------------------------------
    def transcribed(self, delta: wire.InputTranscriptDelta | wire.OutputTranscriptDelta) -> list[Emit]:
        """A transcript delta fires the session's trigger for its event type (in any delegation
        mode): a `decision.event` naming the delta, with no delegation."""
        kind = wire.wire_type(delta)
        fired = []
        for trigger in (self.session.config or {}).get("triggers") or []:
            if isinstance(trigger, dict) and trigger.get("event_type") == kind:
                questions = (trigger.get("decisions") or {}).get("questions") or []
                fired.append(self._decision(None, questions, trigger_id=new_id("trig"), source_event_id=delta.event_id,
                                            source_event_type=kind))
        return fired

    def _decision(self, delegation_id: str | None, questions: list[Any] | None = None, **trigger: Any) -> Emit:
        """The Decision API's answers to `questions` (the delegation config's when None), for a
        delegation, a `decision.create` (no delegation) or a trigger (`trigger`: its fields)."""
        settings = (self.session.config or {}).get("delegation", {}).get("decisions") or {}
        asked = settings.get("questions") or [] if questions is None else questions
        answers = [self._answer(question) for question in asked]
        usage = {"input_tokens": 0, "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 0},
                 "output_tokens": len(answers), "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": len(answers)}
        decision = {"answers": answers, "model": settings.get("model", "gpt-5-mini"), "usage": usage}
        return self._emit(wire.DecisionEvent(event_id=new_id("event"), delegation_id=delegation_id,
                                             event=wire.DecisionCompleted(decision=decision), **trigger))

    def _answer(self, question: dict[str, Any]) -> dict[str, Any]:
        name = question.get("name")
        given = self.session.options.decision_answers.get(name) if name else None
        if question["type"] == "predicate":
            return {"type": "predicate", "name": name, "probability": float(given if given is not None else 0.5)}
        if question["type"] == "choice":
            values = [choice.get("value") for choice in question.get("choices") or []]
            chosen = given if given in values else (values[0] if values else "")
            return {"type": "choice", "name": name, "choice": chosen, "confidence": 1.0,
                    "probabilities": [{"value": value, "probability": 1.0 if value == chosen else 0.0}
                                      for value in values]}
        levels = question.get("levels") or []
        score = int(given) if isinstance(given, int) else 0
        return {"type": "score", "name": name, "score": float(score), "confidence": 1.0,
                "probabilities": [{"label": level.get("label", ""), "value": index,
                                   "probability": 1.0 if index == score else 0.0} for index, level in enumerate(levels)]}

    def _decision_item(self, event: wire.DecisionItemCreate) -> Emit:
        item = event.item
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind not in _DECISION_ITEMS or (kind == "message" and item.get("role") not in _ROLES):   # type: ignore[union-attr]
            raise LiveRefusal("invalid_value", f"Invalid decision item type {kind!r}.", "item.type")
        stored = {**copy.deepcopy(item), "id": item.get("id") or new_id("di")}   # type: ignore[union-attr]
        self.decision_items[stored["id"]] = stored
        return self._emit(wire.DecisionItemCreated(event_id=new_id("event"), client_event_id=event.event_id,
                                                   item=stored))

    def _emit(self, event: wire.Event) -> Emit:
        return Emit(wire.to_builtins(event))
