"""`side`, `source` and `mode` are enums, not bare strings (issue 45 item 4): `Side` (who speaks
a piece of audio, relay/dialects/base.py), `Source` (where the engine's input came from,
relay/engine/context.py) and `Mode` (who else is in a session, relay/engine/core.py). A misspelt
value fails where it is made; the recorded value (headers, notices, logs) is the enum's string."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

import pytest

from relay.dialects import Side, gemini, live, openai
from relay.engine import EngineConfig, OpenAIEngine
from relay.engine.context import Source
from relay.engine.core import Mode


def test_each_is_a_str_enum_of_the_recorded_values() -> None:
    assert {member.value for member in Side} == {"input", "output"}
    assert {member.value for member in Source} == {"upstream", "client", "handler", "timer"}
    assert {member.value for member in Mode} == {"proxy", "sidecar", "replay"}
    assert all(issubclass(kind, StrEnum) for kind in (Side, Source, Mode))
    assert json.dumps({"mode": Mode.SIDECAR}) == '{"mode": "sidecar"}' and f"{Source.TIMER}" == "timer"


def test_a_mode_given_as_its_value_is_made_a_mode_and_a_misspelt_one_fails_at_once() -> None:
    assert EngineConfig(mode="sidecar").mode is Mode.SIDECAR   # type: ignore[arg-type]
    assert not EngineConfig(mode="sidecar").has_client   # type: ignore[arg-type]
    with pytest.raises(ValueError):
        EngineConfig(mode="side-car")   # type: ignore[arg-type]


def test_an_anomaly_says_its_source_as_a_source() -> None:
    engine = OpenAIEngine([], config=EngineConfig(mode="proxy", strict=False, declare_tools=False))
    engine.receive_upstream("not json", 0.0)
    [anomaly] = engine.anomalies
    assert anomaly.source is Source.UPSTREAM


@pytest.mark.parametrize("family, event, side", [
    (openai, {"type": "input_audio_buffer.append", "audio": "AAAA"}, Side.INPUT),
    (openai, {"type": "response.output_audio.delta", "delta": "AAAA"}, Side.OUTPUT),
    (live, {"type": "session.input_audio.append", "audio": "AAAA"}, Side.INPUT),
    (gemini, {"serverContent": {"modelTurn": {"parts": [{"inlineData": {"data": "AAAA",
                                                                        "mimeType": "audio/pcm"}}]}}}, Side.OUTPUT),
])
def test_every_family_s_audio_slots_say_their_side_as_a_side(family: Any, event: dict[str, Any], side: Side) -> None:
    [slot] = family.audio_slots(event)
    assert slot.side is side
