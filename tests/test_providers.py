"""xAI's Grok Voice Agent and Azure's Voice Live: each found by name and by URL, each quirk of its
server (relay/mock/quirks.py, docs/providers.md) met by the engine against the mock speaking it, a
recording made on it replayed, exported and shown in the inspector, and `relay serve` in front of
it on real sockets. The promise tests of the scripted harness run against both too
(tests/test_scripted.py)."""

from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from openai import AsyncOpenAI

from relay.dialects import FOUNDRY, VOICE_LIVE, XAI, infer_dialect, resolve_dialect
from relay.edges.upstream import default_upstream, key_from_environment
from relay.inspector.model import build_model
from relay.mock import MockUpstream
from relay.mock.handshake import Refusal, route_handshake
from relay.mock.quirks import quirks_of
from relay.offline.export import export_recording
from relay.recording.reader import read_recording
from relay.session.access import presents_token
from relay.testing import replay
from relay.tools import tool
from tests.support.clients import TIMEOUT, realtime_client
from tests.support.engine import EngineDriver
from tests.support.frames import user_text
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.local_mock import model_call
from tests.support.peers import record_session
from tests.support.relays import relay_for, sidecar_on
from tests.support.tools import WEATHER_SCRIPT, get_weather_data

PROVIDERS = [XAI, VOICE_LIVE]
WEATHER = model_call("get_weather", json.dumps({"city": "Paris"}), "call_paris")


@tool
def lookup_order(order_id: str) -> dict:
    if order_id == "missing":
        raise LookupError("no such order")
    return {"order_id": order_id, "status": "shipped"}


@tool
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny and 21 degrees in {city}"


# ---- found, reached ------------------------------------------------------------------------------
def test_both_are_found_by_name_and_url_and_reached_with_their_own_keys() -> None:
    assert resolve_dialect(None, "wss://api.x.ai/v1/realtime?model=grok-voice-latest") is XAI
    assert default_upstream("xai") == "wss://api.x.ai/v1/realtime"
    assert key_from_environment(XAI, {"OPENAI_API_KEY": "no", "XAI_API_KEY": "xai-key"}) == "xai-key"
    assert XAI.key_headers("xai-key") == {"Authorization": "Bearer xai-key"}
    for url in ("wss://res.services.ai.azure.com/voice-live/realtime?api-version=2026-07-15&model=gpt-realtime",
                "wss://res.cognitiveservices.azure.com/voice-live/realtime?api-version=2025-10-01",
                "wss://westus2.api.cognitive.microsoft.com/voice-live/realtime?api-version=2026-07-15"):
        assert infer_dialect(url) is VOICE_LIVE, url
    assert infer_dialect("wss://res.services.ai.azure.com/voice-agent/realtime") is FOUNDRY
    assert key_from_environment(VOICE_LIVE, {"AZURE_VOICELIVE_API_KEY": "vl-key"}) == "vl-key"
    assert VOICE_LIVE.key_headers("vl-key") == {"api-key": "vl-key"} and VOICE_LIVE.default_url is None


def test_an_xai_browser_client_may_present_the_relay_token_as_its_client_secret_subprotocol() -> None:
    offered = [("Sec-WebSocket-Protocol", f"xai-client-secret.{RELAY_TOKEN}")]
    assert presents_token(offered, "/v1/realtime", RELAY_TOKEN, XAI)
    assert not presents_token(offered, "/v1/realtime", RELAY_TOKEN, VOICE_LIVE)
    assert presents_token([], f"/voice-live/realtime?api-key={RELAY_TOKEN}", RELAY_TOKEN, VOICE_LIVE)


def test_the_mock_answers_their_handshakes_as_they_do() -> None:
    def route(dialect: str, target: str, offered: tuple[str, ...] = (), **headers: str) -> Any:
        return route_handshake(dialect, "the-key", target, headers, offered, lambda call_id: None)

    assert route("xai", "/v1/realtime?model=grok-voice-latest", ("xai-client-secret.the-key",)).auth == "subprotocol"
    assert isinstance(route("xai", "/v1/realtime?model=m", ("xai-client-secret.wrong",)), Refusal)
    live = route("voicelive", "/voice-live/realtime?api-version=2026-07-15&model=m&api-key=the-key")
    assert (live.auth, live.beta) == ("api-key-query", True)
    assert route("voicelive", "/voice-live/realtime?model=m", **{"api-key": "the-key"}).status == 400
    assert route("voicelive", "/v1/realtime?model=m", **{"api-key": "the-key"}).status == 404


# ---- xAI's quirks ---------------------------------------------------------------------------------
@pytest.mark.parametrize("opening", [("session.created", "conversation.created"),
                                     ("conversation.created", "session.created")], ids=["session-first",
                                                                                        "conversation-first"])
