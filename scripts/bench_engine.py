#!/usr/bin/env python3
"""Engine benchmark (a benchmark, not a test): events/s through the sans-I/O engine, and tool
turnaround inside the engine, each beside a baseline measured in the same run.

Throughput: the banyan log1 session (415 real events) interleaved with output-audio deltas of
1.3 KB of base64 (20 ms of 24 kHz PCM16), repeated; the baseline is `json.loads` of every frame,
the least a relay that parses what it forwards would do.

Turnaround: a relay-owned call whose handler returns at once (it finished when the call's item
completed): time from feeding `response.done` until the engine has emitted the output and the
follow-up `response.create`, over N calls in one growing session.

Usage: .venv/bin/python scripts/bench_engine.py [--seconds S] [--calls N] [--json FILE]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from relay.engine import OpenAIEngine, EngineConfig, Outcome, SendUpstream, StartHandler  # noqa: E402
from relay.tools import tool  # noqa: E402
from tests.support.local_mock import LocalMock, model_call  # noqa: E402


def shared_recordings() -> Path:
    for candidate in (os.environ.get("RELAY_SHARED_DIR"), ROOT.parent / "shared", "/work/shared"):
        if candidate and (Path(candidate) / "recordings").is_dir():
            return Path(candidate) / "recordings"
    raise SystemExit("cannot find ../shared/recordings (set RELAY_SHARED_DIR)")


def realistic_stream() -> list[str]:
    """banyan log1's server events with 4 audio deltas after every transcript delta."""
    path = shared_recordings() / "banyan-landing_log1_webrtc_beta_fc.jsonl"
    directions = json.loads(path.with_suffix(".meta.json").read_text())["directions"]
    audio = base64.b64encode(os.urandom(960)).decode()  # 960 bytes of PCM16 -> 1280 chars base64
    frames: list[str] = []
    for line, direction in zip(path.read_text().splitlines(), directions):
        if direction != "server":
            continue
        frames.append(line)
        event = json.loads(line)
        if event["type"] == "response.audio_transcript.delta":
            for n in range(4):
                frames.append(json.dumps({"type": "response.audio.delta", "event_id": f"event_a{n}",
                                          "response_id": event["response_id"], "item_id": event["item_id"],
                                          "output_index": 0, "content_index": 0, "delta": audio},
                                         separators=(",", ":")))
    return frames


def throughput(seconds: float) -> dict[str, float]:
    frames = realistic_stream()
    audio_share = sum('"response.audio.delta"' in f for f in frames) / len(frames)

    def engine_pass() -> int:
        engine = OpenAIEngine([], config=EngineConfig(mode="proxy"))
        receive = engine.receive_upstream
        for frame in frames:
            receive(frame, 1.0)
        return len(frames)

    def baseline_pass() -> int:
        loads = json.loads
        for frame in frames:
            loads(frame)
        return len(frames)

    results = {}
    for name, one_pass in (("baseline_json_loads", baseline_pass), ("engine", engine_pass)):
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            count += one_pass()
        results[name] = count / (time.perf_counter() - start)
    return {"events_per_s": results["engine"], "baseline_json_loads_events_per_s": results["baseline_json_loads"],
            "engine_vs_baseline": results["engine"] / results["baseline_json_loads"],
            "audio_share": audio_share, "frames_per_pass": len(frames)}


@tool
def instant(n: int) -> dict:
    return {"n": n}


def turnaround(calls: int) -> dict[str, float]:
    mock = LocalMock()
    engine = OpenAIEngine([instant], config=EngineConfig(mode="proxy"), id_prefix="b")
    now = 1.0
    for event in mock.connect():
        engine.receive_upstream(json.dumps(event), now)
    samples = []
    for n in range(calls):
        frames = [json.dumps(e) for e in mock.respond([model_call("instant", json.dumps({"n": n}))])]
        # everything before response.done: the call completes and its handler returns at once
        for frame in frames[:-1]:
            for action in engine.receive_upstream(frame, now):
                if isinstance(action, StartHandler):
                    engine.handler_finished(action.call_id,
                                            Outcome.returned(action.tool.handler(**action.arguments)), now)
        start = time.perf_counter()
        actions = engine.receive_upstream(frames[-1], now)   # response.done
        sent = [a for a in actions if isinstance(a, SendUpstream)]
        elapsed = time.perf_counter() - start
        assert len(sent) == 2 and '"response.create"' in sent[1].frame, sent
        samples.append(elapsed * 1e6)
        # let the follow-up run to its end so the next call starts from an idle session
        for frame in sent:
            for event in mock.receive(frame.frame):
                engine.receive_upstream(json.dumps(event), now)
        now += 0.01
    samples.sort()
    return {"calls": calls, "p50_us": statistics.median(samples),
            "p99_us": samples[int(len(samples) * 0.99) - 1], "max_us": samples[-1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="time per throughput measurement")
    parser.add_argument("--calls", type=int, default=2000, help="tool calls for the turnaround figure")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    figures = {"throughput": throughput(args.seconds), "turnaround": turnaround(args.calls)}
    t, r = figures["throughput"], figures["turnaround"]
    print(f"engine throughput: {t['events_per_s']:,.0f} events/s "
          f"(baseline json.loads of every frame: {t['baseline_json_loads_events_per_s']:,.0f} events/s; "
          f"ratio {t['engine_vs_baseline']:.2f}; {t['audio_share']:.0%} audio frames)")
    print(f"tool turnaround in the engine over {r['calls']} calls: p50 {r['p50_us']:.0f} us, "
          f"p99 {r['p99_us']:.0f} us, max {r['max_us']:.0f} us")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
