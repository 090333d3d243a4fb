"""A GPT-Live session taken over, on the engine alone and a fake clock: what an owner writes ahead
for its delegations and backend calls (relay/engine/delegation_records.py), what a replica taking the
session over decides for each (relay/edges/takeover.py's `adopt_live`), and what its new engine
sends: every owed call answered once, each batch continued once, and no answer recorded as sent
sent again (GPT-Live's wire cannot refuse a duplicate)."""

from __future__ import annotations

import json
from typing import Any

from relay.edges.takeover import ANSWER, FOLLOW_UP, NOT_RETRIED, REFUSE, RUN, Adoption, adopt_live, decide
from relay.engine import EngineConfig
from relay.engine.records import CallRecord, Phase
from relay.tools import Delegation, ToolResult, delegate, tool
from relay.tools.sources import tool_registry
from tests.live.driver import (
    LiveDriver,
    call_item,
    delegation_created,
    envelope,
    backend_response,
    started,
    transcript,
)

RESPONSES = {"type": "responses", "responses": {"model": "gpt-5.4", "tools": []}}
SIDECAR = EngineConfig(mode="sidecar", strict=True, declare_tools=False)
ASKED: list[Delegation] = []


@tool
def refund(order: int) -> str:
    """Refund an order (not idempotent)."""
    return f"refunded {order}"


@tool(idempotent=True)
def lookup(order: int) -> str:
    """Look an order up (idempotent)."""
    return f"order {order}"


@delegate(timeout=10)
def assistant(delegation: Delegation) -> ToolResult:
    """Answers the caller (not idempotent)."""
    ASKED.append(delegation)
    return ToolResult(result="facts", message="say it")


@delegate(timeout=10, idempotent=True)
def looker(delegation: Delegation) -> ToolResult:
    """Answers the caller (idempotent)."""
    ASKED.append(delegation)
    return ToolResult(result=f"asked: {delegation.last_user_text()}", message="say it")


def client_owner(handler: Any = assistant) -> LiveDriver:
    driver = LiveDriver([handler], config=SIDECAR)
    driver.upstream(started({"type": "client"}), transcript("input", "Where is my order?", 600))
    return driver


def responses_owner() -> LiveDriver:
    driver = LiveDriver([refund, lookup], config=SIDECAR)
    driver.upstream(started(RESPONSES))
    return driver


def kept(driver: LiveDriver) -> list[CallRecord]:
    """What a store holds of the owner's records: the latest of each call."""
    latest: dict[str, CallRecord] = {}
    for remember in driver.records():
        latest[remember.record.call_id] = remember.record
    return list(latest.values())


def take_over(records: list[CallRecord], driver: LiveDriver, tools: list[Any]) -> Adoption:
    """What the new owner's loop does: the adoption told to its engine, and each owed call's
    handler run or answered by its decision."""
    adoption = adopt_live(records, tool_registry(tools))
    driver._act(driver.engine.adopt_records(adoption.records, adoption.follow_ups, driver.now))
    for call_id, decision in adoption.decisions.items():
        if decision.how != RUN:
            driver.finish(call_id, decision.outcome.value)
    return adoption


def test_a_delegation_s_records_carry_its_transcript_its_message_and_its_last_append_which_delivers_it() -> None:
    owner = client_owner()
    owner.upstream(delegation_created("item_d1"))
    ready, running = [r.record for r in owner.records()]
    assert (ready.phase, running.phase) == (Phase.READY, Phase.STARTED) and ready.delegation_id == "item_d1"
    assert json.loads(ready.transcript) == [["user", "Where is my order?"]]
    owner.finish("item_d1", ToolResult(result="facts", message="say it"))
    decided, sent = [r.record for r in owner.records()][-2:]
    assert decided.phase is Phase.DECIDED and decided.message == "say it" and not decided.silent
    last = owner.appends()[-1]
    assert sent.phase is Phase.SENT and sent.item_id == last["event_id"] and not sent.delivered
    owner.upstream({"type": "session.thinking.appended", "event_id": "ev_1", "start_ms": 1000, "end_ms": 1200,
                    "client_event_id": owner.appends()[0]["event_id"]})
    assert not owner.records()[-1].record.delivered, "the first append of two is not the whole answer"
    owner.upstream({"type": "session.commentary.appended", "event_id": "ev_2", "start_ms": 1200, "end_ms": 1400,
                    "client_event_id": last["event_id"]})
    delivered = owner.records()[-1].record
    assert delivered.phase is Phase.SENT and delivered.delivered


