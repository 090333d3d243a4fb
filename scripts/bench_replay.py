#!/usr/bin/env python3
"""Replay speed (a benchmark, not a test): events/s replaying a recording with audio, beside the
time it takes just to read the same file (the floor for any replay).

The recording is synthesised through the real async edge: a session with tool calls whose
responses carry output-audio deltas of 1.3 KB of base64 (20 ms of 24 kHz PCM16), recorded with
RecordingWriter, then replayed with the same tools.

Usage: .venv/bin/python scripts/bench_replay.py [--turns N] [--audio-per-turn N] [--json FILE]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from relay.engine import OpenAIEngine, EngineConfig  # noqa: E402
from relay.recording.format import RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY  # noqa: E402
from relay.recording.writer import RecordingWriter  # noqa: E402
from relay.recording.reader import read_recording  # noqa: E402
from relay.offline.replay import replay  # noqa: E402
from relay.tools import tool  # noqa: E402
from tests.support.local_mock import LocalMock, model_call  # noqa: E402


@tool
def lookup(key: str) -> dict:
    return {"key": key, "value": len(key)}


def synthesise(directory: Path, turns: int, audio_per_turn: int) -> Path:
    """A recording as the relay would write it, built without sockets (fast to make)."""
    from relay.engine import SendUpstream

    mock = LocalMock()
    engine = OpenAIEngine([lookup], config=EngineConfig(mode="sidecar", declare_tools=False), id_prefix="bench")
    writer = RecordingWriter(directory, session_id="bench", dialect="openai", upstream="ws://mock",
                             tools=["lookup"], mode="sidecar", extra_header=engine.recording_header())
    audio = base64.b64encode(os.urandom(960)).decode()
    now = 1.0
    pending = list(mock.connect())
    for turn in range(turns):
        pending += mock.user_turn(f"turn {turn}")
        events = mock.respond([f"Sure, checking {turn}.", model_call("lookup", json.dumps({"key": f"k{turn}"}))])
        for event in events:
            pending.append(event)
            if event["type"] == "response.output_audio.delta":
                pending += [dict(event, delta=audio) for _ in range(audio_per_turn)]
        while pending:
            frame = json.dumps(pending.pop(0), separators=(",", ":"))
            writer.record(UPSTREAM_TO_RELAY, frame, t=now)
            for action in engine.receive_upstream(frame, now):
                if isinstance(action, SendUpstream):
                    writer.record(RELAY_TO_UPSTREAM, action.frame, t=now)
                    pending += mock.receive(action.frame)
                elif type(action).__name__ == "StartHandler":
                    from relay.engine import Outcome

                    for finished in engine.handler_finished(action.call_id, Outcome.returned(
                            action.tool.handler(**action.arguments)), now):
                        if isinstance(finished, SendUpstream):
                            writer.record(RELAY_TO_UPSTREAM, finished.frame, t=now)
                            pending += mock.receive(finished.frame)
            now += 0.001
    writer.close("bench")
    return writer.path


def measure(turns: int, audio_per_turn: int) -> dict[str, float]:
    """Replay a synthesised recording of `turns` tool-call turns; events/s beside reading alone."""
    with tempfile.TemporaryDirectory() as directory:
        path = synthesise(Path(directory), turns, audio_per_turn)
        start = time.perf_counter()
        recording = read_recording(path)
        read_s = time.perf_counter() - start
        frames = len(recording.frames)
        start = time.perf_counter()
        result = replay(recording, [lookup])
        replay_s = time.perf_counter() - start
        assert result.ok, [d.describe() for d in result.divergences]
    return {"frames": frames, "read_events_per_s": frames / read_s,
            "replay_events_per_s": frames / replay_s, "replay_incl_read_events_per_s": frames / (read_s + replay_s),
            "calls": len(result.calls)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--audio-per-turn", type=int, default=100)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    figures = measure(args.turns, args.audio_per_turn)
    print(f"replay: {figures['replay_events_per_s']:,.0f} events/s over {figures['frames']:,} frames "
          f"({figures['calls']} tool calls, no divergence); reading the file alone: "
          f"{figures['read_events_per_s']:,.0f} events/s; read + replay: "
          f"{figures['replay_incl_read_events_per_s']:,.0f} events/s")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
