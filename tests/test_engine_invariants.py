"""The ledger invariant under random interleavings of upstream events, frames in flight and
handler completions: every ready relay-owned call gets exactly one output, the relay never sends
`response.create` while it knows a response is active, client-owned calls are never answered by
the relay, and no batch is left without the follow-up it needs."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.engine import (
    CallState,
    CancelHandler,
    OpenAIEngine,
    EngineConfig,
    Outcome,
    Owner,
    SendClient,
    SendUpstream,
    StartHandler,
)
from relay.tools import tool
from tests.support.local_mock import OTHER, RELAY, LocalMock, model_call


@tool
def lookup(key: str) -> str:
    return f"value of {key}"


@tool(timeout=5)
def slow_lookup(key: str) -> str:
    return f"slow value of {key}"


@tool(scheduling="silent")
def log_event(name: str) -> str:
    return "logged"


@tool(scheduling="interrupt")
def urgent(reason: str) -> str:
    return "urgent"


@tool(interruption="cancel")
def cancellable(key: str) -> str:
    return "cancellable"


@tool(interruption="finish_and_speak", on_start="One moment.", on_delay=(1500, "Still working on it."))
def chatty(key: str) -> str:
    return "chatty"


@tool
async def stream_prices(symbol: str):
    yield {"symbol": symbol, "price": 1}
    yield {"symbol": symbol, "price": 2}


TOOLS = [lookup, slow_lookup, log_event, urgent, cancellable, chatty, stream_prices]
CALLS = [
    model_call("lookup", '{"key":"a"}'), model_call("slow_lookup", '{"key":"b"}'),
    model_call("log_event", '{"name":"x"}'), model_call("urgent", '{"reason":"r"}'),
    model_call("cancellable", '{"key":"c"}'), model_call("chatty", '{"key":"d"}'),
    model_call("stream_prices", '{"symbol":"ACME"}'), model_call("lookup", "{broken"),
    model_call("client_tool", '{"q":1}'),
]


class Simulation:
    """Engine and mock upstream with frames in flight both ways, driven step by step."""

    def __init__(self, mode: str) -> None:
        self.engine = OpenAIEngine(TOOLS, config=EngineConfig(mode=mode, strict=True), session_id="sim", id_prefix="s")
        self.mock = LocalMock()
        self.now = 100.0
        self.to_server: deque[tuple[str, int]] = deque()   # frames and the connection they come from
        self.to_engine: deque[str] = deque()
        self.running: dict[str, StartHandler] = {}
        self.yields: dict[str, int] = {}
        self.started: list[str] = []
        self.cancelled: set[str] = set()
        self.engine_outputs: list[str] = []
        self.known_active: set[str] = set()   # responses created and not done, as delivered
        self.lost_item: str | None = None       # an item whose closing events are lost
        self.violations: list[str] = []
        self.mode = mode
        # order of what reached the mock, for the client-answers-early invariant
        self.seq = 0
        self.output_seq: dict[str, int] = {}     # call_id -> when its output reached the mock
        self.created_seq: list[int] = []         # when each in-conversation response was created
        self.answered_seq: dict[str, int] = {}   # client call_id -> when the client answered it
        self.create_seq: list[int] = []          # when the client asked for a response
        self._queue_events(self.mock.connect())

    def _queue_events(self, events: list[dict[str, Any]]) -> None:
        for event in events:
            if self.lost_item is not None:
                event = self._without_lost_closing(event)
            if event is not None:
                self.to_engine.append(json.dumps(event))

    def _without_lost_closing(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """The events that close the lost item never arrive, and `response.done` lists it as it last
        was: in progress (or incomplete, when the response was cancelled)."""
        item_id = event.get("item_id") or (event.get("item") or {}).get("id")
        if item_id == self.lost_item and event["type"].endswith(".done"):
            return None
        if event["type"] == "response.done":
            self.lost_item, lost = None, self.lost_item
            if event["response"]["status"] == "completed":
                for item in event["response"]["output"]:
                    if item["id"] == lost:
                        item["status"] = "in_progress"
        return event

    def _act(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, SendUpstream):
                event = json.loads(action.frame)
                ours = str(event.get("event_id", "")).startswith("s_")
                if event["type"] == "response.create" and self.known_active and (ours or self.mode == "proxy"):
                    # the relay's own, or (proxy) a client's it forwarded: it holds those while busy
                    self.violations.append(f"create {event.get('event_id')} while {self.known_active} active")
                item = event.get("item") or {}
                if item.get("type") == "function_call_output" and str(item.get("id", "")).startswith("s_"):
                    self.engine_outputs.append(item["call_id"])  # the relay's own, not a forwarded client frame
                self.to_server.append((action.frame, RELAY))
            elif isinstance(action, StartHandler):
                self.running[action.call_id] = action
                self.started.append(action.call_id)
            elif isinstance(action, CancelHandler):
                self.running.pop(action.call_id, None)
                self.cancelled.add(action.call_id)
            elif isinstance(action, SendClient):
                pass

    # ---- steps ----------------------------------------------------------------------------
    def deliver_to_engine(self) -> None:
        if self.to_engine:
            frame = self.to_engine.popleft()
            event = json.loads(frame)
            if event["type"] == "response.created":
                self.known_active.add(event["response"]["id"])
            elif event["type"] == "response.done":
                self.known_active.discard(event["response"]["id"])
            self._act(self.engine.receive_upstream(frame, self.now))

    def deliver_to_server(self) -> None:
        if self.to_server:
            frame, origin = self.to_server.popleft()
            self.seq += 1
            item = json.loads(frame).get("item") or {}
            if item.get("type") == "function_call_output":
                self.output_seq.setdefault(item["call_id"], self.seq)
            events = self.mock.receive(frame, origin)
            self.created_seq += [self.seq for e in events if e["type"] == "response.created"
                                 and e["response"].get("conversation_id") is not None]
            self._queue_events(events)

    def model_response(self, picks: list[int], finish: bool, unfinished: bool, lost: bool) -> None:
        """The model starts a response; `unfinished` leaves it at the first delta of its last item,
        and with `lost` the events that would close that item never arrive."""
        if self.mock.active is None:
            outputs: list[Any] = ["Let me check."] if len(picks) % 2 or not picks else []
            outputs += [CALLS[p] for p in picks]
            last = len(outputs) - 1
            stop = (lambda e: e.get("output_index") == last and e["type"].endswith(".delta")) if unfinished else None
            events = self.mock.respond(outputs, finish=finish and not unfinished, stop=stop)
            if unfinished and lost:
                self.lost_item = events[-1]["item_id"]
            self._queue_events(events)

    def finish_active(self) -> None:
        self._queue_events(self.mock.finish_response())

    def barge_in(self) -> None:
        self._queue_events(self.mock.barge_in())

    def handler_step(self, pick: int, fail: bool) -> None:
        if not self.running:
            return
        call_id = sorted(self.running)[pick % len(self.running)]
        start = self.running[call_id]
        if start.tool.name == "stream_prices" and self.yields.get(call_id, 0) < 2 and not fail:
            self.yields[call_id] = self.yields.get(call_id, 0) + 1
            self._act(self.engine.handler_yielded(call_id, {"n": self.yields[call_id]}, self.now))
            return
        del self.running[call_id]
        if start.tool.name == "stream_prices" and not fail:
            outcome = Outcome.ended()
        else:
            outcome = Outcome.raised(RuntimeError("boom")) if fail else Outcome.returned(start.tool.handler(**start.arguments))
        self._act(self.engine.handler_finished(call_id, outcome, self.now))

    def client_answers(self) -> None:
        for entry in self.engine.ledger:
            if entry.owner is Owner.CLIENT and entry.state is CallState.COMPLETE and entry.output is None:
                frame = json.dumps({"type": "conversation.item.create",
                                    "item": {"type": "function_call_output", "call_id": entry.call_id,
                                             "output": "client says ok"}})
                entry.output = "sent"   # once
                self.seq += 1
                self.answered_seq[entry.call_id] = self.seq
                if self.mode == "proxy":
                    self._act(self.engine.receive_client(frame, self.now))
                else:
                    self.to_server.append((frame, OTHER))  # a second writer on the same session

    def client_create(self) -> None:
        """The client (proxy) or the other writer (sidecar) asks for a response."""
        frame = json.dumps({"type": "response.create", "event_id": f"client_{len(self.to_server)}"})
        self.seq += 1
        self.create_seq.append(self.seq)
        if self.mode == "proxy":
            self._act(self.engine.receive_client(frame, self.now))
        else:
            self.to_server.append((frame, OTHER))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._act(self.engine.tick(self.now))
        deadline = self.engine.next_deadline()
        if deadline is not None and deadline <= self.now:   # the edge's timer would tick again at once, forever
            self.violations.append(f"a deadline a tick left in the past: {deadline} at {self.now}")

    def settle(self) -> None:
        """Let everything finish: handlers, frames, timers, responses."""
        for _ in range(400):
            moved = bool(self.to_engine or self.to_server or self.running or self.mock.active)
            while self.to_engine or self.to_server:
                self.deliver_to_engine()
                self.deliver_to_server()
            if self.running:
                self.handler_step(0, False)
                continue
            if self.mock.active:
                self.finish_active()
                continue
            self.advance(3.0)
            if not moved and not self.to_server and not self.to_engine:
                break


STEPS = st.one_of(
    st.tuples(st.just("engine"), st.integers(1, 6)),
    st.tuples(st.just("server"), st.integers(1, 3)),
    st.tuples(st.just("respond"), st.lists(st.integers(0, len(CALLS) - 1), min_size=0, max_size=4),
              st.booleans(), st.booleans(), st.booleans()),
    st.tuples(st.just("finish")),
    st.tuples(st.just("barge_in")),
    st.tuples(st.just("handler"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("client")),
    st.tuples(st.just("client_create")),
    st.tuples(st.just("client_early")),   # answers its calls as soon as their items are done, asks at once
    st.tuples(st.just("tick"), st.sampled_from([0.1, 0.5, 1.0, 2.0, 6.0])),
)


def run(mode: str, steps: list[tuple]) -> Simulation:
    sim = Simulation(mode)
    run_steps(sim, steps)
    sim.settle()
    return sim


def run_steps(sim: Simulation, steps: list[tuple]) -> None:
    for step in steps:
        kind = step[0]
        if kind == "engine":
            for _ in range(step[1]):
                sim.deliver_to_engine()
        elif kind == "server":
            for _ in range(step[1]):
                sim.deliver_to_server()
        elif kind == "respond":
            sim.model_response(step[1], step[2], step[3], step[4])
        elif kind == "finish":
            sim.finish_active()
        elif kind == "barge_in":
            sim.barge_in()
        elif kind == "handler":
            sim.handler_step(step[1], step[2])
        elif kind == "client":
            sim.client_answers()
        elif kind == "client_create":
            sim.client_create()
        elif kind == "client_early":
            sim.client_answers()
            sim.client_create()
        else:
            sim.advance(step[1])
        view = getattr(sim.engine, "view", None)
        if view is not None and view.held_past_limit():
            sim.violations.append(f"a client's response.create held past the hold limit at {sim.now}")


def check(sim: Simulation) -> None:
    assert not sim.violations, sim.violations
    engine = sim.engine
    assert not engine.anomalies or all(
        not a.internal for a in engine.anomalies), engine.anomalies
    relay_outputs = [i for i in sim.mock.items if i["type"] == "function_call_output" and i["id"].startswith("s_")]
    for entry in engine.ledger:
        sent = sim.engine_outputs.count(entry.call_id)
        landed = [i for i in relay_outputs if i["call_id"] == entry.call_id]
        if entry.owner is Owner.CLIENT:
            assert sent == 0, f"relay answered client call {entry.call_id}"
            continue
        if entry.state is CallState.SKIPPED:
            assert sent == 0 and entry.call_id not in sim.started
            continue
        assert entry.ready_at is not None, entry
        assert entry.state is CallState.ANSWERED, (entry.call_id, entry.state)
        assert sent == 1 and len(landed) == 1, (entry.call_id, sent, landed)
        response = engine.conversation.responses[entry.response_id]
        client_calls = [e for e in engine.ledger if e.response_id == entry.response_id and e.owner is Owner.CLIENT
                        and e.state is not CallState.SKIPPED]
        if client_calls and not response.asked_before_outputs:
            assert entry.follow_up_event_id is None, "the client asks for the response when it has calls too"
        if (entry.speak and entry.scheduling != "silent" and (not client_calls or response.asked_before_outputs)
                and response.status != "unknown"):
            assert entry.follow_up_response_id is not None, f"no follow-up for {entry.call_id}: silence"
    assert sim.mock.active is None
    if sim.mode == "proxy":
        check_client_answered_early(sim)


def check_client_answered_early(sim: Simulation) -> None:
    """A response whose calls the client and the relay both answered, after which the client
    asked for a response: the model spoke again after the last of those outputs (the relay held
    the client's create until its own outputs were in), never before it alone."""
    ledger = sim.engine.ledger
    responses = {e.response_id for e in ledger if e.owner is Owner.CLIENT and e.call_id in sim.answered_seq}
    for response_id in responses:
        calls = [e for e in ledger if e.response_id == response_id and e.state is not CallState.SKIPPED]
        client_calls = [e for e in calls if e.owner is Owner.CLIENT]
        if any(e.call_id not in sim.answered_seq for e in client_calls):
            continue
        if any(e.call_id not in sim.output_seq for e in calls if e.owner is Owner.RELAY):
            continue
        last_answer = max(sim.answered_seq[e.call_id] for e in client_calls)
        if not any(seq > last_answer for seq in sim.create_seq):
            continue   # the client never asked: it is the client's silence, not the relay's
        last_output = max(sim.output_seq[e.call_id] for e in calls if e.call_id in sim.output_seq)
        assert any(seq > last_output for seq in sim.created_seq), \
            f"the client asked for a response after answering in {response_id}, and none came after its outputs"


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEPS, max_size=40))
def test_proxy_invariants_hold_under_random_interleavings(steps) -> None:
    check(run("proxy", steps))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEPS, max_size=40))
