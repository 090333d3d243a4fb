"""The soak through HAProxy in front of several relays while the fleet changes under it: one relay
is drained and replaced (a rolling update), another is killed with SIGKILL, mid-run.

    scripts/cluster-soak                                           # 3 relays, 200 sessions, 60 s
    scripts/cluster-soak --relays 3 --sessions 20 --seconds 10     # the test suite's short form

`--sessions` clients (run here) each keep one session open through HAProxy (deploy/haproxy.cfg,
run by scripts/cluster's `Cluster`), make a tool call every `--period` seconds or so as
scripts/soak's clients do, hang up after `--turns-per-session` turns and open the next session;
a client whose session is cut opens the next one at once. At 30% of the run relay1 is drained
(SIGTERM) and a new relay starts in a spare slot of HAProxy's backend; at 60% relay2 is killed
(SIGKILL). Each relay's upstream URL carries its name, so the mock's log says which relay every
session went through. Passes (exit status 0) when:

- every tool call the mock's model made on a session that was not on the killed relay got exactly
  one function_call_output, and no call got two (the mock's log);
- every session on the killed relay saw its connection close (not a hang), and its client's next
  session started on a live relay; every other session ended only when its client hung up, with
  every turn answered and no error event; no attempt to open a session failed;
- the drained relay started no session after it began draining (its 503s sent them elsewhere),
  cut none of its open sessions and exited 0; HAProxy took it and the killed relay out and put
  the new one in; the other relays exit 0 at the end;
- every relay recorded into one shared directory (what docs/deploy.md advises for a fleet: a
  shared volume): one recording per session, complete (its end line written) unless its relay was
  killed, none overwritten;
- no relay logged an error, and the provider key is in no log (relays', HAProxy's) nor recording.

Reports the sessions, calls, the reconnect time after the kill (p50, p99: from the client seeing
its session close to the next session's `session.created`) and what each relay handled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import secrets
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

sys.path.insert(0, str(Path(__file__).resolve().parent))
import soak  # noqa: E402  (scripts/soak.py: the tools, the mock's process, answers, checks)
from cluster import INSTALL_HAPROXY, Cluster, Relay, find_haproxy  # noqa: E402

DRAIN_AT, KILL_AT = 0.3, 0.6          # when in the run relay1 is drained and relay2 killed
HAPROXY_NOTICE_TIMEOUT = 15.0         # how long HAProxy may take to take a relay out or put one in
MAX_CONNECT_ATTEMPTS = 3


@dataclass
class Connection:
    """One session a client opened (or tried to)."""

    client: int
    session: str | None = None       # the mock's session id, from session.created
    opened_at: float | None = None
    ended: str = "open"              # done (the client hung up), closed (the far side), hang, failed
    closed_at: float | None = None
    close_code: int | None = None
    turns: int = 0
    answered: int = 0
    reconnect_seconds: float | None = None   # after a cut: from seeing the close to this session.created
    error: str | None = None


@dataclass
class Clients:
    connections: list[Connection] = field(default_factory=list)
    tally: soak.Tally = field(default_factory=soak.Tally)   # error events seen in answers


async def wait_closed_or(ws: ClientConnection, seconds: float) -> None:
    """Pause between turns, but raise ConnectionClosed as soon as the far side closes."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(ws.wait_closed(), seconds)
    if ws.state is State.CLOSED:
        await ws.recv()   # raises ConnectionClosed, with the close frames if there were any


