"""GPT-Live's codec (`relay.dialects.live`): every event of the closed set round-trips through
`encode` and `decode`/`event_of`; what `encode` writes validates against the official SDK's models
(`openai.types.live`, the Responses stream events for what `response.event` nests); the frames
the SDK's own connection writes decode to the right events; bad frames are `Unknown`, never an
exception; audio is told without decoding; the dialect is inferred from Live URLs."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from openai._utils import maybe_transform
from openai.resources.live.live import (
    LiveDecisionItemResource,
    LiveDecisionResource,
    LiveResponseItemResource,
    LiveResponseResource,
    LiveSessionCommentaryResource,
    LiveSessionInputAudioResource,
    LiveSessionInstructionsResource,
    LiveSessionOutputAudioFixtureResource,
    LiveSessionResource,
    LiveSessionThinkingResource,
)
from openai.types.live import ClientEvent, ServerEvent
from openai.types.live.client_event_param import ClientEventParam
from openai.types.live.connect_client_event import ConnectClientEvent
from openai.types.live.connect_server_event import ConnectServerEvent
from openai.types.live.fork_client_event import ForkClientEvent
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from relay.dialects import AUDIO_MARKERS, LIVE, LIVE_AZURE, audio_slots, infer_dialect, resolve_dialect
from relay.dialects import live as wire

CLIENT = TypeAdapter(ClientEvent)
SERVER = TypeAdapter(ServerEvent)
SIDEBAND_CLIENT = TypeAdapter(ConnectClientEvent)
SIDEBAND_SERVER = TypeAdapter(ConnectServerEvent)
FORK_CLIENT = TypeAdapter(ForkClientEvent)
BACKEND = TypeAdapter(ResponseStreamEvent)

RESOURCE = {"id": "live_u7_abc", "expires_at": 1791373550, "model": "gpt-live-1", "status": "active",
            "audio": {"output": {"voice": "marin"}, "format": {"type": "audio/pcm", "rate": 24000}},
            "delegation": {"type": "client"}, "input": []}
SNAPSHOT = {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5", "output": [],
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "status": "completed"}
CALL = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
        "arguments": '{"city":"Paris"}', "status": "completed"}
DECISION = {"answers": [{"type": "predicate", "name": "wants_human", "probability": 0.9}], "model": "gpt-5-mini",
            "usage": {"input_tokens": 10, "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 0},
                      "output_tokens": 1, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 11}}
TIMED = {"start_ms": 600, "end_ms": 800}

# One instance of every event of the set, as the server or a client writes it.
SAMPLES: dict[type[wire.Event], wire.Event] = {event.__class__: event for event in (
    wire.SessionStart(event_id="c1", session={"model": "gpt-live-1", "instructions": "Be brief.",
                                              "delegation": {"type": "client"}}),
    wire.SessionStarted(event_id="e1", session=RESOURCE),
    wire.SessionUpdate(session={"delegation": {"type": "responses", "responses": {"tools": []}}}),
    wire.SessionUpdated(event_id="e2", client_event_id="c2", session=RESOURCE),
    wire.SessionClose(event_id="c3"),
    wire.SessionClosed(event_id="e3", reason="close_requested", session=RESOURCE, usage={"seconds": 16}),
    wire.SessionPaused(event_id="e4"),
    wire.SessionResumed(event_id="e5"),
    wire.UsageUpdated(event_id="e6", usage={"seconds": 7}, context_window={"usage_ratio": 0.0088}),
    wire.Error(event_id="e7", error={"type": "invalid_request_error", "code": "invalid_value",
                                     "message": "Context append text must not exceed 500 tokens.", "param": "content"}),
    wire.Info(event_id="e8", code="data_channel_permissions", message="dropped"),
    wire.InputAudioAppend(audio="AAAA"),
    wire.OutputAudioDelta(delta="AAAA"),
    wire.InputAudioMute(event_id="c4"),
    wire.InputAudioUnmute(),
    wire.InputAudioMuted(event_id="e9", client_event_id="c4"),
    wire.InputAudioUnmuted(event_id="e10"),
    wire.FixturePlay(audio="AAAA"),
    wire.FixturePlaying(event_id="e11"),
    wire.FixturePlayed(event_id="e12"),
    wire.InputTranscriptDelta(event_id="e13", delta=" result.", **TIMED),
    wire.OutputTranscriptDelta(event_id="e14", delta="Okay,", **TIMED),
    wire.InstructionsAppend(delegation_id=None, content="Keep replies short."),
    wire.ThinkingAppend(delegation_id="item_1", content="looking it up"),
    wire.CommentaryAppend(event_id="c5", delegation_id="item_1", content="It is sunny in Paris."),
    wire.InstructionsAppended(event_id="e15", **TIMED),
    wire.ThinkingAppended(event_id="e16", **TIMED),
    wire.CommentaryAppended(event_id="e17", client_event_id="c5", **TIMED),
    wire.DelegationCreated(event_id="e18", offset_ms=4600,
                           delegation=wire.Delegation(id="item_1", target="client")),
    wire.ResponseEnvelope(event_id="e19", delegation_id="item_2",
                          event=wire.BackendItemDone(sequence_number=2, output_index=0, item=CALL)),
    wire.ResponseItemCreate(event_id="c6", item={"type": "function_call_output", "call_id": "call_1",
                                                 "output": '{"temperature":21}'}),
    wire.ResponseCreate(event_id="c7"),
    wire.DecisionCreate(event_id="c8"),
    wire.DecisionItemCreate(item={"type": "message", "role": "user", "content": "Paris?"}),
    wire.DecisionItemCreated(event_id="e20", item={"type": "message", "id": "di_1", "role": "user",
                                                   "content": "Paris?"}),
    wire.DecisionItemDelete(item_id="di_1"),
    wire.DecisionItemDeleted(event_id="e21", item_id="di_1"),
    wire.DecisionEvent(event_id="e22", delegation_id="item_3", event=wire.DecisionCompleted(decision=DECISION)),
    wire.DtmfSend(event="5"),
    wire.DtmfSent(event_id="e23", event="5"),
    wire.DtmfReceived(event_id="e24", event="#"),
    wire.TransportRinging(event_id="e25", session_id="live_1"),
    wire.TransportAnswered(event_id="e26", session_id="live_1"),
    wire.TransportFailed(event_id="e27", session_id="live_1",
                         error={"type": "call_error", "code": "busy", "message": "The callee is busy."}),
)}

BACKEND_SAMPLES: dict[type[wire.BackendEvent], wire.BackendEvent] = {event.__class__: event for event in (
    wire.BackendCreated(sequence_number=0, response={**SNAPSHOT, "status": "in_progress"}),
    wire.BackendQueued(sequence_number=0, response={**SNAPSHOT, "status": "queued"}),
    wire.BackendInProgress(sequence_number=1, response={**SNAPSHOT, "status": "in_progress"}),
    wire.BackendCompleted(sequence_number=9, response=SNAPSHOT),
    wire.BackendFailed(sequence_number=9, response={**SNAPSHOT, "status": "failed"}),
    wire.BackendIncomplete(sequence_number=9, response={**SNAPSHOT, "status": "incomplete"}),
    wire.BackendItemAdded(sequence_number=2, output_index=0, item={**CALL, "status": "in_progress"}),
    wire.BackendItemDone(sequence_number=5, output_index=0, item=CALL),
    wire.BackendPartAdded(sequence_number=3, item_id="msg_1", output_index=0, content_index=0,
                          part={"type": "output_text", "text": "", "annotations": []}),
    wire.BackendPartDone(sequence_number=6, item_id="msg_1", output_index=0, content_index=0,
                         part={"type": "output_text", "text": "Sunny.", "annotations": []}),
    wire.BackendTextDelta(sequence_number=4, item_id="msg_1", output_index=0, content_index=0, delta="Sunny.",
                          logprobs=[]),
    wire.BackendTextDone(sequence_number=5, item_id="msg_1", output_index=0, content_index=0, text="Sunny.",
                         logprobs=[]),
    wire.BackendArgumentsDelta(sequence_number=3, item_id="fc_1", output_index=0, delta='{"city"'),
    wire.BackendArgumentsDone(sequence_number=4, item_id="fc_1", output_index=0, name="get_weather",
                              arguments='{"city":"Paris"}'),
    wire.BackendError(sequence_number=7, code="server_error", message="The backend failed.", param=None),
)}


def test_the_samples_cover_the_closed_sets() -> None:
    assert {cls.__struct_config__.tag for cls in SAMPLES} == set(wire.EVENTS)
    assert {cls.__struct_config__.tag for cls in BACKEND_SAMPLES} == set(wire.BACKEND_EVENTS)
    assert wire.COMMANDS <= set(SAMPLES)


@pytest.mark.parametrize("event", SAMPLES.values(), ids=lambda event: wire.wire_type(event))
def test_every_event_round_trips(event: wire.Event) -> None:
    frame = wire.encode(event)
    assert frame.startswith('{"type":' + json.dumps(wire.wire_type(event)))
    decoded, from_object = wire.decode(frame), wire.event_of(json.loads(frame))
    assert type(decoded) is type(event) and type(from_object) is type(event)
    assert wire.encode(decoded) == frame and wire.encode(from_object) == frame
    assert wire.to_builtins(decoded) == json.loads(frame)


@pytest.mark.parametrize("event", SAMPLES.values(), ids=lambda event: wire.wire_type(event))
def test_what_encode_writes_is_what_the_sdk_reads(event: wire.Event) -> None:
    """Commands validate against the SDK's client unions (the primary socket's; a sideband's for
    `transport.dtmf.send`), server events against its server unions (a sideband's for the
    WebRTC idle notices); a validated model dumps back to the same object."""
    frame = json.loads(wire.encode(event))
    if type(event) in wire.COMMANDS:
        adapter = SIDEBAND_CLIENT if isinstance(event, wire.DtmfSend) else CLIENT
    else:
        adapter = SIDEBAND_SERVER if isinstance(event, (wire.SessionPaused, wire.SessionResumed)) else SERVER
    model = adapter.validate_python(frame)
    assert model.type == frame["type"]
    assert model.model_dump(exclude_unset=True) == frame


@pytest.mark.parametrize("event", BACKEND_SAMPLES.values(), ids=lambda event: wire.wire_type(event))
def test_nested_backend_events_round_trip_and_are_responses_stream_events(event: wire.BackendEvent) -> None:
    envelope = wire.ResponseEnvelope(event_id="e1", delegation_id="item_2", event=event)
    frame = wire.encode(envelope)
    SERVER.validate_json(frame)
    decoded = wire.decode(frame)
    assert isinstance(decoded, wire.ResponseEnvelope) and isinstance(decoded.event, dict)
    typed = wire.backend_event(decoded)
    assert typed == event and wire.backend_event(envelope) is event
    BACKEND.validate_python(wire.to_builtins(typed))


def test_an_unknown_or_malformed_nested_event_stays_in_its_envelope() -> None:
    odd = wire.decode('{"type":"response.event","event_id":"e1","delegation_id":null,'
                      '"event":{"type":"response.web_search_call.searching","item_id":"ws_1"}}')
    assert isinstance(odd, wire.ResponseEnvelope) and odd.delegation_id is None
    assert wire.backend_event(odd) == wire.Unknown({"type": "response.web_search_call.searching", "item_id": "ws_1"})
    for nested in (None, "text", [1], {"type": 3}, {"no": "type"}, {"type": "response.completed", "sequence_number": "x"}):
        envelope = wire.ResponseEnvelope(event=nested)
        if nested == {"type": "response.completed", "sequence_number": "x"}:
            assert isinstance(wire.backend_event(envelope), wire.BackendCompleted)   # fields are as the wire gave
        else:
            assert wire.backend_event(envelope) == wire.Unknown(nested)


# ---- Decisions delegation ----
DECISION_ITEMS = (
    {"type": "function_call", "call_id": "call_7", "name": "book_table", "arguments": '{"seats":2}'},
    {"type": "function_call_output", "call_id": "call_7", "output": "booked"},
    {"type": "custom_tool_call", "call_id": "call_8", "name": "note", "input": "vip"},
    {"type": "message", "role": "system", "content": "The caller is a member."},
)


@pytest.mark.parametrize("item", DECISION_ITEMS, ids=lambda item: item["type"])
def test_decision_items_are_client_events_and_their_stored_copies_server_events(item: dict[str, Any]) -> None:
    """`function_call` and `function_call_output` are Decision *inputs* the client appends (the
    service stores them with an id): written by the codec, read by the SDK's unions as they are."""
    command = json.loads(wire.encode(wire.DecisionItemCreate(event_id="c9", item=item)))
    assert CLIENT.validate_python(command).model_dump(exclude_unset=True) == command
    stored = wire.DecisionItemCreated(event_id="e9", client_event_id="c9", item={**item, "id": "di_9"})
    frame = json.loads(wire.encode(stored))
    assert SERVER.validate_python(frame).model_dump(exclude_unset=True) == frame
    assert wire.decode(json.dumps(frame)) == wire.event_of(frame) == wire.DecisionItemCreated(
        event_id="e9", client_event_id="c9", item={**item, "id": "di_9"})


