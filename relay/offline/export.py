"""Export a session's conversation in the shape of a neighbouring API.

A realtime session ends as a conversation (items linked by `previous_item_id`) and a call ledger.
Teams replay it elsewhere: as an OpenAI Chat Completions message list, an Anthropic Messages
request, a Gemini `generateContent` request, or the tool-call results a Vapi server returns. The
export works on the engine's `Conversation` and `CallLedger` only, never on raw events, so any
dialect that fills them can be exported: Gemini Live recordings go through the `GeminiEngine`.

Each target format has rules the realtime conversation does not follow, and the export keeps the
document valid for its format rather than copying the conversation blindly:

- Tool results come right after the assistant turn that made the calls, in call order, even when
  the realtime conversation placed them later (a note says so).
- Every call is answered in openai-chat, anthropic and gemini, which reject an unanswered call: a
  call without an output gets a synthetic error output, `{"error": "no output: <why>"}`, and a
  note. Vapi results list only calls that were answered.
- Audio without a transcript becomes the text `[audio without transcript]`, with a note.
- Anthropic and Gemini have no system role inside the conversation: the session instructions and
  every system message go, in order, into the separate system prompt.

Everything the export changed, dropped or could not know is listed in `Export.report`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, get_args

from relay.engine import CallLedger, CallState, Engine, EngineConfig, Owner, new_engine
from relay.engine.conversation import Conversation, ItemRecord
from relay.errors import UnusableInput
from relay.recording.format import (
    CLIENT_TO_RELAY,
    RELAY_TO_UPSTREAM,
    UPSTREAM_TO_RELAY,
    Frame,
    Recording,
    RecordingError,
)
from relay.recording.reader import load_recording, read_recording
from relay.tools.render import error_in_output

Format = Literal["openai-chat", "anthropic", "gemini", "vapi"]
FORMATS: tuple[str, ...] = get_args(Format)

AUDIO_WITHOUT_TRANSCRIPT = "[audio without transcript]"
SESSION_ENDED = "the session ended before the call was answered"

# content part types whose words `ItemRecord.text()` reads; anything else cannot be exported
_SPOKEN_OR_WRITTEN = frozenset(
    {"input_text", "output_text", "text", "input_audio", "output_audio", "audio"}
)


class ExportError(UnusableInput, ValueError):
    """The source cannot be exported at all (unknown format, unreadable or foreign recording)."""


@dataclass(frozen=True, slots=True)
class ExportNote:
    """Something the reader of an export should know: a call without output, audio without a
    transcript, an item left out or moved. `kind` is a stable keyword for programs."""

    kind: str
    message: str
    item_id: str | None = None
    call_id: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


@dataclass(frozen=True, slots=True)
class Export:
    """The exported document (what `relay export` writes) and the report beside it."""

    format: str
    document: dict[str, Any]
    report: list[ExportNote] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(self.document, indent=2, ensure_ascii=False) + "\n"


# ---- the conversation as format-neutral steps ------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Said:
    role: str  # system | user | assistant
    text: str


@dataclass(frozen=True, slots=True)
class _Called:
    call_id: str
    name: str
    arguments: str
    item_id: str


@dataclass(frozen=True, slots=True)
class _Answered:
    call_id: str
    name: str
    output: str
    is_error: bool
    error: Any           # the error value when is_error (the `error` member, or the whole output)
    message: str | None  # what the assistant was to say about the result (relay calls only)
    synthetic: bool


_Step = _Said | _Called | _Answered


@dataclass
class _Flow:
    """The conversation read once: session instructions, steps in export order, and notes."""

    instructions: str | None
    steps: list[_Step]
    notes: list[ExportNote]


class _Reader:
    """Walks the conversation in order and turns items into steps.

    An assistant turn is a run of assistant messages and function calls; when the run ends, the
    outputs of its calls follow it, in call order, wherever they sat in the conversation."""

    def __init__(self, conversation: Conversation, ledger: CallLedger,
                 decided: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.ledger = ledger
        self.decided = decided or {}
        self.records = conversation.visible_items()
        self.notes: list[ExportNote] = []
        self.steps: list[_Step] = []
        self.calls_in_conversation: set[str] = set()
        self.outputs: dict[str, list[tuple[int, ItemRecord]]] = {}
        for position, record in enumerate(self.records):
            if record.type == "function_call" and record.call_id:
                self.calls_in_conversation.add(record.call_id)
            elif record.type == "function_call_output" and record.call_id:
                self.outputs.setdefault(record.call_id, []).append((position, record))
        self.seen_calls: set[str] = set()
        self.run: list[_Called] = []
        self.run_end = -1

    def note(self, kind: str, message: str, record: ItemRecord | None = None,
             call_id: str | None = None) -> None:
        self.notes.append(ExportNote(kind, message, record.id if record else None, call_id))

    def read(self) -> list[_Step]:
        for position, record in enumerate(self.records):
            if record.type == "function_call":
                self.call(position, record)
            elif record.type == "message" and record.role == "assistant":
                self.message(record)
                if self.run:
                    self.run_end = position
            else:
                self.end_run()
                if record.type == "message":
                    self.message(record)
                elif record.type == "function_call_output":
                    self.stray_output(record)
                elif record.type == "mcp_call":
                    self.provider_mcp_call(record)
                else:
                    self.note("unsupported_item", f"{record.type} item {record.id} has no "
                              "equivalent in the export; left out", record)
        self.end_run()
        return self.steps

    # ---- items ----
    def message(self, record: ItemRecord) -> None:
        role = record.role
        if role not in ("system", "user", "assistant"):
            self.note("unsupported_item", f"message {record.id} with role {role!r} left out", record)
            return
        content = record.data.get("content") or []
        others = sorted({str(p.get("type")) for p in content
                         if isinstance(p, dict) and p.get("type") not in _SPOKEN_OR_WRITTEN})
        if others:
            self.note("unsupported_content", f"{role} message {record.id}: content of type "
                      f"{', '.join(others)} cannot be exported; only its words are", record)
        text = record.text()
        if record.has_untranscribed_audio():
            reason = f" (transcription failed: {record.transcription_failed})" \
                if record.transcription_failed else ""
            self.note("untranscribed_audio", f"{role} message {record.id} holds audio without a "
                      f"transcript{reason}; exported as {AUDIO_WITHOUT_TRANSCRIPT!r}", record)
            text = f"{text} {AUDIO_WITHOUT_TRANSCRIPT}" if text else AUDIO_WITHOUT_TRANSCRIPT
        if not text:
            status = f" ({record.status})" if record.status else ""
            self.note("empty_message", f"{role} message {record.id}{status} has no words; left out",
                      record)
            return
        if record.audio_end_ms is not None:
            self.note("truncated_audio", f"{role} message {record.id}: audio truncated at "
                      f"{record.audio_end_ms} ms; its transcript may hold words never played",
                      record)
        self.steps.append(_Said(role, text))

    def call(self, position: int, record: ItemRecord) -> None:
        call_id = record.call_id
        if not call_id:
            self.note("unsupported_item", f"function_call {record.id} has no call_id; left out",
                      record)
            return
        if call_id in self.seen_calls:
            self.note("duplicate_call", f"call {call_id} appears again as item {record.id}; "
                      "only the first is exported", record, call_id)
            return
        self.seen_calls.add(call_id)
        entry = self.ledger.get(call_id)
        name = str(record.data.get("name") or (entry.name if entry else "") or "")
        arguments = record.data.get("arguments")
        if not isinstance(arguments, str) or not arguments:
            arguments = entry.arguments if entry and entry.arguments else "{}"
        called = _Called(call_id, name, arguments, record.id)
        self.steps.append(called)
        self.run.append(called)
        self.run_end = position

    def provider_mcp_call(self, record: ItemRecord) -> None:
        """A call the provider ran on its own MCP server: a call answered at once by its output or error."""
        data, name, error = record.data, str(record.name or ""), record.data.get("error")
        detail = error.get("message") if isinstance(error, dict) else error
        output = json.dumps({"error": detail}, ensure_ascii=False) if error else str(data.get("output") or "")
        self.note("provider_mcp_call", f"mcp_call {record.id} ran {name} on the provider's MCP server {data.get('server_label')!r}: exported as a call and its {'error' if error else 'output'}", record)
        self.steps += [_Called(record.id, name, str(data.get("arguments") or "{}"), record.id),
                       _Answered(record.id, name, output, bool(error), detail if error else None, None, synthetic=False)]

    def stray_output(self, record: ItemRecord) -> None:
        """An output met outside the place its call's turn puts it: either already placed (or to
        be placed) with its call, or an output whose call is not in the conversation."""
        if record.call_id in self.calls_in_conversation:
            return
        self.note("orphan_output", f"output {record.id} answers call {record.call_id}, which is "
                  "not in the conversation; left out", record, record.call_id)

    # ---- outputs after each assistant turn ----
    def end_run(self) -> None:
        if not self.run:
            return
        following = self.outputs_right_after_run()
        for called in self.run:
            outputs = self.outputs.get(called.call_id, [])
            if not outputs:
                self.steps.append(self.unanswered(called))
                continue
            (position, record), *extra = outputs
            if position not in following:
                self.note("moved_output", f"output of call {called.call_id} ({called.name}) "
                          "moved next to its call (the conversation had it elsewhere)",
                          record, called.call_id)
            for _, duplicate in extra:
                self.note("duplicate_output", f"call {called.call_id} has another output "
                          f"{duplicate.id}; only the first is exported", duplicate, called.call_id)
            self.steps.append(self.answered(called, record))
        self.run = []

    def outputs_right_after_run(self) -> set[int]:
        """Positions of the outputs of the run's calls that directly follow the run."""
        ids = {c.call_id for c in self.run}
        positions: set[int] = set()
        position = self.run_end + 1
        while position < len(self.records):
            record = self.records[position]
            if record.type != "function_call_output" or record.call_id not in ids:
                break
            positions.add(position)
            position += 1
        return positions

    def answered(self, called: _Called, record: ItemRecord) -> _Answered:
        output = record.data.get("output")
        output = output if isinstance(output, str) else json.dumps(output)
        entry = self.ledger.get(called.call_id)
        is_error, error = error_in_output(output)
        message = None
        decided = self.decided.get(called.call_id)
        if decided is not None:
            # a relay call of a recording: its `relay` line says what the relay decided (only
            # relay calls have one, and the relay refuses a client's output for them)
            if isinstance(decided.get("is_error"), bool):
                if decided["is_error"] and not is_error:
                    error = output
                is_error = decided["is_error"]
            message = decided.get("message") if isinstance(decided.get("message"), str) else None
        elif entry is not None and entry.owner is Owner.RELAY and entry.output_item_id == record.id:
            # the relay's own output: the ledger knows whether it is an error
            if entry.is_error and not is_error:
                error = output
            is_error = entry.is_error
            message = entry.message
        return _Answered(called.call_id, called.name, output, is_error, error if is_error else None,
                         message, synthetic=False)

    def unanswered(self, called: _Called) -> _Answered:
        entry = self.ledger.get(called.call_id)
        if entry is not None and entry.state is CallState.SKIPPED:
            why = f"the call was not run ({entry.skip_reason or 'skipped'})"
        else:
            why = SESSION_ENDED
        detail = ""
        if entry is not None and entry.output is not None:
            detail = "; an output was decided but never reached the conversation"
        # the note is the same for every format: Vapi leaves the call out of its results, the
        # others carry the synthetic answer below, which says what it is
        self.note("unanswered_call", f"call {called.call_id} ({called.name}) has no output: {why}"
                  f"{detail}", call_id=called.call_id)
        error = f"no output: {why}"
        return _Answered(called.call_id, called.name, json.dumps({"error": error}), True, error,
                         None, synthetic=True)


