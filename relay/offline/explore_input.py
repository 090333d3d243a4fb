"""What the explorer starts from, read into a `Conversation` (relay.offline.explore_session):

- a `Script` of `relay.testing` (its turns; the caller says one line a turn that starts a response);
- a script file: a JSON object `{"lines": [...], "script": {...}, "dialect": ..., "barge_in": ...,
  "delegation": ..., "mode": ...}` (GPT-Live's delegation mode: `responses`, the default, or
  `client`; how the relay runs: `proxy`, the default, or `sidecar`)
  whose `script` is the mock's script (`relay mock --script`: rules, turns, `after_outputs`) and
  `lines` what the caller says, one at a time, each once the session is quiet; a bare mock script
  is read too, its caller saying each rule's `match` in turn;
- a relay recording: what the caller said (its user turns) and what the model did in each of its
  responses (the words and the calls, in order), played back as the model's turns (with more
  lines of the caller's, if need be, for every turn up to the last with calls to be played:
  `_lines_for`), with the relay as the recording's relay ran (a sidecar's recording of a wire
  with a sideband as a sidecar); a GPT-Live
  recording, which has no responses, is read by `relay.offline.explore_delegated_input`, in its own
  delegation mode.

GPT-Live's delegation mode given by the caller (`relay explore --delegation`, `relay.testing.explore
(..., delegation=)`) applies on the `live` dialect only, and must agree with a recording's own.

Each reader raises `UnusableInput` with one line for input it cannot use.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from relay.dialects.live import LiveDialect
from relay.errors import UnusableInput
from relay.mock import MockScript, Reply, ToolCall
from relay.offline.events import CALL, FILLER, RESPONSE, SPOKEN, USER
from relay.offline.explore_delegated_input import from_live_recording
from relay.offline.explore_session import Conversation
from relay.offline.replaying import history_limit_of
from relay.offline.scripted import Script
from relay.offline.explore import NothingToExplore, delegates
from relay.offline.scripted_delegations import CLIENT, DELEGATIONS
from relay.offline.sidecar_app import has_sidecar
from relay.tools.sources import tool_registry

DEFAULT_LINE = "Hello."


def from_script(script: Script, tools: Any, *, dialect: str = "openai", lines: tuple[str, ...] | None = None,
                barge_text: str | None = None, name: str = "script", delegation: str | None = None) -> Conversation:
    """A `relay.testing.Script`: its turns, in order, the caller saying `lines` (default: one
    line for each turn that is not a follow-up of the one before: a turn after a turn with calls
    answers their outputs); `delegation`: GPT-Live's mode (`responses`, the default, or `client`)."""
    mock = script.mock_script()
    if lines is None:
        count, follows = 0, False
        for turn in script.turns:
            if not follows:
                count += 1
            follows = bool(turn.calls)
        lines = (DEFAULT_LINE,) * max(count, 1)
    return with_delegate(Conversation(
        f"{name} ({dialect})", mock, tuple(lines), tools, dialect=dialect, barge_text=barge_text,
        turns=tuple(script.turns), delegation=checked_delegation(delegation, name, dialect)), name)


def from_file(path: str | Path, tools: Any, *, dialect: str | None = None,
              delegation: str | None = None) -> Conversation:
    """A script file or a relay recording (told by its content: a recording is JSON lines);
    `delegation`: GPT-Live's mode, over a script file's own `delegation`."""
    source = Path(path)
    if source.is_dir():
        raise UnusableInput(f"{path} is a directory, not a recording or a script")
    if not source.is_file():
        raise UnusableInput(f"{path}: no such file")
    text = source.read_text(encoding="utf-8", errors="replace")
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        document = None
    if isinstance(document, dict):
        conversation = _from_script_file(document, source, tools, dialect, delegation)
    else:
        conversation = from_recording(source, tools, dialect=dialect,
                                      delegation=checked_delegation(delegation, str(source), dialect))
    return with_delegate(conversation, str(path))


def _from_script_file(document: dict[str, Any], source: Path, tools: Any, dialect: str | None,
                      delegation: str | None) -> Conversation:
    body = document.get("script", document) if "lines" in document or "script" in document else document
    try:
        mock = MockScript.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "the script"
        raise UnusableInput(f"{source}: not a script: {where}: {first.get('msg')}") from None
    lines = document.get("lines")
    if lines is None:
        lines = [rule.match for rule in mock.rules if not rule.regex] or [DEFAULT_LINE] * max(len(mock.turns), 1)
    if not isinstance(lines, list) or not all(isinstance(line, str) for line in lines):
        raise UnusableInput(f"{source}: `lines` must be a list of strings (what the caller says)")
    chosen = dialect or document.get("dialect") or "openai"
    barge = document.get("barge_in")
    mode = document.get("mode")
    if mode is not None and not isinstance(mode, str):
        raise UnusableInput(f"{source}: `mode` must be \"proxy\" or \"sidecar\" (how the relay runs)")
    conversation = Conversation(f"{source.name} ({chosen})", mock, tuple(lines), tools, dialect=str(chosen),
                                barge_text=barge if isinstance(barge, str) else None,
                                delegation=checked_delegation(delegation, str(source), str(chosen))
                                or checked_delegation(document.get("delegation"), str(source), None))
    return conversation.with_mode(mode, str(source))


