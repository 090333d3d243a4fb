"""Reading a session's frames into events: what `relay.offline.timeline.Timeline` holds, one
reader per tool flow (`ItemReader`: the OpenAI family; `TurnReader`: Gemini Live and any wire of
its flow; GPT-Live's delegations: relay/offline/delegation_events.py), and the event kinds (see the timeline's
docstring). The OpenAI family's frames are read as typed events through its codec
(`relay.dialects.openai_codec`: beta names as GA), Gemini's with the dialect's spellings; the
relay's own requests are told by the metadata it puts on them.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from relay.dialects import OPENAI, Dialect, OpenAIFamily
from relay.dialects import gemini_codec as gemini
from relay.dialects import openai_codec as wire
from relay.dialects.gemini import response_text
from relay.dialects.peek import may_be
from relay.engine.sequencer import META_CALLS, META_KIND
from relay.offline.replaying import json_object
from relay.recording.format import (
    CLIENT_TO_RELAY,
    RELAY_TO_CLIENT,
    RELAY_TO_UPSTREAM,
    UPSTREAM_TO_RELAY,
    Frame,
)

USER, BARGE_IN, CALL, OUTPUT = "user", "barge_in", "call", "output"
FILLER, FOLLOW_UP, SPOKEN = "filler", "follow_up", "spoken"
CANCELLED, CANCEL, ERROR, UPDATE = "cancelled", "cancel", "error", "update"
RESPONSE, RESPONSE_DONE, CREATE, CLOSED = "response", "response_done", "create", "closed"
APPEND, APPENDED = "append", "appended"
BOOKKEEPING = frozenset({RESPONSE, RESPONSE_DONE, CREATE, CLOSED})
"""Kinds the expectations walk over: every session has them, and they say nothing by themselves."""

_SAY_EXACTLY = "say exactly:"


def is_error_output(text: str | None) -> bool:
    """Whether an output's text is the relay's error shape, `{"error": ...}`."""
    if not text or not text.startswith("{"):
        return False
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):   # not JSON, or nested past the parser
        return False
    return isinstance(value, dict) and set(value) == {"error"}


@dataclass(frozen=True)
class Event:
    """One thing that happened in a session (see the module docstring for the kinds)."""

    index: int
    t: float
    kind: str
    call_id: str | None = None
    name: str | None = None
    text: str | None = None
    arguments: Any = None
    status: str | None = None
    by: str | None = None
    response_id: str | None = None
    call_ids: tuple[str, ...] = ()
    final: bool = True
    outcome: str | None = None
    line: int | None = None
    """The frame's line in the recording it was read from (None when there is no file)."""

    @property
    def is_error(self) -> bool:
        """An output that is an error (`{"error": ...}`), or an error event."""
        return self.kind == ERROR or (self.kind == OUTPUT and is_error_output(self.text))

    def describe(self) -> str:
        """One line, as the timelines in reports show it."""
        head = f"{self.t:9.3f}  {self.kind:<14}"
        return head + self._what()

    def _what(self) -> str:
        kind = self.kind
        if kind == CALL:
            return f"{self.name} {_clip(_json(self.arguments), 70)} ({self.call_id}, answered by the {self.by})"
        if kind == OUTPUT:
            interim = "" if self.final else " (interim)"
            outcome = f" {self.outcome}" if self.outcome else ""
            return (f"{self.call_id} ({self.name}) by the {self.by}{interim} [{self.status}]{outcome}: "
                    f"{_clip(self.text or '', 70)}")
        if kind in (FILLER, FOLLOW_UP):
            said = f': "{_clip(self.text, 60)}"' if self.text else ""
            return f"for {', '.join(self.call_ids) or 'no call'}{said}"
        if kind in (SPOKEN, USER):
            return f'"{_clip(self.text or "", 80)}"'
        if kind == CANCELLED:
            return f"{', '.join(self.call_ids)}: {self.text}"
        if kind in (APPEND, APPENDED):
            return f"{self.call_id or '(no delegation)'} [{self.status}] by the {self.by}: {_clip(self.text or '', 70)}"
        if kind == ERROR:
            return f"{self.status}: {_clip(self.text or '', 80)}"
        if kind in (RESPONSE, RESPONSE_DONE):
            status = f" [{self.status}]" if self.status else ""
            return f"{self.response_id or ''} by {self.by or '?'}{status}"
        return _clip(self.text or "", 80)


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _clip(text: str | None, limit: int) -> str:
    text = (text or "").replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def decoded(frame: Frame) -> dict[str, Any] | None:
    if frame.event is not None:
        return frame.event
    data = frame.raw if frame.raw is not None else frame.binary
    return None if data is None else json_object(data)


