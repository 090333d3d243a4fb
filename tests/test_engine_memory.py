"""The engine's memory in a long session: what it keeps per tool-call turn stays small (it once
kept about 10 KB a turn for the whole session). Bounding the history to a limit is in
test_engine_tools.py."""

from __future__ import annotations

import gc
import json
import sys
import types

from relay.engine import EngineConfig
from relay.tools import tool
from tests.support.engine import EngineDriver
from tests.support.local_mock import model_call


@tool
def lookup_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


def tool_call_turn(harness: EngineDriver) -> None:
    """A user message, a response with a spoken preamble and a relay call, its output and the
    follow-up: one turn of a voice agent that uses a tool."""
    harness.client({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}})
    harness.respond(["Let me check.", model_call("lookup_weather", json.dumps({"city": "Paris"}))])
    harness.run_all()
    if harness.mock.active:
        harness.upstream(harness.mock.finish_response())


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


def test_a_long_session_keeps_only_what_its_conversation_needs() -> None:
    harness = EngineDriver([lookup_weather], config=EngineConfig(mode="proxy", strict=True))
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