def test_a_decision_event_is_typed_for_a_delegation_a_create_and_a_trigger() -> None:
    completed = wire.DecisionCompleted(decision=DECISION)
    for event in (wire.DecisionEvent(event_id="e1", delegation_id="item_1", event=completed),
                  wire.DecisionEvent(event_id="e2", delegation_id=None, event=completed),
                  wire.DecisionEvent(event_id="e3", delegation_id=None, event=completed, trigger_id="trig_1",
                                     source_event_id="event_t", source_event_type="session.input_transcript.delta")):
        frame = wire.encode(event)
        model = SERVER.validate_json(frame)
        assert model.type == "decision.event" and model.event.decision.answers[0].probability == 0.9
        assert json.loads(frame)["event"] == {"type": "decision.completed", "decision": DECISION}
        decoded = wire.decode(frame)
        assert isinstance(decoded, wire.DecisionEvent) and isinstance(decoded.event, dict)
        assert wire.decision_of(decoded) == completed and wire.decision_of(event) is completed
        assert wire.encode(decoded) == frame


def test_a_decision_event_of_another_shape_reads_as_unknown() -> None:
    for nested in (None, "text", [1], {"no": "type"}, {"type": "decision.failed", "error": {}},
                   {"type": "decision.completed"}, {"type": "decision.completed", "decision": "yes"}):
        assert wire.decision_of(wire.DecisionEvent(event=nested)) == wire.Unknown(nested)
    assert "decision.completed" in wire.WIRE_NAMES


