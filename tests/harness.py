"""Drive an Engine against the sans-I/O FakeServer with a fake clock: no sockets, no loop.

Frames the engine sends upstream are delivered to the fake server at once and its answers fed
back, in order, until nothing moves. Handlers do not run by themselves: a test decides when
each one finishes (`finish`, `fail`, `run_all`), which is how it orders completions.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any, Iterable

from relay.dialects import OPENAI, Dialect
from relay.engine import (
    CancelHandler,
    OpenAIEngine,
    EngineConfig,
    Notice,
    Outcome,
    SendClient,
    SendUpstream,
    StartHandler,
)
from tests.fakeserver import FakeServer


class Harness:
    def __init__(self, tools: Iterable[Any] = (), *, config: EngineConfig | None = None,
                 dialect: Dialect = OPENAI, server: FakeServer | None = None,
                 deliver: bool = True) -> None:
        self.engine = OpenAIEngine(tools, dialect=dialect, config=config or EngineConfig(strict=True),
                             session_id="test", id_prefix="t")
        self.server = server or FakeServer(ga=dialect.wire == "ga", foundry=dialect.foundry_fields)
        self.now = 1000.0
        self.deliver = deliver            # send the engine's frames to the fake server at once
        self.sent: list[dict[str, Any]] = []        # every frame the engine sent upstream
        self.undelivered: deque[str] = deque()      # when deliver is False
        self.to_client: list[dict[str, Any]] = []
        self.started: dict[str, StartHandler] = {}
        self.cancelled: list[CancelHandler] = []
        self.notices: list[Notice] = []
        self._inbox: deque[tuple[str, Any]] = deque()
        self._busy = False
        self._finished: set[str] = set()

    # ---- feeding ---------------------------------------------------------------------------
    def upstream(self, events: list[dict[str, Any]] | dict[str, Any]) -> None:
        for event in [events] if isinstance(events, dict) else events:
            self._inbox.append(("upstream", json.dumps(event)))
        self._drain()

    def upstream_raw(self, frame: str | bytes) -> None:
        self._inbox.append(("upstream", frame))
        self._drain()

    def client(self, event: dict[str, Any] | str) -> None:
        self._inbox.append(("client", event if isinstance(event, str) else json.dumps(event)))
        self._drain()

    def connect(self) -> None:
        self.upstream(self.server.connect())

    def respond(self, outputs: list[Any], **kwargs: Any) -> None:
        """The model produces a response (server-initiated, like VAD)."""
        self.upstream(self.server.start_response(outputs, **kwargs))

    def flush(self) -> None:
        """Deliver frames held back while `deliver` was False."""
        while self.undelivered:
            self.upstream(self.server.receive(self.undelivered.popleft()))

    def disconnect(self) -> None:
        self._act(self.engine.upstream_disconnected(self.now))

    def reconnect(self) -> None:
        self._act(self.engine.upstream_reconnected(self.now))
        self._drain()

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._inbox.append(("tick", None))
        self._drain()

    def finish(self, call_id: str, value: Any = None, *, dt: float = 0.001) -> None:
        self.now += dt
        self._inbox.append(("finished", (call_id, Outcome.returned(value))))
        self._drain()

    def fail(self, call_id: str, error: BaseException, *, dt: float = 0.001) -> None:
        self.now += dt
        self._inbox.append(("finished", (call_id, Outcome.raised(error))))
        self._drain()

    def yield_value(self, call_id: str, value: Any) -> None:
        self._inbox.append(("yielded", (call_id, value)))
        self._drain()

    def end_stream(self, call_id: str) -> None:
        self._inbox.append(("finished", (call_id, Outcome.ended())))
        self._drain()

    def run_all(self) -> None:
        """Run every started sync handler that has not reported yet, in start order."""
        for call_id, start in list(self.started.items()):
            if call_id in self._reported:
                continue
            try:
                value = start.tool.handler(**start.arguments)
            except Exception as exc:  # reported like the runner does
                self.fail(call_id, exc)
            else:
                self.finish(call_id, value)

    @property
    def _reported(self) -> set[str]:
        return {c.call_id for c in self.cancelled} | self._finished

    def _drain(self) -> None:
        if self._busy:
            return
        self._busy = True
        try:
            while self._inbox:
                kind, payload = self._inbox.popleft()
                if kind == "upstream":
                    actions = self.engine.receive_upstream(payload, self.now)
                elif kind == "client":
                    actions = self.engine.receive_client(payload, self.now)
                elif kind == "tick":
                    actions = self.engine.tick(self.now)
                elif kind == "yielded":
                    actions = self.engine.handler_yielded(payload[0], payload[1], self.now)
                else:
                    self._finished.add(payload[0])
                    actions = self.engine.handler_finished(payload[0], payload[1], self.now)
                self._act(actions)
        finally:
            self._busy = False

    def _act(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, SendUpstream):
                self.sent.append(json.loads(action.frame))
                if self.deliver:
                    for event in self.server.receive(action.frame):
                        self._inbox.append(("upstream", json.dumps(event)))
                else:
                    self.undelivered.append(action.frame)
            elif isinstance(action, SendClient):
                self.to_client.append(json.loads(action.frame))
            elif isinstance(action, StartHandler):
                self.started[action.call_id] = action
            elif isinstance(action, CancelHandler):
                self.cancelled.append(action)
            elif isinstance(action, Notice):
                self.notices.append(action)

    # ---- looking -------------------------------------------------------------------------
    def sent_of(self, type_: str) -> list[dict[str, Any]]:
        return [e for e in self.sent if e["type"] == type_]

    @property
    def creates(self) -> list[dict[str, Any]]:
        return self.sent_of("response.create")

    @property
    def outputs(self) -> list[dict[str, Any]]:
        return [e for e in self.sent_of("conversation.item.create") if e["item"]["type"] == "function_call_output"]

    def output_for(self, call_id: str) -> dict[str, Any]:
        matches = [e["item"] for e in self.outputs if e["item"]["call_id"] == call_id]
        assert len(matches) == 1, f"expected one output for {call_id}, got {matches}"
        return matches[0]

    def call_ids(self) -> list[str]:
        return [e.call_id for e in self.engine.ledger]
