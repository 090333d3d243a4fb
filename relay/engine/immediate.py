"""The sans-I/O engine for a wire whose answers go up at once (Gemini Live): `OpenAIEngine`'s
sibling, with the same entry points.

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

Frames are read and written through the dialect's codec (`dialect.codec`; Gemini Live's is
relay/dialects/gemini_codec.py, and another wire of this flow brings its own, decoding into the
same typed messages): the engine takes typed messages (`ToolCall`, `ServerContent`, `Setup`, ...)
and writes back a message it changed through the codec (Gemini's keeps the spellings it came in). Fast path: most bytes are audio. A client's media frame,
and a model's turn in which nothing the engine follows appears (words, a transcription, the turn's
end or interruption, a call, another message), is forwarded undecoded: the codec's `audio_peek`
tells them.

Double delivery: Gemini Live may deliver one call twice, as a `functionCall` part of the model's
turn and in a `toolCall`. Whichever comes first records and runs it; the other is the same call
(counted once). A relay call is hidden from the client in both shapes (a part beside text leaves
the text); a client's call reaches the client as the provider sent it, both times.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from msgspec.structs import replace

from relay.dialects import gemini_codec
from relay.dialects.gemini import GEMINI, GeminiDialect, TurnCodec, response_body
from relay.dialects.gemini_codec import (
    UNSET,
    ClientContent,
    Content,
    FunctionCall,
    FunctionDeclaration,
    FunctionResponse,
    GoAway,
    Message,
    Part,
    RealtimeInput,
    ServerContent,
    SessionResumptionUpdate,
    Setup,
    SetupComplete,
    Tool,
    ToolCall,
    ToolCallCancellation,
    ToolResponse,
    Transcription,
    Unknown,
    empty,
    given,
    plain,
)
from relay.dialects.jsontext import compact_json
from relay.dialects.openai import FUNCTION_CALL
from relay.engine.actions import Action, Close, Notice, SendClient, SendUpstream
from relay.engine.calls import CallEntry, CallState, Owner
from relay.engine.conversation import ResponseRecord
from relay.engine.context import Source
from relay.engine.core import SessionEngine
from relay.engine.answer_hold import HeldAnswers
from relay.engine.going_away import GOING_AWAY, Resumption
from relay.engine.turns import Turns
from relay.tools import Scheduling
from relay.tools.render import RenderedOutput
from relay.tools.spec import HandlerKind, ToolSpec

CANCELLATION = "cancelled by the server (toolCallCancellation)"
TOOL_CALL, PART = ToolCall.MEMBER, "modelTurn part"   # the shapes a call arrives in
CANCELLED_BY_SERVER = f"{CANCELLATION}: no answer is sent"   # a relay call's skip reason
POLICY_VIOLATION = 1008

_SAME: Any = object()   # a message the engine leaves as it came
_DROP: Any = object()   # a message the other side must not see (what stood beside it still goes)
_STOP: Any = object()   # nothing of this frame goes anywhere
_UNREAD: Any = object()   # a frame that is no JSON object


def _as(text: str, like: str | bytes) -> str | bytes:
    """A frame's text in the frame kind of `like` (binary frames stay binary)."""
    return text if isinstance(like, str) else text.encode("utf-8")


def _result_frame(codec: TurnCodec, message: Message, result: Any, like: str | bytes) -> str | bytes | None:
    """What goes on for a handled message: the frame as it came, the message rewritten (by
    `codec`), what stood beside a dropped message, or nothing."""
    if result is _SAME:
        return like
    if result is _STOP:
        return None
    if result is _DROP:
        rest = codec.encode_beside(message)
        return None if rest is None else _as(rest, like)
    return _as(codec.encode(result), like)


