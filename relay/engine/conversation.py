"""Conversation state: items in conversation order, their content, and the responses.

Order comes from `previous_item_id` (a linked order), never from arrival order: `None` or
`"root"` puts an item first, an id puts it right after that item, an unknown id is an anomaly and
the item is appended. Items of out-of-band responses are known (by id) but never in the order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()
"""Marks a field the event did not carry, as opposed to one carried as null."""


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@dataclass(slots=True)
class ItemRecord:
    """One item as the relay last saw it. `origin` says who produced it: `model` (a response's
    output), `user_audio` (a committed input buffer), `client` (created by a client event),
    `relay` (injected by the relay), or `unknown` (seen with no clue, e.g. a partial log)."""

    id: str
    type: str
    data: dict[str, Any]
    origin: str = "unknown"
    response_id: str | None = None
    output_index: int | None = None
    in_conversation: bool = False
    deleted: bool = False
    hidden: bool = False
    audio_end_ms: int | None = None
    truncated_content_index: int | None = None
    transcription_failed: str | None = None
    retrieved: bool = False
    # content_index -> text or transcript assembled from deltas (output text, output audio
    # transcript, input audio transcription). Final `.done`/`completed` values replace them.
    texts: dict[int, str] = field(default_factory=dict)

    # typed views of the item's fields: a field of the wrong type reads as absent
    @property
    def role(self) -> str | None:
        return _text(self.data.get("role"))

    @property
    def status(self) -> str | None:
        return _text(self.data.get("status"))

    @property
    def call_id(self) -> str | None:
        return _text(self.data.get("call_id"))

    @property
    def name(self) -> str | None:
        return _text(self.data.get("name"))

    @property
    def arguments(self) -> str | None:
        return _text(self.data.get("arguments"))

    def text(self) -> str:
        """The item's words: text parts and transcripts joined, deltas included."""
        pieces: list[str] = []
        content = self.data.get("content") or []
        indexes = sorted(set(range(len(content))) | set(self.texts))
        for index in indexes:
            if index in self.texts:
                pieces.append(self.texts[index])
                continue
            part = content[index] if index < len(content) else {}
            if isinstance(part, dict):
                value = part.get("text") or part.get("transcript")
                if isinstance(value, str):
                    pieces.append(value)
        return " ".join(p for p in pieces if p)

    def has_untranscribed_audio(self) -> bool:
        content = self.data.get("content") or []
        for index, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in ("input_audio", "output_audio", "audio"):
                if not (self.texts.get(index) or part.get("transcript")):
                    return True
        return False


@dataclass(slots=True)
class ResponseRecord:
    """One response. `creator` is `relay`, `client`, `server` (VAD) or `unknown`."""

    id: str
    status: str = "in_progress"
    status_details: dict[str, Any] | None = None
    output_item_ids: list[str] = field(default_factory=list)
    metadata: dict[str, Any] | None = None
    out_of_band: bool = False
    creator: str = "unknown"
    created_at: float | None = None
    done_at: float | None = None
    usage: dict[str, Any] | None = None
    seen_created: bool = False

    @property
    def done(self) -> bool:
        return self.done_at is not None

    @property
    def reason(self) -> str | None:
        details = self.status_details or {}
        return details.get("reason") if isinstance(details, dict) else None


