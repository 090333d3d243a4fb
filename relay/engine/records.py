"""What the engine decides about a call, as a record a store keeps: `CallRecord` and its phases.

A record is a whole snapshot of one relay call at one phase of its life (never a delta), so the
latest record a store holds is all a reader needs, and a write that was lost is repaired by the
next. It holds what the model and the tool said (name, arguments, output) and the engine's
decisions, never a credential. `from_dict` reads back what a store returns and refuses anything
else with `ValueError`: a store's bad data is the reader's to skip, never a crash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

from relay.dialects.jsontext import compact_json

class Phase(StrEnum):
    """How far a relay call got, in the order its records are written."""

    READY = "ready"              # the model finished the call: its arguments are known
    STARTED = "started"          # its handler is about to run
    DECIDED = "decided"          # its output is decided, not yet sent
    SENT = "sent"                # its output went upstream
    FOLLOW_UP = "follow_up"      # sent, and the model is owed one response about it
    FOLLOWED_UP = "followed_up"  # the create asking for it goes up now (or another response answers it)
    SKIPPED = "skipped"          # it will never be answered (its response ended without it)


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One relay call as a store keeps it. `at` is the engine's time of the decision."""

    session_id: str
    call_id: str
    name: str
    phase: Phase
    at: float
    arguments: str = ""
    idempotency_key: str = ""
    response_id: str | None = None
    output: str | None = None
    outcome: str | None = None
    follow_up: bool = False
    item_id: str = ""        # what the provider echoes once it has the output: the output item's id
                             # (the relay chooses it), or GPT-Live's event id of the answer's last frame
    delivered: bool = False  # the provider echoed that item: the output is in the conversation
    # GPT-Live: the delegation the call answers or belongs to (a client delegation's own id, a
    # backend call's batch); what the answer asks the model to say, and whether it stays silent
    # (the caller moved on); a delegation's transcript when it was delegated (JSON turns)
    delegation_id: str = ""
    message: str | None = None
    silent: bool = False
    transcript: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["phase"] = self.phase.value
        return data

    def to_json(self) -> str:
        """Compact JSON that always encodes as UTF-8 (a lone surrogate as its escape)."""
        return compact_json(self.as_dict())

    @classmethod
    def from_dict(cls, data: Any) -> "CallRecord":
        """The record `data` holds; ValueError for anything that is not one."""
        if not isinstance(data, dict):
            raise ValueError(f"a call record is a JSON object, not {type(data).__name__}")
        values: dict[str, Any] = {}
        for spec in fields(cls):
            value = data.get(spec.name)
            if spec.name in _TEXTS:
                if not isinstance(value, str):
                    raise ValueError(f"a call record's {spec.name} is not text")
            elif spec.name == "at":
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError("a call record's time is not a number")
                value = float(value)
            elif spec.name in _FLAGS:
                value = bool(value)
            elif spec.name in _OPTIONAL_TEXTS:
                value = value if isinstance(value, str) else ""
            elif value is not None and not isinstance(value, str):
                raise ValueError(f"a call record's {spec.name} is not text")
            values[spec.name] = value
        values["phase"] = Phase(values["phase"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str | bytes) -> "CallRecord":
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:   # bad UTF-8 too
            raise ValueError(f"a call record is not JSON: {exc}") from None
        return cls.from_dict(data)


_TEXTS = frozenset({"session_id", "call_id", "name", "phase"})
_FLAGS = frozenset({"follow_up", "delivered", "silent"})
_OPTIONAL_TEXTS = frozenset({"arguments", "idempotency_key", "item_id", "delegation_id", "transcript"})


def idempotency_key(session_id: str, call_id: str, arguments: str) -> str:
    """The call's stable idempotency key: its session, its call id and a hash of its arguments
    (as JSON with sorted keys where they parse, so that spacing and key order do not count)."""
    try:
        canonical = json.dumps(json.loads(arguments or "{}"), sort_keys=True, ensure_ascii=False,
                               separators=(",", ":"))
    except (ValueError, RecursionError):
        canonical = arguments
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{session_id}:{call_id}:{digest}"
