"""Load soak of `relay serve` on loopback: many concurrent realtime sessions, each asking for a tool
call every few seconds, against the mock upstream, for a bounded time.

    scripts/soak                          # 200 sessions for 60 s, a call every ~3 s per session
    scripts/soak --sessions 50 --seconds 10

The relay (`python -m relay serve`) and the mock upstream run in their own processes; the clients
run here. Passes (exit status 0) when:

- every call the mock's model produced got exactly one function_call_output from the relay, and
  nothing else did (checked from the mock's own log of what it sent and received);
- every client turn was answered with the tool's output, with no `error` event and no unexpected
  close;
- the mock sent no `error` (the relay never sent it anything invalid);
- the relay's resident memory grew at most `--max-rss-growth` between a third of the run and its
  end (Linux: /proc), the relay logged no error, and its log holds no provider key;
- the relay exits 0 on SIGTERM.

The engine keeps a bounded window of each session's recent history (`--history-items`, 16 by
default: see tests/test_engine_memory.py), so a session's memory stays flat however
long it runs; `--turns-per-session N` makes clients reconnect after N turns, which shows whether
anything outlives its session.

`soak.py mock --log FILE --api-key KEY` is the mock's process (started by the soak itself).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import secrets
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from websockets.asyncio.client import ClientConnection, connect

MAX_SESSIONS = 1000
MAX_SECONDS = 600.0
TURN_TIMEOUT = 30.0
START_TIMEOUT = 30.0
JOURNAL_FLUSH_SECONDS = 0.5

TOOLS_MODULE = '''
import asyncio

from relay.tools import tool


@tool
async def get_weather(city: str) -> str:
    """Current weather in a city."""
    await asyncio.sleep(0.05)   # an I/O-bound lookup
    return f"sunny in {city}"


@tool
def convert(amount: float) -> str:
    """Euros to US dollars."""
    return f"{amount} EUR is {amount * 1.09:.2f} USD"   # a sync tool: it runs in a worker thread
'''
# (what the user says, what the follow-up must contain: the tool's output)
TURNS = (("What's the weather?", "sunny in Paris"), ("Convert 12.5 euros", "12.5 EUR is 13.63 USD"))


# ---- the mock's process ------------------------------------------------------------------------

def mock_script() -> Any:
    from relay.mock import MockScript, Reply, Rule, StreamOptions, ToolCall

    return MockScript(
        rules=[Rule(match="weather", say="Let me check.",
                    calls=[ToolCall(name="get_weather", arguments={"city": "Paris"})]),
               Rule(match="convert", calls=[ToolCall(name="convert", arguments={"amount": 12.5})])],
        after_outputs=Reply(say="Here you go: {output}"),
        # small audio: the soak is about calls and sessions, and the mock keeps what it sends
        options=StreamOptions(audio_chunk_bytes=96, audio_chunks=2, text_chunk_chars=64, argument_deltas=2),
    )


def journal_lines(records: list[Any], sent: bool) -> list[dict[str, Any]]:
    """The mock's log lines for its journal records: calls its model produced, outputs it was
    given, errors it sent. (A session's first line gives its query: `{"session", "query"}`.)"""
    lines = []
    for record in records:
        event = record.event
        item = event.get("item") if isinstance(event.get("item"), dict) else {}
        if sent and event.get("type") == "response.output_item.done" and item.get("type") == "function_call":
            lines.append({"session": record.session_id, "call": item.get("call_id"), "name": item.get("name")})
        elif (not sent and event.get("type") == "conversation.item.create"
              and item.get("type") == "function_call_output"):
            lines.append({"session": record.session_id, "output": item.get("call_id")})
        elif sent and event.get("type") == "error":
            lines.append({"session": record.session_id, "error": event.get("error")})
    return lines


def flush_journal(mock: Any, log: TextIO, sessions_logged: int = 0) -> int:
    """Move the mock's journal into its log file: the journal would otherwise hold every event of
    the whole run in memory. New sessions are logged first with their query (the soak through
    several relays tags each relay's upstream URL); returns how many sessions are logged now."""
    for session in mock.sessions[sessions_logged:]:
        log.write(json.dumps({"session": session.id, "query": session.query}) + "\n")
    for records, sent in ((mock.sent, True), (mock.received, False)):
        count = len(records)
        for line in journal_lines(records[:count], sent):
            log.write(json.dumps(line) + "\n")
        del records[:count]
    log.flush()
    return len(mock.sessions)


async def serve_mock(log_path: Path, api_key: str) -> None:
    from relay.mock import MockUpstream

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    with log_path.open("w") as log:
        async with MockUpstream(script=mock_script(), api_key=api_key) as mock:
            print(mock.url, flush=True)
            sessions_logged = 0
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), JOURNAL_FLUSH_SECONDS)
                sessions_logged = flush_journal(mock, log, sessions_logged)