async def run_client(index: int, url: str, token: str, start_at: float, stop_at: float, args: argparse.Namespace,
                     clients: Clients) -> None:
    loop = asyncio.get_running_loop()
    pace = random.Random(index)
    turn = index
    cut_at: float | None = None   # when the previous session was cut
    failures = 0
    await asyncio.sleep(max(0.0, start_at - loop.time()))
    while loop.time() < stop_at:
        connection = Connection(client=index)
        clients.connections.append(connection)
        try:
            async with connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                               open_timeout=soak.START_TIMEOUT, close_timeout=5) as ws:
                async with asyncio.timeout(soak.START_TIMEOUT):
                    while (event := json.loads(await ws.recv())).get("type") != "session.created":
                        pass
                connection.session = event["session"]["id"]
                connection.opened_at = loop.time()
                if cut_at is not None:
                    connection.reconnect_seconds = connection.opened_at - cut_at
                    cut_at = None
                while connection.turns < args.turns_per_session and loop.time() < stop_at:
                    said, expected = soak.TURNS[turn % len(soak.TURNS)]
                    turn += 1
                    connection.turns += 1
                    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                        "type": "message", "role": "user", "content": [{"type": "input_text", "text": said}]}}))
                    await ws.send(json.dumps({"type": "response.create"}))
                    await soak.wait_for_answer(ws, expected, clients.tally, index)
                    connection.answered += 1
                    pause = args.period * pace.uniform(0.5, 1.5)
                    await wait_closed_or(ws, min(pause, max(0.0, stop_at - loop.time())))
            connection.ended = "done"
        except ConnectionClosed as closed:
            connection.ended, connection.closed_at = "closed", loop.time()
            connection.close_code = closed.rcvd.code if closed.rcvd is not None else 1006
            cut_at = connection.closed_at
        except TimeoutError:
            connection.ended = "hang"
            return
        except Exception as exc:  # a session that could not be opened: reported, tried again
            connection.ended, connection.error = "failed", f"{type(exc).__name__}: {exc}"
            failures += 1
            if failures >= MAX_CONNECT_ATTEMPTS:
                return


# ---- the run -----------------------------------------------------------------------------------

async def cluster_soak(args: argparse.Namespace, haproxy: str, workdir: Path) -> soak.Report:
    report = soak.Report()
    provider_key = "sk-soak-" + secrets.token_hex(16)
    relay_token = secrets.token_urlsafe(16)
    (workdir / "soak_tools.py").write_text(soak.TOOLS_MODULE)
    mock_log = workdir / "mock.jsonl"
    environment = {**os.environ, "OPENAI_API_KEY": provider_key, "RELAY_AUTH_TOKEN": relay_token}
    mock = await asyncio.create_subprocess_exec(
        sys.executable, soak.__file__, "mock", "--log", str(mock_log), "--api-key", provider_key,
        stdout=asyncio.subprocess.PIPE, cwd=workdir, env=environment)
    roles: dict[str, str] = {}
    timeline: dict[str, float] = {}
    try:
        assert mock.stdout is not None
        mock_url = await soak.first_line(mock.stdout, "the mock")
        relay_args = ["--dialect", "openai", "--tools", "soak_tools", "--drain-seconds", str(args.drain_seconds),
                      "--record", str(workdir / "recordings"), "--record-audio", "drop", "--transport", args.transport]
        async with Cluster(workdir, lambda name: f"{mock_url}?relay={name}", haproxy=haproxy,
                           relay_args=relay_args, env=environment, spares=1) as cluster:
            await cluster.start(args.relays)
            roles = {name: "steady" for name in cluster.relays} | {"relay1": "drained", "relay2": "killed"}
            clients = Clients()
            loop = asyncio.get_running_loop()
            begin = loop.time()
            stop_at = begin + args.seconds
            ramp = min(args.period, args.seconds / 4)
            async with asyncio.TaskGroup() as group:
                for index in range(args.sessions):
                    group.create_task(run_client(index, cluster.url + "?model=gpt-realtime", relay_token,
                                                 begin + ramp * index / args.sessions, stop_at, args, clients))
                await change_the_fleet(cluster, begin, args.seconds, roles, timeline, report)
            timeline["clients_done"] = loop.time()
            drained = cluster.relays["relay1"]
            with contextlib.suppress(TimeoutError):   # its last sessions ended with the clients
                await asyncio.wait_for(drained.process.wait(), args.drain_seconds + 10)
            exits = await cluster.stop_relays()
    finally:
        report.numbers["mock_exit"] = await soak.stop(mock)
    with (workdir / "clients.jsonl").open("w") as journal:   # every session the clients opened, for a post-mortem
        for connection in clients.connections:
            fields = dataclasses.asdict(connection)
            for name in ("opened_at", "closed_at"):
                fields[name] = None if fields[name] is None else round(fields[name] - begin, 3)
            journal.write(json.dumps(fields) + "\n")
    check(args, workdir, clients, exits, roles, timeline, begin, cluster.relays, provider_key, report)
    return report


