"""The fleet soak (slow tier): Redis, the mock provider with sideband attach, three `relay sidecar`
replicas (subprocesses) sharing the store, and SESSIONS calls of TURNS turns each, every turn a
tool call of 0.1 to 2 s. Mid-run one replica is SIGKILLed while a tool of it runs, and another is
drained (SIGTERM). At the end every call the model made is answered exactly once at the mock,
every effect is applied once (by the call's number, and by its idempotency key for the keyed
tool), and every live call has an owner. Prints the takeover and handoff latencies (p50/p99),
and the calls answered whose follow-up `response.create` died with the killed owner (the model
then says nothing about them until the next turn: docs/guarantees.md says so).

The kill comes while a tool of the killed replica has KILL_MARGIN seconds to run at least (each
run says when it ends at the earliest). While a replica is killed or drained, no new user turn
starts (the gate, `Turns.open`: closed and checked in one step with a turn's start), and a call's
next turn waits until a live replica serves it (`Turns.owned`; a replica killed serves nothing
from the kill on, reaped or not): what the provider says while no replica is attached is not
replayed to the next one (docs/guarantees.md), and this soak measures what the relay promises, not
that gap. Every wait is on an event (`Changes`: a log line, a tool's start, a turn's step), with a
timeout."""

from __future__ import annotations

import json
import signal
import statistics
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis.asyncio as aioredis

from relay.edges.sidecar import INCOMING_CALL, signed_headers
from relay.mock import MockScript, MockUpstream, Reply, Rule, ToolCall
from relay.mock.session import MockSession
from tests.support.frames import said
from tests.support.processes import relay_process
from tests.support.redis_server import free_port
from tests.support.relays import http_request

pytestmark = pytest.mark.soak

TOOLS = Path(__file__).parent / "tools" / "soak_tools.py"
SECRET = "whsec_dGVzdA=="
SESSIONS, TURNS = 40, 5
LEASE = 2.0
TIMEOUT = 60.0
FOLLOW_UP_WAIT = 10.0   # how long a turn waits for the model to speak once its call is answered
KILL_MARGIN = 0.3   # the kill comes while a tool of the replica killed has this many seconds to run at least


def script() -> MockScript:
    """Turn `n` of the soak asks for call number n: charge on even n, reserve on odd."""
    rules = [Rule(match=f"call #{n:04d}.", calls=[ToolCall(name="charge" if n % 2 == 0 else "reserve",
                                                          arguments={"n": n})])
             for n in range(SESSIONS * TURNS)]
    return MockScript(rules=rules, after_outputs=Reply(say="Done: {output}"))


def seconds(line: dict[str, Any]) -> float:
    """A log line's time, as Unix seconds."""
    return datetime.fromisoformat(line["ts"].replace("Z", "+00:00")).timestamp()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class Changes:
    """What the soak waits for changes only when one of its sources says so: a replica's log line
    (or the end of its log), a tool's start, a turn's step, the gate. `changed()` wakes every wait
    to look again; `until(check)` returns once `check()` holds, at once and without yielding when
    it holds already, so that what the caller does next happens in the same step as the check."""

    def __init__(self) -> None:
        self._event = anyio.Event()

    def changed(self) -> None:
        self._event.set()
        self._event = anyio.Event()

    async def until(self, check: Callable[[], bool], timeout: float = TIMEOUT) -> None:
        with anyio.fail_after(timeout):
            while not check():
                await self._event.wait()


class Replica:
    """One `relay sidecar` subprocess: its process, port, the log lines it wrote, and the calls it
    serves by its log."""

    def __init__(self, process: Any, port: int, changes: Changes) -> None:
        self.process = process
        self.port = port
        self.changes = changes
        self.lines: list[dict[str, Any]] = []
        self.serving: set[str] = set()   # call ids it said "session start" for, and no "session end" since
        self.listening = False
        self.log_ended = False
        self.killed = False   # SIGKILLed by the test: it serves nothing from that instant, reaped or not

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/webhooks/openai"

    @property
    def alive(self) -> bool:
        return not self.killed and self.process.returncode is None

    async def read_log(self) -> None:
        async for line in self.process.stderr:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            self.lines.append(record)
            message, call_id = str(record.get("msg", "")), record.get("realtime_call_id")
            if message == "session start" and call_id:
                self.serving.add(call_id)
            elif message == "session end":
                self.serving.discard(call_id)
            self.listening = self.listening or message.startswith("listening on")
            self.changes.changed()
        self.log_ended = True
        self.changes.changed()

    def said(self, message: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("msg") == message]


