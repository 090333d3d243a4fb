"""The mock's events have the shapes of real servers' events (../shared/recordings)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from relay.mock import MockScript, Rule, ToolCall
from tests.support.clients import MockFactory, raw_connect
from tests.support.tools import WEATHER_TOOL

GA_RECORDINGS = ["bravedigger-sip-gateway_ga_block.jsonl", "bravedigger-sip-gateway_ga_snippets.jsonl"]
BETA_RECORDINGS = [
    "realtimechat-idx13146878824_beta_fc_output.jsonl",
    "realtimechat-idx13146878824_beta_turn.jsonl",
    "realtime-notes-idx1781683788_beta_fc.jsonl",
]
# Where the mock knowingly differs from beta recordings: it follows beta's documented
# `function_call_arguments.done` without `name` (recorded beta servers did send it), and `prompt`
# appears only in the later beta sessions.
BETA_DIFFERENCES = {
    ("response.function_call_arguments.done", ""): {"name"},
    ("session.created", "session"): {"prompt"},
    ("session.updated", "session"): {"prompt"},
}
SCRIPT = MockScript(
    rules=[Rule(match="go", say="Sure.", calls=[ToolCall(name="get_weather", arguments={"city": "Oslo"})])],
    transcripts=["go"],
    options={"audio_chunks": 1},
)


def _kind(event: dict[str, Any]) -> tuple[str, Any, Any]:
    item = event.get("item") or {}
    return event["type"], item.get("type"), item.get("role")


def _shape(event: dict[str, Any]) -> dict[str, set[str]]:
    """Key sets of the event and of its main nested object; `obfuscation` comes and goes."""
    shape = {"": set(event) - {"obfuscation"}}
    shape |= {
        key: set(event[key]) for key in ("item", "response", "part", "session") if isinstance(event.get(key), dict)
    }
    return shape


@pytest.mark.parametrize(
    ("dialect", "recordings", "differences"),
    [("openai", GA_RECORDINGS, {}), ("openai-beta", BETA_RECORDINGS, BETA_DIFFERENCES)],
)
async def test_event_shapes_match_recorded_sessions(
    make_mock: MockFactory, recordings_dir: Path, dialect: str, recordings: list[str], differences: dict
) -> None:
    mock = await make_mock(script=SCRIPT, dialect=dialect)
    update = {"tools": [WEATHER_TOOL]} | ({"type": "realtime"} if dialect == "openai" else {})
    async with raw_connect(mock, "model=gpt-4o-realtime-preview") as client:
        await client.ask({"type": "session.update", "session": update}, "session.updated")
        await mock.user_turn(mock.sessions[0])
        events = await client.until("response.done")
        call_id = next(e["call_id"] for e in events if e["type"] == "response.function_call_arguments.done")
        output = {"type": "function_call_output", "call_id": call_id, "output": "cold"}
        await client.send({"type": "conversation.item.create", "item": output})
        await client.recv()
    produced: dict[tuple[str, Any, Any], dict[str, set[str]]] = {}
    for record in mock.sent:
        produced.setdefault(_kind(record.event), _shape(record.event))

    compared = 0
    for name in recordings:
        for line in (recordings_dir / name).read_text().splitlines():
            recorded = json.loads(line)
            if "type" not in recorded or _kind(recorded) not in produced:
                continue
            mine = produced[_kind(recorded)]
            for key, keys in _shape(recorded).items():
                expected = keys - differences.get((recorded["type"], key), set())
                assert mine.get(key) == expected, f"{name}: {recorded['type']} [{key or 'event'}]"
            compared += 1
    assert compared >= 20, "the recordings and the mock share most event kinds"