class _Capture:
    """What the SDK's `LiveConnection.send` writes for a dict command, kept instead of sent."""

    def __init__(self) -> None:
        self.frames: list[str] = []

    def send(self, event: Any) -> None:
        self.frames.append(json.dumps(maybe_transform(event, ClientEventParam)))


def test_the_sdk_s_own_frames_decode_to_their_events() -> None:
    sdk = _Capture()
    LiveSessionResource(sdk).start(session={"model": "gpt-live-1", "delegation": {"type": "client"}})   # type: ignore[arg-type]
    LiveSessionResource(sdk).update(session={"delegation": {"type": "responses", "responses": {"tools": []}}})   # type: ignore[arg-type]
    LiveSessionInputAudioResource(sdk).append(audio="AAAA")   # type: ignore[arg-type]
    LiveSessionInputAudioResource(sdk).mute(event_id="m1")   # type: ignore[arg-type]
    LiveSessionInputAudioResource(sdk).unmute()   # type: ignore[arg-type]
    LiveSessionInstructionsResource(sdk).append(content="Be brief.", delegation_id=None)   # type: ignore[arg-type]
    LiveSessionThinkingResource(sdk).append(content="working", delegation_id="item_1")   # type: ignore[arg-type]
    LiveSessionCommentaryResource(sdk).append(content="Done.", delegation_id="item_1", event_id="r1")   # type: ignore[arg-type]
    LiveSessionOutputAudioFixtureResource(sdk).play(audio="AAAA")   # type: ignore[arg-type]
    LiveResponseItemResource(sdk).create(item={"type": "function_call_output", "call_id": "call_1", "output": "{}"})   # type: ignore[arg-type]
    LiveResponseResource(sdk).create()   # type: ignore[arg-type]
    LiveDecisionResource(sdk).create(event_id="d1")   # type: ignore[arg-type]
    LiveDecisionItemResource(sdk).create(item={"role": "user", "content": "hi"})   # type: ignore[arg-type]
    LiveDecisionItemResource(sdk).delete(item_id="di_1")   # type: ignore[arg-type]
    LiveSessionResource(sdk).close()   # type: ignore[arg-type]
    decoded = [wire.decode(frame) for frame in sdk.frames]
    assert [type(event) for event in decoded] == [
        wire.SessionStart, wire.SessionUpdate, wire.InputAudioAppend, wire.InputAudioMute, wire.InputAudioUnmute,
        wire.InstructionsAppend, wire.ThinkingAppend, wire.CommentaryAppend, wire.FixturePlay,
        wire.ResponseItemCreate, wire.ResponseCreate, wire.DecisionCreate, wire.DecisionItemCreate,
        wire.DecisionItemDelete, wire.SessionClose]
    instructions, thinking, commentary = decoded[5:8]
    assert instructions.delegation_id is None and thinking.delegation_id == "item_1"   # type: ignore[union-attr]
    assert commentary.content == "Done." and commentary.event_id == "r1"   # type: ignore[union-attr]
    assert decoded[3].event_id == "m1" and decoded[9].item["call_id"] == "call_1"   # type: ignore[union-attr]
    for frame, event in zip(sdk.frames, decoded):
        assert json.loads(wire.encode(event)) == json.loads(frame)   # nothing the SDK wrote is lost


