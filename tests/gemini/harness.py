"""Drive a GeminiEngine with a fake clock: no sockets, no event loop.

Frames are fed as the real wire has them (the server's JSON in binary frames, the SDK's in text
frames); what the engine sends is kept raw and decoded. Handlers run only when a test says so
(`finish`, `fail`, `yield_value`, `end_stream`, `run_all`), which is how it orders completions.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from relay.engine import CancelHandler, Close, EngineConfig, Notice, Outcome, SendClient, SendUpstream, StartHandler
from relay.engine.gemini import GeminiEngine


def function_call(call_id: str, name: str, args: Any = None) -> dict[str, Any]:
    call: dict[str, Any] = {"id": call_id, "name": name}
    if args is not None:
        call["args"] = args
    return call


def tool_call(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"toolCall": {"functionCalls": list(calls)}}


def cancellation(*ids: str) -> dict[str, Any]:
    return {"toolCallCancellation": {"ids": list(ids)}}


def user_text(text: str) -> dict[str, Any]:
    return {"clientContent": {"turns": [{"role": "user", "parts": [{"text": text}]}], "turnComplete": True}}


def model_text(text: str) -> dict[str, Any]:
    return {"serverContent": {"modelTurn": {"role": "model", "parts": [{"text": text}]}}}


TURN_COMPLETE = {"serverContent": {"turnComplete": True}}


class GeminiHarness:
    def __init__(self, tools: Iterable[Any] = (), *, config: EngineConfig | None = None) -> None:
        self.engine = GeminiEngine(tools, config=config or EngineConfig(strict=True), session_id="test",
                                   id_prefix="t")
        self.now = 1000.0
        self.upstream_frames: list[str | bytes] = []
        self.client_frames: list[str | bytes] = []
        self.started: dict[str, StartHandler] = {}
        self.cancelled: list[CancelHandler] = []
        self.notices: list[Notice] = []
        self.closes: list[Close] = []
        self._reported: set[str] = set()

    # ---- feeding ---------------------------------------------------------------------------
    def server(self, message: dict[str, Any], *, binary: bool = True) -> None:
        text = json.dumps(message)
        self.server_raw(text.encode() if binary else text)

    def server_raw(self, frame: str | bytes) -> None:
        self._act(self.engine.receive_upstream(frame, self.now))

    def client(self, message: dict[str, Any], *, binary: bool = False) -> None:
        text = json.dumps(message)
        self.client_raw(text.encode() if binary else text)

    def client_raw(self, frame: str | bytes) -> None:
        self._act(self.engine.receive_client(frame, self.now))

    def setup(self, tools: list[dict[str, Any]] | None = None) -> None:
        setup: dict[str, Any] = {"model": "models/gemini-live-2.5-flash-preview"}
        if tools is not None:
            setup["tools"] = tools
        self.client({"setup": setup})
        self.server({"setupComplete": {}})

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._act(self.engine.tick(self.now))

    def finish(self, call_id: str, value: Any = None, *, dt: float = 0.001) -> None:
        self.now += dt
        self._reported.add(call_id)
        self._act(self.engine.handler_finished(call_id, Outcome.returned(value), self.now))

    def fail(self, call_id: str, error: BaseException) -> None:
        self._reported.add(call_id)
        self._act(self.engine.handler_finished(call_id, Outcome.raised(error), self.now))

    def yield_value(self, call_id: str, value: Any) -> None:
        self._act(self.engine.handler_yielded(call_id, value, self.now))

    def end_stream(self, call_id: str) -> None:
        self._reported.add(call_id)
        self._act(self.engine.handler_finished(call_id, Outcome.ended(), self.now))

    def run_all(self) -> None:
        """Run every started sync handler not yet reported, in start order."""
        reported = self._reported | {c.call_id for c in self.cancelled}
        for call_id, start in list(self.started.items()):
            if call_id in reported:
                continue
            try:
                value = start.tool.handler(**start.arguments)
            except Exception as exc:
                self.fail(call_id, exc)
            else:
                self.finish(call_id, value)

    def _act(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, SendUpstream):
                self.upstream_frames.append(action.frame)
            elif isinstance(action, SendClient):
                self.client_frames.append(action.frame)
            elif isinstance(action, StartHandler):
                self.started[action.call_id] = action
            elif isinstance(action, CancelHandler):
                self.cancelled.append(action)
            elif isinstance(action, Notice):
                self.notices.append(action)
            elif isinstance(action, Close):
                self.closes.append(action)

    # ---- looking ---------------------------------------------------------------------------
    @property
    def sent(self) -> list[dict[str, Any]]:
        return [json.loads(frame) for frame in self.upstream_frames]

    @property
    def to_client(self) -> list[dict[str, Any]]:
        return [json.loads(frame) for frame in self.client_frames]

    @property
    def answers(self) -> list[dict[str, Any]]:
        """Every FunctionResponse the relay sent, in order."""
        return [answer for message in self.sent if "toolResponse" in message
                for answer in message["toolResponse"]["functionResponses"]]

    def answers_for(self, call_id: str) -> list[dict[str, Any]]:
        return [answer for answer in self.answers if answer["id"] == call_id]

    def answer_for(self, call_id: str) -> dict[str, Any]:
        answers = self.answers_for(call_id)
        assert len(answers) == 1, f"expected one answer for {call_id}, got {answers}"
        return answers[0]
