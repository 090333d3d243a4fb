#!/usr/bin/env python3
"""What this checkout's relay costs beside an older commit's, counted by the same harness in the
same session: instructions (callgrind) per tool call and per audio frame. Issue 45's acceptance
("no cost": within +3 % of main before it, 62c4881) is checked with it.

The older commit is a worktree of its own (`git worktree add --detach ../base 62c4881`, its
`.venv` made by its `scripts/test`, which builds its compiled modules); this script runs this
checkout's harness over it (RELAY_TREE: the scripts import that tree's `relay`, with its own
Python), then over this checkout, and compares:

- per tool call and per audio frame through the engine: `scripts/bench_engine.py --callgrind
  --gc-off` (the frames of a whole call's round fed to a fresh engine; an output-audio delta
  through `receive_upstream`), the collector off so that a collection does not land in one pass;
- per forwarded audio frame through the whole relay on picows, without sockets:
  `scripts/bench_session_picows.py --callgrind --workload realtime --variant relay` (the
  caller's appends and the model's deltas, one frame per read, the compiled lane where built);
- with `--haproxy R`, the side-by-side benchmark against HAProxy: each tree's own `scripts/bench
  --only throughput --rounds R` (flooded sessions through relay_fast, the bare picows
  pass-through and HAProxy; Debian's `haproxy` installed), base first: relay_fast's CPU per event
  and events/s as ratios to HAProxy's in the same run, at 10 and 100 sessions. Those ratios move
  with the machine (docs/benchmarks.md: 1.26x to 1.76x across runs of one commit), so a
  difference between two runs says little unless it is larger than that.

Usage: .venv/bin/python scripts/bench_against.py BASE_TREE [--calls N] [--frames N] [--haproxy R] [--json FILE]
       .venv/bin/python scripts/bench_against.py ../base --json docs/bench/against.json && scripts/docs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_session   # noqa: E402

LIMIT = 1.03   # issue 45: within +3 % of main before it


def commit_of(tree: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True)
    return done.stdout.strip()


def python_of(tree: Path) -> str:
    """The tree's own Python (its compiled modules are built for it), else this one."""
    own = tree / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def counted(tree: Path, script: str, *arguments: str) -> str:
    """The last line `script` (of this checkout) prints over `tree`'s relay."""
    done = subprocess.run([python_of(tree), str(ROOT / "scripts" / script), *arguments], cwd=tree,
                          capture_output=True, text=True, check=True, env={**os.environ, "RELAY_TREE": str(tree)})
    return done.stdout.strip().splitlines()[-1]


def numbers(line: str) -> list[float]:
    return [float(number.replace(",", "")) for number in re.findall(r"\d[\d,]*(?:\.\d+)?", line)]


def measure(tree: Path, calls: int, frames: int) -> dict[str, Any]:
    engine = numbers(counted(tree, "bench_engine.py", "--callgrind", "--gc-off", "--calls", str(calls)))
    picows = numbers(counted(tree, "bench_session_picows.py", "--callgrind", "--workload", "realtime",
                             "--variant", "relay", "--frames", str(frames)))
    return {"commit": commit_of(tree), "instructions_per_tool_call": engine[0],
            "instructions_per_engine_audio_frame": engine[1], "instructions_per_picows_audio_frame": picows[-1]}


def beside_haproxy(tree: Path, rounds: int) -> dict[str, float]:
    """relay_fast's ratios to HAProxy in `tree`'s own throughput benchmark."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "bench.json"
        subprocess.run([str(tree / "scripts" / "bench"), "--only", "throughput", "--rounds", str(rounds),
                        "--json", str(out)], cwd=tree, capture_output=True, check=True)
        steps = json.loads(out.read_text())["throughput"]
    return {f"{name}_at_{step['sessions']}": step[name] for step in steps if step["sessions"] in (10, 100)
            for name in ("relay_fast_vs_haproxy_cpu", "relay_fast_vs_haproxy_events") if name in step}


MEASURES = ("instructions_per_tool_call", "instructions_per_engine_audio_frame", "instructions_per_picows_audio_frame")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base", help="the older commit's worktree")
    parser.add_argument("--calls", type=int, default=100, help="tool calls (the audio frames: 20 times as many)")
    parser.add_argument("--frames", type=int, default=2000, help="frames of the picows pass")
    parser.add_argument("--haproxy", type=int, metavar="ROUNDS",
                        help="also each tree's throughput benchmark beside HAProxy, ROUNDS rounds")
    parser.add_argument("--json", help="write the figures to this file (docs/bench/against.json for the docs)")
    args = parser.parse_args()
    base = Path(args.base).resolve()
    if not (base / "relay").is_dir():
        print(f"bench_against: {base} holds no relay checkout", file=sys.stderr)
        return 2
    figures: dict[str, Any] = {"machine": bench_session.machine(), "calls": args.calls, "frames": args.frames,
                               "limit": LIMIT, "base": measure(base, args.calls, args.frames),
                               "head": measure(ROOT, args.calls, args.frames)}
    figures["ratios"] = {name: figures["head"][name] / figures["base"][name] for name in MEASURES}
    if args.haproxy:
        figures["haproxy_rounds"] = args.haproxy
        figures["haproxy"] = {"base": beside_haproxy(base, args.haproxy), "head": beside_haproxy(ROOT, args.haproxy)}
        for name, value in figures["haproxy"]["head"].items():
            print(f"{name.replace('_', ' ')}: {figures['haproxy']['base'].get(name, float('nan')):.2f} -> {value:.2f}")
    for name in MEASURES:
        ratio = figures["ratios"][name]
        print(f"{name.replace('_', ' ')}: {figures['base']['commit']} {figures['base'][name]:,.0f}, "
              f"{figures['head']['commit']} {figures['head'][name]:,.0f} (x{ratio:.3f}"
              f"{', over the limit' if ratio > LIMIT else ''})")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 1 if any(ratio > LIMIT for ratio in figures["ratios"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
