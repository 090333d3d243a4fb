"""A session as the harness walks it: the ordered events of what happened, read from the frames
that crossed the relay, whatever made them (a scripted session, a replay, a recording on disk).

    timeline = Timeline.from_recording("recordings/refund.jsonl")
    for event in timeline:
        print(event.describe())

One event model for every source, so that the same expectations (`relay.offline.expect`) apply to
all of them. The kinds (`Event.kind`):

    user        the caller said something (`text`)
    barge_in    the caller spoke over the assistant (or, Gemini, the server said it was interrupted)
    call        the model called a tool (`name`, `arguments`, `call_id`; `by`: who answers it,
                `relay` for the relay's tools, else `client`)
    output      an answer to a call went upstream (`text`, `status`, `by`: relay or client;
                `final` is False for a Gemini interim answer; `outcome` when the relay noted it)
    filler      the relay asked the model to say `text` while `call_ids` run
    follow_up   the relay asked the model to speak about the outputs of `call_ids`
    spoken      the assistant's words (`text`), one event per message or Gemini turn
    cancelled   the server withdrew calls (`call_ids`): a cancelled or failed response, or
                Gemini's toolCallCancellation; no answer may follow
    cancel      the relay cancelled a response
    update      the relay told the model news from a streaming tool whose output is in
    error       the upstream refused something (`status`: its code, `text`: its message)
    response / response_done / create / closed
                bookkeeping: a response began or ended (`status`), a client's response.create
                went up, the session closed; walked over by the expectations unless asked for

The frames are read with the dialects' vocabulary (beta names as GA, Gemini's spellings); the
relay's own requests are told by the metadata it puts on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from relay.dialects import DIALECTS, GEMINI, OPENAI, Dialect
from relay.dialects.base import ToolFlow
from relay.dialects.gemini import is_gemini_message
from relay.offline.delegation_events import DelegationReader
from relay.offline.events import CALL, OUTPUT, Event, ItemReader, Reader, TurnReader, decoded, upstream_bound
from relay.recording.format import Frame, Recording
from relay.recording.reader import read_recording


@dataclass
class Timeline(Sequence[Event]):
    """The events of one session in order, with what the expectations need to know about it."""

    events: list[Event]
    source: str
    """What the session is: a recording's path, `scripted session (openai)`..."""
    relay_tools: frozenset[str] = frozenset()
    dialect: str = "openai"
    """The name of the dialect the session's frames were read in."""
    silent_calls: frozenset[str] = frozenset()
    """Relay calls not owed speech after their answer (silent scheduling, interrupted)."""
    inspect: Callable[[], str | None] = field(default=lambda: None, repr=False)
    """The `relay inspect ...` command that shows this session (a scripted one is saved first)."""
    appends_seen: Any = field(default=None, repr=False)
    """GPT-Live: the relay's appends and the server's answers to them, as the frames were read
    (`relay.offline.delegation_checks.delegation_appends` takes them); None for the other wires."""

    def __getitem__(self, index: Any) -> Any:
        return self.events[index]

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def of(self, *kinds: str) -> list[Event]:
        """The events of these kinds, in order."""
        return [event for event in self.events if event.kind in kinds]

    def calls(self, name: str | None = None) -> list[Event]:
        return [e for e in self.of(CALL) if name is None or e.name == name]

    def outputs(self, call_id: str | None = None) -> list[Event]:
        return [e for e in self.of(OUTPUT) if call_id is None or e.call_id == call_id]

    def render(self, mark: int | None = None, *, around: int | None = None) -> str:
        """The timeline as lines (`>>` marks the event at index `mark`); `around` keeps that
        many events on each side of the mark."""
        events = self.events
        if around is not None and mark is not None:
            events = events[max(0, mark - around):mark + around + 1]
        lines = [("  >> " if event.index == mark else "     ") + event.describe() for event in events]
        if mark is not None and mark >= len(self.events):
            lines.append("  >> (end of the session)")
        return "\n".join(lines) or "     (nothing happened)"

    # ---- building --------------------------------------------------------------------------
    @classmethod
    def from_frames(cls, frames: Iterable[Frame], *, dialect: Dialect | str, source: str,
                    relay_tools: Iterable[str] = (), outcomes: dict[str, str] | None = None,
                    **options: Any) -> Timeline:
        """Read frames (in order) into a timeline. `outcomes`: the relay's decided outcome of
        each call, by call id, where known (a recording's notes, a scripted session's engine)."""
        frames = list(frames)
        tools = frozenset(relay_tools)
        chosen = wire_dialect(dialect, frames)
        reader = READERS[chosen.flow](tools, outcomes or {}, upstream_bound(frames), dialect=chosen)
        for frame in frames:
            event = reader.event_of(frame) if reader.wants(frame) else None
            if event is not None:
                reader.read(frame, event)
        reader.finish()
        silent = frozenset(reader.silent) | options.pop("silent_calls", frozenset())
        return cls(reader.events, source, tools, chosen.name, silent, appends_seen=reader.appends_seen, **options)

    @classmethod
    def from_recording(cls, recording: str | Path | Recording, *, relay_tools: Iterable[str] | None = None) -> Timeline:
        """A recording on disk (or read): a relay recording knows its relay's tools (its header);
        for a plain event log, `relay_tools` says which calls a relay would have owned."""
        if not isinstance(recording, Recording):
            recording = read_recording(recording)
        header = recording.header or {}
        tools = relay_tools if relay_tools is not None else [t for t in header.get("tools") or () if isinstance(t, str)]
        outcomes = {call_id: str(note["outcome"]) for call_id, note in recording.tool_calls_decided().items()
                    if note.get("outcome")}
        path = recording.path
        return cls.from_frames(recording.frames, dialect=recording.dialect, source=str(path), relay_tools=tools,
                               outcomes=outcomes, inspect=lambda: f"relay inspect {path}")

    @classmethod
    def from_replay(cls, result: Any) -> Timeline:
        """A replay's session (`relay.testing.replay`'s result): the recorded upstream frames the
        relay under test was given and what it sent, at the replay's times."""
        engine = result.engine
        outcomes = decided_outcomes(engine.ledger)
        silent = not_owed_speech(engine.ledger)
        path = result.path
        return cls.from_frames(result.frames, dialect=engine.dialect, source=f"replay of {path}",
                               relay_tools=[spec.name for spec in engine.tools], outcomes=outcomes,
                               silent_calls=silent, inspect=lambda: f"relay inspect {path}")