# ---- the clients -------------------------------------------------------------------------------

@dataclass
class Tally:
    connected: int = 0
    turns: int = 0
    answered: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def wait_for_answer(ws: ClientConnection, expected: str, tally: Tally, session: int) -> None:
    """Read until the response.done that carries `expected`; error events are failures."""
    async with asyncio.timeout(TURN_TIMEOUT):
        while True:
            event = json.loads(await ws.recv())
            if event.get("type") == "error":
                tally.errors.append(f"session {session}: error event {json.dumps(event['error'])[:300]}")
            elif event.get("type") == "response.done" and expected in json.dumps(event["response"].get("output")):
                return


async def run_session(index: int, url: str, token: str, start_at: float, stop_at: float, args: argparse.Namespace,
                      tally: Tally) -> None:
    """One client: connect, then a turn every `period` seconds or so until `stop_at`; with
    `turns_per_session`, close after that many turns and connect again."""
    loop = asyncio.get_running_loop()
    pace = random.Random(index)
    turn = index
    await asyncio.sleep(max(0.0, start_at - loop.time()))   # connections are spread over the first period
    try:
        while loop.time() < stop_at:
            async with connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                               open_timeout=START_TIMEOUT, close_timeout=5) as ws:
                async with asyncio.timeout(START_TIMEOUT):
                    while json.loads(await ws.recv()).get("type") != "session.created":
                        pass
                tally.connected += 1
                turns_here = 0
                while loop.time() < stop_at and (turns_here < args.turns_per_session or not args.turns_per_session):
                    said, expected = TURNS[turn % len(TURNS)]
                    turn += 1
                    turns_here += 1
                    tally.turns += 1
                    started = loop.time()
                    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                        "type": "message", "role": "user", "content": [{"type": "input_text", "text": said}]}}))
                    await ws.send(json.dumps({"type": "response.create"}))
                    await wait_for_answer(ws, expected, tally, index)
                    tally.answered += 1
                    tally.latencies.append(loop.time() - started)
                    pause = args.period * pace.uniform(0.5, 1.5)
                    await asyncio.sleep(min(pause, max(0.0, stop_at - loop.time())))
    except Exception as exc:  # every failure is reported, none stops the other sessions
        tally.errors.append(f"session {index}: {type(exc).__name__}: {exc}")


# ---- the processes -----------------------------------------------------------------------------

def rss_bytes(pid: int) -> int:
    """Resident memory of a process (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def first_line(stream: asyncio.StreamReader, what: str) -> str:
    async with asyncio.timeout(START_TIMEOUT):
        line = await stream.readline()
    if not line:
        raise RuntimeError(f"{what} exited before it was ready")
    return line.decode().strip()


async def copy_log(stream: asyncio.StreamReader, log: TextIO, listening: asyncio.Future[str]) -> None:
    """Keep the relay's stderr in a file (a full pipe would stall it) and report its URL."""
    async for raw in stream:
        line = raw.decode(errors="replace")
        log.write(line)
        if not listening.done() and '"listening on' in line:
            listening.set_result(json.loads(line)["url"])
    if not listening.done():
        listening.set_exception(RuntimeError("the relay exited before it listened"))


