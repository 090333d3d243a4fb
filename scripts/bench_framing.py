#!/usr/bin/env python3
"""What the audio fast path's framing check costs (issue 50 item 9), beside the test it replaced,
in one run, on both transports.

The fast path forwards an audio frame as it came when its test says it is one flat JSON object of
a forwarded type (relay/dialects/peek.py `pass_through_test`: compiled, relay/dialects/_peek.pyx,
where setup.py built it, else in Python; `FrameLane.passes` in picows' compiled lane). Before the
framing check, the test looked at the prefix alone: the type, no backslash, no second `"type"`
before the payload. This script runs the same relay two ways:

    framing   the relay as it ships
    prefix    the same relay with the test replaced by the prefix-only one: the engine's test
              (`relay.engine.itembased.pass_through_test`) swapped for `prefix_only_test` below,
              and the compiled lane's benchmark switch (`_picows_lane.bench_prefix_only`) on

A switch of this benchmark's, not an option of the relay's. On websockets it runs twice: with the
test as it ships (compiled) and as an install without a C compiler has it (`websockets_python`:
`peek.compiled_test` set to None while the engines are built). Before it measures, the script checks
that each variant decides as it should (a frame with garbage after it passes the prefix-only test
alone, in both lanes).

The work is realtime audio without sockets, one frame per read, as bench_session.py and
bench_session_picows.py run it: on the websockets transport, the model's deltas from the upstream
to a real websockets connection and the caller's appends from one to the upstream; on picows,
both in turns between two real picows connections (the compiled lane takes them). Per transport:

- instructions per frame of each variant, counted by callgrind (`--callgrind-frames` N: two runs
  of one pass, N and 2N frames, the difference over the frames added; steadier than time on a
  shared machine), `--estimates` times each: the median is the figure, and the widest spread
  between the counts of one variant this figure's run-to-run noise;
- CPU time per frame (`time.process_time`), `--rounds` rounds of one pass of each variant back to
  back, in turns of order: the median of each variant, and the median and range of the per-round
  ratio framing / prefix (the range is the run-to-run noise of the ratio).

Usage: .venv/bin/python scripts/bench_framing.py [--frames N] [--rounds R] [--callgrind-frames N]
           [--no-callgrind] [--json FILE]
       .venv/bin/python scripts/bench_framing.py --json docs/bench/framing.json && scripts/docs
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_session   # noqa: E402
import bench_session_picows   # noqa: E402

from relay.dialects import OPENAI, peek   # noqa: E402
from relay.engine import EngineConfig, OpenAIEngine, itembased   # noqa: E402
from relay.session.pipe import ForwardRule, Pipe   # noqa: E402
from relay.session.transport import FrameQueue   # noqa: E402
from relay.transports import picows_connection   # noqa: E402

VARIANTS = ("framing", "prefix")
TRANSPORTS = ("websockets", "websockets_python", "picows")
# an append with garbage after its object: the prefix-only test passes it, the framing check not
GARBAGE = '{"type":"input_audio_buffer.append","event_id":"e1","audio":"AAAA"}}}garbage'


def prefix_only_test(kinds: frozenset[str]) -> Callable[[str | bytes], bool]:
    """The engine's test before the framing check (as of 8e1107d^): a compact frame of one of
    `kinds`, `type` first, no backslash, no second `"type"` before the payload's opening quote;
    nothing of what follows."""
    prefixes = tuple(f'{{"type":"{kind}"' for kind in sorted(kinds))
    after_type = len('{"type"')

    def passes(frame: str | bytes) -> bool:
        try:
            typed = frame.startswith(prefixes)   # type: ignore[arg-type]
        except TypeError:
            return False
        return (typed and "\\" not in frame   # type: ignore[operator]
                and '"type"' not in frame[after_type:frame.rfind('"', 0, -2) + 1])   # type: ignore[operator, arg-type, union-attr]

    passes.prefixes = prefixes   # type: ignore[attr-defined]
    passes.after_type = after_type   # type: ignore[attr-defined]
    return passes


@contextlib.contextmanager
def python_test(on: bool) -> Iterator[None]:
    """While inside with `on`, engines get the Python test, as where the compiled one is not built."""
    compiled = peek.compiled_test
    if on:
        peek.compiled_test = None
    try:
        yield
    finally:
        peek.compiled_test = compiled


@contextlib.contextmanager
def checked_by(variant: str) -> Iterator[None]:
    """The relay's fast path tested by `variant`'s test while inside (engines built inside keep it)."""
    shipped = itembased.pass_through_test
    lane = compiled_module()
    if variant == "prefix":
        itembased.pass_through_test = prefix_only_test   # type: ignore[assignment]
        if lane is not None:
            lane.bench_prefix_only(True)
    try:
        yield
    finally:
        itembased.pass_through_test = shipped   # type: ignore[assignment]
        if lane is not None:
            lane.bench_prefix_only(False)


def compiled_module() -> Any:
    """relay/transports/_picows_lane.pyx's module when the picows transport runs on it, else None."""
    if not picows_connection.COMPILED:
        return None
    from relay.transports import _picows_lane
    return _picows_lane


