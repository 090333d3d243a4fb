"""Fault injection, server-initiated responses and simulated user turns."""

from __future__ import annotations

import asyncio

import pytest
from websockets.exceptions import ConnectionClosed

from relay.mock import Faults, MockScript, Reply, Rule, ToolCall
from tests.support.clients import MockFactory, raw_connect
from tests.support.frames import types_of, user_text
from tests.support.tools import WEATHER_TOOL

CALL_SCRIPT = MockScript(
    rules=[
        Rule(match="weather", calls=[ToolCall(name="get_weather", arguments={"city": "Rome"})]),
        Rule(match="long", say="This answer takes a while to say.", hold=True),
    ],
    after_outputs=Reply(say="It is {output}."),
    default=Reply(say="Hi."),
    options={"audio_chunks": 1},
)
TOOLS_UPDATE = {"type": "session.update", "session": {"type": "realtime", "tools": [WEATHER_TOOL]}}


async def _call_id(client) -> str:  # noqa: ANN001 - a RawClient
    await client.ask(TOOLS_UPDATE, "session.updated")
    await client.ask(user_text("weather"), "conversation.item.done")
    events = await client.ask({"type": "response.create"}, "response.done")
    return next(e["call_id"] for e in events if e["type"] == "response.function_call_arguments.done")


@pytest.mark.parametrize(("code", "expected"), [(None, 1006), (4000, 4000)])
async def test_drop_after_n_events(make_mock: MockFactory, code: int | None, expected: int) -> None:
    mock = await make_mock(faults=Faults(drop_after_events=3, drop_close_code=code))
    async with raw_connect(mock) as client:
        await client.send(user_text("hello"))
        received = [await client.recv(), await client.recv()]
        with pytest.raises(ConnectionClosed):
            await client.recv()
    assert types_of(received) == ["conversation.item.added", "conversation.item.done"]
    assert client.ws.close_code == expected
    await mock.wait_session_ended(mock.sessions[0])
    assert len(mock.sent) == 3


async def test_event_delay_slows_every_event(make_mock: MockFactory) -> None:
    mock = await make_mock(faults=Faults(event_delay=0.05))
    async with raw_connect(mock) as client:
        await client.ask(user_text("hello"), "conversation.item.done")
    delays = [w for w in mock.waits if w.kind == "event_delay"]
    assert len(delays) >= 2 and all(w.seconds == 0.05 and w.ended == "elapsed" for w in delays), \
        "every event delayed, the two items' among them"