READERS: dict[ToolFlow, type[Reader]] = {
    ToolFlow.ITEMS: ItemReader, ToolFlow.TURNS: TurnReader, ToolFlow.DELEGATIONS: DelegationReader}
"""The timeline's reader of each tool flow (`Dialect.flow`), made with the session's dialect: a
family of a known flow is read by its flow's reader through its codec; a family of a new flow
registers its reader here (`register_reader`)."""


def register_reader(flow: ToolFlow, reader: type[Reader]) -> None:
    """Make `reader` the timeline's reader of `flow`'s sessions."""
    READERS[flow] = reader


def wire_dialect(dialect: Dialect | str, frames: Sequence[Frame] = ()) -> Dialect:
    """The dialect a session's frames are read in: `dialect`, or the registered one of that
    name; for a name this relay does not know, Gemini Live when the first event is a Gemini
    message, else OpenAI (as a recording without a header is read)."""
    if isinstance(dialect, Dialect):
        return dialect
    known = DIALECTS.get(dialect)
    if known is not None:
        return known
    first = next((event for event in map(decoded, frames) if event is not None), None)
    return GEMINI if is_gemini_message(first) else OPENAI


def decided_outcomes(ledger: Iterable[Any]) -> dict[str, str]:
    """How the engine decided each call ended, by call id, as the outcome's name (`timeout`,
    `cancelled`...). The one place the harness reads the engine's outcomes: a `CallOutcome`'s
    value (a plain string is taken as it is)."""
    return {entry.call_id: str(getattr(entry.outcome, "value", entry.outcome))
            for entry in ledger if entry.outcome is not None}


def not_owed_speech(ledger: Iterable[Any]) -> frozenset[str]:
    """The relay calls an engine decided not to have spoken about: scheduled `silent`, or
    interrupted by the caller (their interruption policy said so)."""
    return frozenset(entry.call_id for entry in ledger
                     if entry.relay_owned and (not entry.speak or entry.scheduling == "silent"))


__all__ = ["READERS", "Timeline", "decided_outcomes", "not_owed_speech", "register_reader", "wire_dialect"]