class Conversation:
    """Items and responses of one session. Pure state; never raises on odd input, it reports
    anomalies through the `anomaly` callback it was given."""

    def __init__(self, anomaly: Any) -> None:
        self._anomaly = anomaly
        self.items: dict[str, ItemRecord] = {}
        self.order: list[str] = []
        self.responses: dict[str, ResponseRecord] = {}
        self.response_order: list[str] = []
        self.session: dict[str, Any] = {}

    # ---- items -------------------------------------------------------------------------
    def item(self, item_id: object) -> ItemRecord | None:
        return self.items.get(item_id) if isinstance(item_id, str) else None

    def upsert(self, data: dict[str, Any]) -> ItemRecord | None:
        """Record the latest form of an item (fields merged over what was known)."""
        item_id = data.get("id")
        if not isinstance(item_id, str) or not item_id:
            self._anomaly("item without id", data.get("type"))
            return None
        record = self.items.get(item_id)
        if record is None:
            record = ItemRecord(id=item_id, type=str(data.get("type", "")), data=dict(data))
            self.items[item_id] = record
        else:
            merged = dict(record.data)
            merged.update({k: v for k, v in data.items() if v is not None or k not in merged})
            record.data = merged
            if data.get("type"):
                record.type = str(data["type"])
        self._absorb_content(record, data)
        return record

    def _absorb_content(self, record: ItemRecord, data: dict[str, Any]) -> None:
        """Final texts carried by the item itself win over what deltas assembled."""
        content = data.get("content")
        if not isinstance(content, list):
            return
        for index, part in enumerate(content):
            if not isinstance(part, dict):
                continue
            value = part.get("text")
            if value is None:
                value = part.get("transcript")
            if isinstance(value, str) and value:
                record.texts[index] = value

    def insert(self, item_id: str, previous_item_id: Any, event_type: str) -> None:
        """Place an item in conversation order (a second insert of the same id moves nothing).

        `previous_item_id` is None (or `"root"`) for the first position, an id to follow, or
        ABSENT when the event did not say (then the item is appended)."""
        record = self.items[item_id]
        if record.in_conversation:
            return
        record.in_conversation = True
        order = self.order
        if previous_item_id is ABSENT:
            order.append(item_id)
            return
        if previous_item_id is None or previous_item_id == "root":
            order.insert(0, item_id)
            return
        if order and order[-1] == previous_item_id:
            order.append(item_id)
            return
        try:
            position = order.index(previous_item_id)
        except ValueError:
            self._anomaly(
                f"{event_type} places item {item_id} after unknown item {previous_item_id}; appended",
                event_type,
            )
            order.append(item_id)
            return
        order.insert(position + 1, item_id)

    def delete(self, item_id: str, event_type: str) -> ItemRecord | None:
        record = self.items.get(item_id)
        if record is None:
            self._anomaly(f"{event_type} for unknown item {item_id}", event_type)
            return None
        record.deleted = True
        if record.in_conversation:
            record.in_conversation = False
            try:
                self.order.remove(item_id)
            except ValueError:
                pass
        return record

    def _position_from_end(self, item_id: str) -> int | None:
        """Where an item stands; recent items are near the end, so search from there."""
        order = self.order
        for position in range(len(order) - 1, -1, -1):
            if order[position] == item_id:
                return position
        return None

    def last_item_of_response(self, response: ResponseRecord) -> str | None:
        """The response's output item that comes last in conversation order."""
        wanted = {i for i in response.output_item_ids if i in self.items and self.items[i].in_conversation}
        if not wanted:
            return None
        for item_id in reversed(self.order):
            if item_id in wanted:
                return item_id
        return None

    def visible_predecessor(self, item_id: str) -> str | None:
        """The nearest item before `item_id` that the client can see (None = the start)."""
        position = self._position_from_end(item_id)
        if position is None:
            return None
        for index in range(position - 1, -1, -1):
            other = self.order[index]
            if not self.items[other].hidden:
                return other
        return None

    def add_text(self, item_id: object, content_index: int, delta: str) -> None:
        record = self.item(item_id)
        if record is None:
            return
        record.texts[content_index] = record.texts.get(content_index, "") + delta

    def set_text(self, item_id: object, content_index: int, text: str) -> None:
        record = self.item(item_id)
        if record is not None:
            record.texts[content_index] = text

    # ---- responses ---------------------------------------------------------------------
    def response(self, response_id: str, *, create: bool = True) -> ResponseRecord | None:
        record = self.responses.get(response_id)
        if record is None and create:
            record = ResponseRecord(id=response_id)
            self.responses[response_id] = record
            self.response_order.append(response_id)
        return record

    def link_output(self, response: ResponseRecord, item_id: str, output_index: Any) -> None:
        if item_id not in response.output_item_ids:
            if isinstance(output_index, int) and 0 <= output_index <= len(response.output_item_ids):
                response.output_item_ids.insert(output_index, item_id)
            else:
                response.output_item_ids.append(item_id)

    def visible_items(self) -> list[ItemRecord]:
        return [self.items[i] for i in self.order]
