"""Responses: streamed messages and function calls, scripts, out-of-band, the one-active rule, cancel."""

from __future__ import annotations

import base64
import json

import pytest

from relay.mock import MockScript, Reply, Rule, ToolCall
from tests.support.clients import MockFactory, raw_connect, sdk_connect, sdk_until
from tests.support.frames import types_of, user_text
from tests.support.tools import TIME_TOOL, WEATHER_TOOL

WEATHER_SCRIPT = MockScript(
    rules=[
        Rule(
            match="weather",
            say="Let me check.",
            calls=[ToolCall(name="get_weather", arguments={"city": "Paris"}), ToolCall(name="get_time")],
        ),
        Rule(match=r"^tell me (a|one) joke", regex=True, say="Why did the chicken cross the road?"),
        Rule(match="wait", say="Waiting for you to decide what happens next.", hold=True),
        Rule(match="broken", calls=[ToolCall(name="get_weather", arguments='{"city": "Par')]),
    ],
    after_outputs=Reply(say="Weather: {by_name[get_weather]}; time: {by_name[get_time]}; all: {outputs}"),
    default=Reply(say="I did not catch that."),
    options={"text_chunk_chars": 5, "argument_deltas": 4, "audio_chunk_bytes": 960, "audio_chunks": 3},
)
TOOLS_UPDATE = {"type": "session.update", "session": {"type": "realtime", "tools": [WEATHER_TOOL, TIME_TOOL]}}


def _error(event: dict) -> dict:
    assert event["type"] == "error", event
    return event["error"]