def _media_passing(engine: GeminiEngine, *, upstream: bool) -> Callable[[str | bytes], bool]:
    """`engine.forwards_upstream` / `forwards_client`: the media that changes nothing in the
    engine, which the forwarding pipe (`session/pipe.py`) then carries without its round. From the
    model: any media but its speech, and its speech once its turn's message is open (the turn's
    first audio opens it, in the round). From the caller: its media, unless its setup was refused
    (nothing of the client goes up then: the round drops it)."""
    peek, turns = engine._upstream_media if upstream else engine._client_media, engine.turns

    def from_model(frame: str | bytes) -> bool:
        media = peek(frame)
        return media is not None and (media != "audio" or turns.speaking())

    def from_caller(frame: str | bytes) -> bool:
        return not engine._refused and peek(frame) is not None

    return from_model if upstream else from_caller


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
        self._held = HeldAnswers()   # answers that wait: the connection away, or `interrupted` (answer_hold.py)
        self._refused = False                         # the client's setup was refused
        self.turns = Turns(self.ctx, hiding=self._hiding)   # the conversation record
        self._codec: TurnCodec = self.dialect.codec or gemini_codec   # the wire, read and written
        self.resumption = Resumption(self.ctx, self._codec)   # a goAway met with a resumption handle
        self._upstream_media = self._codec.audio_peek(upstream=True)
        self._client_media = self._codec.audio_peek(upstream=False)
        self.forwards_upstream = _media_passing(self, upstream=True)   # type: ignore[method-assign]
        self.forwards_client = _media_passing(self, upstream=False)    # type: ignore[method-assign]

    def _to_client(self, frame: str | bytes) -> None:
        if self.config.has_client:
            self.ctx.out.append(SendClient(frame))   # the engine's own outbox: no call on the way

    def _handled(self, frame: str | bytes, handlers: dict[type, Callable[..., Any]]) -> Any:
        """What goes on of a frame once its message is handled: the frame as it came, the message
        rewritten, what stood beside a dropped one, nothing (None); `_UNREAD` (told as an
        anomaly, as a bad frame is told) when it is no JSON object. The codec reads the frame
        straight from its text."""
        message = self._codec.decode(frame)
        if not isinstance(message, Unknown):
            handler = handlers.get(type(message))
            return _result_frame(self._codec, message, _SAME if handler is None else handler(self, message), frame)
        data = self.ctx.decode(frame)
        if data is None:
            return _UNREAD
        if message.member is not None:
            self.ctx.anomaly(f"{message.member} is not an object", message.member)
        several = self._codec.one_by_one(data)
        return frame if several is None else self._several(several, handlers, frame)

    def _several(self, messages: list[tuple[str, Any, Message | Unknown]],
                 handlers: dict[type, Callable[..., Any]], frame: str | bytes) -> str | bytes | None:
        """A frame of several messages (which the service refuses), each handled as if it came
        alone, so that none slips past its rules: what is left of them goes on, in one frame."""
        kept: dict[str, Any] = {}
        changed = False
        for member, value, message in messages:
            handler = None if isinstance(message, Unknown) else handlers.get(type(message))
            result = _SAME if handler is None else handler(self, message)
            if result is _STOP:
                return None
            if result is _SAME:
                kept[member] = value
            elif result is not _DROP:
                kept.update(self._codec.frame_of(result))
            changed = changed or result is not _SAME
        if not changed:
            return frame
        return _as(compact_json(kept), frame) if kept else None

    # ==== upstream ======================================================================
    def _upstream_frame(self, frame: str | bytes) -> None:
        media = self._upstream_media(frame)
        if media is not None:
            if media == "audio":
                self.turns.model_audio()
            self._to_client(frame)
        else:
            forward = self._handled(frame, self._UPSTREAM_HANDLERS)
            # _UNREAD: it cannot be told apart from a relay call the client must not see
            if forward is not _UNREAD and forward is not None:
                self._to_client(forward)
        if self._held.until is not None and self._held.decided():
            self._send_unsent()   # the message after `interrupted`: what it did not cancel goes up

    def _on_server_content(self, content: ServerContent) -> Any:
        transcription = content.input_transcription
        if isinstance(transcription, Transcription) and isinstance(transcription.text, str):
            self.turns.user_words(transcription.text)
        turn = content.model_turn
        parts = turn.parts if isinstance(turn, Content) else None
        hidden: list[int] = []
        for index, part in enumerate(parts if isinstance(parts, list) else []):
            if not isinstance(part, Part) or part.thought:
                continue   # the model's reasoning is not part of what it said
            if isinstance(part.text, str):
                self.turns.model_words(part.text, "output_text")
            elif given(part.inline_data) is not None:
                self.turns.model_audio()
            elif isinstance(part.function_call, FunctionCall) and self._call_part(part.function_call):
                hidden.append(index)
        transcription = content.output_transcription
        if isinstance(transcription, Transcription) and isinstance(transcription.text, str):
            self.turns.model_words(transcription.text, "output_audio")
        if content.interrupted is True:
            self.turns.end_turn("cancelled")
            if self.ledger.unanswered():
                self._held.begin(self.ctx.now)   # a toolCallCancellation may follow: no answer crosses it
        if content.turn_complete is True:
            self.turns.end_turn("completed")
            if content.model_turn is UNSET:
                self._held.turn_ended()   # the interrupted turn's end: the cancellation may come after it
        if not hidden:
            return _SAME
        return _without_parts(content, hidden)

    def _call_part(self, call: FunctionCall) -> bool:
        """A `functionCall` part of the model's turn: the same call as a `toolCall` delivers (before
        or after it), so it is recorded once whichever shape comes first, and run then. Whether
        the client must not see it: a relay call's, or an id-less one naming a relay tool (its
        `toolCall` will carry the id)."""
        if not isinstance(call.id, str) or not call.id:
            return self._hiding and given(call.name) in self.tools
        entry, new = self._announce(call, self.turns.model_turn(), PART)
        if new and entry is not None:
            self._call_complete(entry, given(call.args))
        return self._hiding and entry is not None and entry.owner is Owner.RELAY

    def _on_tool_call(self, tool_call: ToolCall) -> Any:
        calls = tool_call.function_calls
        if not isinstance(calls, list):
            self.ctx.anomaly("toolCall without a functionCalls list", TOOL_CALL)
            return _SAME
        turn = self.turns.model_turn()
        visible: list[Any] = []
        announced: list[tuple[CallEntry, Any]] = []
        for call in calls:
            entry, new = self._announce(call, turn, TOOL_CALL)
            if entry is None or entry.owner is Owner.CLIENT or not self._hiding:
                visible.append(call)
            if new and entry is not None:
                announced.append((entry, given(call.args)))
        for entry, args in announced:   # a toolCall is the model's finished call: no response can cancel it
            self._call_complete(entry, args)
        return _narrowed(tool_call, "function_calls", visible, len(calls))

    def _on_cancellation(self, cancellation: ToolCallCancellation) -> Any:
        ids = cancellation.ids
        if not isinstance(ids, list):
            self.ctx.anomaly("toolCallCancellation without an ids list", ToolCallCancellation.MEMBER)
            return _SAME
        visible = []
        for call_id in ids:
            entry = self.ledger.get(call_id)
            if entry is None:
                self.ctx.anomaly(f"toolCallCancellation of unknown call {call_id}", ToolCallCancellation.MEMBER)
            else:
                if entry.state not in (CallState.ANSWERED, CallState.SKIPPED):
                    self._held.forget(entry.call_id)
                self._withdrawn(entry, CANCELLATION)
            if entry is None or entry.owner is Owner.CLIENT or not self._hiding:
                visible.append(call_id)
        return _narrowed(cancellation, "ids", visible, len(ids))

    # ---- goAway: the session carried over to a new connection (relay/engine/going_away.py) ----
    def _on_go_away(self, message: GoAway) -> Any:
        carried = self.config.has_client and self.resumption.go_away(given(message.time_left))
        return _STOP if carried else _SAME   # carried over, the client's connection stays

    def _on_resumption_update(self, message: SessionResumptionUpdate) -> Any:
        self.resumption.update(message)
        return _SAME

    def _on_setup_complete(self, message: SetupComplete) -> Any:
        if not self.resumption.completed():
            return _SAME
        self._on_reconnect()   # the answers that waited go up on the resumed connection
        return _STOP           # the client had its own

    def resumption_setup(self, now: float) -> tuple[str | None, list[Action]]:
        """After a `going_away` notice, with a new upstream connection: the setup to open it with
        (None: none to make) and the actions of the switch (`Resumption.begin`)."""
        actions = self._run(now, Source.UPSTREAM, self.resumption.begin, self._on_disconnect)
        return self.resumption.begun, actions

    _UPSTREAM_HANDLERS: dict[type, Callable[["GeminiEngine", Any], Any]] = {
        ServerContent: _on_server_content,
        ToolCall: _on_tool_call,
        ToolCallCancellation: _on_cancellation,
        GoAway: _on_go_away,
        SessionResumptionUpdate: _on_resumption_update,
        SetupComplete: _on_setup_complete,
    }

    # ==== calls =========================================================================
    def _announce(self, call: Any, turn: ResponseRecord, shape: str) -> tuple[CallEntry | None, bool]:
        """Record a call delivered in `shape` (a toolCall's entry, a model-turn part); (its ledger
        entry, whether it is new). The same call in the other shape is the provider's double
        delivery, expected; in the same shape again, an anomaly. Either way it counts once."""
        if not isinstance(call, FunctionCall):
            self.ctx.anomaly("a functionCalls entry is not an object", TOOL_CALL)
            return None, False
        call_id, name = call.id, given(call.name)
        if not isinstance(call_id, str) or not call_id:
            self.ctx.anomaly(f"function call {name!r} without an id: left to the client", TOOL_CALL)
            return None, False
        existing = self.ledger.get(call_id)
        if existing is not None:
            if shape in existing.delivered_as:
                self.ctx.anomaly(f"call {call_id} delivered again; run once", TOOL_CALL)
            else:
                existing.delivered_as += (shape,)
            return existing, False
        name = name if isinstance(name, str) else ""
        args = given(call.args)
        arguments = "" if args is None else json.dumps(args, ensure_ascii=False)
        owner = self._owner_of(name)
        record = self.turns.add_item({"type": FUNCTION_CALL, "id": self.ctx.new_id("i"), "call_id": call_id,
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
        if not self.ctx.upstream_connected or self._held.holding:
            self._held.keep((entry.call_id, answer, final))
            return
        self._send_answer(entry, answer, final)

    def _send_answer(self, entry: CallEntry, answer: dict[str, Any], final: bool) -> None:
        self.ctx.emit(SendUpstream(self._codec.encode(ToolResponse(function_responses=[answer]))))
        self.turns.record_output(entry, answer["response"], "relay", final=final,
                                 status=(entry.output_status or "completed") if final else "completed")
        if final:
            self._injected(entry)

    # ==== lifecycle =====================================================================
    def _on_reconnect(self) -> None:
        super()._on_reconnect()
        self.resumption.completed()   # a carry-over the edge gave up on is over too
        self._held.end()   # the old connection's cancellation is not coming on this one
        self._send_unsent()

    def _send_unsent(self) -> None:
        """The answers that waited (for the connection, or behind `interrupted`), in their order."""
        for call_id, answer, final in self._held.take() if self.ctx.upstream_connected else ():
            entry = self.ledger.get(call_id)
            if entry is not None:
                self._send_answer(entry, answer, final)

    def _tick(self) -> None:
        super()._tick()
        if self._held.due(self.ctx.now):
            self._send_unsent()   # no message came after `interrupted`: no cancellation is coming

    def _other_deadlines(self) -> tuple[float, ...]:
        return () if self._held.until is None else (self._held.until,)

    def _on_close(self) -> None:
        self._held.clear()

    # ==== client ========================================================================
    def _client_frame(self, frame: str | bytes) -> None:
        if self._refused:
            return   # the session is closing: nothing more of this client goes up
        if self._client_media(frame) is not None:
            self.ctx.emit(SendUpstream(frame))
            return
        forward = self._handled(frame, self._CLIENT_HANDLERS)
        if forward is _UNREAD:
            self.ctx.emit(SendUpstream(frame))   # the provider answers malformed input itself
        elif forward is not None:
            self.ctx.emit(SendUpstream(forward))

    def _client_setup(self, setup: Setup) -> Any:
        result = self._setup_going_up(setup)
        if result is not _STOP:
            self.resumption.setup = setup if result is _SAME else result   # what a resumed connection is set up with
        return result

    def _setup_going_up(self, setup: Setup) -> Any:
        instruction = setup.system_instruction
        parts = instruction.parts if isinstance(instruction, Content) else None
        if isinstance(parts, list):
            texts = [p.text for p in parts if isinstance(p, Part) and isinstance(p.text, str)]
            self.conversation.session["instructions"] = "\n".join(texts)
        elif isinstance(instruction, str):
            self.conversation.session["instructions"] = instruction
        tools = given(setup.tools)
        self._client_functions = {d.name for d in _declarations(tools) if isinstance(d.name, str)}
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
            if isinstance(entry, Tool) and isinstance(entry.function_declarations, list):
                merged[index] = replace(entry, function_declarations=entry.function_declarations + ours)
                break
        else:
            merged.append(Tool(function_declarations=ours))
        return replace(setup, tools=merged)

    def _client_content(self, content: ClientContent) -> Any:
        """A client's turns: kept in the conversation; refused (`relay_owned_call`, nothing of the
        message goes up) when a part answers a relay call or makes up a call of a relay tool."""
        turns = given(content.turns)
        for turn in turns if isinstance(turns, list) else [turns]:
            parts = turn.parts if isinstance(turn, Content) else None
            for part in parts if isinstance(parts, list) else []:
                if not isinstance(part, Part):
                    continue
                forgery = _forgery(self, part.function_response, part.function_call)
                if forgery is not None:
                    self.ctx.client_error("relay_owned_call", f"{forgery}; the client's turn was not forwarded")
                    return _STOP
        self.turns.client_turns(plain(turns))
        return _SAME

    def _client_realtime_input(self, realtime_input: RealtimeInput) -> Any:
        text = realtime_input.text
        if isinstance(text, str) and text:
            self.turns.client_turns([{"role": "user", "parts": [{"text": text}]}])
        return _SAME

    def _client_tool_response(self, tool_response: ToolResponse) -> Any:
        responses = tool_response.function_responses
        if not isinstance(responses, list):
            return _SAME
        kept = []
        for response in responses:
            entry = self.ledger.get(given(response.id)) if isinstance(response, FunctionResponse) else None
            forgery = _forgery(self, response, None)
            if forgery is not None:
                self.ctx.client_error("relay_owned_call", f"{forgery}; its answer from the client was not forwarded")
                continue
            if _answered_already(self, entry):
                continue
            kept.append(response)
            if entry is not None and entry.state is not CallState.SKIPPED:
                self.turns.record_output(entry, given(response.response), "client",
                                         final=response.will_continue is not True)
        return _narrowed(tool_response, "function_responses", kept, len(responses))

    _CLIENT_HANDLERS: dict[type, Callable[["GeminiEngine", Any], Any]] = {
        Setup: _client_setup,
        ClientContent: _client_content,
        RealtimeInput: _client_realtime_input,
        ToolResponse: _client_tool_response,
    }


def _answered_already(engine: GeminiEngine, entry: CallEntry | None) -> bool:
    """Whether a client's answer comes after its call's final one (the provider delivered the call
    twice and the client answered both), and is not forwarded: one is all a call gets upstream,
    and what the service does with another is not documented (docs/gemini.md, "A second answer to
    one call")."""
    if entry is None or entry.owner is not Owner.CLIENT or entry.state is not CallState.ANSWERED:
        return False
    engine.ctx.anomaly(f"the client answered call {entry.call_id} ({entry.name}) again after its final answer; "
                       "not forwarded", ToolResponse.MEMBER)
    return True


def _forgery(engine: GeminiEngine, answer: Any, call: Any) -> str | None:
    """What is wrong with a client's `functionResponse` (`answer`) or `functionCall` part: an
    answer to a relay call or for a relay tool, a call of a relay tool; None when nothing."""
    if isinstance(answer, FunctionResponse):
        entry = engine.ledger.get(given(answer.id))
        if entry is not None and entry.owner is Owner.RELAY:
            return f"call {entry.call_id} ({entry.name}) belongs to a relay tool"
        name = answer.name
        if entry is None and isinstance(name, str) and name in engine.tools:
            return f"{name} is a relay tool: the relay answers its calls"
    if isinstance(call, FunctionCall) and isinstance(call.name, str) and call.name in engine.tools:
        return f"{call.name} is a relay tool: only the model calls it"
    return None


def _without_parts(content: ServerContent, hidden: list[int]) -> Any:
    """A `serverContent` without the model-turn parts at `hidden` (relay calls): the turn keeps
    its other parts (text beside a call stays); a turn left without parts goes, and a message
    left with nothing goes too."""
    turn = content.model_turn
    kept = [part for index, part in enumerate(turn.parts) if index not in hidden]
    if kept:
        return replace(content, model_turn=replace(turn, parts=kept))
    rest = replace(content, model_turn=UNSET)
    return _DROP if empty(rest) else rest


def _narrowed(message: Message, name: str, kept: list[Any], total: int) -> Any:
    """A message whose list field `name` keeps only `kept` of its `total` entries: the message as
    it came when nothing was removed, nothing when nothing is left."""
    if len(kept) == total:
        return _SAME
    return replace(message, **{name: kept}) if kept else _DROP


def _declarations(tools: Any) -> list[Any]:
    """Every function declaration of a setup's `tools`."""
    found: list[Any] = []
    for entry in tools if isinstance(tools, list) else []:
        declarations = entry.function_declarations if isinstance(entry, Tool) else None
        if isinstance(declarations, list):
            found.extend(d for d in declarations if isinstance(d, FunctionDeclaration))
    return found


__all__ = ["CANCELLED_BY_SERVER", "GeminiEngine"]