@asynccontextmanager
async def replica(group: Any, mock: MockUpstream, redis_url: str, changes: Changes) -> AsyncIterator[Replica]:
    """A `relay sidecar` subprocess on the store, once it listens (its log read in `group`)."""
    port = free_port()
    async with relay_process(
            "sidecar", "--port", str(port), "--upstream", mock.url, "--rest-base", mock.rest_url,
            "--tools", str(TOOLS), "--store", redis_url, "--lease-seconds", str(LEASE), "--drain-seconds", "30",
            "--log-format", "json", env={"RELAY_TEST_REDIS": redis_url, "OPENAI_WEBHOOK_SECRET": SECRET}) as process:
        made = Replica(process, port, changes)
        group.start_soon(made.read_log)
        await changes.until(lambda: made.listening or made.log_ended)
        assert made.listening, made.lines
        yield made


class Turns:
    """The sessions' user turns, each waiting for its call's answer at the provider, then for the
    model to speak about it; and the gate that holds new turns back while a replica is killed or
    drained."""

    def __init__(self, mock: MockUpstream, replicas: list[Replica], changes: Changes) -> None:
        self.mock = mock
        self.replicas = replicas
        self.changes = changes
        self.open = True   # the gate
        self.in_turn: dict[str, int] = {}   # session id -> the call number of its turn under way
        self.started: dict[int, list[tuple[int, float]]] = {}   # call number -> (pid, until) of each run
        self.stuck: list[tuple[MockSession, int]] = []   # turns never answered (what a failure shows)
        self.silent: list[int] = []   # calls answered whose follow-up response never came
        self.done = 0

    async def run(self, session: MockSession, first: int) -> None:
        for turn in range(TURNS):
            n = first + turn
            # the gate's check and the turn's entry in `in_turn` are one step: a kill or a drain
            # that closes the gate finds every turn past it in `in_turn`, none on its way
            await self.changes.until(lambda: self.open, TIMEOUT * 2)
            self.in_turn[session.id] = n
            await self.changes.until(lambda: self.owned(session))
            sent, received = len(self.mock.sent), len(self.mock.received)
            await self.mock.user_turn(session, f"Please handle call #{n:04d}.")
            try:
                made = await self.mock.wait_for_sent(
                    lambda e: e["type"] == "response.output_item.done" and e["item"].get("type") == "function_call",
                    timeout=TIMEOUT, session=session, start=sent)
                await self.mock.wait_for(   # answered at the provider: the turn's promise
                    lambda e: e["type"] == "conversation.item.create" and e["item"].get("type") == "function_call_output"
                    and e["item"]["call_id"] == made.event["item"]["call_id"],
                    timeout=TIMEOUT, session=session, start=received)
            except TimeoutError:
                self.stuck.append((session, n))
                raise
            try:   # and the model speaks about it, unless the follow-up died with its owner
                await self.mock.wait_for_sent(lambda e: e["type"] == "response.done" and "Done:" in said(e),
                                              timeout=FOLLOW_UP_WAIT, session=session, start=sent)
            except TimeoutError:
                self.silent.append(n)
            del self.in_turn[session.id]
            self.done += 1
            self.changes.changed()

    def owned(self, session: MockSession) -> bool:
        """A replica serves the call: one alive that said "session start" for it and no "session
        end" since. It says so once attached and holding the call's lease, so the provider has its
        sideband and what the provider says from then on reaches a replica that acts on it. One
        that lost the race for the lease attaches for a moment and never says it; one killed is
        counted out at the kill, before it is reaped: a turn played to it is said while no replica
        is attached, which docs/guarantees.md does not promise to carry (it is not replayed)."""
        return any(session.call_id in replica.serving for replica in self.replicas if replica.alive)

    def started_tool(self, record: str) -> None:
        """A tool's run began (`<tool> <n> <pid> <until>`, tests/store/tools/soak_tools.py)."""
        _, n, pid, until = record.split()
        self.started.setdefault(int(n), []).append((int(pid), float(until)))
        self.changes.changed()

    def runs_on(self, replica: Replica, *, for_at_least: float | None = None) -> list[int]:
        """The turns under way whose tool ran on `replica` (and runs `for_at_least` seconds more)."""
        now = time.time()
        return [n for n in self.in_turn.values()
                if any(pid == replica.process.pid and (for_at_least is None or until - now >= for_at_least)
                       for pid, until in self.started.get(n, []))]

    async def quiet(self) -> None:
        """Close the gate, and return once every turn under way has its tool started."""
        self.open = False
        await self.changes.until(lambda: set(self.in_turn.values()) <= self.started.keys())

    def reopen(self) -> None:
        self.open = True
        self.changes.changed()


