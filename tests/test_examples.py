"""The examples run: voice_tools.py (every voice-aware feature) and tools.py (the demo's tools)
behind the real async edge, against the mock upstream in-process."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from relay.engine import OpenAIEngine, EngineConfig
from relay.mock import ToolCall
from relay.session.loop import SessionLoop
from relay.tools import ToolRegistry
from tests.support.local_mock import LocalMock, model_call
from tests.support.peers import MockPeer

EXAMPLES = Path(__file__).resolve().parents[1] / "relay" / "examples"


def outputs(peer: MockPeer) -> dict[str, str]:
    return {f["item"]["call_id"]: f["item"]["output"] for f in peer.frames
            if f["type"] == "conversation.item.create" and f["item"]["type"] == "function_call_output"}


async def run_calls(tools_file: str, calls: list[ToolCall], *, expect_outputs: int):
    mock = LocalMock()
    peer = MockPeer(mock)
    registry = ToolRegistry.load([str(EXAMPLES / tools_file)])
    engine = OpenAIEngine(registry, config=EngineConfig(mode="sidecar", declare_tools=False))
    loop = SessionLoop(engine, upstream=peer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(loop.run)
        peer.emit(mock.connect() + mock.user_turn("hello") + mock.respond(calls))
        await peer.wait_until(lambda p: len(outputs(p)) >= expect_outputs
                              and not engine.ledger.unanswered() and mock.active is None)
        peer.hang_up()
    return engine, peer, mock


async def test_voice_tools_example_uses_every_feature() -> None:
    calls = [model_call("update_address", '{"street":"1 Main St","city":"Lyon"}'),
             model_call("check_refund", '{"order_id":"A1005"}'),
             model_call("log_sentiment", '{"score":0.8}'),
             model_call("search_catalog", '{"query":"kettle"}'),
             model_call("track_parcel", '{"tracking_number":"ZX9"}'),
             model_call("fraud_alert", '{"account":"77"}')]
    engine, peer, mock = await run_calls("voice_tools.py", calls, expect_outputs=6)
    by_name = {e.name: e for e in engine.ledger}
    assert json.loads(outputs(peer)[by_name["update_address"].call_id])["saved"] is True
    assert by_name["check_refund"].message.startswith("Good news")
    assert by_name["update_address"].message == "I've updated your address."
    assert by_name["log_sentiment"].scheduling == "silent"
    assert by_name["fraud_alert"].scheduling == "interrupt"
    assert len(json.loads(outputs(peer)[by_name["search_catalog"].call_id])) == 2
    assert json.loads(outputs(peer)[by_name["track_parcel"].call_id])["status"] == "at the depot"
    assert len(by_name["track_parcel"].updates) == 2
    # one follow-up for the batch (with the spoken messages), then one per streaming update;
    # the on_start filler is either said before the result or dropped because the result won
    follow_ups = [f for f in peer.frames if f["type"] == "response.create"
                  and f["response"]["metadata"]["relay"] == "follow_up"]
    assert follow_ups and "Good news" in follow_ups[0]["response"]["instructions"]
    assert not mock.errors


async def test_demo_tools_example() -> None:
    calls = [model_call("get_weather", '{"city":"Paris"}'), model_call("lookup_order", '{"order_id":"a1001"}'),
             model_call("lookup_order", '{"order_id":"Z9"}'),
             model_call("search_flights", '{"origin":"Paris","destination":"Rome"}')]
    engine, peer, mock = await run_calls("tools.py", calls, expect_outputs=4)
    results = [outputs(peer)[e.call_id] for e in engine.ledger]
    assert json.loads(results[0])["condition"] == "light rain"
    assert json.loads(results[1])["status"] == "shipped"
    assert json.loads(results[2]) == {"error": "LookupError: order Z9 not found"}
    assert len(json.loads(results[3])["flights"]) == 2
    entries = list(engine.ledger)
    assert entries[2].message.startswith("I couldn't find that order")
    assert not mock.errors
