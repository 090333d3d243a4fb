"""A GPT-Live engine on a fake clock, without sockets: the test writes the server's events itself
(the SDK's shapes) and decides when each handler finishes. Every frame the engine sends is
checked against `openai.types.live`: upstream as a client event, to the client as a server event."""

from __future__ import annotations

import json
import typing
from typing import Any, Iterable

from openai.types.live import ClientEvent, ServerEvent
from pydantic import TypeAdapter

from relay.dialects.live import LIVE
from relay.engine import (
    CancelHandler,
    Close,
    EngineConfig,
    Notice,
    Outcome,
    Remember,
    SendClient,
    SendUpstream,
    StartHandler,
    new_engine,
)

CLIENT_EVENT: TypeAdapter[Any] = TypeAdapter(ClientEvent)
SERVER_EVENT: TypeAdapter[Any] = TypeAdapter(ServerEvent)
Message = dict[str, Any]
MODEL = "gpt-live-1"


def responses_session(tools: list[Message] | None = None) -> Message:
    """A client's `session.start` for Responses delegation (with its own tools)."""
    return {"type": "session.start", "session": {
        "model": MODEL, "delegation": {"type": "responses", "responses": {"model": "gpt-5.4", "tools": tools or []}}}}


def client_session() -> Message:
    return {"type": "session.start", "session": {"model": MODEL, "delegation": {"type": "client"}}}


def started(delegation: Message, session_id: str = "live_1") -> Message:
    return {"type": "session.started", "event_id": "event_s", "session": {
        "id": session_id, "expires_at": 1791373550, "model": MODEL, "status": "active", "input": [],
        "audio": {"output": {"voice": "marin"}, "format": {"type": "audio/pcm", "rate": 24000}},
        "delegation": delegation}}


def function_tool(name: str) -> Message:
    return {"type": "function", "name": name, "description": f"the client's {name}",
            "parameters": {"type": "object", "properties": {}}}


def delegation_created(delegation_id: str, *, target: str = "client", offset_ms: int = 1000,
                       response_id: str | None = None) -> Message:
    delegation: Message = {"id": delegation_id, "type": "delegation", "target": target}
    if response_id is not None:
        delegation["response_id"] = response_id
    return {"type": "session.delegation.created", "event_id": f"event_d_{delegation_id}", "offset_ms": offset_ms,
            "delegation": delegation}


def envelope(delegation_id: str | None, event: Message, n: int = 0) -> Message:
    return {"type": "response.event", "event_id": f"event_r{n}_{event['type']}", "delegation_id": delegation_id,
            "event": event}


def backend_response(response_id: str, status: str) -> Message:
    return {"id": response_id, "object": "response", "status": status, "output": [], "tools": [],
            "instructions": None, "created_at": 1, "model": "gpt-5.4", "parallel_tool_calls": True,
            "tool_choice": "auto", "metadata": {}}


def call_item(call_id: str, name: str, arguments: Message | None = None) -> Message:
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": json.dumps(arguments or {}), "status": "completed"}


def transcript(side: str, text: str, start_ms: int) -> Message:
    return {"type": f"session.{side}_transcript.delta", "event_id": f"event_t{start_ms}", "delta": text,
            "start_ms": start_ms, "end_ms": start_ms + 200}