def test_a_backend_batch_s_continuation_delivers_its_outputs() -> None:
    owner = responses_owner()
    owner.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    owner.batch("item_1", "resp_1", [call_item("c1", "lookup", {"order": 7})])
    owner.finish("c1", "order 7")
    assert [r.record.phase for r in owner.records()][-1] is Phase.FOLLOWED_UP
    assert not owner.records()[-1].record.delivered
    owner.upstream(envelope("item_1", {"type": "response.created", "response": backend_response("resp_2", "in_progress")}))
    last = owner.records()[-1].record
    assert last.phase is Phase.FOLLOWED_UP and last.delivered


def test_each_live_phase_gets_its_rule_and_a_sent_answer_is_never_sent_again() -> None:
    tools = tool_registry([refund, lookup, assistant])

    def live(phase: Phase, name: str = "refund", **fields: Any) -> CallRecord:
        return CallRecord(session_id="live_1", call_id="c", name=name, phase=phase, at=1.0, delegation_id="d",
                          arguments=json.dumps({"order": 7}), **fields)

    assert decide(live(Phase.STARTED), tools).how == REFUSE
    assert decide(live(Phase.STARTED, "lookup"), tools).how == RUN
    assert decide(live(Phase.STARTED, "assistant"), tools).how == REFUSE   # a delegate that is not idempotent
    answered = decide(live(Phase.DECIDED, "assistant", output="facts", message="say it"), tools)
    assert answered.how == ANSWER and answered.outcome.value.message == "say it"
    sent = live(Phase.SENT, output="refunded 7", item_id="t_e4")
    assert decide(sent, tools, resend=False) is None and decide(sent, tools).how == ANSWER
    adoption = adopt_live([sent, live(Phase.FOLLOW_UP, output="refunded 7", item_id="t_e4", follow_up=True),
                           live(Phase.SENT, output="x", item_id="t_e9", delivered=True)], tools)
    assert adoption.decisions == {} and adoption.records == [] and len(adoption.follow_ups) == 1
    assert decide(adoption.follow_ups[0], tools, resend=False).how == FOLLOW_UP
    assert adoption.counts()["unconfirmed"] == 2 and adoption.counts()["done"] == 2


def test_a_delegation_whose_delegate_was_running_is_answered_once_with_an_honest_failure() -> None:
    owner = client_owner()
    owner.upstream(delegation_created("item_d1"))   # the owner dies while its delegate runs
    new = client_owner()
    adoption = take_over(kept(owner), new, [assistant])
    assert adoption.decisions["item_d1"].how == REFUSE
    assert "item_d1" in new.started, "told as the delegate's call, answered without running it"
    [answer] = new.appends()
    assert answer["type"] == "session.commentary.append" and answer["delegation_id"] == "item_d1"
    assert "interrupted" in answer["content"] and "not retried" in answer["content"]
    phases = [r.record.phase for r in new.records()]
    assert phases[0] is Phase.STARTED and Phase.READY not in phases, "its started record stays until the answer"
    assert phases[-1] is Phase.SENT


