#!/usr/bin/env python3
"""Explorer speed (a benchmark, not a test): schedules per second of one core's CPU time
(`time.process_time`, so a loaded machine's waiting does not count), `relay explore`'s loop on
the demo's conversation (4 caller lines, 5 relay calls, a filler) on each dialect, and on a
conversation of one call. Every invariant is checked on every schedule, as the command does.

Usage: .venv/bin/python scripts/bench_explore.py [--budget N] [--dialects a,b] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from relay.cli.demo import EXAMPLE_TOOLS, TURNS, demo_script  # noqa: E402
from relay.mock import MockScript, Reply, Rule, ToolCall  # noqa: E402
from relay.offline.explore import explore  # noqa: E402
from relay.offline.explore_session import Conversation  # noqa: E402
from relay.tools.sources import tool_registry  # noqa: E402

ONE_CALL = MockScript(rules=(Rule(match="order", calls=(ToolCall(name="lookup_order", arguments={"order_id": "A1001"}),)),),
                      after_outputs=Reply(say="Found it."))


def measure(conversation: Conversation, budget: int) -> dict[str, float]:
    started = time.process_time()
    result = explore(conversation, budget=budget, seed=48, replay_check=False)
    cpu = time.process_time() - started
    return {"schedules": result.tried, "distinct": result.distinct, "boundaries": result.boundaries,
            "covered": result.covered, "ok": result.ok, "cpu_seconds": round(cpu, 2),
            "schedules_per_cpu_second": round(result.tried / cpu, 1) if cpu else 0.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--dialects", default="openai,azure,foundry,xai,voicelive,gemini,live")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args()
    tools = tool_registry([EXAMPLE_TOOLS])
    figures: dict[str, dict[str, float]] = {}
    for dialect in args.dialects.split(","):
        demo = Conversation("demo", demo_script(), TURNS, tools).with_dialect(dialect)
        figures[f"demo ({dialect})"] = measure(demo, args.budget)
        print(f"demo ({dialect}): {figures[f'demo ({dialect})']}", flush=True)
    one = Conversation("one call", ONE_CALL, ("Where is my order?",), tools)
    figures["one call (openai)"] = measure(one, args.budget)
    print(f"one call (openai): {figures['one call (openai)']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
