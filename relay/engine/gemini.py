"""The sans-I/O engine for Gemini Live sessions: `OpenAIEngine`'s sibling, with the same entry points.

    engine.receive_upstream(frame, now)   -> actions
    engine.receive_client(frame, now)     -> actions
    engine.handler_yielded(call_id, value, now)   -> actions   (streaming tools)
    engine.handler_finished(call_id, outcome, now) -> actions
    engine.tick(now)                      -> actions      (timeouts)

Gemini differs from OpenAI in what the relay must decide. A `toolCall` is produced by the model
by construction (no response can still cancel it), so relay calls start at once, and answers go
up as soon as they are known: there is no `response.create` to sequence, the model continues by
itself. What Gemini adds instead is `toolCallCancellation` (the user interrupted: no answer may be
sent for those ids) and, for NON_BLOCKING functions, `scheduling` and `willContinue` on answers.

Frames are JSON objects with one top-level key, in text or binary WebSocket frames; what the
engine forwards keeps the kind it arrived in, and what it writes itself goes up as text (as the
`google-genai` SDK sends). Conversation state is kept in the same `Conversation` and `CallLedger`
as the OpenAI engine, with OpenAI-shaped items (a model turn is a synthetic response), so export,
replay, metrics and dumps read both engines alike: `turns.Turns` makes those records.

Fast path: most bytes are audio. A client `realtimeInput` frame, and a `serverContent` frame in
which none of the keys the engine follows appears (`"text"`, a transcription, `turnComplete`,
`interrupted`, a `functionCall` part, or another top-level message such as `toolCall`), is
forwarded unparsed: the dialect tells them (`relay.dialects.gemini.media_frame`).

Double delivery: Gemini Live may deliver one call twice, as a `functionCall` part of the model's
turn and in a `toolCall`. Whichever comes first records and runs it; the other is the same call
(counted once). A relay call is hidden from the client in both shapes (a part beside text leaves
the text); a client's call reaches the client as the provider sent it, both times.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from relay.dialects.gemini import (
    GEMINI,
    GeminiDialect,
    field,
    inline_blob,
    key_of,
    media_frame,
    response_body,
)
from relay.dialects.jsontext import compact_json
from relay.engine.actions import Close, SendClient, SendUpstream
from relay.engine.calls import CallEntry, CallState, Owner
from relay.engine.conversation import ResponseRecord
from relay.engine.core import SessionEngine
from relay.engine.turns import Turns
from relay.tools import Scheduling
from relay.tools.render import RenderedOutput
from relay.tools.spec import HandlerKind, ToolSpec

CANCELLATION = "cancelled by the server (toolCallCancellation)"
TOOL_CALL, PART = "toolCall", "modelTurn part"   # the shapes a call arrives in
CANCELLED_BY_SERVER = f"{CANCELLATION}: no answer is sent"   # a relay call's skip reason
POLICY_VIOLATION = 1008

_SAME: Any = object()   # a message part the engine leaves as it came
_DROP: Any = object()   # a message part the other side must not see
_STOP: Any = object()   # nothing of this message goes anywhere


def _encode(message: dict[str, Any], like: str | bytes) -> str | bytes:
    """`message` as JSON, in the frame kind of `like` (binary frames stay binary)."""
    text = compact_json(message)
    return text if isinstance(like, str) else text.encode("utf-8")


class GeminiEngine(SessionEngine):
    """One Gemini Live session's state and rules."""

    default_dialect: GeminiDialect = GEMINI
    dialect: GeminiDialect

    def __init__(self, *args: Any, **options: Any) -> None:
        """As `SessionEngine`: tools, and the dialect, config, session_id and id_prefix options."""
        super().__init__(*args, **options)
        if not isinstance(self.dialect, GeminiDialect):
            raise TypeError(f"GeminiEngine speaks Gemini Live, not {self.dialect.name}")
        self._hiding = self.config.hide_tool_events and self.config.has_client
        self._client_functions: set[str] = set()     # names the client declared in its setup
        self._interim: dict[str, RenderedOutput] = {}   # streaming: the last value sent
        self._unsent: list[tuple[str, dict[str, Any], bool]] = []    # (call_id, answer, final)
        self._refused = False                         # the client's setup was refused
        self.turns = Turns(self.ctx, hiding=self._hiding)   # the conversation record

    def _to_client(self, frame: str | bytes) -> None:
        if self.config.has_client:
            self.ctx.out.append(SendClient(frame))   # the engine's own outbox: no call on the way

    def _apply_handlers(self, message: dict[str, Any], handlers: dict[str, Callable[..., Any]]) -> Any:
        """Run the handler of each top-level key; the message to forward, `_SAME`, or `_STOP`."""
        rewritten: dict[str, Any] = {}
        changed = False
        for key, value in message.items():
            handler = handlers.get(key)
            result = _SAME if handler is None else handler(self, value)
            if result is _STOP:
                return _STOP
            if result is _DROP:
                changed = True
            elif result is _SAME:
                rewritten[key] = value
            else:
                rewritten[key] = result
                changed = True
        if not changed:
            return _SAME
        return rewritten if rewritten else _STOP

    # ==== upstream ======================================================================
    def _upstream_frame(self, frame: str | bytes) -> None:
        media = media_frame(frame, "upstream")
        if media is not None:
            if media == "audio":
                self.turns.model_audio()
            self._to_client(frame)
            return
        message = self.ctx.decode(frame)
        if message is None:
            return   # it cannot be told apart from a relay call the client must not see
        result = self._apply_handlers(message, self._UPSTREAM_HANDLERS)
        if result is _SAME:
            self._to_client(frame)
        elif result is not _STOP:
            self._to_client(_encode(result, frame))

    def _on_server_content(self, content: Any) -> Any:
        if not isinstance(content, dict):
            self.ctx.anomaly("serverContent is not an object", "serverContent")
            return _SAME
        transcription = field(content, "inputTranscription")
        if isinstance(transcription, dict) and isinstance(transcription.get("text"), str):
            self.turns.user_words(transcription["text"])
        turn = field(content, "modelTurn")
        parts = field(turn, "parts")
        hidden: list[int] = []
        for index, part in enumerate(parts if isinstance(parts, list) else []):
            if not isinstance(part, dict) or part.get("thought"):
                continue   # the model's reasoning is not part of what it said
            if isinstance(part.get("text"), str):
                self.turns.model_words(part["text"], "output_text")
            elif inline_blob(part) is not None:
                self.turns.model_audio()
            elif isinstance(field(part, "functionCall"), dict) and self._call_part(field(part, "functionCall")):
                hidden.append(index)
        transcription = field(content, "outputTranscription")
        if isinstance(transcription, dict) and isinstance(transcription.get("text"), str):
            self.turns.model_words(transcription["text"], "output_audio")
        if field(content, "interrupted") is True:
            self.turns.end_turn("cancelled")
        if field(content, "turnComplete") is True:
            self.turns.end_turn("completed")
        if not hidden:
            return _SAME
        return _without_parts(content, turn, hidden)

    def _call_part(self, call: dict[str, Any]) -> bool:
        """A `functionCall` part of the model's turn: the same call as a `toolCall` delivers (before
        or after it), so it is recorded once whichever shape comes first, and run then. Whether
        the client must not see it: a relay call's, or an id-less one naming a relay tool (its
        `toolCall` will carry the id)."""
        if not isinstance(call.get("id"), str) or not call["id"]:
            return self._hiding and call.get("name") in self.tools
        entry, new = self._announce(call, self.turns.model_turn(), PART)
        if new and entry is not None:
            self._call_complete(entry, call.get("args"))
        return self._hiding and entry is not None and entry.owner is Owner.RELAY

    def _on_tool_call(self, tool_call: Any) -> Any:
        key = key_of(tool_call, "functionCalls")
        calls = tool_call[key] if key is not None else None
        if not isinstance(calls, list):
            self.ctx.anomaly("toolCall without a functionCalls list", "toolCall")
            return _SAME
        turn = self.turns.model_turn()
        visible: list[Any] = []
        announced: list[tuple[CallEntry, Any]] = []
        for call in calls:
            entry, new = self._announce(call, turn, TOOL_CALL)
            if entry is None or entry.owner is Owner.CLIENT or not self._hiding:
                visible.append(call)
            if new and entry is not None:
                announced.append((entry, call.get("args")))
        for entry, args in announced:   # a toolCall is the model's finished call: no response can cancel it
            self._call_complete(entry, args)
        return _narrowed(tool_call, key, visible, len(calls))

    def _on_cancellation(self, cancellation: Any) -> Any:
        ids = field(cancellation, "ids")
        if not isinstance(ids, list):
            self.ctx.anomaly("toolCallCancellation without an ids list", "toolCallCancellation")
            return _SAME
        visible = []
        for call_id in ids:
            entry = self.ledger.get(call_id)
            if entry is None:
                self.ctx.anomaly(f"toolCallCancellation of unknown call {call_id}", "toolCallCancellation")
            else:
                if entry.state not in (CallState.ANSWERED, CallState.SKIPPED):
                    self._unsent = [u for u in self._unsent if u[0] != entry.call_id]
                self._withdrawn(entry, CANCELLATION)
            if entry is None or entry.owner is Owner.CLIENT or not self._hiding:
                visible.append(call_id)
        return _narrowed(cancellation, "ids", visible, len(ids))

    _UPSTREAM_HANDLERS: dict[str, Callable[["GeminiEngine", Any], Any]] = {
        "serverContent": _on_server_content,
        "server_content": _on_server_content,
        "toolCall": _on_tool_call,
        "tool_call": _on_tool_call,
        "toolCallCancellation": _on_cancellation,
        "tool_call_cancellation": _on_cancellation,
    }

    # ==== calls =========================================================================
    def _announce(self, call: Any, turn: ResponseRecord, shape: str) -> tuple[CallEntry | None, bool]:
        """Record a call delivered in `shape` (a toolCall's entry, a model-turn part); (its ledger
        entry, whether it is new). The same call in the other shape is the provider's double
        delivery, expected; in the same shape again, an anomaly. Either way it counts once."""
        if not isinstance(call, dict):
            self.ctx.anomaly("a functionCalls entry is not an object", "toolCall")
            return None, False
        call_id, name = call.get("id"), call.get("name")
        if not isinstance(call_id, str) or not call_id:
            self.ctx.anomaly(f"function call {name!r} without an id: left to the client", "toolCall")
            return None, False
        existing = self.ledger.get(call_id)
        if existing is not None:
            if shape in existing.delivered_as:
                self.ctx.anomaly(f"call {call_id} delivered again; run once", "toolCall")
            else:
                existing.delivered_as += (shape,)
            return existing, False
        name = name if isinstance(name, str) else ""
        args = call.get("args")
        arguments = "" if args is None else json.dumps(args, ensure_ascii=False)
        owner = self._owner_of(name)
        record = self.turns.add_item({"type": "function_call", "id": self.ctx.new_id("i"), "call_id": call_id,
                                      "name": name, "arguments": arguments, "status": "completed"},
                                     "model", turn=turn, hidden=self._hiding and owner is Owner.RELAY)
        entry = self.ledger.add(CallEntry(call_id, name, record.id, turn.id, owner, arguments=arguments,
                                          arguments_from_done=arguments, announced_at=self.ctx.now,
                                          delivered_as=(shape,)))
        return entry, True

    def _client_declares(self, name: str) -> bool:
        return name in self._client_functions

    def _streamed(self, entry: CallEntry, value: Any, rendered: RenderedOutput) -> None:
        """Each value of a streaming tool is an interim answer (`willContinue`); the last one is
        repeated, silently, as the final answer when the stream ends."""
        tool = self.tools.get(entry.name)
        if tool is None or tool.kind is not HandlerKind.STREAM:
            self.ctx.anomaly(f"{entry.name} is not a streaming tool; its yielded value is ignored", None)
            return
        self._interim[entry.call_id] = rendered
        entry.updates += (rendered.output,)
        if entry.state is CallState.RUNNING:
            self._answer(entry, response_body(rendered), self._scheduling_of(tool, rendered), final=False)

    def _stream_final(self, entry: CallEntry) -> tuple[RenderedOutput, Scheduling | None]:
        interim = self._interim.get(entry.call_id)
        if interim is not None:
            return interim, Scheduling.SILENT
        return super()._stream_final(entry)

    def _stop_handler(self, call_id: str) -> None:
        super()._stop_handler(call_id)
        self._interim.pop(call_id, None)

    def _scheduling_of(self, tool: ToolSpec | None, rendered: RenderedOutput) -> Scheduling | None:
        """Only NON_BLOCKING functions take a scheduling: the result's, else the tool's."""
        if tool is None or not tool.non_blocking:
            return None
        return rendered.scheduling or tool.scheduling

    def _deliver(self, entry: CallEntry, rendered: RenderedOutput) -> None:
        """Gemini answers as soon as the answer is known: the model continues by itself."""
        scheduling = Scheduling(entry.scheduling) if entry.scheduling else None
        self._answer(entry, response_body(rendered), scheduling, final=True)

    def _answer(self, entry: CallEntry, body: dict[str, Any], scheduling: Scheduling | None,
                *, final: bool) -> None:
        tool = self.tools.get(entry.name)
        streaming = tool is not None and tool.kind is HandlerKind.STREAM
        answer = self.dialect.function_response(
            call_id=entry.call_id, name=entry.name, response=body, scheduling=scheduling,
            will_continue=(not final) if streaming else None)
        if not self.ctx.upstream_connected:
            self._unsent.append((entry.call_id, answer, final))
            return
        self._send_answer(entry, answer, final)

    def _send_answer(self, entry: CallEntry, answer: dict[str, Any], final: bool) -> None:
        self.ctx.emit(SendUpstream(compact_json(self.dialect.tool_response([answer]))))
        self.turns.record_output(entry, answer["response"], "relay", final=final,
                                 status=(entry.output_status or "completed") if final else "completed")
        if final:
            self._injected(entry)

    # ==== lifecycle =====================================================================
    def _on_reconnect(self) -> None:
        super()._on_reconnect()
        unsent, self._unsent = self._unsent, []
        for call_id, answer, final in unsent:
            entry = self.ledger.get(call_id)
            if entry is not None:
                self._send_answer(entry, answer, final)

    def _on_close(self) -> None:
        self._unsent.clear()

    # ==== client ========================================================================
    def _client_frame(self, frame: str | bytes) -> None:
        if self._refused:
            return   # the session is closing: nothing more of this client goes up
        if media_frame(frame, "client") is not None:
            self.ctx.emit(SendUpstream(frame))
            return
        message = self.ctx.decode(frame)
        if message is None:
            self.ctx.emit(SendUpstream(frame))   # the provider answers malformed input itself
            return
        result = self._apply_handlers(message, self._CLIENT_HANDLERS)
        if result is _SAME:
            self.ctx.emit(SendUpstream(frame))
        elif result is not _STOP:
            self.ctx.emit(SendUpstream(_encode(result, frame)))

    def _client_setup(self, setup: Any) -> Any:
        if not isinstance(setup, dict):
            return _SAME
        instruction = field(setup, "systemInstruction")
        parts = instruction.get("parts") if isinstance(instruction, dict) else None
        if isinstance(parts, list):
            texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
            self.conversation.session["instructions"] = "\n".join(texts)
        elif isinstance(instruction, str):
            self.conversation.session["instructions"] = instruction
        tools = setup.get("tools")
        self._client_functions = {
            d["name"] for d in _declarations(tools) if isinstance(d, dict) and isinstance(d.get("name"), str)}
        if not self.config.declare_tools or not len(self.tools):
            return _SAME
        clashes = [name for name in self.tools.names if name in self._client_functions]
        if clashes:
            names = ", ".join(clashes)
            message = f"setup declares {names}, which the relay provides; remove it from your tools"
            self.ctx.client_error("relay_tool_redefined", message)
            self.ctx.emit(Close("client", POLICY_VIOLATION, f"relay tool redefined: {names}"))
            self._refused = True
            return _STOP
        ours = [self.dialect.function_declaration(spec) for spec in self.tools]
        if tools is None:
            tools = []
        if not isinstance(tools, list):
            return _SAME   # the provider refuses it, in its own words
        merged = list(tools)
        for index, entry in enumerate(merged):
            key = key_of(entry, "functionDeclarations")
            if key is not None and isinstance(entry[key], list):
                merged[index] = {**entry, key: entry[key] + ours}
                break
        else:
            merged.append({"functionDeclarations": ours})
        return {**setup, "tools": merged}

    def _client_content(self, content: Any) -> Any:
        """A client's turns: kept in the conversation; refused (`relay_owned_call`, nothing of the
        message goes up) when a part answers a relay call or makes up a call of a relay tool."""
        if not isinstance(content, dict):
            return _SAME
        turns = field(content, "turns")
        for turn in turns if isinstance(turns, list) else [turns]:
            parts = field(turn, "parts")
            for part in parts if isinstance(parts, list) else []:
                forgery = self._forgery(field(part, "functionResponse"), field(part, "functionCall"))
                if forgery is not None:
                    self.ctx.client_error("relay_owned_call", f"{forgery}; the client's turn was not forwarded")
                    return _STOP
        self.turns.client_turns(turns)
        return _SAME

    def _forgery(self, answer: Any, call: Any) -> str | None:
        """What is wrong with a client's `functionResponse` (`answer`) or `functionCall` part: an
        answer to a relay call or for a relay tool, a call of a relay tool; None when nothing."""
        if isinstance(answer, dict):
            entry = self.ledger.get(answer.get("id"))
            if entry is not None and entry.owner is Owner.RELAY:
                return f"call {entry.call_id} ({entry.name}) belongs to a relay tool"
            name = answer.get("name")
            if entry is None and isinstance(name, str) and name in self.tools:
                return f"{name} is a relay tool: the relay answers its calls"
        if isinstance(call, dict) and isinstance(call.get("name"), str) and call["name"] in self.tools:
            return f"{call['name']} is a relay tool: only the model calls it"
        return None

    def _client_realtime_input(self, realtime_input: Any) -> Any:
        text = field(realtime_input, "text")
        if isinstance(text, str) and text:
            self.turns.client_turns([{"role": "user", "parts": [{"text": text}]}])
        return _SAME

    def _client_tool_response(self, tool_response: Any) -> Any:
        key = key_of(tool_response, "functionResponses")
        responses = tool_response[key] if key is not None else None
        if not isinstance(responses, list):
            return _SAME
        kept = []
        for response in responses:
            entry = self.ledger.get(response.get("id")) if isinstance(response, dict) else None
            forgery = self._forgery(response, None)
            if forgery is not None:
                self.ctx.client_error("relay_owned_call", f"{forgery}; its answer from the client was not forwarded")
                continue
            kept.append(response)
            if entry is not None and entry.state is not CallState.SKIPPED:
                self.turns.record_output(entry, response.get("response"), "client",
                                         final=field(response, "willContinue") is not True)
        return _narrowed(tool_response, key, kept, len(responses))

    _CLIENT_HANDLERS: dict[str, Callable[["GeminiEngine", Any], Any]] = {
        "setup": _client_setup,
        "clientContent": _client_content,
        "client_content": _client_content,
        "realtimeInput": _client_realtime_input,
        "realtime_input": _client_realtime_input,
        "toolResponse": _client_tool_response,
        "tool_response": _client_tool_response,
    }