def verdicts(variant: str) -> dict[str, bool]:
    """Whether `variant`'s engine test and compiled lane pass GARBAGE (the switch at work)."""
    with checked_by(variant):
        engine = OpenAIEngine(bench_session_picows.tools_for_bench(), config=EngineConfig(mode="proxy"))
        found = {"python": bool(engine.forwards_client(GARBAGE))}
        lane = compiled_module()
        if lane is not None:
            passes = engine.forwards_client
            rule = ForwardRule(passes, passes.prefixes, passes.after_type)   # type: ignore[attr-defined]
            pipe = Pipe(rule, peer=None, queue=FrameQueue(1 << 20), counts=None, record=None, received="", sent_as="")
            found["compiled"] = bool(lane.FrameLane(pipe).passes_bytes(GARBAGE.encode()))
    return found


def check_switch() -> None:
    for variant, python in ((variant, python) for variant in VARIANTS for python in (False, True)):
        with python_test(python):
            found = verdicts(variant)
        if any(passed != (variant == "prefix") for passed in found.values()):
            raise SystemExit(f"the {variant} variant does not decide as it should on a frame with garbage "
                             f"after it: {found}")


# ---- one pass -------------------------------------------------------------------------------------

def websockets_pass(frames: int) -> float:
    """CPU seconds for `frames` model deltas and `frames` caller appends on the websockets transport."""
    async def both() -> float:
        tools = bench_session_picows.tools_for_bench()
        output = await bench_session.relay_pass(tools, frames, 1, clock=time.process_time)
        return output + await bench_session.relay_input_pass(tools, frames, 1, OPENAI)

    return asyncio.run(both())


def picows_pass(frames: int) -> float:
    """CPU seconds for `frames` frames (deltas and appends in turns) between picows connections."""
    tools = bench_session_picows.tools_for_bench()
    workload = bench_session_picows.Workload("realtime", frames, 1)
    return bench_session_picows.run(lambda: bench_session_picows.run_pass(tools, workload, "relay"))   # type: ignore[no-any-return]


def frames_of(transport: str, frames: int) -> int:
    """The frames a pass of `frames` forwards."""
    return 2 * frames if transport != "picows" else bench_session_picows.Workload("realtime", frames, 1).frames


def one_pass(transport: str, variant: str, frames: int) -> float:
    with checked_by(variant), python_test(transport == "websockets_python"):
        return websockets_pass(frames) if transport != "picows" else picows_pass(frames)


# ---- the figures --------------------------------------------------------------------------------

