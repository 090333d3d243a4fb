"""The mock upstream's Gemini Live mode over real sockets: what it sends parses as the SDK's
`LiveServerMessage`, in binary frames; it plays scripted turns, calls, answers, barge-ins and
goAway, and closes with 1007 on what the service refuses."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from relay.cli import build_parser
from relay.mock import MockUpstream
from relay.mock.gemini import PATHS
from relay.mock.script import MockScript, Reply, StreamOptions
from tests.support.clients import gemini_client
from tests.support.frames import model_words
from tests.support.keys import GEMINI_KEY
from tests.support.paths import REPO
from tests.support.processes import relay_process
from tests.support.sdk import server_message
from tests.support.tools import GEMINI_DOOR, GEMINI_SCRIPT, GEMINI_WEATHER

TEXT = {"generationConfig": {"responseModalities": ["TEXT"]}}
NON_BLOCKING_DOOR = {**GEMINI_DOOR, "behavior": "NON_BLOCKING"}


@pytest.fixture
async def mock() -> AsyncIterator[MockUpstream]:
    async with MockUpstream(script=GEMINI_SCRIPT, dialect="gemini", api_key=GEMINI_KEY) as upstream:
        yield upstream


async def test_a_scripted_call_is_answered_and_the_model_speaks_the_result(mock: MockUpstream) -> None:
    assert mock.url == mock.base_url + "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"
    async with gemini_client(mock.base_url) as client:
        await client.setup(tools=[{"functionDeclarations": [GEMINI_WEATHER]}], **TEXT)
        await client.say("What's the weather?")
        preamble_and_call = await client.turn()
        call = preamble_and_call[-1]["toolCall"]["functionCalls"][0]
        assert (call["name"], call["args"]) == ("get_weather", {"city": "Paris"})
        assert call["id"].startswith("function-call-")
        assert model_words(preamble_and_call) == "Let me check."
        await client.answer(call["id"], "get_weather", {"temp_c": 21})
        answer_turn = await client.turn()
    assert model_words(answer_turn) == "Here is what I found: ['{\"temp_c\":21}']"
    assert [next(iter(m)) for m in answer_turn[-2:]] == ["serverContent", "serverContent"]
    assert all(client.binary), "the service sends JSON in binary frames"
    for message in client.messages:
        server_message(message)
    (session,) = mock.sessions
    assert session.auth == "x-goog-api-key" and session.model == "models/gemini-live-2.5-flash-preview"
    assert [record.event for record in mock.received][1]["clientContent"]["turnComplete"] is True


async def test_the_sdk_spelling_is_accepted(mock: MockUpstream) -> None:
    async with gemini_client(mock.base_url) as client:
        await client.send({"setup": {"model": "models/m", "generation_config": {"response_modalities": ["TEXT"]},
                                     "tools": [{"function_declarations": [GEMINI_WEATHER]}]}})
        await client.wait_for(lambda m: "setupComplete" in m)
        await client.send({"client_content": {"turns": [{"role": "user", "parts": [{"text": "weather"}]}],
                                              "turn_complete": True}})
        call = (await client.turn())[-1]["toolCall"]["functionCalls"][0]
        await client.send({"tool_response": {"functionResponses": [
            {"id": call["id"], "name": "get_weather", "response": {"output": "sunny"}}]}})
        assert "sunny" in model_words(await client.turn())


@pytest.mark.parametrize("path", PATHS)
async def test_every_api_version_path_and_the_key_query_are_served(mock: MockUpstream, path: str) -> None:
    async with gemini_client(mock.base_url, path=path, key=None, query=f"?key={GEMINI_KEY}") as client:
        await client.setup()
    assert mock.sessions[-1].auth == "key-query"


@pytest.mark.parametrize(("path", "key", "status"), [
    ("/v1/realtime", GEMINI_KEY, 404),
    (PATHS[0], None, 403),
    (PATHS[0], "wrong", 403),
])
async def test_handshakes_are_refused(mock: MockUpstream, path: str, key: str | None, status: int) -> None:
    with pytest.raises(InvalidStatus) as refused:
        async with gemini_client(mock.base_url, path=path, key=key):
            pass
    assert refused.value.response.status_code == status


@pytest.mark.parametrize(("messages", "fragment"), [
    ([{"clientContent": {"turns": []}}], "first message must be setup"),
    ([{"setup": {"model": "m"}}, {"setup": {"model": "m"}}], "only once"),
    ([{"setup": {}}], "setup.model"),
    ([{"setup": {"model": "m"}}, {"surprise": {}}], 'Unknown name "surprise"'),
    ([{"setup": {"model": "m", "tools": [{"functionDeclarations": [GEMINI_WEATHER, GEMINI_WEATHER]}]}}],
     "Duplicate function declaration"),
    ([{"setup": {"model": "m"}}, {"toolResponse": {"functionResponses": [{"id": "nope", "response": {}}]}}],
     "unknown function call id"),
    (["{not json"], "Invalid JSON payload"),
])
async def test_what_the_service_refuses_closes_the_socket_with_1007(
        mock: MockUpstream, messages: list, fragment: str) -> None:
    async with gemini_client(mock.base_url) as client:
        for message in messages:
            await client.send(message)
        code, reason = await client.closed()
    assert code == 1007 and fragment in reason


async def test_a_second_final_answer_is_taken_no_notice_of(mock: MockUpstream) -> None:
    """No source reports the service closing for one (the mock closed with 1007 until December
    2026); an answer for a call the service no longer waits on is reported to get no reply
    (docs/gemini.md, "A second answer to one call")."""
    async with gemini_client(mock.base_url) as client:
        await client.setup(tools=[{"functionDeclarations": [GEMINI_WEATHER]}], **TEXT)
        await client.say("weather")
        call_id = (await client.turn())[-1]["toolCall"]["functionCalls"][0]["id"]
        await client.answer(call_id, "get_weather", "sunny")
        assert "sunny" in model_words(await client.turn())
        await client.answer(call_id, "get_weather", "rainy")
        await client.say("hello")
        assert model_words(await client.turn()) == "Hello from the mock.", "no second reply about the weather"
    (session,) = mock.sessions
    assert session.repeated == [call_id] and len(session.calls[call_id].answers) == 1


async def test_will_continue_on_a_blocking_call_is_ignored(mock: MockUpstream) -> None:
    """google-genai's FunctionResponse.will_continue: "only applicable to NON_BLOCKING function
    calls, is ignored otherwise": the answer is final, and the model speaks after it."""
    async with gemini_client(mock.base_url) as client:
        await client.setup(tools=[{"functionDeclarations": [GEMINI_WEATHER]}], **TEXT)
        await client.say("weather")
        call_id = (await client.turn())[-1]["toolCall"]["functionCalls"][0]["id"]
        await client.answer(call_id, "get_weather", "sunny", willContinue=True)
        assert "sunny" in model_words(await client.turn())
    (session,) = mock.sessions
    assert session.calls[call_id].state == "answered"


