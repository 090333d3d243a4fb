"""Scripts: choosing replies (pure), the JSON file format, and its validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from relay.mock import MockScript, Reply, Rule, ToolCall


def _user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _call(call_id: str, name: str) -> dict:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"}


def _output(call_id: str, output: str) -> dict:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


SCRIPT = MockScript(
    rules=[
        Rule(match="Weather", say="Checking.", calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})]),
        Rule(match=r"\border\s+#?(\d+)", regex=True, calls=[ToolCall(name="lookup_order")]),
    ],
    after_outputs=Reply(say="{by_name[get_weather]} / {output} / {outputs[0]} / {user}"),
    default=Reply(say="Default."),
)


def test_rules_match_case_insensitively_on_the_latest_user_message() -> None:
    assert SCRIPT.reply_for([_user("what's the WEATHER?")], None, {}).calls[0].name == "get_weather"
    assert SCRIPT.reply_for([_user("weather"), _user("hello")], None, {}).say == "Default."
    assert SCRIPT.reply_for([_user("Where is ORDER #42?")], None, {}).calls[0].name == "lookup_order"
    assert SCRIPT.reply_for([_user("reorder")], None, {}).say == "Default."
    assert SCRIPT.reply_for([], None, {}).say == "Default."


def test_audio_transcripts_count_as_user_text() -> None:
    item = {"type": "message", "role": "user", "content": [{"type": "input_audio", "transcript": "weather now"}]}
    assert SCRIPT.reply_for([item], None, {}).calls[0].name == "get_weather"


def test_trailing_outputs_use_the_after_outputs_template() -> None:
    items = [
        _user("weather and time"),
        _call("c1", "get_weather"),
        _call("c2", "get_time"),
        _output("c1", "sunny"),
        _output("c2", "noon"),
    ]
    reply = SCRIPT.reply_for(items, None, {"c1": "get_weather", "c2": "get_time"})
    assert reply.say == "sunny / noon / sunny / weather and time"
    assert SCRIPT.reply_for([*items, _user("thanks")], None, {}).say == "Default.", "a newer user turn wins"


def test_a_template_naming_an_absent_call_is_said_unformatted() -> None:
    reply = SCRIPT.reply_for([_call("c9", "other"), _output("c9", "x")], None, {"c9": "other"})
    assert reply.say == SCRIPT.after_outputs.say


def test_say_exactly_wins_and_loses_its_quotes() -> None:
    assert SCRIPT.reply_for([_user("weather")], 'Be kind. Say exactly: "Hold on, please."', {}) == Reply(
        say="Hold on, please."
    )
    assert SCRIPT.reply_for([], "say exactly: \u201cOne moment\u201d", {}).say == "One moment"
    assert SCRIPT.reply_for([], "Say exactly:   plain text  ", {}).say == "plain text"
    assert SCRIPT.reply_for([], "Say something nice", {}).say == "Default."


def test_json_script_file_round_trip(tmp_path: Path) -> None:
    document = {
        "rules": [
            {
                "match": "weather",
                "say": "Let me check.",
                "calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
            },
            {"match": "^bye", "regex": True, "say": "Goodbye!", "hold": True},
            {"match": "slow", "calls": [{"name": "get_time", "call_id": "call_time"}], "hold_before_done": True},
        ],
        "after_outputs": {"say": "The weather in Paris is {output}"},
        "default": {"say": "Hello!"},
        "transcripts": ["What's the weather in Paris?"],
        "options": {
            "text_chunk_chars": 4,
            "argument_deltas": 2,
            "audio_chunk_bytes": 960,
            "audio_chunks": 2,
            "pace_audio": True,
            "hold_before_done": True,
        },
    }
    path = tmp_path / "script.json"
    path.write_text(json.dumps(document))
    script = MockScript.load(path)
    assert script.rules[0].calls[0].arguments_text() == '{"city": "Paris"}'
    assert script.rules[1].regex and script.rules[1].hold
    assert script.rules[2].hold_before_done and script.rules[2].calls[0].call_id == "call_time"
    assert script.reply_for([_user("slow")], None, {}).hold_before_done, "a rule's reply keeps its holds"
    assert script.transcripts == ("What's the weather in Paris?",)
    assert script.options.pace_audio and script.options.argument_deltas == 2 and script.options.strict_tools
    assert script.options.hold_before_done
    assert MockScript.model_validate_json(script.model_dump_json()) == script


@pytest.mark.parametrize(
    "document",
    [
        {"rules": [{"match": "x", "sya": "typo"}]},
        {"rules": [{"match": "(", "regex": True}]},
        {"rules": [{"say": "no match"}]},
        {"options": {"argument_deltas": 0}},
        {"default": {"calls": [{"arguments": {}}]}},
        {"default": {"calls": [{"name": "x", "call_id": ""}]}},
        {"voice": "alloy"},
    ],
)
def test_bad_script_files_are_refused(tmp_path: Path, document: dict) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValidationError):
        MockScript.load(path)