class LiveDriver:
    """The engine, its clock, and what it did."""

    def __init__(self, tools: Iterable[Any] = (), *, config: EngineConfig | None = None) -> None:
        self.engine = new_engine(tools, dialect=LIVE, config=config or EngineConfig(strict=True),
                                 session_id="test", id_prefix="t")
        self.now = 1000.0
        self.upstream_frames: list[str | bytes] = []
        self.client_frames: list[str | bytes] = []
        self.started: dict[str, StartHandler] = {}
        self.cancelled: list[CancelHandler] = []
        self.notices: list[Notice] = []
        self.closes: list[Close] = []
        self.actions: list[Any] = []   # every action, in order
        self.check_shapes = True
        """Check every frame against the SDK's models (off for a test that forwards bad input)."""

    # ---- feeding ----
    def upstream(self, *messages: Message | str) -> None:
        for message in messages:
            frame = message if isinstance(message, str) else json.dumps(message)
            self._act(self.engine.receive_upstream(frame, self.now))

    def client(self, *messages: Message | str) -> None:
        for message in messages:
            frame = message if isinstance(message, str) else json.dumps(message)
            self._act(self.engine.receive_client(frame, self.now))

    def batch(self, delegation_id: str, response_id: str, calls: list[Message], *, complete: bool = True) -> None:
        """One backend response of a Responses delegation that makes `calls` (nested events)."""
        self.upstream(envelope(delegation_id, {"type": "response.created",
                                               "response": backend_response(response_id, "in_progress")}))
        for index, item in enumerate(calls):
            self.upstream(envelope(delegation_id, {"type": "response.output_item.added", "output_index": index,
                                                   "item": {**item, "arguments": "", "status": "in_progress"}}))
            self.upstream(envelope(delegation_id, {"type": "response.function_call_arguments.done",
                                                   "item_id": item["id"], "output_index": index,
                                                   "arguments": item["arguments"], "name": item["name"]}))
            self.upstream(envelope(delegation_id, {"type": "response.output_item.done", "output_index": index,
                                                   "item": item}))
        if complete:
            self.complete(delegation_id, response_id)

    def complete(self, delegation_id: str, response_id: str) -> None:
        self.upstream(envelope(delegation_id, {"type": "response.completed",
                                               "response": backend_response(response_id, "completed")}))

    def advance(self, seconds: float) -> None:
        self.now += seconds
        deadline = self.engine.next_deadline()
        while deadline is not None and deadline <= self.now:
            self._act(self.engine.tick(self.now))
            after = self.engine.next_deadline()
            assert after is None or after > self.now, "a tick left its deadline behind"
            deadline = after

    def finish(self, call_id: str, value: Any = None, *, dt: float = 0.001) -> None:
        self.now += dt
        self._act(self.engine.handler_finished(call_id, Outcome.returned(value), self.now))

    def fail(self, call_id: str, error: BaseException) -> None:
        self.now += 0.001
        self._act(self.engine.handler_finished(call_id, Outcome.raised(error), self.now))

    def close(self) -> None:
        self._act(self.engine.close(self.now))

    def _act(self, actions: list[Any]) -> None:
        self.actions.extend(actions)
        for action in actions:
            if isinstance(action, SendUpstream):
                if self.check_shapes:   # what the relay writes is a Live client event
                    CLIENT_EVENT.validate_json(action.frame)
                self.upstream_frames.append(action.frame)
            elif isinstance(action, SendClient):
                if self.check_shapes:
                    SERVER_EVENT.validate_json(action.frame)
                self.client_frames.append(action.frame)
            elif isinstance(action, StartHandler):
                assert action.call_id not in self.started, f"{action.call_id} started twice"
                self.started[action.call_id] = action
            elif isinstance(action, CancelHandler):
                self.cancelled.append(action)
            elif isinstance(action, Notice):
                self.notices.append(action)
            elif isinstance(action, Close):
                self.closes.append(action)

    # ---- reading ----
    def sent(self) -> list[Message]:
        return [json.loads(frame) for frame in self.upstream_frames]

    def to_client(self) -> list[Message]:
        return [json.loads(frame) for frame in self.client_frames]

    def sent_of(self, kind: str) -> list[Message]:
        return [event for event in self.sent() if event["type"] == kind]

    def outputs(self) -> list[Message]:
        return [e for e in self.sent_of("response.item.create") if e["item"]["type"] == "function_call_output"]

    def appends(self) -> list[Message]:
        return [e for e in self.sent() if e["type"] in ("session.thinking.append", "session.commentary.append")]

    def records(self) -> list[Remember]:
        return [action for action in self.actions if isinstance(action, Remember)]

    def anomalies(self) -> list[str]:
        return [n.fields["message"] for n in self.notices if n.kind == "anomaly"]

    def errors_to_client(self) -> list[Message]:
        return [e for e in self.to_client() if e["type"] == "error"]


def types_of(events: list[Message]) -> list[str]:
    return [event["type"] for event in events]


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("typing", "json", "annotations")]
