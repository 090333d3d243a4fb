"""Text the wire allows, the relay allows: a lone surrogate (`"\\ud800"`, valid JSON that no UTF-8
can carry) in what the relay re-encodes goes on as the same JSON escape, in frames, recording
lines and log lines, so nothing that writes them fails on it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from openai.types.realtime import ConversationItemCreateEvent
from pydantic import ValidationError

from relay.cli import main
from relay.dialects import gemini_codec, live
from relay.dialects.jsontext import compact_json, utf8_safe, utf8_size
from relay.engine.appends import split_text
from relay.engine.reseed import seeded_session
from relay.engine import EngineConfig
from relay.observe.logs import JsonFormatter
from relay.recording.redact import Redactor
from relay.recording.writer import RecordingFilter
from relay.testing import Script, Turn, call, explore
from relay.tools import Delegation, ToolResult, delegate
from relay.tools.delegation import Turn as SaidTurn
from relay.tools.render import render_value
from tests.support.engine import EngineDriver
from tests.support.tools import get_weather

LONE = "odd \ud800 and \udfff"
VALID = "odd \ufffd and \ufffd"   # LONE as the relay answers with it: valid Unicode


def test_json_text_escapes_lone_surrogates_and_leaves_other_text_as_it_is() -> None:
    assert compact_json({"a": "café ☕ 😀"}) == '{"a":"café ☕ 😀"}'
    text = compact_json({"text": LONE})
    assert text == '{"text":"odd \\ud800 and \\udfff"}'
    assert json.loads(text.encode("utf-8")) == {"text": LONE}
    assert utf8_safe("plain") == "plain"


def test_an_engine_rewriting_a_client_event_with_a_lone_surrogate_sends_a_frame_utf8_carries() -> None:
    driver = EngineDriver([get_weather], config=EngineConfig(mode="proxy", strict=True))
    driver.upstream(driver.mock.connect())
    driver.client({"type": "session.update", "session": {"type": "realtime", "instructions": LONE}})
    [update] = [f for f in driver.upstream_frames if '"instructions"' in f]
    assert json.loads(update.encode("utf-8"))["session"]["instructions"] == LONE   # its tools added
    assert all(isinstance(f, str) and f.encode("utf-8") for f in driver.client_frames)


def test_a_binary_frame_with_a_lone_surrogate_is_recorded_without_its_audio() -> None:
    frame = json.dumps({"serverContent": {"modelTurn": {"parts": [
        {"text": LONE}, {"inlineData": {"mimeType": "audio/pcm", "data": "AAAA"}}]}}}).encode()
    data, dropped = RecordingFilter(Redactor(), record_audio="drop").binary(frame)
    assert dropped and json.loads(data)["serverContent"]["modelTurn"]["parts"][0]["text"] == LONE


def test_a_log_line_with_a_lone_surrogate_can_be_written() -> None:
    record = logging.LogRecord("relay.test", logging.WARNING, __file__, 1, "client anomaly: %s", (LONE,), None)
    line = JsonFormatter().format(record)
    assert json.loads(line.encode("utf-8"))["msg"] == f"client anomaly: {LONE}"


# ---- GPT-Live's wire, and what reads and writes a recording that holds one -----------------------

# an answer holding lone surrogates, as text from a file name decoded with `surrogateescape`, or
# from a service that cut an emoji in half, does
def odd_lookup(q: str) -> str:
    """Look something up."""
    return f"{LONE} for {q}"


def test_gpt_live_writes_and_reads_a_lone_surrogate_as_its_escape() -> None:
    append = live.ThinkingAppend(delegation_id="item_1", content=LONE)
    text = live.encode(append)
    assert "\\ud800" in text and text.encode("utf-8")
    assert live.decode(text) == append
    raw = text.replace("\\ud800", "\ud800").replace("\\udfff", "\udfff")   # a frame rebuilt from a recording
    assert live.decode(raw) == append
    answer = json.dumps({"toolResponse": {"functionResponses": [{"id": "c1", "name": "f", "response": {
        "output": LONE}}]}}, ensure_ascii=False)
    decoded = gemini_codec.decode(answer)
    assert not isinstance(decoded, gemini_codec.Unknown)
    assert gemini_codec.plain(decoded)["functionResponses"][0]["response"] == {"output": LONE}


def test_text_with_a_lone_surrogate_is_cut_and_seeded_by_its_size() -> None:
    pieces = split_text(" ".join([LONE] * 200), limit=100)
    assert "".join(pieces).replace(" ", "") == LONE.replace(" ", "") * 200
    assert all(utf8_size(piece) <= 100 for piece in pieces)
    session = seeded_session({"type": "realtime"}, [SaidTurn("user", LONE * 40)], [f"lookup said {LONE}"],
                             max_tokens=150)
    said = [item["content"][0]["text"] for item in session["input"]]
    assert said[0] == f"lookup said {LONE}" and 0 < utf8_size(said[1]) <= 150 - utf8_size(said[0])


def test_a_tools_answer_goes_up_as_valid_unicode_that_the_official_models_read() -> None:
    """A lone surrogate in a handler's answer (its text, its JSON, its words to say) is replaced by
    U+FFFD, a surrogate pair joined into its character: pydantic's parser, which reads JSON for the
    official SDKs' models, refuses an event holding a lone surrogate's escape, and so may a
    provider's; the output would be refused and the call left unanswered."""
    assert render_value(LONE).output == VALID
    assert render_value({"name": "caf\udce9"}).output == '{"name":"caf\ufffd"}'
    assert render_value(ToolResult(result="ok", message=f"Say {LONE}")).message == f"Say {VALID}"
    assert render_value("\ud83d\ude00 and \ud83d").output == "\U0001f600 and \ufffd"
    assert render_value("café ☕").output == "café ☕"
    with pytest.raises(ValidationError):
        ConversationItemCreateEvent.model_validate_json(compact_json({"type": "conversation.item.create", "item": {
            "type": "function_call_output", "call_id": "c1", "output": LONE}}))
    event = ConversationItemCreateEvent.model_validate_json(compact_json({"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "c1", "output": render_value(LONE).output}}))
    assert event.item.output == VALID


@pytest.mark.parametrize("delegation", ["responses", "client"])
def test_a_gpt_live_answer_holding_a_lone_surrogate_is_answered_once_and_spoken_of(
        delegation: str, tmp_path: Path) -> None:
    """Answered once and spoken of in both delegation modes, under the explorer's perturbations (a
    drop and a new seeded session among them). Before, GPT-Live never answered it: the relay's
    frame for it could not be written (msgspec refuses a lone surrogate)."""
    if delegation == "responses":
        script: Any = Script(Turn(say="Let me look.", calls=[call("odd_lookup", q="x")]), Turn(say="Found it."))
        tools: list[Any] = [odd_lookup]
    else:
        script = tmp_path / "concierge.script.json"
        script.write_text(json.dumps({"dialect": "live", "delegation": "client", "lines": ["Where is my order?"],
                                      "script": {"default": {"say": "Let me look.", "calls": [
                                          {"name": "concierge", "arguments": {}}]},
                                          "after_outputs": {"say": "{output}"}}}))
        tools = [concierge]
    result = explore(script, tools, dialect="live", budget=40, out=tmp_path / "found")
    assert result.ok, result.report()


@delegate(timeout=10)
async def concierge(delegation: Delegation) -> ToolResult:
    """Answer the caller (the result and the words to say hold lone surrogates)."""
    return ToolResult(result={"status": LONE, "name": "caf\udce9"}, message=f"Tell the caller {LONE}.")


@pytest.mark.parametrize("dialect", ["openai", "gemini", "live"])
def test_every_offline_command_reads_a_recording_that_holds_a_lone_surrogate(
        dialect: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The caller's words hold `\\ud800`: replay, inspect, export and redact write it as that escape
    (stdout, the page, the JSON, the copy) instead of stopping with an internal error."""
    with Script(Turn(say="Let me look.", calls=[call("odd_lookup", q="x")]), Turn(say="Found it.")).start(
            [odd_lookup], dialect=dialect) as session:
        session.user(f"Look up {LONE}")   # the caller's words, as the server transcribed them
        session.advance(5)
    recording = session.save(tmp_path)
    assert "\\ud800" in recording.read_text(encoding="utf-8")
    tools = tmp_path / "odd_tools.py"
    tools.write_text(f"from relay import tool\n@tool\ndef odd_lookup(q: str) -> str:\n"
                     f"    '''Look something up.'''\n    return {f'{LONE} for ' + '{q}'!r}.format(q=q)\n")
    assert main(["replay", str(recording), "--tools", str(tools)]) == 0
    assert "no divergence" in capfd.readouterr().out
    assert main(["inspect", str(recording), "--out", str(tmp_path / "page.html")]) == 0
    assert "\\ud800" in (tmp_path / "page.html").read_text(encoding="utf-8")
    assert main(["export", str(recording), "--format", "openai-chat", "--out", str(tmp_path / "chat.json")]) == 0
    exported = json.dumps(json.loads((tmp_path / "chat.json").read_text(encoding="utf-8")), ensure_ascii=False)
    assert f"Look up {LONE}" in exported and f"{VALID} for x" in exported
    assert main(["redact", str(recording), "--out", str(tmp_path / "redacted.jsonl")]) == 0
    copy = (tmp_path / "redacted.jsonl").read_text(encoding="utf-8")
    assert "\\ud800" in copy and all(json.loads(line) for line in copy.splitlines())
    capfd.readouterr()
