"""Gemini Live's turns as conversation records.

Gemini's wire has no items and no responses, yet the relay keeps the same `Conversation` and
call book as for the OpenAI family, with OpenAI-shaped items, so that export, replay, metrics and
dumps read both engines alike. `Turns` makes them: a model turn is a synthetic response (opened
by its first output, done at `turnComplete` or `interrupted`), what the model says in it one
assistant message, the user's transcribed speech a user message (placed before the answer it
lags behind), the client's text turns messages, a call its `function_call` item, and the answers
to it one `function_call_output` item holding the latest. It acts through the session's context
only (`context.SessionContext`).
"""

from __future__ import annotations

from typing import Any

from relay.dialects.gemini import response_text
from relay.dialects.openai import FUNCTION_CALL_OUTPUT
from relay.engine.calls import CallEntry, Owner
from relay.engine.context import SessionContext
from relay.engine.conversation import ABSENT, ItemRecord, ResponseRecord


class Turns:
    """The conversation record of one Gemini Live session."""

    def __init__(self, ctx: SessionContext, *, hiding: bool) -> None:
        self.ctx = ctx
        self.hiding = hiding                          # the client must not see relay calls
        self._turn: ResponseRecord | None = None      # the model turn in progress
        self._model_item: str | None = None           # its message item taking words
        self._user_item: str | None = None            # the user's spoken turn being transcribed

    def model_turn(self) -> ResponseRecord:
        """The model turn in progress, opened by its first output."""
        if self._turn is None:
            turn = self.ctx.conversation.response(self.ctx.new_id("r"))
            assert turn is not None
            turn.seen_created = True
            turn.created_at = self.ctx.now
            turn.creator = "server"
            self._turn = turn
            self.ctx.response_notice(turn, "created")
        return self._turn

    def end_turn(self, status: str) -> None:
        turn = self._turn
        if turn is not None:
            turn.status = status
            turn.done_at = self.ctx.now
            if status == "cancelled":
                turn.status_details = {"type": "cancelled", "reason": "turn_detected"}
            self.ctx.response_notice(turn, "done")
            record = self.ctx.conversation.item(self._model_item)
            if record is not None:
                record.status = "completed" if status == "completed" else "incomplete"
        self._turn = None
        self._model_item = None
        self._user_item = None
        self.ctx.forget_old()

    def add_item(self, data: dict[str, Any], origin: str, *, previous: Any = ABSENT,
                 turn: ResponseRecord | None = None, hidden: bool = False) -> ItemRecord:
        """Put an item in the conversation. Anything but transcribed user speech (which lags
        behind and is placed before the model's answer) ends the model message taking words."""
        record = self.ctx.conversation.upsert(data)
        assert record is not None   # data always carries an id
        record.origin = origin
        record.hidden = hidden
        if turn is not None:
            record.response_id = turn.id
            self.ctx.conversation.link_output(turn, record.id, None)
        self.ctx.conversation.insert(record.id, previous, "gemini")
        if origin != "user_audio":
            self._model_item = None
        return record

    def model_words(self, text: str, part_type: str) -> None:
        record = self._open_model_item(part_type)
        self.ctx.conversation.add_text(record.id, 0, text)

    def speaking(self) -> bool:
        """Whether the model's turn has its message open, so that more of its audio changes
        nothing here (`model_audio` would find it open): what lets its audio pass the engine by."""
        return self.ctx.conversation.item(self._model_item) is not None

    def model_audio(self) -> None:
        """The model spoke (audio seen, maybe unparsed): its turn has a message, even if no
        transcript of it ever comes."""
        self._open_model_item("output_audio")

    def _open_model_item(self, part_type: str) -> ItemRecord:
        record = self.ctx.conversation.item(self._model_item)
        if record is None:
            turn = self.model_turn()
            part: dict[str, Any] = {"type": part_type}
            part["text" if part_type == "output_text" else "transcript"] = None
            record = self.add_item({"type": "message", "id": self.ctx.new_id("i"), "role": "assistant",
                                    "status": "in_progress", "content": [part]}, "model", turn=turn)
            self._model_item = record.id
        return record

    def user_words(self, text: str) -> None:
        """Transcribed user speech. Transcripts lag: words that arrive once the model has begun
        answering belong before its answer."""
        record = self.ctx.conversation.item(self._user_item)
        if record is None:
            previous: Any = ABSENT
            turn = self._turn
            if turn is not None and turn.output_item_ids:
                first = turn.output_item_ids[0]
                order = self.ctx.conversation.order
                position = order.index(first) if first in order else len(order)
                previous = order[position - 1] if position > 0 else None
            record = self.add_item({"type": "message", "id": self.ctx.new_id("i"), "role": "user",
                                    "status": "completed",
                                    "content": [{"type": "input_audio", "transcript": None}]},
                                   "user_audio", previous=previous)
            self._user_item = record.id
        self.ctx.conversation.add_text(record.id, 0, text)

    def client_turns(self, turns: Any) -> None:
        for turn in turns if isinstance(turns, list) else [turns]:
            if not isinstance(turn, dict):
                continue
            parts = turn.get("parts")
            texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)] \
                if isinstance(parts, list) else []
            if not texts:
                continue
            role = "assistant" if turn.get("role") == "model" else "user"
            part_type = "output_text" if role == "assistant" else "input_text"
            self.add_item({"type": "message", "id": self.ctx.new_id("i"), "role": role, "status": "completed",
                           "content": [{"type": part_type, "text": text} for text in texts]}, "client")
        self._user_item = None

    def record_output(self, entry: CallEntry, response: Any, origin: str, *, final: bool,
                      status: str = "completed") -> None:
        """The call's `function_call_output` item: created by its first answer, holding the
        latest (interim answers of a streaming tool are replaced by the final one)."""
        text = response_text(response)
        record = self.ctx.conversation.item(entry.output_item_id)
        if record is None:
            record = self.add_item({"type": FUNCTION_CALL_OUTPUT, "id": self.ctx.new_id("i"),
                                    "call_id": entry.call_id, "output": text, "status": status}, origin,
                                   hidden=self.hiding and entry.owner is Owner.RELAY)
            entry.output_item_id = record.id
        else:
            record.output = text
            record.status = status
        if entry.owner is Owner.CLIENT:
            entry.output = text
            entry.output_status = status
            if final:
                self.ctx.rules.client_answered(entry)