def _without_parts(content: dict[str, Any], turn: dict[str, Any], hidden: list[int]) -> Any:
    """A `serverContent` without the model-turn parts at `hidden` (relay calls): the turn keeps
    its other parts (text beside a call stays); a turn left without parts goes, and a message
    left with nothing goes too."""
    key = key_of(turn, "parts")
    assert key is not None
    kept = [part for index, part in enumerate(turn[key]) if index not in hidden]
    turn_key = key_of(content, "modelTurn")
    rest = {k: v for k, v in content.items() if k != turn_key}
    if kept:
        return {**rest, turn_key: {**turn, key: kept}}
    return rest if rest else _DROP


def _narrowed(part: dict[str, Any], key: str, kept: list[Any], total: int) -> Any:
    """A message part whose list `key` keeps only `kept` of its `total` entries: the part as it
    came when nothing was removed, nothing when nothing is left."""
    if len(kept) == total:
        return _SAME
    return {**part, key: kept} if kept else _DROP


def _declarations(tools: Any) -> list[Any]:
    """Every function declaration of a setup's `tools`, in either spelling."""
    found: list[Any] = []
    for entry in tools if isinstance(tools, list) else []:
        declarations = field(entry, "functionDeclarations")
        if isinstance(declarations, list):
            found.extend(declarations)
    return found


__all__ = ["CANCELLED_BY_SERVER", "GeminiEngine"]
