#!/usr/bin/env python3
"""The relay's benchmark (`scripts/bench`): what one machine holds and what delay the relay adds,
side by side with a raw WebSocket pass-through proxy on the same stack (the floor any Python relay
can approach on websockets), with HAProxy tunnelling the same WebSocket (a C proxy: the floor of
any proxy) and with the direct path, all measured in the same run. The relay runs twice: on its
websockets transport (`relay`) and on picows (`relay_fast`, `--transport picows`); HAProxy is
Debian's `haproxy` (left out, with a note, where it is not installed).

Every scenario runs the upstream (scripts/bench_upstream.py), the proxy under test (`relay serve`,
scripts/bench_rawproxy.py or haproxy) and the clients (scripts/bench_clients.py) as separate
processes; this process only starts them, reads their results and samples the proxies' CPU time
and RSS from /proc (Linux). The trials of one round run the paths one after the other, in the
reverse order every other round; figures are the medians of the rounds.

1. the RSS of idle sessions
2. realtime: N sessions at 50 frames/s each way -> one-way latency (monotonic clock shared by the
   processes), added latency = a path's percentile minus the direct path's, CPU, RSS; N grows
   until the added p99 passes 10 ms. The load generator's own CPU (upstream and clients, on the
   direct path) bounds what any proxy can hold on the machine: the run reports that ceiling
3. throughput: 1, 10, 100 sessions flooded with output-audio deltas -> events/s; beside the raw
   proxy, the raw proxy given the relay's way of reading and writing (bench_rawproxy.py
   --coalesce), so that the relay's own cost shows apart from what that saves, and a bare
   pass-through on picows (`raw_picows`, bench_rawproxy_picows.py): the floor of relay_fast's
   library, in the same run as HAProxy
4. tool turnaround through `relay serve`: response.done -> output + follow-up response.create, for
   @tool handlers (async, sync) and, on a relay started with them, for an MCP tool over stdio and
   over streamable HTTP (scripts/bench_mcp_server.py: the relay's turnaround plus the MCP round trip)
5. replay speed (scripts/bench_replay.py), and the relay's cost per frame without sockets
   (scripts/bench_session.py), to explain the others
Each of the first four scenarios starts with freshly started proxies (see fresh_proxies).

`--inspector` runs one other scenario instead: what the live inspector costs. The relay off (no
--inspector), on with nobody watching, and on with one page watching one of the sessions (a
client of /inspector/feed, scripts/bench_clients.py watch), round after round: throughput and CPU
per event, and the added latency of realtime audio; each as a ratio to (or difference from) the
relay without the inspector, in the same round.

Usage: scripts/bench [--quick] [--rounds N] [--json FILE] [--only SCENARIO ...] [--inspector]
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import dataclasses
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import websockets

import bench_replay
import bench_session
from cluster import find_haproxy

SCRIPTS = Path(__file__).resolve().parent
ROOT = SCRIPTS.parent
PYTHON = sys.executable
PROXIES = ("raw", "relay", "relay_fast", "haproxy")
"""The proxies every scenario compares (haproxy: where it is installed)."""
PATHS = ("direct", *PROXIES)
SCENARIOS = ("memory", "realtime", "throughput", "tools", "replay")
"""What a full run measures, in order (`--only` picks some)."""
TRIAL_ATTEMPTS = 3   # windows a trial gets to count an event before the benchmark gives up
# throughput also measures the raw proxy given the relay's reads and writes (--coalesce), so that
# the relay's own cost shows apart from what those save, and a bare picows pass-through (the floor
# of relay_fast's library)
THROUGHPUT_PATHS = ("direct", "raw", "raw_batched", "raw_picows", "relay", "relay_fast", "haproxy")
# frames an idle session waits for: through the relay, also the session.updated that answers its
# tool declaration
IDLE_FRAMES = {"raw": 1, "relay": 2, "relay_fast": 2, "haproxy": 1}
RELAY_TRANSPORTS = {"relay": "websockets", "relay_fast": "picows"}
HAPROXY_CONFIG = """global
    log stderr format raw local0 err
defaults
    mode http
    timeout connect 3s
    timeout client 30s
    timeout server 30s
    timeout tunnel 1h
frontend bench
    bind 127.0.0.1:{port}
    default_backend upstream
backend upstream
    server upstream {upstream}
"""
"""HAProxy tunnelling every session to the upstream: deploy/haproxy.cfg's mode and timeouts, one
server and no health checks (the bench upstream has no /healthz)."""
LATENCY_BOUND_MS = 10.0
REFINED_FIRST = ("relay_fast", "relay", "haproxy", "raw")   # the realtime search's halving steps, in order
TRIAL_TIMEOUT_S = 600.0


@dataclass
class Plan:
    """How much of each scenario to run."""

    throughput_sessions: tuple[int, ...]
    throughput_warmup: float
    throughput_seconds: float
    realtime_ladder: tuple[int, ...]
    realtime_warmup: float
    realtime_seconds: float
    realtime_budget_s: float          # the search stops climbing once it has run this long
    tool_calls: int
    idle_sessions: int
    replay_turns: int
    overhead_frames: int
    rounds: int                       # trials per path and session count; figures are their medians
    inspector_throughput_sessions: tuple[int, ...] = (1, 10)
    inspector_realtime_sessions: int = 50


FULL = Plan(throughput_sessions=(1, 10, 100), throughput_warmup=1.0, throughput_seconds=3.0,
            realtime_ladder=(10, 25, 50, 100, 150, 200, 250, 300, 400, 600, 800), realtime_warmup=1.5,
            realtime_seconds=4.0, realtime_budget_s=900.0, tool_calls=1000, idle_sessions=1000, replay_turns=200,
            overhead_frames=200_000, rounds=3)
# The smoke run (tests/test_bench_smoke.py): every scenario once, for its figures' shape, not their
# values. One throughput step (10 sessions, the step a target reads) runs the code every step runs.
QUICK = Plan(throughput_sessions=(10,), throughput_warmup=0.3, throughput_seconds=0.7,
             realtime_ladder=(10,), realtime_warmup=0.5, realtime_seconds=1.0, realtime_budget_s=20.0,
             tool_calls=60, idle_sessions=100, replay_turns=20, overhead_frames=6_000, rounds=1,
             inspector_throughput_sessions=(1,), inspector_realtime_sessions=10)


# ---- processes ----------------------------------------------------------------------------

@dataclass
class Service:
    """A long-running process of the benchmark (the upstream or a proxy) and where to reach it."""

    name: str
    process: subprocess.Popen[str]
    url: str
    log_tail: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=40))
    idle_rss_mb: float = 0.0   # with no session, after one came and went (see fresh_proxies())

    def cpu_times(self) -> tuple[float, float]:
        """CPU time so far in user space and in the kernel (for the process), from /proc/<pid>/stat."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / ticks, int(fields[12]) / ticks

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for {self.name}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _die_with_parent() -> None:
    """In a child, before exec: the kernel sends it SIGTERM when the benchmark dies, so an
    interrupted run (a CI timeout) leaves no servers behind (Linux prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)


def _drain(stream: Any, tail: collections.deque[str]) -> None:
    """Keep reading a child's log so it never blocks on a full pipe; keep the last lines."""
    for line in stream:
        tail.append(line.rstrip())


