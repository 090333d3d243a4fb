"""Every kind of event the mock writes, written in scripted scenarios on every OpenAI-family wire
it speaks, parses with the official SDK's server-event union (GA, or beta where the session speaks
beta) and has no field the SDK and the recordings do not know (tests/support/sdk.py).

Which kinds the mock writes is read from its code: the OpenAI codec's server events its modules
build (relay/mock/*.py, the Gemini mock aside). A kind the mock starts to write without a scenario
here fails `test_the_scenarios_cover_every_kind_the_mock_writes`. In-process, no sockets."""

from __future__ import annotations

import ast
import base64
from typing import Any

import pytest

from relay.dialects import FOUNDRY, OPENAI, OPENAI_BETA, VOICE_LIVE, XAI, OpenAIFamily
from relay.dialects import openai_codec as codec
from relay.dialects.xai import PING
from relay.mock import Faults, MockConnection, MockScript, MockSession, Reply, Rule, StreamOptions, ToolCall
from relay.mock.requests import Action, Emit, Stream
from relay.mock.responses import Pause
from relay.mock.script import McpCall
from relay.mock.wire import DEFAULT_MODEL, Wire, seed_ids
from tests.support.paths import REPO
from tests.support.sdk import check_event
from tests.support.tools import WEATHER_TOOL

SCRIPT = MockScript(
    rules=[
        Rule(match="weather", say="Checking.", calls=[ToolCall(name="get_weather", arguments={"city": "Oslo"})]),
        Rule(match="docs", say="{mcp_output}", mcp_calls=[McpCall(server_label="docs", name="search",
                                                                 arguments={"q": "relay"}, output="found it")]),
        Rule(match="broken", mcp_calls=[McpCall(server_label="docs", name="search", error="the server is down")]),
        Rule(match="purge", mcp_calls=[McpCall(server_label="docs", name="purge", approval=True, output="purged")]),
    ],
    after_outputs=Reply(say="It is cold in Oslo."),
    transcripts=("what is the weather",),
    mcp_tools={"docs": ({"name": "search", "input_schema": {"type": "object"}},)},
    options=StreamOptions(text_chunk_chars=6, argument_deltas=2, audio_chunk_bytes=480, audio_chunks=2),
)
MCP_TOOLS = [{"type": "mcp", "server_label": label, "server_url": "https://mcp.example.com"}
             for label in ("docs", "unknown")]
WIRES = {"openai": OPENAI, "openai-beta": OPENAI_BETA, "foundry": FOUNDRY, "xai": XAI, "voicelive": VOICE_LIVE}


def _carry(actions: list[Action]) -> list[dict[str, Any]]:
    """What a session's actions send: its events, and every response stream run to its end."""
    frames: list[dict[str, Any]] = []
    for action in actions:
        if isinstance(action, Emit):
            assert isinstance(action.event, dict)
            frames.append(action.event)
        elif isinstance(action, Stream):
            frames += [step for step in action.run.steps() if not isinstance(step, Pause)]
    return frames


def _user_text(text: str) -> dict[str, Any]:
    return {"type": "conversation.item.create",
            "item": {"type": codec.MESSAGE, "role": codec.USER, "content": [{"type": "input_text", "text": text}]}}


def scenario(dialect: OpenAIFamily) -> list[dict[str, Any]]:
    """One session through everything a client can make the mock write: the opening, a session
    update (with provider-side MCP servers where the wire has them), audio committed and cleared,
    server VAD's turn and its spoken response with a call, the call's output, a text response,
    MCP calls that succeed, fail and ask for approval (then run), the output buffer cleared, an item retrieved, truncated and
    deleted, and an error."""
    seed_ids(3)
    wire = Wire.of(dialect)
    session = MockSession(wire, SCRIPT, Faults(), DEFAULT_MODEL, {"model": DEFAULT_MODEL})
    mcp = dialect.wire == "ga"   # the beta wire has no provider-side MCP events
    send = lambda event: _carry(session.handle(event, 0))   # noqa: E731
    frames = _carry(session.connected(MockConnection(0, "/v1/realtime", {}, {}, "bearer")))
    update = {"tools": [WEATHER_TOOL, *(MCP_TOOLS if mcp else [])]} | ({"type": "realtime"} if mcp else {})
    frames += send({"type": "session.update", "session": update})
    audio = base64.b64encode(bytes(9600)).decode()   # 200 ms of PCM16 at 24 kHz
    frames += send({"type": "input_audio_buffer.append", "audio": audio})
    frames += send({"type": "input_audio_buffer.commit"})
    frames += send({"type": "input_audio_buffer.append", "audio": audio})
    frames += send({"type": "input_audio_buffer.clear"})
    item_id, actions, _ = session.speech_started()
    frames += _carry(actions) + _carry(session.speech_stopped(item_id, "the weather in Oslo?", True))
    call = next(frame for frame in frames if frame["type"] == "response.function_call_arguments.done")
    output = {"type": codec.FUNCTION_CALL_OUTPUT, "call_id": call["call_id"], "output": "cold"}
    frames += send({"type": "conversation.item.create", "item": output})
    text_only = {"modalities" if dialect.wire == "beta" else "output_modalities": ["text"]}
    frames += send({"type": "response.create", "response": text_only})
    if mcp:
        for ask in ("search the docs", "a broken search", "purge the cache"):
            frames += send(_user_text(ask)) + send({"type": "response.create"})
        request = next(item for item in session.items if item["type"] == codec.MCP_APPROVAL_REQUEST)
        answer = {"type": codec.MCP_APPROVAL_RESPONSE, "approval_request_id": request["id"], "approve": True}
        frames += send({"type": "conversation.item.create", "item": answer}) + send({"type": "response.create"})
        assert any(item.get("approval_request_id") == request["id"] for item in session.items
                   if item["type"] == codec.MCP_CALL), "the approved call ran"
    frames += send({"type": "output_audio_buffer.clear"})
    spoken = next(item for item in session.items if item.get("role") == "assistant")
    frames += send({"type": "conversation.item.retrieve", "item_id": spoken["id"]})
    frames += send({"type": "conversation.item.truncate", "item_id": spoken["id"], "content_index": 0,
                    "audio_end_ms": 10})
    frames += send({"type": "conversation.item.delete", "item_id": spoken["id"]})
    frames += send({"type": "no.such.event"})
    return frames


