"""What a replica taking a call over does with the old owner's records (relay/edges/takeover.py),
on the engine alone and a fake clock: each owed call gets one output, by the rule of its phase,
appended to the conversation, with one follow-up for them all; a call already answered gets none."""

from __future__ import annotations

import json
from typing import Any

import pytest

from relay.dialects.openai_codec import ResponseCreated, ResponseDone, decode
from relay.engine import EngineConfig, Remember
from relay.engine.records import CallRecord, Phase
from relay.edges.takeover import ANSWER, FOLLOW_UP, NOT_RETRIED, REFUSE, RUN, adopt, decide, kept_records
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
    for phase in (Phase.SENT, Phase.FOLLOWED_UP, Phase.SKIPPED):
        assert decide(record("c", "refund", phase, output="x"), TOOLS) is None
    assert decide(record("c", "refund", Phase.FOLLOW_UP, output="x"), TOOLS).how == FOLLOW_UP   # answered, unspoken


def test_the_owed_calls_are_told_as_one_out_of_band_response_per_original() -> None:
    adoption = adopt([record("c1", "refund", Phase.STARTED), record("c2", "book", Phase.READY),
                      record("c3", "lookup", Phase.SENT, output="order 7"),
                      record("c4", "refund", Phase.READY, response_id="resp_2")], TOOLS)
    assert adoption.counts() == {"retried": 2, "refused": 1, "answered": 0, "followed_up": 0, "done": 1,
                                 "unconfirmed": 0}
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
    driver._act(driver.engine.adopt_follow_ups(adoption.follow_ups, driver.now))   # c4's: with the batch's
    driver._drain()
    assert driver.creates == []
    assert set(driver.started) == {"c1", "c2", "c3"}
    assert driver.started["c2"].idempotency_key.startswith("test:c2:")   # the key its handler gets
    for call_id, decision in adoption.decisions.items():   # what the session loop does for each
        driver.finish(call_id, "booked 9am" if decision.how == RUN else decision.outcome.value)
    outputs = {call_id: driver.output_for(call_id) for call_id in ("c1", "c2", "c3")}
    assert NOT_RETRIED in outputs["c1"]["output"] and "error" in json.loads(outputs["c1"]["output"])
    assert outputs["c2"]["output"] == "booked 9am" and outputs["c3"]["output"] == "refunded 7"
    assert driver.outputs_for("c4") == []
    assert all("previous_item_id" not in event for event in driver.outputs)   # appended
    [create] = driver.creates
    assert create["response"]["metadata"]["call_ids"] == "c1,c2,c3,c4"


class RecordingDriver(EngineDriver):
    """An engine driver that keeps the records the engine writes ahead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.records: list[CallRecord] = []

    def _act(self, actions: list[Any]) -> None:
        self.records.extend(action.record for action in actions if isinstance(action, Remember))
        super()._act(actions)

    def adopt(self, records: list[CallRecord]) -> None:
        """What the session loop does once a takeover's frames are in: the owed follow-ups."""
        self._act(self.engine.adopt_follow_ups(records, self.now))
        self._drain()

    def phases(self, call_id: str) -> list[Phase]:
        return [kept.phase for kept in self.records if kept.call_id == call_id]


def sidecar_driver() -> RecordingDriver:
    driver = RecordingDriver([refund, book, lookup], config=EngineConfig(mode="sidecar", strict=True,
                                                                         declare_tools=False))
    driver.connect()
    return driver


def owed(call_id: str = "c4") -> list[CallRecord]:
    """A call the old owner answered, whose follow-up it owed when it stopped."""
    adoption = adopt([record(call_id, "lookup", Phase.FOLLOW_UP, output="order 7", follow_up=True)], TOOLS)
    assert adoption.frames == [] and adoption.decisions == {}
    return adoption.follow_ups


def test_an_owed_follow_up_is_asked_for_once_recorded_sent_ahead_of_its_create() -> None:
    driver = sidecar_driver()
    driver.deliver = False
    driver.adopt(owed())
    [create] = driver.creates
    assert create["response"]["metadata"]["relay"] == "follow_up"
    assert create["response"]["metadata"]["call_ids"] == "c4"
    assert driver.phases("c4") == [Phase.FOLLOWED_UP]
    driver.deliver = True
    driver.flush()                  # the mock begins its response and speaks
    driver.advance(60)
    assert len(driver.creates) == 1 and driver.phases("c4") == [Phase.FOLLOWED_UP]


def refused_at_once() -> RecordingDriver:
    """A new owner whose owed follow-up the provider refuses: a response it did not see begin is
    active (the caller's, or the old owner's own follow-up still speaking)."""
    driver = sidecar_driver()
    driver.deliver = False
    driver.adopt(owed())
    [create] = driver.creates
    driver.undelivered.clear()
    driver.deliver = True
    driver.upstream(active_refusal(create))
    assert driver.phases("c4") == [Phase.FOLLOWED_UP, Phase.FOLLOW_UP]   # a new owner would ask again
    return driver


def test_a_follow_up_refused_as_already_active_is_owed_again_until_it_goes_again() -> None:
    driver = refused_at_once()
    driver.upstream(response_done("resp_caller", metadata=None))          # what was active ends
    assert len(driver.creates) == 2
    assert driver.phases("c4") == [Phase.FOLLOWED_UP, Phase.FOLLOW_UP, Phase.FOLLOWED_UP]


