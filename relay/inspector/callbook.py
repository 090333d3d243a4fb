"""The inspector's call book: the tool calls of a session as the model follows them (announced,
ready, answered, withdrawn), the responses that made and answered them, and what is derived from
them (handler and end-to-end times, calls the client never saw, the per-tool summary).

How a call ended is what the relay decided, never a guess from an output's words: a relay
recording carries each relay call's `tool_call` note (`Recording.tool_calls_decided()`; live, the
engine's notices), and its outcome is the call's. A call without one (a client's call, a plain
event log, a recording from before the notes) is read from the output's structure: an error
output, or the output item's status.

`CallBook` is a part of `relay.inspector.model.SessionModel`, which it builds into (`add_event`,
`touch`); the wire parsers call its methods through the model."""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any

from relay.engine.calls import CallOutcome
from relay.tools.render import error_in_output

# Where a call is before (or without) an outcome, in the model's `outcome` field.
PENDING, RUNNING, UNANSWERED = "pending", "running", "unanswered"


@dataclass
class TrackedCall:
    """A tool call as the model follows it: its event, and the times its latencies come from."""

    event: dict[str, Any]
    ready: float | None = None
    output_t: float | None = None
    answer_response: str | None = None
    seen_by_client: bool = False


@dataclass
class TrackedResponse:
    """A response (an OpenAI response, a Gemini model turn): its event, when it first spoke, and
    the calls it made."""

    event: dict[str, Any]
    first_output: float | None = None
    call_ids: list[str] = field(default_factory=list)


