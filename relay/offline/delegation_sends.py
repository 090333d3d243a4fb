"""How a delegating wire's recording (GPT-Live's) is read back for replay: which of the relay's sends
are compared and by what key, free of the ids the relay chose (`relay.offline.replaying`'s
`ReplaySends`, for the `ToolFlow.DELEGATIONS` flow; `relay.offline.sends` picks it by the
dialect's flow).

The relay's own sends, known by their event ids (`<id_prefix>_e...`), are compared:

- each `function_call_output` (a `response.item.create`), keyed by its call id: its output;
- each append (`session.thinking.append`, `session.commentary.append`,
  `session.instructions.append`), numbered per delegation in the order sent (the n-th recorded
  meets the n-th replayed): its channel, its delegation and its words;
- each `response.create` continuing a batch, numbered in the order sent;
- anything else of the relay's own (its `session.update` on a sideband) by its type.

Frames the relay forwarded from the client are the client's and are not compared. The upstream's
audio is not fed to the engine (it would only forward it). The server's ids (delegations, calls)
are the recording's in the replay too, so the keys hold them as they were.
"""

from __future__ import annotations

import json
from typing import Any

from relay.dialects import Dialect
from relay.dialects import live as wire
from relay.offline.replaying import ANSWER, OUTPUT, Answer, Key, ReplaySends, Sent, clip, frame_text
from relay.recording.format import Frame

_CHANNELS = {wire.InstructionsAppend: "instructions", wire.ThinkingAppend: "thinking",
             wire.CommentaryAppend: "commentary"}
_CONTINUE = "continue"
"""The key of a batch's `response.create` (with its number)."""


class DelegationSends(ReplaySends):
    """GPT-Live, read through its codec (see the module docstring)."""

    def __init__(self, dialect: Dialect, id_prefix: str | None) -> None:
        self.id_prefix = id_prefix
        self._appends: dict[str, int] = {}   # appends sent so far, per delegation
        self._creates = 0
        self._forwarded_only = wire.UPSTREAM_PASSTHROUGH | wire.CLIENT_PASSTHROUGH

    def __call__(self, event: dict[str, Any]) -> list[Sent]:
        typed = wire.event_of(event)
        if isinstance(typed, wire.Unknown) or not self._ours(typed):
            return []
        compared = {"type": event.get("type"), **{k: v for k, v in event.items() if k not in ("type", "event_id")}}
        if isinstance(typed, wire.ResponseItemCreate):
            item = typed.item if isinstance(typed.item, dict) else {}
            if item.get("type") == wire.FUNCTION_CALL_OUTPUT:
                return [((OUTPUT, str(item.get("call_id"))), compared)]
        if type(typed) in _CHANNELS:
            delegation = str(typed.delegation_id)
            count = self._appends.get(delegation, 0)
            self._appends[delegation] = count + 1
            return [((ANSWER, delegation, str(count)), compared)]
        if isinstance(typed, wire.ResponseCreate):
            self._creates += 1
            return [((_CONTINUE, str(self._creates)), compared)]
        return [((str(event.get("type")),), compared)]

    def _ours(self, typed: Any) -> bool:
        event_id = getattr(typed, "event_id", None)
        return self.id_prefix is not None and isinstance(event_id, str) and event_id.startswith(f"{self.id_prefix}_e")

    @staticmethod
    def describe(key: Key) -> str:
        if key[0] == ANSWER:
            return f"append {int(key[2]) + 1} for delegation {key[1]}"
        if key[0] == _CONTINUE:
            return f"response.create {key[1]} (a batch's continuation)"
        return ReplaySends.describe(key)

    @staticmethod
    def answer(key: Key, part: dict[str, Any]) -> Answer | None:
        """For an output: the call, its output, `completed`; for an append: the delegation, its
        words, its channel."""
        typed = wire.event_of(part)
        if key[0] == OUTPUT and isinstance(typed, wire.ResponseItemCreate):
            item = typed.item if isinstance(typed.item, dict) else {}
            return key[1], str(item.get("output")), "completed"
        if key[0] == ANSWER and type(typed) in _CHANNELS:
            return key[1], str(typed.content), _CHANNELS[type(typed)]
        return None

    def payload(self, frame: Frame) -> str | bytes | None:
        """Text frames but audio, told by the wire's pass-through set (replay has nobody to
        forward it to); a binary frame is not part of this wire."""
        if frame.event is not None and frame.event.get("type") in self._forwarded_only:
            return None
        return frame_text(frame)

    def timeline(self, frame: Frame) -> list[str]:
        """What the timeline shows of an upstream frame: delegations, a backend's calls (from
        `response.output_item.done`) and the end of its responses."""
        typed = wire.event_of(frame.event)
        if isinstance(typed, wire.DelegationCreated):
            delegation = typed.delegation
            return [f"recv  delegation {delegation.id} ({delegation.target}) at {typed.offset_ms} ms"]
        if not isinstance(typed, wire.ResponseEnvelope):
            return []
        nested = wire.backend_event(typed)
        if isinstance(nested, wire.BackendItemDone):
            item = nested.item if isinstance(nested.item, dict) else {}
            if item.get("type") == wire.FUNCTION_CALL:
                arguments = item.get("arguments")
                shown = arguments if isinstance(arguments, str) else json.dumps(arguments)
                return [f"recv  call {item.get('name')}({clip(shown)}) call_id={item.get('call_id')}"]
        if isinstance(nested, (wire.BackendCompleted, wire.BackendFailed, wire.BackendIncomplete)):
            response = nested.response if isinstance(nested.response, dict) else {}
            return [f"recv  backend response {response.get('id')} {response.get('status')}"]
        return []


__all__ = ["DelegationSends"]
