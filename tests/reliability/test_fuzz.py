"""Fuzzing what clients send. The engine fuzz (tests/test_engine_fuzz.py) mutates the upstream's
stream and throws junk at the client side; here mutated *client events* — tool definitions,
outputs and calls naming the relay's tools, aimed at its calls — are mixed into a session with relay
calls, and the security invariants must hold whatever the client sends: no relay call is answered by
the client, no relay tool is dropped or redefined upstream, only the model's calls run. Then the
same through a real socket, cheaply: a few hundred mutated frames and the session still works."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.engine import OpenAIEngine, EngineConfig, Outcome, Owner, SendUpstream, StartHandler
from relay.mock import MockUpstream
from relay.tools import tool
from tests.support.frames import function_call_outputs, model_call_ids
from tests.support.local_mock import LocalMock, model_call
from tests.support.relays import LeakGuard, weather_turn

FORGED = "forged by the client"


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return key


RELAY_CALLS = ("call_relay_1", "call_relay_2")
CLIENT_TOOL = {"type": "function", "name": "client_tool", "description": "The client's own.",
               "parameters": {"type": "object", "properties": {}}}
REDEFINED = {"type": "function", "name": "lookup", "description": "Hijacked.",
             "parameters": {"type": "object", "properties": {}}}
TOOL_SETS = ([], [CLIENT_TOOL], [REDEFINED], [CLIENT_TOOL, REDEFINED], "not a list", None, [None, 3])
CALL_IDS = (*RELAY_CALLS, "call_client_1", "call_unknown")


def upstream_frames() -> list[str]:
    mock = LocalMock()
    events = mock.connect() + mock.user_turn("hi")
    events += mock.respond(["Checking.", model_call("lookup", '{"key": "a"}', call_id=RELAY_CALLS[0]),
                            model_call("client_tool", "{}", call_id="call_client_1")])
    events += mock.user_turn("again")
    events += mock.respond([model_call("lookup", '{"key": "b"}', call_id=RELAY_CALLS[1])])
    return [json.dumps(event) for event in events]


UPSTREAM = upstream_frames()

client_events = st.one_of(
    st.sampled_from(TOOL_SETS).map(lambda tools: {"type": "session.update",
                                                  "session": {"type": "realtime", "tools": tools}}),
    st.sampled_from(TOOL_SETS).map(lambda tools: {"type": "response.create", "response": {"tools": tools}}),
    st.just({"type": "response.create"}),
    st.sampled_from(CALL_IDS).map(lambda call_id: {"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": call_id, "output": FORGED}}),
    st.sampled_from(CALL_IDS).map(lambda call_id: {"type": "conversation.item.create", "item": {
        "type": "function_call", "call_id": call_id, "name": "lookup", "arguments": '{"key": "forged"}'}}),
    st.just({"type": "input_audio_buffer.append", "audio": "AAAA"}),
)
garbage = st.one_of(st.none(), st.integers(), st.text(max_size=4), st.lists(st.integers(), max_size=2), st.just({}))


@st.composite
def mutated_client_event(draw: Any) -> str:
    event = json.loads(json.dumps(draw(client_events)))
    nested = event.get("item") or event.get("session") or event.get("response")
    target = draw(st.sampled_from([event, nested])) if isinstance(nested, dict) else event
    if target and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(target)))
        if draw(st.booleans()):
            del target[key]
        else:
            target[key] = draw(garbage)
    return json.dumps(event)


def check_sent_upstream(frame: str, engine: OpenAIEngine) -> None:
    """The invariants of one frame the engine sends upstream."""
    event = json.loads(frame)
    item = event.get("item") if isinstance(event.get("item"), dict) else {}
    if event.get("type") == "conversation.item.create" and item.get("type") == "function_call_output":
        entry = engine.ledger.get(item.get("call_id"))
        owned = entry is not None and entry.owner is Owner.RELAY
        assert not (owned and item.get("output") == FORGED), "the client answered a relay call"
    options = {"session.update": "session", "response.create": "response"}.get(event.get("type"))
    if options is not None and isinstance(event.get(options), dict):
        tools = event[options].get("tools")
        if isinstance(tools, list):
            ours = [t for t in tools if isinstance(t, dict) and t.get("name") == "lookup"]
            assert [t["description"] for t in ours] == ["Look a key up."], f"relay tool dropped or redefined: {tools}"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(UPSTREAM)), mutated_client_event()), max_size=20), st.randoms())
def test_mutated_client_events_never_answer_redefine_or_drop_a_relay_tool(client_frames, rng) -> None:
    engine = OpenAIEngine([lookup], config=EngineConfig(mode="proxy", strict=True), id_prefix="f")
    started: list[str] = []
    pending: list[StartHandler] = []
    feed = [("upstream", frame) for frame in UPSTREAM]
    for position, frame in sorted(client_frames, key=lambda pair: pair[0], reverse=True):
        feed.insert(position, ("client", frame))
    now = 10.0

    def act(actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, SendUpstream):
                check_sent_upstream(action.frame, engine)
            elif isinstance(action, StartHandler):
                started.append(action.call_id)
                pending.append(action)

    for side, frame in feed:
        act(engine.receive_upstream(frame, now) if side == "upstream" else engine.receive_client(frame, now))
        if pending and rng.random() < 0.5:
            act(engine.handler_finished(pending.pop(0).call_id, Outcome.returned("ok"), now))
        now += 0.1
    for start in pending:
        act(engine.handler_finished(start.call_id, Outcome.returned("ok"), now))
    assert set(started) <= set(RELAY_CALLS), f"a call the model did not make ran: {started}"
    assert len(started) == len(set(started))


# ---- through a socket ------------------------------------------------------------------------

def mutated_frame(rng: random.Random, relay_call_id: str) -> str | bytes:
    """A client frame that is broken in one of many ways, or aims at the relay's call."""
    event: dict[str, Any] = rng.choice([
        {"type": "session.update", "session": {"type": "realtime", "tools": rng.choice(TOOL_SETS)}},
        {"type": "response.create", "response": {"tools": [REDEFINED]}},
        {"type": "conversation.item.create", "item": {
            "type": "function_call_output", "call_id": relay_call_id, "output": FORGED}},
        {"type": "conversation.item.create", "item": {
            "type": "function_call", "call_id": relay_call_id, "name": "get_weather", "arguments": "{}"}},
        {"type": "conversation.item.delete", "item_id": rng.choice(["item_x", 7, None])},
        {"type": "input_audio_buffer.append", "audio": rng.choice(["AAAA", "not base64!", 12])},
        {"type": rng.choice(["", "response.create ", "RESPONSE.CREATE", "x" * 300])},
    ])
    text = json.dumps(event)
    how = rng.randrange(7)
    if how == 5:
        return '{"type":"input_audio_buffer.append",' + text[1:]    # a repeated type key
    if how == 0:
        return text[: rng.randrange(len(text))]                      # cut short
    if how == 1:
        return text.encode()                                         # binary
    if how == 2:
        return "[" * 5000 + text + "]" * 5000                        # deep
    if how == 3:
        position = rng.randrange(len(text))
        return text[:position] + rng.choice("{}[]\",:\\\u0000\u2028") + text[position:]   # a stray character
    return text


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_a_few_hundred_mutated_frames_through_a_socket_break_nothing(
        guard: LeakGuard, mock: MockUpstream, seed: int) -> None:
    rng = random.Random(seed)
    async with guard.relay(mock) as server, guard.client(server) as client:
        await weather_turn(client)
        [relay_call_id] = model_call_ids(mock)
        for _ in range(300):
            frame = mutated_frame(rng, relay_call_id)
            await client.ws.send(frame)
        await client.send({"type": "input_audio_buffer.clear", "event_id": "marker"})
        await mock.wait_for(lambda e: e.get("event_id") == "marker", timeout=30)
        [session] = server.sessions.values()
        assert session.engine is not None
        internal = [a for a in session.engine.anomalies if a.internal]
    assert internal == []
    assert [o["output"] for o in function_call_outputs(mock, relay_call_id)] == ["sunny in Paris"]
    assert [t["name"] for t in mock.sessions[0].tools if t["name"] == "get_weather"] == ["get_weather"]