def start_service(name: str, command: list[str], find_url: Callable[[str], str | None], *, from_stderr: bool) -> Service:
    """Start a process and read its lines until `find_url` finds the URL it listens on."""
    process = subprocess.Popen(command, cwd=ROOT, text=True, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
                               stdout=subprocess.DEVNULL if from_stderr else subprocess.PIPE,
                               stderr=subprocess.PIPE if from_stderr else subprocess.STDOUT)
    stream = process.stderr if from_stderr else process.stdout
    assert stream is not None
    tail: collections.deque[str] = collections.deque(maxlen=40)
    for line in stream:
        tail.append(line.rstrip())
        url = find_url(line)
        if url is not None:
            threading.Thread(target=_drain, args=(stream, tail), daemon=True).start()
            return Service(name, process, url, tail)
    process.wait()
    raise RuntimeError(f"{name} exited with status {process.returncode} before listening:\n" + "\n".join(tail))


def _plain_url(line: str) -> str | None:
    return line.strip() if line.startswith("ws://") else None


def _relay_url(line: str) -> str | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record.get("url") if isinstance(record, dict) and record.get("msg", "").startswith("listening on") else None


def start_upstream(services: dict[str, Service], *, timed: bool = True) -> None:
    """The upstream; with `timed`, beside it the realtime scenario's on picows (`upstream_timed`:
    scripts/bench_timed.py says why)."""
    services["upstream"] = start_service("upstream", [PYTHON, str(SCRIPTS / "bench_upstream.py")], _plain_url,
                                         from_stderr=False)
    if timed:
        services["upstream_timed"] = start_service(
            "upstream (picows, timed audio)", [PYTHON, str(SCRIPTS / "bench_upstream.py"), "--transport", "picows"],
            _plain_url, from_stderr=False)


def upstream_for(services: dict[str, Service], mode: str) -> Service:
    """The upstream a trial of `mode` runs against: the timed one for realtime, where it runs."""
    return services["upstream_timed"] if mode == "realtime" and "upstream_timed" in services else services["upstream"]