def callgrind_total(transport: str, variant: str, frames: int) -> int:
    """Instructions callgrind counts for one pass of `transport` and `variant` over `frames`."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
                        "--once", transport, variant, "--frames", str(frames)], check=True, capture_output=True,
                       env={**os.environ, "PYTHONHASHSEED": "0"})   # the same dict layouts run after run
        for line in out.read_text().splitlines():
            if line.startswith(("totals:", "summary:")):
                return int(line.split()[1])
    raise RuntimeError("no totals in callgrind's output")


def instructions_per_frame(transport: str, frames: int, estimates: int) -> dict[str, list[float]]:
    """`estimates` counts of each variant's instructions per frame on `transport`, each the
    difference of two callgrind runs (`frames` and twice as many) over the frames it adds. The
    runs go at once, each in its own process (on a shared machine they would otherwise wait their
    turn for the cores many times over); a count does not depend on what else runs."""
    runs = [(variant, size) for variant in VARIANTS for _ in range(estimates) for size in (frames, 2 * frames)]
    with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
        totals = list(pool.map(lambda run: callgrind_total(transport, run[0], run[1]), runs))
    added = frames_of(transport, 2 * frames) - frames_of(transport, frames)
    counts: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for index in range(0, len(runs), 2):
        counts[runs[index][0]].append((totals[index + 1] - totals[index]) / added)
    return counts


def measure(transports: list[str], frames: int, rounds: int, callgrind_frames: int | None,
            estimates: int = 3) -> dict[str, Any]:
    figures: dict[str, Any] = {"machine": bench_session.machine(), "frames": frames, "rounds": rounds,
                               "callgrind_frames": callgrind_frames,
                               "callgrind_estimates": estimates}
    for transport in transports:
        row: dict[str, Any] = {}
        figures[transport] = row
        if transport == "picows":
            row["compiled_lane"] = compiled_module() is not None
        if transport == "websockets":
            row["compiled_test"] = peek.compiled_test is not None
        for variant in VARIANTS:
            one_pass(transport, variant, min(frames, 2000))   # warm: the first pass pays for first uses
        seconds: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
        for round_ in range(rounds):
            for variant in VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]:
                seconds[variant].append(one_pass(transport, variant, frames))
        count = frames_of(transport, frames)
        for variant in VARIANTS:
            row[f"{variant}_us_per_frame"] = statistics.median(seconds[variant]) / count * 1e6
        ratios = [checked / prefix for checked, prefix in zip(seconds["framing"], seconds["prefix"])]
        row["cpu_ratio"] = statistics.median(ratios)
        row["cpu_ratio_range"] = [min(ratios), max(ratios)]
        if callgrind_frames:
            counts = row["instructions_per_frame_counts"] = instructions_per_frame(transport, callgrind_frames, estimates)
            for variant in VARIANTS:
                row[f"{variant}_instructions_per_frame"] = statistics.median(counts[variant])
            # the run-to-run noise: how far apart the counts of one relay came, the wider of the two
            row["instructions_noise_per_frame"] = max(max(counts[variant]) - min(counts[variant]) for variant in VARIANTS)
            row["instructions_added_per_frame"] = (row["framing_instructions_per_frame"]
                                                   - row["prefix_instructions_per_frame"])
            row["instructions_ratio"] = row["framing_instructions_per_frame"] / row["prefix_instructions_per_frame"]
    return figures


def within_noise(row: dict[str, Any]) -> dict[str, bool]:
    """Whether the difference is within the run-to-run noise: the per-round CPU ratios reach 1 on
    both sides (some rounds the check's relay cost less), and the instructions added are no more
    than two measures of the same relay differ by."""
    low, high = row["cpu_ratio_range"]
    verdict = {"cpu": low <= 1.0 <= high}
    if "instructions_added_per_frame" in row:
        verdict["instructions"] = abs(row["instructions_added_per_frame"]) <= row["instructions_noise_per_frame"]
    return verdict


def report(figures: dict[str, Any]) -> None:
    for transport in TRANSPORTS:
        row = figures.get(transport)
        if row is None:
            continue
        row["within_noise"] = within_noise(row)
        low, high = row["cpu_ratio_range"]
        lane = {"websockets": " (compiled test)" if row.get("compiled_test") else " (Python test)",
                "websockets_python": " (Python test)"}.get(transport) or (
                    " (compiled lane)" if row["compiled_lane"] else " (Python lane)")
        print(f"{transport}{lane}: CPU per frame, framing check {row['framing_us_per_frame']:.2f} us, prefix-only "
              f"{row['prefix_us_per_frame']:.2f} us; ratio x{row['cpu_ratio']:.3f} (rounds x{low:.3f} to x{high:.3f}"
              f"{', within the noise' if row['within_noise']['cpu'] else ''})")
        if "instructions_added_per_frame" in row:
            print(f"{transport}{lane}: instructions per frame, framing check {row['framing_instructions_per_frame']:,.0f},"
                  f" prefix-only {row['prefix_instructions_per_frame']:,.0f}: {row['instructions_added_per_frame']:+,.0f}"
                  f" (x{row['instructions_ratio']:.4f}); the same relay counted twice differs by "
                  f"up to {row['instructions_noise_per_frame']:,.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=20_000, help="frames per pass (each way on websockets)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds of one pass of each variant")
    parser.add_argument("--callgrind-frames", type=int, default=2000, help="frames of callgrind's smaller pass")
    parser.add_argument("--estimates", type=int, default=3,
                        help="callgrind counts of each variant (their median is the figure, their spread the noise)")
    parser.add_argument("--no-callgrind", action="store_true", help="CPU time alone")
    parser.add_argument("--transport", choices=TRANSPORTS, action="append", help="only this one (repeatable)")
    parser.add_argument("--once", nargs=2, metavar=("TRANSPORT", "VARIANT"), help=argparse.SUPPRESS)
    parser.add_argument("--json", help="write the figures to this file (docs/bench/framing.json for the docs)")
    args = parser.parse_args()
    if args.once:
        transport, variant = args.once
        one_pass(transport, variant, args.frames)
        return 0
    check_switch()
    figures = measure(args.transport or list(TRANSPORTS), args.frames, args.rounds,
                      None if args.no_callgrind else args.callgrind_frames, args.estimates)
    report(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