class Kill:
    """The kill as the figures and checks need it: the call numbers whose tool ran on the killed
    replica at its death, the calls it served then, and when it died."""

    def __init__(self, mid_tool: list[int], orphaned: set[str], at: float) -> None:
        self.mid_tool = mid_tool
        self.orphaned = orphaned
        self.at = at


async def kill_mid_tool(turns: Turns, killed: Replica) -> Kill:
    """SIGKILL `killed` while a tool of it runs for KILL_MARGIN seconds more at least: the gate
    closes, and once every turn under way has its tool started, the kill comes if such a tool is
    among them; else the gate opens until the replica starts another tool, and again."""
    while True:
        await turns.quiet()
        if turns.runs_on(killed, for_at_least=KILL_MARGIN):
            break
        turns.reopen()
        runs = sum(pid == killed.process.pid for started in turns.started.values() for pid, _ in started)
        await turns.changes.until(lambda: sum(pid == killed.process.pid for started in turns.started.values()
                                              for pid, _ in started) > runs)
    kill = Kill(turns.runs_on(killed), set(killed.serving), time.time())
    killed.process.send_signal(signal.SIGKILL)
    killed.killed = True
    with anyio.fail_after(TIMEOUT):
        await killed.process.wait()
    turns.reopen()
    return kill