def test_an_idempotent_delegate_runs_again_with_the_transcript_it_was_first_given() -> None:
    ASKED.clear()
    owner = client_owner(looker)
    owner.upstream(delegation_created("item_d1", offset_ms=800))
    new = client_owner(looker)
    new.upstream(transcript("output", "One moment.", 1400))   # the new owner's own transcript is not it
    adoption = take_over(kept(owner), new, [looker])
    assert adoption.decisions["item_d1"].how == RUN
    given = new.started["item_d1"].arguments["delegation"]
    assert given.id == "item_d1" and given.offset_ms == 800 and given.last_user_text() == "Where is my order?"
    new.finish("item_d1", ToolResult(result="asked: Where is my order?", message="say it"))
    assert [a["type"] for a in new.appends()] == ["session.thinking.append", "session.commentary.append"]


def test_a_decided_answer_goes_up_as_it_was_decided_without_running_the_delegate() -> None:
    owner = client_owner()
    owner.upstream(delegation_created("item_d1"))
    owner.finish("item_d1", ToolResult(result="facts", message="say it"))
    decided = [r.record for r in owner.records() if r.record.phase is Phase.DECIDED]
    new = client_owner()
    take_over(decided, new, [assistant])   # the owner died between "decided" and "sent"
    assert [(a["type"], a["content"]) for a in new.appends()] == [
        ("session.thinking.append", "facts"), ("session.commentary.append", "say it")]
    assert [r.record.phase for r in new.records()] == [Phase.DECIDED, Phase.SENT]


def test_an_answer_recorded_sent_is_not_sent_again_delivered_or_not() -> None:
    owner = client_owner()
    owner.upstream(delegation_created("item_d1"))
    owner.finish("item_d1", ToolResult(result="facts", message="say it"))
    new = client_owner()
    adoption = take_over(kept(owner), new, [assistant])
    assert new.appends() == [] and new.started == {} and adoption.unconfirmed == 1


def test_a_backend_batch_taken_over_mid_tool_gets_each_output_once_then_one_create() -> None:
    owner = responses_owner()
    owner.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    owner.batch("item_1", "resp_1", [call_item("c1", "refund", {"order": 7}), call_item("c2", "lookup", {"order": 7}),
                                     call_item("c3", "lookup", {"order": 8})], complete=False)
    owner.finish("c3", "order 8")   # decided; its output waits for the backend response to complete
    new = responses_owner()
    adoption = take_over(kept(owner), new, [refund, lookup])
    assert {call_id: d.how for call_id, d in adoption.decisions.items()} == {"c1": REFUSE, "c2": RUN, "c3": ANSWER}
    assert new.sent_of("response.create") == []
    new.finish("c2", "order 7")
    outputs = {e["item"]["call_id"]: e["item"]["output"] for e in new.outputs()}
    assert NOT_RETRIED in outputs["c1"] and outputs["c2"] == "order 7" and outputs["c3"] == "order 8"
    assert len(new.outputs()) == 3 and len(new.sent_of("response.create")) == 1
    assert [e["type"] for e in new.sent()][-1] == "response.create", "after every output of the batch"
    assert {r.record.delegation_id for r in new.records()} == {"item_1"}


def test_a_follow_up_owed_is_asked_for_once_recorded_sent_ahead_of_its_create() -> None:
    owner = responses_owner()
    owner.upstream(delegation_created("item_1", target="responses", response_id="resp_1"))
    owner.batch("item_1", "resp_1", [call_item("c1", "lookup", {"order": 7})])
    owner.finish("c1", "order 7")
    owed = [r.record for r in owner.records() if r.record.phase is Phase.FOLLOW_UP]   # died before "followed up"
    new = responses_owner()
    adoption = take_over(owed, new, [refund, lookup])
    assert adoption.decisions == {} and len(adoption.follow_ups) == 1
    assert new.outputs() == [], "the output went up before the follow-up was owed"
    [create] = new.sent_of("response.create")
    followed = [i for i, a in enumerate(new.actions) if getattr(a, "record", None) is not None
                and a.record.phase is Phase.FOLLOWED_UP]
    sent = next(i for i, a in enumerate(new.actions) if '"response.create"' in str(a))
    assert followed and followed[0] < sent
    again = responses_owner()
    take_over([r.record for r in new.records()], again, [refund, lookup])
    assert again.sent() == [], "followed up: a later takeover asks for nothing"