def upstream_bound(frames: list[Frame]) -> str:
    """Which direction carried what went to the upstream: the relay's sends, or, in a plain event
    log (no relay), the client's own."""
    return RELAY_TO_UPSTREAM if any(f.direction == RELAY_TO_UPSTREAM for f in frames) else CLIENT_TO_RELAY


class Reader:
    """What every flow's reader shares: the events made so far, who owns which call, and which
    client answers the relay only forwarded. A flow's reader is made with the session's dialect
    (`dialect`), whose codec it reads the frames through, and reads each frame's decoded event in
    `dispatch`."""

    appends_seen: Any = None
    """What a delegating flow's reader noted of the relay's appends, read with the frames
    (`relay.offline.delegation_checks.DelegationAppends`); None for the other flows."""

    def __init__(self, relay_tools: frozenset[str], outcomes: dict[str, str], upstream_bound: str, *,
                 dialect: Dialect) -> None:
        self.dialect = dialect
        self.relay_tools = relay_tools
        self.outcomes = outcomes
        self.upstream_bound = upstream_bound
        self.events: list[Event] = []
        self.calls: dict[str, Event] = {}
        self.client_answers: Counter[tuple[str, str]] = Counter()
        self.open_calls: set[str] = set()          # announced, not answered nor withdrawn
        self.silent: set[str] = set()              # calls answered without a wish to be spoken about
        self.t = 0.0
        self.line: int | None = None

    def add(self, kind: str, **fields: Any) -> Event:
        event = Event(len(self.events), round(self.t, 6), kind, line=self.line, **fields)
        self.events.append(event)
        return event

    def wants(self, frame: Frame) -> bool:
        """Whether the frame may say something to this reader (one that cannot is not decoded)."""
        return True

    def event_of(self, frame: Frame) -> Any:
        """The frame's event as `dispatch` reads it (None: no event): the decoded object."""
        return decoded(frame)

    def read(self, frame: Frame, event: Any) -> None:
        self.t = frame.t
        self.line = frame.line_no if frame.line_no > 0 else None
        self.dispatch(frame.direction, event)

    def dispatch(self, direction: str, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def route(self, direction: str, typed: Any, refusal: dict[str, Any] | None) -> None:
        """A typed event to the reader's side: `upstream` (what the server sent) or `sent` (what
        went up); toward the client, an `error` event (`refusal`: its error object), which the
        relay wrote to refuse something."""
        if direction == UPSTREAM_TO_RELAY:
            self.upstream(typed)
        elif direction in (RELAY_TO_UPSTREAM, CLIENT_TO_RELAY):
            self.sent(direction, typed)
        elif direction == RELAY_TO_CLIENT and refusal is not None:
            self.add(ERROR, status=str(refusal.get("code") or "error"), text=str(refusal.get("message") or ""),
                     by="relay")

    def upstream(self, typed: Any) -> None:
        """What the server sent, typed (the flows whose readers `route`)."""

    def sent(self, direction: str, typed: Any) -> None:
        """What went up, typed (the flows whose readers `route`)."""

    def finish(self) -> None:
        """The frames are over."""

    def call(self, call_id: Any, name: Any, arguments: Any, response_id: Any = None) -> None:
        if not isinstance(call_id, str) or call_id in self.calls:
            return   # a repeated delivery of the same call is one call
        name = name if isinstance(name, str) else ""
        owner = "relay" if name in self.relay_tools else "client"
        self.calls[call_id] = self.add(CALL, call_id=call_id, name=name, arguments=arguments, by=owner,
                                       response_id=response_id if isinstance(response_id, str) else None)
        self.open_calls.add(call_id)

    def output(self, direction: str, call_id: Any, text: str, status: str | None, *, final: bool = True) -> None:
        """An answer seen on its way: the client's (remembered, so that the relay forwarding it is
        not taken for the relay's own), or one that went to the upstream."""
        if not isinstance(call_id, str):
            return
        if direction == CLIENT_TO_RELAY and self.upstream_bound == RELAY_TO_UPSTREAM:
            self.client_answers[(call_id, text)] += 1
            return
        if direction != self.upstream_bound:
            return
        if direction == CLIENT_TO_RELAY or self.client_answers[(call_id, text)]:
            by = "client"
            if self.client_answers[(call_id, text)]:
                self.client_answers[(call_id, text)] -= 1
        else:
            by = "relay"
        call = self.calls.get(call_id)
        self.add(OUTPUT, call_id=call_id, name=call.name if call else None, text=text, status=status, by=by,
                 final=final, outcome=self.outcomes.get(call_id) if by == "relay" else None)
        if final:
            self.open_calls.discard(call_id)


_UPSTREAM_NAMES: dict[int, tuple[OpenAIFamily, frozenset[str]]] = {}


def _read_upstream(family: OpenAIFamily) -> frozenset[str]:
    """The names the upstream's events that `ItemReader.upstream` reads arrive by in `family`
    (worked out once a variant)."""
    known = _UPSTREAM_NAMES.get(id(family))
    if known is None or known[0] is not family:
        known = _UPSTREAM_NAMES[id(family)] = (family, wire.names_of(ItemReader.UPSTREAM_READS, family))
    return known[1]


class ItemReader(Reader):
    """Reads the frames of a variant of the OpenAI family (the dialect's names) as its typed events."""

    def __init__(self, *args: Any, dialect: Dialect) -> None:
        super().__init__(*args, dialect=dialect)
        self.family = dialect if isinstance(dialect, OpenAIFamily) else OPENAI
        self.error_name = self.family.server_names.get(_ERROR, _ERROR)
        self.active: dict[str, str] = {}            # response id -> who made it
        self.response_calls: dict[str, list[str]] = {}
        self.client_creates = 0                     # client creates gone up, not yet answered
        self.incomplete: set[str] = set()           # calls whose item ended incomplete: never to run
        self.read_upstream = _read_upstream(self.family)

    def wants(self, frame: Frame) -> bool:
        """A frame toward the client says something only as an `error` event: one whose text has
        not even the event's name in it is not decoded (half of a session's frames). One from the
        upstream says something only as an event `upstream` reads (`UPSTREAM_READS`): one whose
        peeked `type` (the only one it has) is another is not decoded (the deltas, most of the
        rest)."""
        raw = frame.raw
        if raw is None:
            return True
        if frame.direction == UPSTREAM_TO_RELAY:
            return may_be(raw, self.read_upstream)
        return frame.direction != RELAY_TO_CLIENT or self.error_name in raw

    def event_of(self, frame: Frame) -> Any:
        """The frame's typed event (the family's codec: beta and the variant's names read as GA),
        a frame's text decoded straight into it (what it cannot read strictly, through the
        decoded object); an `Unknown` is no event."""
        typed = wire.decode(frame.raw, self.family) if frame.raw is not None else wire.Unknown(None)
        if isinstance(typed, wire.Unknown):
            event = decoded(frame)
            typed = wire.event_of(event, self.family) if event is not None else typed
        return None if isinstance(typed, wire.Unknown) else typed

    def dispatch(self, direction: str, typed: Any) -> None:
        self.route(direction, typed, _dict(typed.error) if isinstance(typed, wire.Error) else None)

    # -- what went to the upstream
    def sent(self, direction: str, event: wire.Event) -> None:
        if isinstance(event, wire.ItemCreate):
            item = _dict(event.item)
            if item.get("type") == wire.FUNCTION_CALL_OUTPUT:
                self.output(direction, item.get("call_id"), str(item.get("output") or ""), item.get("status"))
            elif item.get("type") == wire.MESSAGE:
                self.message(direction, item)
            return
        if direction != self.upstream_bound:
            return
        if isinstance(event, wire.ResponseCreate):
            response = _dict(event.response)
            metadata = _dict(response.get("metadata"))
            purpose = metadata.get(META_KIND)
            call_ids = tuple(c for c in str(metadata.get(META_CALLS) or "").split(",") if c)
            if purpose == "filler":
                self.add(FILLER, call_ids=call_ids, text=_said(response.get("instructions")), by="relay")
            elif purpose == "follow_up":
                self.add(FOLLOW_UP, call_ids=call_ids, text=_said(response.get("instructions")), by="relay")
            else:
                self.client_creates += 1
                self.add(CREATE, by="client")
        elif isinstance(event, wire.ResponseCancel):
            self.add(CANCEL, response_id=event.response_id,
                     by="relay" if direction == RELAY_TO_UPSTREAM else "client")

    def message(self, direction: str, item: dict[str, Any]) -> None:
        """A message item put into the conversation: the caller's words, or (one the client did not
        send) the relay's news from a streaming tool."""
        text = _item_text(item)
        if direction == CLIENT_TO_RELAY:
            if item.get("role") == wire.USER:
                self.add(USER, text=text, by="caller")
            self.client_answers[("message", text)] += 1
        elif self.client_answers[("message", text)]:
            self.client_answers[("message", text)] -= 1
        else:
            self.add(UPDATE, text=text, by="relay")

    # -- what the upstream said
    UPSTREAM_READS: tuple[type[wire.Event], ...] = (
        wire.SpeechStarted, wire.InputTranscriptionCompleted, wire.ResponseCreated, wire.OutputItemDone, wire.ItemDone,
        wire.AudioTranscriptDone, wire.TextDone, wire.ResponseDone, wire.Error)
    """The upstream's events `upstream` reads (the frames of others are not decoded: `wants`)."""

    def upstream(self, event: wire.Event) -> None:
        if isinstance(event, wire.SpeechStarted):
            if self.active or self.open_calls:
                self.add(BARGE_IN, by="caller")
        elif isinstance(event, wire.InputTranscriptionCompleted):
            self.add(USER, text=str(event.transcript or ""), by="caller")
        elif isinstance(event, wire.ResponseCreated):
            self.response_created(_dict(event.response))
        elif isinstance(event, (wire.OutputItemDone, wire.ItemDone)):
            item = _dict(event.item)
            if item.get("type") == wire.FUNCTION_CALL and item.get("status") in ("completed", "incomplete"):
                response_id = (event.response_id if isinstance(event, wire.OutputItemDone) else None) \
                    or item.get("response_id")
                self.item_call(item, response_id)
        elif isinstance(event, (wire.AudioTranscriptDone, wire.TextDone)):
            text = event.transcript if isinstance(event, wire.AudioTranscriptDone) else event.text
            self.add(SPOKEN, text=str(text or ""), response_id=event.response_id, by="model")
        elif isinstance(event, wire.ResponseDone):
            self.response_done(_dict(event.response))
        elif isinstance(event, wire.Error):
            error = _dict(event.error)
            self.add(ERROR, status=str(error.get("code") or error.get("type") or "error"),
                     text=str(error.get("message") or ""), by="upstream")

    def item_call(self, item: dict[str, Any], response_id: Any) -> None:
        """A function_call item is done: a call, which may never run if the item is incomplete."""
        call_id = item.get("call_id")
        self.call(call_id, item.get("name"), json_arguments(item.get("arguments")), response_id)
        self.link(response_id, call_id)
        if item.get("status") != "completed" and isinstance(call_id, str):
            self.incomplete.add(call_id)

    def link(self, response_id: Any, call_id: Any) -> None:
        if isinstance(response_id, str) and isinstance(call_id, str):
            calls = self.response_calls.setdefault(response_id, [])
            if call_id not in calls:
                calls.append(call_id)

    def response_created(self, data: dict[str, Any]) -> None:
        response_id = data.get("id")
        if not isinstance(response_id, str) or response_id in self.active:
            return
        metadata = _dict(data.get("metadata"))
        purpose = metadata.get(META_KIND)
        call_ids = tuple(c for c in str(metadata.get(META_CALLS) or "").split(",") if c)
        if purpose in ("filler", "follow_up"):
            by = f"relay {purpose.replace('_', '-')}"
        elif self.client_creates:
            self.client_creates -= 1
            by = "client"
        else:
            by = "server"
        self.active[response_id] = by
        self.add(RESPONSE, response_id=response_id, by=by, status="in_progress", call_ids=call_ids)

    def response_done(self, data: dict[str, Any]) -> None:
        response_id = data.get("id")
        if not isinstance(response_id, str):
            return
        for item in data.get("output") if isinstance(data.get("output"), list) else []:
            if isinstance(item, dict) and item.get("type") == wire.FUNCTION_CALL:
                self.item_call(item, response_id)
        status = str(data.get("status") or "completed")
        by = self.active.pop(response_id, None)
        self.add(RESPONSE_DONE, response_id=response_id, by=by, status=status)
        # a call whose item did not complete never runs; one that did is owed its answer, even
        # when its response ended cancelled afterwards (the relay's interruption policy applies)
        withdrawn = tuple(c for c in self.response_calls.get(response_id, ())
                          if c in self.open_calls and c in self.incomplete)
        if withdrawn:
            details = _dict(data.get("status_details"))
            reason = details.get("reason") or _dict(details.get("error")).get("code")
            self.add(CANCELLED, call_ids=withdrawn, response_id=response_id,
                     text=f"response {status}" + (f" ({reason})" if reason else ""), by="upstream")
            self.open_calls.difference_update(withdrawn)


class TurnReader(Reader):
    """Reads a turn-based wire's frames as the typed messages of `relay.dialects.gemini_codec`,
    through the dialect's codec (Gemini Live's, or a new family's of this flow): a frame of two
    messages, which the service refuses, is read one message at a time.

    A call still open when the server said `interrupted`, which no `toolCallCancellation` names
    after, is owed no speech after its answer (`silent`): a server that drops the BLOCKING call an
    interrupting turn stops, with no cancellation, takes no notice of an answer for it (a user's
    report: docs/gemini.md, "A call dropped with no cancellation"), and no one on the relay's side
    can tell that server from one that will reply."""

    def __init__(self, *args: Any, dialect: Dialect) -> None:
        super().__init__(*args, dialect=dialect)
        self.codec = gemini.turn_codec(dialect)
        self.turn_open = False
        self.turns = 0
        self.said: list[str] = []        # the model's words of the turn so far
        self.heard: list[str] = []       # the caller's transcribed words not yet told
        self.uncancelled: set[str] = set()   # calls open at an `interrupted` that no cancellation named

    def dispatch(self, direction: str, event: dict[str, Any]) -> None:
        messages = gemini.messages_of(event, self.codec)
        if direction == UPSTREAM_TO_RELAY:
            for message in sorted(messages, key=_upstream_order):
                self.upstream(message)
        elif direction in (RELAY_TO_UPSTREAM, CLIENT_TO_RELAY):
            answers = [message for message in messages if isinstance(message, gemini.ToolResponse)]
            for message in answers or messages:   # a frame that answers is read for its answers only
                self.sent(direction, message)

    def sent(self, direction: str, message: gemini.Message) -> None:
        if isinstance(message, gemini.ToolResponse):
            for answer in gemini.entries(message.function_responses, gemini.FunctionResponse):
                final = answer.will_continue is not True
                call_id = gemini.given(answer.id)
                if answer.scheduling == "SILENT" and isinstance(call_id, str):
                    self.silent.add(call_id)
                self.output(direction, call_id, response_text(gemini.given(answer.response)),
                            "completed" if final else "interim", final=final)
            return
        if direction != CLIENT_TO_RELAY:
            return
        if isinstance(message, gemini.RealtimeInput) and isinstance(message.text, str) and message.text:
            self.add(USER, text=message.text, by="caller")
        if isinstance(message, gemini.ClientContent):
            for turn in gemini.entries(message.turns, gemini.Content):
                if gemini.given(turn.role, "user") == "user":
                    words = " ".join(p.text for p in gemini.entries(turn.parts, gemini.Part) if isinstance(p.text, str))
                    if words:
                        self.add(USER, text=words, by="caller")

    def upstream(self, message: gemini.Message) -> None:
        if isinstance(message, gemini.ToolCall):
            self.model_output()
            self.flush_words()
            for call in gemini.entries(message.function_calls, gemini.FunctionCall):
                self.call(gemini.given(call.id), gemini.given(call.name), gemini.given(call.args), self.turn_id())
        elif isinstance(message, gemini.ToolCallCancellation):
            named = [i for i in _ids(message.ids) if isinstance(i, str)]
            self.uncancelled.difference_update(named)
            # an answer that crossed its call's cancellation: the server took it back, no word is owed
            # of it; nor of the turn's calls answered before it: the server cut the turn they were
            # answered in (which it does when the caller interrupts it: the model answers the
            # caller's turn next, if anything), and no later word of the model's is owed to them
            cut = {self.calls[i].response_id for i in named if i in self.calls}
            self.silent.update(call_id for call_id, call in self.calls.items()
                               if call.response_id in cut and call_id not in self.open_calls)
            ids = tuple(i for i in named if i in self.open_calls)
            if ids:
                self.add(CANCELLED, call_ids=ids, text=gemini.ToolCallCancellation.MEMBER, by="upstream")
                self.open_calls.difference_update(ids)
        elif isinstance(message, gemini.ServerContent):
            self.content(message)

    def content(self, content: gemini.ServerContent) -> None:
        heard = content.input_transcription
        if isinstance(heard, gemini.Transcription) and isinstance(heard.text, str):
            self.heard.append(heard.text)
        turn = content.model_turn
        for part in gemini.entries(turn.parts, gemini.Part) if isinstance(turn, gemini.Content) else ():
            if not part.thought:
                self.model_output()
                if isinstance(part.text, str):
                    self.said.append(part.text)
                call = part.function_call
                if isinstance(call, gemini.FunctionCall):   # a call's second delivery (the toolCall is the other)
                    self.flush_words()
                    self.call(gemini.given(call.id), gemini.given(call.name), gemini.given(call.args), self.turn_id())
        transcription = content.output_transcription
        if isinstance(transcription, gemini.Transcription) and isinstance(transcription.text, str):
            self.model_output()
            self.said.append(transcription.text)
        if content.interrupted is True:
            self.uncancelled.update(self.open_calls)
            self.flush_words()
            self.add(BARGE_IN, by="caller")
            self.end_turn("cancelled")
        if content.generation_complete is True:
            self.flush_words()
        if content.turn_complete is True:
            self.flush_words()
            self.end_turn("completed")

    def turn_id(self) -> str:
        return f"turn_{self.turns}"

    def model_output(self) -> None:
        """The model says or does something: a turn begins unless one is open."""
        if self.heard:
            self.add(USER, text="".join(self.heard).strip(), by="caller")
            self.heard = []
        if not self.turn_open:
            self.turns += 1
            self.turn_open = True
            self.add(RESPONSE, response_id=self.turn_id(), by="server", status="in_progress")

    def flush_words(self) -> None:
        if self.said:
            self.add(SPOKEN, text="".join(self.said), response_id=self.turn_id(), by="model")
            self.said = []

    def end_turn(self, status: str) -> None:
        if self.turn_open:
            self.turn_open = False
            self.add(RESPONSE_DONE, response_id=self.turn_id(), by="server", status=status)

    def finish(self) -> None:
        self.flush_words()
        self.silent.update(self.uncancelled)


# ---- wire details --------------------------------------------------------------------------------
_ERROR = wire.event_name(wire.Error)
_UPSTREAM_ORDER = (gemini.ToolCall, gemini.ToolCallCancellation, gemini.ServerContent)


def _ids(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _upstream_order(message: gemini.Message) -> int:
    """A frame of several messages is read calls first, then withdrawals, then content."""
    kind = type(message)
    return _UPSTREAM_ORDER.index(kind) if kind in _UPSTREAM_ORDER else len(_UPSTREAM_ORDER)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def json_arguments(text: Any) -> Any:
    """A call's arguments as an object where they are JSON, else the text as it came."""
    if isinstance(text, str):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):   # not JSON, or nested past the parser (the model's to send)
            return text
    return text


def _item_text(item: dict[str, Any]) -> str:
    parts = [p.get("text") or p.get("transcript") for p in item.get("content") or () if isinstance(p, dict)]
    return " ".join(p for p in parts if isinstance(p, str) and p)


def _said(instructions: Any) -> str | None:
    """What a relay request asks the model to say (`Say exactly: ...`), if anything."""
    if not isinstance(instructions, str):
        return None
    at = instructions.lower().rfind(_SAY_EXACTLY)
    return instructions[at + len(_SAY_EXACTLY):].strip() if at >= 0 else None