class CallBook:
    """The calls and responses of the model: a part of `SessionModel`, whose `__init__` calls
    `_init_call_book`, and whose events it builds into (`add_event`, `touch`, `events`)."""

    # the model's, read here
    kind: str
    relay_tools: set[str]
    events: dict[str, dict[str, Any]]
    _has_client: bool
    _dirty: set[str]

    def _init_call_book(self) -> None:
        self.calls: dict[str, TrackedCall] = {}
        self.responses: dict[str, TrackedResponse] = {}
        self.decided: dict[str, str] = {}               # the relay's outcome of each of its calls
        self._unanswered_outputs: list[str] = []        # calls whose output awaits a response

    def call_event(self, call_id: str) -> dict[str, Any] | None:
        call = self.calls.get(call_id)
        return call.event if call is not None else None

    def call_decided(self, fields: dict[str, Any]) -> None:
        """The relay's `tool_call` note of a call: its outcome is the call's, once the call is
        answered (until then the model shows where the call is)."""
        call_id, outcome = fields.get("call_id"), fields.get("outcome")
        if not isinstance(call_id, str) or not isinstance(outcome, str) or not outcome:
            return
        self.decided[call_id] = str(outcome)
        call = self.calls.get(call_id)
        if call is not None and call.event["output"] is not None:
            self._set_outcome(call.event, self.decided[call_id])

    def _set_outcome(self, event: dict[str, Any], outcome: str) -> None:
        if event["outcome"] != outcome:
            event["outcome"] = outcome
            self.touch(event)

    def outputs_answered_by(self, response_id: str) -> None:
        """A response in the conversation began: it answers the outputs sent since the last one."""
        for call_id in self._unanswered_outputs:
            call = self.calls.get(call_id)
            if call is not None and call.answer_response is None:
                call.answer_response = response_id
                call.event["answered_by"] = response_id
                self.touch(call.event)
        self._unanswered_outputs = []

    def track_call(self, t: float, call_id: Any, name: Any, response_id: Any, index: int) -> TrackedCall | None:
        """The call `call_id` (announced now if it is new), with what this frame says of it."""
        if not isinstance(call_id, str) or not call_id:
            return None
        call = self.calls.get(call_id)
        if call is None:
            name = name if isinstance(name, str) else ""
            owner = "relay" if name in self.relay_tools else ("client" if self.kind == "relay" else "application")
            event = self.add_event(f"call:{call_id}", "calls", "call", t, name or "(unnamed call)",
                                   call_id=call_id, name=name, arguments="", output=None, status=None,
                                   outcome=PENDING, owner=owner,
                                   response_id=response_id if isinstance(response_id, str) else None,
                                   output_item_id=None, answered_by=None, handler_ms=None, end_to_end_ms=None,
                                   ready_t=None, output_t=None, answers=[])
            call = TrackedCall(event)
            self.calls[call_id] = call
            response = self.responses.get(str(response_id))
            if response is not None:
                response.call_ids.append(call_id)
                response.event.setdefault("call_ids", []).append(call_id)
        event = call.event
        if isinstance(name, str) and name and not event["name"]:
            event["name"] = event["label"] = name
            if name in self.relay_tools:
                event["owner"] = "relay"
        if isinstance(response_id, str) and event["response_id"] is None:
            event["response_id"] = response_id
        self.touch(event, index)
        return call

    def call_ready(self, t: float, call_id: Any, arguments: Any, index: int) -> None:
        """The call's arguments are complete: it may run."""
        call = self.calls.get(str(call_id))
        if call is None:
            return
        if isinstance(arguments, str) and arguments:
            call.event["arguments"] = arguments
        if call.ready is None:
            call.ready = t
            call.event["ready_t"] = round(t, 6)
            if call.event["outcome"] == PENDING:
                call.event["outcome"] = RUNNING
        self.touch(call.event, index)

    def call_output(self, call: TrackedCall, t: float, output: Any, status: Any, item_id: Any, index: int) -> None:
        """An answer to the call went up (the first one is its output, and its handler time)."""
        event = call.event
        text = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
        event["answers"].append({"t": round(t, 6), "output": text, "status": status})
        if event["output"] is not None:
            self.touch(event, index)
            return
        event["output"] = text
        event["status"] = status if isinstance(status, str) else None
        event["output_item_id"] = item_id if isinstance(item_id, str) else None
        event["t1"] = event["output_t"] = round(t, 6)
        call.output_t = t
        start = call.ready if call.ready is not None else event["t0"]
        event["handler_ms"] = round((t - start) * 1000, 3)
        event["outcome"] = self.decided.get(event["call_id"]) or _outcome_of_output(text, status)
        self._unanswered_outputs.append(event["call_id"])
        self.touch(event, index)

    def client_answered(self, call: TrackedCall, index: int) -> bool:
        """A client's answer to `call` seen on its way to the relay: the call is the client's
        unless it is a relay tool's. True when the answer that counts is its forward (a relay
        recording: relay>upstream); False when this is the one (a plain event log)."""
        event = call.event
        event["owner"] = "client" if event["name"] not in self.relay_tools else "relay"
        if self.kind != "relay":
            return False
        self.touch(event, index)
        return True

    def call_cancelled(self, call: TrackedCall, t: float, reason: str, index: int) -> None:
        """The server withdrew the call; unanswered, it ends cancelled."""
        event = call.event
        if event["output"] is None:
            event["outcome"] = CallOutcome.CANCELLED.value
            event["skip_reason"] = reason
            event["t1"] = round(t, 6)
        self.touch(event, index)

    def _calls_finished(self) -> None:
        """The recording is over: a call still waiting for its output never got one."""
        for call in self.calls.values():
            if call.event["outcome"] in (PENDING, RUNNING):
                call.event["outcome"] = UNANSWERED
                self.touch(call.event)

    def _refresh_calls(self) -> None:
        """Derived facts that depend on frames seen later: outcomes the relay decided (a wire
        parser may have read the output first), end-to-end times, whether the client saw it."""
        hiding = self._has_client and self.kind == "relay"
        for call in self.calls.values():
            event = call.event
            decided = self.decided.get(event["call_id"])
            if decided is not None and event["output"] is not None:
                self._set_outcome(event, decided)
            answer = self.responses.get(str(call.answer_response)) if call.answer_response else None
            start = call.ready if call.ready is not None else event["t0"]
            if answer is not None:
                reached = answer.first_output if answer.first_output is not None else None
                end_to_end = None if reached is None else round((reached - start) * 1000, 3)
                if end_to_end != event["end_to_end_ms"]:
                    event["end_to_end_ms"] = end_to_end
                    self._dirty.add(event["id"])
            # the call's own fact, shown on its bar: a lane of its own would repeat the calls lane
            hidden = hiding and event["owner"] == "relay" and not call.seen_by_client
            if event.get("hidden") != hidden:
                event["hidden"] = hidden
                self._dirty.add(event["id"])

    def failed_calls(self) -> int:
        return sum(1 for call in self.calls.values() if CallOutcome.means_failure(call.event["outcome"]))

    def tools_summary(self) -> dict[str, dict[str, Any]]:
        """Per tool: its calls, how many failed (`CallOutcome.failed`), how many were never
        answered, and the median and longest handler time."""
        tools: dict[str, dict[str, Any]] = {}
        for call in self.calls.values():
            event = call.event
            entry = tools.setdefault(event["name"] or "(unnamed)", {"calls": 0, "errors": 0, "unanswered": 0,
                                                                   "latencies": []})
            entry["calls"] += 1
            if CallOutcome.means_failure(event["outcome"]):
                entry["errors"] += 1
            if event["outcome"] in (UNANSWERED, PENDING, RUNNING):
                entry["unanswered"] += 1
            if event["handler_ms"] is not None:
                entry["latencies"].append(event["handler_ms"])
        for entry in tools.values():
            latencies = entry.pop("latencies")
            entry["p50_ms"] = round(statistics.median(latencies), 3) if latencies else None
            entry["max_ms"] = round(max(latencies), 3) if latencies else None
        return dict(sorted(tools.items()))


def _outcome_of_output(output: str, status: Any) -> str:
    """The outcome an output shows by its structure, for a call the relay did not decide: an
    error output (relay.tools.render's shape) is an error; otherwise the output item's status
    says (`ok` when it completed)."""
    if error_in_output(output)[0]:
        return CallOutcome.ERROR.value
    return CallOutcome.OK.value if status in (None, "completed") else str(status)
