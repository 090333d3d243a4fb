"""docs/adding-a-provider.md, followed twice.

A provider of an existing family: a toy provider of the OpenAI family defined here: its
own name, key variable and key header, endpoint, client path, a server event of its own that
passes through unparsed (`toy.heartbeat`, as xAI's `ping`) and an event it names its own way
(`conversation.item.appended` for GA's `conversation.item.added`). Registered (the one registry
line, made here with monkeypatch), it is found by name and by URL, an engine session on it runs a
tool call against the mock speaking its wire, and a recording made on it replays and exports.

A new wire family: the toy wire of tests/support/toy.py (one module: its dialect and its codec),
registered the same way, runs a relay tool through a `SessionLoop` over in-memory transports (the
call answered exactly once, a client's own call left to the client, audio forwarded undecoded)
and through `relay serve` against a toy upstream on loopback."""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
from pathlib import Path

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection

from relay.dialects.gemini_codec import Setup, ToolCall, ToolResponse, Unknown
import relay.engine
from relay.dialects import openai_codec
from relay.engine import ENGINES, EngineConfig, new_engine
from relay.engine.calls import CallState
from relay.session.loop import SessionLoop
from tests.support import toy
from tests.support.clients import TIMEOUT
from tests.support.keys import PROVIDER_KEY, RELAY_TOKEN
from tests.support.peers import MemoryPeer
from tests.support.relays import bare_upstream, relay_for
from tests.support.toy import TOYWIRE

from relay.dialects import DIALECTS, OPENAI, OpenAIFamily, dialect_of_path, infer_dialect, resolve_dialect
from relay.dialects.openai import UPSTREAM_PASSTHROUGH
from relay.edges.upstream import default_upstream, key_from_environment
from relay.inspector.model import build_model
from relay.offline.expect import violations
from relay.offline.export import export_recording
from relay.offline.timeline import Timeline
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


class CountingCodec:
    """The OpenAI family's codec, each frame it reads and writes counted: a variant's own codec,
    as a family of the item-based flow brings one."""

    def __init__(self) -> None:
        self.read: list[str | bytes] = []
        self.written: list[str] = []

    def __getattr__(self, name: str) -> object:
        return getattr(openai_codec, name)

    def decode(self, frame: str | bytes, family: object = None) -> object:
        self.read.append(frame)
        return openai_codec.decode(frame, family)   # type: ignore[arg-type]

    def encode(self, command: object, family: object = None) -> str:
        frame = openai_codec.encode(command, family)   # type: ignore[arg-type]
        self.written.append(frame)
        return frame


def test_the_item_based_engine_reads_and_writes_the_wire_through_the_dialect_s_codec() -> None:
    codec = CountingCodec()
    h = EngineDriver([get_weather_data], dialect=dataclasses.replace(TOY, codec=codec))
    h.connect()
    h.upstream(h.mock.user_turn("weather in Paris?"))
    h.respond([model_call("get_weather", json.dumps({"city": "Paris"}), "call_paris")])
    h.run_all()
    assert json.loads(h.output_for("call_paris")["output"])["city"] == "Paris"
    # every frame the engine decoded and every command it wrote went through the dialect's codec
    assert any('"response.done"' in frame for frame in map(str, codec.read))
    written = [json.loads(frame)["type"] for frame in codec.written]
    assert {"session.update", "conversation.item.create", "response.create"} <= set(written)


def test_no_engine_imports_a_family_s_codec_and_each_runs_the_flow_its_family_registers() -> None:
    for path in Path(relay.engine.__file__).parent.glob("*.py"):
        imported = {node.module for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.ImportFrom)}
        imported |= {f"{node.module}.{alias.name}" for node in ast.walk(ast.parse(path.read_text()))
                     if isinstance(node, ast.ImportFrom) for alias in node.names}
        assert "relay.dialects.openai_codec" not in imported, path.name
    for dialect in DIALECTS.values():
        assert type(new_engine([], dialect=dialect)) is ENGINES[dialect.flow], dialect.name
    pigeon = type("PigeonFamily", (OpenAIFamily,), {"flow": "relay-by-pigeon"})   # a flow no engine runs
    with pytest.raises(TypeError, match="tool flow"):
        new_engine([], dialect=pigeon(**{f.name: getattr(TOY, f.name) for f in dataclasses.fields(TOY) if f.init}))


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


