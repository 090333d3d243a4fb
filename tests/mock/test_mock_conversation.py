"""Session configuration, conversation items, the input audio buffer, and bad client input."""

from __future__ import annotations

import asyncio
import base64
import json

import msgspec
import pytest

from relay.mock import MockScript
from tests.support.clients import MockFactory, raw_connect, sdk_connect, sdk_until
from tests.support.frames import types_of, user_text
from tests.support.tools import WEATHER_TOOL

AUDIO_100MS = base64.b64encode(bytes(4800)).decode()  # PCM16 24 kHz


def _error(event: dict) -> dict:
    assert event["type"] == "error", event
    return event["error"]


async def test_session_update_merges_only_present_fields(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with sdk_connect(mock) as connection:
        await connection.session.update(
            session={"type": "realtime", "instructions": "Be brief.", "tools": [WEATHER_TOOL]}
        )
        first = await asyncio.wait_for(connection.recv(), 3)
        await connection.session.update(
            session={"type": "realtime", "audio": {"output": {"voice": "marin"}}, "tools": []}
        )
        second = await asyncio.wait_for(connection.recv(), 3)
    assert first.type == "session.updated" and [t.name for t in first.session.tools] == ["get_weather"]
    updated = mock.sent[-1].event["session"]
    assert updated["instructions"] == "Be brief.", "absent fields keep their value"
    assert updated["tools"] == [], "tools are replaced as a whole"
    assert updated["audio"]["output"] == {
        "format": {"type": "audio/pcm", "rate": 24000},
        "voice": "marin",
        "speed": 1.0,
    }
    assert updated["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert second.session.audio.output.voice == "marin" and mock.sessions[0].tools == []


async def test_session_update_replaces_a_typed_object_whose_type_changes(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as client:
        update = {
            "type": "realtime",
            "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}},
        }
        events = await client.ask({"type": "session.update", "session": update}, "session.updated")
        assert events[-1]["session"]["audio"]["input"]["turn_detection"] == {"type": "semantic_vad", "eagerness": "low"}
        update = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
        events = await client.ask({"type": "session.update", "session": update}, "session.updated")
        assert events[-1]["session"]["audio"]["input"]["turn_detection"] is None


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        ({"instructions": "x"}, "missing_required_parameter", "session.type"),
        ({"type": "realtime", "modalities": ["text"]}, "unknown_parameter", "session.modalities"),
        (
            {"type": "realtime", "audio": {"output": {"colour": "red"}}},
            "unknown_parameter",
            "session.audio.output.colour",
        ),
        ({"type": "realtime", "output_modalities": ["text", "audio"]}, "invalid_value", "session.output_modalities"),
        (
            {"type": "realtime", "tools": [{**WEATHER_TOOL, "description": "d" * 1025}]},
            "string_above_max_length",
            "session.tools[0].description",
        ),
        (
            {"type": "realtime", "tools": [{**WEATHER_TOOL, "name": "bad name"}]},
            "invalid_value",
            "session.tools[0].name",
        ),
        ({"type": "realtime", "tool_choice": "sometimes"}, "invalid_value", "session.tool_choice"),
    ],
)
async def test_invalid_session_updates_are_refused_whole(
    make_mock: MockFactory, session: dict, code: str, param: str
) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as client:
        error = _error(
            (await client.ask({"type": "session.update", "event_id": "evt_1", "session": session}, "error"))[-1]
        )
    assert (error["code"], error["param"], error["event_id"]) == (code, param, "evt_1")
    assert mock.sessions[0].instructions != "x" and mock.sessions[0].tools == []


async def test_beta_session_update_is_flat(make_mock: MockFactory) -> None:
    mock = await make_mock(dialect="openai-beta")
    async with raw_connect(mock) as client:
        events = await client.ask(
            {"type": "session.update", "session": {"voice": "verse", "tools": [WEATHER_TOOL]}}, "session.updated"
        )
        assert events[-1]["session"]["voice"] == "verse" and events[-1]["session"]["tools"] == [WEATHER_TOOL]
        error = _error((await client.ask({"type": "session.update", "session": {"type": "realtime"}}, "error"))[-1])
        assert error["code"] == "unknown_parameter" and error["param"] == "session.type"


async def test_items_get_server_ids_and_keep_client_ids(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with sdk_connect(mock) as connection:
        await connection.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        )
        added, done = await sdk_until(connection, "conversation.item.done")
        await connection.conversation.item.create(
            item={
                "id": "my_item",
                "type": "message",
                "role": "system",
                "content": [{"type": "input_text", "text": "sys"}],
            }
        )
        mine = (await sdk_until(connection, "conversation.item.done"))[-1]
    assert added.type == "conversation.item.added" and added.item.id.startswith("item_")
    assert added.previous_item_id is None and done.item.status == "completed"
    assert mine.item.id == "my_item" and mine.previous_item_id == added.item.id
    assert [i["id"] for i in mock.sessions[0].items] == [added.item.id, "my_item"]


async def test_previous_item_id_places_items(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as client:
        await client.ask(user_text("a") | {"item": {**user_text("a")["item"], "id": "a"}}, "conversation.item.done")
        await client.ask(user_text("b") | {"item": {**user_text("b")["item"], "id": "b"}}, "conversation.item.done")
        at_root = await client.ask(
            user_text("r") | {"item": {**user_text("r")["item"], "id": "r"}, "previous_item_id": "root"},
            "conversation.item.done",
        )
        after_a = await client.ask(
            user_text("x") | {"item": {**user_text("x")["item"], "id": "x"}, "previous_item_id": "a"},
            "conversation.item.done",
        )
        unknown = await client.ask(user_text("u", event_id="evt_u", previous_item_id="nope"), "error")
    assert [e["previous_item_id"] for e in at_root] == [None, None]
    assert [e["previous_item_id"] for e in after_a] == ["a", "a"]
    error = _error(unknown[-1])
    assert (error["code"], error["param"], error["event_id"]) == ("item_not_found", "previous_item_id", "evt_u")
    assert [i["id"] for i in mock.sessions[0].items] == ["r", "a", "x", "b"]


@pytest.mark.parametrize(
    ("item", "code", "param"),
    [
        (
            {"type": "function_call_output", "call_id": "call_missing", "output": "1"},
            "function_call_not_found",
            "item.call_id",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": "1", "name": "f"},
            "unknown_parameter",
            "item.name",
        ),
        (
            {"type": "function_call", "name": "f", "call_id": "c", "arguments": "{}", "response_id": "r"},
            "unknown_parameter",
            "item.response_id",
        ),
        ({"type": "function_call", "name": "f", "call_id": "c"}, "missing_required_parameter", "item.arguments"),
        ({"type": "function_call_output", "call_id": "c", "output": {"a": 1}}, "invalid_type", "item.output"),
        ({"type": "reasoning"}, "invalid_value", "item.type"),
        ({"type": "message", "role": "robot", "content": []}, "invalid_value", "item.role"),
        (
            {"type": "message", "role": "assistant", "content": [{"type": "output_audio", "audio": ""}]},
            "invalid_value",
            "item.content[0].type",
        ),
        ({"id": "i" * 33, "type": "message", "role": "user", "content": []}, "string_above_max_length", "item.id"),
        (None, "missing_required_parameter", "item"),
    ],
)
async def test_invalid_items_are_refused(make_mock: MockFactory, item: dict, code: str, param: str) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as client:
        error = _error(
            (await client.ask({"type": "conversation.item.create", "event_id": "e1", "item": item}, "error"))[-1]
        )
    assert (error["type"], error["code"], error["param"], error["event_id"]) == (
        "invalid_request_error",
        code,
        param,
        "e1",
    )
    assert mock.sessions[0].items == []


async def test_duplicate_item_id_is_refused(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as client:
        event = user_text("a") | {"item": {**user_text("a")["item"], "id": "same"}}
        await client.ask(event, "conversation.item.done")
        error = _error((await client.ask(event, "error"))[-1])
    assert error["code"] == "duplicate_item_id" and len(mock.sessions[0].items) == 1


async def test_function_call_output_needs_its_call_in_the_conversation(make_mock: MockFactory) -> None:
    mock = await make_mock()
    call = {"type": "function_call", "name": "get_weather", "call_id": "call_1", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}
    async with raw_connect(mock) as client:
        await client.ask({"type": "conversation.item.create", "item": call}, "conversation.item.done")
        events = await client.ask({"type": "conversation.item.create", "item": output}, "conversation.item.done")
    assert events[0]["item"]["type"] == "function_call_output" and "status" not in events[0]["item"]
    assert [i["type"] for i in mock.sessions[0].items] == ["function_call", "function_call_output"]


async def test_foundry_keeps_its_item_fields(make_mock: MockFactory) -> None:
    mock = await make_mock(dialect="foundry")
    call = {
        "type": "function_call",
        "name": "f",
        "call_id": "call_1",
        "arguments": "{}",
        "response_id": "resp_1",
        "created_at": 1700000000,
    }
    output = {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "ok",
        "name": "f",
        "response_id": "resp_1",
        "created_at": 1700000001,
    }
    async with raw_connect(mock, "model=gpt-realtime", path="/openai/v1/realtime") as client:
        await client.ask({"type": "conversation.item.create", "item": call}, "conversation.item.done")
        added, done = await client.ask({"type": "conversation.item.create", "item": output}, "conversation.item.done")
    for event in (added, done):
        assert {k: event["item"][k] for k in ("name", "response_id", "created_at")} == {
            "name": "f",
            "response_id": "resp_1",
            "created_at": 1700000001,
        }


async def test_beta_announces_items_with_created_only(make_mock: MockFactory) -> None:
    mock = await make_mock(dialect="openai-beta")
    async with raw_connect(mock) as client:
        await client.send(user_text("hello"))
        created = await client.recv()
        await client.send({"type": "conversation.item.retrieve", "item_id": created["item"]["id"]})
        retrieved = await client.recv()
    assert created["type"] == "conversation.item.created" and created["item"]["object"] == "realtime.item"
    assert retrieved["type"] == "conversation.item.retrieved", "no conversation.item.done in beta"


async def test_retrieve_and_delete(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as client:
        item_id = (await client.ask(user_text("keep me"), "conversation.item.done"))[0]["item"]["id"]
        retrieved = (
            await client.ask({"type": "conversation.item.retrieve", "item_id": item_id}, "conversation.item.retrieved")
        )[-1]
        missing = _error(
            (await client.ask({"type": "conversation.item.retrieve", "event_id": "r", "item_id": "nope"}, "error"))[-1]
        )
        deleted = (
            await client.ask({"type": "conversation.item.delete", "item_id": item_id}, "conversation.item.deleted")
        )[-1]
        again = _error(
            (await client.ask({"type": "conversation.item.delete", "event_id": "d", "item_id": item_id}, "error"))[-1]
        )
    assert retrieved["item"]["content"][0]["text"] == "keep me"
    assert deleted["item_id"] == item_id and mock.sessions[0].items == []
    assert (missing["code"], missing["event_id"]) == ("item_not_found", "r")
    assert (again["code"], again["event_id"]) == ("item_not_found", "d")


async def test_truncate_assistant_audio(make_mock: MockFactory) -> None:
    mock = await make_mock(script=MockScript(default={"say": "A long spoken answer."}, options={"audio_chunks": 5}))
    async with raw_connect(mock) as client:
        user_id = (await client.ask(user_text("hi"), "conversation.item.done"))[0]["item"]["id"]
        done = (await client.ask({"type": "response.create"}, "response.done"))[-1]
        item_id = done["response"]["output"][0]["id"]
        truncate = {"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": 250}
        truncated = (await client.ask(truncate, "conversation.item.truncated"))[-1]
        too_long = _error((await client.ask({**truncate, "audio_end_ms": 501, "event_id": "t1"}, "error"))[-1])
        not_audio = _error((await client.ask({**truncate, "item_id": user_id}, "error"))[-1])
        bad_index = _error((await client.ask({**truncate, "content_index": 3}, "error"))[-1])
        unknown = _error((await client.ask({**truncate, "item_id": "nope"}, "error"))[-1])
    assert {k: truncated[k] for k in ("item_id", "content_index", "audio_end_ms")} == {
        "item_id": item_id,
        "content_index": 0,
        "audio_end_ms": 250,
    }
    assert mock.sessions[0].items[-1]["content"][0]["transcript"] == "A long spo", "the unheard half is dropped"
    assert (too_long["param"], too_long["event_id"]) == ("audio_end_ms", "t1")
    assert not_audio["param"] == "item_id" and bad_index["param"] == "content_index"
    assert unknown["code"] == "item_not_found"


async def test_commit_adds_a_user_audio_item_with_the_scripted_transcript(make_mock: MockFactory) -> None:
    mock = await make_mock(script=MockScript(transcripts=["What's the weather?"]))
    async with sdk_connect(mock) as connection:
        await connection.input_audio_buffer.append(audio=AUDIO_100MS)
        await connection.input_audio_buffer.commit()
        events = await sdk_until(connection, "conversation.item.input_audio_transcription.completed")
        await connection.input_audio_buffer.append(audio=AUDIO_100MS)
        await connection.input_audio_buffer.commit()
        second = await sdk_until(connection, "conversation.item.done")
    assert types_of(events) == [
        "input_audio_buffer.committed",
        "conversation.item.added",
        "conversation.item.done",
        "conversation.item.input_audio_transcription.completed",
    ]
    committed, added, _, transcript = events
    assert committed.previous_item_id is None and committed.item_id == added.item.id
    assert added.item.role == "user" and added.item.content[0].type == "input_audio"
    assert transcript.transcript == "What's the weather?" and transcript.item_id == committed.item_id
    assert second[0].previous_item_id == committed.item_id, "the transcripts ran out: no transcript event"
    assert mock.sessions[0].items[0]["content"][0]["transcript"] == "What's the weather?"


async def test_commit_needs_100ms_and_clear_empties_the_buffer(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as client:
        empty = _error((await client.ask({"type": "input_audio_buffer.commit", "event_id": "c0"}, "error"))[-1])
        await client.send({"type": "input_audio_buffer.append", "audio": AUDIO_100MS[: len(AUDIO_100MS) // 2]})
        short = _error((await client.ask({"type": "input_audio_buffer.commit"}, "error"))[-1])
        await client.send({"type": "input_audio_buffer.append", "audio": AUDIO_100MS})
        cleared = (await client.ask({"type": "input_audio_buffer.clear"}, "input_audio_buffer.cleared"))[-1]
        after_clear = _error((await client.ask({"type": "input_audio_buffer.commit"}, "error"))[-1])
        bad = _error((await client.ask({"type": "input_audio_buffer.append", "audio": "abc"}, "error"))[-1])
    assert (empty["code"], empty["event_id"]) == ("input_audio_buffer_commit_empty", "c0")
    assert short["code"] == "input_audio_buffer_commit_empty" and "50.00ms" in short["message"]
    assert cleared["type"] == "input_audio_buffer.cleared"
    assert after_clear["code"] == "input_audio_buffer_commit_empty"
    assert bad["param"] == "audio"
    assert mock.sessions[0].items == []


async def test_unknown_events_and_bad_frames_get_errors_and_the_session_stays_open(make_mock: MockFactory) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as client:
        unknown = _error((await client.ask({"type": "conversation.summon", "event_id": "u1"}, "error"))[-1])
        no_type = _error((await client.ask({"event_id": "u2"}, "error"))[-1])
        not_json = _error((await client.ask("{not json", "error"))[-1])
        not_object = _error((await client.ask("[1, 2]", "error"))[-1])
        await client.ws.send(b"\xff\xfe")
        binary = _error(await client.recv())
        still_open = await client.ask(user_text("still here?"), "conversation.item.done")
    assert (unknown["code"], unknown["param"], unknown["event_id"]) == ("invalid_value", "type", "u1")
    assert "'conversation.summon'" in unknown["message"] and "'response.create'" in unknown["message"]
    assert (no_type["code"], no_type["event_id"]) == ("missing_required_parameter", "u2")
    assert not_json["code"] == "invalid_json" and binary["code"] == "invalid_json"
    assert not_object["code"] == "invalid_type"
    assert still_open[-1]["type"] == "conversation.item.done"
    assert [r.event.get("type") for r in mock.received] == ["conversation.summon", None, "conversation.item.create"]


async def test_absurd_nesting_gets_an_error_not_a_dropped_connection(make_mock: MockFactory) -> None:
    mock = await make_mock()
    deep_schema: dict = {"type": "object"}
    for _ in range(400):
        deep_schema = {"type": "object", "properties": {"x": deep_schema}}
    tool = {"type": "function", "name": "deep", "parameters": deep_schema}
    async with raw_connect(mock) as client:
        too_deep_to_parse = _error((await client.ask("[" * 100_000, "error"))[-1])
        await client.send(
            '{"type": "session.update", "event_id": "deep", "session": {"type": "realtime", "tools": ['
            + json.dumps(tool)
            + "]}}"
        )
        outcome = await client.recv()
        alive = await client.ask(user_text("still here"), "conversation.item.done")
    assert too_deep_to_parse["code"] == "invalid_json"
    # Parsing succeeds; copying the 800-level schema exhausts the recursion limit inside the mock.
    assert (outcome["error"]["code"], outcome["error"]["event_id"]) == ("server_error", "deep")
    assert alive[-1]["type"] == "conversation.item.done"


async def test_content_part_fields_must_be_strings(make_mock: MockFactory) -> None:
    mock = await make_mock()
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": {"nested": True}}]}
    async with raw_connect(mock) as client:
        error = _error((await client.ask({"type": "conversation.item.create", "item": item}, "error"))[-1])
    assert (error["code"], error["param"]) == ("invalid_type", "item.content[0].text")


async def test_output_audio_buffer_clear_names_the_latest_response(make_mock: MockFactory) -> None:
    mock = await make_mock(script=MockScript(options={"audio_chunks": 1}))
    async with raw_connect(mock) as client:
        await client.send({"type": "output_audio_buffer.clear"})
        nothing_yet = await client.ask(user_text("hi"), "conversation.item.done")
        done = (await client.ask({"type": "response.create"}, "response.done"))[-1]
        cleared = (await client.ask({"type": "output_audio_buffer.clear"}, "output_audio_buffer.cleared"))[-1]
    assert types_of(nothing_yet) == ["conversation.item.added", "conversation.item.done"]
    assert cleared["response_id"] == done["response"]["id"]


async def test_a_response_counts_the_conversation_as_it_stands_after_in_place_changes(make_mock: MockFactory) -> None:
    """A user item's transcript arrives after the item, a truncation shortens an assistant item's:
    the next response's input tokens count both items as they are then, not as first stored."""
    mock = await make_mock(script=MockScript(transcripts=["What's the weather like in Paris today?"],
                                             default={"say": "A long spoken answer."}, options={"audio_chunks": 5}))
    async with raw_connect(mock) as client:
        await client.send({"type": "input_audio_buffer.append", "audio": AUDIO_100MS})
        await client.ask({"type": "input_audio_buffer.commit"}, "conversation.item.input_audio_transcription.completed")
        done = (await client.ask({"type": "response.create"}, "response.done"))[-1]
        item_id = done["response"]["output"][0]["id"]
        truncate = {"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": 250}
        await client.ask(truncate, "conversation.item.truncated")
        session = mock.sessions[0]
        items = session.items
        done = (await client.ask({"type": "response.create"}, "response.done"))[-1]
    assert items[0]["content"][0]["transcript"] == "What's the weather like in Paris today?"
    assert items[1]["content"][0]["transcript"] == "A long spo"
    tokens = [len(msgspec.json.encode(value)) // 4 for value in (items, session.instructions or "",
                                                                 session.config.get("tools"))]
    counted = done["response"]["usage"]["input_token_details"]["text_tokens"]
    assert counted == sum(tokens)
