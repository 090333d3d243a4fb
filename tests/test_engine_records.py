"""The records the engine writes ahead (`Remember`), on the fake clock: which, with what, and
before which action. No sockets, no store: what a driver would write, in the engine's order."""

from __future__ import annotations

import json
from typing import Any

from relay.dialects import GEMINI
from relay.engine import Remember, SendUpstream, StartHandler
from relay.engine.records import CallRecord, Phase, idempotency_key
from relay.tools import tool
from tests.support.engine import EngineDriver
from tests.support.local_mock import model_call
from tests.support.keys import PROVIDER_KEY


@tool
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


class TrailDriver(EngineDriver):
    """An engine driver that keeps the engine's actions as one trail, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trail: list[tuple[str, Any]] = []
        self.records: list[CallRecord] = []

    def _act(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, Remember):
                self.records.append(action.record)
                self.trail.append(("remember", action.record.phase))
            elif isinstance(action, StartHandler):
                self.trail.append(("start", action.call_id))
            elif isinstance(action, SendUpstream):
                event = json.loads(action.frame)
                kind = event.get("type")
                if kind == "conversation.item.create" and event["item"]["type"] == "function_call_output":
                    kind = "output"
                self.trail.append(("upstream", kind))
        super()._act(actions)


def refund_session() -> TrailDriver:
    driver = TrailDriver([refund])
    driver.connect()
    driver.upstream(driver.mock.user_turn("refund order 7"))
    driver.respond([model_call("refund", '{"order": 7}')])
    return driver


def test_each_record_comes_before_the_action_it_guards() -> None:
    driver = refund_session()
    driver.run_all()
    trail = [step for step in driver.trail if step[0] != "upstream" or step[1] in ("output", "response.create")]
    assert trail == [
        ("remember", Phase.READY), ("remember", Phase.STARTED), ("start", trail[2][1]),
        ("remember", Phase.DECIDED), ("upstream", "output"), ("remember", Phase.SENT),
        ("remember", Phase.FOLLOW_UP), ("remember", Phase.FOLLOWED_UP), ("upstream", "response.create"),
        ("remember", Phase.FOLLOWED_UP),   # the provider echoed the output: delivered
    ]
    *before, delivered = driver.records
    assert delivered.delivered and not any(record.delivered for record in before)
    sent = next(record for record in before if record.phase is Phase.SENT)
    assert delivered.item_id == sent.item_id == driver.outputs[0]["item"]["id"]


def test_the_records_say_what_was_decided_with_the_engine_s_times() -> None:
    driver = refund_session()
    ready_at = driver.now
    [call_id] = list(driver.started)
    driver.finish(call_id, "refunded 7", dt=0.25)
    by_phase = {record.phase: record for record in driver.records}
    key = idempotency_key("test", call_id, '{"order": 7}')
    assert {record.idempotency_key for record in driver.records} == {key}
    assert driver.started[call_id].idempotency_key == key
    assert by_phase[Phase.READY].arguments == '{"order": 7}' and by_phase[Phase.READY].at == ready_at
    assert by_phase[Phase.STARTED].output is None
    decided = by_phase[Phase.DECIDED]
    assert (decided.output, decided.outcome, decided.at) == ("refunded 7", "ok", ready_at + 0.25)
    assert by_phase[Phase.SENT].output == "refunded 7"
    assert by_phase[Phase.FOLLOW_UP].follow_up
    assert {record.session_id for record in driver.records} == {"test"}
    assert {record.name for record in driver.records} == {"refund"}


def test_a_call_that_cannot_run_is_recorded_ready_then_decided_never_started() -> None:
    driver = TrailDriver([refund])
    driver.connect()
    driver.upstream(driver.mock.user_turn("refund"))
    driver.respond([model_call("refund", '{"order": "seven"}')])
    phases = [record.phase for record in driver.records]
    assert phases[:2] == [Phase.READY, Phase.DECIDED] and Phase.STARTED not in phases
    assert driver.records[1].outcome == "bad_arguments"


def test_client_calls_and_abandoned_calls_write_nothing_more() -> None:
    driver = refund_session()
    before = len(driver.records)
    driver._act(driver.engine.close(driver.now, "bye"))   # the handler never reported
    assert len(driver.records) == before and driver.records[-1].phase is Phase.STARTED
    client = TrailDriver([refund])
    client.connect()
    client.upstream(client.mock.user_turn("weather"))
    client.respond([model_call("get_weather", '{"city": "Oslo"}')])
    assert client.records == []


def test_no_record_holds_the_provider_key() -> None:
    driver = refund_session()
    driver.run_all()
    assert driver.records and all(PROVIDER_KEY not in record.to_json() for record in driver.records)


def test_gemini_calls_are_recorded_too() -> None:
    driver = TrailDriver([refund], dialect=GEMINI)
    driver.setup()
    driver.upstream({"toolCall": {"functionCalls": [{"id": "g1", "name": "refund", "args": {"order": 3}}]}})
    driver.run_all()
    assert [record.phase for record in driver.records] == [Phase.READY, Phase.STARTED, Phase.DECIDED, Phase.SENT]
    assert driver.records[0].idempotency_key == idempotency_key("test", "g1", '{"order": 3}')