# ---- a new wire family: the toy wire (tests/support/toy.py) ---------------------------------------
VOICE = '{"t":"voice","pcm":"AAAAAAAA"}'
MIC = '{"t":"mic","pcm":"BBBBBBBB"}'
CALL = '{"t":"call","id":"call_1","fn":"get_weather","args":{"city":"Paris"}}'
DONE = '{"t":"done"}'
CLIENT_CALL = '{"t":"call","id":"call_2","fn":"transfer","args":{"to":"desk"}}'
HELLO = '{"t":"hello","tools":[{"name":"transfer","description":"The client\'s own.","parameters":{"type":"object"}}]}'


def test_a_new_family_is_found_by_name_and_by_url_and_gets_the_engine_of_its_flow(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DIALECTS, TOYWIRE.name, TOYWIRE)
    assert resolve_dialect("toywire", "ws://127.0.0.1:1/anything") is TOYWIRE
    assert resolve_dialect(None, "wss://voice.toy.example/v1/talk") is TOYWIRE
    assert default_upstream("toywire") == "wss://voice.toy.example/v1/talk"
    assert new_engine([get_weather_data], dialect=TOYWIRE).dialect is TOYWIRE


def test_its_codec_reads_its_frames_as_typed_messages_and_writes_them_back() -> None:
    call = toy.decode(CALL)
    assert isinstance(call, ToolCall) and [(c.id, c.name, c.args) for c in call.function_calls] == [
        ("call_1", "get_weather", {"city": "Paris"})]
    assert toy.encode(call) == CALL
    hello = toy.decode(HELLO)
    assert isinstance(hello, Setup) and toy.encode(hello) == HELLO
    result = toy.decode('{"t":"result","id":"call_2","output":{"output":"ok"}}')
    assert isinstance(result, ToolResponse) and toy.encode(result) == '{"t":"result","id":"call_2","output":{"output":"ok"}}'
    assert toy.decode('{"t":"later"}') == Unknown('{"t":"later"}') and isinstance(toy.decode("not json"), Unknown)
    upstream, client = toy.audio_peek(), toy.audio_peek(upstream=False)
    assert upstream(VOICE) == upstream(VOICE.encode()) == "audio" and upstream(CALL) is None
    assert client(MIC) == "media" and client(HELLO) is None and upstream(MIC) is None


