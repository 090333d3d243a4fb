"""Fuzzing the Gemini engine: valid and mutated sessions (dropped, duplicated, swapped, retyped and
truncated messages, both directions, handlers finishing at random) never make it raise, and its
promises hold: at most one final answer per call, none after a cancellation, never an answer
for a client's call, and with tools hidden the client never hears of a relay call."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.engine import EngineConfig, Outcome, SendClient, SendUpstream, StartHandler
from relay.engine.immediate import CANCELLED_BY_SERVER, GeminiEngine
from relay.tools import tool
from tests.support.frames import (
    TURN_COMPLETE,
    cancellation,
    function_call,
    gemini_user_text,
    model_text,
    tool_call,
)


@tool(interruption="cancel")
def lookup(key: str) -> str:
    return key


@tool(scheduling="silent")
def note(text: str) -> str:
    return text


@tool
async def feed(topic: str) -> AsyncIterator[str]:
    yield topic


TOOLS = [lookup, note, feed]
RELAY_IDS = ("r1", "r2", "r3", "r4")

SESSION: list[tuple[str, dict[str, Any]]] = [
    ("client", {"setup": {"model": "m", "tools": [{"functionDeclarations": [{"name": "door"}]}]}}),
    ("upstream", {"setupComplete": {}}),
    ("client", gemini_user_text("hi")),
    ("upstream", {"serverContent": {"inputTranscription": {"text": "hi"}}}),
    ("upstream", model_text("Checking.")),
    ("upstream", tool_call(function_call("r1", "lookup", {"key": "a"}), function_call("c1", "door", {}),
                           function_call("r2", "note", {"text": "x"}))),
    ("client", {"toolResponse": {"functionResponses": [{"id": "c1", "name": "door", "response": {"output": 1}},
                                                       {"id": "r1", "name": "lookup", "response": {}}]}}),
    ("upstream", {"tool_call": {"function_calls": [{"id": "r3", "name": "feed", "args": {"topic": "t"}}]}}),
    ("upstream", cancellation("r1", "c1")),
    ("upstream", {"serverContent": {"modelTurn": {"parts": [{"inlineData": {"data": "AAAA"}}]},
                                    "outputTranscription": {"text": "ok"}}}),
    ("upstream", {"serverContent": {"interrupted": True}}),
    ("upstream", tool_call(function_call("r4", "lookup", {"key": 5}))),
    ("client", {"realtime_input": {"text": "again"}}),
    ("upstream", TURN_COMPLETE),
    ("upstream", {"goAway": {"timeLeft": "1s"}}),
]
garbage = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.lists(st.integers(), max_size=2),
                    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


def _retype(message: dict[str, Any], draw: Any) -> None:
    """Replace one value somewhere in the message (two levels deep) with garbage."""
    target: Any = message
    for _ in range(draw(st.integers(1, 3))):
        if not isinstance(target, dict) or not target:
            return
        key = draw(st.sampled_from(sorted(target)))
        if not isinstance(target[key], (dict, list)) or draw(st.booleans()):
            target[key] = draw(garbage)
            return
        target = target[key] if isinstance(target[key], dict) else {}


@st.composite
def sessions(draw: Any) -> list[tuple[str, str | bytes]]:
    steps = [(side, json.loads(json.dumps(message))) for side, message in SESSION]
    for _ in range(draw(st.integers(0, 10))):
        index = draw(st.integers(0, len(steps) - 1))
        operation = draw(st.sampled_from(["drop", "duplicate", "swap", "retype"]))
        if operation == "drop" and len(steps) > 1:
            del steps[index]
        elif operation == "duplicate":
            steps.insert(index, (steps[index][0], json.loads(json.dumps(steps[index][1]))))
        elif operation == "swap" and index + 1 < len(steps):
            steps[index], steps[index + 1] = steps[index + 1], steps[index]
        elif operation == "retype":
            _retype(steps[index][1], draw)
    frames: list[tuple[str, str | bytes]] = []
    for side, message in steps:
        text = json.dumps(message)
        frames.append((side, text.encode() if side == "upstream" and draw(st.booleans()) else text))
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(frames) - 1))
        frames[cut] = (frames[cut][0], frames[cut][1][: len(frames[cut][1]) // 2])
    return frames


def relay_answers(frame: str | bytes) -> list[dict[str, Any]]:
    """The answers to relay calls in a frame sent upstream (forwarded garbage holds none)."""
    try:
        message = json.loads(frame)
        answers = message["toolResponse"]["functionResponses"]
    except (ValueError, KeyError, TypeError):
        return []
    return [a for a in answers if isinstance(a, dict) and a.get("id") in RELAY_IDS] if isinstance(answers, list) else []


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions(), st.booleans(), st.randoms(use_true_random=False))
def test_mutated_sessions_never_raise_and_keep_the_promises(frames: list[tuple[str, str | bytes]], hide: bool,
                                                            random: Any) -> None:
    engine = GeminiEngine(TOOLS, config=EngineConfig(strict=True, hide_tool_events=hide), id_prefix="f")
    running: list[str] = []
    finals: dict[str, int] = {}
    answered_after_cancel: list[str] = []
    cancelled: set[str] = set()
    to_client: list[str | bytes] = []
    announced_at: dict[str, int] = {}   # relay call id -> frames the client had received by then
    now = 0.0

    def act(actions: list[Any], *, forwarding: bool = False) -> None:
        """`forwarding`: the actions answer a client frame, so what goes up is the client's."""
        for action in actions:
            if isinstance(action, StartHandler):
                running.append(action.call_id)
            elif isinstance(action, SendClient):
                to_client.append(action.frame)
            elif isinstance(action, SendUpstream) and not forwarding:
                for answer in relay_answers(action.frame):
                    if answer["id"] in cancelled:
                        answered_after_cancel.append(answer["id"])
                    if answer.get("willContinue") is not True:
                        finals[answer["id"]] = finals.get(answer["id"], 0) + 1

    for side, frame in frames:
        now += 0.01
        if side == "upstream":
            known, before = {e.call_id for e in engine.ledger}, len(to_client)
            act(engine.receive_upstream(frame, now))
            cancelled.update(e.call_id for e in engine.ledger if e.skip_reason == CANCELLED_BY_SERVER)
            for entry in engine.ledger:
                if entry.relay_owned and entry.call_id not in known:
                    announced_at[entry.call_id] = before
        else:
            act(engine.receive_client(frame, now), forwarding=True)
        while running and random.random() < 0.5:
            call_id = running.pop(random.randrange(len(running)))
            outcome = random.choice([Outcome.returned("done"), Outcome.raised(ValueError("x")), Outcome.ended()])
            if random.random() < 0.3:
                act(engine.handler_yielded(call_id, "partial", now))
            act(engine.handler_finished(call_id, outcome, now))
    act(engine.tick(now + 1000))
    act(engine.close(now + 1000, "done"))

    assert all(count == 1 for count in finals.values()), finals
    assert answered_after_cancel == []
    for entry in engine.ledger:
        if not entry.relay_owned:
            assert entry.call_id not in finals
    if hide:
        for call_id, start in announced_at.items():
            seen = b"".join(f if isinstance(f, bytes) else f.encode() for f in to_client[start:])
            assert f'"{call_id}"'.encode() not in seen, call_id
