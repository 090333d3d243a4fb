#!/usr/bin/env python3
"""Engine benchmark (a benchmark, not a test): events/s through the sans-I/O engine, and tool
turnaround inside the engine, each beside a baseline measured in the same run.

Throughput: the banyan log1 session (415 real events) interleaved with output-audio deltas of
1.3 KB of base64 (20 ms of 24 kHz PCM16), repeated; the baseline is `json.loads` of every frame,
the least a relay that parses what it forwards would do.

Turnaround: a relay-owned call whose handler returns at once (it finished when the call's item
completed): time from feeding `response.done` until the engine has emitted the output and the
follow-up `response.create`, over N calls in one growing session.

Instructions (`--callgrind`, stable on a shared machine): per tool call, the frames of a call's
whole round (the call's response, the handler's result, the output and the follow-up's response)
fed to a fresh engine, recorded first from the turnaround's session; per audio frame, an
output-audio delta through `receive_upstream`. Each is the difference of two callgrind runs of one
and two passes over the same work (what recording it costs cancels out), divided by the work.

Usage: .venv/bin/python scripts/bench_engine.py [--seconds S] [--calls N] [--json FILE]
       .venv/bin/python scripts/bench_engine.py --callgrind [--calls N]
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the relay measured: this checkout's, or another's (RELAY_TREE: scripts/bench_against.py measures an
# older commit's relay with this harness)
ROOT = Path(os.environ.get("RELAY_TREE") or Path(__file__).resolve().parents[1])
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


def recorded_calls(calls: int) -> list[str]:
    """The upstream frames of `calls` tool calls, in order, as the turnaround's session met them
    (the mock answering the relay's own frames): fed again to a fresh engine with the same ids,
    they make the same session."""
    mock, frames = LocalMock(), []
    engine = OpenAIEngine([instant], config=EngineConfig(mode="proxy"), id_prefix="b")

    def feed(events: list[dict]) -> None:
        for event in events:
            frame = json.dumps(event)
            frames.append(frame)
            for action in respond(engine, engine.receive_upstream(frame, 1.0)):
                feed(mock.receive(action.frame))

    feed(mock.connect())
    for n in range(calls):
        feed(mock.respond([model_call("instant", json.dumps({"n": n}))]))
    return frames


def respond(engine: OpenAIEngine, actions: list) -> list[SendUpstream]:
    """The frames the engine sends up, its handlers finished at once (they return what they return)."""
    sent = []
    for action in actions:
        if isinstance(action, StartHandler):
            sent += respond(engine, engine.handler_finished(
                action.call_id, Outcome.returned(action.tool.handler(**action.arguments)), 1.0))
        elif isinstance(action, SendUpstream):
            sent.append(action)
    return sent


def once(work: str, count: int, passes: int, gc_off: bool = False) -> None:
    """`passes` passes of `count` tool calls (or audio frames) through a fresh engine each
    (`gc_off`: with the cyclic garbage collector off, whose runs fall where allocations make them)."""
    frames = recorded_calls(count) if work == "calls" else [audio_delta()] * count
    if gc_off:
        gc.collect()
        gc.disable()
    for _ in range(passes):
        engine = OpenAIEngine([instant], config=EngineConfig(mode="proxy"), id_prefix="b")
        receive = engine.receive_upstream
        for frame in frames:
            respond(engine, receive(frame, 1.0))


def audio_delta() -> str:
    audio = base64.b64encode(bytes(960)).decode()
    return json.dumps({"type": "response.output_audio.delta", "event_id": "event_a", "response_id": "resp_1",
                       "item_id": "item_1", "output_index": 0, "content_index": 0, "delta": audio},
                      separators=(",", ":"))


def callgrind_total(work: str, count: int, passes: int, gc_off: bool = False) -> int:
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
                        "--once", work, "--count", str(count), "--passes", str(passes),
                        *(["--gc-off"] if gc_off else [])], check=True,
                       capture_output=True, env={**os.environ, "PYTHONHASHSEED": "0"})
        for line in out.read_text().splitlines():
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError("no totals in callgrind's output")


def instructions(work: str, count: int, gc_off: bool = False) -> float:
    """Instructions per tool call (or audio frame): two passes less one, over `count`."""
    return (callgrind_total(work, count, 2, gc_off) - callgrind_total(work, count, 1, gc_off)) / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="time per throughput measurement")
    parser.add_argument("--calls", type=int, default=2000, help="tool calls for the turnaround figure")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--callgrind", action="store_true",
                        help="instructions per tool call (--calls: 200 is plenty) and per audio frame")
    parser.add_argument("--once", choices=("calls", "audio"), help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=200, help=argparse.SUPPRESS)
    parser.add_argument("--passes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--gc-off", action="store_true",
                        help="with --callgrind: the cyclic garbage collector off during the passes")
    args = parser.parse_args()
    if args.once:
        once(args.once, args.count, args.passes, args.gc_off)
        return 0
    if args.callgrind:
        calls = instructions("calls", args.calls, args.gc_off)
        audio = instructions("audio", 20 * args.calls, args.gc_off)
        print(f"instructions per tool call: {calls:,.0f}; per audio frame through the engine: {audio:,.0f}")
        return 0
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