async def change_the_fleet(cluster: Cluster, begin: float, seconds: float, roles: dict[str, str],
                           timeline: dict[str, float], report: soak.Report) -> None:
    """A rolling update's step at DRAIN_AT (relay1 drained, a new relay started in its stead: the
    drain comes first, so that HAProxy still sends relay1 new sessions until its health check
    sees the 503, and relay1 refuses them) and a crash at KILL_AT (relay2 killed); and when
    HAProxy noticed each."""
    loop = asyncio.get_running_loop()

    async def at(fraction: float) -> None:
        await asyncio.sleep(max(0.0, begin + seconds * fraction - loop.time()))

    async def rolling_update() -> None:
        await at(DRAIN_AT)
        cluster.drain(cluster.relays["relay1"])
        timeline["relay1_drain"] = loop.time()
        replacement = await cluster.add_relay()
        roles[replacement.name] = "replacement"
        timeline[f"{replacement.name}_in"] = loop.time()

    async def crash() -> None:
        await at(KILL_AT)
        cluster.kill(cluster.relays["relay2"])
        timeline["relay2_kill"] = loop.time()

    async with asyncio.TaskGroup() as changes:   # a slow start of the new relay does not delay the kill
        changes.create_task(rolling_update())
        changes.create_task(crash())
    for name in ("relay1", "relay2"):
        try:
            timeline[f"{name}_out"] = await cluster.states.wait(name, "DOWN", HAPROXY_NOTICE_TIMEOUT)
        except TimeoutError:
            report.failures.append(f"HAProxy did not take {name} out within {HAPROXY_NOTICE_TIMEOUT:g} s")


# ---- the checks --------------------------------------------------------------------------------

def relay_log(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            records.append(json.loads(line))
    return records


def percentile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))], 3)