def test_an_append_tells_a_missing_delegation_id_from_null() -> None:
    missing = wire.decode('{"type":"session.thinking.append","content":"x"}')
    null = wire.decode('{"type":"session.thinking.append","content":"x","delegation_id":null}')
    assert isinstance(missing, wire.ThinkingAppend) and missing.delegation_id is msgspec.UNSET
    assert isinstance(null, wire.ThinkingAppend) and null.delegation_id is None
    assert wire.encode(null) == '{"type":"session.thinking.append","delegation_id":null,"content":"x"}'
    assert "delegation_id" not in wire.encode(missing)
    assert wire.APPENDED[type(null)] is wire.ThinkingAppended


def test_a_fork_s_start_is_a_session_start() -> None:
    fork = wire.SessionStart(session={"store": True, "audio": {"format": {"type": "audio/pcm", "rate": 24000}}})
    FORK_CLIENT.validate_json(wire.encode(fork))
    assert wire.decode(wire.encode(fork)) == fork


@pytest.mark.parametrize("frame", [
    '{"type":"no.such.event"}', "[1]", "not json", b"\xff\xfe", b'{"type": 3}', '{"a":1}', "", "null",
    '{"type":"session.delegation.created","offset_ms":1}',                        # no delegation
    '{"type":"session.delegation.created","delegation":{"target":"client"}}',    # a delegation without id
    '{"type":"session.delegation.created","delegation":"item_1"}',
    '{"type":"session.input_audio.commit"}',                                      # not Live's
    '{"type":"conversation.item.create","item":{}}',
    '{"type":"session.commentary.append"' + "," * 3 + "}",
])
def test_bad_frames_are_kept_as_unknown(frame: str | bytes) -> None:
    assert wire.decode(frame) == wire.Unknown(frame)