def test_a_response_that_begins_after_the_takeover_answers_an_owed_follow_up() -> None:
    driver = refused_at_once()
    driver.upstream({"type": "response.created", "event_id": "ev_vad", "response": {
        "id": "resp_vad", "object": "realtime.response", "status": "in_progress", "output": [],
        "conversation_id": "conv_1", "metadata": None}})   # the caller speaks: the model answers
    driver.upstream(response_done("resp_vad", metadata=None))
    driver.advance(60)
    assert len(driver.creates) == 1
    assert driver.phases("c4") == [Phase.FOLLOWED_UP, Phase.FOLLOW_UP, Phase.FOLLOWED_UP]


def test_the_old_owner_s_follow_up_seen_ending_after_the_takeover_stops_ours() -> None:
    driver = refused_at_once()
    # the active response, begun before this replica attached, ends with the old owner's metadata
    driver.upstream(response_done("resp_old", metadata={"relay": "follow_up", "relay_event": "old_1",
                                                        "call_ids": "c4"}))
    driver.advance(60)
    assert len(driver.creates) == 1   # refused, and never sent again
    assert driver.phases("c4") == [Phase.FOLLOWED_UP, Phase.FOLLOW_UP, Phase.FOLLOWED_UP]


def active_refusal(create: dict[str, Any]) -> dict[str, Any]:
    return {"type": "error", "event_id": "ev_e", "error": {
        "type": "invalid_request_error", "code": "conversation_already_has_active_response",
        "message": "Conversation already has an active response", "param": None, "event_id": create["event_id"]}}


def response_done(response_id: str, *, metadata: dict[str, str] | None) -> dict[str, Any]:
    """The end of a response this replica did not see begin."""
    return {"type": "response.done", "event_id": f"ev_{response_id}", "response": {
        "id": response_id, "object": "realtime.response", "status": "completed", "output": [],
        "conversation_id": "conv_1", "metadata": metadata}}


def resent(phase: Phase) -> tuple[RecordingDriver, dict[str, Any]]:
    """A new owner sends again, as the old owner's item, an output recorded `phase` and never
    echoed (what the session loop does with an `answer` decision that has an item id); the
    output it sent, held from the provider."""
    driver = sidecar_driver()
    driver.deliver = False
    adoption = adopt([record("c5", "lookup", phase, output="order 7", follow_up=phase is not Phase.SENT,
                             item_id="old_i5")], TOOLS)
    decision = adoption.decisions["c5"]
    assert (decision.how, decision.item_id) == (ANSWER, "old_i5")
    for frame in adoption.frames:
        driver.upstream(frame)
    driver.engine.injector.resend_as("c5", decision.item_id, followed_up=decision.followed_up)
    driver.finish("c5", decision.outcome.value)
    [output] = driver.outputs
    assert output["item"]["id"] == "old_i5" and driver.creates == []   # the follow-up waits for the verdict
    driver.undelivered.clear()
    driver.deliver = True
    return driver, output


def test_a_resent_output_the_provider_takes_was_lost_and_gets_its_follow_up() -> None:
    driver, output = resent(Phase.FOLLOWED_UP)   # what followed it was lost with it
    driver.upstream({"type": "conversation.item.added", "event_id": "ev_a", "previous_item_id": None,
                     "item": output["item"]})
    assert len(driver.creates) == 1
    assert any(kept.delivered and kept.item_id == "old_i5" for kept in driver.records)


@pytest.mark.parametrize(("phase", "creates"), [(Phase.FOLLOWED_UP, 0), (Phase.FOLLOW_UP, 1), (Phase.SENT, 1)])
def test_a_resent_output_refused_as_a_duplicate_was_delivered_and_its_record_says_if_a_follow_up_is_owed(
        phase: Phase, creates: int) -> None:
    driver, output = resent(phase)
    driver.upstream({"type": "error", "event_id": "ev_dup", "error": {
        "type": "invalid_request_error", "code": "duplicate_item_id", "param": "item.id",
        "message": "Item with id 'old_i5' already exists in the conversation.", "event_id": output["event_id"]}})
    driver.advance(60)
    assert len(driver.creates) == creates
    assert any(kept.delivered for kept in driver.records)


def test_a_call_answered_without_running_keeps_its_old_record_until_its_answer_is_decided() -> None:
    """A new owner killed while it answers a refused or decided call leaves the old record, not
    `ready`: a third owner never runs as never started a call that may have run."""
    driver = sidecar_driver()
    adoption = adopt([record("c1", "refund", Phase.STARTED), record("c2", "refund", Phase.DECIDED, output="refunded 7"),
                      record("c3", "refund", Phase.READY)], TOOLS)
    for frame in adoption.frames:
        driver._act(kept_records(driver.engine.receive_upstream(frame, driver.now), adoption.decisions))
    assert driver.phases("c1") == [] and driver.phases("c2") == []
    assert driver.phases("c3") == [Phase.READY, Phase.STARTED]   # run: its steps are recorded as they come
    for call_id in ("c1", "c2"):
        driver.finish(call_id, adoption.decisions[call_id].outcome.value)
        assert driver.phases(call_id)[0] is Phase.DECIDED
