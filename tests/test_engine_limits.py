"""What a client (or an upstream) can make one session's engine keep is bounded
(relay/engine/limits.py): past a limit the event is refused with a `session_limit_exceeded`
error, nothing of it is forwarded, the first refusal of each kind is told once (the `limit`
notice, logged), and the session goes on. Sizes are counted, never measured as memory."""

from __future__ import annotations

import json
from typing import Any

from relay.engine import EngineConfig
from relay.engine import limits
from relay.tools import tool
from tests.support.engine import EngineDriver

INSTRUCTIONS = "x" * 128 * 1024


@tool
def lookup_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


def errors(harness: EngineDriver) -> list[dict[str, Any]]:
    return [event["error"] for event in map(json.loads, harness.client_frames) if event["type"] == "error"]


def limit_notices(harness: EngineDriver) -> list[dict[str, Any]]:
    return [notice.fields for notice in harness.notices if notice.kind == "limit"]


def test_response_creates_held_while_a_response_is_on_its_way_are_bounded() -> None:
    """900 creates with 128 KB of instructions each while the first one's response is on its way:
    the relay holds at most MAX_HELD_CREATES and keeps the frame of the first alone; each one past
    the limit gets the error at once, the held ones theirs when that response is over (as without
    the relay: they met an active response)."""
    harness = EngineDriver([lookup_weather], config=EngineConfig(mode="proxy", strict=True), deliver=False)
    harness.connect()
    harness.client({"type": "response.create", "event_id": "first"})   # goes up; its response is on its way
    sent = len(harness.upstream_frames)
    for index in range(900):
        harness.client({"type": "response.create", "event_id": f"c{index}", "response": {"instructions": INSTRUCTIONS}})
    held = harness.engine.view.held
    assert len(held._held) == limits.MAX_HELD_CREATES
    assert sum(len(frame) + len(event_id or "") for frame, event_id in held._held) < 2 * len(INSTRUCTIONS)
    refused = errors(harness)
    assert len(refused) == 900 - limits.MAX_HELD_CREATES
    assert {error["code"] for error in refused} == {limits.LIMIT_CODE}
    assert refused[0]["event_id"] == f"c{limits.MAX_HELD_CREATES}"
    assert str(limits.MAX_HELD_CREATES) in refused[0]["message"]
    assert len(limit_notices(harness)) == 1
    assert len(harness.upstream_frames) == sent   # none of them went up
    harness.flush()   # the response ends: the held ones are refused
    assert not held._held
    assert len(errors(harness)) == 900


def test_items_the_upstream_never_places_are_bounded_and_placed_ones_free_their_room() -> None:
    """function_call items the upstream does not take: the relay remembers at most
    MAX_PENDING_CLIENT_ITEMS of them; items that come back into the conversation are forgotten, so a
    client that creates many items the upstream takes is never refused."""
    harness = EngineDriver([lookup_weather], config=EngineConfig(mode="proxy", strict=True), deliver=False)
    harness.connect()
    total = limits.MAX_PENDING_CLIENT_ITEMS + 500
    for index in range(total):
        harness.client({"type": "conversation.item.create", "event_id": f"c{index}", "item": {
            "type": "function_call", "id": f"item_{index}", "call_id": f"call_{index}", "name": "mine",
            "arguments": "{}"}})
    origins = harness.engine.ctx.origins
    assert len(origins._client_items) + len(origins._client_calls) <= limits.MAX_PENDING_CLIENT_ITEMS
    refused = errors(harness)
    assert len(refused) >= 500 and {error["code"] for error in refused} == {limits.LIMIT_CODE}
    assert len(limit_notices(harness)) == 1
    forwarded = [json.loads(frame) for frame in harness.upstream_frames]
    assert sum(event["type"] == "conversation.item.create" for event in forwarded) == total - len(refused)

    placing = EngineDriver([lookup_weather], config=EngineConfig(mode="proxy", strict=True))
    placing.connect()
    for index in range(total):
        placing.client({"type": "conversation.item.create", "event_id": f"c{index}", "item": {
            "type": "function_call", "id": f"item_{index}", "call_id": f"call_{index}", "name": "mine",
            "arguments": "{}"}})
    assert errors(placing) == []
    assert not placing.engine.ctx.origins._client_items and not placing.engine.ctx.origins._client_calls


def test_ids_too_long_to_keep_are_bounded_by_their_characters() -> None:
    harness = EngineDriver([lookup_weather], config=EngineConfig(mode="proxy", strict=True), deliver=False)
    harness.connect()
    long_id = "i" * 64 * 1024
    for index in range(100):
        harness.client({"type": "conversation.item.create", "item": {
            "type": "message", "id": f"{long_id}{index}", "role": "user", "content": []}})
    origins = harness.engine.ctx.origins
    assert sum(map(len, origins._client_items)) <= limits.MAX_PENDING_CLIENT_ID_CHARS + len(long_id) + 3
    assert {error["code"] for error in errors(harness)} == {limits.LIMIT_CODE}


def test_the_anomalies_an_upstream_causes_are_kept_up_to_a_limit_and_counted_after() -> None:
    harness = EngineDriver([lookup_weather], config=EngineConfig(mode="proxy", strict=False))
    harness.connect()
    extra = 250
    for index in range(limits.MAX_ANOMALIES_KEPT + extra):
        harness.upstream(f"not json {index}")
    assert len(harness.engine.anomalies) == limits.MAX_ANOMALIES_KEPT
    assert harness.engine.ctx.anomalies_dropped == extra
    assert sum(notice.kind == "anomaly" for notice in harness.notices) == limits.MAX_ANOMALIES_KEPT + extra