def _quirk(dialect: OpenAIFamily, frame: dict[str, Any]) -> bool:
    """What a provider's server writes off OpenAI's shape, on purpose (relay/mock/quirks.py): xAI's
    `ping`, its call items added with `role: "tool"` and its flat session without `type`; Voice
    Live's session of its own (Azure voices, `azure_semantic_vad`)."""
    session = frame["type"] in ("session.created", "session.updated")
    if dialect is XAI:
        return frame["type"] == PING or (frame.get("item") or {}).get("role") == "tool" or session
    return dialect is VOICE_LIVE and session


def _openai_voice(dialect: OpenAIFamily, frame: dict[str, Any]) -> dict[str, Any]:
    """Voice Live's responses name an Azure voice (an object): checked with OpenAI's in its place,
    so that the rest of the response is still checked."""
    response = frame.get("response")
    if dialect is VOICE_LIVE and isinstance(response, dict) and isinstance(response.get("voice"), dict):
        return {**frame, "response": {**response, "voice": "alloy"}}
    return frame


def _kinds(frames: list[dict[str, Any]], dialect: OpenAIFamily) -> set[type[codec.Event]]:
    return {codec.kind_of(event) for event in (codec.event_of(frame, dialect) for frame in frames)
            if isinstance(event, codec.Event)}


@pytest.mark.parametrize("name", list(WIRES))
def test_what_the_mock_writes_parses_with_the_sdk(name: str) -> None:
    dialect = WIRES[name]
    frames = scenario(dialect)
    checked = [frame for frame in frames if not _quirk(dialect, frame)]
    for frame in checked:
        check_event(_openai_voice(dialect, frame), beta=dialect.wire == "beta", foundry=dialect.foundry_fields)
    assert len(checked) > 40
    assert (len(checked) < len(frames)) == (dialect in (XAI, VOICE_LIVE)), "only the providers' quirks go unchecked"


def written_by_the_mock() -> set[type[codec.Event]]:
    """The codec's server events the OpenAI-family mock builds, read from its modules."""
    found: set[type[codec.Event]] = set()
    for path in sorted((REPO / "relay" / "mock").glob("*.py")):
        if path.stem == "gemini" or path.stem.startswith("live"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "codec":
                kind = getattr(codec, node.attr, None)
                if kind in codec.EVENTS.values() and kind not in codec.COMMANDS:
                    found.add(kind)
    return found


def test_the_scenarios_cover_every_kind_the_mock_writes() -> None:
    written = written_by_the_mock()
    assert codec.ResponseDone in written and codec.McpListToolsFailed in written   # the reading finds them
    covered: set[type[codec.Event]] = set()
    for dialect in WIRES.values():
        covered |= _kinds(scenario(dialect), dialect)
    missing = sorted(codec.event_name(kind) for kind in written - covered)
    assert not missing, f"kinds the mock writes that no scenario checks against the SDK: {missing}"


def test_each_wire_writes_by_its_own_names() -> None:
    """The beta wire's frames carry beta names and no GA-only event; GA's carry GA names."""
    ga, beta = scenario(OPENAI), scenario(OPENAI_BETA)
    assert "response.output_audio.delta" in {f["type"] for f in ga} and "conversation.item.added" in {
        f["type"] for f in ga}
    beta_types = {f["type"] for f in beta}
    assert {"response.audio.delta", "conversation.item.created", "response.text.delta"} <= beta_types
    assert not beta_types & {"conversation.item.done", "response.output_audio.delta", "conversation.item.added"}


def test_the_scenario_sees_no_error_but_the_one_it_asks_for() -> None:
    for dialect in WIRES.values():
        errors = [frame["error"] for frame in scenario(dialect) if frame["type"] == "error"]
        assert [error["param"] for error in errors] == ["type"], (dialect.name, errors)
        assert errors[0]["code"] == "invalid_value"