async def test_non_blocking_answers_are_spoken_unless_silent(mock: MockUpstream) -> None:
    async with gemini_client(mock.base_url) as client:
        await client.setup(tools=[{"functionDeclarations": [NON_BLOCKING_DOOR]}], **TEXT)
        await client.say("open the door")
        call = (await client.turn())[-1]["toolCall"]["functionCalls"][0]
        assert (await client.turn())[-1] == {"serverContent": {"turnComplete": True}}, "the model does not wait"
        await client.answer(call["id"], "open_door", "opening", willContinue=True, scheduling="WHEN_IDLE")
        assert "opening" in model_words(await client.turn())
        await client.answer(call["id"], "open_door", "opened", willContinue=False, scheduling="SILENT")
        await client.say("hi")
        assert model_words(await client.turn()) == "Hello from the mock."
    (session,) = mock.sessions
    assert [len(c.answers) for c in session.calls.values()] == [2]


async def test_a_user_turn_over_a_pending_call_interrupts_and_cancels_it(mock: MockUpstream) -> None:
    """A late answer for the cancelled call is taken no notice of: the session goes on, nothing is
    said of it (docs/gemini.md: no source reports the service closing for one)."""
    async with gemini_client(mock.base_url) as client:
        await client.setup(tools=[{"functionDeclarations": [GEMINI_WEATHER]}], **TEXT)
        await client.say("weather")
        call_id = (await client.turn())[-1]["toolCall"]["functionCalls"][0]["id"]
        await client.say("never mind")
        barge_in = await client.turn()
        assert barge_in[:2] == [{"serverContent": {"interrupted": True}}, {"toolCallCancellation": {"ids": [call_id]}}]
        await client.answer(call_id, "get_weather", "late")
        await client.say("hi")
        assert model_words(await client.turn()) == "Hello from the mock."
    (session,) = mock.sessions
    assert session.ignored == [call_id]
    assert session.calls[call_id].state == "cancelled" and session.calls[call_id].answers == []
    assert not any("late" in str(item.get("output")) for item in session.items)


