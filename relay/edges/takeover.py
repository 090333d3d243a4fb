"""What a replica does with a call it takes over from another (relay/edges/sideband.py runs it).

The old owner's ledger (its `CallRecord`s in the shared store) says how far each of its calls got.
A call whose output went up (`sent`, `follow_up`, `followed_up`) or that will never be answered
(`skipped`) is done with. One whose follow-up was owed (`follow_up`: recorded once its
response's outputs were in, and replaced by `followed_up` right before the relay's
`response.create` about it went up) is owed that follow-up still: the new owner's engine asks for
it once (`Adoption.follow_ups`, `OpenAIEngine.adopt_follow_ups`), unless a response about its
outputs is seen first (any response that begins in the conversation, or the old owner's
follow-up ending). Every other call is owed exactly one output, and the new owner's engine is
told of it as the response that made it: an out-of-band `response.created` / `response.done` pair listing the owed
calls' items (`Adoption.frames`, fed to the engine as the provider's own frames would be, so the
engine's call book takes them by its usual rules, and its output lands appended to the
conversation, answering the call by its `call_id`). When the engine then asks to start a handler
for such a call, the loop does what `Adoption.decision` says:

- `ready` (the handler never started): run it;
- `started` (it may have run, wholly or in part): run it again only if the tool says it is
  idempotent or takes the call's `IdempotencyKey` (the key is the same: the session is the call);
  otherwise answer it without running it, with an honest error ("interrupted; not retried");
- `decided` (its output was known, perhaps not sent): answer it with that output, without running it.

A GPT-Live session's calls (`adopt_live`) get the same decisions, with one difference: an answer
recorded as sent is done with, delivered or not. GPT-Live's wire has no id the provider would
refuse twice (an append's event id is only echoed, and a `response.item.create` is not even
acknowledged), so an answer sent again could be taken twice: the new owner never sends it again
(never twice), and counts it as `unconfirmed` when the provider had not shown it has it. Its owed
calls are told to the new engine as records (`Adoption.records`, `LiveEngine.adopt_records`),
not as frames: GPT-Live has no out-of-band response to list them in.

This is the one place the store's phases become a new owner's actions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from relay.dialects.openai import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, OPENAI, OpenAIFamily
from relay.dialects.openai_codec import ItemCreate, ResponseCreated, ResponseDone, decode, encode
from relay.engine import OpenAIEngine, Outcome, Remember
from relay.engine.records import CallRecord, Phase
from relay.tools import ToolRegistry, ToolResult
from relay.tools.render import error_in_output

NOT_RETRIED = ("interrupted: the relay that was running this tool stopped before it finished, "
               "and the tool is not idempotent; not retried")
_DONE = frozenset({Phase.SENT, Phase.FOLLOWED_UP, Phase.SKIPPED})
_SENT = frozenset({Phase.SENT, Phase.FOLLOW_UP, Phase.FOLLOWED_UP})
RUN, REFUSE, ANSWER, FOLLOW_UP = "run", "refuse", "answer", "follow_up"


@dataclass(frozen=True, slots=True)
class Decision:
    """What a taken-over call gets: `run` its handler, or `outcome` reported without running it
    (`refuse`: the error output; `answer`: the output the old owner had decided); or, its output
    being in, the `follow_up` the old owner owed."""

    how: str
    outcome: Outcome | None = None
    item_id: str = ""          # `answer` again: the output the old owner sent, never delivered, as that item
    followed_up: bool = False  # ... and its follow-up was recorded as gone with it


@dataclass
class Adoption:
    """The owed calls of a session taken over: the frames that tell the engine of them, what each
    gets, the answered calls whose follow-up is owed, and how many were already done."""

    frames: list[str] = field(default_factory=list)
    decisions: dict[str, Decision] = field(default_factory=dict)
    follow_ups: list[CallRecord] = field(default_factory=list)
    done: int = 0
    records: list[CallRecord] = field(default_factory=list)   # GPT-Live: the owed calls' records
    unconfirmed: int = 0   # GPT-Live: answers sent, never shown delivered, not sent again

    def counts(self) -> dict[str, int]:
        """How many owed calls are run again (`retried`, `ready` ones included), refused, answered,
        and how many answered calls get the follow-up their old owner owed (`followed_up`)."""
        found = {"retried": 0, "refused": 0, "answered": 0, "followed_up": len(self.follow_ups), "done": self.done,
                 "unconfirmed": self.unconfirmed}
        for decision in self.decisions.values():
            found[{RUN: "retried", REFUSE: "refused", ANSWER: "answered"}[decision.how]] += 1
        return found


class Handovers:
    """What one process's takeovers and handoffs did (what `/healthz` and the metrics report):
    calls taken over, offered to a peer (handoffs), leases lost, and the owed calls run again,
    refused or answered with a decided output."""

    def __init__(self) -> None:
        self.takeovers = 0
        self.handoffs = 0
        self.lost = 0
        self.calls = {"retried": 0, "refused": 0, "answered": 0, "followed_up": 0}
        self.handoff_seconds: list[float] = []   # offered to taken, per handoff (the latest 1000)
        self.on_count: Callable[[str, int], None] | None = None   # the metric: `Metrics.count_handover`

    def _count(self, kind: str, count: int = 1) -> None:
        if self.on_count is not None and count:
            self.on_count(kind, count)

    def handed_off(self, seconds: float) -> None:
        self.handoffs += 1
        self.handoff_seconds = [*self.handoff_seconds[-999:], seconds]
        self._count("handoff")

    def lease_lost(self) -> None:
        self.lost += 1
        self._count("lease_lost")

    def took_over(self, adoption: Adoption) -> None:
        self.takeovers += 1
        self._count("takeover")
        for kind, count in adoption.counts().items():
            if kind in self.calls:
                self.calls[kind] += count
                self._count(f"calls_{kind}", count)

    def as_fields(self) -> dict[str, int]:
        return {"takeovers": self.takeovers, "handoffs": self.handoffs, "leases_lost": self.lost,
                **{f"calls_{kind}_after_takeover": count for kind, count in self.calls.items()}}


def resend_if_lost(engine: object, call_id: str, decision: Decision) -> None:
    """A call answered without running whose output the old owner sent but the provider never
    echoed: the engine sends it again as that same item (the provider refuses it if it had it)."""
    if decision.item_id and isinstance(engine, OpenAIEngine):
        engine.injector.resend_as(call_id, decision.item_id, followed_up=decision.followed_up)


def may_run_again(tools: ToolRegistry, name: str) -> bool:
    """A started call may run again: its tool is idempotent or takes the idempotency key."""
    spec = tools.get(name)
    return spec is not None and (spec.idempotent or spec.key_parameter is not None)


def decide(record: CallRecord, tools: ToolRegistry, *, resend: bool = True) -> Decision | None:
    """What an owed call gets; None for a call that is done. `resend`: an output recorded sent
    and never delivered goes again as the same item (the provider refuses a duplicate)."""
    if resend and record.phase in _SENT and not record.delivered and record.item_id and record.output is not None:
        # marked sent, never echoed: perhaps lost with the old owner's socket. Sent again as the
        # same item, which the provider refuses if it has it (relay/engine/injection.py)
        return Decision(ANSWER, _outcome_of(record.output), item_id=record.item_id,
                        followed_up=record.phase is Phase.FOLLOWED_UP)
    if record.phase in _DONE:
        return None
    if record.phase is Phase.FOLLOW_UP:
        return Decision(FOLLOW_UP)
    if record.phase is Phase.READY:
        return Decision(RUN)
    if record.phase is Phase.DECIDED and record.output is not None:
        return Decision(ANSWER, _outcome_of(record.output, record.message))
    if may_run_again(tools, record.name):
        return Decision(RUN)
    return Decision(REFUSE, Outcome.returned(ToolResult(error=NOT_RETRIED)))


def _outcome_of(output: str, message: str | None = None) -> Outcome:
    """The outcome a recorded output says (an error output as the error it renders), with what
    it asked the model to say (a GPT-Live delegation's spoken message)."""
    is_error, error = error_in_output(output)
    if is_error:
        return Outcome.returned(ToolResult(error=error, message=message))
    return Outcome.returned(output if message is None else ToolResult(result=output, message=message))


def kept_records(actions: list[Any], decisions: dict[str, Decision]) -> list[Any]:
    """The actions of telling a new engine of its owed calls (`Adoption.frames`) without the
    `ready` and `started` records of the calls it answers without running them: a call refused or
    answered keeps its old record (started, decided, sent) until its answer is decided, so that a
    takeover in between never runs it as one that never started."""
    return [action for action in actions if not (
        isinstance(action, Remember) and action.record.phase in (Phase.READY, Phase.STARTED)
        and (decision := decisions.get(action.record.call_id)) is not None and decision.how != RUN)]


def adopt_live(records: list[CallRecord], tools: ToolRegistry) -> Adoption:
    """The adoption of a GPT-Live session's calls from its records: the owed ones as records for
    the new engine, the follow-ups owed, and the answers sent that are never sent again."""
    adoption = Adoption()
    for record in records:
        decision = decide(record, tools, resend=False)
        if decision is None:
            adoption.done += 1
            adoption.unconfirmed += record.phase in _SENT and not record.delivered
        elif decision.how == FOLLOW_UP:
            adoption.follow_ups.append(record)
            adoption.unconfirmed += not record.delivered
        else:
            adoption.decisions[record.call_id] = decision
            adoption.records.append(record)
    return adoption


def adopt(records: list[CallRecord], tools: ToolRegistry, *, family: OpenAIFamily = OPENAI,
          id_prefix: str = "adopted") -> Adoption:
    """The adoption of a session's calls from its records (as `CallStore.session_records` gives
    them): one out-of-band response per original response, listing its owed calls in order."""
    adoption = Adoption()
    by_response: dict[str, list[CallRecord]] = {}
    for record in records:
        decision = decide(record, tools)
        if decision is None:
            adoption.done += 1
            continue
        if decision.how == FOLLOW_UP:
            adoption.follow_ups.append(record)
            continue
        adoption.decisions[record.call_id] = decision
        by_response.setdefault(record.response_id or f"{id_prefix}_r_{record.call_id}", []).append(record)
    for response_id, owed in by_response.items():
        adoption.frames.extend(_response_frames(response_id, owed, family, id_prefix))
    return adoption


def _response_frames(response_id: str, owed: list[CallRecord], family: OpenAIFamily,
                     id_prefix: str) -> list[str]:
    items: list[dict[str, Any]] = [
        {"type": FUNCTION_CALL, "id": f"{id_prefix}_i_{record.call_id}", "object": "realtime.item",
         "status": "completed", "call_id": record.call_id, "name": record.name, "arguments": record.arguments}
        for record in owed]
    response: dict[str, Any] = {"object": "realtime.response", "id": response_id, "conversation_id": None,
                                "metadata": None}
    return [encode(ResponseCreated(response={**response, "status": "in_progress", "output": []}), family),
            encode(ResponseDone(response={**response, "status": "completed", "output": items}), family)]


def output_of(frame: str | bytes, family: Any) -> tuple[str, str] | None:
    """The call a frame going upstream answers and the output item's id (an OpenAI-family
    `function_call_output` item), else None."""
    if not isinstance(family, OpenAIFamily):
        return None
    event = decode(frame, family)
    item = event.item if isinstance(event, ItemCreate) else None
    if isinstance(item, dict) and item.get("type") == FUNCTION_CALL_OUTPUT and isinstance(item.get("call_id"), str):
        item_id = item.get("id")
        return item["call_id"], item_id if isinstance(item_id, str) else ""
    return None
