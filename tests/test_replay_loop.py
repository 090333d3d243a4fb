"""Replay on the relay's own loop (relay/offline/replay_play.py): the replayed relay is a
`SessionLoop` on a virtual clock between the recording's upstream and its client, so a tool's
sleep takes no real time, the recorded pacing (`realtime=True`) is the loop's clock stepped against
the wall clock from outside, and the replay's own loop runs beside an async caller's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from relay.offline import replay as replay_module
from relay.offline.replay import replay, replay_async
from relay.offline.replay_play import ReplayLoop
from relay.recording.format import RELAY_TO_UPSTREAM
from relay.recording.reader import read_recording
from relay.testing import Script, Turn, call
from relay.tools import tool

DAY = 60.0


@tool(timeout=2 * DAY)
async def weekly_report(week: str) -> str:
    """A report that takes a minute to build."""
    await asyncio.sleep(DAY)
    return f"report for week {week}: all good"


def recorded_report(folder: Path) -> Path:
    script = Script(Turn(say="Building it.", calls=[call("weekly_report", week="49")]), Turn(say="{output}"))
    with script.start([weekly_report]) as session:
        session.user("The weekly report?")
        session.advance(DAY + 5)
        return session.save(folder)


def output_sent_at(frames: Any) -> float:
    """When the relay sent the call's output (a recording's frames, or a replay's, kept as text)."""
    sent = [(frame.t, frame.event if frame.event is not None else json.loads(frame.raw or "{}"))
            for frame in frames if frame.direction == RELAY_TO_UPSTREAM]
    [t] = [t for t, event in sent if (event.get("item") or {}).get("type") == "function_call_output"]
    return float(t)


def test_a_tool_s_sleep_is_virtual_in_a_replay(tmp_path: Path) -> None:
    """The tool sleeps a minute; the replay runs it on its loop's clock: the output goes out a
    virtual minute after the call, as recorded, in no real time."""
    path = recorded_report(tmp_path)
    recorded = output_sent_at(read_recording(path).frames)
    assert recorded >= DAY
    result = replay(path, [weekly_report])
    assert result.ok, [d.describe() for d in result.divergences]
    assert output_sent_at(result.frames) == pytest.approx(recorded, abs=0.05)


def test_the_recorded_pacing_steps_the_loop_s_clock_against_the_wall_clock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`realtime=True`: the replay's loop is let run only as far as the wall clock has come since
    the start (a fake wall clock here, moved by the replay's own waits), so the replay waits the
    recorded minute out, in steps, and replays the same."""
    path = recorded_report(tmp_path)
    wall = [1000.0]
    waited: list[float] = []

    def sleep(seconds: float) -> None:
        waited.append(seconds)
        wall[0] += seconds * 500   # each step of the replay's: half a wall second passes

    monkeypatch.setattr(replay_module, "wall_clock", lambda: wall[0])
    monkeypatch.setattr(replay_module, "wall_sleep", sleep)
    result = replay(path, [weekly_report], realtime=True)
    assert result.ok, [d.describe() for d in result.divergences]
    assert waited and all(seconds == replay_module.REALTIME_STEP for seconds in waited)
    assert wall[0] - 1000.0 >= DAY - 1   # the minute was waited out on the wall clock


@pytest.mark.anyio
async def test_an_async_caller_s_loop_runs_while_its_replay_does(tmp_path: Path) -> None:
    """The replay's loop runs in a worker thread: the caller's loop is not held (a task of its own
    makes progress meanwhile), and its tools still run on the replay's virtual clock."""
    path = recorded_report(tmp_path)
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.get_running_loop().create_task(ticking())
    try:
        result = await replay_async(path, [weekly_report])
    finally:
        ticker.cancel()
    assert result.ok, [d.describe() for d in result.divergences]
    assert ticks > 1


def test_the_replay_s_driver_is_the_session_loop() -> None:
    from relay.session.loop import SessionLoop

    assert issubclass(ReplayLoop, SessionLoop)




BLOCKED_TOOLS = """
import threading

from relay.tools import tool

released = threading.Event()


@tool(name="weekly_report")
def blocked_report(week: str) -> str:
    \"\"\"Blocks until the test lets it go.\"\"\"
    released.wait(30)
    return "late"
"""


def test_a_sync_tool_that_outlasts_the_thread_limit_is_one_line_and_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A sync tool blocked past the replay's thread limit (virtual time cannot pass inside a
    thread): `relay replay` says so in one line, with the option that raises the limit, and exits
    2; the tasks its thread holds are dropped without a word of their own."""
    import gc
    import sys

    from relay.cli import main

    recording = recorded_report(tmp_path)
    module = tmp_path / "blocked_tools.py"
    module.write_text(BLOCKED_TOOLS)
    monkeypatch.setattr(replay_module, "DEFAULT_THREAD_LIMIT", 0.2)
    try:
        status = main(["replay", str(recording), "--tools", str(module), "--gate-timeout", "0"])
        gc.collect()
    finally:
        for name, loaded in list(sys.modules.items()):
            if name.endswith("blocked_tools") and hasattr(loaded, "released"):
                loaded.released.set()
    err = capsys.readouterr().err
    assert status == 2
    (line,) = err.strip().splitlines()
    assert "virtual time cannot pass inside a thread" in line and "--gate-timeout" in line
