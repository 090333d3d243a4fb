"""Several `relay serve` processes behind HAProxy, with the mock as their upstream, all on loopback:
a deployment behind a load balancer on one machine.

    scripts/cluster                         # 3 relays; prints the URL to point an SDK at
    scripts/cluster --relays 5 --tools my_tools.py --mock-script my_script.json --drain-seconds 30

By default the relays run the example tools (relay/examples/tools.py) and the mock plays the demo's
script: ask about the weather, an order or a flight.

HAProxy (Debian's `haproxy` package: apt-get install -y haproxy) runs deploy/haproxy.cfg as it
is checked in, with one `server` line per relay appended to its last section; every process
listens on 127.0.0.1 on a port that was free at start. Ctrl-C (or SIGTERM) stops the relays the
way an orchestrator would (SIGTERM: each drains), then HAProxy and the mock.

`Cluster` is what scripts/cluster-soak and the tests build on: start N relays behind HAProxy,
start another in a spare slot, drain one (SIGTERM), kill one (SIGKILL), and follow HAProxy's view
of each (its log says when it takes a relay out or puts it back).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent))
from soak import first_line, stop  # noqa: E402  (scripts/soak.py: the soak's process helpers)

REPO = Path(__file__).resolve().parents[1]
HAPROXY_CONFIG = REPO / "deploy" / "haproxy.cfg"
BACKEND = "relays"             # the backend deploy/haproxy.cfg sends sessions to (its last section)
INSTALL_HAPROXY = "apt-get install -y haproxy"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
MAX_RELAYS = 32
HAPROXY_BIND_ATTEMPTS = 3      # the free port chosen for HAProxy may be taken before it binds
# "Server relays/relay2 is DOWN, reason: ...", "Server relays/relay4 is UP/READY (leaving forced maintenance)."
SERVER_STATE = re.compile(rf"Server {BACKEND}/(\S+) is (UP|DOWN)\b")
PLACEHOLDER_ADDRESS = "127.0.0.1:1"
EXAMPLE_TOOLS = "relay.examples.tools"   # a spare slot's address until a relay takes it (never contacted)


def find_haproxy() -> str | None:
    """The haproxy program: $RELAY_HAPROXY if set, else on the PATH or where Debian puts it
    (/usr/sbin is not on every PATH)."""
    if os.environ.get("RELAY_HAPROXY"):
        return shutil.which(os.environ["RELAY_HAPROXY"])
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin:/sbin")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cluster_config(base: str, servers: Sequence[tuple[str, str, bool]]) -> str:
    """deploy/haproxy.cfg's text with one `server NAME ADDRESS` line per relay (`disabled` for a
    spare slot) added to its last section, the backend."""
    lines = [f"    server {name} {address}{' disabled' if spare else ''}" for name, address, spare in servers]
    return base.rstrip("\n") + "\n" + "\n".join(lines) + "\n"


async def runtime_api(socket_path: Path, command: str) -> str:
    """One command to HAProxy's runtime API (the `stats socket` of deploy/haproxy.cfg); its answer."""
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    try:
        writer.write(command.encode() + b"\n")
        await writer.drain()
        async with asyncio.timeout(10):
            return (await reader.read()).decode()
    finally:
        writer.close()


class RelayLog:
    """A relay's stderr (JSON lines) copied to its log file as it comes (a full pipe would stall
    the relay), with a way to wait for a line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.records: list[dict[str, Any]] = []
        self._grew = asyncio.Condition()
        self.ended = False

    async def copy(self, stream: asyncio.StreamReader) -> None:
        with self.path.open("w") as log:
            async for raw in stream:
                line = raw.decode(errors="replace")
                log.write(line)
                log.flush()
                async with self._grew:
                    with contextlib.suppress(ValueError):
                        self.records.append(json.loads(line))
                    self._grew.notify_all()
        async with self._grew:
            self.ended = True
            self._grew.notify_all()

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = START_TIMEOUT,
                       ) -> dict[str, Any]:
        """The first record that satisfies `predicate`, waiting for it if it has not come yet;
        RuntimeError if the relay's stderr ends first."""
        def found() -> dict[str, Any] | None:
            return next((record for record in self.records if predicate(record)), None)
        async with asyncio.timeout(timeout), self._grew:
            await self._grew.wait_for(lambda: found() is not None or self.ended)
            record = found()
        if record is None:
            raise RuntimeError(f"the relay exited without logging it; its log: {self.path}")
        return record