def check(args: argparse.Namespace, workdir: Path, clients: Clients, exits: dict[str, int | None],
          roles: dict[str, str], timeline: dict[str, float], begin: float, relays: dict[str, Relay],
          provider_key: str, report: soak.Report) -> None:
    mock_sessions = soak.MockLog.read(workdir / "mock.jsonl").queries
    relay_of = {session: query.get("relay", "?") for session, query in mock_sessions.items()}
    killed = frozenset(session for session, relay in relay_of.items() if relay == "relay2")
    mock_log = soak.check_mock_log(workdir / "mock.jsonl", report, lost_sessions=killed)

    # the clients' view
    connections = clients.connections
    by_client: dict[int, list[Connection]] = {}
    for connection in connections:
        by_client.setdefault(connection.client, []).append(connection)
    cut, reconnects, problems, noticed = 0, [], [], []
    kill = timeline.get("relay2_kill", float("inf"))
    for history in by_client.values():
        for position, connection in enumerate(history):
            relay = relay_of.get(connection.session or "", "?")
            if connection.session is None and connection.ended == "closed" and (connection.closed_at or 0) >= kill:
                relay = "relay2"   # cut between the 101 and session.created: the relay died in between
            where = f"client {connection.client} on {relay}"
            if connection.ended in ("hang", "failed", "open"):
                problems.append(f"{where}: {connection.ended} {connection.error or ''}".strip())
            elif relay == "relay2" and connection.ended == "closed":
                cut += 1
                noticed.append((connection.closed_at or kill) - kill)
                following = history[position + 1] if position + 1 < len(history) else None
                if following is None or following.session is None:
                    problems.append(f"{where}: cut by the kill, and no next session started")
                elif relay_of.get(following.session) in ("relay1", "relay2"):
                    problems.append(f"{where}: cut by the kill, next session on {relay_of.get(following.session)}")
                else:
                    reconnects.append(following.reconnect_seconds)
            elif connection.ended == "closed":
                problems.append(f"{where}: closed by the far side with {connection.close_code}")
            if relay != "relay2" and connection.answered != connection.turns:
                problems.append(f"{where}: {connection.turns - connection.answered} turns unanswered")
    report.check(not problems, f"{len(problems)} client problems, e.g. {problems[:3]}")
    report.check(not clients.tally.errors, f"{len(clients.tally.errors)} error events, e.g. {clients.tally.errors[:3]}")
    report.check(cut > 0, "no session was on the killed relay: the kill tested nothing")
    turns = sum(connection.turns for connection in connections)
    answered = sum(connection.answered for connection in connections)
    report.numbers.update(
        relays=args.relays, sessions=args.sessions, seconds=args.seconds,
        sessions_opened=sum(1 for c in connections if c.session is not None), turns=turns, answered=answered,
        sessions_cut_by_the_kill=cut, close_seen_after_kill_p99=percentile(noticed, 0.99),
        reconnect_p50=percentile([r for r in reconnects if r is not None], 0.5),
        reconnect_p99=percentile([r for r in reconnects if r is not None], 0.99),
        timeline={name: round(moment - begin, 3) for name, moment in timeline.items()},
        load_average_1m=round(os.getloadavg()[0], 2))

    # each relay's view
    instances: dict[str, Any] = {}
    logs_text = [(workdir / name).read_text() for name in ("haproxy.log", "mock.log") if (workdir / name).exists()]
    sessions_per_relay = Counter(relay_of.values())
    calls_per_relay = Counter(relay_of.get(mock_log.call_sessions[call], "?") for call in mock_log.produced)
    for name, relay in relays.items():
        text = relay.log_path.read_text()
        logs_text.append(text)
        records = relay_log(relay.log_path)
        errors = [r["msg"] for r in records if r.get("level") in ("error", "critical")]
        report.check(not errors, f"{name} logged {len(errors)} errors, e.g. {errors[:3]}")
        outcomes = Counter(r.get("outcome") for r in records if r.get("msg") == "tool call")
        report.check(set(outcomes) <= {"ok"}, f"{name}: tool call outcomes {dict(outcomes)}")
        instance = {"role": roles.get(name, "?"), "sessions": sessions_per_relay[name],
                    "tool_calls": calls_per_relay[name], "exit": exits.get(name)}
        if roles.get(name) == "drained":
            drain_line = next((i for i, r in enumerate(records) if r.get("msg", "").startswith("SIGTERM: draining")), None)
            report.check(drain_line is not None, f"{name} never logged its drain")
            after = records[drain_line:] if drain_line is not None else []
            late = [r for r in after if r.get("msg") == "session start"]
            cut_by_drain = [r for r in after if r.get("msg") == "session end" and r.get("by") == "relay"]
            refused = [r for r in after if r.get("msg", "").startswith("handshake refused") and r.get("status") == 503]
            instance.update(open_at_drain=next((r.get("sessions") for r in after[:1]), None),
                            refused_while_draining=len(refused))
            report.check(not late, f"{name} started {len(late)} sessions after it began draining")
            report.check(not cut_by_drain, f"{name} cut {len(cut_by_drain)} sessions at the drain deadline")
            report.check(exits.get(name) == 0, f"{name} (drained) exited with {exits.get(name)}")
        elif roles.get(name) == "killed":
            report.check(exits.get(name) == -9, f"{name} (killed) exited with {exits.get(name)}")
        else:
            report.check(exits.get(name) == 0, f"{name} exited with {exits.get(name)}")
        instances[name] = instance
    report.numbers["instances"] = instances
    report.check(all(provider_key not in text for text in logs_text), "the provider key is in a log")
    check_recordings(workdir / "recordings", relays, roles, provider_key, report)