@pytest.mark.parametrize("data", [None, 3, "text", [], {}, {"type": None}, {"type": "no.such"},
                                  {"type": "session.delegation.created", "delegation": {"id": 5}}])
def test_bad_objects_are_kept_as_unknown(data: Any) -> None:
    assert wire.event_of(data) == wire.Unknown(data)


def test_audio_is_told_without_decoding() -> None:
    upstream, client = wire.audio_peek(), wire.audio_peek(upstream=False)
    assert upstream(wire.encode(wire.OutputAudioDelta(delta="AAAA")))
    assert upstream(wire.encode(wire.OutputAudioDelta(start_ms=0, end_ms=100, delta="AAAA")))   # a sideband's
    assert upstream(wire.encode(wire.InputAudioAppend(audio="AAAA")))                        # reflected audio
    assert not upstream(wire.encode(wire.OutputTranscriptDelta(event_id="e1", delta="hi", **TIMED)))
    assert not upstream('{"type":"session.output_audio.delta","delta":"AAAA","type":"session.start"}')
    assert client(wire.encode(wire.InputAudioAppend(audio="AAAA")))
    assert not client(wire.encode(wire.OutputAudioDelta(delta="AAAA")))
    assert not client(b"\x00\x01")
    for event in (wire.InputAudioAppend(audio="AAAA"), wire.OutputAudioDelta(delta="AAAA"), wire.FixturePlay(audio="AAAA")):
        frame = wire.encode(event)
        assert any(marker in frame.encode() for marker in AUDIO_MARKERS)
        [slot] = audio_slots(json.loads(frame))
        assert slot.holder[slot.key] == "AAAA"
    assert audio_slots(json.loads(wire.encode(SAMPLES[wire.CommentaryAppend]))) == []