@dataclass
class Relay:
    """One `relay serve` process and its slot in HAProxy's backend."""

    name: str
    process: asyncio.subprocess.Process
    url: str
    log: RelayLog
    copier: asyncio.Task[None]

    @property
    def log_path(self) -> Path:
        return self.log.path

    @property
    def port(self) -> int:
        return int(self.url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class ServerStates:
    """HAProxy's view of each relay, from the lines it logs when it takes one out or puts it back."""

    changes: list[tuple[float, str, str]] = field(default_factory=list)   # (loop time, name, UP/DOWN)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def note(self, line: str) -> None:
        match = SERVER_STATE.search(line)
        if match:   # (HAProxy says each change twice: on stderr and in its log; the first counts)
            async with self._changed:
                self.changes.append((asyncio.get_running_loop().time(), match[1], match[2]))
                self._changed.notify_all()

    def state(self, name: str) -> str | None:
        return next((state for _, server, state in reversed(self.changes) if server == name), None)

    async def wait(self, name: str, state: str, timeout: float = START_TIMEOUT) -> float:
        """Wait until HAProxy says `name` is `state` (UP or DOWN); the loop time it said so."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(lambda: self.state(name) == state)
        return self.since(name, state)

    def since(self, name: str, state: str) -> float:
        """When HAProxy last said `name` became `state` (the first of its two lines)."""
        when = None
        for moment, server, said in self.changes:
            if server != name:
                continue
            if said != state:
                when = None
            elif when is None:
                when = moment
        if when is None:
            raise LookupError(f"{name} is not {state}")
        return when


class Cluster:
    """N `relay serve` processes behind HAProxy on loopback, in `workdir` (their logs go there).

    `upstream(name)` is the upstream URL of the relay called `name` (the soak tags each relay's
    sessions at the mock this way); `relay_args` are added to every relay's command line, run in
    `cwd` (default: `workdir`) with the environment `env`. `spares` slots are declared in HAProxy's backend, disabled, for relays
    started later (`add_relay`): a rolling update's new instance."""

    def __init__(self, workdir: Path, upstream: Callable[[str], str], *, haproxy: str,
                 relay_args: Sequence[str] = (), env: Mapping[str, str] | None = None, spares: int = 0,
                 cwd: Path | None = None) -> None:
        self.workdir = workdir
        self.cwd = cwd or workdir
        self.upstream = upstream
        self.haproxy_program = haproxy
        self.relay_args = list(relay_args)
        self.env = dict(os.environ if env is None else env)
        self.spares = spares
        self.relays: dict[str, Relay] = {}
        self.free_slots: list[str] = []
        self.states = ServerStates()
        self.port = 0
        self.socket_path = workdir / "haproxy.sock"
        self.haproxy_log = workdir / "haproxy.log"
        self.haproxy: asyncio.subprocess.Process | None = None
        self._haproxy_copier: asyncio.Task[None] | None = None

    @property
    def base_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """Where a realtime client connects: HAProxy's frontend."""
        return self.base_url + "/v1/realtime"

    async def __aenter__(self) -> Cluster:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # ---- starting --------------------------------------------------------------------------
    async def start(self, relays: int) -> None:
        """Start `relays` relays (relay1...), then HAProxy in front of them."""
        names = [f"relay{number}" for number in range(1, relays + 1)]
        started = await asyncio.gather(*(self.start_relay(name) for name in names), return_exceptions=True)
        for outcome in started:
            if isinstance(outcome, BaseException):
                raise outcome
        self.relays = dict(sorted(self.relays.items(), key=lambda item: int(item[0].removeprefix("relay"))))
        self.free_slots = [f"relay{number}" for number in range(relays + 1, relays + 1 + self.spares)]
        servers = [(name, f"127.0.0.1:{self.relays[name].port}", False) for name in names]
        servers += [(name, PLACEHOLDER_ADDRESS, True) for name in self.free_slots]
        config = self.workdir / "haproxy.cfg"
        config.write_text(cluster_config(HAPROXY_CONFIG.read_text(), servers))
        await self._start_haproxy(config)

    async def start_relay(self, name: str) -> Relay:
        """Start one `relay serve` on a free port; returns once it listens."""
        log = RelayLog(self.workdir / f"{name}.log")
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "relay", "serve", "--host", "127.0.0.1", "--port", "0",
            "--upstream", self.upstream(name), "--log-format", "json", *self.relay_args,
            stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=self.cwd, env=self.env)
        assert process.stderr is not None
        copier = asyncio.ensure_future(log.copy(process.stderr))
        try:
            listening = await log.wait_for(lambda record: record.get("msg", "").startswith("listening on"))
        except BaseException:
            if process.returncode is None:
                process.kill()
            await process.wait()
            await copier
            said = next((r.get("msg") for r in reversed(log.records) if r.get("level") == "error"), None)
            raise RuntimeError(f"{name} did not start: {said or f'see {log.path}'}") from None
        relay = self.relays[name] = Relay(name, process, listening["url"], log, copier)
        return relay

    async def _start_haproxy(self, config: Path) -> None:
        for attempt in range(HAPROXY_BIND_ATTEMPTS):
            self.port = free_port()
            env = {**os.environ, "RELAY_LB_BIND": f"127.0.0.1:{self.port}", "RELAY_HAPROXY_SOCKET": str(self.socket_path)}
            # -W: master-worker mode, which says "Loading success." once it listens
            process = await asyncio.create_subprocess_exec(
                self.haproxy_program, "-W", "-f", str(config), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, env=env)
            assert process.stderr is not None
            ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            log = self.haproxy_log.open("a")
            copier = asyncio.ensure_future(_copy_and_close(self._watch_haproxy(process.stderr, log, ready), log))
            try:
                async with asyncio.timeout(START_TIMEOUT):
                    await ready
            except BaseException as failure:
                await stop(process)
                await copier
                retry = "cannot bind" in self.haproxy_log.read_text() and attempt + 1 < HAPROXY_BIND_ATTEMPTS
                if isinstance(failure, Exception) and retry:
                    continue
                if isinstance(failure, Exception):
                    raise RuntimeError(f"HAProxy did not start; its log: {self.haproxy_log}") from None
                raise
            self.haproxy, self._haproxy_copier = process, copier
            return

    async def _watch_haproxy(self, stream: asyncio.StreamReader, log: TextIO, ready: asyncio.Future[str]) -> None:
        async for raw in stream:
            line = raw.decode(errors="replace")
            log.write(line)
            log.flush()
            if not ready.done() and "Loading success" in line:
                ready.set_result(line)
            await self.states.note(line)
        if not ready.done():
            ready.set_exception(RuntimeError("HAProxy exited"))

    # ---- changing it -----------------------------------------------------------------------
    async def add_relay(self) -> Relay:
        """Start a relay in the next spare slot and have HAProxy send sessions to it; returns
        once HAProxy counts it UP."""
        name = self.free_slots.pop(0)
        relay = await self.start_relay(name)
        answer = await self.api(f"set server {BACKEND}/{name} addr 127.0.0.1 port {relay.port}")
        answer += await self.api(f"set server {BACKEND}/{name} state ready")
        if "No such" in answer or "Require" in answer:
            raise RuntimeError(f"HAProxy refused to enable {name}: {answer.strip()}")
        await self.states.wait(name, "UP")
        return relay

    def drain(self, relay: Relay) -> None:
        """What an orchestrator does to retire an instance: SIGTERM (the relay drains)."""
        relay.process.send_signal(signal.SIGTERM)

    def kill(self, relay: Relay) -> None:
        """An instance lost at once (a machine gone, the OOM killer): SIGKILL."""
        relay.process.kill()

    async def api(self, command: str) -> str:
        return await runtime_api(self.socket_path, command)

    async def server_stats(self) -> dict[str, dict[str, str]]:
        """HAProxy's figures for each server of the backend (`show stat`): `status` (UP, DOWN,
        MAINT...), `scur` (open connections: sessions), `stot`, `weight`..."""
        rows = (await self.api("show stat")).splitlines()
        header = rows[0].lstrip("# ").split(",")
        stats: dict[str, dict[str, str]] = {}
        for row in rows[1:]:
            values = dict(zip(header, row.split(",")))
            if values.get("pxname") == BACKEND and values.get("svname") not in (None, "BACKEND"):
                stats[values["svname"]] = values
        return stats

    # ---- stopping --------------------------------------------------------------------------
    async def stop_relays(self, timeout: float = STOP_TIMEOUT) -> dict[str, int | None]:
        """SIGTERM every relay still running (each drains) and wait; the exit status of every
        relay ever started (negative: the signal that killed it; None: still running after
        `timeout`, then killed)."""
        async def stop_one(relay: Relay) -> None:
            with contextlib.suppress(TimeoutError):
                await stop(relay.process, timeout)
            await relay.copier
        await asyncio.gather(*(stop_one(relay) for relay in self.relays.values()))
        return {name: relay.process.returncode for name, relay in self.relays.items()}

    async def stop(self) -> None:
        """Stop the relays (drained), then HAProxy. Idempotent."""
        await self.stop_relays()
        if self.haproxy is not None:
            await stop(self.haproxy)
            assert self._haproxy_copier is not None
            await self._haproxy_copier
            self.haproxy = None


