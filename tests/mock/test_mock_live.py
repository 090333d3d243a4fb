"""The mock's GPT-Live mode (`relay.mock.live`): strict `session.start`, the timeline that
advances with input audio (appends acknowledged on it, deferred while no audio flows, a continuous
output track), delegations in the client, Responses and decisions modes, sideband attach, close.
Every event it writes is validated against the official SDK's `openai.types.live` unions (and
what `response.event` nests against the Responses stream events); the last tests drive it with the
SDK's own `client.live.connect()` and `client.live.sideband.connect()` over loopback."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from openai import AsyncOpenAI
from openai.types.live.connect_server_event import ConnectServerEvent
from openai.types.live.server_event import ServerEvent
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from relay.dialects import live as wire
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.mock.gemini import Hangup
from relay.mock.live import LiveMockSession
from relay.mock.live_backend import LiveOptions
from relay.mock.requests import Emit
from relay.mock.session import MockConnection

SERVER = TypeAdapter(ServerEvent)
SIDEBAND = TypeAdapter(ConnectServerEvent)
BACKEND = TypeAdapter(ResponseStreamEvent)
SCRIPT = MockScript(
    rules=[Rule(match="weather", say="Let me check.", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})]),
           Rule(match="both", calls=[ToolCall(name="get_weather", arguments={"city": "Rome"}),
                                     ToolCall(name="get_time", arguments={"city": "Rome"})])],
    after_outputs=Reply(say="Here it is: {output}"),
)
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
CLOCK = {"type": "function", "name": "get_time"}
RESPONSES = {"type": "responses", "responses": {"model": "gpt-5", "tools": [WEATHER, CLOCK]}}
QUESTIONS = [{"type": "predicate", "name": "wants_human", "instructions": "Does the caller ask for a person?"},
             {"type": "choice", "name": "topic", "instructions": "Topic?",
              "choices": [{"value": "billing"}, {"value": "weather"}]},
             {"type": "score", "name": "mood", "instructions": "Mood?", "levels": [{"label": "bad"}, {"label": "good"}]}]
DECISIONS = {"type": "decisions", "decisions": {"model": "gpt-5-mini", "questions": QUESTIONS}}


def validated(event: dict[str, Any], *, sideband: bool = False) -> dict[str, Any]:
    """An event the mock wrote, checked against the SDK's server union (a sideband's for the
    sideband), its nested Responses event against the stream events; the event back."""
    (SIDEBAND if sideband else SERVER).validate_python(event)
    if event["type"] == "response.event":
        BACKEND.validate_python(event["event"])
    return event


def audio(ms: int) -> str:
    return base64.b64encode(bytes(48 * ms)).decode()   # PCM16 at 24 kHz


class Driver:
    """A Live mock session driven without sockets: the frames each connection gets, validated."""

    def __init__(self, options: LiveOptions | None = None, script: MockScript = SCRIPT) -> None:
        from relay.mock.faults import Faults
        self.session = LiveMockSession(script, Faults(), options=options)
        self.out: dict[int, list[dict[str, Any]]] = {}
        self.hung_up = False
        self.attach(0, "/v1/live/sessions")

    def attach(self, index: int, path: str) -> list[dict[str, Any]]:
        self.out[index] = []
        return self._carry(self.session.connected(MockConnection(index, path, {}, {}, "bearer")))

    def _carry(self, actions: list[Any]) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        for action in actions:
            if isinstance(action, Hangup):
                self.hung_up = True
                continue
            assert isinstance(action, Emit) and isinstance(action.event, dict)
            for index in self.out:
                if action.to in (None, index):
                    self.out[index].append(validated(action.event, sideband=index != 0))
                    if index == 0 or action.to == index:
                        got.append(action.event)
        return got

    def send(self, event: dict[str, Any], origin: int = 0) -> list[dict[str, Any]]:
        return self._carry(self.session.handle(event, origin))

    def start(self, **session: Any) -> dict[str, Any]:
        [started] = self.send({"type": "session.start", "event_id": "c_start", "session": {"model": "gpt-live-1", **session}})
        assert started["type"] == "session.started"
        return started

    def turn(self, text: str) -> list[dict[str, Any]]:
        return self._carry(self.session.user_turn(text))

    def audio(self, ms: int) -> list[dict[str, Any]]:
        return self.send({"type": "session.input_audio.append", "audio": audio(ms)})


def types(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def test_nothing_is_said_before_a_strict_session_start() -> None:
    mock = Driver()
    [error] = mock.send({"type": "session.input_audio.append", "audio": audio(100)})
    assert error["error"]["code"] == "session_not_started"
    [error] = mock.send({"type": "session.start", "session": {"model": "gpt-live-1", "turn_detection": {}}})
    assert error["error"] == {"type": "invalid_request_error", "code": "unknown_parameter",
                              "message": "Unknown parameter: 'session.turn_detection'.", "param": "session.turn_detection"}
    [error] = mock.send({"type": "session.start", "event_id": "c1",
                         "session": {"model": "gpt-live-1", "delegation": {"type": "responses", "responses": {
                             "model": "gpt-5", "tools": [{"type": "function", "name": "f", "extra": 1}]}}}})
    assert error["error"]["param"] == "session.delegation.responses.tools[0].extra" and error["client_event_id"] == "c1"
    [error] = mock.send({"type": "session.start", "session": {"instructions": "hi"}})
    assert error["error"]["code"] == "missing_required_parameter"
    started = mock.start(instructions="Be brief.")
    resource = started["session"]
    assert resource["id"].startswith("live_") and resource["status"] == "active" and resource["input"] == []
    assert resource["audio"] == {"output": {"voice": "marin"}, "format": {"type": "audio/pcm", "rate": 24000}}
    assert resource["delegation"] == {"type": "client"} and started["client_event_id"] == "c_start"
    [again] = mock.send({"type": "session.start", "session": {"model": "gpt-live-1"}})
    assert again["type"] == "error"


def test_unknown_and_wrong_mode_events_get_errors_and_the_session_goes_on() -> None:
    mock = Driver()
    mock.start()
    [unknown] = mock.send({"type": "session.input_audio.commit"})
    assert "'session.start'" in unknown["error"]["message"] and "'response.create'" in unknown["error"]["message"]
    [wrong_mode] = mock.send({"type": "response.item.create", "item": {"type": "function_call_output"}})
    assert wrong_mode["error"]["message"] == "response.item.create requires Responses delegation."
    [bad] = mock.send({"type": "session.delegation.created"})   # a server event sent by a client
    assert bad["type"] == "error"
    [immutable] = mock.send({"type": "session.update", "session": {"delegation": RESPONSES}})
    assert immutable["error"]["code"] == "immutable_field_update"
    assert types(mock.audio(100)) == ["session.output_audio.delta"]


def test_the_output_track_covers_the_timeline_and_nothing_moves_without_input_audio() -> None:
    mock = Driver()
    mock.start()
    assert mock.send({"type": "session.instructions.append", "delegation_id": None, "content": "Be brief."}) == []
    assert mock.session.timeline_ms == 0 and len(mock.session.pending) == 1   # deferred: no audio yet
    track = []
    for _ in range(8):
        track += [event for event in mock.audio(100) if event["type"] == "session.output_audio.delta"]
    assert len(track) == 8 and sum(len(base64.b64decode(event["delta"])) for event in track) == 8 * 4800
    assert all(set(event) == {"type", "delta"} for event in track)   # no event_id, no timing on the primary
    [ack] = [event for event in mock.out[0] if event["type"] == "session.instructions.appended"]
    assert (ack["start_ms"], ack["end_ms"]) == (400, 600)
    assert mock.send({"type": "session.input_audio.append", "audio": base64.b64encode(b"\x00").decode()})[0][
        "error"]["code"] == "invalid_audio"


def test_a_client_delegation_is_answered_by_an_acknowledged_commentary() -> None:
    mock = Driver()
    mock.start()
    said = mock.turn("What's the weather in Paris?")
    assert types(said)[:-1] == ["session.input_transcript.delta"] * (len(said) - 1)
    created = said[-1]
    assert created["type"] == "session.delegation.created" and created["delegation"]["target"] == "client"
    assert set(created["delegation"]) == {"id", "type", "target"}   # metadata only: no task, no tool
    delegation_id = created["delegation"]["id"]
    [unknown] = mock.send({"type": "session.commentary.append", "delegation_id": "item_nope", "content": "x"})
    assert unknown["error"]["param"] == "delegation_id"
    [missing] = mock.send({"type": "session.commentary.append", "content": "x"})
    assert missing["error"]["code"] == "missing_required_parameter"
    [too_long] = mock.send({"type": "session.thinking.append", "delegation_id": delegation_id,
                            "content": "word " * 501})
    assert too_long["error"]["message"] == "Context append text must not exceed 500 tokens."
    assert mock.send({"type": "session.thinking.append", "delegation_id": delegation_id, "content": "looking"}) == []
    assert mock.send({"type": "session.commentary.append", "delegation_id": delegation_id, "event_id": "r1",
                      "content": "sunny, 21 degrees"}) == []
    heard = []
    for _ in range(60):
        heard += mock.audio(100)
    acks = [event for event in heard if event["type"].endswith(".appended")]
    assert types(acks) == ["session.thinking.appended", "session.commentary.appended"]
    assert acks[1]["client_event_id"] == "r1"
    spoken = "".join(event["delta"] for event in heard if event["type"] == "session.output_transcript.delta")
    assert spoken == "Let me check.Here it is: sunny, 21 degrees"
    deltas = [event for event in heard if event["type"] == "session.output_transcript.delta"]
    assert all(event["end_ms"] - event["start_ms"] == 200 for event in deltas)
    assert deltas[-1]["start_ms"] >= acks[1]["end_ms"]   # the result is said once it is on the timeline
    assert any(event["type"] == "session.usage.updated" for event in heard) is False   # 6 s < 15 s


def test_a_barge_in_stops_the_speech_and_a_late_result_is_still_spoken() -> None:
    mock = Driver()
    mock.start()
    delegation_id = mock.turn("weather?")[-1]["delegation"]["id"]
    mock.turn("never mind")   # the caller barges in: the preamble stops, the delegation stays
    mock.send({"type": "session.commentary.append", "delegation_id": delegation_id, "content": "rain"})
    heard = []
    for _ in range(40):
        heard += mock.audio(100)
    spoken = "".join(event["delta"] for event in heard if event["type"] == "session.output_transcript.delta")
    assert "rain" in spoken and "Let me check." not in spoken


def test_a_responses_delegation_waits_for_every_output_and_one_create() -> None:
    mock = Driver()
    mock.start(delegation=RESPONSES)
    said = mock.turn("both please")
    created = next(event for event in said if event["type"] == "session.delegation.created")
    assert created["delegation"]["target"] == "responses" and created["delegation"]["response_id"].startswith("resp_")
    envelopes = [event for event in said if event["type"] == "response.event"]
    assert {event["delegation_id"] for event in envelopes} == {created["delegation"]["id"]}
    nested = [event["event"] for event in envelopes]
    assert nested[0]["type"] == "response.created" and nested[-1]["type"] == "response.completed"
    assert nested[-1]["response"]["output"] == []   # the terminal snapshot holds no calls
    calls = [event["item"] for event in nested if event["type"] == "response.output_item.done"]
    assert [call["name"] for call in calls] == ["get_weather", "get_time"]
    first, second = (call["call_id"] for call in calls)
    assert mock.send({"type": "response.item.create", "item": {"type": "function_call_output", "call_id": first,
                                                               "output": "cloudy"}}) == []
    [partial] = mock.send({"type": "response.create", "event_id": "c_early"})
    assert "partial batch" in partial["error"]["message"] and second in partial["error"]["message"]
    [unknown] = mock.send({"type": "response.item.create", "item": {"type": "function_call_output", "call_id": "nope",
                                                                    "output": "x"}})
    assert unknown["error"]["param"] == "item.call_id"
    [thinking] = mock.send({"type": "session.thinking.append", "delegation_id": created["delegation"]["id"],
                            "content": "x"})
    assert thinking["error"]["param"] == "delegation_id"   # appends name client delegations only
    mock.send({"type": "response.item.create", "item": {"type": "function_call_output", "call_id": second, "output": "9am"}})
    continuation = [event["event"] for event in mock.send({"type": "response.create"})]
    text = "".join(event["delta"] for event in continuation if event["type"] == "response.output_text.delta")
    assert text == "Here it is: 9am" and continuation[-1]["type"] == "response.completed"
    assert mock.session.backend.creates == 1
    heard = []
    for _ in range(30):
        heard += mock.audio(100)
    assert "Here it is: 9am" in "".join(e["delta"] for e in heard if e["type"] == "session.output_transcript.delta")


def test_a_responses_update_is_sparse_and_its_type_immutable() -> None:
    mock = Driver()
    mock.start(delegation=RESPONSES)
    [updated] = mock.send({"type": "session.update", "event_id": "u1",
                           "session": {"delegation": {"type": "responses", "responses": {"tools": [WEATHER]}}}})
    assert updated["session"]["delegation"]["responses"] == {"model": "gpt-5", "tools": [WEATHER]}
    [refused] = mock.send({"type": "session.update", "session": {"delegation": {"type": "client"}}})
    assert refused["error"]["param"] == "session.delegation.type"
    said = mock.turn("both")   # get_time is no longer offered: the strict model does not call it
    calls = [e["event"]["item"]["name"] for e in said
             if e["type"] == "response.event" and e["event"]["type"] == "response.output_item.done"]
    assert calls == ["get_weather"]


def test_a_decisions_delegation_answers_the_configured_questions() -> None:
    mock = Driver(LiveOptions(decision_answers={"wants_human": 0.9, "topic": "weather", "mood": 1}))
    mock.start(delegation=DECISIONS)
    said = mock.turn("weather, and a person please")
    created, decided = said[-2:]
    assert created["delegation"]["target"] == "decisions" and decided["delegation_id"] == created["delegation"]["id"]
    answers = {answer["name"]: answer for answer in decided["event"]["decision"]["answers"]}
    assert answers["wants_human"]["probability"] == 0.9 and answers["topic"]["choice"] == "weather"
    assert answers["mood"]["score"] == 1.0
    [item] = mock.send({"type": "decision.item.create", "event_id": "d1",
                        "item": {"type": "function_call_output", "call_id": "call_1", "output": "ok"}})
    assert item["type"] == "decision.item.created" and item["client_event_id"] == "d1"
    [deleted] = mock.send({"type": "decision.item.delete", "item_id": item["item"]["id"]})
    assert deleted["type"] == "decision.item.deleted"
    [now] = mock.send({"type": "decision.create", "event_id": "e_eval"})
    assert now["type"] == "decision.event" and now["delegation_id"] is None
    [reused] = mock.send({"type": "decision.create", "event_id": "e_eval"})
    assert reused["type"] == "error"
    [wrong] = mock.send({"type": "response.create"})
    assert wrong["error"]["message"] == "response.create requires Responses delegation."


def test_a_sideband_attaches_sees_timed_audio_and_may_not_start() -> None:
    mock = Driver()
    mock.start()
    [started] = mock.attach(1, f"/v1/live/sessions/{mock.session.id}/attach")
    assert started["type"] == "session.started"
    [refused] = mock.send({"type": "session.start", "session": {"model": "gpt-live-1"}}, origin=1)
    assert refused["type"] == "error" and mock.out[0][-1]["type"] != "error"   # the error is the sideband's
    [refused] = mock.send({"type": "session.input_audio.append", "audio": audio(100)}, origin=1)
    assert refused["type"] == "error"
    mock.audio(100)
    reflected, timed = mock.out[1][-2:]
    assert reflected == {"type": "session.input_audio.append", "audio": audio(100)}
    assert timed["type"] == "session.output_audio.delta" and (timed["start_ms"], timed["end_ms"]) == (0, 100)
    assert mock.send({"type": "session.input_audio.mute", "event_id": "m1"}, origin=1)[0]["client_event_id"] == "m1"


def test_close_fails_each_pending_append_then_reports_the_session() -> None:
    mock = Driver()
    mock.start()
    mock.send({"type": "session.thinking.append", "delegation_id": None, "content": "a", "event_id": "a1"})
    mock.send({"type": "session.thinking.append", "delegation_id": None, "content": "b"})
    mock.audio(1000)
    for _ in range(20):
        mock.audio(1000)   # usage every 15 s of the timeline
    assert [e["usage"]["seconds"] for e in mock.out[0] if e["type"] == "session.usage.updated"] == [15]
    mock.send({"type": "session.commentary.append", "delegation_id": None, "content": "late", "event_id": "p1"})
    closing = mock.send({"type": "session.close", "event_id": "bye"})
    assert types(closing) == ["error", "session.closed"]
    assert closing[0]["error"]["code"] == "context_injection_incomplete" and closing[0]["client_event_id"] == "p1"
    assert closing[1]["reason"] == "close_requested" and closing[1]["usage"] == {"seconds": 21.0}
    assert mock.hung_up


def test_the_say_exactly_instructions_are_said() -> None:
    mock = Driver()
    mock.start()
    mock.send({"type": "session.instructions.append", "delegation_id": None, "content": "Say exactly: One moment."})
    heard = []
    for _ in range(20):
        heard += mock.audio(100)
    assert "".join(e["delta"] for e in heard if e["type"] == "session.output_transcript.delta") == "One moment."


# ---- over loopback, with the official SDK as the client ------------------------------------------
async def _until(connection: Any, kind: str, feed: Any = None) -> Any:
    """Events from the SDK connection until one of `kind`, sending a frame of silence before
    each read when `feed` is given (the timeline advances with it)."""
    while True:
        if feed is not None:
            await feed.session.input_audio.append(audio=audio(100))
        event = await asyncio.wait_for(connection.recv(), 5)
        if event.type == kind:
            return event


async def test_the_sdk_holds_a_client_delegation_and_a_sideband_attaches() -> None:
    async with MockUpstream(script=SCRIPT, dialect="live", api_key="sk-test") as mock:
        client = AsyncOpenAI(api_key="sk-test", websocket_base_url=mock.base_url + "/v1")
        async with client.live.connect() as connection:
            await connection.session.start(session={"model": "gpt-live-1", "delegation": {"type": "client"}})
            started = await _until(connection, "session.started")
            session = mock.sessions[0]
            assert isinstance(session, LiveMockSession) and started.session.id == session.id
            async with client.live.sideband.connect(session_id=session.id) as sideband:
                assert (await _until(sideband, "session.started")).session.id == session.id
                await mock.user_turn(session, "weather in Paris?")
                created = await _until(connection, "session.delegation.created")
                await connection.session.commentary.append(content="sunny", delegation_id=created.delegation.id)
                ack = await _until(connection, "session.commentary.appended", feed=connection)
                said = []
                while "sunny" not in "".join(said):
                    said.append((await _until(connection, "session.output_transcript.delta", feed=connection)).delta)
                assert ack.end_ms <= session.timeline_ms
                timed = await _until(sideband, "session.output_audio.delta")
                assert timed.start_ms is not None
                await connection.session.close()
                closed = await _until(connection, "session.closed")
                assert closed.reason == "close_requested"
                # read on to the sideband's own session.closed, as a client does: what it leaves
                # unread holds its closing handshake up until the timeout
                assert (await _until(sideband, "session.closed")).reason == "close_requested"
    for record in mock.sent:
        validated(record.event, sideband=record.connection != 0)
    assert json.loads(json.dumps(mock.received[0].event))["type"] == "session.start"


async def test_the_mock_refuses_a_model_in_the_query_and_a_wrong_key() -> None:
    async with MockUpstream(dialect="live", api_key="sk-test") as mock:
        bad = AsyncOpenAI(api_key="wrong", websocket_base_url=mock.base_url + "/v1", max_retries=0)
        with pytest.raises(Exception):
            async with bad.live.connect(max_retries=0) as connection:
                await connection.recv()
        query = AsyncOpenAI(api_key="sk-test", websocket_base_url=mock.base_url + "/v1")
        with pytest.raises(Exception):
            async with query.live.connect(extra_query={"model": "gpt-live-1"}, max_retries=0) as connection:
                await connection.recv()
        assert mock.sessions == []