async def stop(process: asyncio.subprocess.Process, timeout: float = 15.0) -> int:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(process.wait(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        return -9


@dataclass
class Report:
    failures: list[str] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)

    def check(self, ok: bool, failure: str) -> None:
        if not ok:
            self.failures.append(failure)


@dataclass
class MockLog:
    """What the mock's log says: each call its model produced (and in which session), each output
    it was given, the errors it sent, and each session's query."""

    produced: Counter[str] = field(default_factory=Counter)
    answered: Counter[str] = field(default_factory=Counter)
    errors: list[dict[str, Any]] = field(default_factory=list)
    call_sessions: dict[str, str] = field(default_factory=dict)
    queries: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> MockLog:
        mock_log = cls()
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            if "call" in entry:
                mock_log.produced[entry["call"]] += 1
                mock_log.call_sessions[entry["call"]] = entry["session"]
            elif "output" in entry:
                mock_log.answered[entry["output"]] += 1
            elif "query" in entry:
                mock_log.queries[entry["session"]] = entry["query"]
            else:
                mock_log.errors.append(entry)
        return mock_log


def check_mock_log(path: Path, report: Report, lost_sessions: frozenset[str] = frozenset()) -> MockLog:
    """Every call answered exactly once, nothing else answered, no error sent; a call in one of
    `lost_sessions` (its relay was killed) may have no answer, never two."""
    mock_log = MockLog.read(path)
    produced, answered, errors = mock_log.produced, mock_log.answered, mock_log.errors
    report.numbers.update(calls=sum(produced.values()), outputs=sum(answered.values()), mock_errors=len(errors))
    report.check(all(count == 1 for count in produced.values()), "the mock produced a call_id twice")
    lost = [call for call in produced if answered[call] == 0 and mock_log.call_sessions[call] in lost_sessions]
    if lost_sessions:
        report.numbers["calls_lost_with_their_relay"] = len(lost)
    unanswered = [call for call in produced if answered[call] == 0 and mock_log.call_sessions[call] not in lost_sessions]
    twice = [call for call, count in answered.items() if count > 1]
    strays = [call for call in answered if call not in produced]
    report.check(not unanswered, f"{len(unanswered)} calls never answered, e.g. {unanswered[:3]}")
    report.check(not twice, f"{len(twice)} calls answered more than once, e.g. {twice[:3]}")
    report.check(not strays, f"{len(strays)} outputs for calls the model never made, e.g. {strays[:3]}")
    report.check(not errors, f"the mock sent {len(errors)} errors, e.g. {errors[:2]}")
    return mock_log


def check_relay_log(path: Path, provider_key: str, calls: int, report: Report) -> None:
    text = path.read_text()
    report.check(provider_key not in text, "the provider key is in the relay's log")
    records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    outcomes = Counter(r.get("outcome") for r in records if r.get("msg") == "tool call")
    report.numbers["tool_call_outcomes"] = dict(outcomes)
    report.check(outcomes == Counter({"ok": calls}), f"tool call outcomes {dict(outcomes)}, expected {calls} ok")
    bad = [r["msg"] for r in records if r.get("level") in ("error", "critical")]
    report.check(not bad, f"the relay logged {len(bad)} errors, e.g. {bad[:3]}")


async def soak(args: argparse.Namespace, workdir: Path) -> Report:
    report = Report()
    provider_key = "sk-soak-" + secrets.token_hex(16)
    relay_token = secrets.token_urlsafe(16)
    (workdir / "soak_tools.py").write_text(TOOLS_MODULE)
    mock_log, relay_log = workdir / "mock.jsonl", workdir / "relay.log"
    environment = {**os.environ, "OPENAI_API_KEY": provider_key, "RELAY_AUTH_TOKEN": relay_token}
    mock = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "mock", "--log", str(mock_log), "--api-key", provider_key,
        stdout=asyncio.subprocess.PIPE, cwd=workdir, env=environment)
    relay: asyncio.subprocess.Process | None = None
    try:
        assert mock.stdout is not None
        mock_url = await first_line(mock.stdout, "the mock")
        relay = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "relay", "serve", "--upstream", mock_url, "--dialect", "openai",
            "--tools", "soak_tools", "--port", "0", "--log-format", "json", "--drain-seconds", "5",
            stderr=asyncio.subprocess.PIPE, cwd=workdir, env=environment)
        assert relay.stderr is not None
        listening: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        with relay_log.open("w") as log:
            copier = asyncio.ensure_future(copy_log(relay.stderr, log, listening))
            async with asyncio.timeout(START_TIMEOUT):
                url = await listening
            report.numbers["relay_rss_start"] = rss_bytes(relay.pid)
            await drive_clients(args, url + "?model=gpt-realtime", relay_token, relay.pid, report)
            report.numbers["relay_exit"] = await stop(relay)
            await copier
    finally:
        if relay is not None and relay.returncode is None:
            relay.kill()
            await relay.wait()
        report.numbers["mock_exit"] = await stop(mock)
    report.check(report.numbers["relay_exit"] == 0, f"the relay exited with {report.numbers['relay_exit']}")
    check_mock_log(mock_log, report)
    check_relay_log(relay_log, provider_key, report.numbers["calls"], report)
    report.check(report.numbers["calls"] == report.numbers["answered"],
                 f"{report.numbers['calls']} calls for {report.numbers['answered']} answered turns")
    return report