@pytest.mark.parametrize("url, name", [
    ("wss://api.openai.com/v1/live/sessions", "live"),
    ("wss://api.openai.com/v1/live/sessions/live_123/attach", "live"),
    ("ws://127.0.0.1:8765/v1/live/sessions", "live"),
    ("wss://gateway.example/v1/live/sessions", "live"),
    ("wss://res.openai.azure.com/openai/v1/live/sessions", "live-azure"),
    ("wss://res.services.ai.azure.com/openai/v1/live/sessions", "live-azure"),
    ("wss://api.openai.com/v1/realtime", "openai"),
    ("wss://res.openai.azure.com/openai/v1/realtime", "azure"),
])
def test_the_dialect_is_inferred_from_live_urls(url: str, name: str) -> None:
    assert resolve_dialect(None, url).name == name
    inferred = infer_dialect(url)
    assert inferred is not None and inferred.name == name


def test_the_dialect_reaches_each_provider_with_its_auth() -> None:
    assert resolve_dialect("live", "wss://res.openai.azure.com/openai/v1/live/sessions") is LIVE_AZURE
    assert resolve_dialect("live", "ws://127.0.0.1:1/v1/live/sessions") is LIVE
    assert LIVE.key_env == ("OPENAI_API_KEY",) and LIVE_AZURE.key_env == ("AZURE_OPENAI_API_KEY",)
    assert LIVE.key_headers("k") == {"Authorization": "Bearer k"} == LIVE_AZURE.key_headers("k")
    assert LIVE.default_url == "wss://api.openai.com/v1/live/sessions" and LIVE_AZURE.default_url is None
    assert LIVE.client_paths == {"/v1/live/sessions", "/openai/v1/live/sessions"} and LIVE.call_sideband
    assert LIVE.attach_path("live_1") == "/v1/live/sessions/live_1/attach"
    assert (LIVE_AZURE.attach_path("live_2", "wss://res.openai.azure.com/openai/v1/live/sessions")
            == "/openai/v1/live/sessions/live_2/attach")


def test_the_dialect_writes_what_the_sdk_reads() -> None:
    error = LIVE.client_error_event("relay_e1", "unknown_delegation", "No such delegation.", param="delegation_id",
                                    client_event_id="c1")
    assert SERVER.validate_python(error).error.client_event_id == "c1"   # type: ignore[union-attr]
    assert wire.event_of(error) == wire.Error(event_id="relay_e1", client_event_id="c1", error=error["error"])
    output = LIVE.function_call_output("call_1", '{"ok":true}', event_id="relay_e2")
    CLIENT.validate_json(wire.encode(output))
    tool = LIVE.function_tool("get_weather", "Weather.", {"type": "object", "properties": {"city": {"type": "string"}}})
    session = {"model": "gpt-live-1", "delegation": {"type": "responses", "responses": {"model": "gpt-5", "tools": [tool]}}}
    CLIENT.validate_json(wire.encode(wire.SessionStart(session=session)))


def test_wire_names_hold_the_live_vocabulary() -> None:
    assert {"session.delegation.created", "session.commentary.append", "response.event",
            "response.output_item.done", "function_call_output"} <= wire.WIRE_NAMES
    assert "error" not in wire.WIRE_NAMES and "info" not in wire.WIRE_NAMES
