#!/usr/bin/env python3
"""How fast the `relay` command starts (issue 30): `relay --version`, `relay --help`, a command's
`--help`, and `relay attach` from its start to its connection on the provider's sideband, each
beside `python -c pass` in the same round, as ratios (this machine is shared and noisy: the
ratios compare, the seconds only say where we are). Rounds alternate the commands; the medians
are reported.

    scripts/bench_startup.py [--rounds 15] [--json FILE]

`relay attach` is measured against the project's mock provider, run in this process: a call is
created, the command is started, and the time is taken when the mock sees the sideband connect
(its first frame) — what a sidecar started by a webhook must do before the caller speaks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from relay.mock import MockUpstream  # noqa: E402

PYTHON = sys.executable
RELAY = [PYTHON, "-m", "relay"]
COMMANDS = {
    "python -c pass": [PYTHON, "-c", "pass"],
    "relay --version": [*RELAY, "--version"],
    "relay --help": [*RELAY, "--help"],
    "relay serve --help": [*RELAY, "serve", "--help"],
    "relay attach --help": [*RELAY, "attach", "--help"],
}
TOOLS = '''from relay import tool


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"
'''


def run_once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=tempfile.gettempdir())
    return time.perf_counter() - start


async def attach_once(mock: MockUpstream, tools: Path) -> float:
    """Seconds from starting `relay attach` to the mock seeing its sideband connection."""
    call_id = mock.create_call()
    session = mock.find_session(call_id)
    assert session is not None
    start = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *RELAY, "attach", "--call-id", call_id, "--tools", str(tools), "--upstream", mock.url,
        "--dialect", "openai", "--log-level", "warning",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "OPENAI_API_KEY": "bench-key"})
    try:
        while not session.connections:
            if process.returncode is not None:
                raise RuntimeError(f"relay attach exited with {process.returncode} before connecting")
            await asyncio.sleep(0.001)   # polling the mock's state: the clock is what is measured
        return time.perf_counter() - start
    finally:
        await mock.close_session(session)
        try:
            await asyncio.wait_for(process.wait(), 10)
        except asyncio.TimeoutError:
            process.kill()
            await process.wait()


async def measure(rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in [*COMMANDS, "relay attach (to connected)"]}
    with tempfile.TemporaryDirectory() as scratch:
        tools = Path(scratch) / "bench_tools.py"
        tools.write_text(TOOLS)
        async with MockUpstream() as mock:
            for round_number in range(rounds):
                order = list(COMMANDS)
                if round_number % 2:
                    order.reverse()
                for name in order:
                    times[name].append(await asyncio.to_thread(run_once, COMMANDS[name]))
                times["relay attach (to connected)"].append(await attach_once(mock, tools))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="rounds of every command (default 15)")
    parser.add_argument("--json", metavar="FILE", help="write every figure to FILE")
    args = parser.parse_args()
    times = asyncio.run(measure(args.rounds))
    baseline = statistics.median(times["python -c pass"])
    print(f"median of {args.rounds} rounds; ratio to `python -c pass` ({baseline * 1000:.0f} ms) in the same run")
    report = {}
    for name, values in times.items():
        median = statistics.median(values)
        report[name] = {"median_s": round(median, 4), "ratio": round(median / baseline, 2),
                        "min_s": round(min(values), 4), "max_s": round(max(values), 4)}
        print(f"  {name:30} {median * 1000:7.0f} ms   x{median / baseline:5.1f}   "
              f"(min {min(values) * 1000:.0f}, max {max(values) * 1000:.0f})")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
