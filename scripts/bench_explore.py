#!/usr/bin/env python3
"""Explorer speed (a benchmark, not a test): schedules per second of one core's CPU time
(`time.process_time`, so a loaded machine's waiting does not count), `relay explore`'s loop on
the demo's conversation (4 caller lines, 5 relay calls, a filler) on each dialect, and on a
conversation of one call, with the garbage collector's share of that CPU time (its collections
timed by a `gc.callbacks` hook). Every invariant is checked on every schedule, as the command does
(`replays_same` aside: `relay explore` replays only every `REPLAY_EVERY`th schedule).

With `--before REV` the code of that commit (exported with `git archive`) is measured too, in
the same run: each round measures every conversation before and after, one after the other, in
fresh processes, so that a shared machine's load weighs on both alike. `--json` writes the figures
docs/benchmarks.md shows (`scripts/docs` renders them).

Usage: .venv/bin/python scripts/bench_explore.py [--budget N] [--rounds N] [--dialects a,b]
                                                 [--before REV] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SEED = 48
ONE_CALL = "one call"


class CollectorClock:
    """The CPU time the garbage collector's collections take, from `gc.callbacks`."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started


def measure(tree: str, conversation: str, budget: int) -> dict[str, Any]:
    """One exploration of `conversation` ("demo (DIALECT)" or "one call") by the code in `tree`."""
    sys.path.insert(0, tree)
    from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script
    from relay.mock import MockScript, Reply, Rule, ToolCall
    from relay.offline.explore import explore
    from relay.offline.explore_session import Conversation
    from relay.tools.sources import tool_registry

    tools = tool_registry([EXAMPLE_TOOLS])
    if conversation == ONE_CALL:
        script = MockScript(rules=(Rule(match="order", calls=(ToolCall(name="lookup_order",
                                                                         arguments={"order_id": "A1001"}),)),),
                            after_outputs=Reply(say="Found it."))
        explored = Conversation(ONE_CALL, script, ("Where is my order?",), tools)
    else:
        dialect = conversation.split("(")[1].rstrip(")")
        explored = Conversation("demo", demo_script(), TURNS, tools).with_dialect(dialect)
    collector = CollectorClock()
    with tempfile.TemporaryDirectory(prefix="relay-bench-explore-") as out:
        gc.callbacks.append(collector)
        started = time.process_time()
        result = explore(explored, budget=budget, seed=SEED, replay_check=False, out=out)
        cpu = time.process_time() - started
        gc.callbacks.remove(collector)
    return {"tried": result.tried, "distinct": result.distinct, "boundaries": result.boundaries,
            "covered": result.covered, "grown": getattr(result, "grown", 0),
            "grown_covered": getattr(result, "grown_covered", 0), "ok": result.ok, "cpu_seconds": cpu,
            "rate": result.tried / cpu if cpu else 0.0, "collector": collector.seconds / cpu if cpu else 0.0}


def _run(tree: str, conversation: str, budget: int) -> dict[str, Any]:
    """`measure` in a fresh process (imports and caches of one tree never meet the other's)."""
    done = subprocess.run([sys.executable, __file__, "--measure", tree, conversation, str(budget)],
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _export(revision: str, into: str) -> str:
    """The tree of `revision`, written under `into` (its `relay/` is what the before runs import)."""
    archive = subprocess.run(["git", "archive", revision, "relay"], cwd=ROOT, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into)
    # the compiled modules this checkout built, where the revision's source is the same: both sides
    # then run the same compiled code (a module whose source differs runs as plain Python there)
    for built in (ROOT / "relay").rglob("*.so"):
        source = built.with_name(built.name.split(".")[0] + ".pyx")
        exported = Path(into) / source.relative_to(ROOT)
        if source.exists() and exported.exists() and exported.read_bytes() == source.read_bytes():
            shutil.copy2(built, exported.with_name(built.name))
    return into


def machine(before: str | None) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "scripts"))
    from bench_session import machine as where

    found = where()
    if before:
        found["before"] = subprocess.run(["git", "rev-parse", "--short", before], cwd=ROOT, capture_output=True,
                                         text=True).stdout.strip() or before
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dialects", default="openai,azure,foundry,xai,voicelive,gemini,live")
    parser.add_argument("--before", metavar="REV", help="also measure the code of this commit, in the same run")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--measure", nargs=3, metavar=("TREE", "CONVERSATION", "BUDGET"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        tree, conversation, budget = args.measure
        print(json.dumps(measure(tree, conversation, int(budget))))
        return 0
    conversations = [f"demo ({dialect})" for dialect in args.dialects.split(",")] + [ONE_CALL]
    figures: dict[str, Any] = {"machine": machine(args.before), "budget": args.budget, "seed": SEED,
                               "rounds": args.rounds, "conversations": {}}
    with tempfile.TemporaryDirectory(prefix="relay-bench-before-") as folder:
        trees = {"after": str(ROOT)}
        if args.before:
            trees = {"before": _export(args.before, folder), **trees}
        for conversation in conversations:
            row: dict[str, Any] = {side: [] for side in trees}
            for _ in range(args.rounds):
                for side, tree in trees.items():
                    run = _run(tree, conversation, args.budget)
                    row[side].append(round(run["rate"], 1))
                    row.setdefault(f"{side}_collector", []).append(round(run["collector"] * 100, 1))
                    if side == "after":
                        row.update({key: run[key] for key in ("tried", "distinct", "boundaries", "covered", "grown",
                                                              "grown_covered", "ok")})
            for side in trees:
                row[f"{side}_median"] = statistics.median(row[side])
            figures["conversations"][conversation] = row
            print(f"{conversation}: {json.dumps(row)}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
