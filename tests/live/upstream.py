"""A scripted GPT-Live server on loopback, for the relay's integration tests until the project's
GPT-Live mock serves them: the primary socket (`/v1/live/sessions`: `session.start` first) and the
sideband (`/v1/live/sessions/{id}/attach`: never `session.start`). It writes through the Live
codec, and it keeps the rules the relay must keep: a `response.create` before every output of a
batch is in is refused as a partial batch (an `error`), an append must name a delegation it
knows, and once per delegation is what it counts.

Each session plays one delegation once the client's first input audio arrives (the timeline
advances with audio): Responses (`calls`: nested function calls, then a continuation that says
the outputs) or client (`session.delegation.created`, answered by appends, each acknowledged).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from openai.types.live import ClientEvent
from pydantic import TypeAdapter
from websockets.asyncio.server import ServerConnection, serve

from relay.dialects import live

CLIENT_EVENT: TypeAdapter[Any] = TypeAdapter(ClientEvent)
LIVE_PATH = "/v1/live/sessions"


@dataclass
class LiveCall:
    """A function call the backend makes: its tool's name and arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass
class Played:
    """What one session received and how its rules went."""

    path: str
    received: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)    # the rules a command broke
    resource: dict[str, Any] = field(default_factory=dict)   # the session as session.started said
    done: asyncio.Event = field(default_factory=asyncio.Event)

    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.received if event["type"] == kind]

    async def note(self, event: dict[str, Any]) -> None:
        self.received.append(event)
        async with self.changed:
            self.changed.notify_all()

    async def wait_for(self, kind: str, timeout: float) -> dict[str, Any]:
        """The first event of `kind` received (waiting for it at most `timeout` seconds)."""
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(lambda: bool(self.of(kind)))
        return self.of(kind)[0]


