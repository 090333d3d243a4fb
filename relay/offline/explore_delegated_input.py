"""A GPT-Live recording read into what the explorer runs (`relay.offline.explore_input`): what
the caller said (its turns) and what the model did (its speech and its delegations, in order),
played back as the scripted GPT-Live session's turns, in the recording's delegation mode.

GPT-Live has no responses to read turns from (../shared/GPT-LIVE.md 5.5): the session's mock
(`relay.mock.live`) asks its script for the model's next reply at each of three moments, and the
recording is read the same way, a turn starting at each:

- the caller speaks (its `session.input_transcript.delta`s, up to the model's next event): the
  turn holds what the model says next and, in client delegation, a call for each
  `session.delegation.created` (named as the relay's notice names its delegate); in Responses
  delegation its calls are the function calls of the backend's nested `response.output_item.done`;
- Responses delegation: the backend's continuation (the nested `response.created` after a
  `response.create`): its calls, or the text the voice model then speaks;
- client delegation: a commentary append of the relay's for a delegation reaching the timeline
  (`session.commentary.appended`): the model speaks it (a filler or a result).

What the model says (`session.output_transcript.delta`) goes to the turn in progress when it
arrives. The voice model speaks on the audio timeline, so the end of one turn's words can come
after the next turn began; where a continuation's own words are known (the backend's text, the
commentary the model speaks) and one of the pieces that came for it starts them, the pieces
before it go back to the turn before. Speech before the caller first speaks has no turn to be
played as (the scripted model only answers) and is left out.

Responses delegation plays the turns in order, as a recording of the other wires does (a
continuation may delegate again). Client delegation answers each of the caller's lines with its
turn (a rule for the line) and has the model speak each commentary of the relay's as it reaches
the timeline (the script's `after_outputs`), with the words the recording said around each when
they are the same each time (else the commentary alone). Turns in order would not do there: the
mock asks its script for a reply at every commentary for a delegation, a filler's too, so they
would fall out of step with the caller's lines as soon as a schedule moves a filler or the answer
(a handler that raises before its filler is due), and the second line would get the first
answer's words and no delegation. A line said twice gets the first time's turn.

`from_live_recording` raises `UnusableInput` with one line for a recording it cannot explore.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from relay.dialects import live as wire
from relay.errors import UnusableInput
from relay.mock import MockScript, Reply, ToolCall
from relay.mock.script import Rule
from relay.offline.events import json_arguments
from relay.offline.explore import NothingToExplore, delegates
from relay.offline.explore_session import Conversation
from relay.offline.scripted_delegations import CLIENT, DELEGATIONS, RESPONSES
from relay.recording.format import CLIENT_TO_RELAY, RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY, Recording

UNHEARD = "..."
"""A caller's line whose words the recording does not hold (its transcript empty)."""
OUTPUT = "{output}"
"""The script's template for the latest output (the commentary the model speaks)."""
DELEGATE = "delegation"
"""A client delegation's call name when the recording names no delegate of the relay's."""


@dataclass
class _Turn:
    """One of the model's turns as the recording shows it: its words (pieces, as they came), its
    calls, and the words it was to say when the recording knows them (a continuation's)."""

    said: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    expected: str | None = None
    first: bool = False   # started by the caller's words (the first of its span)

    def reply(self) -> Reply:
        return Reply(say="".join(self.said).strip() or None, calls=tuple(self.calls))


def recorded_mode(recording: Recording) -> str:
    """The session's delegation mode: the server's `session.started` says it; else the client's
    `session.start` (omitted or null: client delegation, as the server reads it)."""
    asked: str | None = None
    for frame in recording.frames:
        if frame.event is None or frame.direction not in (UPSTREAM_TO_RELAY, CLIENT_TO_RELAY):
            continue
        event = wire.event_of(frame.event)
        if isinstance(event, wire.SessionStarted) and frame.direction == UPSTREAM_TO_RELAY:
            return _mode_of(event.session)
        if isinstance(event, wire.SessionStart) and asked is None:
            asked = _mode_of(event.session)
    return asked or CLIENT


def _mode_of(session: Any) -> str:
    delegation = session.get("delegation") if isinstance(session, dict) else None
    kind = delegation.get("type") if isinstance(delegation, dict) else None
    return kind if isinstance(kind, str) else CLIENT


def from_live_recording(recording: Recording, tools: Any, *, dialect: str | None = None,
                        delegation: str | None = None) -> Conversation:
    """A GPT-Live recording as a conversation to explore (see the module docstring); `delegation`,
    when given, must be the recording's own mode."""
    path = recording.path
    mode = recorded_mode(recording)
    if mode not in DELEGATIONS:
        raise UnusableInput(f"{path}: the session is in {mode} delegation; the explorer runs "
                            f"{' and '.join(DELEGATIONS)} delegation")
    if delegation is not None and delegation != mode:
        raise UnusableInput(f"{path}: the recording is in {mode} delegation, not {delegation}")
    lines, turns = _read(recording, mode)
    if not any(turn.said or turn.calls for turn in turns):
        raise NothingToExplore(f"{path}: the recording holds no delegation and no speech of the model to explore")
    _place_speech(turns)
    chosen = dialect or recording.dialect.name
    if mode == CLIENT:
        answers = [turn for turn in turns if turn.first]
        mock = MockScript(rules=tuple(Rule(match=f"^{re.escape(line)}$", regex=True, **dict(turn.reply()))
                                      for line, turn in zip(lines, answers)),
                          default=Reply(say="Okay."), after_outputs=Reply(say=_commentary_spoken(turns)))
    else:
        mock = MockScript(turns=tuple(turn.reply() for turn in turns), default=Reply(say="Okay."),
                          after_outputs=Reply(say="{joined}"))
    return Conversation(f"{path.name} ({chosen})", mock, tuple(lines), tools, dialect=chosen,
                        delegation=mode if delegates(chosen) else None)


