#!/usr/bin/env python3
"""The relay's cost per forwarded audio frame on the picows transport, without sockets: a real
SessionLoop and Engine (with the server's metrics tap and redactor) between two real picows
connections (`PicowsTransport`s, relay/transports/picows_connection.py), whose bytes come from
and go to in-memory stand-ins for sockets. The bytes are fed to picows' protocol as the event loop
feeds a socket's reads (`get_buffer` / `buffer_updated`), so picows parses, and the relay
reassembles, checks, frames and writes, every frame as it would on a socket; what the kernel and
the event loop's polling would cost is left out. Beside it, the same connections forwarding each
frame straight from picows' callback (`send` per frame, no session): picows' own floor.

Workloads:
    flood      output-audio deltas from the upstream, `--burst` frames per read (a flooded session)
    realtime   one frame per read, both ways in turn: an output delta from the upstream, then an
               input_audio_buffer.append from the client (paced audio)

For stable figures on a shared machine, count instructions: `--once` runs one pass of one variant
(no repeats, no warm-up), so two runs under `valgrind --tool=callgrind` with different `--frames`
give the instructions per frame as the difference of their totals over the difference of frames
(`--callgrind` does exactly that and prints it).

Usage: .venv/bin/python scripts/bench_session_picows.py [--workload flood|realtime] [--frames N]
           [--burst N] [--variant relay|bare] [--once] [--callgrind] [--json FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import logging
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from picows import WSAutoPingStrategy, WSFrame, WSListener, WSMsgType, WSTransport, WSUpgradeResponse, WSUpgradeResponseWithListener
from picows.picows import WSProtocol

# the relay measured: this checkout's, or another's (RELAY_TREE: scripts/bench_against.py measures an
# older commit's relay with this harness)
ROOT = Path(os.environ.get("RELAY_TREE") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))

from bench_frames import input_append, output_delta  # noqa: E402

from relay.edges.process import event_loop_factory  # noqa: E402
from relay.engine import EngineConfig, OpenAIEngine  # noqa: E402
from relay.observe.metrics import Metrics, TrafficTap  # noqa: E402
from relay.recording.redact import Redactor  # noqa: E402
from relay.recording.taps import Taps  # noqa: E402
from relay.session.loop import SessionLoop  # noqa: E402
from relay.session.policy import DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND, DEFAULT_MAX_FRAME_BYTES, EventBudget  # noqa: E402
from relay.tools import ToolRegistry  # noqa: E402
from relay.tools.loading import load_tools  # noqa: E402
from relay.transports.picows import feed  # noqa: E402
from relay.transports.picows_connection import PING_INTERVAL, PING_TIMEOUT, READ_BUFFER_BYTES, PicowsLog, PicowsTransport  # noqa: E402

REPEATS = 5
_LOG = logging.getLogger("bench.picows")
_LOG.setLevel(logging.WARNING)
WEBSOCKET_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
API_KEY = "sk-bench-key-0123456789"


class Sink(asyncio.Transport):
    """Where a picows connection's bytes go instead of a socket: counted (and kept while `keep`,
    for the handshake). It reports a non-empty write buffer, so that picows hands every write to
    it rather than to the placeholder socket it is given for its socket options."""

    def __init__(self) -> None:
        super().__init__()
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.kept = bytearray()
        self.keep = True
        self.written = 0
        self.expected = 0
        self.done: asyncio.Event | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"socket": self.socket, "peername": ("127.0.0.1", 1), "sockname": ("127.0.0.1", 2)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.keep:
            self.kept += data
        self.written += len(data)
        if self.done is not None and self.written >= self.expected:
            self.done.set()

    def get_write_buffer_size(self) -> int:
        return 1

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (16384, 65536)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.socket.close()

    def abort(self) -> None:
        self.socket.close()


def frame_bytes(payload: bytes, *, masked: bool) -> bytes:
    """One whole text frame: unmasked as a server sends it, masked (zero mask) as a client does."""
    size = len(payload)
    head = bytes((0x81,)) + (bytes((size | (0x80 if masked else 0),)) if size < 126 else
                             struct.pack("!BH", 126 | (0x80 if masked else 0), size))
    return head + (b"\0\0\0\0" if masked else b"") + payload


def protocol_for(listener: Callable[..., Any], *, client_side: bool) -> WSProtocol:
    """A picows protocol built with the settings relay/transports/picows.py gives its own."""
    return WSProtocol(
        host_port="127.0.0.1:9" if client_side else None, ws_path="/v1/realtime" if client_side else None,
        is_client_side=client_side, ws_listener_factory=listener, logger=PicowsLog(_LOG, {}),
        disconnect_on_exception=True, websocket_handshake_timeout=None, enable_auto_ping=True,
        auto_ping_idle_timeout=PING_INTERVAL, auto_ping_reply_timeout=PING_TIMEOUT,
        auto_ping_strategy=WSAutoPingStrategy.PING_WHEN_IDLE, enable_auto_pong=True,
        max_frame_size=DEFAULT_MAX_FRAME_BYTES, extra_headers=None, read_buffer_init_size=READ_BUFFER_BYTES)




def open_upstream(listener: WSListener) -> tuple[WSProtocol, Sink]:
    """The relay's connection to the provider (client side), past its handshake."""
    sink = Sink()
    protocol = protocol_for(lambda request, response: listener, client_side=True)
    protocol.connection_made(sink)
    key = re.search(rb"Sec-WebSocket-Key: *(\S+)", bytes(sink.kept), re.IGNORECASE).group(1)  # type: ignore[union-attr]
    accept = base64.b64encode(hashlib.sha1(key + WEBSOCKET_GUID).digest())
    feed(protocol, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
    sink.keep, sink.written = False, 0
    return protocol, sink


def open_client(listener: WSListener) -> tuple[WSProtocol, Sink]:
    """A client's connection to the relay (server side), past its handshake."""
    sink = Sink()

    def upgrade(request: Any) -> WSUpgradeResponseWithListener:
        return WSUpgradeResponseWithListener(WSUpgradeResponse.create_101_response(), listener)

    protocol = protocol_for(upgrade, client_side=False)
    protocol.connection_made(sink)
    key = base64.b64encode(os.urandom(16))
    feed(protocol, b"GET /v1/realtime HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
    assert b" 101 " in bytes(sink.kept[:20]), bytes(sink.kept)
    sink.keep, sink.written = False, 0
    return protocol, sink


class Forwarder(WSListener):
    """The floor: each whole frame sent on at once from picows' callback (`send` per frame)."""

    def __init__(self) -> None:
        super().__init__()
        self.to: WSTransport | None = None

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        assert self.to is not None
        if frame.msg_type is WSMsgType.TEXT:
            self.to.send(WSMsgType.TEXT, frame.get_payload_as_memoryview())


class Workload:
    """What is read from each side, read by read, and the bytes each side must have written."""

    def __init__(self, name: str, frames: int, burst: int) -> None:
        delta = output_delta(time.monotonic_ns()).encode()
        append = input_append(time.monotonic_ns()).encode()
        if name == "flood":
            self.reads = [("upstream", frame_bytes(delta, masked=False) * burst)] * (frames // burst)
            self.to_client = len(frame_bytes(delta, masked=False)) * (frames // burst) * burst
            self.to_upstream = 0
        else:   # realtime: one frame per read, each way in turn
            self.reads = [("upstream", frame_bytes(delta, masked=False)), ("client", frame_bytes(append, masked=True))]
            self.reads *= frames // 2
            self.to_client = len(frame_bytes(delta, masked=False)) * (frames // 2)
            self.to_upstream = len(frame_bytes(append, masked=True)) * (frames // 2)
        self.frames = frames // burst * burst if name == "flood" else frames // 2 * 2


class Pair:
    """One session's two connections (the relay's, or picows' bare forwarding), past their
    handshakes, with what each side must have written by the end of a pass."""

    def __init__(self, tools: ToolRegistry, workload: Workload, variant: str, written: asyncio.Event) -> None:
        if variant == "relay":
            upstream = PicowsTransport(server_side=False, max_message_bytes=DEFAULT_MAX_FRAME_BYTES)
            client = PicowsTransport(server_side=True, max_message_bytes=DEFAULT_MAX_FRAME_BYTES)
        else:
            upstream, client = Forwarder(), Forwarder()   # type: ignore[assignment]
        upstream_protocol, upstream_sink = open_upstream(upstream)
        client_protocol, client_sink = open_client(client)
        self.protocols = {"upstream": upstream_protocol, "client": client_protocol}
        self.all_sinks = (upstream_sink, client_sink)
        self.sinks = [sink for sink, expected in ((client_sink, workload.to_client),
                                                  (upstream_sink, workload.to_upstream)) if expected]
        client_sink.expected, upstream_sink.expected = workload.to_client, workload.to_upstream
        for sink in self.sinks:
            sink.done = written
        self.session: SessionLoop | None = None
        if variant == "relay":
            engine = OpenAIEngine(tools, config=EngineConfig(mode="proxy"))
            redactor = Redactor([API_KEY])
            self.session = SessionLoop(engine, upstream=upstream, client=client,
                                       recorder=Taps(TrafficTap(Metrics())),
                                       client_budget=EventBudget(DEFAULT_MAX_CLIENT_EVENTS_PER_SECOND,
                                                                 clock=paced_clock()),
                                       redactor=redactor)
        else:
            upstream.to, client.to = client_protocol.transport, upstream_protocol.transport   # type: ignore[union-attr]

    def done(self) -> bool:
        return all(sink.written >= sink.expected for sink in self.sinks)

    def close(self) -> None:
        for sink in self.all_sinks:
            sink.close()


async def run_pass(tools: ToolRegistry, workload: Workload, variant: str,
                   clock: Callable[[], float] = time.process_time, sessions: int = 1) -> float:
    """One pass: `variant` (`relay` or `bare`) over the workload, in `sessions` sessions at once
    (each turn of the event loop brings one read to each of them, as a poll that finds that many
    sockets ready); its time by `clock`."""
    written = asyncio.Event()   # a sink has had all its bytes
    pairs = [Pair(tools, workload, variant, written) for _ in range(sessions)]
    running = [asyncio.create_task(pair.session.run()) for pair in pairs if pair.session is not None]
    for pair in pairs:
        if pair.session is not None:
            await pair.session.started.wait()
    for _ in range(3):
        await asyncio.sleep(0)   # the readers are in `receive`
    loop = asyncio.get_running_loop()
    reads = iter(workload.reads)

    def read_next() -> None:
        # from the event loop, not from a task, as a socket's read is handed over; one read per
        # session per turn of the loop
        for side, data in reads:
            for pair in pairs:
                feed(pair.protocols[side], data)
            loop.call_soon(read_next)
            return

    start = clock()
    loop.call_soon(read_next)
    while not all(pair.done() for pair in pairs):
        written.clear()
        await asyncio.wait_for(written.wait(), 10 * sessions)
    elapsed = clock() - start
    for task in running:
        task.cancel()
        try:
            await task
        except BaseException:
            pass
    for pair in pairs:
        pair.close()
    return elapsed


def paced_clock() -> Callable[[], float]:
    """A clock that moves 20 ms on every reading: the client's event budget sees paced audio (one
    event every 20 ms) however fast the pass runs, and costs what it costs on a real clock."""
    ticks = iter(range(1 << 62))
    return lambda: next(ticks) * 0.02


def tools_for_bench() -> ToolRegistry:
    return ToolRegistry(load_tools(str(ROOT / "scripts" / "bench_tools.py")))


async def measure_async(workload_name: str, frames: int, burst: int, repeats: int = REPEATS,
                        sessions: int = 1) -> dict[str, Any]:
    tools = tools_for_bench()
    workload = Workload(workload_name, frames, burst)
    passes: dict[str, list[float]] = {"relay": [], "bare": []}
    await run_pass(tools, Workload(workload_name, min(frames, 2000), burst), "relay", sessions=sessions)   # warm
    for repeat in range(repeats):
        for variant in ("relay", "bare") if repeat % 2 == 0 else ("bare", "relay"):
            passes[variant].append(await run_pass(tools, workload, variant, sessions=sessions))
    relay, bare = min(passes["relay"]), min(passes["bare"])
    total = workload.frames * sessions
    return {"workload": workload_name, "frames": workload.frames, "burst": burst, "sessions": sessions,
            "relay_us_per_frame": relay / total * 1e6, "bare_us_per_frame": bare / total * 1e6,
            "relay_added_us_per_frame": (relay - bare) / total * 1e6}


def run(main: Callable[[], Any]) -> Any:
    """`main()` on the event loop `relay serve` runs on by default (uvloop's where installed)."""
    with asyncio.Runner(loop_factory=event_loop_factory("auto")) as runner:
        return runner.run(main())


def measure(workload: str, frames: int, burst: int, sessions: int = 1) -> dict[str, Any]:
    """Best of REPEATS passes of each variant (CPU time of the process)."""
    return run(lambda: measure_async(workload, frames, burst, sessions=sessions))


def once(workload_name: str, frames: int, burst: int, variant: str, sessions: int = 1) -> None:
    async def main() -> None:
        await run_pass(tools_for_bench(), Workload(workload_name, frames, burst), variant, sessions=sessions)

    run(main)


def callgrind_total(arguments: list[str]) -> int:
    """Instructions callgrind counts for this script run with `arguments` and `--once`."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
                        "--once", *arguments], check=True, capture_output=True,
                       env={**os.environ, "PYTHONHASHSEED": "0"})   # the same dict layouts run after run
        for line in out.read_text().splitlines():
            if line.startswith("totals:") or line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError("no totals in callgrind's output")


def instructions_per_frame(workload: str, frames: int, burst: int, variant: str, sessions: int = 1) -> float:
    """Instructions per frame of `variant`, from two callgrind runs (`frames` and twice that)."""
    common = ["--workload", workload, "--burst", str(burst), "--variant", variant, "--sessions", str(sessions)]
    small = callgrind_total([*common, "--frames", str(frames)])
    large = callgrind_total([*common, "--frames", str(2 * frames)])
    return (large - small) / (Workload(workload, frames, burst).frames * sessions)


def shown(args: argparse.Namespace) -> str:
    kind = f"flood, bursts of {args.burst}" if args.workload == "flood" else "realtime, one frame per read"
    return kind + (f", {args.sessions} sessions read in each turn" if args.sessions > 1 else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workload", choices=("flood", "realtime"), default="flood")
    parser.add_argument("--frames", type=int, default=100_000)
    parser.add_argument("--burst", type=int, default=16, help="frames per read (flood)")
    parser.add_argument("--sessions", type=int, default=1,
                        help="sessions at once, one read each per turn of the event loop (--frames: each)")
    parser.add_argument("--variant", choices=("relay", "bare"), help="--once: which to run (default relay); "
                        "--callgrind: only this one (default both)")
    parser.add_argument("--once", action="store_true", help="one pass of --variant, nothing printed")
    parser.add_argument("--callgrind", action="store_true",
                        help="instructions per frame of both variants, from callgrind (--frames: 5,000 is plenty)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    if args.once:
        once(args.workload, args.frames, args.burst, args.variant or "relay", args.sessions)
        return 0
    if args.callgrind:
        figures: dict[str, Any] = {"workload": args.workload, "burst": args.burst, "sessions": args.sessions}
        for variant in (args.variant,) if args.variant else ("relay", "bare"):
            figures[f"{variant}_instructions_per_frame"] = instructions_per_frame(args.workload, args.frames,
                                                                                  args.burst, variant, args.sessions)
        print(f"instructions per frame ({shown(args)}): " + ", ".join(
            f"{variant} {figures[f'{variant}_instructions_per_frame']:,.0f}" for variant in ("relay", "bare")
            if f"{variant}_instructions_per_frame" in figures))
        if not args.variant:
            figures["relay_added_instructions_per_frame"] = (figures["relay_instructions_per_frame"]
                                                             - figures["bare_instructions_per_frame"])
            print(f"the relay adds {figures['relay_added_instructions_per_frame']:,.0f} instructions per frame "
                  "to picows' own forwarding")
    else:
        figures = measure(args.workload, args.frames, args.burst, args.sessions)
        print(f"CPU per frame on picows, without sockets ({shown(args)}): relay "
              f"{figures['relay_us_per_frame']:.2f} us, bare picows {figures['bare_us_per_frame']:.2f} us "
              f"(the relay adds {figures['relay_added_us_per_frame']:.2f} us)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
