"""Conversation state: items in conversation order, their content, and the responses.

Order comes from `previous_item_id` (a linked order), never from arrival order: `None` or
`"root"` puts an item first, an id puts it right after that item, an unknown id is an anomaly and
the item is appended. Items of out-of-band responses are known (by id) but never in the order.
"""

from __future__ import annotations

import sys
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from relay.dialects import items as wire
from relay.dialects.openai import FUNCTION_CALL
from relay.engine.limits import MAX_PENDING_CLIENT_ID_CHARS, MAX_PENDING_CLIENT_ITEMS

ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "ABSENT"})()
"""Marks a field the event did not carry, as opposed to one carried as null."""


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


_intern = sys.intern
_AUDIO_PARTS = frozenset({"input_audio", "output_audio", "audio"})
# top-level item fields kept as typed slots; anything else but `object` is kept in `extra`
_ITEM_FIELDS = frozenset({"id", "type", "role", "status", "call_id", "name", "arguments", "output",
                          "content", "object"})


@dataclass(slots=True)
class ItemRecord:
    """One item as the relay last saw it, kept compact: a long session holds thousands.

    `origin` says who produced it: `model` (a response's output), `user_audio` (a committed
    input buffer), `client` (created by a client event), `relay` (injected by the relay), or
    `unknown` (seen with no clue, e.g. a partial log). The words of a message live in `texts`
    (content index -> text or transcript, assembled from deltas, replaced by final values);
    audio payloads are never kept. `data` rebuilds the item as a wire dict when one is wanted."""

    id: str
    type: str
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
    role: str | None = None
    status: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    part_types: list[str] | None = None
    texts: list[str | None] | None = None    # by content index
    extra: dict[str, Any] | None = None
    # the newest item the client saw among those a history limit forgot right before this one
    after_forgotten: str | None = None

    def absorb(self, data: dict[str, Any]) -> None:
        """Merge the fields of a newer form of the item (fields of the wrong type are ignored)."""
        kind = data.get("type")
        if isinstance(kind, str) and kind:
            self.type = _intern(kind)
        for name in ("role", "status"):
            value = data.get(name)
            if isinstance(value, str):
                setattr(self, name, _intern(value))
        for name in ("call_id", "name", "arguments", "output"):
            value = data.get(name)
            if isinstance(value, str) and value != getattr(self, name):
                setattr(self, name, value)   # an equal value keeps the object others share
        content = data.get("content")
        if isinstance(content, list):
            self.part_types = [_intern(p["type"]) if isinstance(p, dict) and isinstance(p.get("type"), str)
                               else "unknown" for p in content]
            for index, part in enumerate(content):
                if not isinstance(part, dict):
                    continue
                value = part.get("text")
                if value is None:
                    value = part.get("transcript")
                if isinstance(value, str) and value:
                    self.set_text(index, value)
        for key, value in data.items():
            if key not in _ITEM_FIELDS and value is not None:
                if self.extra is None:
                    self.extra = {}
                self.extra[key] = value

    def set_text(self, index: int, text: str) -> None:
        texts = self.texts
        if texts is None:
            texts = self.texts = []
        if index >= len(texts):
            if index > 64:   # content indexes are small; a huge one is garbage, not a reason to grow
                return
            texts.extend([None] * (index + 1 - len(texts)))
        texts[index] = text

    def add_text(self, index: int, delta: str) -> None:
        self.set_text(index, (self.text_at(index) or "") + delta)

    def text_at(self, index: int) -> str | None:
        texts = self.texts
        return texts[index] if texts is not None and index < len(texts) else None

    @property
    def data(self) -> dict[str, Any]:
        """The item as a wire dict (without audio payloads)."""
        data: dict[str, Any] = {"type": self.type, "id": self.id}
        for name in ("role", "status", "call_id", "name", "arguments", "output"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        if self.part_types is not None or self.type == "message":
            content = []
            for index, part_type in enumerate(self.part_types or []):
                part: dict[str, Any] = {"type": part_type}
                text = self.text_at(index)
                if text is not None:
                    part["transcript" if part_type in _AUDIO_PARTS else "text"] = text
                content.append(part)
            data["content"] = content
        if self.extra:
            data.update(self.extra)
        return data

    def text(self) -> str:
        """The item's words: text parts and transcripts joined, deltas included."""
        return " ".join(text for text in self.texts or () if text)

    def has_untranscribed_audio(self) -> bool:
        return any(part_type in _AUDIO_PARTS and not self.text_at(index)
                   for index, part_type in enumerate(self.part_types or []))


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
    seen_created: bool = False
    batch_handled: bool = False   # the follow-up for its relay calls was decided
    asked_before_outputs: bool = False   # a client's create held for its relay calls went up at the
    # hold limit, before their outputs: the outputs then get the relay's own follow-up

    @property
    def done(self) -> bool:
        return self.done_at is not None

    @property
    def reason(self) -> str | None:
        details = self.status_details or {}
        return details.get("reason") if isinstance(details, dict) else None


class ItemOrigins:
    """Who produced each item of an OpenAI-family conversation (`ItemRecord.origin`): the relay,
    the client, the model (a response's output) or the user's speech. The ids of the items the
    relay and the client create are kept until those items come back into the conversation; the
    client's, within `relay.engine.limits` (`has_room`)."""

    __slots__ = ("_relay_items", "_client_items", "_client_calls", "_client_chars")

    def __init__(self) -> None:
        self._relay_items: set[str] = set()
        self._client_items: set[str] = set()
        self._client_calls: set[str] = set()   # call ids of function_call items the client created
        self._client_chars = 0                 # of the ids in both

    def has_room(self) -> bool:
        """Whether the ids of one more client item may be kept (`relay.engine.limits`)."""
        return (len(self._client_items) + len(self._client_calls) < MAX_PENDING_CLIENT_ITEMS
                and self._client_chars < MAX_PENDING_CLIENT_ID_CHARS)

    def relay_sent(self, item_id: str) -> None:
        """The relay sent an item with this id (an output, an update)."""
        self._relay_items.add(item_id)

    def client_sent(self, item: dict[str, Any]) -> None:
        """The client sent an item (`conversation.item.create`)."""
        item_id, call_id = item.get("id"), item.get("call_id")
        if isinstance(item_id, str) and item_id not in self._client_items:
            self._client_items.add(item_id)
            self._client_chars += len(item_id)
        if item.get("type") == FUNCTION_CALL and isinstance(call_id, str) and call_id not in self._client_calls:
            self._client_calls.add(call_id)
            self._client_chars += len(call_id)

    def client_made_call(self, call_id: str) -> bool:
        return call_id in self._client_calls

    def classify(self, record: ItemRecord) -> None:
        """Decide who produced an item."""
        if record.id in self._relay_items:
            record.origin = "relay"
        elif record.response_id is not None:
            record.origin = "model"
        elif record.origin == "unknown":
            if record.id in self._client_items or (record.type == FUNCTION_CALL
                                                   and record.call_id in self._client_calls):
                record.origin = "client"
            elif record.type == "message" and record.role == "user" and "input_audio" in (record.part_types or ()):
                record.origin = "user_audio"

    def placed(self, record: ItemRecord) -> None:
        """An item entered the conversation: its origin is on the record now."""
        if record.origin == "relay":
            self._relay_items.discard(record.id)
        elif record.origin == "client":
            if record.id in self._client_items:
                self._client_items.discard(record.id)
                self._client_chars -= len(record.id)
            call_id = record.call_id
            if record.type == FUNCTION_CALL and isinstance(call_id, str) and call_id in self._client_calls:
                # the call is the client's in the ledger from now on (it is announced next)
                self._client_calls.discard(call_id)
                self._client_chars -= len(call_id)


FORGOTTEN_ITEMS_KEPT = 64
"""The forgotten items a conversation keeps the ids of (with the item the client saw last as of
each): the events that name an item as the one before come within moments of it."""


class Conversation:
    """Items and responses of one session. Pure state; never raises on odd input, it reports
    anomalies through the `anomaly` callback it was given."""

    def __init__(self, anomaly: Any) -> None:
        self._anomaly = anomaly
        self.items: dict[str, ItemRecord] = {}
        self.order: list[str] = []
        # the items it forgot (the latest `FORGOTTEN_ITEMS_KEPT`), each with the item the client saw
        # last as of it (itself when the client saw it): an item placed after one is placed, for
        # the client, after that; and one named again is known, not asked for after a reconnect
        self.forgotten: dict[str, str | None] = {}
        self.responses: dict[str, ResponseRecord] = {}
        self.response_order: list[str] = []
        self.session: dict[str, Any] = {}
        self.client_session: dict[str, Any] = {}   # the client's own session.update fields, merged

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
            record = ItemRecord(id=item_id, type=str(data.get("type", "")))
            self.items[item_id] = record
        record.absorb(data)
        return record

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

    def insert_before(self, item_id: str, next_item_id: Any) -> None:
        """Place an item right before `next_item_id` (an item whose event named it as its
        previous); appended when that one is not in the order, unless a history limit forgot it
        (then the item is older than every item kept: first)."""
        record = self.items[item_id]
        if record.in_conversation:
            return
        record.in_conversation = True
        position = self._position_from_end(next_item_id) if isinstance(next_item_id, str) else None
        if position is None:
            if next_item_id in self.forgotten:
                self.order.insert(0, item_id)
                return
            self.order.append(item_id)
        else:
            self.order.insert(position, item_id)

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
        forgotten_before = self.items[item_id].after_forgotten
        return forgotten_before if forgotten_before is not None else self._visible_back_from(position - 1)

    def _visible_back_from(self, position: int, skip: Any = None) -> str | None:
        """Walking back from `position` in the order (past `skip`): the first item the client can
        see; a hidden item that items forgotten by a history limit stood before stands for the
        newest of those the client saw (`after_forgotten`). None: the start."""
        for index in range(position, -1, -1):
            item_id = self.order[index]
            if item_id == skip:
                continue
            record = self.items[item_id]
            if not record.hidden:
                return item_id
            if record.after_forgotten is not None:
                return record.after_forgotten
        return None

    def add_text(self, item_id: object, content_index: int, delta: str) -> None:
        record = self.item(item_id)
        if record is not None:
            record.add_text(content_index, delta)

    def set_text(self, item_id: object, content_index: int, text: str) -> None:
        record = self.item(item_id)
        if record is not None:
            record.set_text(content_index, text)

    # ---- what OpenAI-family events say of items' words and edits ----------------------------
    def apply_words(self, event: wire.Event) -> None:
        """Text and transcripts (typed events of the family's codec): deltas build them up, final
        values replace them."""
        index = _content_index(event)
        kind = wire.kind_of(event)
        item_id = getattr(event, "item_id", None)
        if kind in _TRANSCRIPTION:
            record = self.item(item_id)
            if record is None:
                self._anomaly(f"transcription for unknown item {item_id}", wire.wire_type(event))
            elif isinstance(event, wire.InputTranscriptionDelta):
                if isinstance(event.delta, str):
                    record.add_text(index, event.delta)
            elif isinstance(event, wire.InputTranscriptionCompleted):
                if isinstance(event.transcript, str):
                    record.set_text(index, event.transcript)
            elif isinstance(event, wire.InputTranscriptionFailed):
                error = event.error
                record.transcription_failed = (
                    error.get("message") if isinstance(error, dict) else str(error)
                ) or "transcription failed"
        elif isinstance(event, wire.ContentPartDone):
            part = event.part
            if isinstance(part, dict):
                text = part.get("text") if part.get("text") is not None else part.get("transcript")
                if isinstance(text, str) and text:
                    self.set_text(item_id, index, text)
        elif kind in _WORDS:
            text = _WORDS[kind](event)
            if isinstance(text, str):
                (self.add_text if kind in _DELTAS else self.set_text)(item_id, index, text)

    def apply_edit(self, event: wire.ItemRetrieved | wire.ItemTruncated | wire.ItemDeleted) -> ItemRecord | None:
        """An item retrieved, truncated or deleted; returns it (None when unknown)."""
        if isinstance(event, wire.ItemRetrieved):
            data = event.item
            record = self.upsert(data) if isinstance(data, dict) else None
            if record is not None:
                record.retrieved = True
            return record
        if isinstance(event, wire.ItemTruncated):
            record = self.item(event.item_id)
            if record is None:
                self._anomaly(f"truncation of unknown item {event.item_id}", wire.wire_type(event))
                return None
            record.audio_end_ms = event.audio_end_ms
            record.truncated_content_index = event.content_index
            return record
        return self.delete(str(event.item_id), wire.wire_type(event))

    # ---- responses ---------------------------------------------------------------------
    def response(self, response_id: str, *, create: bool = True) -> ResponseRecord | None:
        record = self.responses.get(response_id)
        if record is None and create:
            record = ResponseRecord(id=response_id)
            self.responses[response_id] = record
            self.response_order.append(response_id)
        return record

    def response_of(self, response_id: Any, event_type: str) -> ResponseRecord | None:
        """The response an event (of `event_type`) names by `response_id` (an unknown one is an
        anomaly, and recorded); None when it names none."""
        if not isinstance(response_id, str):
            return None
        response = self.responses.get(response_id)
        if response is None:
            self._anomaly(f"{event_type} for unknown response {response_id}", event_type)
            response = self.response(response_id)
        return response

    def link_output(self, response: ResponseRecord, item_id: str, output_index: Any) -> None:
        if item_id not in response.output_item_ids:
            if isinstance(output_index, int) and 0 <= output_index <= len(response.output_item_ids):
                response.output_item_ids.insert(output_index, item_id)
            else:
                response.output_item_ids.append(item_id)

    def forget_old(self, keep: int, in_use: Collection[str] = ()) -> None:
        """Keep the latest `keep` items of the conversation (and as many responses and items
        outside it), and the items and responses in `in_use` whatever their age; forget older
        ones. A live session needs only its recent past; its full history is in its recording."""
        slack = keep // 2   # forget in batches: the cost is spread thin
        if len(self.order) > keep + slack:
            items, forgotten = self.items, self.forgotten
            as_of: str | None = None     # the newest item the client saw, as of each item in turn
            pending: str | None = None   # that, as of the last item forgotten since the last kept
            held: list[str] = []
            for item_id in self.order[:-keep]:
                record = items[item_id]
                as_of = item_id if not record.hidden else record.after_forgotten or as_of
                if item_id in in_use:
                    held.append(item_id)
                    record.after_forgotten, pending = pending or record.after_forgotten, None
                    continue
                del items[item_id]
                forgotten[item_id] = pending = as_of
            if pending is not None:
                items[self.order[-keep]].after_forgotten = pending
            self.order = held + self.order[-keep:]
        if len(self.items) > 2 * keep + slack:
            in_order = set(self.order)
            outside = [item_id for item_id in self.items if item_id not in in_order and item_id not in in_use]
            for item_id in outside[:-keep]:   # never placed: as of now
                record = self.items.pop(item_id)
                self.forgotten[item_id] = self.newest_visible() if record.hidden else item_id
        excess = len(self.forgotten) - FORGOTTEN_ITEMS_KEPT
        if excess > 0:
            for item_id in list(self.forgotten)[:excess]:
                del self.forgotten[item_id]
        if len(self.response_order) > keep + slack:
            old, recent = self.response_order[:-keep], self.response_order[-keep:]
            still_running = []
            for response_id in old:
                if self.responses[response_id].done and response_id not in in_use:
                    del self.responses[response_id]
                else:
                    still_running.append(response_id)
            self.response_order = still_running + recent

    def newest_visible(self, other_than: Any = None) -> str | None:
        """The newest item the client saw (not `other_than`), forgotten ones too."""
        return self._visible_back_from(len(self.order) - 1, skip=other_than)

    def visible_items(self) -> list[ItemRecord]:
        return [self.items[i] for i in self.order]


_TRANSCRIPTION = frozenset({wire.InputTranscriptionDelta, wire.InputTranscriptionCompleted,
                            wire.InputTranscriptionFailed})
_DELTAS = frozenset({wire.TextDelta, wire.AudioTranscriptDelta})
_WORDS: dict[type, Any] = {   # an event of a response's words -> what it says
    wire.TextDelta: lambda event: event.delta, wire.AudioTranscriptDelta: lambda event: event.delta,
    wire.TextDone: lambda event: event.text, wire.AudioTranscriptDone: lambda event: event.transcript,
}


def _content_index(event: wire.Event) -> int:
    index = getattr(event, "content_index", None)
    return index if isinstance(index, int) and index >= 0 else 0