async def test_interrupt_and_go_away_from_a_test(mock: MockUpstream) -> None:
    async with gemini_client(mock.base_url) as client:
        await client.setup(tools=[{"functionDeclarations": [GEMINI_WEATHER, GEMINI_DOOR]}], **TEXT)
        await client.say("both")
        ids = [c["id"] for c in (await client.turn())[-1]["toolCall"]["functionCalls"]]
        session = mock.sessions[0]
        await mock.interrupt(session)
        await mock.go_away(session, "5s")
        await client.wait_for(lambda m: "goAway" in m)
    # the turn the model waited in ends too: "interrupted > turn_complete" (google-genai's LiveServerContent)
    assert client.messages[-4:] == [{"serverContent": {"interrupted": True}}, {"toolCallCancellation": {"ids": ids}},
                                    {"serverContent": {"turnComplete": True}}, {"goAway": {"timeLeft": "5s"}}]
    for message in client.messages:
        server_message(message)


async def test_audio_replies_stream_inline_data_and_their_transcription() -> None:
    script = MockScript(default=Reply(say="Hi there"), options=StreamOptions(audio_chunks=3, text_chunk_chars=4))
    async with MockUpstream(script=script, dialect="gemini") as upstream:
        async with gemini_client(upstream.base_url, key=None) as client:
            await client.setup(outputAudioTranscription={})
            await client.say("hello")
            turn = await client.turn()
    audio = [m for m in turn if "modelTurn" in m.get("serverContent", {})]
    assert len(audio) == 3
    assert audio[0]["serverContent"]["modelTurn"]["parts"][0]["inlineData"]["mimeType"] == "audio/pcm;rate=24000"
    assert model_words(turn) == "Hi there"
    for message in turn:
        server_message(message)


async def test_strict_tools_drop_a_call_the_setup_did_not_declare(
        mock: MockUpstream, caplog: pytest.LogCaptureFixture) -> None:
    async with gemini_client(mock.base_url) as client:
        await client.setup(**TEXT)
        await client.say("weather")
        turn = await client.turn()
        await client.say("weather")
        await client.turn()
    assert not any("toolCall" in m for m in turn)
    assert model_words(turn) == "Let me check."
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.name == "relay.mock"]
    assert len(warnings) == 1 and "'get_weather', which is not among the session's tools (none)" in warnings[0]


async def test_relay_mock_serves_gemini_from_the_command_line() -> None:
    async with relay_process("mock", "--port", "0", "--dialect", "gemini", env={"PYTHONPATH": str(REPO)},
                             stdout=True) as process:
        assert process.stdout is not None
        try:
            url = (await asyncio.wait_for(process.stdout.readline(), 10)).decode().strip()
            assert url.endswith("/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent")
            async with connect(url) as ws:
                await ws.send(json.dumps({"setup": {"model": "models/m"}}))
                assert json.loads(await asyncio.wait_for(ws.recv(), 5)) == {"setupComplete": {}}
        finally:
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 10) == 0
    assert build_parser().parse_args(["mock", "--dialect", "gemini"]).dialect == "gemini"
