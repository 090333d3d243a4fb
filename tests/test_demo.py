"""`scripts/demo` runs offline in a few seconds and shows the timeline, the calls and the
recording; the recording it writes replays without divergence."""

from __future__ import annotations

import io
import shlex
import subprocess
from datetime import date
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, conversation_for, run_demo, tools_conversation
from relay.testing import replay, replay_async
from relay.tools import ToolRegistry, tool
from tests.support.paths import REPO


async def test_demo_conversation_timeline_and_recording(tmp_path: Path) -> None:
    out = io.StringIO()
    assert await run_demo(tools=str(EXAMPLE_TOOLS), record_dir=str(tmp_path), color=False, out=out) == 0
    text = out.getvalue()
    for expected in ("calls get_weather", "calls lookup_order", "calls search_flights",
                     "response.create: the model answers", "out-of-band filler",
                     "lookup_order error", "I couldn't find that order",
                     "I found 2 flights from Paris to Rome", "recording:"):
        assert expected in text, expected
    assert text.count("tool  get_weather ok") == 2
    timeline, table = text.split("\ncalls\n", 1)
    lines = timeline.splitlines()

    def first(fragment: str) -> int:
        return next(index for index, line in enumerate(lines) if fragment in line)

    # the error line says what the error was
    assert "error  lookup_order error in " in timeline and ": LookupError: order Z9 not found -> output" in timeline
    # a call's time once: the handler's; a second figure only when the output was held
    for line in lines:
        if " tool  " in line or " error  lookup_order" in line:
            assert line.count(" ms") == 1 + ("(held " in line), line
    # a spoken preamble comes before the calls it precedes
    assert first("Let me check both cities.") < first("calls get_weather")
    assert first("Sure, let me search.") < first("calls search_flights")
    # every response the table says answered a call is named in the timeline, on the words it spoke
    answered_by = {row.split()[-1] for row in table.splitlines()[1:] if row.startswith("call_")}
    assert len(answered_by) == 4
    for response_id in answered_by:
        assert any("assistant" in line and f"[{response_id}]" in line for line in lines), response_id
    [recording] = tmp_path.glob("*.jsonl")
    assert "demo-provider-key" not in recording.read_text()
    result = await replay_async(recording, [str(EXAMPLE_TOOLS)])
    assert result.ok, [d.describe() for d in result.divergences]
    assert [c.outcome for c in result.calls] == ["ok", "ok", "ok", "error", "ok"]


def test_scripts_demo_runs_where_the_user_stands(tmp_path: Path) -> None:
    """Run from another directory, it records there and prints paths relative to there (issue
    31): the replay command it prints runs as printed, from there."""
    done = subprocess.run([str(REPO / "scripts" / "demo"), "--color", "never"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "relay demo" in done.stdout and "search_flights" in done.stdout
    [recording] = (tmp_path / "recordings").glob("*.jsonl")
    assert f"recording: recordings/{recording.name}\n" in done.stdout
    [command] = [line.removeprefix("replay it against the tools: ") for line in done.stdout.splitlines()
                 if line.startswith("replay it against the tools: ")]
    replayed = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert replayed.returncode == 0 and "verdict: no divergence" in replayed.stdout, replayed.stdout


def test_the_example_recording_in_the_docs_is_the_demos_session_and_replays() -> None:
    """What the README and docs/recording-format.md point to, for users without a recording."""
    example = REPO / "docs" / "examples" / "recordings" / "demo.jsonl"
    for page in ("README.md", "docs/recording-format.md"):
        assert "docs/examples/recordings/demo.jsonl" in (REPO / page).read_text(), page
    result = replay(example, [EXAMPLE_TOOLS])
    assert result.kind == "relay" and result.ok, [d.describe() for d in result.divergences]
    assert [c.name for c in result.calls] == ["get_weather", "get_weather", "lookup_order", "lookup_order",
                                              "search_flights"]



class Passenger(BaseModel):
    name: str
    age: int = Field(ge=18)


@tool
def book(passengers: list[Passenger] = Field(min_length=1), seat: Literal["aisle", "window"] = "aisle",
         day: date | None = None, nights: int = Field(3, ge=1), note: str = Field(min_length=3)) -> str:
    """Book a trip (a tool of the kind users write: a nested model, constraints, optional fields)."""
    return "booked"


@tool
def ping(loud: bool, times: float, tags: list[str]) -> str:
    """Ping."""
    return "pong"


def test_a_conversation_built_from_your_tools_calls_each_with_arguments_its_schema_accepts() -> None:
    """`relay demo --tools my_tools.py`: one turn per tool, its example arguments valid."""
    registry = ToolRegistry([book, ping])
    conversation = conversation_for(registry)
    assert conversation.turns == ("Please use book.", "Please use ping.")
    for rule, spec in zip(conversation.script.rules, registry, strict=True):
        [call] = rule.calls
        assert call.name == spec.name and rule.matches(f"Please use {spec.name}.")
        spec.validate_arguments(call.arguments)          # raises for arguments the tool would refuse
    assert not conversation.script.rules[0].matches("Please use book. And ping.")
    assert conversation_for(ToolRegistry.load([EXAMPLE_TOOLS])).turns is TURNS
    assert tools_conversation(ToolRegistry.load([EXAMPLE_TOOLS])).turns[0] == "Please use get_weather."


async def test_the_demo_runs_on_the_gpt_live_mock_and_its_recording_replays(tmp_path: Path) -> None:
    """`relay demo --dialect live`: the same tools in Responses delegation; each relay call runs
    once, each batch is continued with one response.create, the model speaks every answer."""
    out = io.StringIO()
    assert await run_demo(tools=str(EXAMPLE_TOOLS), record_dir=str(tmp_path), color=False, out=out,
                          dialect="live") == 0
    text = out.getvalue()
    timeline, table = text.split("\ncalls\n", 1)
    assert "/v1/live/sessions" in text
    assert timeline.count("calls get_weather") == 2 and timeline.count("tool  get_weather ok") == 2
    assert "lookup_order error in " in timeline and "LookupError: order Z9 not found" in timeline
    assert timeline.count("response.create: the model answers") == 4, "one per batch"
    assert timeline.count("Here is what I found") == 4, "every answer spoken"
    assert [row.split()[1:3] for row in table.splitlines()[1:] if row.startswith("call_")] == [
        ["get_weather", "ok"], ["get_weather", "ok"], ["lookup_order", "ok"], ["lookup_order", "error"],
        ["search_flights", "ok"]]
    [recording] = tmp_path.glob("*.jsonl")
    assert "demo-provider-key" not in recording.read_text()
    result = await replay_async(recording, [str(EXAMPLE_TOOLS)])
    assert result.ok, [d.describe() for d in result.divergences]
    assert sorted(c.outcome for c in result.calls) == ["error", "ok", "ok", "ok", "ok"]
