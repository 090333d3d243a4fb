"""docs/adding-a-provider.md, followed with a toy provider of the OpenAI family defined here: its
own name, key variable and key header, endpoint, client path, a server event of its own that
passes through unparsed (`toy.heartbeat`, as xAI's `ping`) and an event it names its own way
(`conversation.item.appended` for GA's `conversation.item.added`). Registered (the one registry
line, made here with monkeypatch), it is found by name and by URL, an engine session on it runs a
tool call against the mock speaking its wire, and a recording made on it replays and exports."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import anyio
import pytest

from relay.dialects import DIALECTS, OPENAI, OpenAIFamily, dialect_of_path, infer_dialect, resolve_dialect
from relay.dialects.openai import UPSTREAM_PASSTHROUGH
from relay.edges.upstream import default_upstream, key_from_environment
from relay.offline.export import export_recording
from relay.recording.reader import read_recording
from relay.testing import replay
from relay.tools import tool
from tests.support.engine import EngineDriver
from tests.support.local_mock import model_call
from tests.support.peers import record_session
from tests.support.tools import get_weather_data

# Step 1: the provider's module (relay/dialects/toy.py in a real change).
TOY = OpenAIFamily(
    name="toy",
    key_env=("TOY_API_KEY",),
    auth_header="x-toy-key",
    default_url="wss://realtime.toy.example/v2/live",
    upstream_hosts=("realtime.toy.example",),
    client_paths=frozenset({"/v2/live"}),
    client_path="/v2/live",
    client_key_headers=("x-toy-key",),
    client_auth_forms="Authorization: Bearer, x-toy-key, or the relay token subprotocol",
    call_sideband=False,
    renamed_events={"conversation.item.appended": "conversation.item.added"},
    upstream_passthrough=UPSTREAM_PASSTHROUGH | {"toy.heartbeat"},
)
HEARTBEAT = '{"type":"toy.heartbeat","event_id":"hb_1","at":1764600000000}'


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 2: the registry line (`DIALECTS` in relay/dialects/__init__.py)."""
    monkeypatch.setitem(DIALECTS, TOY.name, TOY)


@tool
def lookup_order(order_id: str) -> dict:
    if order_id == "missing":
        raise LookupError("no such order")
    return {"order_id": order_id, "status": "shipped"}


def test_it_is_found_by_name_and_by_url_and_reached_with_its_own_key(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_dialect("toy", "wss://relay.example/anything") is TOY
    assert resolve_dialect(None, "wss://realtime.toy.example/v2/live?model=toy-1") is TOY
    assert infer_dialect("wss://api.openai.com/v1/realtime") is OPENAI
    assert default_upstream("toy") == "wss://realtime.toy.example/v2/live"
    # on a host no provider has (the mock's), its endpoint's path says it; a provider registered
    # later with the same path (as xAI borrows OpenAI's /v1/realtime) does not take it
    assert resolve_dialect(None, "ws://127.0.0.1:8765/v2/live") is TOY
    monkeypatch.setitem(DIALECTS, "toy-too", dataclasses.replace(TOY, name="toy-too", upstream_hosts=("toy.example",)))
    assert dialect_of_path("ws://127.0.0.1:8765/v2/live") is TOY
    assert dialect_of_path("ws://127.0.0.1:8765/v1/realtime") is OPENAI
    assert dialect_of_path("ws://127.0.0.1:8765/realtime") is None
    assert key_from_environment(TOY, {"OPENAI_API_KEY": "not this", "TOY_API_KEY": "toy-key"}) == "toy-key"
    assert TOY.key_headers("toy-key") == {"x-toy-key": "toy-key"}


def test_a_session_runs_a_tool_call_on_its_wire_and_passes_its_own_event_untouched() -> None:
    h = EngineDriver([get_weather_data], dialect=TOY)
    decoded = h.spy_decoded()
    h.connect()
    h.upstream(HEARTBEAT)
    assert h.client_frames[-1] is HEARTBEAT and HEARTBEAT not in decoded   # forwarded, never parsed
    h.upstream(h.mock.user_turn("weather in Paris?"))
    [user_item] = [e["item"] for e in h.to_client if e["type"] == "conversation.item.appended"]
    assert h.engine.conversation.order == [user_item["id"]]

    h.respond([model_call("get_weather", json.dumps({"city": "Paris"}), "call_paris")])
    h.run_all()
    output = h.output_for("call_paris")
    assert json.loads(output["output"])["city"] == "Paris"
    assert len(h.creates) == 1 and h.mock.active is None   # the follow-up went and was answered
    # the mock echoed the relay's output as `conversation.item.appended`: read as `added`, the
    # echo was placed where it belongs and hidden from the client like any relay tool's item
    assert h.engine.conversation.order[-3:-1] == [h.engine.ledger.get("call_paris").item_id, output["id"]]
    assert not [e for e in h.to_client if (e.get("item") or {}).get("id") == output["id"]]
    assert h.engine.anomalies == []


def test_a_recording_made_on_it_replays_and_exports(tmp_path: Path) -> None:
    tools = [get_weather_data, lookup_order]
    path = anyio.run(functools.partial(record_session, tmp_path, tools, dialect=TOY))
    recording = read_recording(path)
    assert recording.dialect is TOY
    assert any(f.event and f.event.get("type") == "conversation.item.appended" for f in recording.frames)

    result = replay(path, tools)
    assert result.ok, [d.describe() for d in result.divergences]
    assert [c.outcome for c in result.calls] == ["ok", "ok", "error"]

    exported = export_recording(path, "openai-chat")
    answers = [m for m in exported.document["messages"] if m["role"] == "tool"]
    assert len(answers) == 3 and "no such order" in answers[2]["content"]