def test_sidecar_invariants_hold_under_random_interleavings(steps) -> None:
    check(run("sidecar", steps))


# The client answers its own call early, in a response that also holds relay calls: the model
# must speak once more after every output, and no create may meet an active response.
EARLY_STEPS = st.lists(st.one_of(
    st.tuples(st.just("engine"), st.integers(1, 8)),
    st.tuples(st.just("server"), st.integers(1, 3)),
    st.tuples(st.just("handler"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("client_early")),
    st.tuples(st.just("client_create")),
    st.tuples(st.just("finish")),
    st.tuples(st.just("tick"), st.sampled_from([0.5, 2.0, 6.0])),
), max_size=30)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.permutations([0, 1, 4]), st.integers(1, 3), st.integers(0, 3), EARLY_STEPS)
def test_a_client_answering_early_is_never_left_silent(relay_calls, count, client_at, steps) -> None:
    """One response with the client's call among one to three relay calls, held open; then any
    interleaving of deliveries, handler ends, the client answering early and asking, the response
    ending, timers; at the end the client answers what is left and asks again."""
    picks = list(relay_calls[:count])
    picks.insert(min(client_at, len(picks)), 8)   # CALLS[8] is the client's tool
    sim = Simulation("proxy")
    sim.model_response(picks, finish=False, unfinished=False, lost=False)
    run_steps(sim, [*steps, ("engine", 100), ("client_early",)])
    sim.settle()
    check(sim)


def test_outputs_after_a_create_released_at_the_hold_limit_get_their_own_follow_up() -> None:
    """Hypothesis's find: the client answers its call early and asks; a relay tool still runs at
    the hold limit, so the client's create goes up without its output; the output that lands
    after it is spoken by the relay's own follow-up, beside the client's call (no silence)."""
    steps = [("engine", 1)] * 5 + [("engine", 6), ("engine", 8), ("engine", 8), ("client_early",),
                                   ("engine", 1), ("engine", 1), ("engine", 1), ("engine", 5),
                                   ("handler", 0, False), ("finish",), ("engine", 1), ("tick", 6.0),
                                   ("handler", 0, False)]
    sim = Simulation("proxy")
    sim.model_response([8, 0, 1, 4], finish=False, unfinished=False, lost=False)
    run_steps(sim, [*steps, ("engine", 100), ("client_early",)])
    sim.settle()
    check(sim)
    assert any(e.follow_up_event_id for e in sim.engine.ledger if e.owner is Owner.RELAY)