async def _copy_and_close(copying: Any, log: TextIO) -> None:
    try:
        await copying
    finally:
        log.close()


# ---- scripts/cluster -------------------------------------------------------------------------

async def run_cluster(args: argparse.Namespace, haproxy: str, workdir: Path) -> int:
    script = args.mock_script
    if script is None:
        from relay.cli.demo import demo_script
        script = workdir / "mock-script.json"
        script.write_text(demo_script().model_dump_json(indent=2))
    with (workdir / "mock.log").open("w") as mock_log:
        mock = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "relay", "mock", "--port", "0", "--script", str(script),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=mock_log)
    assert mock.stdout is not None
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)
    try:
        mock_url = await first_line(mock.stdout, "the mock")
        relay_args = ["--dialect", "openai", "--drain-seconds", str(args.drain_seconds)]
        for spec in args.tools or [EXAMPLE_TOOLS]:
            relay_args += ["--tools", spec]
        # the relays talk to the mock only: a made-up key, never one from this environment
        env = {**os.environ, "OPENAI_API_KEY": "sk-cluster-mock"}
        env.pop("RELAY_AUTH_TOKEN", None)
        async with Cluster(workdir, lambda name: mock_url, haproxy=haproxy, relay_args=relay_args,
                           env=env, cwd=Path.cwd()) as cluster:
            await cluster.start(args.relays)
            describe(cluster, mock_url, args.json)
            await stopping.wait()
            print("stopping: each relay drains (its open sessions may run up to "
                  f"{args.drain_seconds:g} s), then HAProxy and the mock", file=sys.stderr)
            statuses = await cluster.stop_relays(timeout=args.drain_seconds + STOP_TIMEOUT)
        failed = {name: status for name, status in statuses.items() if status != 0}
        if failed:
            print(f"relays that did not exit 0: {failed}; logs in {workdir}", file=sys.stderr)
        return 1 if failed else 0
    finally:
        await stop(mock)


