"""Fuzzing the engine: valid and mutated event streams (dropped, duplicated, swapped, corrupted
and truncated events, wrong field types) never make it raise, and the ledger invariants hold:
never two outputs for a call, never an output for a client-owned call, never a response.create
while the engine knows a response is active."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.engine import OpenAIEngine, EngineConfig, Outcome, Owner, SendUpstream, StartHandler
from relay.tools import tool
from tests.support.local_mock import LocalMock, model_call
from tests.support.paths import shared_dir


@tool
def lookup(key: str) -> str:
    return key


@tool(on_delay=(500, "hold on"), interruption="cancel")
def slow(key: str) -> str:
    return key


def base_stream() -> list[dict[str, Any]]:
    mock = LocalMock()
    events = mock.connect() + mock.user_turn("hi")
    events += mock.respond(["Checking.", model_call("lookup", '{"key":"a"}'), model_call("slow", '{"key":"b"}'),
                            model_call("client_tool", "{}")])
    events += mock.user_turn("again")
    events += mock.respond([model_call("lookup", '{"key":"c"}')], finish=False) + mock.barge_in()
    return events


BASE = base_stream()
RECORDED = [json.loads(line) for path in sorted((shared_dir() / "recordings").glob("*.jsonl"))
            for line in path.read_text().splitlines()[:120]]

garbage = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2),
                    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def mutated_streams(draw) -> list[str]:
    events = [json.loads(json.dumps(e)) for e in draw(st.sampled_from([BASE, RECORDED[:200], RECORDED[200:]]))]
    for _ in range(draw(st.integers(0, 12))):
        if not events:
            break
        index = draw(st.integers(0, len(events) - 1))
        operation = draw(st.sampled_from(["drop", "duplicate", "swap", "corrupt", "delete_key", "retype"]))
        if operation == "drop":
            del events[index]
        elif operation == "duplicate":
            events.insert(index, json.loads(json.dumps(events[index])))
        elif operation == "swap" and index + 1 < len(events):
            events[index], events[index + 1] = events[index + 1], events[index]
        elif operation in ("delete_key", "retype") and isinstance(events[index], dict) and events[index]:
            key = draw(st.sampled_from(sorted(events[index])))
            if operation == "delete_key":
                del events[index][key]
            else:
                events[index][key] = draw(garbage)
        elif operation == "corrupt":
            nested = events[index].get("item") or events[index].get("response")
            if isinstance(nested, dict) and nested:
                nested[draw(st.sampled_from(sorted(nested)))] = draw(garbage)
    frames = [json.dumps(e) for e in events]
    if frames and draw(st.booleans()):
        cut = draw(st.integers(0, len(frames) - 1))
        frames[cut] = frames[cut][: len(frames[cut]) // 2]   # a truncated frame
    return frames


@pytest.mark.timeout(240)   # a hang guard: 400 examples take ~35 s alone on a loaded 2-core machine
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_streams(), st.sampled_from(["proxy", "sidecar", "replay"]), st.randoms(use_true_random=False))
def test_mutated_streams_never_raise_and_invariants_hold(frames, mode, rng) -> None:
    engine = OpenAIEngine([lookup, slow], config=EngineConfig(mode=mode, strict=True), id_prefix="f")
    now = 10.0
    outputs: dict[str, int] = {}
    active: set[str] = set()
    running: list[StartHandler] = []

    def act(actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, SendUpstream):
                event = json.loads(action.frame)
                item = event.get("item") or {}
                if item.get("type") == "function_call_output":
                    outputs[item["call_id"]] = outputs.get(item["call_id"], 0) + 1
                if event["type"] == "response.create":
                    assert not active, f"create while {active} is active"
            elif isinstance(action, StartHandler):
                running.append(action)

    for frame in frames:
        try:
            event = json.loads(frame)
        except ValueError:
            event = None
        if isinstance(event, dict) and isinstance(event.get("response"), dict):
            response_id = event["response"].get("id")
            if event.get("type") == "response.created" and isinstance(response_id, str):
                active.add(response_id)
            elif event.get("type") == "response.done" and isinstance(response_id, str):
                active.discard(response_id)
        act(engine.receive_upstream(frame, now))
        if running and rng.random() < 0.5:
            start = running.pop(rng.randrange(len(running)))
            act(engine.handler_finished(start.call_id, Outcome.returned("ok"), now))
        now += rng.choice([0.0, 0.1, 0.7])
        act(engine.tick(now))
        deadline = engine.next_deadline()
        assert deadline is None or deadline > now, "a tick left its deadline in the past"
    for start in running:
        act(engine.handler_finished(start.call_id, Outcome.raised(RuntimeError("late")), now))
    act(engine.tick(now + 100))
    act(engine.close(now + 100))
    assert all(count == 1 for count in outputs.values()), outputs
    for entry in engine.ledger:
        if entry.owner is Owner.CLIENT:
            assert entry.call_id not in outputs
    assert not [a for a in engine.anomalies if a.internal]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=50), st.text(max_size=50),
                          st.dictionaries(st.text(max_size=10), garbage, max_size=4).map(json.dumps)), max_size=30))
def test_arbitrary_client_frames_never_raise(frames) -> None:
    engine = OpenAIEngine([lookup], config=EngineConfig(mode="proxy", strict=True))
    for frame in frames:
        engine.receive_client(frame, 1.0)