def test_xai_the_relays_session_update_waits_for_both_opening_events(opening: tuple[str, ...]) -> None:
    h = EngineDriver([get_weather_data], dialect=XAI, quirks=replace(quirks_of("xai"), opening=opening))
    first, second, ping = h.mock.connect()
    assert [first["type"], second["type"], ping["type"]] == [*opening, "ping"]
    h.upstream(first)
    assert h.sent == []
    h.upstream([second, ping])
    [update] = h.sent
    assert update["type"] == "session.update" and "type" not in update["session"]   # xAI's flat session
    assert [t["name"] for t in update["session"]["tools"]] == ["get_weather"]


def test_xai_pings_reach_the_client_unparsed_and_a_call_is_answered_after_its_response_ends() -> None:
    h = EngineDriver([get_weather_data], dialect=XAI)
    decoded = h.spy_decoded()
    h.connect()
    pings = [f for f in h.client_frames if '"type": "ping"' in f]
    assert len(pings) == 1 and not set(pings) & set(decoded)
    h.upstream(h.mock.user_turn("weather in Paris?"))
    # a spoken preamble and the call in one response; the call's item is added twice (role "tool")
    # and joins the conversation only at response.done: an output before it would be refused
    h.respond(["Let me check.", WEATHER], finish=False)
    h.run_all()
    assert h.outputs == []                             # decided, held until the response is done
    h.upstream(h.mock.finish_response())
    assert json.loads(h.output_for("call_paris")["output"])["city"] == "Paris"
    assert len(h.creates) == 1 and h.mock.errors == [] and h.engine.anomalies == []
    assert not [e for e in h.to_client if "call_paris" in json.dumps(e)]   # hidden in every shape