class LiveStandIn:
    """The server: `calls` for Responses delegation (empty: client delegation)."""

    def __init__(self, calls: list[LiveCall] | None = None, *, session_id: str = "live_u7_test") -> None:
        self.calls = calls or []
        self.session_id = session_id
        self.sessions: list[Played] = []
        self.connected = asyncio.Event()
        self.url = ""
        self._n = 0

    def _id(self, kind: str) -> str:
        self._n += 1
        return f"{kind}_{self._n}"

    async def handle(self, ws: ServerConnection) -> None:
        path = ws.request.path if ws.request is not None else ""
        played = Played(path)
        self.sessions.append(played)
        self.connected.set()
        attach = path.endswith("/attach")
        session: dict[str, Any] = {}
        try:
            if attach:
                mode = "responses" if self.calls else "client"
                session = {"model": "gpt-live-1", "delegation": {"type": mode, "responses": {
                    "model": "gpt-5.4", "tools": []}} if mode == "responses" else {"type": "client"}}
                await self._started(ws, played, session)
                await self._play(ws, played, session)
                return
            start = json.loads(await ws.recv())
            CLIENT_EVENT.validate_python(start)
            await played.note(start)
            if start["type"] != "session.start":
                played.refused.append(f"first frame {start['type']}")
                return
            session = start["session"]
            await self._started(ws, played, session)
            await self._play(ws, played, session)
        finally:
            played.done.set()

    async def _started(self, ws: ServerConnection, played: Played, session: dict[str, Any]) -> None:
        resource = played.resource = {"id": self.session_id, "expires_at": 1791373550, "model": session.get("model", "gpt-live-1"),
                    "status": "active", "input": [], "instructions": "", "audio": {"output": {"voice": "marin"}},
                    "delegation": session.get("delegation") or {"type": "client"}}
        await ws.send(live.encode(live.SessionStarted(event_id=self._id("event"), session=resource)))

    async def _recv(self, ws: ServerConnection, played: Played) -> dict[str, Any]:
        event = json.loads(await ws.recv())
        CLIENT_EVENT.validate_python(event)
        await played.note(event)
        return event

    async def _play(self, ws: ServerConnection, played: Played, session: dict[str, Any]) -> None:
        while (await self._recv(ws, played))["type"] not in ("session.input_audio.append", "session.update"):
            pass   # the timeline starts with the caller's audio (a sideband starts with its update)
        delegation_id = self._id("item")
        offset = 1000
        await ws.send(live.encode(live.InputTranscriptDelta(event_id=self._id("event"), delta="What's the weather",
                                                            start_ms=600, end_ms=800)))
        await ws.send(live.encode(live.InputTranscriptDelta(event_id=self._id("event"), delta=" in Paris?",
                                                            start_ms=800, end_ms=1000)))
        if self.calls:
            await self._responses(ws, played, delegation_id, offset, session)
        else:
            await self._client(ws, played, delegation_id, offset)

    async def _envelope(self, ws: ServerConnection, delegation_id: str, nested: live.BackendEvent) -> None:
        await ws.send(live.encode(live.ResponseEnvelope(event_id=self._id("event"), delegation_id=delegation_id,
                                                        event=nested)))

    async def _responses(self, ws: ServerConnection, played: Played, delegation_id: str, offset: int,
                         session: dict[str, Any]) -> None:
        tools = {tool.get("name") for tool in session["delegation"]["responses"].get("tools", [])}
        missing_tools = [call.name for call in self.calls if call.name not in tools]
        if missing_tools and not any(e["type"] == "session.update" for e in played.received):
            played.refused.append(f"tools not declared: {missing_tools}")
        response_id = self._id("resp")
        await ws.send(live.encode(live.DelegationCreated(
            event_id=self._id("event"), offset_ms=offset,
            delegation=live.Delegation(id=delegation_id, target="responses", response_id=response_id))))
        snapshot = {"id": response_id, "object": "response", "status": "in_progress", "output": []}
        await self._envelope(ws, delegation_id, live.BackendCreated(response=snapshot))
        call_ids = []
        for index, call in enumerate(self.calls):
            call_id = self._id("call")
            call_ids.append(call_id)
            item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": call.name,
                    "arguments": json.dumps(call.arguments), "status": "completed"}
            await self._envelope(ws, delegation_id, live.BackendItemDone(output_index=index, item=item))
        await self._envelope(ws, delegation_id, live.BackendCompleted(response={**snapshot, "status": "completed"}))
        outputs: dict[str, str] = {}
        while True:
            event = await self._recv(ws, played)
            if event["type"] == "response.item.create":
                item = event["item"]
                if item["call_id"] in outputs:
                    played.refused.append(f"a second output for {item['call_id']}")
                outputs[item["call_id"]] = item["output"]
            elif event["type"] == "response.create":
                if set(outputs) != set(call_ids):
                    played.refused.append("partial batch")
                    await ws.send(live.encode(live.Error(event_id=self._id("event"), error={
                        "type": "invalid_request_error", "code": "invalid_value",
                        "message": "a partial batch of function call outputs is rejected"})))
                    continue
                break
        continuation = self._id("resp")
        text = "; ".join(outputs[call_id] for call_id in call_ids)
        await self._envelope(ws, delegation_id, live.BackendCreated(
            response={"id": continuation, "object": "response", "status": "in_progress", "output": []}))
        await self._envelope(ws, delegation_id, live.BackendTextDelta(item_id="msg_1", output_index=0,
                                                                      content_index=0, delta=text, logprobs=[]))
        await self._envelope(ws, delegation_id, live.BackendCompleted(
            response={"id": continuation, "object": "response", "status": "completed", "output": []}))
        await ws.send(live.encode(live.OutputTranscriptDelta(event_id=self._id("event"), delta=text,
                                                             start_ms=3000, end_ms=3200)))
        await self._until_closed(ws, played)

    async def _client(self, ws: ServerConnection, played: Played, delegation_id: str, offset: int) -> None:
        await ws.send(live.encode(live.DelegationCreated(
            event_id=self._id("event"), offset_ms=offset,
            delegation=live.Delegation(id=delegation_id, target="client"))))
        spoken = False
        while not spoken:
            event = await self._recv(ws, played)
            kind = event["type"]
            if kind in ("session.thinking.append", "session.commentary.append"):
                if event.get("delegation_id") != delegation_id:
                    played.refused.append(f"an append for {event.get('delegation_id')}")
                if len(event["content"].encode("utf-8")) > 500:
                    played.refused.append("an append over 500 tokens")
                acked = live.ThinkingAppended if kind == "session.thinking.append" else live.CommentaryAppended
                await ws.send(live.encode(acked(event_id=self._id("event"), client_event_id=event.get("event_id"),
                                                start_ms=1400, end_ms=1600)))
                spoken = kind == "session.commentary.append"
        await ws.send(live.encode(live.OutputTranscriptDelta(event_id=self._id("event"), delta="It is sunny.",
                                                             start_ms=1800, end_ms=2000)))
        await self._until_closed(ws, played)

    async def _until_closed(self, ws: ServerConnection, played: Played) -> None:
        while True:
            event = await self._recv(ws, played)
            if event["type"] == "session.close":
                await ws.send(live.encode(live.SessionClosed(event_id=self._id("event"), reason="close_requested",
                                                             session=played.resource, usage={"seconds": 3})))
                return


@asynccontextmanager
async def live_upstream(calls: list[LiveCall] | None = None) -> AsyncIterator[LiveStandIn]:
    """The stand-in listening on 127.0.0.1 (port 0); its `url` is the primary socket's."""
    stand_in = LiveStandIn(calls)
    async with serve(stand_in.handle, "127.0.0.1", 0, max_size=None, close_timeout=0.1) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        stand_in.url = f"ws://127.0.0.1:{port}{LIVE_PATH}"
        yield stand_in