def with_delegate(conversation: Conversation, source: str) -> Conversation:
    """The conversation, if its tools can run it: client delegation needs the relay's `@delegate`
    among them (without one, every delegation would be the client's, and nothing would answer)."""
    if conversation.delegation == CLIENT and delegates(conversation.dialect) \
            and tool_registry(conversation.tools).delegate is None:
        raise UnusableInput(f"{source}: client delegation needs a @delegate among the tools (--tools) to answer "
                            "each delegation")
    return conversation


def checked_delegation(value: Any, source: str, dialect: str | None) -> str | None:
    """GPT-Live's delegation mode a conversation asks for (None: Responses delegation), checked
    against the dialect it is to run on (None: not known yet)."""
    if value is None:
        return None
    if value not in DELEGATIONS:
        raise UnusableInput(f"{source}: the delegation mode is one of {', '.join(DELEGATIONS)}, not {value!r}")
    if dialect is not None and not delegates(dialect):
        raise UnusableInput(f"{source}: a delegation mode ({value}) is GPT-Live's; the {dialect} dialect has none "
                            "(explore it with --dialect live)")
    return str(value)


def from_recording(path: str | Path, tools: Any, *, dialect: str | None = None,
                   delegation: str | None = None) -> Conversation:
    """A relay recording: its caller's lines and its model's responses as turns (a GPT-Live
    recording: `relay.offline.explore_delegated_input`, in the recording's delegation mode, which
    `delegation`, when given, must agree with)."""
    from relay.offline.timeline import Timeline
    from relay.recording.reader import load_recording

    recording = load_recording(path, allow_incomplete=True, audio="drop")
    limit = history_limit_of(recording.header)   # explored as the session forgot
    header = recording.header or {}   # a plain event log has none: not the relay's recording
    recorded_as = str(header.get("mode") or "proxy") if recording.kind == "relay" else None
    if isinstance(recording.dialect, LiveDialect):
        return _as_recorded(replace(from_live_recording(recording, tools, dialect=dialect, delegation=delegation),
                                    history_limit=limit, recorded_as=recorded_as), path)
    if delegation is not None:
        raise UnusableInput(f"{path}: a delegation mode is GPT-Live's, and this recording is of "
                            f"{recording.dialect.name}")
    timeline = Timeline.from_recording(recording)
    fillers = {e.response_id for e in timeline if e.kind == RESPONSE and e.by == "relay filler"}
    fillers |= {e.response_id for e in timeline if e.kind == FILLER and e.response_id}
    order: list[str] = []
    said: dict[str, list[str]] = {}
    calls: dict[str, list[ToolCall]] = {}
    lines: list[str] = []
    current: str | None = None
    for event in timeline:
        if event.kind == USER and event.text:
            lines.append(event.text)
        if event.kind == RESPONSE and event.response_id and event.response_id not in fillers:
            current = event.response_id
            if current not in order:
                order.append(current)
            continue
        rid = event.response_id or (current if event.kind == CALL else None)
        if rid is None or rid in fillers:
            continue
        if event.kind == SPOKEN and event.text:
            said.setdefault(rid, []).append(event.text)
        elif event.kind == CALL and event.name:
            arguments = event.arguments if isinstance(event.arguments, (dict, str)) else {}
            calls.setdefault(rid, []).append(ToolCall(name=event.name, arguments=arguments))
    if not order:
        raise NothingToExplore(f"{path}: the recording holds no response of the model to explore")
    turns = tuple(Reply(say=" ".join(said.get(rid, [])) or None, calls=tuple(calls.get(rid, ()))) for rid in order)
    recorded = recording.dialect
    chosen = dialect or (recorded if isinstance(recorded, str) else getattr(recorded, "name", None)) or "openai"
    mock = MockScript(turns=turns, default=Reply(say="Okay."), after_outputs=Reply(say="{joined}"))
    return _as_recorded(Conversation(f"{Path(path).name} ({chosen})", mock, _lines_for(turns, lines), tools,
                                     dialect=chosen, history_limit=limit, recorded_as=recorded_as), path)


def _as_recorded(conversation: Conversation, path: str | Path) -> Conversation:
    """A sidecar's recording explored as a sidecar, on a wire that has one (else, as every other,
    through a proxy)."""
    if conversation.recorded_as == "sidecar" and has_sidecar(conversation.dialect):
        return conversation.with_mode("sidecar", str(path))
    return conversation


def _lines_for(turns: tuple[Reply, ...], lines: list[str]) -> tuple[str, ...]:
    """The caller's lines, enough of them for the model's last turn with calls to be played. Each
    of the explored caller's lines starts a response, and a turn with calls is followed by the
    relay's follow-up (the next turn); a recording whose model spoke first (a greeting), or
    several times between two of the caller's lines, has more responses than that: the caller
    then says `DEFAULT_LINE` as many more times as the turns up to the last call need, else that
    call would never be made, nor explored."""
    last = max((index for index, turn in enumerate(turns) if turn.calls), default=-1)
    needed = sum(1 for index in range(last + 1) if index == 0 or not turns[index - 1].calls)
    return tuple(lines) + (DEFAULT_LINE,) * max(needed - len(lines), 0 if lines else 1)


__all__ = ["checked_delegation", "from_file", "from_recording", "from_script", "with_delegate"]
