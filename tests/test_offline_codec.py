"""Replay's reading of the OpenAI family goes through the family's codec: what it compares of the
relay's sends, the answers it gives in the provider's place, and the timeline of the upstream's
frames, in the GA and the beta vocabulary alike."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from relay.dialects import OPENAI, OPENAI_BETA
from relay.dialects import openai_codec as wire
from relay.engine.sequencer import META_CALLS, META_EVENT, META_KIND
from relay.offline.faults import FaultPlan, duplicate_delivery
from relay.offline.replaying import OUTPUT, REQUEST, UPDATE, OpenAISends
from relay.recording.format import UPSTREAM_TO_RELAY, Frame


def frame(event: dict[str, Any]) -> Frame:
    return Frame(t=0.0, direction=UPSTREAM_TO_RELAY, event=event, raw=None, binary=None, line_no=1)


def output(event_id: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"type": "conversation.item.create", "event_id": event_id,
            "item": {"type": "function_call_output", "id": "item_9", "call_id": call_id,
                     "output": '{"ok": true}', "status": "completed", "created_at": 12}}


def test_the_relays_sends_are_keyed_free_of_its_ids() -> None:
    sends = OpenAISends(OPENAI, "rs")
    assert sends(output("rs_e1")) == [((OUTPUT, "call_1"), output("rs_e1"))]
    assert sends(output("client_7")) == []   # the client's answer, forwarded
    update = {"type": "conversation.item.create", "event_id": "rs_e2",
              "item": {"type": "message", "role": "user", "content": []}}
    assert sends.key(update) == (UPDATE,)
    follow_up = {"type": "response.create", "event_id": "rs_e3",
                 "response": {"metadata": {META_KIND: "follow_up", META_CALLS: "call_1,call_2", META_EVENT: "rs_e3"}}}
    assert sends.key(follow_up) == (REQUEST, "follow_up", "call_1,call_2")
    assert sends.describe(sends.key(follow_up)) == "follow-up response for call_1,call_2"
    assert sends.call_of(sends.key(follow_up)) == "call_1"
    assert sends.key({"type": "session.update", "event_id": "rs_e4", "session": {}}) == ("session.update",)
    assert sends.key({"type": "relay.own_kind", "event_id": "rs_e5"}) == ("relay.own_kind",)   # outside the set
    assert sends.key({"type": "response.create", "event_id": "client_1"}) is None


def test_what_is_compared_leaves_out_the_ids_the_relay_chose() -> None:
    sends = OpenAISends(OPENAI, "rs")
    assert sends.compared(output("rs_e1")) == {
        "type": "conversation.item.create",
        "item": {"type": "function_call_output", "call_id": "call_1", "output": '{"ok": true}', "status": "completed"}}
    request = {"type": "response.create", "event_id": "rs_e3",
               "response": {"instructions": "x", "metadata": {META_KIND: "filler", META_EVENT: "rs_e3"}}}
    assert sends.compared(request) == {"type": "response.create",
                                       "response": {"instructions": "x", "metadata": {META_KIND: "filler"}}}
    assert sends.compared({"type": "session.update", "event_id": "rs_e4", "session": {"a": 1}}) == \
        {"type": "session.update", "session": {"a": 1}}
    assert sends.answer((OUTPUT, "call_1"), output("rs_e1")) == ("call_1", '{"ok": true}', "completed")


@pytest.mark.parametrize("dialect", [OPENAI, OPENAI_BETA], ids=["ga", "beta"])
def test_the_replays_answer_to_a_request_is_a_response_begun_and_ended(dialect: Any) -> None:
    sends = OpenAISends(dialect, "rs")
    metadata = {META_KIND: "follow_up", META_CALLS: "call_1"}
    frames = sends.provider_answer({"type": "response.create", "event_id": "rs_e3", "response": {"metadata": metadata}}, 2)
    created, done = (wire.decode(text, dialect) for text in frames)
    assert isinstance(created, wire.ResponseCreated) and isinstance(done, wire.ResponseDone)
    assert created.response["id"] == done.response["id"] == "resp_replay2"
    assert (created.response["status"], done.response["status"]) == ("in_progress", "completed")
    assert created.response["metadata"] == done.response["metadata"] == metadata
    assert created.event_id != done.event_id
    assert all(isinstance(json.loads(text), dict) for text in frames)


def test_the_timeline_shows_a_call_once_on_the_frame_that_completes_it() -> None:
    sends = OpenAISends(OPENAI_BETA, None)
    item = {"type": "function_call", "id": "item_1", "call_id": "call_1", "name": "lookup", "arguments": ""}
    assert sends.timeline(frame({"type": "response.output_item.added", "item": item})) == []
    assert sends.timeline(frame({"type": "response.function_call_arguments.done", "call_id": "call_1",
                                 "arguments": '{"city": "Oslo"}'})) == \
        ['recv  call lookup({"city": "Oslo"}) call_id=call_1']
    assert sends.timeline(frame({"type": "conversation.item.done", "item": {**item, "status": "completed"}})) == []
    assert sends.timeline(frame({"type": "response.done", "response": {"id": "resp_1", "status": "completed"}})) == \
        ["recv  response.done resp_1 completed"]
    assert sends.timeline(frame({"type": "response.audio.delta", "delta": "AAAA"})) == []
    assert sends.payload(frame({"type": "response.audio.delta", "delta": "AAAA"})) is None   # audio: only forwarded


class _Target:
    dialect = OPENAI
    gemini = False
    closed = False
    tools = (SimpleNamespace(name="mine"),)   # the relay's tools

    def __init__(self) -> None:
        self.marks: list[str] = []

    def mark(self, kind: str, label: str, ahead: int = 0) -> None:
        self.marks.append(label)


def test_a_duplicate_delivery_repeats_the_frames_that_complete_the_nth_call() -> None:
    target = _Target()
    plan = FaultPlan([duplicate_delivery(call=2)], target)   # type: ignore[arg-type]
    def added(call_id: str) -> str:
        return json.dumps({"type": "response.output_item.added",
                           "item": {"type": "function_call", "call_id": call_id, "name": "f"}})
    def done(call_id: str) -> str:
        return json.dumps({"type": "response.function_call_arguments.done", "call_id": call_id, "arguments": "{}"})
    assert plan.deliveries(added("call_a")) == [added("call_a")]
    assert plan.deliveries(added("call_b")) == [added("call_b")]
    assert plan.deliveries(done("call_a")) == [done("call_a")]
    assert plan.deliveries(done("call_b")) == [done("call_b"), done("call_b")]
    assert plan.deliveries("not json") == ["not json"]
    assert target.marks == ["the upstream delivers call call_b twice"]


@pytest.mark.parametrize("among, twice", [("model", "call_b"), ("relay", "call_c"), ("client", "call_d")])
def test_a_duplicate_delivery_counts_the_calls_it_is_told_to(among: str, twice: str) -> None:
    """The explorer numbers the relay's calls apart from the client's: the second of each."""
    target = _Target()
    plan = FaultPlan([duplicate_delivery(call=2, among=among)], target)   # type: ignore[arg-type]
    calls = [("call_a", "mine"), ("call_b", "theirs"), ("call_c", "mine"), ("call_d", "theirs")]
    for call_id, name in calls:
        plan.deliveries(json.dumps({"type": "response.output_item.added",
                                    "item": {"type": "function_call", "call_id": call_id, "name": name}}))
    repeated = [call_id for call_id, _ in calls if len(plan.deliveries(json.dumps(
        {"type": "response.function_call_arguments.done", "call_id": call_id, "arguments": "{}"}))) == 2]
    assert repeated == [twice]
    assert plan.client_calls() == ["call_b", "call_d"]


def test_a_duplicate_delivery_counts_only_what_it_knows() -> None:
    with pytest.raises(ValueError, match="among must be one of model, relay, client"):
        duplicate_delivery(among="server")


def test_the_timeline_reads_a_variants_own_names_as_its_events() -> None:
    from dataclasses import replace

    from relay.offline.events import RESPONSE, RESPONSE_DONE
    from relay.offline.timeline import Timeline

    variant = replace(OPENAI, name="toy", renamed_events={"toy.response.started": "response.created",
                                                          "toy.response.ended": "response.done"})
    frames = [frame({"type": "toy.response.started", "response": {"id": "resp_1", "status": "in_progress"}}),
              frame({"type": "toy.response.ended", "response": {"id": "resp_1", "status": "completed"}})]
    kinds = [event.kind for event in Timeline.from_frames(frames, dialect=variant, source="toy").events]
    assert kinds == [RESPONSE, RESPONSE_DONE]
    assert Timeline.from_frames(frames, dialect=OPENAI, source="openai").events == []   # not OpenAI's names