def start_haproxy(upstream_url: str) -> Service | None:
    """HAProxy in front of the upstream (HAPROXY_CONFIG), or None where it is not installed."""
    program = find_haproxy()
    if program is None:
        return None
    upstream = urlsplit(upstream_url)
    with socket.socket() as probe:   # a port free now, for HAProxy's frontend
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = Path(tempfile.mkdtemp(prefix="relay-bench-")) / "haproxy.cfg"
    config.write_text(HAPROXY_CONFIG.format(port=port, upstream=upstream.netloc))
    process = subprocess.Popen([program, "-db", "-f", str(config)], cwd=ROOT, text=True, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
    service = Service("haproxy", process, f"ws://127.0.0.1:{port}{upstream.path}")
    threading.Thread(target=_drain, args=(process.stderr, service.log_tail), daemon=True).start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return service
        except OSError:
            time.sleep(0.05)
    service.stop()
    raise RuntimeError("haproxy did not listen:\n" + "\n".join(service.log_tail))


def fresh_proxies(services: dict[str, Service], mode: str = "throughput") -> None:
    """(Re)start the proxies, so a scenario's RSS figures do not carry the heap another scenario
    grew (Python seldom gives memory back), and record each one's RSS with no session after one
    session has come and gone (lazy imports and first-use allocations are then not counted).
    `services` is filled as they start, so a failure leaves the started ones there to be stopped.
    The proxies forward to the upstream of the trials of `mode` (`upstream_for`)."""
    for path in ("raw", "raw_batched", "raw_picows", "relay", "relay_fast", "haproxy"):
        if path in services:
            services.pop(path).stop()
    upstream = upstream_for(services, mode).url
    raw_command = [PYTHON, str(SCRIPTS / "bench_rawproxy.py"), "--upstream", upstream.removesuffix("/v1/realtime")]
    services["raw"] = start_service("raw proxy", raw_command, _plain_url, from_stderr=False)
    services["raw_picows"] = start_service("raw proxy (picows)", [PYTHON, str(SCRIPTS / "bench_rawproxy_picows.py"),
                                                                  *raw_command[2:]], _plain_url, from_stderr=False)
    services["raw_batched"] = start_service("raw proxy (coalescing)", [*raw_command, "--coalesce"], _plain_url,
                                            from_stderr=False)
    for path, transport in RELAY_TRANSPORTS.items():
        services[path] = start_service(path, [PYTHON, "-m", "relay", "serve", "--upstream", upstream,
                                              "--dialect", "openai", "--tools", str(SCRIPTS / "bench_tools.py"),
                                              "--port", "0", "--drain-seconds", "0", "--log-format", "json",
                                              "--transport", transport], _relay_url, from_stderr=True)
    haproxy = start_haproxy(upstream)
    if haproxy is not None:
        services["haproxy"] = haproxy
    for path, frames in IDLE_FRAMES.items():
        if path in services:
            run_clients("idle", services[path].url, services, sessions=1, expect_frames=frames, upstream_of=mode)
            services[path].idle_rss_mb = services[path].rss_bytes() / 2**20


def proxies(services: dict[str, Service]) -> tuple[str, ...]:
    """The proxies of this run (haproxy only where it runs)."""
    return tuple(path for path in PROXIES if path in services)


def start_relay(services: dict[str, Service], name: str, *extra: str) -> None:
    """(Re)start a relay as `services[name]` (with `extra` options), and take its idle RSS after
    one session has come and gone, as fresh_proxies does."""
    if name in services:
        services.pop(name).stop()
    upstream = services["upstream"].url
    services[name] = start_service(name, [PYTHON, "-m", "relay", "serve", "--upstream", upstream, "--dialect", "openai",
                                          "--tools", str(SCRIPTS / "bench_tools.py"), "--port", "0",
                                          "--drain-seconds", "0", "--log-format", "json", *extra],
                                   _relay_url, from_stderr=True)
    run_clients("idle", services[name].url, services, sessions=1, expect_frames=IDLE_FRAMES["relay"])
    services[name].idle_rss_mb = services[name].rss_bytes() / 2**20


def run_clients(mode: str, url: str, services: dict[str, Service], *, on_event: Callable[[str], None] | None = None,
                upstream_of: str | None = None, **options: Any) -> dict[str, Any]:
    """Run one trial's client process; `on_event` sees its progress lines (`measuring`, `ready`...).
    Its upstream (whose /control it asks) is `mode`'s, or `upstream_of`'s when given."""
    control = upstream_for(services, upstream_of or mode).url.replace("/v1/realtime", "/control")
    command = [PYTHON, str(SCRIPTS / "bench_clients.py"), mode, "--url", url, "--control", control]
    for name, value in options.items():
        command += [f"--{name.replace('_', '-')}", str(value)]
    process = subprocess.Popen(command, cwd=ROOT, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               preexec_fn=_die_with_parent)
    assert process.stdout is not None and process.stdin is not None
    timer = threading.Timer(TRIAL_TIMEOUT_S, process.kill)
    timer.start()
    try:
        for line in process.stdout:
            message = json.loads(line)
            if message["event"] == "result":
                del message["event"]
                process.wait()
                return message
            if on_event is not None:
                on_event(message["event"])
            if message["event"] == "ready":
                process.stdin.write("close\n")
                process.stdin.flush()
    finally:
        timer.cancel()
    process.wait()
    tails = "\n".join(f"--- {s.name}:\n" + "\n".join(s.log_tail) for s in services.values())
    raise RuntimeError(f"clients ({mode} via {url}) exited with status {process.returncode}\n{tails}")


def path_url(services: dict[str, Service], path: str, mode: str) -> str:
    return upstream_for(services, mode).url if path == "direct" else services[path].url


class Sampler:
    """CPU time and RSS of a proxy (on the direct path, of the upstream) across the window a client
    process reports as measured."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.cpu_start = (0.0, 0.0)
        self.wall_start = 0.0
        self.figures: dict[str, float] = {}

    def __call__(self, event: str) -> None:
        if event == "measuring":
            self.cpu_start, self.wall_start = self.service.cpu_times(), time.perf_counter()
        elif event == "measured":
            wall = time.perf_counter() - self.wall_start
            user, system = (now - then for now, then in zip(self.service.cpu_times(), self.cpu_start))
            # the split says where a proxy's time goes: its own code (user) or the socket calls
            # (kernel), where a C proxy spends most of its time
            self.figures = {"cpu_percent": 100 * (user + system) / wall, "user_percent": 100 * user / wall,
                            "system_percent": 100 * system / wall, "rss_mb": self.service.rss_bytes() / 2**20}


# ---- scenarios ----------------------------------------------------------------------------

def memory(services: dict[str, Service], plan: Plan) -> dict[str, Any]:
    """RSS of idle sessions: a fresh proxy's RSS with N idle sessions minus its RSS with none, / N."""
    figures: dict[str, Any] = {"sessions": plan.idle_sessions}
    for path in proxies(services):
        service = services[path]
        loaded: list[int] = []
        run_clients("idle", service.url, services, sessions=plan.idle_sessions, expect_frames=IDLE_FRAMES[path],
                    on_event=lambda event: loaded.append(service.rss_bytes()) if event == "ready" else None)
        figures[path] = {"baseline_mb": service.idle_rss_mb, "loaded_mb": loaded[0] / 2**20,
                         "kb_per_session": (loaded[0] / 2**20 - service.idle_rss_mb) * 1024 / plan.idle_sessions}
    figures["relay_vs_raw"] = figures["relay"]["kb_per_session"] / figures["raw"]["kb_per_session"]
    figures["relay_fast_vs_relay"] = figures["relay_fast"]["kb_per_session"] / figures["relay"]["kb_per_session"]
    return figures


def trial_round(mode: str, services: dict[str, Service], paths: tuple[str, ...] = PATHS, *, reverse: bool = False,
                **options: Any) -> dict[str, dict[str, Any]]:
    """One trial per path, back to back (in reverse order when asked: rounds alternate, so that no
    path always runs first or last), each with its proxy's CPU and RSS over the window."""
    results = {}
    for path in reversed(paths) if reverse else paths:
        if path != "direct" and path not in services:
            continue   # haproxy, where it is not installed
        # the direct path has no proxy: its upstream's CPU is sampled instead (with the clients'
        # own, what the load generator takes of the machine)
        direct = path == "direct"
        sampler = Sampler(upstream_for(services, mode) if direct else services[path])
        result = run_clients(mode, path_url(services, path, mode), services, on_event=sampler, **options)
        del result["sessions"]
        prefix = "upstream_" if direct else ""
        results[path] = {**result, **{prefix + name: value for name, value in sampler.figures.items()}}
    return results


def median_figures(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each number over rounds (nested dicts too), to damp the noise of a shared machine."""
    merged: dict[str, Any] = {}
    for key, first in rounds[0].items():
        values = [r[key] for r in rounds if key in r]
        if isinstance(first, dict):
            merged[key] = median_figures(values)
        elif isinstance(first, (int, float)):
            merged[key] = statistics.median(values)
    return merged


def counted_round(services: dict[str, Service], plan: Plan, sessions: int, reverse: bool) -> dict[str, Any]:
    """One throughput round of every path, run again when a path's window counted no event (a
    short window on a machine busy with other work can): such a round says nothing, and the
    ratios would divide by it. Past `TRIAL_ATTEMPTS`, one line names the path."""
    for _ in range(TRIAL_ATTEMPTS):
        figures = trial_round("throughput", services, THROUGHPUT_PATHS, reverse=reverse, sessions=sessions,
                              warmup=plan.throughput_warmup, seconds=plan.throughput_seconds)
        silent = [path for path in THROUGHPUT_PATHS if path in figures and not figures[path]["events_per_s"] > 0]
        if not silent:
            return figures
        report(f"throughput {sessions} sessions: {', '.join(silent)} counted no event in the window; again")
    raise SystemExit(f"throughput {sessions} sessions: {', '.join(silent)} counted no event in "
                     f"{TRIAL_ATTEMPTS} windows of {plan.throughput_seconds} s (is the machine saturated?)")


def throughput(services: dict[str, Service], plan: Plan) -> list[dict[str, Any]]:
    steps = []
    for sessions in plan.throughput_sessions:
        rounds = []
        for number in range(plan.rounds):
            figures = counted_round(services, plan, sessions, reverse=number % 2 == 1)
            for path in figures:
                if path != "direct":
                    # CPU time per forwarded event: steadier than events/s when other work shares the machine
                    events = figures[path]["events_per_s"]
                    figures[path]["cpu_us_per_event"] = (figures[path]["cpu_percent"] * 1e4 / events if events
                                                         else float("inf"))
                    for part in ("user", "system"):   # the same, split: where the time goes
                        figures[path][f"{part}_us_per_event"] = (figures[path][f"{part}_percent"] * 1e4 / events
                                                                 if events else float("inf"))
                if figures[path].get("sessions_cut_off"):
                    report(f"throughput {sessions:>3} sessions, round {number + 1}: {path} closed "
                           f"{figures[path]['sessions_cut_off']} of them before the measurement ended (a client "
                           "that falls behind by the queue's limit is cut off); the round counts what came before")
            figures["relay_vs_raw"] = figures["relay"]["events_per_s"] / figures["raw"]["events_per_s"]
            figures["relay_vs_raw_batched"] = figures["relay"]["events_per_s"] / figures["raw_batched"]["events_per_s"]
            figures["relay_fast_vs_relay_cpu"] = (figures["relay_fast"]["cpu_us_per_event"]
                                                  / figures["relay"]["cpu_us_per_event"])
            # the relay's own work over the library it stands on
            figures["relay_fast_vs_raw_picows_cpu"] = (figures["relay_fast"]["cpu_us_per_event"]
                                                       / figures["raw_picows"]["cpu_us_per_event"])
            if "haproxy" in figures:   # the issue's targets: ratios within the round
                figures["relay_fast_vs_haproxy_cpu"] = (figures["relay_fast"]["cpu_us_per_event"]
                                                        / figures["haproxy"]["cpu_us_per_event"])
                figures["relay_fast_vs_haproxy_events"] = (figures["relay_fast"]["events_per_s"]
                                                           / figures["haproxy"]["events_per_s"])
                figures["raw_picows_vs_haproxy_cpu"] = (figures["raw_picows"]["cpu_us_per_event"]
                                                        / figures["haproxy"]["cpu_us_per_event"])
            rounds.append(figures)
        step = {"sessions": sessions, **median_figures(rounds), "rounds": rounds}
        shown = [path for path in THROUGHPUT_PATHS if path in step]
        report(f"throughput {sessions:>3} sessions, events/s: " + "  ".join(
            f"{path} {step[path]['events_per_s']:,.0f}" for path in shown))
        report(f"throughput {sessions:>3} sessions, CPU per event: " + "  ".join(
            f"{path} {step[path]['cpu_us_per_event']:.1f} us" for path in shown if path != "direct")
            + f"; relay/raw {step['relay_vs_raw']:.2f}, relay_fast/relay CPU {step['relay_fast_vs_relay_cpu']:.2f}"
            + f", relay_fast/raw_picows CPU {step['relay_fast_vs_raw_picows_cpu']:.2f}"
            + (f", relay_fast/haproxy CPU {step['relay_fast_vs_haproxy_cpu']:.2f} events "
               f"{step['relay_fast_vs_haproxy_events']:.2f}, raw_picows/haproxy CPU "
               f"{step['raw_picows_vs_haproxy_cpu']:.2f}" if "relay_fast_vs_haproxy_cpu" in step else "")
            + " (medians of the rounds' ratios)")
        report(f"throughput {sessions:>3} sessions, CPU per event in user space + in the kernel: " + "  ".join(
            f"{path} {step[path]['user_us_per_event']:.1f} + {step[path]['system_us_per_event']:.1f} us"
            for path in shown if path != "direct"))
        steps.append(step)
    return steps


def realtime_step(services: dict[str, Service], plan: Plan, sessions: int, climbing: tuple[str, ...]) -> dict[str, Any]:
    """`plan.rounds` rounds of the direct path and the proxies `climbing` at `sessions`; medians,
    and whether each proxy kept within the bound."""
    rounds = []
    for number in range(plan.rounds):
        figures = trial_round("realtime", services, ("direct", *climbing), reverse=number % 2 == 1,
                              sessions=sessions, warmup=plan.realtime_warmup, seconds=plan.realtime_seconds)
        direct = figures["direct"]
        if "upstream_cpu_percent" in direct and "clients_cpu_percent" in direct:
            direct["generator_cores"] = (direct["upstream_cpu_percent"] + direct["clients_cpu_percent"]) / 100
        for path in climbing:   # against the direct path of the same round
            figures[path]["added_p50_ms"] = figures[path]["latency"]["p50_ms"] - figures["direct"]["latency"]["p50_ms"]
            figures[path]["added_p99_ms"] = figures[path]["latency"]["p99_ms"] - figures["direct"]["latency"]["p99_ms"]
        rounds.append(figures)
    step = {"sessions": sessions, **median_figures(rounds), "rounds": rounds}
    for path in climbing:
        figures = step[path]
        # the ladder climbs, so the heap the previous step grew is reused rather than counted again
        figures["rss_kb_per_session"] = (figures["rss_mb"] - services[path].idle_rss_mb) * 1024 / sessions
        # a path that cannot deliver the frames does not hold the sessions, whatever its latency
        figures["within_bound"] = figures["added_p99_ms"] < LATENCY_BOUND_MS and figures["delivered_ratio"] >= 0.95
        # CPU time per forwarded frame at this pace (50 frames/s each way per session): how many
        # sessions a core holds, whatever else shares the machine
        figures["cpu_us_per_event"] = figures["cpu_percent"] * 1e4 / (sessions * 100 * figures["delivered_ratio"])
    return step


def machine_ceiling(steps: list[dict[str, Any]], paths: tuple[str, ...], cpus: int) -> dict[str, Any] | None:
    """The most sessions the machine's cores could carry through each proxy at realtime pace, were
    nothing lost to contention: the cores over what a session costs the load generator (its two
    processes' CPU on the direct path, at the largest step) plus what it costs the proxy (its CPU
    per frame at the largest step it held, 100 frames a second). A bound, not a measure: the
    cores the generator takes are not the proxy's, so a count above a proxy's ceiling is out of
    its reach on this machine, whatever its code. None when the generator was not measured."""
    measured = [step for step in steps if "generator_cores" in step.get("direct", {})]
    if not measured:
        return None
    largest = max(measured, key=lambda step: step["sessions"])
    generator = largest["direct"]["generator_cores"] / largest["sessions"]   # cores a session
    ceiling: dict[str, Any] = {"cpus": cpus, "generator_measured_at": largest["sessions"],
                               "generator_cores_per_100_sessions": 100 * generator, "sessions": {}}
    for path in paths:
        held = [step for step in steps if path in step and step[path]["within_bound"]]
        if held:
            at = max(held, key=lambda step: step["sessions"])
            proxy = at[path]["cpu_us_per_event"] * 100 / 1e6   # cores a session: 100 frames/s
            ceiling["sessions"][path] = cpus / (generator + proxy)
    return ceiling


def realtime(services: dict[str, Service], plan: Plan) -> dict[str, Any]:
    """Climb the ladder of session counts, each proxy until a step where it is over the bound (or
    the budget ends; 100 sessions are always measured, a target is set there), then halve the gap
    between each proxy's highest pass and the next step twice, so that the proxies are compared
    finer than the ladder."""
    steps: list[dict[str, Any]] = []
    started = time.monotonic()
    paths = proxies(services)
    climbing = paths
    for sessions in plan.realtime_ladder:
        over_budget = time.monotonic() - started > plan.realtime_budget_s
        if (not climbing or over_budget) and sessions > 100:
            break
        step = realtime_step(services, plan, sessions, climbing if sessions > 100 else paths)
        if "raw" in step and "relay" in step:
            step["relay_minus_raw_added_p99_ms"] = step["relay"]["added_p99_ms"] - step["raw"]["added_p99_ms"]
        report(f"realtime {sessions:>4} sessions, added p50/p99: " + ", ".join(
            f"{path} {step[path]['added_p50_ms']:.2f}/{step[path]['added_p99_ms']:.2f} ms" for path in paths if path in step)
            + f" (direct p99 {step['direct']['latency']['p99_ms']:.2f} ms); CPU " + ", ".join(
            f"{path} {step[path]['cpu_percent']:.0f}% ({step[path]['cpu_us_per_event']:.1f} us/event)"
            for path in paths if path in step))
        steps.append(step)
        # those within the bound at this step climb on (up to 100 every proxy runs: a burst of
        # other work on the machine failing one of the small steps does not stop a proxy's climb)
        climbing = tuple(path for path in paths if path in step and step[path]["within_bound"])
    # held: the most sessions within the bound on the ladder (a passing-by burst of other work on
    # the machine can fail one step below it); first failure: the next step above that
    held = {path: max([s["sessions"] for s in steps if path in s and s[path]["within_bound"]], default=0)
            for path in paths}
    first_failure = {path: min(s["sessions"] for s in steps if path in s and s["sessions"] > held[path])
                     for path in paths if any(path in s and s["sessions"] > held[path] for s in steps)}
    refinements: list[dict[str, Any]] = []
    # the target's two first (relay_fast, relay): the budget may end before the others' turn
    for path in sorted(first_failure, key=REFINED_FIRST.index):
        failing = first_failure[path]
        for _ in range(2 if time.monotonic() - started <= plan.realtime_budget_s else 0):
            middle = round((held[path] + failing) / 10) * 5
            if not held[path] < middle < failing:
                break
            step = realtime_step(services, plan, middle, (path,))
            if step[path]["within_bound"]:
                held[path] = middle
            else:
                failing = middle
            report(f"realtime {middle:>4} sessions, {path} alone: added p99 {step[path]['added_p99_ms']:.2f} ms "
                   f"({'within' if step[path]['within_bound'] else 'over'} the bound)")
            refinements.append({"proxy": path, **step})
    at_100 = next((step for step in steps if step["sessions"] == 100), {})
    ceiling = machine_ceiling(steps, paths, os.cpu_count() or 1)
    if ceiling is not None:
        report(f"realtime ceiling: the load generator takes {ceiling['generator_cores_per_100_sessions']:.2f} "
               f"cores per 100 sessions (direct path, {ceiling['generator_measured_at']} sessions); with each "
               f"proxy's CPU per frame, {ceiling['cpus']} cores carry at most " + ", ".join(
                   f"{path} {count:.0f}" + (f" ({count / held['relay']:.2f}x relay's held)" if held.get("relay") else "")
                   for path, count in ceiling["sessions"].items()))
    return {"bound_ms": LATENCY_BOUND_MS, "upstream": upstream_for(services, "realtime").name,
            "steps": steps, "refinements": refinements, "ceiling": ceiling,
            # at 100 sessions, where every proxy runs: the CPU a forwarded frame costs, as ratios
            "cpu_per_event_at_100": {f"{path}_vs_relay": at_100[path]["cpu_us_per_event"] / at_100["relay"]["cpu_us_per_event"]
                                     for path in paths if path in at_100 and "relay" in at_100},
            "max_sessions_within_bound": held,
            "relay_vs_raw_sessions": held["relay"] / held["raw"] if held["raw"] else None,
            "relay_fast_vs_relay_sessions": held["relay_fast"] / held["relay"] if held["relay"] else None,
            "search_stopped_by_budget": time.monotonic() - started > plan.realtime_budget_s}


def tool_turnaround(services: dict[str, Service], plan: Plan) -> dict[str, Any]:
    """Each kind of tool on one relay, in the same run: @tool handlers, and the MCP tool `instant`
    over stdio (`stdio_instant`) and streamable HTTP (`http_instant`)."""
    mcp_server = SCRIPTS / "bench_mcp_server.py"
    services["mcp_http"] = start_service("MCP server (HTTP)", [PYTHON, str(mcp_server), "http"], _http_url,
                                         from_stderr=False)
    start_relay(services, "relay", "--mcp", f"stdio={PYTHON} {mcp_server}", "--mcp",
                f"http={services['mcp_http'].url}", "--mcp-prefix")
    figures = {}
    for kind, tool in (("async_handler", "instant"), ("sync_handler", "instant_sync"),
                       ("mcp_stdio", "stdio_instant"), ("mcp_http", "http_instant")):
        figures[kind] = run_clients("tool", services["relay"].url, services, calls=plan.tool_calls, tool=tool)
        report(f"tool turnaround ({kind.replace('_', ' ')}, {plan.tool_calls} calls): "
               f"p50 {figures[kind]['p50_ms']:.3f} ms, p99 {figures[kind]['p99_ms']:.3f} ms")
    return figures


def _http_url(line: str) -> str | None:
    return line.strip() if line.startswith("http://") else None


def replay_speed(plan: Plan) -> dict[str, Any]:
    figures = bench_replay.measure(plan.replay_turns, 100)
    report(f"replay: {figures['replay_events_per_s']:,.0f} events/s ({figures['frames']:,} frames; "
           f"reading alone {figures['read_events_per_s']:,.0f} events/s)")
    return figures


def relay_overhead(plan: Plan) -> dict[str, Any]:
    """What the relay adds per frame without sockets (scripts/bench_session.py), when frames come
    in bursts (floods) and one at a time (realtime audio)."""
    figures: dict[str, Any] = {f"burst_{burst}": bench_session.measure(plan.overhead_frames, burst)
                               for burst in (16, 1)}
    report("relay per frame without sockets: adds " + ", ".join(
        f"{f['relay_added_us_per_frame']:.2f} us in bursts of {f['burst']}" for f in figures.values())
        + " to inline forwarding")
    # a GPT-Live session's audio frames beside a Realtime session's, through the same transport
    # (a smoke run, one round of few frames: that the figures come)
    full = plan.rounds > 1
    dialects = figures["audio_dialects"] = {
        f"burst_{burst}": bench_session.measure_dialects(plan.overhead_frames // (4 if full else 20), burst,
                                                         repeats=3 * bench_session.REPEATS if full else 1)
        for burst in (16, 1)}
    report("GPT-Live / Realtime CPU per audio frame without sockets: " + ", ".join(
        f"{f[f'live_vs_openai_{direction}']:.2f}x ({direction}, bursts of {f['burst']})"
        for f in dialects.values() for direction in ("output", "input")))
    return figures


class Watcher:
    """A page of the live inspector in a process of its own (bench_clients.py watch), watching the
    first session that starts after it connected."""

    def __init__(self, feed_url: str) -> None:
        self.process = subprocess.Popen([PYTHON, str(SCRIPTS / "bench_clients.py"), "watch", "--url", feed_url],
                                        cwd=ROOT, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        preexec_fn=_die_with_parent)
        self.watching = threading.Event()
        self.result: dict[str, Any] = {}
        connected = threading.Event()
        threading.Thread(target=self._read, args=(connected,), daemon=True).start()
        if not connected.wait(30):
            self.process.kill()
            raise RuntimeError("the inspector's watcher did not connect")

    def _read(self, connected: threading.Event) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            message = json.loads(line)
            if message["event"] == "connected":
                connected.set()
            elif message["event"] == "watching":
                self.watching.set()
            elif message["event"] == "result":
                self.result = message

    def finish(self) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write("close\n")
        self.process.stdin.close()
        self.process.wait(30)
        return self.result


def inspector_cost(services: dict[str, Service], plan: Plan) -> dict[str, Any]:
    """The relay without the inspector, with it and nobody watching, and with one page watching
    one session: throughput (events/s, CPU per event) and realtime latency, ratios per round."""
    # on the websockets transport: on picows a flooded session outruns the page's view (it falls
    # behind and stops), a figure of its own
    start_relay(services, "relay", "--transport", "websockets")
    start_relay(services, "relay_inspector", "--inspector", "--transport", "websockets")
    feed_url = services["relay_inspector"].url.replace("/v1/realtime", "/inspector/feed")
    variants = ("off", "on", "watched")
    figures: dict[str, Any] = {"throughput": [], "realtime": {}}

    def trial(mode: str, variant: str, **options: Any) -> dict[str, Any]:
        service = services["relay" if variant == "off" else "relay_inspector"]
        sampler = Sampler(service)
        late: list[bool] = []
        watcher = Watcher(feed_url) if variant == "watched" else None

        def on_event(event: str) -> None:
            if event == "measuring" and watcher is not None:
                late.append(not watcher.watching.wait(10))   # the page watches before the window opens
            sampler(event)

        try:
            result = run_clients(mode, service.url, services, on_event=on_event, **options)
        finally:
            seen = watcher.finish() if watcher is not None else None
        del result["sessions"]
        result.update(sampler.figures)
        if seen is not None:
            result["watcher"] = {"late": any(late), "deltas": seen.get("deltas", 0), "bytes": seen.get("bytes", 0),
                                 "errors": seen.get("errors", [])}
        return result

    def counted_trial(variant: str, sessions: int) -> dict[str, Any]:
        # A short window (the quick plan's 0.7 s) on a machine busy with other work can count no
        # event at all; such a trial says nothing, and the ratios would divide by it: run it again.
        # So does a watched trial whose page could not follow the flood (the hub stops a view that
        # falls behind, by design): the rest of its window ran with nobody watching.
        for _ in range(TRIAL_ATTEMPTS):
            result = trial("throughput", variant, sessions=sessions, warmup=plan.throughput_warmup,
                           seconds=plan.throughput_seconds)
            if result["events_per_s"] <= 0:
                report(f"inspector, throughput {sessions} sessions ({variant}): the window counted no event; again")
            elif "watcher" in result and not followed(result["watcher"]):
                report(f"inspector, throughput {sessions} sessions ({variant}): the page did not follow "
                       f"({json.dumps(result['watcher'])}); again")
            else:
                return result
        if result["events_per_s"] > 0:
            return result   # the page never followed: watcher_followed_every_trial says so
        raise SystemExit(f"inspector, throughput {sessions} sessions ({variant}): no event counted in "
                         f"{TRIAL_ATTEMPTS} windows of {plan.throughput_seconds} s (is the machine saturated?)")

    for sessions in plan.inspector_throughput_sessions:
        rounds = []
        for _ in range(plan.rounds):
            results = {variant: counted_trial(variant, sessions) for variant in variants}
            for variant in variants:
                results[variant]["cpu_us_per_event"] = (results[variant]["cpu_percent"] * 1e4
                                                        / results[variant]["events_per_s"])
            for variant in ("on", "watched"):
                results[f"{variant}_vs_off_events_per_s"] = results[variant]["events_per_s"] / results["off"]["events_per_s"]
                results[f"{variant}_vs_off_cpu_per_event"] = (results[variant]["cpu_us_per_event"]
                                                             / results["off"]["cpu_us_per_event"])
            rounds.append(results)
        step = {"sessions": sessions, **median_figures(rounds), "rounds": rounds}
        report(f"inspector, throughput {sessions:>3} sessions: off {step['off']['events_per_s']:,.0f} events/s; "
               f"on, nobody watching x{step['on_vs_off_events_per_s']:.2f} (CPU per event "
               f"x{step['on_vs_off_cpu_per_event']:.2f}); one watcher x{step['watched_vs_off_events_per_s']:.2f} "
               f"(CPU per event x{step['watched_vs_off_cpu_per_event']:.2f})")
        figures["throughput"].append(step)

    sessions = plan.inspector_realtime_sessions
    rounds = []
    for _ in range(plan.rounds):
        direct = run_clients("realtime", services["upstream"].url, services, sessions=sessions,
                             warmup=plan.realtime_warmup, seconds=plan.realtime_seconds)
        results: dict[str, Any] = {"direct": direct}
        for variant in variants:
            result = trial("realtime", variant, sessions=sessions, warmup=plan.realtime_warmup,
                           seconds=plan.realtime_seconds)
            result["added_p50_ms"] = result["latency"]["p50_ms"] - direct["latency"]["p50_ms"]
            result["added_p99_ms"] = result["latency"]["p99_ms"] - direct["latency"]["p99_ms"]
            results[variant] = result
        for variant in ("on", "watched"):
            results[f"{variant}_minus_off_added_p99_ms"] = results[variant]["added_p99_ms"] - results["off"]["added_p99_ms"]
            results[f"{variant}_vs_off_cpu"] = results[variant]["cpu_percent"] / results["off"]["cpu_percent"]
        rounds.append(results)
    step = {"sessions": sessions, **median_figures(rounds), "rounds": rounds}
    report(f"inspector, realtime {sessions} sessions: added p99 off {step['off']['added_p99_ms']:.2f} ms, "
           f"on {step['on']['added_p99_ms']:.2f} ms, one watcher {step['watched']['added_p99_ms']:.2f} ms; "
           f"CPU on x{step['on_vs_off_cpu']:.2f}, one watcher x{step['watched_vs_off_cpu']:.2f}")
    figures["realtime"] = step
    figures["per_frame"] = {f"burst_{burst}": bench_session.measure_inspector(
        plan.overhead_frames // 20, burst, repeats=3 * bench_session.REPEATS if plan.rounds > 1 else 1)
        for burst in (16, 1)}
    report("inspector, relay per frame without sockets (flood): " + ", ".join(
        f"nobody watching x{f['on_vs_off']:.3f}, one watcher x{f['watched_vs_off']:.2f}"
        f"{' (its view fell behind and stopped)' if f['watched_view_stopped'] else ''} in bursts of {f['burst']}"
        for f in figures["per_frame"].values()))
    watched = [r["watched"]["watcher"] for step in figures["throughput"] for r in step["rounds"]]
    watched += [r["watched"]["watcher"] for r in figures["realtime"]["rounds"]]
    figures["watcher_followed_every_trial"] = all(followed(w) for w in watched)
    if not figures["watcher_followed_every_trial"]:
        report("inspector: in some trial the page was late, got no delta, or its view stopped: " +
               json.dumps(watched))
    return figures


def followed(watcher: dict[str, Any]) -> bool:
    """Whether the page watched a trial's session through its window: in time, with deltas, its
    view never stopped."""
    return not watcher["late"] and watcher["deltas"] > 0 and not watcher["errors"]


def throughput_ratio(figures: dict[str, Any], sessions: int, name: str) -> float | None:
    """A ratio of the throughput step at `sessions`, None when that step or ratio was not measured."""
    return next((step.get(name) for step in figures["throughput"] if step["sessions"] == sessions), None)


def targets(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The issue's targets beside this run's figures (reported, never enforced); a target whose
    figure was not measured (its scenario did not run: `--only`) is None."""
    results = {}
    for name, (figure, op, target) in target_checks(figures).items():
        value = measured(figure)
        met = None if value is None else (value >= target if op == ">=" else
                                                            value <= target if op == "<=" else value < target)
        results[name] = {"value": value, "target": f"{op} {target}", "met": met}
    return results


def measured(figure: Callable[[], float | None]) -> float | None:
    """`figure()`, or None when what it reads was not measured."""
    try:
        return figure()
    except (KeyError, StopIteration):
        return None


def target_checks(figures: dict[str, Any]) -> dict[str, tuple[Callable[[], float | None], str, float]]:
    """Each target: how to read its figure from `figures`, the comparison, the bound."""
    def at_100(name: str) -> float:
        return next(s for s in figures["realtime"]["steps"] if s["sessions"] == 100)[name]

    def fast_vs_haproxy_events() -> float | None:
        return min((ratio for ratio in (throughput_ratio(figures, sessions, "relay_fast_vs_haproxy_events")
                                        for sessions in (10, 100)) if ratio is not None), default=None)

    return {
        "throughput_relay_vs_raw_min": (lambda: min(s["relay_vs_raw"] for s in figures["throughput"]), ">=", 0.9),
        "realtime_added_p99_relay_minus_raw_ms_at_100": (lambda: at_100("relay_minus_raw_added_p99_ms"), "<=", 2.0),
        "realtime_sessions_relay_vs_raw": (lambda: figures["realtime"]["relay_vs_raw_sessions"], ">=", 0.9),
        "tool_turnaround_p99_ms_async": (lambda: figures["tool_turnaround"]["async_handler"]["p99_ms"], "<", 2.0),
        "tool_turnaround_p99_ms_sync": (lambda: figures["tool_turnaround"]["sync_handler"]["p99_ms"], "<", 2.0),
        "idle_session_kb": (lambda: figures["memory"]["relay"]["kb_per_session"], "<", 100.0),
        # issue 26: the relay on picows against HAProxy, and against itself on websockets
        "cpu_per_event_relay_fast_vs_haproxy_at_10": (
            lambda: throughput_ratio(figures, 10, "relay_fast_vs_haproxy_cpu"), "<=", 1.5),
        "cpu_per_event_relay_fast_vs_haproxy_at_100": (
            lambda: throughput_ratio(figures, 100, "relay_fast_vs_haproxy_cpu"), "<=", 1.5),
        "throughput_relay_fast_vs_haproxy_min": (fast_vs_haproxy_events, ">=", 0.85),
        "realtime_sessions_relay_fast_vs_relay": (lambda: figures["realtime"]["relay_fast_vs_relay_sessions"], ">=", 3.0),
        "idle_session_kb_relay_fast_vs_relay": (lambda: figures["memory"]["relay_fast_vs_relay"], "<=", 1.0),
    }


def report(line: str) -> None:
    print(line, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run in about 80 s (the test suite runs it)")
    parser.add_argument("--json", metavar="FILE", help="write every figure to FILE")
    parser.add_argument("--inspector", action="store_true",
                        help="only what the live inspector costs: relay serve without it, with it, and watched")
    parser.add_argument("--only", action="append", choices=SCENARIOS, metavar="SCENARIO",
                        help="run this scenario alone (repeatable): " + ", ".join(SCENARIOS)
                             + "; the targets of the others are then not measured")
    parser.add_argument("--rounds", type=int, metavar="N",
                        help="trials per path and session count, figures their medians (default 3; --quick 1)")
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    if args.rounds is not None:
        plan = dataclasses.replace(plan, rounds=max(1, args.rounds))
    started = time.monotonic()
    figures: dict[str, Any] = {"quick": args.quick, "machine": {
        "cpus": os.cpu_count(), "python": platform.python_version(), "websockets": websockets.__version__,
        "rounds": plan.rounds,
        "load_average_before": os.getloadavg()}}
    report(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    services: dict[str, Service] = {}
    if args.inspector:
        try:
            start_upstream(services, timed=False)   # the inspector's relays are started on the first
            figures["inspector"] = inspector_cost(services, plan)
        finally:
            for service in reversed(services.values()):
                service.stop()
        figures["machine"]["load_average_after"] = os.getloadavg()
        figures["seconds"] = time.monotonic() - started
        report(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {figures['seconds']:.0f} s")
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2))
        return 0
    only = set(args.only or SCENARIOS)
    try:
        start_upstream(services, timed="realtime" in only)
        if "memory" in only:
            fresh_proxies(services)
            figures["memory"] = memory(services, plan)
            report(f"idle sessions ({plan.idle_sessions}), RSS per session: " + ", ".join(
                f"{path} {figures['memory'][path]['kb_per_session']:.1f} KB" for path in proxies(services)))
        if "realtime" in only:
            fresh_proxies(services, "realtime")
            figures["realtime"] = realtime(services, plan)
        if "throughput" in only:
            fresh_proxies(services)
            figures["throughput"] = throughput(services, plan)
        if "tools" in only:
            # not on the relay that has just held 100 flooded sessions: as they close it is still
            # reading what the upstream had already sent them (a few hundred ms of work, seen with
            # py-spy), and a turnaround measured then would measure that instead
            fresh_proxies(services)
            figures["tool_turnaround"] = tool_turnaround(services, plan)
    finally:
        for service in reversed(services.values()):
            service.stop()
    if "replay" in only:
        figures["replay"] = replay_speed(plan)
        figures["relay_overhead"] = relay_overhead(plan)
    figures["targets"] = targets(figures)
    figures["machine"]["load_average_after"] = os.getloadavg()
    figures["seconds"] = time.monotonic() - started
    for name, target in figures["targets"].items():
        value = target["value"]
        shown = "n/a" if value is None else f"{value:.3g}"
        verdict = {True: "met", False: "MISSED", None: "not measured"}[target["met"]]
        report(f"target {name}: {shown} (target {target['target']}): {verdict}")
    report(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {figures['seconds']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
