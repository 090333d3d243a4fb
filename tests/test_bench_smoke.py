"""The benchmark's smoke run: `scripts/bench --quick --json FILE` finishes in CI time and reports
every figure as a number. No thresholds here: how fast the relay is belongs to the benchmark's
report (docs/benchmarks.md), not to a test on a shared CI machine."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[1]
PROXIES = ("raw", "relay", "relay_fast") + (("haproxy",) if shutil.which("haproxy", path="/usr/sbin:/usr/bin") else ())
"""The relay on each transport (relay_fast: picows) and HAProxy where Debian's package is installed."""
PATHS = ("direct", *PROXIES)


def figure(figures: dict[str, Any], *keys: str | int) -> float:
    value: Any = figures
    for key in keys:
        value = value[key]
    assert isinstance(value, (int, float)) and not isinstance(value, bool), (keys, value)
    assert math.isfinite(value), (keys, value)
    return float(value)


@pytest.mark.timeout(240)
def test_quick_benchmark_reports_every_figure(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    run = subprocess.run([str(ROOT / "scripts" / "bench"), "--quick", "--json", str(output)], cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    figures = json.loads(output.read_text())
    assert figures["quick"] is True

    for proxy in PROXIES:
        assert figure(figures, "memory", proxy, "kb_per_session") > 0
    figure(figures, "memory", "relay_vs_raw")
    figure(figures, "memory", "relay_fast_vs_relay")

    assert [step["sessions"] for step in figures["throughput"]] == [10]   # QUICK's plan
    for step in figures["throughput"]:
        for path in (*PATHS, "raw_batched", "raw_picows"):
            assert figure(step, path, "events_per_s") > 0
        for proxy in (*PROXIES, "raw_batched", "raw_picows"):
            assert figure(step, proxy, "cpu_us_per_event") > 0
            # where it goes: the proxy's own code and the kernel's socket calls, adding up to it
            user, system = figure(step, proxy, "user_us_per_event"), figure(step, proxy, "system_us_per_event")
            assert user >= 0 and system >= 0
            for trial in step["rounds"]:
                assert trial[proxy]["user_percent"] + trial[proxy]["system_percent"] == pytest.approx(
                    trial[proxy]["cpu_percent"])
            # sessions a proxy closed before the measurement ended are counted (a flood can
            # outrun a client on a small machine: the relay then cuts it off, and says so)
            assert 0 <= figure(step, proxy, "sessions_cut_off") <= step["sessions"]
        assert figure(step, "relay_vs_raw") > 0
        assert figure(step, "relay_vs_raw_batched") > 0
        assert figure(step, "relay_fast_vs_relay_cpu") > 0
        assert figure(step, "relay_fast_vs_raw_picows_cpu") > 0
        if "haproxy" in PROXIES:
            assert figure(step, "relay_fast_vs_haproxy_cpu") > 0
            assert figure(step, "relay_fast_vs_haproxy_events") > 0
            assert figure(step, "raw_picows_vs_haproxy_cpu") > 0

    realtime = figures["realtime"]
    # the timed audio comes from picows on both ends (scripts/bench_timed.py), not websockets
    assert realtime["upstream"] == "upstream (picows, timed audio)"
    assert realtime["steps"]
    for step in realtime["steps"]:
        for path in PATHS:
            assert figure(step, path, "latency", "count") > 0
            figure(step, path, "latency", "p50_ms")
            figure(step, path, "latency", "p99_ms")
        for proxy in PROXIES:
            for name in ("added_p50_ms", "added_p99_ms", "cpu_percent", "cpu_us_per_event", "rss_kb_per_session"):
                figure(step, proxy, name)
        figure(step, "relay_minus_raw_added_p99_ms")
    for proxy in PROXIES:
        figure(realtime, "max_sessions_within_bound", proxy)
    # what the load generator takes of the machine, and the ceiling that leaves each proxy
    for step in realtime["steps"]:
        assert figure(step, "direct", "generator_cores") > 0
    assert figure(realtime, "ceiling", "generator_cores_per_100_sessions") > 0
    for proxy in PROXIES:
        if any(step[proxy]["within_bound"] for step in realtime["steps"]):
            assert figure(realtime, "ceiling", "sessions", proxy) > 0

    for handler in ("async_handler", "sync_handler", "mcp_stdio", "mcp_http"):
        assert figure(figures, "tool_turnaround", handler, "calls") == 60   # QUICK's plan
        assert 0 < figure(figures, "tool_turnaround", handler, "p50_ms") <= figure(
            figures, "tool_turnaround", handler, "p99_ms")
    assert figure(figures, "replay", "replay_events_per_s") > 0
    for burst in ("burst_16", "burst_1"):
        assert figure(figures, "relay_overhead", burst, "relay_us_per_frame") > 0
        figure(figures, "relay_overhead", burst, "relay_added_us_per_frame")
        for direction in ("output", "input"):   # a GPT-Live session's audio beside a Realtime session's
            for dialect in ("openai", "live"):
                assert figure(figures, "relay_overhead", "audio_dialects", burst,
                              f"{dialect}_{direction}_cpu_us_per_frame") > 0
            assert figure(figures, "relay_overhead", "audio_dialects", burst, f"live_vs_openai_{direction}") > 0

    # every target is reported beside its figure; the quick ladder stops below 100 sessions
    assert set(figures["targets"]) >= {"throughput_relay_vs_raw_min", "realtime_added_p99_relay_minus_raw_ms_at_100",
                                       "realtime_sessions_relay_vs_raw", "tool_turnaround_p99_ms_async",
                                       "idle_session_kb", "cpu_per_event_relay_fast_vs_haproxy_at_10",
                                       "cpu_per_event_relay_fast_vs_haproxy_at_100",
                                       "throughput_relay_fast_vs_haproxy_min", "realtime_sessions_relay_fast_vs_relay",
                                       "idle_session_kb_relay_fast_vs_relay"}
    for name, target in figures["targets"].items():
        assert target["met"] in (True, False, None), name
        if target["value"] is not None:
            figure(target, "value")


@pytest.mark.timeout(240)
def test_quick_inspector_benchmark_reports_every_figure(tmp_path: Path) -> None:
    output = tmp_path / "bench.json"
    run = subprocess.run([str(ROOT / "scripts" / "bench"), "--inspector", "--quick", "--json", str(output)], cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout + run.stderr
    inspector = json.loads(output.read_text())["inspector"]
    variants = ("off", "on", "watched")
    for step in inspector["throughput"]:
        for variant in variants:
            assert figure(step, variant, "events_per_s") > 0
            assert figure(step, variant, "cpu_us_per_event") > 0
        for ratio in ("on_vs_off_events_per_s", "watched_vs_off_events_per_s", "on_vs_off_cpu_per_event",
                      "watched_vs_off_cpu_per_event"):
            assert figure(step, ratio) > 0
    realtime = inspector["realtime"]
    for variant in variants:
        assert figure(realtime, variant, "latency", "count") > 0
        figure(realtime, variant, "added_p99_ms")
    figure(realtime, "on_minus_off_added_p99_ms")
    figure(realtime, "watched_minus_off_added_p99_ms")
    for burst in ("burst_16", "burst_1"):
        assert figure(inspector, "per_frame", burst, "on_vs_off") > 0
        assert figure(inspector, "per_frame", burst, "watched_vs_off") > 0
    # the page watched a session of every watched trial (else "watched" measured nobody watching):
    # in time and with deltas; a flood may outrun a page on a machine busy with other tests, and
    # the hub then stops its view by design (the benchmark runs such a trial again, and says so
    # when every attempt fell behind); at 50 frames/s a page always follows
    for step in inspector["throughput"]:
        for trial in step["rounds"]:
            watcher = trial["watched"]["watcher"]
            assert not watcher["late"] and watcher["deltas"] > 0, run.stdout
            assert all("fell behind" in error for error in watcher["errors"]), run.stdout
    for trial in realtime["rounds"]:
        watcher = trial["watched"]["watcher"]
        assert not watcher["late"] and watcher["deltas"] > 0 and not watcher["errors"], run.stdout
    assert isinstance(inspector["watcher_followed_every_trial"], bool)
