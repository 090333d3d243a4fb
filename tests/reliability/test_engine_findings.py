"""Engine behaviour the reliability work ran into, stated as the behaviour expected (xfail strict
until the engine is fixed; `relay/engine/` belongs to the lead). The first finding, frames that
smuggled events past the engine's checks with a repeated `type` key, is fixed: its tests are in
test_abuse.py."""

from __future__ import annotations

import gc
import json
import sys
import types

import pytest

from relay.engine import EngineConfig
from relay.tools import tool
from tests.fakeserver import Call
from tests.harness import Harness


@tool
def lookup_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


def tool_call_turn(harness: Harness) -> None:
    """A user message, a response with a spoken preamble and a relay call, its output and the
    follow-up: one turn of a voice agent that uses a tool."""
    harness.client({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}})
    harness.respond(["Let me check.", Call("lookup_weather", json.dumps({"city": "Paris"}))])
    harness.run_all()
    if harness.server.active:
        harness.upstream(harness.server.finish_response())


def retained_bytes(root: object) -> int:
    """Bytes of everything reachable from `root` (code, classes and modules aside)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType, types.CodeType)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


@pytest.mark.xfail(strict=True, reason="engine finding: about 10 KB of engine state per tool-call turn stays "
                                       "for the whole session (whole parsed event dicts in the conversation, "
                                       "per-event bookkeeping never pruned), so a relay's memory grows with "
                                       "its sessions' length: the 200-session soak grows 50% from 20 s to 60 s")
def test_a_long_session_keeps_only_what_its_conversation_needs() -> None:
    harness = Harness([lookup_weather], config=EngineConfig(mode="proxy", strict=True))
    harness.connect()
    for _ in range(20):
        tool_call_turn(harness)
    before = retained_bytes(harness.engine)
    turns = 200
    for _ in range(turns):
        tool_call_turn(harness)
    growth = retained_bytes(harness.engine) - before
    # five items (user message, preamble, call, output, answer), a call, two responses: compactly
    # a few hundred bytes each
    assert growth / turns < 4096
