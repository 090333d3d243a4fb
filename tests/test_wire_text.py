"""Text the wire allows, the relay allows: a lone surrogate (`"\\ud800"`, valid JSON that no UTF-8
can carry) in what the relay re-encodes goes on as the same JSON escape, in frames, recording
lines and log lines, so nothing that writes them fails on it."""

from __future__ import annotations

import json
import logging

from relay.dialects.jsontext import compact_json, utf8_safe
from relay.engine import EngineConfig
from relay.observe.logs import JsonFormatter
from relay.recording.redact import Redactor
from relay.recording.writer import RecordingFilter
from tests.support.engine import EngineDriver
from tests.support.tools import get_weather

LONE = "odd \ud800 and \udfff"


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
