"""What a proxied session keeps so that its client can resume it on any replica: `ResumeState`.

A client whose connection drops may reconnect with its resume token (relay/edges/resume.py) and
carry its session on in a new upstream session. What the new session needs is what the engine
knows of the conversation, as words: the items in conversation order (messages with their texts
and transcripts, never audio; the calls and their outputs, the relay's among them), written by
the dialect as items a new session takes back in (`OpenAIFamily.seed_item`), and the client's
session configuration as it last set it. The relay's calls are not told by these items alone:
whether an owed call ran is its records' (relay/engine/records.py), which the store keeps beside
this state. A state is a whole snapshot, never a delta; `from_json` refuses anything that is not
one with `ValueError` (a store's bad data is the reader's to refuse, never a crash).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from relay.dialects.jsontext import compact_json
from relay.dialects.openai import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, OpenAIFamily
from relay.engine.itembased import OpenAIEngine

VERSION = 1
MAX_ITEMS = 1000   # the items a state keeps at the most (the most recent)


@dataclass(frozen=True)
class ResumeState:
    """A resumable session: its id (the engine's and the store's: the same across resumes, so
    its calls keep their records and idempotency keys), its dialect's name, the client's session
    configuration, and its conversation as seedable items, in order."""

    session_id: str
    dialect: str
    session: dict[str, Any] = field(default_factory=dict)
    items: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        return compact_json({"v": VERSION, "session_id": self.session_id, "dialect": self.dialect,
                             "session": self.session, "items": self.items})

    @classmethod
    def from_json(cls, text: str | bytes) -> ResumeState:
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"a resume state is not JSON: {exc}") from None
        if not isinstance(data, dict) or data.get("v") != VERSION:
            raise ValueError("not a resume state of this version")
        session_id, dialect = data.get("session_id"), data.get("dialect")
        session, items = data.get("session"), data.get("items")
        if not (isinstance(session_id, str) and session_id and isinstance(dialect, str)
                and isinstance(session, dict) and isinstance(items, list)):
            raise ValueError("a resume state lacks its session, dialect or items")
        if not all(isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"] for item in items):
            raise ValueError("a resume state's item has no id")
        return cls(session_id, dialect, session, items)

    def answered(self) -> set[str]:
        """The call ids whose output is in the conversation."""
        return {item["call_id"] for item in self.items
                if item.get("type") == FUNCTION_CALL_OUTPUT and isinstance(item.get("call_id"), str)}

    def without_calls(self, call_ids: set[str]) -> list[dict[str, Any]]:
        """The items, but for the call items of `call_ids` (the owed calls, told otherwise)."""
        return [item for item in self.items
                if not (item.get("type") == FUNCTION_CALL and item.get("call_id") in call_ids)]


def resumable(engine: object) -> bool:
    """Whether a session of this engine can be resumed: the OpenAI Realtime family's."""
    return isinstance(engine, OpenAIEngine) and isinstance(engine.dialect, OpenAIFamily)


def state_of(engine: OpenAIEngine, kept: list[dict[str, Any]] | None = None) -> ResumeState:
    """The engine's session now, as a resume state. The engine keeps only its recent past
    (`--history-items`), so what a state kept before (`kept`: the previous state's items, or the
    items a resumed session was seeded with) is merged in: an item the engine still has is taken
    as the engine has it now, a new one goes after the item it follows, and one the engine no
    longer has stays where it was (it was forgotten, or was seeded and has not come back yet),
    unless the engine knows it deleted (`MAX_ITEMS` at the most, the oldest dropped)."""
    family = engine.dialect
    conversation = engine.conversation
    current = [seeded for record in conversation.visible_items()
               if (seeded := family.seed_item(record.data)) is not None]
    gone = {item_id for item_id, record in conversation.items.items() if not record.in_conversation}
    items = merged(kept or [], current, gone)
    return ResumeState(engine.session_id, family.name, dict(conversation.client_session), items[-MAX_ITEMS:])


def merged(kept: list[dict[str, Any]], current: list[dict[str, Any]], gone: set[str]) -> list[dict[str, Any]]:
    """`kept` updated by `current` (both in conversation order), without the items of `gone`."""
    result = [item for item in kept if item["id"] not in gone]
    where = {item["id"]: index for index, item in enumerate(result)}
    after = -1
    for item in current:
        index = where.get(item["id"])
        if index is None:
            index = after + 1
            result.insert(index, item)
            where = {other["id"]: at for at, other in enumerate(result)}
        else:
            result[index] = item
        after = index
    return result


__all__ = ["MAX_ITEMS", "ResumeState", "merged", "resumable", "state_of"]