async def drive_clients(args: argparse.Namespace, url: str, token: str, relay_pid: int, report: Report) -> None:
    loop = asyncio.get_running_loop()
    tally = Tally()
    begin = loop.time()
    stop_at = begin + args.seconds
    ramp = min(args.period, args.seconds / 4)
    async with asyncio.TaskGroup() as clients:
        for index in range(args.sessions):
            clients.create_task(run_session(index, url, token, begin + ramp * index / args.sessions, stop_at,
                                            args, tally))
        await asyncio.sleep(args.seconds / 3)
        early = rss_bytes(relay_pid)
        await asyncio.sleep(max(0.0, stop_at - loop.time()))
        late = rss_bytes(relay_pid)   # before the clients close: the sessions are all still open
    growth = (late - early) / early
    latencies = sorted(tally.latencies) or [0.0]
    report.numbers.update(
        sessions=args.sessions, connected=tally.connected, turns=tally.turns, answered=tally.answered,
        client_errors=len(tally.errors), relay_rss_third=early, relay_rss_end=late, rss_growth=round(growth, 4),
        latency_p50=round(statistics.median(latencies), 4),
        latency_p99=round(latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 4),
        seconds=round(loop.time() - begin, 2))
    report.check(tally.connected >= args.sessions, f"{tally.connected} connections for {args.sessions} sessions")
    report.check(tally.answered == tally.turns > 0, f"{tally.answered} of {tally.turns} turns answered")
    report.check(not tally.errors, f"{len(tally.errors)} client errors, e.g. {tally.errors[:3]}")
    report.check(growth <= args.max_rss_growth,
                 f"relay memory grew {growth:.1%} from {early} to {late} bytes (limit {args.max_rss_growth:.0%})")


# ---- command line ------------------------------------------------------------------------------

def bounded(kind: type, low: float, high: float) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low:g} and {high:g}")
        return value
    return parse


def main(argv: list[str]) -> int:
    if argv[:1] == ["mock"]:
        parser = argparse.ArgumentParser(prog="soak.py mock", description="the soak's mock upstream")
        parser.add_argument("--log", type=Path, required=True)
        parser.add_argument("--api-key", required=True)
        mock_args = parser.parse_args(argv[1:])
        # the mock's own warnings (a relay killed mid-handshake by scripts/cluster-soak) go beside
        # its journal, not to the soak's output
        logging.basicConfig(filename=mock_args.log.with_suffix(".log"), level=logging.WARNING)
        asyncio.run(serve_mock(mock_args.log, mock_args.api_key))
        return 0
    parser = argparse.ArgumentParser(prog="scripts/soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=bounded(int, 1, MAX_SESSIONS), default=200,
                        help=f"concurrent sessions (default 200, at most {MAX_SESSIONS})")
    parser.add_argument("--seconds", type=bounded(float, 1, MAX_SECONDS), default=60.0,
                        help=f"how long the sessions make calls (default 60, at most {MAX_SECONDS:g})")
    parser.add_argument("--period", type=bounded(float, 0.1, 60), default=3.0,
                        help="mean seconds between one session's calls (default 3)")
    parser.add_argument("--turns-per-session", type=bounded(int, 0, 10_000), default=0,
                        help="reconnect after this many turns (default 0: one connection for the whole run); "
                             "the relay's engine keeps each session's conversation, so only sessions that end "
                             "let its memory level off")
    parser.add_argument("--max-rss-growth", type=bounded(float, 0, 10), default=0.10,
                        help="relay memory growth allowed from a third of the run to its end (default 0.10)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args(argv)
    if not Path("/proc/self/status").exists():
        print("scripts/soak measures the relay's memory in /proc: it runs on Linux only", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="relay-soak-") as workdir:
        started = time.monotonic()
        report = asyncio.run(soak(args, Path(workdir)))
    report.numbers["wall_seconds"] = round(time.monotonic() - started, 2)
    if args.json:
        print(json.dumps({"ok": not report.failures, "failures": report.failures, **report.numbers}))
    else:
        for key, value in report.numbers.items():
            print(f"{key:>20}: {value}")
        print("PASS" if not report.failures else "FAIL:\n  " + "\n  ".join(report.failures))
    return 0 if not report.failures else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
