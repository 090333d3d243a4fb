#!/usr/bin/env python3
"""What counting a frame costs (`relay/observe/metrics.py`): the session's `TrafficTap` (integer
adds, published in batches), alone and as the loop records into it (inside the session's guarded
`Taps`, relay/recording/taps.py), beside plain dictionary adds (what the tap did before prometheus-client)
and beside incrementing prometheus-client's counters on every frame, in one process and in its
multiprocess mode (`relay serve --workers N`). Each variant runs in its own interpreter (the
multiprocess mode is chosen when prometheus-client is imported); figures are the best of
several repeats, in nanoseconds per frame, a Python call included.

Usage: .venv/bin/python scripts/bench_metrics.py [--frames N] [--repeats N]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "dict adds (before)": "plain",
    "TrafficTap, batched": "tap",
    "TrafficTap, batched, in Taps": "taps",
    "prometheus-client per frame": "single",
    "prometheus-client per frame, multiprocess": "multi",
}
MEASURE = r"""
import os, sys, timeit
sys.path.insert(0, {root!r})
from relay.observe.metrics import Metrics, TrafficTap
from relay.recording.format import DIRECTIONS
from relay.recording.taps import Taps

variant, frames, repeats = {variant!r}, {frames}, {repeats}
frame = '{{"type":"response.output_audio.delta","delta":"' + "A" * 1300 + '"}}'
if variant == "plain":
    class PlainTap:   # the tap as it was before prometheus-client: the same, without publishing
        __slots__ = ("frames", "frame_bytes", "writer")
        def __init__(self):
            self.frames, self.frame_bytes = dict.fromkeys(DIRECTIONS, 0), dict.fromkeys(DIRECTIONS, 0)
            self.writer = None
        def record(self, direction, frame):
            self.frames[direction] += 1
            self.frame_bytes[direction] += len(frame)
            if self.writer is not None:
                self.writer.record(direction, frame)
    record = PlainTap().record
elif variant == "tap":
    record = TrafficTap(Metrics()).record
elif variant == "taps":
    record = Taps(TrafficTap(Metrics())).record
else:
    metrics = Metrics()
    metrics.ready()
    counters, sizes = metrics._families.frames, metrics._families.frame_bytes
    def record(direction, frame):
        counters[direction].inc()
        sizes[direction].inc(len(frame))
best = min(timeit.repeat(lambda: record(DIRECTIONS[2], frame), number=frames, repeat=repeats))
print(best / frames * 1e9)
"""


def measure(variant: str, frames: int, repeats: int) -> float:
    with tempfile.TemporaryDirectory() as directory:
        env = {"PATH": "/usr/bin:/bin"}
        if variant == "multi":
            env["PROMETHEUS_MULTIPROC_DIR"] = directory
        code = MEASURE.format(root=str(ROOT), variant=variant, frames=frames, repeats=repeats)
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    return float(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    for label, variant in VARIANTS.items():
        print(f"{label:45s} {measure(variant, args.frames, args.repeats):7.0f} ns per frame")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