def describe(cluster: Cluster, mock_url: str, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"url": cluster.url, "mock": mock_url, "haproxy_socket": str(cluster.socket_path),
                          "relays": {name: {"url": relay.url, "pid": relay.pid, "log": str(relay.log_path)}
                                     for name, relay in cluster.relays.items()},
                          "logs": str(cluster.workdir)}), flush=True)
        return
    print(f"{len(cluster.relays)} relays behind HAProxy ({HAPROXY_CONFIG.relative_to(REPO)}), "
          f"upstream: the mock at {mock_url}")
    for name, relay in cluster.relays.items():
        print(f"  {name}: {relay.url} (pid {relay.pid})")
    print(f"  logs: {cluster.workdir}; HAProxy's runtime API: {cluster.socket_path}")
    print(f"\npoint an SDK at {cluster.url}")
    print(f"  OpenAI Python: AsyncOpenAI(websocket_base_url=\"{cluster.base_url}/v1\", api_key=\"unused\")")
    print("Ctrl-C stops the cluster (each relay drains first).", flush=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/cluster", description=__doc__.split("\n\n")[0])
    parser.add_argument("--relays", type=int, default=3, help=f"relay processes (default 3, at most {MAX_RELAYS})")
    parser.add_argument("--tools", action="append", default=[], metavar="SPEC",
                        help="a .py file or module with @tool functions, for every relay (repeatable; "
                             f"default {EXAMPLE_TOOLS})")
    parser.add_argument("--mock-script", type=Path, metavar="FILE",
                        help="the mock model's JSON script (default: the demo's, see relay/demo.py)")
    parser.add_argument("--drain-seconds", type=float, default=10.0, metavar="S",
                        help="how long a stopping relay lets its sessions go on (default 10)")
    parser.add_argument("--logs", type=Path, metavar="DIR", help="keep the logs in DIR (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="describe the running cluster in one JSON line")
    args = parser.parse_args(argv)
    if not 1 <= args.relays <= MAX_RELAYS or args.drain_seconds < 0:
        print(f"scripts/cluster: --relays must be 1 to {MAX_RELAYS} and --drain-seconds >= 0", file=sys.stderr)
        return 2
    haproxy = find_haproxy()
    if haproxy is None:
        print(f"scripts/cluster needs HAProxy, which is not installed: {INSTALL_HAPROXY}", file=sys.stderr)
        return 2
    try:
        if args.logs is not None:
            args.logs.mkdir(parents=True, exist_ok=True)
            return asyncio.run(run_cluster(args, haproxy, args.logs.resolve()))
        with tempfile.TemporaryDirectory(prefix="relay-cluster-") as workdir:
            return asyncio.run(run_cluster(args, haproxy, Path(workdir)))
    except RuntimeError as exc:   # the mock, a relay or HAProxy did not start (its log says why)
        print(f"scripts/cluster: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