async def test_a_session_on_a_new_family_runs_a_relay_tool_once_and_forwards_audio_undecoded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DIALECTS, TOYWIRE.name, TOYWIRE)
    decoded: list[str | bytes] = []
    reading = toy.Codec.decode
    monkeypatch.setattr(toy.Codec, "decode", staticmethod(lambda frame: decoded.append(frame) or reading(frame)))
    engine = new_engine([get_weather_data], dialect=TOYWIRE, config=EngineConfig(mode="proxy", strict=True))
    upstream, client = MemoryPeer(), MemoryPeer()
    loop = SessionLoop(engine, upstream=upstream, client=client)
    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(loop.run)
                await loop.started.wait()
                await client.feed(HELLO)
                hello = await upstream.wait_for(lambda f: f["t"] == "hello")
                await client.feed(MIC)
                await upstream.feed(VOICE)
                await upstream.feed(CALL)
                await upstream.feed(CLIENT_CALL)
                answer = await upstream.wait_for(lambda f: f["t"] == "result")
                await upstream.feed(VOICE)
                await client.wait_for(lambda f: f["t"] == "call")
                await client.feed('{"t":"result","id":"call_2","output":{"output":"put through"}}')
                await upstream.wait_for(lambda f: f["t"] == "result" and f["id"] == "call_2")
                await upstream.feed(None)
    finally:
        upstream.close_streams()
        client.close_streams()

    # the relay's tool was declared beside the client's, on the toy's wire
    assert [t["name"] for t in hello["tools"]] == ["transfer", "get_weather"]
    assert hello["tools"][1]["parameters"]["properties"]["city"]["type"] == "string"
    # the relay's call answered exactly once, on the toy's wire; the client's call left to the client
    results = [json.loads(f) for f in upstream.sent if json.loads(f)["t"] == "result"]
    assert [r["id"] for r in results] == ["call_1", "call_2"]
    assert answer == {"t": "result", "id": "call_1", "output": {"output": {"city": "Paris", "temp_c": 21}}}
    assert engine.ledger.get("call_1").state is CallState.ANSWERED
    assert engine.ledger.get("call_2").state is CallState.ANSWERED
    # the client saw its own call and the model's speech, never the relay's call
    assert [f for f in client.sent if f != VOICE] == [CLIENT_CALL]
    # audio went on as it came, both ways, and the codec never decoded it
    assert [f for f in client.sent if f == VOICE] == [VOICE, VOICE] and MIC in upstream.sent
    assert VOICE not in decoded and MIC not in decoded and CALL in decoded
    assert engine.anomalies == []


async def test_relay_serve_speaks_the_new_family_to_a_toy_upstream_on_loopback(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(DIALECTS, TOYWIRE.name, TOYWIRE)
    received: list[str] = []    # what the toy upstream got from the relay
    keys: list[str | None] = []

    async def toy_model(connection: ServerConnection) -> None:
        """The toy provider: a call once the client said hello, speech and the turn's end once
        it is answered."""
        keys.append(connection.request.headers.get("x-toy-key") if connection.request else None)
        async for frame in connection:
            received.append(str(frame))
            kind = json.loads(frame)["t"]
            if kind == "hello":
                await connection.send(VOICE)
                await connection.send(CALL)
            elif kind == "result":
                await connection.send(VOICE)
                await connection.send(DONE)

    heard: list[str | bytes] = []
    async with bare_upstream(toy_model) as realtime_url:
        url = realtime_url.replace("/v1/realtime", "/v1/talk")
        async with relay_for(url, dialect="toywire", tools=[get_weather_data], record_dir=str(tmp_path)) as server:
            async with connect(f"ws://127.0.0.1:{server.port}/v1/talk",
                               additional_headers={"Authorization": f"Bearer {RELAY_TOKEN}"}) as client:
                await client.send(HELLO)
                await client.send(MIC)
                with anyio.fail_after(TIMEOUT):
                    while (frame := await client.recv()) != DONE:
                        heard.append(frame)

    assert keys == [PROVIDER_KEY]   # reached with its own key header
    assert [json.loads(f)["t"] for f in received] == ["hello", "mic", "result"]
    assert json.loads(received[2]) == {"t": "result", "id": "call_1", "output": {"output": {"city": "Paris", "temp_c": 21}}}
    assert received[1] == MIC and heard == [VOICE, VOICE]   # audio as it came; the relay's call unseen

    # its recording is read by the readers of its flow, through its codec, with nothing else added
    (path,) = tmp_path.glob("*.jsonl")
    timeline = Timeline.from_recording(path)
    assert [(e.kind, e.call_id, e.by) for e in timeline.of("call", "output")] == [
        ("call", "call_1", "relay"), ("output", "call_1", "relay")]
    assert json.loads(timeline.outputs("call_1")[0].text or "") == {"city": "Paris", "temp_c": 21}
    assert violations(timeline, "answered_once") == []
    model = build_model(read_recording(path), strict=True)
    model.snapshot()
    (call,) = model.calls.values()
    assert (call.event["name"], call.event["owner"], call.event["outcome"], call.event["hidden"]) == (
        "get_weather", "relay", "ok", True)