def test_xai_an_output_sent_before_the_response_ends_is_refused_as_xai_refuses_it() -> None:
    h = EngineDriver([], dialect=XAI)
    h.connect()
    h.respond([WEATHER], finish=False)
    refused = h.mock.receive(json.dumps({"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "call_paris", "output": "early"}}))
    assert [e["error"]["code"] for e in refused] == ["invalid_tool_call_id"]


def test_xai_a_call_only_in_response_done_runs_once_hidden_and_gets_one_follow_up() -> None:
    h = EngineDriver([get_weather_data], dialect=XAI, quirks=replace(quirks_of("xai"), calls="in_done"))
    h.connect()
    h.respond(["Let me check.", WEATHER, model_call("open_door", '{"door":"front"}', "call_door")])
    [done] = [e for e in h.to_client if e["type"] == "response.done"]
    assert [o["type"] for o in done["response"]["output"]] == ["message", "function_call"]   # the client's call
    assert list(h.started) == ["call_paris"]
    h.run_all()
    assert [o["item"]["call_id"] for o in h.outputs] == ["call_paris"]
    assert h.creates == []                             # the client answers its call and asks itself
    assert h.engine.anomalies == []


def test_xai_provider_side_tool_items_pass_through_untouched() -> None:
    h = EngineDriver([get_weather_data], dialect=XAI)
    h.connect()
    h.client_frames.clear()
    frames = [json.dumps(e) for e in (
        {"type": "response.output_item.added", "response_id": "r1", "output_index": 0,
         "item": {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}},
        {"type": "response.mcp_call.completed", "item_id": "mcp_1", "output_index": 1},
        {"type": "conversation.item.input_audio_transcription.updated", "item_id": "u1", "transcript": "wea"})]
    for frame in frames:
        h.upstream(frame)
    assert h.client_frames == frames and h.started == {}


# ---- Voice Live's quirks ---------------------------------------------------------------------------
def test_voice_live_the_relays_creates_never_cancel_a_response_in_progress() -> None:
    h = EngineDriver([get_weather_data], dialect=VOICE_LIVE)
    h.connect()
    h.respond([WEATHER])
    h.run_all()
    [create] = h.creates
    assert create["response"]["cancel_previous"] is False
    assert [r.status for r in h.mock.responses] == ["completed", "completed"]
    [output] = h.outputs
    assert set(output["item"]) == {"type", "id", "call_id", "output", "status"}   # no Foundry fields
    # the mock plays Voice Live's default: a create without `cancel_previous: false` cancels
    h.respond(["A long answer."], finish=False)
    h.mock.receive(json.dumps({"type": "response.create"}))
    assert [r.status for r in h.mock.responses[-2:]] == ["cancelled", "completed"]


def test_voice_live_session_options_pass_through_and_its_own_events_reach_the_client() -> None:
    h = EngineDriver([get_weather_data], dialect=VOICE_LIVE)
    h.connect()
    options = {"turn_detection": {"type": "azure_semantic_vad", "remove_filler_words": True},
               "input_audio_noise_reduction": {"type": "azure_deep_noise_suppression"},
               "input_audio_echo_cancellation": {"type": "server_echo_cancellation"}}
    h.client({"type": "session.update", "session": options})
    [_, update] = h.sent_of("session.update")
    assert {k: update["session"][k] for k in options} == options
    assert h.mock.errors == []
    timestamp = json.dumps({"type": "response.audio_timestamp.delta", "response_id": "r", "item_id": "i",
                            "output_index": 0, "content_index": 0, "audio_offset_ms": 490, "audio_duration_ms": 387,
                            "text": "end", "timestamp_type": "word"})
    warning = json.dumps({"type": "warning", "event_id": "e", "warning": {"message": "slow", "code": "w"}})
    h.upstream(timestamp)
    h.upstream(warning)
    assert h.client_frames[-2:] == [timestamp, warning]


# ---- recording, replay, export, inspector --------------------------------------------------------------
@pytest.mark.parametrize("dialect", PROVIDERS, ids=lambda d: d.name)
def test_a_recording_on_it_replays_exports_and_shows_in_the_inspector(tmp_path: Path, dialect) -> None:
    tools = [get_weather_data, lookup_order]
    path = anyio.run(functools.partial(record_session, tmp_path, tools, dialect=dialect))
    recording = read_recording(path)
    assert recording.dialect is dialect
    result = replay(path, tools)
    assert result.ok, [d.describe() for d in result.divergences]
    assert [c.outcome for c in result.calls] == ["ok", "ok", "error"]
    answers = [m for m in export_recording(path, "openai-chat").document["messages"] if m["role"] == "tool"]
    assert len(answers) == 3 and "no such order" in answers[2]["content"]
    summary = build_model(recording, strict=True).snapshot()["summary"]
    assert {name: (t["calls"], t["errors"], t["unanswered"]) for name, t in summary["tools"].items()} == {
        "get_weather": (2, 0, 0), "lookup_order": (1, 1, 0)}
    assert summary["anomalies"] == 0


# ---- relay serve in front of each, on real sockets ------------------------------------------------------
async def test_relay_serve_in_front_of_xai_with_the_openai_sdk() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, dialect="xai", api_key=PROVIDER_KEY) as mock, \
            relay_for(mock, dialect="xai", tools=[get_weather]) as server:
        client = AsyncOpenAI(api_key=RELAY_TOKEN, websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
        seen: list[dict] = []
        async with client.realtime.connect(model="grok-voice-latest") as connection:
            await connection.conversation.item.create(item={
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "What's the weather in Paris?"}]})
            await connection.response.create()
            with anyio.fail_after(TIMEOUT):
                while not any(e["type"] == "response.done" and "sunny" in json.dumps(e) for e in seen):
                    seen.append(json.loads(await connection.recv_bytes()))
    assert [e["type"] for e in seen[:3]] == ["session.created", "conversation.created", "ping"]
    assert not any("get_weather" in json.dumps(e) for e in seen)
    outputs = [r.event for r in mock.received if r.event["type"] == "conversation.item.create"
               and r.event["item"]["type"] == "function_call_output"]
    assert len(outputs) == 1 and not [r for r in mock.sent if r.event["type"] == "error"]
    connection_seen = mock.sessions[0].connections[0]
    assert connection_seen.auth == "bearer"


async def test_relay_serve_in_front_of_voice_live_with_its_key_header() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, dialect="voicelive", api_key=PROVIDER_KEY) as mock, \
            relay_for(mock.url, dialect="voicelive", tools=[get_weather]) as server, \
            realtime_client(server, path="/voice-live/realtime?api-version=2026-07-15&model=gpt-realtime",
                            token=None, headers={"api-key": RELAY_TOKEN}) as client:
        await client.wait_type("session.created")
        await client.send(user_text("weather in Paris?"))
        await client.send({"type": "response.create"})
        await client.wait_for(lambda e: e["type"] == "response.done" and "sunny" in json.dumps(e))
    connection = mock.sessions[0].connections[0]
    assert connection.auth == "api-key" and connection.query["api-version"] == "2026-07-15"
    creates = [r.event for r in mock.received if r.event["type"] == "response.create"]
    assert [c.get("response", {}).get("cancel_previous") for c in creates] == [None, False]
    assert not any(e["type"] == "error" for e in client.events)
    assert not any("get_weather" in json.dumps(e) for e in client.events)


async def test_relay_attach_joins_an_xai_sip_call_by_its_call_id() -> None:
    async with MockUpstream(script=WEATHER_SCRIPT, dialect="xai") as mock:
        call_id = mock.create_call()   # xAI's SIP flow: no accept call, the sideband configures the session
        session = mock.find_session(call_id)
        async with sidecar_on(mock, call_id, [get_weather], dialect="xai", declare_tools=True) as (sidecar, frames):
            await mock.wait_for(lambda e: e["type"] == "session.update")   # after the opening's two events
            await mock.user_turn(session, "What's the weather in Paris?")
            await mock.wait_for_sent(lambda e: e["type"] == "response.done" and "sunny" in json.dumps(e))
    [update] = [r.event for r in mock.received if r.event["type"] == "session.update"]
    assert "type" not in update["session"] and [t["name"] for t in session.tools] == ["get_weather"]
    outputs = [r.event["item"]["call_id"] for r in mock.received if r.event["type"] == "conversation.item.create"]
    assert len(outputs) == 1 and not [r for r in mock.sent if r.event["type"] == "error"]
