"""A sans-I/O stand-in for the realtime server, for engine tests with a fake clock.

It keeps a conversation and the one-active-response rule the way the GA server does, answers the
client events the relay sends (`conversation.item.create`, `response.create`, `response.cancel`,
`session.update`) with the events the real server would send, and produces scripted model output:
function calls with streamed arguments, assistant messages, barge-ins. Event shapes follow the
recorded GA frames in ../shared/recordings (ids, `object`, `status`, `output_index`, usage...).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Call:
    name: str
    arguments: str
    call_id: str | None = None


@dataclass
class FakeServer:
    ga: bool = True
    foundry: bool = False
    items: list[dict[str, Any]] = field(default_factory=list)
    active: str | None = None
    responses: dict[str, dict[str, Any]] = field(default_factory=dict)
    received: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    session: dict[str, Any] = field(default_factory=lambda: {"type": "realtime", "tools": []})
    # what to do when a response.create arrives: a list of scripted outputs, consumed in order;
    # when empty the model says a short sentence.
    script: list[list[Any]] = field(default_factory=list)
    # when set, responses asked for with response.create stay active until finish_response()
    hold_responses: bool = False

    def __post_init__(self) -> None:
        self._ids = itertools.count(1)

    # ---- ids and helpers -------------------------------------------------------------
    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):04d}"

    def _event(self, type_: str, **fields: Any) -> dict[str, Any]:
        return {"type": type_, "event_id": self._id("event"), **fields}

    def _last_item_id(self) -> str | None:
        return self.items[-1]["id"] if self.items else None

    def item(self, item_id: str) -> dict[str, Any] | None:
        return next((i for i in self.items if i["id"] == item_id), None)

    def outputs_for(self, call_id: str) -> list[dict[str, Any]]:
        return [i for i in self.items if i["type"] == "function_call_output" and i["call_id"] == call_id]

    def _added(self, item: dict[str, Any], previous: str | None) -> list[dict[str, Any]]:
        if self.ga:
            return [self._event("conversation.item.added", previous_item_id=previous, item=dict(item)),
                    self._event("conversation.item.done", previous_item_id=previous, item=dict(item))]
        return [self._event("conversation.item.created", previous_item_id=previous, item=dict(item))]

    # ---- the server side of the session ------------------------------------------------
    def connect(self) -> list[dict[str, Any]]:
        return [self._event("session.created", session={"id": self._id("sess"), "object": "realtime.session",
                                                          **self.session})]

    def receive(self, frame: str) -> list[dict[str, Any]]:
        """A client event arrives; returns the server events it causes."""
        event = json.loads(frame)
        self.received.append(event)
        handler = getattr(self, "_on_" + event["type"].replace(".", "_"), None)
        return handler(event) if handler else []

    def _error(self, event: dict[str, Any], code: str, message: str, param: str | None = None) -> list[dict[str, Any]]:
        error = self._event("error", error={"type": "invalid_request_error", "code": code, "message": message,
                                             "param": param, "event_id": event.get("event_id")})
        self.errors.append(error)
        return [error]

    def _on_session_update(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        self.session.update(event.get("session", {}))
        return [self._event("session.updated", session=dict(self.session))]

    def _on_conversation_item_create(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        item = dict(event["item"])
        item.setdefault("id", self._id("item"))
        item.setdefault("object", "realtime.item")
        item.setdefault("status", "completed")
        if not self.foundry:
            for extension in ("name", "response_id", "created_at"):
                if item["type"] == "function_call_output" and extension in item:
                    return self._error(event, "unknown_parameter", f"Unknown parameter: 'item.{extension}'.",
                                       f"item.{extension}")
        if item["type"] == "function_call_output" and not any(
                i["type"] == "function_call" and i["call_id"] == item["call_id"] for i in self.items):
            return self._error(event, "invalid_value", f"No tool call found for call_id {item['call_id']}.",
                               "item.call_id")
        previous = event.get("previous_item_id", self._last_item_id())
        if previous == "root":
            position, previous = 0, None
        elif previous is None:
            position = len(self.items)
            previous = self._last_item_id()
        else:
            index = next((n for n, i in enumerate(self.items) if i["id"] == previous), None)
            if index is None:
                return self._error(event, "invalid_value", f"Item with id '{previous}' not found.",
                                   "previous_item_id")
            position = index + 1
        self.items.insert(position, item)
        return self._added(item, previous)

    def _on_response_create(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if self.active is not None:
            return self._error(event, "conversation_already_has_active_response",
                               f"Conversation already has an active response in progress: {self.active}. "
                               "Wait until the response is finished before creating a new one.")
        options = event.get("response") or {}
        outputs = self.script.pop(0) if self.script else ["Okay."]
        return self.start_response(outputs, options=options, finish=not self.hold_responses)

    def _on_response_cancel(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if self.active is None:
            return self._error(event, "response_cancel_not_active", "Cancellation failed: no active response found")
        return self.finish_response(status="cancelled", reason="client_cancelled")

    # ---- model output -------------------------------------------------------------------
    def start_response(self, outputs: list[Any], *, options: dict[str, Any] | None = None,
                       finish: bool = True, deltas: int = 3, last_unfinished: bool = False) -> list[dict[str, Any]]:
        """A response producing `outputs` (strings are spoken sentences, Calls are calls).
        `last_unfinished` stops the last output item mid-stream (its `.done` events not sent),
        as when the user barges in while the model is still producing it."""
        options = options or {}
        response_id = self._id("resp")
        out_of_band = options.get("conversation") == "none"
        response = {"object": "realtime.response", "id": response_id, "status": "in_progress",
                    "status_details": None, "output": [], "conversation_id": None if out_of_band else "conv_1",
                    "output_modalities": ["audio"], "max_output_tokens": "inf", "audio": {"output": {
                        "format": {"type": "audio/pcm", "rate": 24000}, "voice": "marin"}},
                    "usage": None, "metadata": options.get("metadata")}
        self.responses[response_id] = response
        self.active = response_id
        events = [self._event("response.created", response=json.loads(json.dumps(response)))]
        for output_index, output in enumerate(outputs):
            item_events = self._output_item(response, output_index, output, out_of_band, deltas)
            if last_unfinished and output_index == len(outputs) - 1:
                item_events = [e for e in item_events if not e["type"].endswith(".done")]
                response["output"][-1]["status"] = "in_progress"
            events += item_events
        if finish:
            events += self.finish_response()
        return events

    def _output_item(self, response: dict[str, Any], index: int, output: Any, out_of_band: bool,
                     deltas: int) -> list[dict[str, Any]]:
        item_id = self._id("item")
        rid = response["id"]
        if isinstance(output, Call):
            call_id = output.call_id or self._id("call")
            item = {"id": item_id, "type": "function_call", "status": "in_progress", "name": output.name,
                    "call_id": call_id, "arguments": "", "object": "realtime.item"}
            events = [self._event("response.output_item.added", response_id=rid, output_index=index, item=dict(item))]
            if not out_of_band:
                previous = self._last_item_id()
                self.items.append(item)
                events.append(self._event("conversation.item.added", previous_item_id=previous, item=dict(item)))
            size = max(1, -(-len(output.arguments) // deltas))
            for start in range(0, len(output.arguments), size):
                events.append(self._event("response.function_call_arguments.delta", response_id=rid,
                                          item_id=item_id, output_index=index, call_id=call_id,
                                          delta=output.arguments[start:start + size]))
            done = {"response_id": rid, "item_id": item_id, "output_index": index, "call_id": call_id,
                    "arguments": output.arguments}
            if self.ga:
                done["name"] = output.name
            events.append(self._event("response.function_call_arguments.done", **done))
            item.update(arguments=output.arguments, status="completed")
            if not out_of_band:
                events.append(self._event("conversation.item.done", previous_item_id=None, item=dict(item)))
            events.append(self._event("response.output_item.done", response_id=rid, output_index=index,
                                      item=dict(item)))
        else:
            text = str(output)
            item = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant",
                    "content": [], "object": "realtime.item"}
            events = [self._event("response.output_item.added", response_id=rid, output_index=index, item=dict(item))]
            if not out_of_band:
                previous = self._last_item_id()
                self.items.append(item)
                events.append(self._event("conversation.item.added", previous_item_id=previous, item=dict(item)))
            events.append(self._event("response.output_audio_transcript.delta", response_id=rid, item_id=item_id,
                                      output_index=index, content_index=0, delta=text))
            events.append(self._event("response.output_audio.delta", response_id=rid, item_id=item_id,
                                      output_index=index, content_index=0, delta="AAAA" * 8))
            item.update(status="completed", content=[{"type": "output_audio", "transcript": text}])
            if not out_of_band:
                events.append(self._event("conversation.item.done", previous_item_id=None, item=dict(item)))
            events.append(self._event("response.output_item.done", response_id=rid, output_index=index,
                                      item=dict(item)))
        response["output"].append(item)
        return events

    def finish_response(self, status: str = "completed", reason: str | None = None) -> list[dict[str, Any]]:
        response = self.responses[self.active] if self.active else None
        if response is None:
            return []
        self.active = None
        response["status"] = status
        if status != "completed":
            response["status_details"] = {"type": status, "reason": reason}
            for item in response["output"]:
                if item["status"] == "in_progress":
                    item["status"] = "incomplete"
        response["usage"] = {"total_tokens": 20, "input_tokens": 12, "output_tokens": 8}
        return [self._event("response.done", response=json.loads(json.dumps(response)))]

    def barge_in(self) -> list[dict[str, Any]]:
        """The user starts speaking: speech_started, and the active response is cut."""
        item_id = self._id("item")
        events = [self._event("input_audio_buffer.speech_started", audio_start_ms=1000, item_id=item_id)]
        if self.active:
            events += self.finish_response(status="cancelled", reason="turn_detected")
        return events

    def user_turn(self, text: str = "hello") -> list[dict[str, Any]]:
        item = {"id": self._id("item"), "type": "message", "status": "completed", "role": "user",
                "content": [{"type": "input_audio", "transcript": text}], "object": "realtime.item"}
        previous = self._last_item_id()
        self.items.append(item)
        return [self._event("input_audio_buffer.committed", previous_item_id=previous, item_id=item["id"]),
                *self._added(item, previous)]


def frames(events: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(e, separators=(",", ":")) for e in events]


class FakeServerPeer:
    """The fake server behind the `Peer` interface of relay.session: what the relay sends is
    answered at once, and tests push model output with `emit`."""

    def __init__(self, server: FakeServer) -> None:
        import anyio

        self.server = server
        self._send, self._receive = anyio.create_memory_object_stream[str | None](10_000)
        self.closed: tuple[int, str] | None = None
        self.frames: list[dict[str, Any]] = []
        self._changed = anyio.Event()

    def emit(self, events: list[dict[str, Any]]) -> None:
        import anyio

        for event in events:
            try:
                self._send.send_nowait(json.dumps(event))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return  # hung up: the server's answers go nowhere, as on a closed socket

    def hang_up(self) -> None:
        self._send.send_nowait(None)
        self._send.close()

    async def recv(self) -> str:
        from websockets.exceptions import ConnectionClosedOK
        from websockets.frames import Close

        frame = await self._receive.receive()
        if frame is None:
            self._receive.close()
            raise ConnectionClosedOK(Close(1000, "done"), None)
        return frame

    async def send(self, message: str | bytes) -> None:
        import anyio

        self.frames.append(json.loads(message))
        self.emit(self.server.receive(message))
        self._changed.set()
        self._changed = anyio.Event()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)

    async def wait_until(self, predicate: Any, timeout: float = 5.0) -> None:
        """Wait (on the relay's own sends, not a clock) until predicate(self) holds."""
        import anyio

        with anyio.fail_after(timeout):
            while not predicate(self):
                await self._changed.wait()