def _read_flow(conversation: Conversation, ledger: CallLedger,
               decided: Mapping[str, Mapping[str, Any]] | None = None) -> _Flow:
    reader = _Reader(conversation, ledger, decided)
    steps = reader.read()
    instructions = conversation.session.get("instructions")
    return _Flow(instructions if isinstance(instructions, str) and instructions else None,
                 steps, reader.notes)


# ---- formats -----------------------------------------------------------------------------------


def _arguments_object(called: _Called, notes: list[ExportNote]) -> dict[str, Any]:
    """The call's arguments as the object Anthropic's `input` and Gemini's `args` require."""
    try:
        value = json.loads(called.arguments)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, dict):
        return value
    notes.append(ExportNote(
        "bad_arguments", f"arguments of call {called.call_id} ({called.name}) are not a JSON "
        f"object ({called.arguments[:80]!r}); exported as {{}}", called.item_id, called.call_id))
    return {}


def _system_text(flow: _Flow, notes: list[ExportNote]) -> str | None:
    """The session instructions and the system messages, for formats with a separate system
    prompt. System messages sat at a place in the conversation, which such formats cannot keep."""
    parts = [flow.instructions] if flow.instructions else []
    moved = [step.text for step in flow.steps if isinstance(step, _Said) and step.role == "system"]
    if moved:
        notes.append(ExportNote("system_moved", f"{len(moved)} system message(s) moved from the "
                                "conversation into the system prompt"))
    parts += moved
    return "\n\n".join(parts) if parts else None


