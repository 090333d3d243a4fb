"""A session's conversation read once into format-neutral steps, for the export's formats
(`relay.offline.export`): what was said, by whom, the calls made and their answers, in the order
every target format wants (a call's outputs right after the assistant turn that made it), with a
note for everything changed, dropped or not known on the way. Read from the engine's conversation
(`read_flow`: the item-based and turn-based flows), or from the session's timeline
(`timeline_flow`: GPT-Live's delegations, which keep no conversation of items).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from relay.dialects.openai import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, MCP_CALL, MESSAGE
from relay.engine import CallLedger, CallState, Owner
from relay.engine.conversation import Conversation, ItemRecord
from relay.offline.events import CALL, OUTPUT, SPOKEN, USER, Event
from relay.tools.render import error_in_output

AUDIO_WITHOUT_TRANSCRIPT = "[audio without transcript]"
SESSION_ENDED = "the session ended before the call was answered"

# content part types whose words `ItemRecord.text()` reads; anything else cannot be exported
_SPOKEN_OR_WRITTEN = frozenset(
    {"input_text", "output_text", "text", "input_audio", "output_audio", "audio"}
)


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


# ---- the steps -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Said:
    role: str  # system | user | assistant
    text: str


@dataclass(frozen=True, slots=True)
class Called:
    call_id: str
    name: str
    arguments: str
    item_id: str


@dataclass(frozen=True, slots=True)
class Answered:
    call_id: str
    name: str
    output: str
    is_error: bool
    error: Any           # the error value when is_error (the `error` member, or the whole output)
    message: str | None  # what the assistant was to say about the result (relay calls only)
    synthetic: bool


Step = Said | Called | Answered


@dataclass
class Flow:
    """The conversation read once: session instructions, steps in export order, and notes."""

    instructions: str | None
    steps: list[Step]
    notes: list[ExportNote]


class FlowReader:
    """Walks the conversation in order and turns items into steps.

    An assistant turn is a run of assistant messages and function calls; when the run ends, the
    outputs of its calls follow it, in call order, wherever they sat in the conversation."""

    def __init__(self, conversation: Conversation, ledger: CallLedger,
                 decided: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.ledger = ledger
        self.decided = decided or {}
        self.records = conversation.visible_items()
        self.notes: list[ExportNote] = []
        self.steps: list[Step] = []
        self.calls_in_conversation: set[str] = set()
        self.outputs: dict[str, list[tuple[int, ItemRecord]]] = {}
        for position, record in enumerate(self.records):
            if record.type == FUNCTION_CALL and record.call_id:
                self.calls_in_conversation.add(record.call_id)
            elif record.type == FUNCTION_CALL_OUTPUT and record.call_id:
                self.outputs.setdefault(record.call_id, []).append((position, record))
        self.seen_calls: set[str] = set()
        self.run: list[Called] = []
        self.run_end = -1

    def note(self, kind: str, message: str, record: ItemRecord | None = None,
             call_id: str | None = None) -> None:
        self.notes.append(ExportNote(kind, message, record.id if record else None, call_id))

    def read(self) -> list[Step]:
        for position, record in enumerate(self.records):
            if record.type == FUNCTION_CALL:
                self.call(position, record)
            elif record.type == MESSAGE and record.role == "assistant":
                self.message(record)
                if self.run:
                    self.run_end = position
            else:
                self.end_run()
                if record.type == MESSAGE:
                    self.message(record)
                elif record.type == FUNCTION_CALL_OUTPUT:
                    self.stray_output(record)
                elif record.type == MCP_CALL:
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
        self.steps.append(Said(role, text))

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
        called = Called(call_id, name, arguments, record.id)
        self.steps.append(called)
        self.run.append(called)
        self.run_end = position

    def provider_mcp_call(self, record: ItemRecord) -> None:
        """A call the provider ran on its own MCP server: a call answered at once by its output or error."""
        data, name, error = record.data, str(record.name or ""), record.data.get("error")
        detail = error.get("message") if isinstance(error, dict) else error
        output = json.dumps({"error": detail}, ensure_ascii=False) if error else str(data.get("output") or "")
        self.note("provider_mcp_call", f"mcp_call {record.id} ran {name} on the provider's MCP server {data.get('server_label')!r}: exported as a call and its {'error' if error else 'output'}", record)
        self.steps += [Called(record.id, name, str(data.get("arguments") or "{}"), record.id),
                       Answered(record.id, name, output, bool(error), detail if error else None, None, synthetic=False)]

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
            if record.type != FUNCTION_CALL_OUTPUT or record.call_id not in ids:
                break
            positions.add(position)
            position += 1
        return positions

    def answered(self, called: Called, record: ItemRecord) -> Answered:
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
        return Answered(called.call_id, called.name, output, is_error, error if is_error else None,
                         message, synthetic=False)

    def unanswered(self, called: Called) -> Answered:
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
        return Answered(called.call_id, called.name, json.dumps({"error": error}), True, error,
                         None, synthetic=True)


def read_flow(conversation: Conversation, ledger: CallLedger,
               decided: Mapping[str, Mapping[str, Any]] | None = None) -> Flow:
    reader = FlowReader(conversation, ledger, decided)
    steps = reader.read()
    instructions = conversation.session.get("instructions")
    return Flow(instructions if isinstance(instructions, str) and instructions else None,
                 steps, reader.notes)


class TimelineFlow:
    """A session's steps read from its timeline (`relay.offline.timeline.Timeline`), for a flow
    whose conversation is not a list of items the engine keeps (GPT-Live's delegations): the
    words of both sides, and each call (a backend's function call, a client delegation named
    `delegation`) with its answer right after the assistant turn that made it, in call order."""

    def __init__(self, events: list[Event], decided: Mapping[str, Mapping[str, Any]]) -> None:
        self.events = events
        self.decided = decided
        self.notes: list[ExportNote] = []
        self.steps: list[Step] = []
        self.run: list[Called] = []
        self.answers: dict[str, Event] = {}
        for event in events:
            if event.kind == OUTPUT and event.final and event.call_id:
                self.answers.setdefault(event.call_id, event)

    def read(self) -> list[Step]:
        seen: set[str] = set()
        answered: set[str] = set()      # calls answered by this point of the session
        for event in self.events:
            if event.kind == OUTPUT and event.call_id:
                answered.add(event.call_id)
            if event.kind == CALL and event.call_id and event.call_id not in seen:
                seen.add(event.call_id)
                arguments = event.arguments if isinstance(event.arguments, str) else json.dumps(event.arguments)
                called = Called(event.call_id, str(event.name or ""), arguments, event.call_id)
                self.steps.append(called)
                self.run.append(called)
            elif event.kind == SPOKEN and event.text:
                if any(called.call_id in answered for called in self.run):
                    self.end_run()   # words after the answers: the turn that continues from them
                self.steps.append(Said("assistant", event.text))
            elif event.kind == USER and event.text:
                self.end_run()
                self.steps.append(Said("user", event.text))
        self.end_run()
        return self.steps

    def end_run(self) -> None:
        for called in self.run:
            answer = self.answers.get(called.call_id)
            self.steps.append(self.unanswered(called) if answer is None else self.answered(called, answer.text or ""))
        self.run = []

    def answered(self, called: Called, output: str) -> Answered:
        is_error, error = error_in_output(output)
        decided = self.decided.get(called.call_id) or {}
        if isinstance(decided.get("is_error"), bool):
            if decided["is_error"] and not is_error:
                error = output
            is_error = decided["is_error"]
        message = decided.get("message") if isinstance(decided.get("message"), str) else None
        return Answered(called.call_id, called.name, output, is_error, error if is_error else None, message,
                        synthetic=False)

    def unanswered(self, called: Called) -> Answered:
        self.notes.append(ExportNote("unanswered_call", f"call {called.call_id} ({called.name}) has no output: "
                                     f"{SESSION_ENDED}", call_id=called.call_id))
        error = f"no output: {SESSION_ENDED}"
        return Answered(called.call_id, called.name, json.dumps({"error": error}), True, error, None, synthetic=True)


def timeline_flow(events: list[Event], decided: Mapping[str, Mapping[str, Any]] | None = None,
                  instructions: str | None = None) -> Flow:
    """The steps of a session read from its timeline's events (see `TimelineFlow`)."""
    reader = TimelineFlow(events, decided or {})
    steps = reader.read()
    return Flow(instructions, steps, reader.notes)
