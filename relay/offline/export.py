"""Export a session's conversation in the shape of a neighbouring API.

A realtime session ends as a conversation (items linked by `previous_item_id`) and a call ledger.
Teams replay it elsewhere: as an OpenAI Chat Completions message list, an Anthropic Messages
request, a Gemini `generateContent` request, or the tool-call results a Vapi server returns. The
export works on the engine's `Conversation` and `CallLedger` only, never on raw events, so any
dialect that fills them can be exported: Gemini Live recordings go through the `GeminiEngine`.
GPT-Live keeps no conversation of items: its recordings are read from their timeline (the words
of both sides, the backend's function calls, each client delegation as a call named
`delegation` answered by its appends' words), into the same steps (`FLOWS`: per tool flow).

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

from relay.dialects import gemini_codec as gemini
from relay.dialects import live
from relay.dialects.base import ToolFlow
from relay.engine import CallLedger, Engine, EngineConfig, new_engine
from relay.engine.conversation import Conversation
from relay.errors import UnusableInput
from relay.offline.export_steps import (
    AUDIO_WITHOUT_TRANSCRIPT,
    Answered,
    Called,
    ExportNote,
    Flow,
    Said,
    read_flow,
    timeline_flow,
)
from relay.offline.timeline import Timeline
from relay.recording.format import (
    CLIENT_TO_RELAY,
    RELAY_TO_UPSTREAM,
    UPSTREAM_TO_RELAY,
    Frame,
    Recording,
    RecordingError,
)
from relay.recording.reader import load_recording, read_recording

Format = Literal["openai-chat", "anthropic", "gemini", "vapi"]
FORMATS: tuple[str, ...] = get_args(Format)


class ExportError(UnusableInput, ValueError):
    """The source cannot be exported at all (unknown format, unreadable or foreign recording)."""


@dataclass(frozen=True, slots=True)
class Export:
    """The exported document (what `relay export` writes) and the report beside it."""

    format: str
    document: dict[str, Any]
    report: list[ExportNote] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(self.document, indent=2, ensure_ascii=False) + "\n"


# ---- formats -----------------------------------------------------------------------------------


def _arguments_object(called: Called, notes: list[ExportNote]) -> dict[str, Any]:
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


def _system_text(flow: Flow, notes: list[ExportNote]) -> str | None:
    """The session instructions and the system messages, for formats with a separate system
    prompt. System messages sat at a place in the conversation, which such formats cannot keep."""
    parts = [flow.instructions] if flow.instructions else []
    moved = [step.text for step in flow.steps if isinstance(step, Said) and step.role == "system"]
    if moved:
        notes.append(ExportNote("system_moved", f"{len(moved)} system message(s) moved from the "
                                "conversation into the system prompt"))
    parts += moved
    return "\n\n".join(parts) if parts else None


def _to_openai_chat(flow: Flow, notes: list[ExportNote]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if flow.instructions:
        messages.append({"role": "system", "content": flow.instructions})
    assistant: dict[str, Any] | None = None   # the assistant message being built
    for step in flow.steps:
        if isinstance(step, Called) or (isinstance(step, Said) and step.role == "assistant"):
            if assistant is None:
                assistant = {"role": "assistant", "content": None}
                messages.append(assistant)
            if isinstance(step, Called):
                assistant.setdefault("tool_calls", []).append({
                    "id": step.call_id, "type": "function",
                    "function": {"name": step.name, "arguments": step.arguments}})
            else:
                assistant["content"] = (f"{assistant['content']}\n{step.text}"
                                        if assistant["content"] else step.text)
            continue
        assistant = None
        if isinstance(step, Said):
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


def _to_anthropic(flow: Flow, notes: list[ExportNote]) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for step in flow.steps:
        if isinstance(step, Said):
            if step.role != "system":
                _merged(step.role, [{"type": "text", "text": step.text}], messages, "content")
        elif isinstance(step, Called):
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


def _gemini_response(step: Answered) -> dict[str, Any]:
    """`{"error": ...}` or `{"output": ...}`; an output that is a JSON object or array stays
    structured, any other output is kept as its text."""
    if step.is_error:
        return {"error": step.error}
    try:
        value = json.loads(step.output)
    except (ValueError, RecursionError):
        value = None
    return {"output": value if isinstance(value, (dict, list)) else step.output}


def _to_gemini(flow: Flow, notes: list[ExportNote]) -> dict[str, Any]:
    contents: list[dict[str, Any]] = []
    for step in flow.steps:
        if isinstance(step, Said):
            if step.role != "system":
                role = "model" if step.role == "assistant" else "user"
                _merged(role, [{"text": step.text}], contents, "parts")
        elif isinstance(step, Called):
            call = gemini.FunctionCall(id=step.call_id, name=step.name, args=_arguments_object(step, notes))
            _merged("model", [gemini.plain(gemini.Part(function_call=call))], contents, "parts")
        else:
            answer = gemini.FunctionResponse(id=step.call_id, name=step.name, response=_gemini_response(step))
            _merged("user", [gemini.plain(gemini.Part(function_response=answer))], contents, "parts")
    system = _system_text(flow, notes)
    instruction = gemini.Content(parts=[gemini.Part(text=system)]) if system else gemini.UNSET
    return gemini.plain(gemini.GenerateContentRequest(system_instruction=instruction, contents=contents))


def _to_vapi(flow: Flow, notes: list[ExportNote]) -> dict[str, Any]:
    """Vapi's tool-call results: `result` or `error` as text, and `message` (what the assistant
    says about it) in Vapi's `request-complete` / `request-failed` message shape."""
    results: list[dict[str, Any]] = []
    for step in flow.steps:
        if not isinstance(step, Answered) or step.synthetic:
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