def _to_openai_chat(flow: _Flow, notes: list[ExportNote]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if flow.instructions:
        messages.append({"role": "system", "content": flow.instructions})
    assistant: dict[str, Any] | None = None   # the assistant message being built
    for step in flow.steps:
        if isinstance(step, _Called) or (isinstance(step, _Said) and step.role == "assistant"):
            if assistant is None:
                assistant = {"role": "assistant", "content": None}
                messages.append(assistant)
            if isinstance(step, _Called):
                assistant.setdefault("tool_calls", []).append({
                    "id": step.call_id, "type": "function",
                    "function": {"name": step.name, "arguments": step.arguments}})
            else:
                assistant["content"] = (f"{assistant['content']}\n{step.text}"
                                        if assistant["content"] else step.text)
            continue
        assistant = None
        if isinstance(step, _Said):
            messages.append({"role": step.role, "content": step.text})
        else:
            messages.append({"role": "tool", "tool_call_id": step.call_id, "content": step.output})
    return {"messages": messages}


def _merged(role: str, blocks: list[dict[str, Any]], turns: list[dict[str, Any]], key: str) -> None:
    """Append `blocks` to the last turn when it has the same role, else start a turn."""
    if turns and turns[-1]["role"] == role:
        turns[-1][key].extend(blocks)
    else:
        turns.append({"role": role, key: list(blocks)})


def _to_anthropic(flow: _Flow, notes: list[ExportNote]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for step in flow.steps:
        if isinstance(step, _Said):
            if step.role != "system":
                _merged(step.role, [{"type": "text", "text": step.text}], messages, "content")
        elif isinstance(step, _Called):
            _merged("assistant", [{"type": "tool_use", "id": step.call_id, "name": step.name,
                                   "input": _arguments_object(step, notes)}], messages, "content")
        else:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": step.call_id}
            if step.output:
                block["content"] = step.output
            block["is_error"] = step.is_error
            _merged("user", [block], messages, "content")
    document: dict[str, Any] = {}
    system = _system_text(flow, notes)
    if system:
        document["system"] = system
    document["messages"] = messages
    return document


def _gemini_response(step: _Answered) -> dict[str, Any]:
    """`{"error": ...}` or `{"output": ...}`; an output that is a JSON object or array stays
    structured, any other output is kept as its text."""
    if step.is_error:
        return {"error": step.error}
    try:
        value = json.loads(step.output)
    except (ValueError, RecursionError):
        value = None
    return {"output": value if isinstance(value, (dict, list)) else step.output}


def _to_gemini(flow: _Flow, notes: list[ExportNote]) -> dict[str, Any]:
    contents: list[dict[str, Any]] = []
    for step in flow.steps:
        if isinstance(step, _Said):
            if step.role != "system":
                role = "model" if step.role == "assistant" else "user"
                _merged(role, [{"text": step.text}], contents, "parts")
        elif isinstance(step, _Called):
            _merged("model", [{"functionCall": {"id": step.call_id, "name": step.name,
                                                "args": _arguments_object(step, notes)}}],
                    contents, "parts")
        else:
            _merged("user", [{"functionResponse": {"id": step.call_id, "name": step.name,
                                                   "response": _gemini_response(step)}}],
                    contents, "parts")
    document: dict[str, Any] = {}
    system = _system_text(flow, notes)
    if system:
        document["systemInstruction"] = {"parts": [{"text": system}]}
    document["contents"] = contents
    return document


def _to_vapi(flow: _Flow, notes: list[ExportNote]) -> dict[str, Any]:
    """Vapi's tool-call results: `result` or `error` as text, and `message` (what the assistant
    says about it) in Vapi's `request-complete` / `request-failed` message shape."""
    results: list[dict[str, Any]] = []
    for step in flow.steps:
        if not isinstance(step, _Answered) or step.synthetic:
            continue  # Vapi has no rule that every call is answered: unanswered ones stay out
        result: dict[str, Any] = {"toolCallId": step.call_id, "name": step.name}
        if step.is_error:
            error = step.error
            result["error"] = error if isinstance(error, str) else json.dumps(error, ensure_ascii=False)
        else:
            result["result"] = step.output
        if step.message:
            result["message"] = {"type": "request-failed" if step.is_error else "request-complete",
                                 "content": step.message}
        results.append(result)
    return {"results": results}


_FORMATTERS: dict[str, Callable[[_Flow, list[ExportNote]], dict[str, Any]]] = {
    "openai-chat": _to_openai_chat,
    "anthropic": _to_anthropic,
    "gemini": _to_gemini,
    "vapi": _to_vapi,
}


def _formatter(format: str) -> Callable[[_Flow, list[ExportNote]], dict[str, Any]]:
    try:
        return _FORMATTERS[format]
    except KeyError:
        raise ExportError(
            f"unknown export format {format!r}; choose one of: {', '.join(FORMATS)}") from None


# ---- public API --------------------------------------------------------------------------------


def export_conversation(
    source: Engine | tuple[Conversation, CallLedger], format: str
) -> Export:
    """The conversation of `source` (an engine, or its conversation and ledger) in `format`,
    with a report of what the export had to change or could not carry."""
    if isinstance(source, tuple):
        conversation, ledger = source
    else:
        conversation, ledger = source.conversation, source.ledger
    return _export(conversation, ledger, format)


def _export(conversation: Conversation, ledger: CallLedger, format: str,
            decided: Mapping[str, Mapping[str, Any]] | None = None) -> Export:
    formatter = _formatter(format)
    flow = _read_flow(conversation, ledger, decided)
    notes = list(flow.notes)
    document = formatter(flow, notes)
    return Export(format, document, notes)


def engine_from_recording(path: str | Path | Recording) -> tuple[Engine, list[str]]:
    """An engine of the recording's dialect fed what the provider saw of a recorded session, and
    the reader's warnings. It has no tools of its own, so every call and answer is taken as it
    was.

    OpenAI-family providers echo every item the relay or the client created, so their frames
    alone are the conversation. Gemini Live echoes nothing (`Dialect.echoes_conversation`): the
    engine also reads what went up, as a client's frames (the relay's answers and the client's
    turns, as sent; for a plain event log, the client's messages)."""
    recording = _recording(path)
    session_id = str((recording.header or {}).get("session_id") or recording.path.stem)
    dialect = recording.dialect
    sent_up: str | None = None   # the direction of what went up, when the engine reads it too
    config = EngineConfig(mode="replay")
    if not dialect.echoes_conversation:
        config = EngineConfig(mode="proxy", hide_tool_events=False)
        sent_up = RELAY_TO_UPSTREAM if any(f.direction == RELAY_TO_UPSTREAM for f in recording.frames) \
            else CLIENT_TO_RELAY
    engine = new_engine(dialect=dialect, config=config, session_id=session_id)
    for frame in recording.frames:
        if frame.direction == UPSTREAM_TO_RELAY:
            engine.receive_upstream(_frame_payload(frame), frame.t)
        elif frame.direction == sent_up:
            engine.receive_client(_frame_payload(frame), frame.t)
    return engine, recording.warnings


def _recording(path: str | Path | Recording) -> Recording:
    """The recording at `path` (or `path` itself); ExportError says why it cannot be read."""
    if isinstance(path, Recording):
        return path
    try:
        return read_recording(path)
    except OSError as exc:
        raise ExportError(f"cannot read {path}: {exc.strerror or exc}") from None
    except RecordingError as exc:
        raise ExportError(str(exc)) from None


def _frame_payload(frame: Frame) -> str | bytes:
    """The frame as it crossed the socket (the reader sets exactly one of the three)."""
    if frame.event is not None:
        return json.dumps(frame.event, ensure_ascii=False)
    return frame.raw if frame.raw is not None else frame.binary or b""


def export_recording(path: str | Path | Recording, format: str) -> Export:
    """`export_conversation` on a recorded session (a relay recording or a plain event log).

    Calls are seen from the outside here, as in any recording, with what the relay recorded
    beside the frames: for each of its calls, a `relay` line saying whether the output is an
    error and what the assistant was to say about it (Vapi `message`: `ToolResult(message=...)`,
    else the tool's `on_complete` / `on_failure`). A recording without those lines (written
    before the relay kept them, or a plain event log) tells errors by the output itself (a JSON
    object whose only key is `error`) and has no message."""
    _formatter(format)  # an unknown format fails before the file is read
    path = _recording(path)
    engine, warnings = engine_from_recording(path)
    exported = _export(engine.conversation, engine.ledger, format, path.tool_calls_decided())
    notes = [ExportNote("recording", warning) for warning in warnings] + exported.report
    return Export(exported.format, exported.document, notes)


# ---- the command -------------------------------------------------------------------------------


def run_export(path: str, format: str, *, out: str | None = None, allow_incomplete: bool = False) -> int:
    """`relay export`: the document to `out` (default: standard output), the report's notes to
    standard error. A recording it cannot use (`load_recording`: not a recording, or incomplete
    unless `allow_incomplete`) or an `out` it cannot write raises (`relay.exits`: status 2)."""
    _formatter(format)
    exported = export_recording(load_recording(path, allow_incomplete=allow_incomplete), format)
    for note in exported.report:
        print(f"relay export: {note}", file=sys.stderr)
    text = exported.to_json()
    if out is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UnusableInput(f"cannot write {out}: {exc.strerror or exc}") from None
    return 0


__all__ = [
    "AUDIO_WITHOUT_TRANSCRIPT", "Export", "ExportError", "ExportNote", "FORMATS", "Format",
    "engine_from_recording", "export_conversation", "export_recording",
]