async def test_spoken_message_streams_in_the_ga_order(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with sdk_connect(mock) as connection:
        await connection.conversation.item.create(item=user_text("hello there")["item"])
        user_item = (await sdk_until(connection, "conversation.item.done"))[0].item
        await connection.response.create()
        events = await sdk_until(connection, "response.done")
    assert types_of(events) == [
        "response.created",
        "rate_limits.updated",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
        *["response.output_audio_transcript.delta", "response.output_audio.delta"] * 3,
        *["response.output_audio_transcript.delta"] * 2,
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "conversation.item.done",
        "response.output_item.done",
        "response.done",
    ]
    created, done = events[0].response, events[-1].response
    assert created.status == "in_progress" and created.conversation_id.startswith("conv_") and created.output == []
    assert events[3].previous_item_id == user_item.id
    transcript = [e.delta for e in events if e.type == "response.output_audio_transcript.delta"]
    assert transcript == ["I did", " not ", "catch", " that", "."]
    audio = [base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta"]
    assert [len(a) for a in audio] == [960, 960, 960]
    assert events[-2].item.status == "completed"
    assert (
        events[-2].item.content[0].type == "output_audio"
        and events[-2].item.content[0].transcript == "I did not catch that."
    )
    assert done.status == "completed" and done.status_details is None and done.output[0].id == events[2].item.id
    assert done.usage.input_tokens > 0 and done.usage.output_token_details.audio_tokens == 1
    assert done.usage.total_tokens == done.usage.input_tokens + done.usage.output_tokens


async def test_text_modality_writes_text(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with sdk_connect(mock) as connection:
        await connection.conversation.item.create(item=user_text("Tell me a joke")["item"])
        await connection.response.create(response={"output_modalities": ["text"]})
        events = await sdk_until(connection, "response.done")
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == "Why did the chicken cross the road?" and all(len(d) <= 5 for d in deltas)
    assert not [e for e in events if "audio" in e.type]
    assert events[-1].response.output[0].content[0].type == "output_text"
    assert events[-1].response.output_modalities == ["text"]


async def test_function_calls_with_a_preamble(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with sdk_connect(mock) as connection:
        await connection.send(TOOLS_UPDATE)
        await sdk_until(connection, "session.updated")
        await connection.conversation.item.create(item=user_text("What's the WEATHER in Paris?")["item"])
        await connection.response.create()
        events = await sdk_until(connection, "response.done")
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert [i.type for i in added] == ["message", "function_call", "function_call"]
    weather, clock = added[1], added[2]
    assert weather.name == "get_weather" and weather.call_id.startswith("call_") and weather.arguments == ""
    assert weather.call_id != clock.call_id
    deltas = [e for e in events if e.type == "response.function_call_arguments.delta" and e.item_id == weather.id]
    assert len(deltas) == 4 and "".join(d.delta for d in deltas) == '{"city": "Paris"}'
    arguments_done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [(d.name, d.arguments, d.output_index) for d in arguments_done] == [
        ("get_weather", '{"city": "Paris"}', 1),
        ("get_time", "{}", 2),
    ]
    output_ids = {i.id for i in added}
    items_done = [e.item for e in events if e.type == "conversation.item.done" and e.item.id in output_ids]
    assert [i.status for i in items_done] == ["completed"] * 3
    output = events[-1].response.output
    assert [o.type for o in output] == ["message", "function_call", "function_call"]
    assert output[1].arguments == '{"city": "Paris"}' and output[1].status == "completed"
    session = mock.sessions[0]
    assert [i["type"] for i in session.items] == ["message", "message", "function_call", "function_call"]
    chain = [e.previous_item_id for e in events if e.type == "conversation.item.added" and e.item.id in output_ids]
    assert chain == [session.items[0]["id"], session.items[1]["id"], session.items[2]["id"]]


async def test_outputs_lead_to_the_templated_answer(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with sdk_connect(mock) as connection:
        await connection.send(TOOLS_UPDATE)
        await connection.conversation.item.create(item=user_text("weather please")["item"])
        await connection.response.create()
        calls = [
            e.item
            for e in await sdk_until(connection, "response.done")
            if e.type == "response.output_item.done" and e.item.type == "function_call"
        ]
        for call, output in zip(calls, ["sunny", "noon"]):
            await connection.conversation.item.create(
                item={"type": "function_call_output", "call_id": call.call_id, "output": output}
            )
        await connection.response.create()
        done = (await sdk_until(connection, "response.done"))[-1]
    assert done.response.output[0].content[0].transcript == "Weather: sunny; time: noon; all: ['sunny', 'noon']"


async def test_say_exactly_instructions_win_over_the_script(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with sdk_connect(mock) as connection:
        await connection.conversation.item.create(item=user_text("weather?")["item"])
        await connection.response.create(
            response={"instructions": 'Tell the user to hold on. Say exactly: "One moment, checking."'}
        )
        done = (await sdk_until(connection, "response.done"))[-1]
    assert [o.type for o in done.response.output] == ["message"]
    assert done.response.output[0].content[0].transcript == "One moment, checking."


async def test_rules_match_the_latest_user_text(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with raw_connect(mock) as client:
        await client.ask(user_text("tell me one joke"), "conversation.item.done")
        joke = (await client.ask({"type": "response.create"}, "response.done"))[-1]
        await client.ask(user_text("no really, tell me one joke"), "conversation.item.done")
        regex_anchor = (await client.ask({"type": "response.create"}, "response.done"))[-1]
    assert joke["response"]["output"][0]["content"][0]["transcript"].startswith("Why did the chicken")
    assert regex_anchor["response"]["output"][0]["content"][0]["transcript"] == "I did not catch that."


async def test_strict_tools_only_call_offered_functions(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with raw_connect(mock) as client:
        await client.ask(user_text("weather"), "conversation.item.done")
        no_tools = (await client.ask({"type": "response.create"}, "response.done"))[-1]["response"]["output"]
        await client.ask(TOOLS_UPDATE, "session.updated")
        choice_none = (
            await client.ask({"type": "response.create", "response": {"tool_choice": "none"}}, "response.done")
        )[-1]["response"]["output"]
        forced = {"tool_choice": {"type": "function", "name": "get_time"}}
        only_time = (await client.ask({"type": "response.create", "response": forced}, "response.done"))[-1][
            "response"
        ]["output"]
        response_tools = {"tools": [WEATHER_TOOL]}
        only_weather = (await client.ask({"type": "response.create", "response": response_tools}, "response.done"))[-1][
            "response"
        ]["output"]
    assert [o["type"] for o in no_tools] == ["message"], "the preamble is said, the calls are dropped"
    assert [o["type"] for o in choice_none] == ["message"]
    assert [o.get("name") for o in only_time] == [None, "get_time"]
    assert [o.get("name") for o in only_weather] == [None, "get_weather"]


async def test_a_call_to_a_tool_the_session_lacks_is_a_warning_once(
        make_mock: MockFactory, caplog: pytest.LogCaptureFixture) -> None:
    """A misnamed tool in a script (the session offers get_time; the script calls get_weather)
    is dropped as a model would drop it, and said once in the log, not once per response."""
    mock = await make_mock(script=WEATHER_SCRIPT)
    only_time = {"type": "session.update", "session": {"type": "realtime", "tools": [TIME_TOOL]}}
    with caplog.at_level("INFO", logger="relay.mock"):
        async with raw_connect(mock) as client:
            await client.ask(only_time, "session.updated")
            for _ in range(2):
                await client.ask(user_text("weather"), "conversation.item.done")
                output = (await client.ask({"type": "response.create"}, "response.done"))[-1]["response"]["output"]
                assert [o.get("name") for o in output] == [None, "get_time"]
            forced = {"tool_choice": {"type": "function", "name": "get_time"}}
            await client.ask({"type": "response.create", "response": {"tools": [WEATHER_TOOL, TIME_TOOL],
                                                                      **forced}}, "response.done")
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert [r.getMessage() for r in warnings] == [
        "mock: the script calls 'get_weather', which is not among the session's tools (get_time): "
        "the call is dropped (options.strict_tools)"]
    assert warnings[0].session_id == mock.sessions[0].id
    assert any("excluded by tool_choice" in r.getMessage() for r in caplog.records if r.levelname == "INFO")


async def test_calls_alone_that_are_dropped_fall_back_to_the_default_text(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with raw_connect(mock) as client:
        await client.ask(user_text("broken"), "conversation.item.done")
        output = (await client.ask({"type": "response.create"}, "response.done"))[-1]["response"]["output"]
        await client.ask(TOOLS_UPDATE, "session.updated")
        events = await client.ask({"type": "response.create"}, "response.done")
    assert output[0]["content"][0]["transcript"] == "I did not catch that."
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == '{"city": "Par', "string arguments are sent as they are, even invalid JSON"


async def test_metadata_is_echoed_and_out_of_band_stays_out(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with sdk_connect(mock) as connection:
        await connection.conversation.item.create(item=user_text("hello")["item"])
        await sdk_until(connection, "conversation.item.done")
        await connection.response.create(response={"conversation": "none", "metadata": {"topic": "summary"}})
        events = await sdk_until(connection, "response.done")
    assert events[0].response.metadata == {"topic": "summary"} and events[-1].response.metadata == {"topic": "summary"}
    assert events[0].response.conversation_id is None and events[-1].response.conversation_id is None
    assert not [e for e in events if e.type.startswith("conversation.item")]
    assert len(events[-1].response.output) == 1
    assert [i["role"] for i in mock.sessions[0].items] == ["user"], "out-of-band output never enters the conversation"


async def test_response_input_replaces_the_conversation(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with raw_connect(mock) as client:
        joke_id = (await client.ask(user_text("tell me a joke"), "conversation.item.done"))[0]["item"]["id"]
        await client.ask(user_text("something else"), "conversation.item.done")
        by_reference = {"conversation": "none", "input": [{"type": "item_reference", "id": joke_id}]}
        referenced = (await client.ask({"type": "response.create", "response": by_reference}, "response.done"))[-1]
        inline = {"conversation": "none", "input": [user_text("tell me a joke")["item"]], "output_modalities": ["text"]}
        written = (await client.ask({"type": "response.create", "response": inline}, "response.done"))[-1]
        dangling = {"input": [{"type": "item_reference", "id": "item_gone"}]}
        error = _error(
            (await client.ask({"type": "response.create", "event_id": "ref", "response": dangling}, "error"))[-1]
        )
    assert referenced["response"]["output"][0]["content"][0]["transcript"].startswith("Why did the chicken")
    assert written["response"]["output"][0]["content"][0]["text"].startswith("Why did the chicken")
    assert (error["code"], error["param"], error["event_id"]) == ("item_not_found", "response.input[0].id", "ref")


@pytest.mark.parametrize(
    ("response", "code", "param"),
    [
        ({"modalities": ["text"]}, "unknown_parameter", "response.modalities"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "object_above_max_properties", "response.metadata"),
        ({"metadata": {"k": "v" * 513}}, "string_above_max_length", "response.metadata.k"),
        ({"metadata": {"k": 1}}, "invalid_type", "response.metadata.k"),
        ({"output_modalities": ["video"]}, "invalid_value", "response.output_modalities"),
    ],
)
async def test_invalid_response_requests_are_refused(
    make_mock: MockFactory, response: dict, code: str, param: str
) -> None:
    mock = await make_mock()
    async with raw_connect(mock) as client:
        error = _error(
            (await client.ask({"type": "response.create", "event_id": "r1", "response": response}, "error"))[-1]
        )
    assert (error["code"], error["param"], error["event_id"]) == (code, param, "r1")
    assert mock.sessions[0].responses == []


@pytest.mark.parametrize("conversation", ["auto", "none"])
async def test_only_one_response_may_be_active(make_mock: MockFactory, conversation: str) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with raw_connect(mock) as client:
        await client.ask(user_text("wait for it"), "conversation.item.done")
        await client.send({"type": "response.create", "response": {"conversation": conversation}})
        held = await client.until("response.output_audio_transcript.delta")
        error = _error((await client.ask({"type": "response.create", "event_id": "second"}, "error"))[-1])
        mock.release(mock.sessions[0])
        finished = await client.until("response.done")
        await client.ask(user_text("thanks"), "conversation.item.done")
        after = (await client.ask({"type": "response.create"}, "response.done"))[-1]
    assert error["code"] == "conversation_already_has_active_response" and error["event_id"] == "second"
    assert held[0]["response"]["id"] in error["message"]
    assert finished[-1]["response"]["status"] == "completed"
    assert sum(e["type"] == "response.done" for e in finished) == 1, "no response.done for the refused request"
    assert after["response"]["status"] == "completed" and len(mock.sessions[0].responses) == 2


async def test_a_reply_held_before_done_has_its_calls_complete_and_waits_for_release(make_mock: MockFactory) -> None:
    call = ToolCall(name="get_weather", arguments={"city": "Oslo"}, call_id="call_oslo")
    script = MockScript(rules=[Rule(match="go", say="Checking.", calls=[call], hold_before_done=True)])
    mock = await make_mock(script=script)
    async with raw_connect(mock) as client:
        await client.ask(TOOLS_UPDATE, "session.updated")
        await client.ask(user_text("go"), "conversation.item.done")
        await client.send({"type": "response.create"})
        streamed = await client.until("response.output_item.done")
        streamed += await client.until("response.output_item.done")
        early = await client.ask({"type": "response.create", "event_id": "early"}, "error")
        mock.release(mock.sessions[0])
        done = (await client.until("response.done"))[-1]["response"]
    closed = [e["item"]["type"] for e in streamed if e["type"] == "response.output_item.done"]
    assert closed == ["message", "function_call"]
    assert streamed[-1]["item"]["call_id"] == "call_oslo" and streamed[-1]["item"]["status"] == "completed"
    assert "response.done" not in types_of(early)
    assert early[-1]["error"]["code"] == "conversation_already_has_active_response"
    assert done["status"] == "completed" and done["output"][1]["call_id"] == "call_oslo"


async def test_cancel_cuts_the_response_short(make_mock: MockFactory) -> None:
    script = MockScript(rules=[Rule(match="go", say="Checking now.", calls=[ToolCall(name="get_weather")], hold=True)])
    mock = await make_mock(script=script)
    async with sdk_connect(mock) as connection:
        await connection.send(TOOLS_UPDATE)
        await connection.conversation.item.create(item=user_text("go")["item"])
        await connection.response.create()
        await sdk_until(connection, "response.output_audio_transcript.delta")
        await connection.response.cancel()
        events = await sdk_until(connection, "response.done")
    done = events[-1].response
    assert done.status == "cancelled"
    assert done.status_details.type == "cancelled" and done.status_details.reason == "client_cancelled"
    assert [o.type for o in done.output] == ["message"] and done.output[0].status == "incomplete"
    assert "response.output_audio_transcript.done" in types_of(events), ".done events close the cut item"
    assert not [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert mock.sessions[0].items[-1]["status"] == "incomplete"


async def test_cancel_during_arguments_marks_the_call_incomplete(make_mock: MockFactory) -> None:
    script = MockScript(
        rules=[Rule(match="go", calls=[ToolCall(name="get_weather", arguments={"city": "Oslo"})], hold=True)]
    )
    mock = await make_mock(script=script)
    async with raw_connect(mock) as client:
        await client.ask(TOOLS_UPDATE, "session.updated")
        await client.ask(user_text("go"), "conversation.item.done")
        await client.send({"type": "response.create"})
        first = (await client.until("response.function_call_arguments.delta"))[-1]
        events = await client.ask({"type": "response.cancel", "response_id": first["response_id"]}, "response.done")
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == first["delta"], "only what was streamed"
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"


async def test_cancel_without_an_active_response_is_an_error(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT)
    async with raw_connect(mock) as client:
        nothing = _error((await client.ask({"type": "response.cancel", "event_id": "c1"}, "error"))[-1])
        await client.ask(user_text("wait"), "conversation.item.done")
        await client.send({"type": "response.create"})
        await client.until("response.output_audio_transcript.delta")
        other = _error((await client.ask({"type": "response.cancel", "response_id": "resp_other"}, "error"))[-1])
        mock.release(mock.sessions[0])
        await client.until("response.done")
    assert (nothing["code"], nothing["event_id"]) == ("response_cancel_not_active", "c1")
    assert other["code"] == "response_cancel_not_active"


async def test_beta_names_and_fields(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT, dialect="openai-beta")
    async with raw_connect(mock) as client:
        await client.ask({"type": "session.update", "session": {"tools": [WEATHER_TOOL, TIME_TOOL]}}, "session.updated")
        await client.ask(user_text("weather"), "conversation.item.created")
        events = await client.ask({"type": "response.create"}, "response.done")
    kinds = set(types_of(events))
    assert {
        "response.audio_transcript.delta",
        "response.audio.delta",
        "response.audio.done",
        "conversation.item.created",
    } <= kinds
    assert not kinds & {"conversation.item.added", "conversation.item.done", "response.output_audio.delta"}
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert "name" not in done
    response = events[-1]["response"]
    assert response["modalities"] == ["text", "audio"] and response["output_audio_format"] == "pcm16"
    assert response["output"][0]["content"][0]["type"] == "audio" and response["output"][1]["object"] == "realtime.item"


async def test_foundry_function_calls_carry_response_id_and_created_at(make_mock: MockFactory) -> None:
    mock = await make_mock(script=WEATHER_SCRIPT, dialect="foundry")
    async with raw_connect(mock, path="/openai/v1/realtime") as client:
        await client.ask(TOOLS_UPDATE, "session.updated")
        await client.ask(user_text("weather"), "conversation.item.done")
        events = await client.ask({"type": "response.create"}, "response.done")
    response_id = events[-1]["response"]["id"]
    for call in (o for o in events[-1]["response"]["output"] if o["type"] == "function_call"):
        assert call["response_id"] == response_id and isinstance(call["created_at"], int)
    assert "response_id" not in events[-1]["response"]["output"][0], "messages stay plain"
    arguments = [json.loads(e["arguments"]) for e in events if e["type"] == "response.function_call_arguments.done"]
    assert arguments == [{"city": "Paris"}, {}]