_FORMATTERS: dict[str, Callable[[Flow, list[ExportNote]], dict[str, Any]]] = {
    "openai-chat": _to_openai_chat,
    "anthropic": _to_anthropic,
    "gemini": _to_gemini,
    "vapi": _to_vapi,
}


def _formatter(format: str) -> Callable[[Flow, list[ExportNote]], dict[str, Any]]:
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
    flow = read_flow(conversation, ledger, decided)
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
    formatter = _formatter(format)  # an unknown format fails before the file is read
    recording = _recording(path)
    flow, warnings = FLOWS[recording.dialect.flow](recording)
    notes = list(flow.notes)
    document = formatter(flow, notes)
    return Export(format, document, [ExportNote("recording", warning) for warning in warnings] + notes)


def _engine_flow(recording: Recording) -> tuple[Flow, list[str]]:
    """The steps of a recording whose engine keeps the conversation (`engine_from_recording`)."""
    engine, warnings = engine_from_recording(recording)
    return read_flow(engine.conversation, engine.ledger, recording.tool_calls_decided()), warnings


def _timeline_flow(recording: Recording) -> tuple[Flow, list[str]]:
    """The steps of a GPT-Live recording, read from its timeline: the words of both sides, the
    backend's function calls and the client delegations (a call named `delegation`, answered by
    its appends' words), with the instructions of its `session.start`."""
    starts = (live.event_of(f.event) for f in recording.frames if f.event is not None
              and f.direction in (CLIENT_TO_RELAY, RELAY_TO_UPSTREAM))
    session = next((e.session for e in starts if isinstance(e, live.SessionStart)), None)
    instructions = session.get("instructions") if isinstance(session, dict) else None
    timeline = Timeline.from_recording(recording)
    return timeline_flow(timeline.events, recording.tool_calls_decided(),
                         instructions if isinstance(instructions, str) and instructions else None), recording.warnings


FLOWS: dict[ToolFlow, Callable[[Recording], tuple[Flow, list[str]]]] = {
    ToolFlow.ITEMS: _engine_flow, ToolFlow.TURNS: _engine_flow, ToolFlow.DELEGATIONS: _timeline_flow}
"""How a recording of each tool flow is read into the export's steps: through an engine of its
dialect, whose conversation it fills, or through its timeline (a flow without a conversation of
items). A family of a new flow registers its reading here."""


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
        # a lone surrogate a recording carried: its JSON escape, the same character
        Path(out).write_text(text, encoding="utf-8", errors="backslashreplace")
    except OSError as exc:
        raise UnusableInput(f"cannot write {out}: {exc.strerror or exc}") from None
    return 0


__all__ = [
    "AUDIO_WITHOUT_TRANSCRIPT", "Export", "ExportError", "ExportNote", "FLOWS", "FORMATS", "Format",
    "engine_from_recording", "export_conversation", "export_recording",
]
