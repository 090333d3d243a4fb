"""GPT-Live's Decisions delegation through `relay serve` against the project's GPT-Live mock, with
the official SDK's `client.live.connect()` pointed at the relay, unchanged.

The relay runs tools (and a delegate) for other sessions; a Decisions session has no tool channel,
so the relay adds nothing to it (the mock's strict `session.start` would refuse a tool), sends
nothing of its own, and passes the Decision API's answers, the client's Decision inputs (its own
function calls and their outputs among them) and the trigger's decisions both ways. Every event
the client receives is read with the SDK's server union."""

from __future__ import annotations

import base64
from typing import Any

import anyio
from openai import AsyncOpenAI
from openai.types.live import ServerEvent
from pydantic import TypeAdapter

from relay.mock import LiveOptions, MockScript, MockUpstream, Rule, ToolCall
from relay.mock.live_config import LiveRefusal, start_config, updated_config
from relay.tools import Delegation, ToolResult, delegate, tool
from tests.support.clients import TIMEOUT
from tests.support.keys import RELAY_TOKEN
from tests.support.relays import relay_for

SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ServerEvent)
AUDIO = base64.b64encode(bytes(4800)).decode()   # 100 ms of PCM16 at 24 kHz
SCRIPT = MockScript(rules=[Rule(match="person", calls=[ToolCall(name="transfer", arguments={})])])
QUESTIONS = [{"type": "predicate", "name": "wants_human", "instructions": "Does the caller ask for a person?"},
             {"type": "choice", "name": "department", "instructions": "Which department?",
              "choices": [{"value": "sales"}, {"value": "support"}]}]
DECISIONS = {"type": "decisions", "decisions": {"model": "gpt-5-mini", "questions": QUESTIONS}}
TRIGGERS = [{"type": "decisions", "event_type": "session.input_transcript.delta",
             "decisions": {"questions": [{"type": "predicate", "name": "angry", "instructions": "Is the caller angry?"}]}}]


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny in {city}"


@delegate(timeout=5)
def assistant(delegation: Delegation) -> ToolResult:
    """Answers client delegations (never a Decisions one)."""
    return ToolResult(message="not for Decisions")


async def test_a_decisions_session_through_serve_with_the_sdk() -> None:
    got: list[Any] = []
    async with MockUpstream(script=SCRIPT, dialect="live") as mock:
        mock.live_options = LiveOptions(decision_answers={"wants_human": 0.95, "department": "support", "angry": 0.1})
        async with relay_for(mock, path="/v1/live/sessions", dialect="live", tools=[get_weather, assistant]) as server:
            client = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
            async with client.live.connect() as connection:
                await connection.send({"type": "session.start", "session": {
                    "model": "gpt-live-1", "delegation": DECISIONS, "triggers": TRIGGERS}})

                async def until(kind: str, count: int = 1) -> None:
                    while sum(event.type == kind for event in got) < count:
                        got.append(SERVER_EVENT.validate_json(await connection.recv_bytes()))

                with anyio.fail_after(TIMEOUT):
                    await until("session.started")
                    await connection.send({"type": "session.input_audio.append", "audio": AUDIO})
                    await mock.user_turn(mock.sessions[-1], "Can I talk to a person?")
                    await until("session.delegation.created")
                    delegation_id = next(e for e in got if e.type == "session.delegation.created").delegation.id
                    while not any(e.type == "decision.event" and e.delegation_id == delegation_id for e in got):
                        await until("decision.event", sum(e.type == "decision.event" for e in got) + 1)
                    # the client acts on the answers itself, and records what it did for later decisions
                    await connection.decision.item.create(event_id="c_call", item={
                        "type": "function_call", "call_id": "call_t1", "name": "transfer", "arguments": "{}"})
                    await connection.decision.item.create(event_id="c_out", item={
                        "type": "function_call_output", "call_id": "call_t1", "output": "transferred to support"})
                    await until("decision.item.created", 2)
                    before = sum(e.type == "decision.event" for e in got)
                    await connection.decision.create(event_id="c_decide")
                    await until("decision.event", before + 1)
                    await connection.send({"type": "session.close"})
                    await until("session.closed")
            received = [record.event for record in mock.received]
            refused = [record.event for record in mock.sent if record.event["type"] == "error"]

    assert refused == [], "the mock refused something the relay sent"
    start = received[0]
    assert start["session"]["delegation"] == DECISIONS and "tools" not in str(start), "nothing added to the session"
    assert [e["type"] for e in received] == [
        "session.start", "session.input_audio.append", "decision.item.create", "decision.item.create",
        "decision.create", "session.close"], "the relay sends nothing of its own"
    (created,) = [e for e in got if e.type == "session.delegation.created"]
    assert created.delegation.target == "decisions"
    decisions = [e for e in got if e.type == "decision.event"]
    (delegated,) = [e for e in decisions if e.delegation_id == delegation_id]
    answers = {answer.name: answer for answer in delegated.event.decision.answers}
    assert answers["wants_human"].probability == 0.95 and answers["department"].choice == "support"
    triggered = [e for e in decisions if e.trigger_id is not None]
    assert triggered and all(e.source_event_type == "session.input_transcript.delta" and e.source_event_id
                             for e in triggered)
    assert [e.delegation_id for e in decisions if e.trigger_id is None] == [delegation_id, None], \
        "one decision for the delegation, one for decision.create"
    stored = [e.item for e in got if e.type == "decision.item.created"]
    assert [(item.type, item.call_id) for item in stored] == [("function_call", "call_t1"),
                                                              ("function_call_output", "call_t1")]
    assert all(item.id for item in stored)


def test_the_mock_checks_triggers_strictly() -> None:
    """A trigger is `{"type": "decisions", "event_type": <a transcript delta>, "decisions":
    {"questions"}}`, at most one per event type; anything else is refused as the service does."""
    session = {"model": "gpt-live-1", "delegation": DECISIONS, "triggers": TRIGGERS}
    config = start_config(session)
    assert config["triggers"] == TRIGGERS
    bad = [[{**TRIGGERS[0], "event_type": "session.output_audio.delta"}], [TRIGGERS[0], TRIGGERS[0]],
           [{**TRIGGERS[0], "model": "x"}], [{**TRIGGERS[0], "type": "responses"}], "all",
           [{**TRIGGERS[0], "decisions": {"questions": [{"type": "vote"}]}}]]
    for triggers in bad:
        for attempt in (lambda: start_config({**session, "triggers": triggers}),
                        lambda: updated_config(config, {"triggers": triggers})):
            try:
                attempt()
            except LiveRefusal as refusal:
                assert refusal.param is not None and refusal.param.startswith("session.triggers")
            else:
                raise AssertionError(f"accepted {triggers!r}")
    assert updated_config(config, {"triggers": []})["triggers"] == []