def check_recordings(directory: Path, relays: dict[str, Relay], roles: dict[str, str], provider_key: str,
                     report: soak.Report) -> None:
    """The relays shared one recording directory: one file per session each relay started (the
    file name ends with the session id), complete, unless its relay was killed; no key in any."""
    from relay.recording.reader import read_recording

    files = {path.stem.split("_", 1)[1]: path for path in directory.glob("*.jsonl")}
    started = {record["session_id"]: name for name, relay in relays.items()
               for record in relay_log(relay.log_path) if record.get("msg") == "session start"}
    # (a killed relay may have started a session whose upstream, and so its recording, never came)
    missing = sorted(session for session, name in started.items() if session not in files and roles.get(name) != "killed")
    strays = sorted(set(files) - set(started))
    incomplete = [session for session, name in started.items() if session in files and roles.get(name) != "killed"
                  and read_recording(files[session]).end is None]
    leaked = [path.name for path in files.values() if provider_key in path.read_text()]
    report.numbers["recordings"] = len(files)
    report.check(not missing, f"{len(missing)} sessions without a recording, e.g. {missing[:3]}")
    report.check(not strays, f"{len(strays)} recordings of sessions no relay started, e.g. {strays[:3]}")
    report.check(not incomplete, f"{len(incomplete)} recordings without their end, e.g. {incomplete[:3]}")
    report.check(not leaked, f"the provider key is in {len(leaked)} recordings")


# ---- command line ------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/cluster-soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--relays", type=soak.bounded(int, 2, 16), default=3,
                        help="relays at the start (default 3; relay1 is drained, relay2 killed, one more starts)")
    parser.add_argument("--sessions", type=soak.bounded(int, 1, soak.MAX_SESSIONS), default=200,
                        help="concurrent clients, each with one session open at a time (default 200)")
    parser.add_argument("--seconds", type=soak.bounded(float, 2, soak.MAX_SECONDS), default=60.0,
                        help="how long the clients make calls (default 60)")
    parser.add_argument("--period", type=soak.bounded(float, 0.1, 60), default=3.0,
                        help="mean seconds between one session's calls (default 3)")
    parser.add_argument("--turns-per-session", type=soak.bounded(int, 1, 10_000), default=4,
                        help="calls per session before the client hangs up and opens the next (default 4)")
    parser.add_argument("--drain-seconds", type=soak.bounded(float, 1, 3600), default=60.0,
                        help="the relays' --drain-seconds: long enough for a session to end by itself "
                             "(default 60)")
    parser.add_argument("--transport", choices=("auto", "websockets", "picows"), default="auto",
                        help="the relays' --transport (default auto: picows when it is installed)")
    parser.add_argument("--logs", type=Path, metavar="DIR", help="keep the logs in DIR (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args(argv)
    haproxy = find_haproxy()
    if haproxy is None:
        print(f"scripts/cluster-soak needs HAProxy, which is not installed: {INSTALL_HAPROXY}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        if args.logs is not None:
            args.logs.mkdir(parents=True, exist_ok=True)
            report = asyncio.run(cluster_soak(args, haproxy, args.logs.resolve()))
        else:
            with tempfile.TemporaryDirectory(prefix="relay-cluster-soak-") as workdir:
                report = asyncio.run(cluster_soak(args, haproxy, Path(workdir)))
    except (RuntimeError, ExceptionGroup) as exc:   # a relay or HAProxy that did not start
        while isinstance(exc, ExceptionGroup):
            exc = exc.exceptions[0]
        print(f"scripts/cluster-soak: {exc}", file=sys.stderr)
        return 1
    report.numbers["wall_seconds"] = round(time.monotonic() - started, 2)
    if args.json:
        print(json.dumps({"ok": not report.failures, "failures": report.failures, **report.numbers}))
    else:
        for key, value in report.numbers.items():
            if key == "instances":
                for name, instance in value.items():
                    print(f"{name:>24}: " + ", ".join(f"{k} {v}" for k, v in instance.items()))
            else:
                print(f"{key:>24}: {value}")
        print("PASS" if not report.failures else "FAIL:\n  " + "\n  ".join(report.failures))
    return 0 if not report.failures else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