async def drive(turns: Turns, sessions: list[MockSession], replicas: list[Replica]) -> Kill:
    """Every session's turns, with the first replica killed mid-tool once a third of the turns
    are done and the second drained at two thirds."""
    async with anyio.create_task_group() as driving:
        for index, session in enumerate(sessions):
            driving.start_soon(turns.run, session, index * TURNS)
        killed, drained = replicas[0], replicas[1]
        await turns.changes.until(lambda: turns.done >= SESSIONS * TURNS // 3, TIMEOUT * 2)
        kill = await kill_mid_tool(turns, killed)
        await turns.changes.until(lambda: turns.done >= 2 * SESSIONS * TURNS // 3, TIMEOUT * 2)
        await turns.quiet()
        drained.process.send_signal(signal.SIGTERM)
        with anyio.fail_after(TIMEOUT):
            await drained.process.wait()
        turns.reopen()
    return kill


@pytest.mark.timeout(600)
async def test_a_fleet_of_three_keeps_every_call_through_a_kill_and_a_drain(redis_url: str) -> None:
    effects = aioredis.Redis.from_url(redis_url)
    await effects.flushdb()
    changes = Changes()

    async with MockUpstream(script=script()) as mock, AsyncExitStack() as stack, \
            anyio.create_task_group() as group:
        replicas = [await stack.enter_async_context(replica(group, mock, redis_url, changes)) for _ in range(3)]
        turns = Turns(mock, replicas, changes)

        async def watch_starts() -> None:
            while True:
                found = await effects.blpop(["started"], timeout=1)
                if found is not None:
                    turns.started_tool(found[1].decode())

        group.start_soon(watch_starts)
        sessions = []
        for index in range(SESSIONS):
            call_id = mock.create_call()
            session = mock.find_session(call_id)
            assert session is not None
            owner = replicas[index % 3]
            body = json.dumps({"type": INCOMING_CALL, "data": {"call_id": call_id}}).encode()
            headers = signed_headers(SECRET, body, webhook_id=f"wh_{index}", timestamp=int(time.time()))
            assert (await http_request("POST", owner.url, headers, body)).status_code == 200
            sessions.append(session)
        try:
            kill = await drive(turns, sessions, replicas)
        except BaseException:
            for session, n in turns.stuck:
                print("STUCK", n, session.call_id, [c.closed for c in session.connections])
                # the mock's own state: a response still active, or the conversation's tail
                print("  active response", session.active_response,
                      [(run.id, run.status, run.origin, run.out_of_band) for run in session.responses][-4:])
                print("  last items", [(item.get("type"), item.get("role"), item.get("call_id"))
                                       for item in session.items][-6:])
                for record in mock.received:   # what reached the provider from each sideband
                    if record.session_id == session.id:
                        item = record.event.get("item") or {}
                        print("  received on", record.connection, record.event.get("type"), item.get("call_id", ""))
                for r, made in enumerate(replicas):
                    for line in made.lines:
                        if line.get("realtime_call_id") == session.call_id:
                            print("  replica", r, line)
            raise
        # every live call has an owner: each listed, none of its leases expired or offered
        assert await effects.hlen("relay:sessions") == SESSIONS
        assert not await effects.zrangebyscore("relay:expiry", "-inf", time.time() * 1000)
        assert await effects.scard("relay:offered") == 0
        group.cancel_scope.cancel()

    _, drained, survivor = replicas
    # every call the model made answered exactly once
    calls = {}
    for record in mock.sent:
        event = record.event
        if event.get("type") == "response.output_item.done" and event["item"].get("type") == "function_call":
            calls[event["item"]["call_id"]] = json.loads(event["item"]["arguments"])["n"]
    # what the provider took into the conversation: an output a new owner sent again as the old
    # owner's item, and that the provider refused as a duplicate, is no second answer
    outputs: dict[str, dict[str, str]] = {}   # call id -> output item id -> output
    for record in mock.sent:
        item = record.event.get("item")
        if record.event.get("type") in ("conversation.item.added", "conversation.item.created") \
                and isinstance(item, dict) and item.get("type") == "function_call_output":
            outputs.setdefault(item["call_id"], {})[item["id"]] = item["output"]
    duplicates = sum(1 for record in mock.sent if record.event.get("type") == "error"
                     and record.event["error"].get("code") == "duplicate_item_id")
    assert len(calls) == SESSIONS * TURNS
    assert all(len(outputs.get(call_id, {})) == 1 for call_id in calls), \
        {call_id: outputs.get(call_id) for call_id in calls if len(outputs.get(call_id, {})) != 1}
    # every effect applied once
    refused = {calls[call_id] for call_id, taken in outputs.items() if "not retried" in [*taken.values()][0]}
    for n in range(SESSIONS * TURNS):
        if n % 2 == 0:
            count = int(await effects.get(f"charge:{n}") or 0)
            assert count == 1 or (count == 0 and n in refused), (n, count)
    reserved = await effects.keys("reserve:*")
    assert len(reserved) == SESSIONS * TURNS // 2
    # the figures
    taken: dict[str, float] = {}   # each of the killed replica's calls: when it was first taken over
    for line in survivor.said("call taken over") + drained.said("call taken over"):
        at = seconds(line)
        if line.get("realtime_call_id") in kill.orphaned and at > kill.at:
            taken[line["realtime_call_id"]] = min(at, taken.get(line["realtime_call_id"], at))
    takeovers = [at - kill.at for at in taken.values()]
    fates = {fate: sum(line.get(fate, 0) for line in survivor.said("call taken over") + drained.said("call taken over"))
             for fate in ("retried", "refused", "answered")}   # what the takeovers and handoffs did
    offered = {line["realtime_call_id"]: seconds(line) for line in drained.said("call offered to a peer")}
    handed = {line["realtime_call_id"]: seconds(line) for line in drained.said("call handed off to a peer: detaching")}
    handoffs = [handed[call] - offered[call] for call in handed if call in offered]
    retried = [n for n in range(1, SESSIONS * TURNS, 2) if int(await effects.get(f"reserve_runs:{n}") or 0) > 1]
    print(json.dumps({
        "calls": len(calls), "refused": len(refused), "keyed_run_again": len(retried),
        "turns_under_way_at_kill": len(kill.mid_tool), "owed_calls_after_handovers": fates,
        "answered_without_follow_up": turns.silent, "outputs_resent_refused_as_duplicates": duplicates,
        "takeovers": len(takeovers), "takeover_p50_s": round(statistics.median(takeovers), 3),
        "takeover_p99_s": round(percentile(takeovers, 0.99), 3),
        "handoffs": len(handoffs), "handoff_p50_s": round(statistics.median(handoffs), 3),
        "handoff_p99_s": round(percentile(handoffs, 0.99), 3)}))
    assert kill.mid_tool and len(takeovers) == len(kill.orphaned) and handoffs
    assert refused or retried                         # the kill caught a tool mid-run
    assert refused | set(retried) <= set(kill.mid_tool)   # only a call caught mid-tool is refused or run again
    assert set(turns.silent) <= set(kill.mid_tool)       # a follow-up is lost only with the owner that owed it
    assert all(n % 2 == 0 for n in refused) and all(n % 2 == 1 for n in retried)
    await effects.aclose()