def _read(recording: Recording, mode: str) -> tuple[list[str], list[_Turn]]:
    """The caller's lines and the model's turns, in order (the module docstring)."""
    names = {call_id: str(fields.get("name") or DELEGATE) for call_id, fields in recording.tool_calls_decided().items()}
    lines: list[str] = []
    turns: list[_Turn] = []
    hearing: list[str] | None = None    # the caller's words of the line in progress
    continues = False                    # a `response.create` went up: the next backend response continues
    commentary: dict[Any, str] = {}      # the relay's commentary for a delegation, by its event id
    for frame in recording.frames:
        if frame.event is None or frame.direction not in (RELAY_TO_UPSTREAM, UPSTREAM_TO_RELAY):
            continue
        event = wire.event_of(frame.event)
        if frame.direction == RELAY_TO_UPSTREAM:
            if isinstance(event, wire.ResponseCreate):
                continues = True
            elif isinstance(event, wire.CommentaryAppend) and isinstance(event.delegation_id, str):
                commentary[event.event_id] = str(event.content)
            continue
        if isinstance(event, wire.InputTranscriptDelta):
            if hearing is None:
                hearing = []
                lines.append("")
                turns.append(_Turn(first=True))
            hearing.append(str(event.delta or ""))
            lines[-1] = "".join(hearing).strip() or UNHEARD
            continue
        if isinstance(event, (wire.OutputAudioDelta, wire.UsageUpdated)):
            continue   # the timeline moving: the caller may still be speaking
        hearing = None
        if not turns:
            continue
        if isinstance(event, wire.OutputTranscriptDelta) and isinstance(event.delta, str):
            turns[-1].said.append(event.delta)
        elif isinstance(event, wire.DelegationCreated) and mode == CLIENT:
            turns[-1].calls.append(ToolCall(name=names.get(event.delegation.id, DELEGATE)))
        elif isinstance(event, wire.CommentaryAppended) and event.client_event_id in commentary and mode == CLIENT:
            turns.append(_Turn(expected=commentary.pop(event.client_event_id)))
        elif isinstance(event, wire.ResponseEnvelope) and mode == RESPONSES:
            continues = _backend(wire.backend_event(event), turns, continues)
    return lines, turns


def _backend(nested: Any, turns: list[_Turn], continues: bool) -> bool:
    """One nested backend event (Responses delegation): a continuation's start, a call, its text."""
    if isinstance(nested, wire.BackendCreated) and continues:
        turns.append(_Turn())
        return False
    if isinstance(nested, wire.BackendItemDone) and isinstance(nested.item, dict):
        item = nested.item
        if item.get("type") == wire.FUNCTION_CALL and isinstance(item.get("name"), str):
            arguments = item.get("arguments")
            turns[-1].calls.append(ToolCall(name=item["name"], arguments=_arguments(arguments)))
    elif isinstance(nested, wire.BackendTextDone) and isinstance(nested.text, str) and not turns[-1].first:
        turns[-1].expected = (turns[-1].expected or "") + nested.text
    return continues


def _arguments(text: Any) -> dict[str, Any] | str:
    """A backend call's arguments as the script takes them: the object they encode, else their text."""
    value = json_arguments(text)
    return value if isinstance(value, dict) else text if isinstance(text, str) else {}


def _commentary_spoken(turns: list[_Turn]) -> str:
    """How the model said the relay's commentary (client delegation), as the script's template:
    the words around the commentary, when every continuation said its commentary with the same
    words around it (as the mock does, its `after_outputs`); else the commentary as it is."""
    said = {_template("".join(turn.said).strip(), turn.expected) for turn in turns
            if not turn.first and turn.expected is not None}
    return said.pop() if len(said) == 1 and None not in said else OUTPUT   # type: ignore[return-value]


def _template(words: str, commentary: str) -> str | None:
    at = words.find(commentary)
    if at < 0:
        return None
    return _literal(words[:at]) + OUTPUT + _literal(words[at + len(commentary):])


def _literal(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _place_speech(turns: list[_Turn]) -> None:
    """The end of a turn's words that came after the next turn began, given back to it: where a
    continuation's own words are known (`expected`) and its words as they came do not start with
    them, but do from one of its later pieces on, the pieces before that are the turn before's
    (the voice model was still saying them). Otherwise the words stay where they came: what a
    continuation says around its known words (a template's, a paraphrase) cannot be told from
    the end of the turn before."""
    for before, turn in zip(turns, turns[1:]):
        if not turn.expected or turn.first or "".join(turn.said).startswith(turn.expected):
            continue
        for index in range(1, len(turn.said)):
            if "".join(turn.said[index:]).startswith(turn.expected):
                before.said += turn.said[:index]
                turn.said = turn.said[index:]
                break


__all__ = ["from_live_recording", "recorded_mode"]
