#!/usr/bin/env python3
"""The inspector on a long session (a benchmark, not a test): an hour of two-sided audio and tens
of thousands of frames, made synthetically, then `relay inspect` and the page in headless
Chromium: how long the page takes to make and how big it is, how long the browser takes to the
first render, and how long each re-render takes while scrolling and zooming. A short session of
the same shape is measured in the same run as the baseline.

Usage: .venv/bin/python scripts/bench_inspector.py [--minutes 60] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import base64
import json
import math
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from relay.inspector import build_model, write_page  # noqa: E402
from tests.support.chromium import chromium, missing_reason  # noqa: E402
from relay.recording.format import CLIENT_TO_RELAY, RELAY_TO_CLIENT, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY  # noqa: E402
from relay.recording.writer import RecordingWriter  # noqa: E402
from relay.recording.reader import read_recording  # noqa: E402

PREFIX = "bench"


def synthesise(directory: Path, minutes: float) -> Path:
    """A GA proxy session: the caller's microphone streams 100 ms chunks the whole time; every
    30 s the user speaks, the model answers with 10 s of audio in 50 ms deltas (every other
    answer calls a relay tool first, answered 400 ms later with a follow-up)."""
    clock = [0.0]
    writer = RecordingWriter(directory, session_id="bench_hour", dialect="openai", upstream="127.0.0.1:1",
                             tools=["lookup"], clock=lambda: clock[0], wall_clock=lambda: 1_800_000_000.0,
                             extra_header={"id_prefix": PREFIX, "hide_tool_events": True})
    rate = 24000
    mic = base64.b64encode(struct.pack("<2400h", *(int(3000 * math.sin(i / 9)) for i in range(2400)))).decode()
    voice = base64.b64encode(struct.pack("<1200h", *(int(9000 * math.sin(i / 5)) for i in range(1200)))).decode()

    def send(t: float, direction: str, event: dict[str, Any]) -> None:
        writer.record(direction, json.dumps(event, separators=(",", ":")), t=t)

    def upstream(t: float, event: dict[str, Any], *, hidden: bool = False) -> None:
        send(t, UPSTREAM_TO_RELAY, event)
        if not hidden:
            send(t, RELAY_TO_CLIENT, event)

    fmt = {"type": "audio/pcm", "rate": rate}
    upstream(0.0, {"type": "session.created", "session": {"audio": {"input": {"format": fmt}, "output": {"format": fmt}}}})
    seconds = minutes * 60
    turn = 0
    next_turn = 5.0
    t = 0.1
    while t < seconds:
        send(t, CLIENT_TO_RELAY, {"type": "input_audio_buffer.append", "audio": mic})
        send(t, RELAY_TO_UPSTREAM, {"type": "input_audio_buffer.append", "audio": mic})
        if t >= next_turn:
            turn += 1
            next_turn += 30.0
            user, response = f"item_u{turn}", f"resp_{turn}"
            upstream(t, {"type": "input_audio_buffer.speech_started", "item_id": user})
            upstream(t + 2, {"type": "input_audio_buffer.speech_stopped", "item_id": user})
            upstream(t + 2, {"type": "conversation.item.added", "item": {"id": user, "type": "message", "role": "user",
                                                                         "content": [{"type": "input_audio"}]}})
            upstream(t + 2.2, {"type": "conversation.item.input_audio_transcription.completed", "item_id": user,
                               "transcript": f"Question number {turn}, please look it up."})
            start = t + 2.3
            if turn % 2:
                upstream(start, {"type": "response.created", "response": {"id": f"{response}c", "conversation_id": "c"}})
                item = {"id": f"item_c{turn}", "type": "function_call", "status": "completed", "name": "lookup",
                        "call_id": f"call_{turn}", "arguments": json.dumps({"key": turn})}
                for piece in range(5):
                    upstream(start + 0.01 * piece, {"type": "response.function_call_arguments.delta",
                                                    "response_id": f"{response}c", "call_id": item["call_id"],
                                                    "item_id": item["id"], "delta": "x"}, hidden=True)
                upstream(start + 0.1, {"type": "response.output_item.done", "response_id": f"{response}c", "item": item},
                         hidden=True)
                upstream(start + 0.1, {"type": "response.done", "response": {"id": f"{response}c", "status": "completed",
                                                                             "output": [item]}})
                send(start + 0.5, RELAY_TO_UPSTREAM, {"type": "conversation.item.create", "event_id": f"{PREFIX}_e{turn}o",
                                                     "item": {"type": "function_call_output", "call_id": item["call_id"],
                                                              "output": json.dumps({"value": turn}), "status": "completed"}})
                send(start + 0.5, RELAY_TO_UPSTREAM, {"type": "response.create", "event_id": f"{PREFIX}_e{turn}f",
                                                     "response": {"metadata": {"relay": "follow_up",
                                                                               "relay_event": f"{PREFIX}_e{turn}f",
                                                                               "call_ids": item["call_id"]}}})
                start += 0.6
            upstream(start, {"type": "response.created", "response": {"id": response, "conversation_id": "c"}})
            for delta in range(200):                  # 10 s of audio, 50 ms a delta, sent in 2 s
                at = start + delta * 0.01
                upstream(at, {"type": "response.output_audio.delta", "response_id": response, "item_id": f"item_a{turn}",
                              "delta": voice})
                if delta % 10 == 0:
                    upstream(at, {"type": "response.output_audio_transcript.delta", "response_id": response,
                                  "item_id": f"item_a{turn}", "delta": f"word {delta // 10} "})
            upstream(start + 2.1, {"type": "response.done", "response": {"id": response, "status": "completed"}})
        t = round(t + 0.1, 6)
    writer.close()
    return writer.path


BROWSER_SCRIPT = """
const done = arguments[arguments.length - 1];
const steps = arguments[0];
const timeline = document.getElementById('timeline');
const frame = () => new Promise((resolve) => requestAnimationFrame(resolve));
(async () => {
  const ins = window.inspector;
  while (!ins.timings.firstRender) await frame();
  const result = {firstRender: ins.timings.firstRender, parse: ins.timings.parse,
                  events: ins.state.events.size, frames: ins.state.frames.length};
  async function measure(action) {
    ins.timings.renders.length = 0;
    const gaps = [];
    let last = performance.now();
    for (let i = 0; i < steps; i++) {
      action(i);
      await frame(); await frame();
      const now = performance.now(); gaps.push(now - last); last = now;
    }
    return {renders: ins.timings.renders.slice(), gaps};
  }
  // zoomed in to a minute in view, scroll through the whole session: first while the page is
  // still decoding its audio, then once it is done; then zoom in and out
  const width = () => timeline.scrollWidth - timeline.clientWidth;
  const zoomIn = () => { ins.state.pxPerSec = timeline.clientWidth / 60; ins.state.laneRows.clear(); };
  zoomIn();
  result.scrollLoading = await measure((i) => { timeline.scrollLeft = width() * i / steps; });
  const started = performance.now();
  while (!(ins.timings.audioReady_caller && ins.timings.audioReady_assistant) && performance.now() - started < 120000) await frame();
  result.audioReady = Math.max(ins.timings.audioReady_caller || NaN, ins.timings.audioReady_assistant || NaN);
  zoomIn();
  result.scroll = await measure((i) => { timeline.scrollLeft = width() * i / steps; });
  ins.fit();
  await frame(); await frame();
  result.zoom = await measure((i) => ins.zoom(i % 16 < 8 ? 1.5 : 1 / 1.5));
  result.duration = document.getElementById('player-caller').duration;
  done(result);
})().catch((e) => done({error: String(e)}));
"""


def in_browser(page: Path, steps: int) -> dict[str, Any]:
    with chromium() as driver:
        driver.set_script_timeout(300)
        driver.set_page_load_timeout(300)
        started = time.perf_counter()
        driver.get(page.resolve().as_uri())
        loaded = time.perf_counter() - started
        result = driver.execute_async_script(BROWSER_SCRIPT, steps)
        result["load_seconds"] = loaded
        return result


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": statistics.median(ordered), "p95": ordered[int(0.95 * (len(ordered) - 1))], "max": ordered[-1]}


def measure(directory: Path, minutes: float, steps: int) -> dict[str, Any]:
    started = time.perf_counter()
    recording_path = synthesise(directory, minutes)
    synthesised = time.perf_counter() - started
    started = time.perf_counter()
    recording = read_recording(recording_path)
    frames = len(recording.frames)
    model = build_model(recording, release=True)
    page = write_page(model, directory / "page.html")
    made = time.perf_counter() - started
    snapshot_events = len(model.events)
    browser = in_browser(page, steps)
    return {
        "minutes": minutes, "frames": frames, "events": snapshot_events,
        "recording_mb": recording_path.stat().st_size / 1e6, "page_mb": page.stat().st_size / 1e6,
        "synthesise_s": synthesised, "inspect_s": made, "browser": browser,
        "scroll_render_ms": stats(browser["scroll"]["renders"]), "scroll_frame_ms": stats(browser["scroll"]["gaps"]),
        "loading_render_ms": stats(browser["scrollLoading"]["renders"]),
        "loading_frame_ms": stats(browser["scrollLoading"]["gaps"]),
        "zoom_render_ms": stats(browser["zoom"]["renders"]), "zoom_frame_ms": stats(browser["zoom"]["gaps"]),
    }


def describe(name: str, run: dict[str, Any]) -> str:
    b = run["browser"]
    return (f"{name}: {run['minutes']:g} min, {run['frames']:,} frames, {run['events']:,} events; recording "
            f"{run['recording_mb']:.0f} MB -> page {run['page_mb']:.1f} MB in {run['inspect_s']:.1f} s; "
            f"load {b['load_seconds']:.2f} s, first render {b['firstRender'] / 1000:.2f} s after navigation "
            f"(model parse {b['parse']:.0f} ms); audio ready {b['audioReady'] / 1000:.2f} s; "
            f"scroll re-render p50/p95/max {run['scroll_render_ms']['p50']:.1f}/{run['scroll_render_ms']['p95']:.1f}/"
            f"{run['scroll_render_ms']['max']:.1f} ms, frame p50/p95 {run['scroll_frame_ms']['p50']:.1f}/"
            f"{run['scroll_frame_ms']['p95']:.1f} ms (while the audio decodes: re-render p50/p95 "
            f"{run['loading_render_ms']['p50']:.1f}/{run['loading_render_ms']['p95']:.1f} ms, frame p50/p95 "
            f"{run['loading_frame_ms']['p50']:.1f}/{run['loading_frame_ms']['p95']:.1f} ms); zoom re-render p50/p95/max {run['zoom_render_ms']['p50']:.1f}/"
            f"{run['zoom_render_ms']['p95']:.1f}/{run['zoom_render_ms']['max']:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--baseline-minutes", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=120, help="scroll and zoom steps measured")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--keep", metavar="DIR", help="keep the recordings and pages here")
    args = parser.parse_args()
    reason = missing_reason()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-inspector-"))
    results = {}
    for name, minutes in (("baseline", args.baseline_minutes), ("long", args.minutes)):
        directory = base / name
        directory.mkdir(parents=True, exist_ok=True)
        results[name] = measure(directory, minutes, args.steps)
        print(describe(name, results[name]), flush=True)
    long, short = results["long"], results["baseline"]
    print(f"long / baseline: first render x{long['browser']['firstRender'] / short['browser']['firstRender']:.2f}, "
          f"scroll re-render p50 x{long['scroll_render_ms']['p50'] / max(short['scroll_render_ms']['p50'], 0.01):.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    if not args.keep:
        import shutil
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
