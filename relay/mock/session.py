"""One mock realtime session as a sans-I/O state machine.

`MockSession.handle(event, origin)` takes a parsed client event, reads it as the OpenAI codec's
typed event (`relay.dialects.openai_codec.event_of`, by the session's variant), dispatches on its
class, and returns actions for the network edge to carry out: events to send (to every connection
of the session, or only to the one whose event caused an `error`), response streams to run, and
running streams to wake because a cancel or release changed their course. The events it sends are
the codec's typed events, written by `Wire.frame`. It never awaits; `MockUpstream` does the I/O.

Decisions worth knowing:
- Any active response, in-conversation or out-of-band, blocks `response.create`
  (`conversation_already_has_active_response`): strict and simple.
- The mock does not listen to appended audio; `MockUpstream.user_turn()` plays what server VAD would
  do (speech started/stopped, commit, transcript, barge-in, automatic response).
- `output_audio_buffer.clear` (a WebRTC/SIP event) is answered with `output_audio_buffer.cleared`
  for the latest response and changes nothing else.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Any

from relay.dialects import openai_codec as codec
from relay.dialects.openai import CLIENT_EVENT_TYPES
from relay.mock.conversation import Conversation, item_not_found
from relay.mock.faults import Faults
from relay.mock.mcp import list_tools_events
from relay.mock.requests import Action, Emit, ResponseRequests, Wake
from relay.mock.responses import ResponseRun
from relay.mock.script import MockScript
from relay.mock.wire import (
    ProtocolError,
    Wire,
    merge_config,
    new_id,
    new_session_call_id,
)
from relay.tools.render import json_copy

log = logging.getLogger(__name__)

MIN_COMMIT_MS = 100
MAX_APPEND_BYTES = 15 * 1024 * 1024
SIMULATED_SPEECH_MS = 1000
CLIENT_EVENTS = CLIENT_EVENT_TYPES


@dataclass
class MockConnection:
    """One WebSocket attached to a session (the first, or a sideband join by call_id)."""

    index: int
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    auth: str | None
    """How the client authenticated: "bearer", "api-key", "api-key-query", "subprotocol" (Gemini:
    "x-goog-api-key", "key-query") or None."""
    subprotocol: str | None = None
    events_sent: int = 0
    closed: bool = False




def _require(value: Any, param: str, kind: type) -> Any:
    """A field of a client event the server requires (absent and `null` alike are missing)."""
    if value is None:
        raise ProtocolError("missing_required_parameter", f"Missing required parameter: '{param}'.", param)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = {str: "a string", int: "an integer", dict: "an object", list: "an array"}[kind]
        raise ProtocolError("invalid_type", f"Invalid type for '{param}': expected {expected}.", param)
    return value


class MockSession(ResponseRequests):
    """A session's state: its configuration, conversation, responses and connections (what its
    response requests do is `ResponseRequests`', relay/mock/requests.py)."""

    def __init__(
        self,
        wire: Wire,
        script: MockScript,
        faults: Faults,
        model: str,
        query: dict[str, str] | None = None,
        *,
        is_call: bool = False,
        reported_model: str | None = None,
    ) -> None:
        self.wire = wire
        self.script = script
        self.faults = faults
        self.model = model
        self.query = dict(query or {})
        self.is_call = is_call
        """Created by `MockUpstream.create_call()` (like a SIP call): it outlives its sockets until
        hung up."""
        self.id = new_id("sess")
        self.call_id = new_session_call_id()
        self.conversation_id = new_id("conv")
        # Azure reports the model behind a deployment, not the deployment name.
        self.config: dict[str, Any] = wire.default_session(self.id, reported_model or model)
        self.conversation = Conversation()
        self.responses: list[ResponseRun] = []
        self.connections: list[MockConnection] = []
        self.accepts: list[dict[str, Any]] = []
        self._warned_names: set[str] = set()   # scripted calls to tools it lacks, said in the log
        self.ended = False
        self._next_transcript = 0
        self.picks: list[str] = []
        """Where each response's reply came from (`MockScript.pick`'s sources), in order."""
        self._buffered_audio_bytes = 0
        self._input_audio_ms = 0
        self._rejected = 0
        self._settled = 0
        self._mcp_listed: set[str] = set()   # the MCP server labels whose tools were listed

    def __repr__(self) -> str:
        return (
            f"MockSession(id={self.id!r}, call_id={self.call_id!r}, items={len(self.conversation)}, ended={self.ended})"
        )

    # -- views ---------------------------------------------------------------------------------
    @property
    def items(self) -> list[dict[str, Any]]:
        return self.conversation.items

    @property
    def tools(self) -> list[dict[str, Any]]:
        return json_copy(self.config.get("tools") or [])

    @property
    def auth(self) -> str | None:
        """How the first connection authenticated."""
        return self.connections[0].auth if self.connections else None

    # -- entry points --------------------------------------------------------------------------
    def connected(self, connection: MockConnection) -> list[Action]:
        """A new connection gets the session's opening (`Quirks.opening`: `session.created`, and
        xAI's `conversation.created`), then a `ping` where the provider pings."""
        self.connections.append(connection)
        opening = {
            codec.SessionCreated: lambda: codec.SessionCreated(session=self.config),
            codec.ConversationCreated: lambda: codec.ConversationCreated(
                conversation={"id": self.conversation_id, "object": "realtime.conversation"}),
        }
        actions: list[Action] = [Emit(self.wire.frame(opening[codec.EVENTS[name]]()), to=connection.index)
                                 for name in self.wire.quirks.opening]
        if self.wire.quirks.pings:
            actions.append(Emit(self.wire.ping(), to=connection.index))
        return actions

    def invalid_frame(self, detail: str, origin: int) -> list[Action]:
        error = ProtocolError("invalid_json", f"The message could not be parsed as a JSON object: {detail}", None)
        return [Emit(self.wire.error(error, None), to=origin)]

    def internal_error(self, event: Any, origin: int) -> list[Action]:
        """What the client sees when handling its event failed inside the mock (a bug, or input
        too deeply nested to copy): a server error, never a dropped connection."""
        event_id = event.get("event_id") if isinstance(event, dict) else None
        error = ProtocolError(
            "server_error", "The server had an error while processing your request.", None, "server_error"
        )
        return [Emit(self.wire.error(error, event_id if isinstance(event_id, str) else None), to=origin)]

    def handle(self, event: Any, origin: int) -> list[Action]:
        event_id = event.get("event_id") if isinstance(event, dict) else None
        try:
            return self._dispatch(event)
        except ProtocolError as error:
            return [Emit(self.wire.error(error, event_id if isinstance(event_id, str) else None), to=origin)]

    def _dispatch(self, event: Any) -> list[Action]:
        match self._command(event):
            case codec.SessionUpdate(session=session):
                return self._session_update(session)
            case codec.InputAudioAppend(audio=audio):
                return self._append(audio)
            case codec.InputAudioCommit():
                return self._commit()
            case codec.InputAudioClear():
                self._buffered_audio_bytes = 0
                return [Emit(self.wire.frame(codec.InputAudioCleared()))]
            case codec.OutputAudioClear():
                if not self.responses:
                    return []
                return [Emit(self.wire.frame(codec.OutputAudioCleared(response_id=self.responses[-1].id)))]
            case codec.ItemCreate() as create:
                return self._item_create(create)
            case codec.ItemRetrieve(item_id=item_id):
                return [Emit(self.wire.frame(codec.ItemRetrieved(item=self._item(item_id))))]
            case codec.ItemDelete(item_id=item_id):
                item_id = _require(item_id, "item_id", str)
                self.conversation.remove(item_id)
                return [Emit(self.wire.frame(codec.ItemDeleted(item_id=item_id)))]
            case codec.ItemTruncate() as truncate:
                return self._truncate(truncate)
            case codec.ResponseCreate(response=response):
                return self._response_create(response)
            case codec.ResponseCancel(response_id=response_id):
                return self._response_cancel(response_id)
            case _:
                raise AssertionError("every client event is dispatched")   # `_command` returns one of them

    def _command(self, event: Any) -> codec.Event:
        """A client event as the codec reads it, by the session's variant; what is not one of the
        client's events is refused as the server refuses it."""
        if not isinstance(event, dict):
            raise ProtocolError("invalid_type", "Invalid type for event: expected a JSON object.", None)
        name = _require(event.get("type"), "type", str)
        command = codec.event_of(event, self.wire.family)
        if isinstance(command, codec.Unknown) or type(command) not in codec.COMMANDS:
            supported = ", ".join(f"'{client_event}'" for client_event in CLIENT_EVENTS)
            raise ProtocolError("invalid_value", f"Invalid value: '{name}'. Supported values are: {supported}.", "type")
        return command

    # -- session -------------------------------------------------------------------------------
    def _session_update(self, session: Any) -> list[Action]:
        update = _require(session, "session", dict)
        self.wire.check_session_update(update)
        merge_config(self.config, update)
        return [Emit(self.wire.frame(codec.SessionUpdated(session=self.config))), *self._mcp_listings()]

    def accept(self, config: Any) -> list[Action]:
        """Apply a call's accept body (a GA session config); raises ProtocolError when invalid."""
        self.wire.check_session_update(config)
        self.accepts.append(copy.deepcopy(config))
        merge_config(self.config, config)
        return [Emit(self.wire.frame(codec.SessionUpdated(session=self.config))), *self._mcp_listings()]

    def _mcp_listings(self) -> list[Action]:
        """The `mcp_list_tools` items of the session's provider-side MCP tools (relay/mock/mcp.py)."""
        return [Emit(event) for event in list_tools_events(self.wire, self.conversation, self.config.get("tools"),
                                                           self.script.mcp_tools, self._mcp_listed)]

    # -- input audio ---------------------------------------------------------------------------
    def _append(self, audio: Any) -> list[Action]:
        audio = _require(audio, "audio", str)
        if len(audio) % 4:
            raise ProtocolError("invalid_value", "Invalid 'audio': not a valid base64 string.", "audio")
        size = len(audio) // 4 * 3 - (len(audio) - len(audio.rstrip("=")))
        if size > MAX_APPEND_BYTES:
            raise ProtocolError(
                "string_above_max_length",
                f"Invalid 'audio': audio too long. Expected at most {MAX_APPEND_BYTES} bytes, got {size}.",
                "audio",
            )
        self._buffered_audio_bytes += size
        return []

    def _commit(self) -> list[Action]:
        buffered_ms = self._buffered_audio_bytes / self.wire.input_bytes_per_ms(self.config)
        if buffered_ms < MIN_COMMIT_MS:
            raise ProtocolError(
                "input_audio_buffer_commit_empty",
                f"Error committing input audio buffer: buffer too small. Expected at least {MIN_COMMIT_MS}ms "
                f"of audio, but buffer only has {buffered_ms:.2f}ms of audio.",
                None,
            )
        self._buffered_audio_bytes = 0
        return self._add_user_audio(new_id("item"), int(buffered_ms), None)

    def _add_user_audio(self, item_id: str, duration_ms: int, transcript: str | None) -> list[Action]:
        """Commit a user audio turn: the committed event, the item, and its transcript if any."""
        self._input_audio_ms += duration_ms
        item = self.wire.item(
            id=item_id,
            type=codec.MESSAGE,
            status="completed",
            role=codec.USER,
            content=[{"type": "input_audio", "transcript": None}],
        )
        previous = self.conversation.insert(item)
        actions: list[Action] = [
            Emit(self.wire.frame(codec.InputAudioCommitted(previous_item_id=previous, item_id=item_id)))
        ]
        actions += self._announce_item(previous, item)
        if transcript is None and self._next_transcript < len(self.script.transcripts):
            transcript = self.script.transcripts[self._next_transcript]
            self._next_transcript += 1
        if transcript is not None:
            item["content"][0]["transcript"] = transcript
            self.conversation.replace(item)   # changed in place: its size is read again
            completed = codec.InputTranscriptionCompleted(
                item_id=item_id,
                content_index=0,
                transcript=transcript,
                usage={"type": "duration", "seconds": duration_ms / 1000},
            )
            actions.append(Emit(self.wire.frame(completed)))
        return actions

    def commit_user_turn(self, transcript: str | None = None) -> list[Action]:
        """A user audio turn committed without VAD, as after a push-to-talk client's commit:
        `committed`, the user item, and its transcript (the one given, else the script's next).
        No `speech_started` comes first, so a relay sees a new turn, not a barge-in."""
        return self._add_user_audio(new_id("item"), SIMULATED_SPEECH_MS, transcript)

    def speech_started(self) -> tuple[str, list[Action], ResponseRun | None]:
        """Server VAD heard the user start: returns the new item id, the actions, and the response
        this barge-in cancelled (in-conversation responses only, unless `interrupt_response` is off)."""
        item_id = new_id("item")
        started = codec.SpeechStarted(audio_start_ms=self._input_audio_ms, item_id=item_id)
        actions: list[Action] = [Emit(self.wire.frame(started))]
        detection = self.wire.turn_detection(self.config) or {}
        active = self.active_response
        interrupted = None
        if active and not active.out_of_band and detection.get("interrupt_response", True):
            if active.cancel("turn_detected"):
                interrupted = active
                actions.append(Wake(active))
        return item_id, actions, interrupted

    def speech_stopped(self, item_id: str, transcript: str | None, respond: bool | None) -> list[Action]:
        """Server VAD heard the user stop: commit the turn and, like `create_response`, answer it."""
        stopped = codec.SpeechStopped(audio_end_ms=self._input_audio_ms + SIMULATED_SPEECH_MS, item_id=item_id)
        actions: list[Action] = [Emit(self.wire.frame(stopped))]
        actions += self._add_user_audio(item_id, SIMULATED_SPEECH_MS, transcript)
        detection = self.wire.turn_detection(self.config)
        if respond is None:
            respond = bool(detection and detection.get("create_response", True))
        if respond and self.active_response is None:
            actions += self.start_response({}, origin="server")[1]
        return actions

    # -- items ---------------------------------------------------------------------------------
    def _announce_item(self, previous: str | None, item: dict[str, Any]) -> list[Action]:
        actions = [Emit(self.wire.frame(codec.ItemAdded(previous_item_id=previous, item=item)))]
        if self.wire.has_event(codec.ItemDone):
            actions.append(Emit(self.wire.frame(codec.ItemDone(previous_item_id=previous, item=item))))
        return actions

    def _item(self, item_id: Any) -> dict[str, Any]:
        item_id = _require(item_id, "item_id", str)
        item = self.conversation.get(item_id)
        if item is None:
            raise item_not_found(item_id, "item_id")
        return item

    def _item_create(self, create: codec.ItemCreate) -> list[Action]:
        previous_item_id = create.previous_item_id
        if previous_item_id is not None and not isinstance(previous_item_id, str):
            raise ProtocolError(
                "invalid_type", "Invalid type for 'previous_item_id': expected a string.", "previous_item_id"
            )
        self.conversation.check_position(previous_item_id, "previous_item_id")
        item = self.conversation.check_client_item(create.item, self.wire)
        previous = self.conversation.insert(item, previous_item_id)
        actions = self._announce_item(previous, item)
        if (
            item["type"] == codec.FUNCTION_CALL_OUTPUT
            and self.faults.auto_response_after_output
            and self.active_response is None
        ):
            actions += self.start_response({}, origin="server")[1]
        return actions

    def _truncate(self, truncate: codec.ItemTruncate) -> list[Action]:
        item = self._item(truncate.item_id)
        content_index = _require(truncate.content_index, "content_index", int)
        audio_end_ms = _require(truncate.audio_end_ms, "audio_end_ms", int)
        if item.get("type") != codec.MESSAGE or item.get("role") != "assistant":
            raise ProtocolError(
                "invalid_value", f"Item '{item['id']}' is not an assistant message and cannot be truncated.", "item_id"
            )
        content = item.get("content") or []
        part_type = self.wire.assistant_part_type("audio")
        if not 0 <= content_index < len(content) or content[content_index].get("type") != part_type:
            raise ProtocolError(
                "invalid_value", f"Content {content_index} of item '{item['id']}' is not audio.", "content_index"
            )
        total_ms = next((run.audio_ms[item["id"]] for run in reversed(self.responses) if item["id"] in run.audio_ms), 0)
        if not 0 <= audio_end_ms <= total_ms:
            raise ProtocolError(
                "invalid_value",
                f"audio_end_ms {audio_end_ms} is outside the item's audio, which lasts {total_ms}ms.",
                "audio_end_ms",
            )
        # The server drops the part of the transcript that was not heard; approximate it by length.
        part = content[content_index]
        transcript = part.get("transcript") or ""
        part["transcript"] = transcript[: len(transcript) * audio_end_ms // total_ms] if total_ms else ""
        self.conversation.replace(item)   # changed in place: its size is read again
        truncated = codec.ItemTruncated(item_id=item["id"], content_index=content_index, audio_end_ms=audio_end_ms)
        return [Emit(self.wire.frame(truncated))]