async def test_duplicate_done_events(make_mock: MockFactory) -> None:
    mock = await make_mock(script=CALL_SCRIPT, faults=Faults(duplicate_done=True))
    async with raw_connect(mock) as client:
        await client.ask(TOOLS_UPDATE, "session.updated")
        await client.send(user_text("weather"))
        await client.send({"type": "response.create"})
        await mock.wait_for_sent(lambda e: e["type"] == "response.done")
        dones = [e for e in await client.until("response.done") if e["type"].endswith(".done")]
        dones.append(await client.recv())
    pairs = [(e["type"], e["event_id"]) for e in dones]
    assert pairs[::2] == pairs[1::2], "each .done arrives twice with the same event_id"
    assert {
        "response.function_call_arguments.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    } <= {t for t, _ in pairs}


async def test_auto_response_after_output_races_the_client(make_mock: MockFactory) -> None:
    mock = await make_mock(script=CALL_SCRIPT, faults=Faults(auto_response_after_output=True))
    async with raw_connect(mock) as client:
        call_id = await _call_id(client)
        await client.send(
            {
                "type": "conversation.item.create",
                "item": {"type": "function_call_output", "call_id": call_id, "output": "sunny"},
            }
        )
        events = await client.until("response.done")
    assert "response.created" in types_of(events)
    assert events[-1]["response"]["output"][0]["content"][0]["transcript"] == "It is sunny."
    session = mock.sessions[0]
    assert [r.origin for r in session.responses] == ["client", "server"]
    assert [r.event["type"] for r in mock.received].count("response.create") == 1


async def test_pace_audio_takes_real_time(make_mock: MockFactory) -> None:
    script = MockScript(default=Reply(say="Hi."), options={"audio_chunks": 3, "audio_chunk_bytes": 2400})
    mock = await make_mock(script=script, faults=Faults(pace_audio=True))
    async with raw_connect(mock) as client:
        await client.ask({"type": "response.create"}, "response.done")
    assert [(w.kind, w.seconds, w.ended) for w in mock.waits] == [("pause", 0.05, "elapsed")] * 3, \
        "each of the three chunks of 50 ms waits its time"


async def test_paced_response_is_cancelled_without_waiting(make_mock: MockFactory) -> None:
    script = MockScript(
        default=Reply(say="A long paced answer."), options={"audio_chunks": 50, "audio_chunk_bytes": 48000}
    )
    mock = await make_mock(script=script, faults=Faults(pace_audio=True))
    async with raw_connect(mock) as client:
        await client.send({"type": "response.create"})
        await client.until("response.output_audio.delta")
        done = (await client.ask({"type": "response.cancel"}, "response.done"))[-1]
    assert done["response"]["status"] == "cancelled"
    assert [w.ended for w in mock.waits][-1] == "woken", "the 1 s pause is cut short by the cancel"


async def test_reject_response_create_n_times(make_mock: MockFactory) -> None:
    error = {"type": "invalid_request_error", "code": "rate_limit_exceeded", "message": "Slow down."}
    mock = await make_mock(faults=Faults(reject_response_create=2, reject_error=error))
    async with raw_connect(mock) as client:
        rejected = [
            (await client.ask({"type": "response.create", "event_id": f"r{i}"}, "error"))[-1]["error"] for i in range(2)
        ]
        accepted = await client.ask({"type": "response.create"}, "response.done")
    assert [(e["code"], e["message"], e["event_id"]) for e in rejected] == [
        ("rate_limit_exceeded", "Slow down.", "r0"),
        ("rate_limit_exceeded", "Slow down.", "r1"),
    ]
    assert accepted[-1]["response"]["status"] == "completed"


async def test_faults_can_be_set_per_session(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as first, raw_connect(mock) as second:
        mock.sessions[0].faults = Faults(reject_response_create=1)
        assert (await first.ask({"type": "response.create"}, "error"))[-1]["error"]["code"] == "server_error"
        assert (await second.ask({"type": "response.create"}, "response.done"))[-1]["response"]["status"] == "completed"


async def test_start_response_is_server_initiated(make_mock: MockFactory) -> None:
    mock = await make_mock(script=CALL_SCRIPT)
    async with raw_connect(mock) as client:
        await client.ask(user_text("long story"), "conversation.item.done")
        session = mock.sessions[0]
        run = mock.start_response(session)
        created = (await client.until("response.created"))[-1]
        with pytest.raises(RuntimeError):
            mock.start_response(session)
        refused = (await client.ask({"type": "response.create", "event_id": "mine"}, "error"))[-1]["error"]
        mock.release(session)
        done = (await client.until("response.done"))[-1]
    assert created["response"]["id"] == run.id and run.origin == "server"
    assert refused["code"] == "conversation_already_has_active_response" and refused["event_id"] == "mine"
    assert done["response"]["status"] == "completed" and not run.active


async def test_start_response_with_an_explicit_reply(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as client:
        mock.start_response(mock.sessions[0], Reply(say="Good morning!"), request={"output_modalities": ["text"]})
        done = (await client.until("response.done"))[-1]
    assert done["response"]["output"][0]["content"][0] == {"type": "output_text", "text": "Good morning!"}


async def test_user_turn_barges_in_and_answers(make_mock: MockFactory) -> None:
    mock = await make_mock(script=CALL_SCRIPT)
    async with raw_connect(mock) as client:
        await client.ask(user_text("tell me something long"), "conversation.item.done")
        await client.send({"type": "response.create"})
        first = await client.until("response.output_audio_transcript.delta")
        session = mock.sessions[0]
        await mock.user_turn(session, "weather in Rome?", respond=False)
        events = await client.until("conversation.item.input_audio_transcription.completed")
    kinds = types_of(events)
    assert kinds[0] == "input_audio_buffer.speech_started"
    cancelled = next(e for e in events if e["type"] == "response.done")["response"]
    assert cancelled["id"] == first[0]["response"]["id"] and cancelled["status_details"]["reason"] == "turn_detected"
    assert (
        kinds.index("response.done")
        < kinds.index("input_audio_buffer.speech_stopped")
        < kinds.index("input_audio_buffer.committed")
    )
    assert session.items[-1]["content"][0]["transcript"] == "weather in Rome?"
    assert session.active_response is None, "respond=False: no new response"


async def test_user_turn_creates_a_response_like_server_vad(make_mock: MockFactory) -> None:
    mock = await make_mock(script=MockScript(default=Reply(say="Hello."), transcripts=["Hi there"]))
    async with raw_connect(mock) as client:
        await mock.user_turn(mock.sessions[0])
        events = await client.until("response.done")
        update = {
            "type": "realtime",
            "audio": {"input": {"turn_detection": {"type": "server_vad", "create_response": False}}},
        }
        await client.ask({"type": "session.update", "session": update}, "session.updated")
        await mock.user_turn(mock.sessions[0], "silence please")
        quiet = await client.until("conversation.item.input_audio_transcription.completed")
    transcript = next(e for e in events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert transcript["transcript"] == "Hi there"
    assert events[-1]["response"]["status"] == "completed" and mock.sessions[0].responses[0].origin == "server"
    assert "response.created" not in types_of(quiet) and len(mock.sessions[0].responses) == 1


async def test_out_of_band_response_is_not_interrupted_by_a_user_turn(make_mock: MockFactory) -> None:
    mock = await make_mock(script=CALL_SCRIPT)
    async with raw_connect(mock) as client:
        await client.ask(user_text("long one"), "conversation.item.done")
        await client.send({"type": "response.create", "response": {"conversation": "none"}})
        await client.until("response.output_audio_transcript.delta")
        session = mock.sessions[0]
        await asyncio.wait_for(mock.user_turn(session, "hello?", respond=False), 3)
        assert session.active_response is not None and session.active_response.out_of_band
        mock.release(session)
        done = (await client.until("response.done"))[-1]
    assert done["response"]["status"] == "completed"
