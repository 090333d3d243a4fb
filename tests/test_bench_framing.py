"""scripts/bench_framing.py measures the audio fast path's framing check beside the prefix-only
test it replaced: its switch must swap the test in both lanes (the engine's Python test and
picows' compiled lane) and put it back, or the side-by-side figures compare a relay with itself."""

from __future__ import annotations

import json
import math
from types import ModuleType

import pytest

from tests.support.paths import script_module


def bench_framing() -> ModuleType:
    return script_module("bench_framing")


def test_the_switch_swaps_the_test_in_both_lanes_and_puts_it_back() -> None:
    bench = bench_framing()
    shipped = bench.verdicts("framing")
    assert bench.verdicts("prefix") == {lane: True for lane in shipped}   # garbage after the object passes
    assert shipped == {lane: False for lane in shipped}
    assert bench.verdicts("framing") == shipped   # nothing of the switch stays on
    if bench.compiled_module() is not None:
        assert set(shipped) == {"python", "compiled"}
    assert bench.prefix_only_test(frozenset({"input_audio_buffer.append"}))(bench.GARBAGE)


@pytest.mark.bench
@pytest.mark.timeout(120)
def test_a_short_run_reports_every_figure() -> None:
    bench = bench_framing()
    figures = bench.measure(list(bench.TRANSPORTS), 60, 1, None)
    bench.report(figures)
    json.dumps(figures)
    for transport in bench.TRANSPORTS:
        row = figures[transport]
        for key in ("framing_us_per_frame", "prefix_us_per_frame", "cpu_ratio"):
            assert isinstance(row[key], float) and math.isfinite(row[key]) and row[key] > 0, (transport, key)
        assert set(row["within_noise"]) == {"cpu"}
