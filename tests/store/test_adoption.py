"""What a replica taking a call over does with the old owner's records (relay/edges/takeover.py),
on the engine alone and a fake clock: each owed call gets one output, by the rule of its phase,
appended to the conversation, with one follow-up for them all; a call already answered gets none."""

from __future__ import annotations

import json

from relay.dialects.openai_codec import ResponseCreated, ResponseDone, decode
from relay.engine import EngineConfig
from relay.engine.records import CallRecord, Phase
from relay.edges.takeover import ANSWER, NOT_RETRIED, REFUSE, RUN, adopt, decide
from relay.tools import IdempotencyKey, tool
from relay.tools.render import error_output
from relay.tools.sources import tool_registry
from tests.support.engine import EngineDriver


@tool
def refund(order: int) -> str:
    """Refund an order (not idempotent)."""
    return f"refunded {order}"


@tool
def book(slot: str, key: IdempotencyKey) -> str:
    """Book a slot (takes the call's key)."""
    return f"booked {slot}"


@tool(idempotent=True)
def lookup(order: int) -> str:
    """Look an order up (idempotent)."""
    return f"order {order}"


TOOLS = tool_registry([refund, book, lookup])


def record(call_id: str, name: str, phase: Phase, *, response_id: str = "resp_1", **fields: object) -> CallRecord:
    return CallRecord(session_id="rtc_1", call_id=call_id, name=name, phase=phase, at=1.0,
                      arguments=json.dumps({"slot": "9am"} if name == "book" else {"order": 7}),
                      response_id=response_id, **fields)  # type: ignore[arg-type]


def test_each_phase_gets_its_rule() -> None:
    assert decide(record("c", "refund", Phase.READY), TOOLS).how == RUN           # never started
    assert decide(record("c", "refund", Phase.STARTED), TOOLS).how == REFUSE      # may have run
    assert decide(record("c", "book", Phase.STARTED), TOOLS).how == RUN           # takes the key
    assert decide(record("c", "lookup", Phase.STARTED), TOOLS).how == RUN         # idempotent
    assert decide(record("c", "gone", Phase.STARTED), TOOLS).how == REFUSE        # a tool no longer here
    decided = decide(record("c", "refund", Phase.DECIDED, output="refunded 7"), TOOLS)
    assert decided.how == ANSWER and decided.outcome.value == "refunded 7"
    failed = decide(record("c", "refund", Phase.DECIDED, output=error_output("card declined")), TOOLS)
    assert failed.how == ANSWER and failed.outcome.value.error == "card declined"
    for phase in (Phase.SENT, Phase.FOLLOW_UP, Phase.SKIPPED):
        assert decide(record("c", "refund", phase, output="x"), TOOLS) is None


def test_the_owed_calls_are_told_as_one_out_of_band_response_per_original() -> None:
    adoption = adopt([record("c1", "refund", Phase.STARTED), record("c2", "book", Phase.READY),
                      record("c3", "lookup", Phase.SENT, output="order 7"),
                      record("c4", "refund", Phase.READY, response_id="resp_2")], TOOLS)
    assert adoption.counts() == {"retried": 2, "refused": 1, "answered": 0, "done": 1}
    events = [decode(frame) for frame in adoption.frames]
    assert [type(event) for event in events] == [ResponseCreated, ResponseDone] * 2
    first_done = events[1]
    assert isinstance(first_done, ResponseDone)
    assert first_done.response["conversation_id"] is None and first_done.response["id"] == "resp_1"
    assert [item["call_id"] for item in first_done.response["output"]] == ["c1", "c2"]


def test_a_new_engine_answers_each_owed_call_once_appended_with_one_follow_up() -> None:
    driver = EngineDriver([refund, book, lookup],
                          config=EngineConfig(mode="sidecar", strict=True, declare_tools=False))
    driver.connect()
    adoption = adopt([record("c1", "refund", Phase.STARTED), record("c2", "book", Phase.STARTED),
                      record("c3", "refund", Phase.DECIDED, output="refunded 7"),
                      record("c4", "lookup", Phase.FOLLOW_UP, output="order 7", follow_up=True)], TOOLS)
    for frame in adoption.frames:
        driver.upstream(frame)
    assert set(driver.started) == {"c1", "c2", "c3"}
    assert driver.started["c2"].idempotency_key.startswith("test:c2:")   # the key its handler gets
    for call_id, decision in adoption.decisions.items():   # what the session loop does for each
        driver.finish(call_id, "booked 9am" if decision.how == RUN else decision.outcome.value)
    outputs = {call_id: driver.output_for(call_id) for call_id in ("c1", "c2", "c3")}
    assert NOT_RETRIED in outputs["c1"]["output"] and "error" in json.loads(outputs["c1"]["output"])
    assert outputs["c2"]["output"] == "booked 9am" and outputs["c3"]["output"] == "refunded 7"
    assert driver.outputs_for("c4") == []
    assert all("previous_item_id" not in event for event in driver.outputs)   # appended
    assert len(driver.creates) == 1
