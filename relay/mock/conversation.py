"""The mock's conversation: an ordered item list with the server's insertion and validation rules.

Ordering follows `previous_item_id` the way the real server applies it (omitted = append, `"root"`
= first, an existing id = right after it, anything else = error), and client items are checked the
way the real API checks them, so that a relay which sends an output for a call that does not exist,
or a Foundry-only field to OpenAI, gets the same `error` it would get in production.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import msgspec

from relay.dialects.openai import (
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MCP_APPROVAL_REQUEST,
    MCP_APPROVAL_RESPONSE,
    MESSAGE,
)
from relay.mock.wire import ProtocolError, Wire, new_id
from relay.tools.render import json_copy

ROOT = "root"
MAX_ITEM_ID_LENGTH = 32

_COMMON_FIELDS = frozenset({"type", "id", "object", "status"})
_ITEM_FIELDS = {
    MESSAGE: _COMMON_FIELDS | {"role", "content"},
    FUNCTION_CALL: _COMMON_FIELDS | {"name", "call_id", "arguments"},
    FUNCTION_CALL_OUTPUT: _COMMON_FIELDS | {"call_id", "output"},
    MCP_APPROVAL_RESPONSE: _COMMON_FIELDS | {"approval_request_id", "approve", "reason"},
}
# Azure AI Foundry accepts (and echoes) these on top of OpenAI's schema.
_FOUNDRY_FIELDS = {
    MESSAGE: frozenset(),
    FUNCTION_CALL: frozenset({"response_id", "created_at"}),
    FUNCTION_CALL_OUTPUT: frozenset({"name", "response_id", "created_at"}),
    MCP_APPROVAL_RESPONSE: frozenset(),
}
_REQUIRED_STRINGS = {
    MESSAGE: ("role",),
    FUNCTION_CALL: ("name", "call_id", "arguments"),
    FUNCTION_CALL_OUTPUT: ("call_id", "output"),
    MCP_APPROVAL_RESPONSE: ("approval_request_id",),
}
_PART_FIELDS = {
    "input_text": frozenset({"type", "text"}),
    "input_audio": frozenset({"type", "audio", "transcript"}),
    "input_image": frozenset({"type", "image_url", "detail"}),
    "output_text": frozenset({"type", "text"}),
    "text": frozenset({"type", "text"}),
}
_GA_PARTS_BY_ROLE = {
    "system": ("input_text",),
    "user": ("input_text", "input_audio", "input_image"),
    "assistant": ("output_text",),
}
_BETA_PARTS_BY_ROLE = {"system": ("input_text",), "user": ("input_text", "input_audio"), "assistant": ("text",)}


def _supported(values: Any) -> str:
    """The server's list of allowed values: `'a', 'b', and 'c'`."""
    quoted = [f"'{value}'" for value in values]
    return ", ".join(quoted[:-1]) + f", and {quoted[-1]}" if len(quoted) > 2 else " and ".join(quoted)


def _missing(param: str) -> ProtocolError:
    return ProtocolError("missing_required_parameter", f"Missing required parameter: '{param}'.", param)


def _wrong_type(param: str, expected: str, value: Any) -> ProtocolError:
    got = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(type(value), "a number")
    if value is None:
        got = "null"
    return ProtocolError(
        "invalid_type", f"Invalid type for '{param}': expected {expected}, but got {got} instead.", param
    )


def _check_content(content: Any, role: str, wire: Wire) -> None:
    if not isinstance(content, list):
        raise _wrong_type("item.content", "an array", content)
    allowed = (_BETA_PARTS_BY_ROLE if wire.beta else _GA_PARTS_BY_ROLE)[role]
    for index, part in enumerate(content):
        where = f"item.content[{index}]"
        if not isinstance(part, dict):
            raise _wrong_type(where, "an object", part)
        part_type = part.get("type")
        if part_type not in allowed:
            supported = ", ".join(f"'{t}'" for t in allowed)
            raise ProtocolError(
                "invalid_value",
                f"Invalid value: '{part_type}'. Supported values for role '{role}' are: {supported}.",
                f"{where}.type",
            )
        for key, value in part.items():
            if key not in _PART_FIELDS[part_type]:
                raise ProtocolError("unknown_parameter", f"Unknown parameter: '{where}.{key}'.", f"{where}.{key}")
            if not isinstance(value, str) and not (key == "transcript" and value is None):
                raise _wrong_type(f"{where}.{key}", "a string", value)


class Conversation:
    """Items in conversation order; each item is the dict the server would send for it.

    Beside the list it keeps what the session asks for at every response, so that a long session
    costs the same per turn as a short one: the item by id, each call id's function-call items in
    order, the name each call id answers to, and each item's size in compact JSON (the usage's
    input tokens count the whole conversation)."""

    def __init__(self) -> None:
        self._items: list[dict[str, Any]] = []
        self._by_id: dict[str, dict[str, Any]] = {}
        self._calls: dict[str, list[str]] = {}   # call_id -> ids of its function-call items, in order
        self._names: dict[str, str] = {}         # call_id -> the name of its last function-call item
        self._sizes: dict[str, int | None] = {}  # item id -> len of its compact JSON (None: msgspec refuses it)
        self._size = 0                           # their sum
        self._refused = 0                        # items msgspec refuses

    @property
    def items(self) -> list[dict[str, Any]]:
        """A snapshot of the items in order."""
        return [json_copy(item) for item in self._items]

    def current(self) -> list[dict[str, Any]]:
        """The items in order, as stored (not copied): for a reader that changes none of them."""
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def _index(self, item_id: str) -> int | None:
        """The item's position; from the end, where the items a session asks about are (ids are unique)."""
        if item_id not in self._by_id:
            return None
        items = self._items
        for index in range(len(items) - 1, -1, -1):
            if items[index].get("id") == item_id:
                return index
        return None

    def get(self, item_id: str) -> dict[str, Any] | None:
        return self._by_id.get(item_id)

    def previous_id(self, item_id: str) -> str | None:
        index = self._index(item_id)
        if not index:
            return None
        return self._items[index - 1].get("id")

    def last_id(self) -> str | None:
        return self._items[-1].get("id") if self._items else None

    def function_call(self, call_id: str) -> dict[str, Any] | None:
        """The first function-call item of `call_id` in conversation order."""
        ids = self._calls.get(call_id)
        return self._by_id[ids[0]] if ids else None

    def call_names(self) -> Mapping[str, str]:
        """call_id -> function name (the last function call of that id's), for every function call in
        the conversation: a read-only view, kept as items come and go."""
        return MappingProxyType(self._names)

    def encoded_size(self) -> int | None:
        """len of the items' compact JSON as one list (msgspec's), None when msgspec refuses one of
        them (a lone surrogate)."""
        if self._refused:
            return None
        return self._size + 2 + max(len(self._items) - 1, 0)   # the brackets and the commas

    def check_position(self, previous_item_id: str | None, param: str) -> None:
        if previous_item_id not in (None, ROOT) and previous_item_id not in self._by_id:
            raise ProtocolError(
                "item_not_found",
                f"Previous item with id '{previous_item_id}' not found in the conversation.",
                param,
            )

    def insert(self, item: dict[str, Any], previous_item_id: str | None = None) -> str | None:
        """Insert (None = append, "root" = first, an id = right after it); returns the id of the
        item now preceding it, which is what the server reports as `previous_item_id`."""
        self.check_position(previous_item_id, "previous_item_id")
        if previous_item_id is None:
            position = len(self._items)
        elif previous_item_id == ROOT:
            position = 0
        else:
            position = self._index(previous_item_id) + 1  # type: ignore[operator]  # checked above
        self._items.insert(position, item)
        self._added(item, appended=position == len(self._items) - 1)
        return self._items[position - 1].get("id") if position else None

    def replace(self, item: dict[str, Any]) -> None:
        """Store the final form of an item (a streamed output when it is done), if still present;
        also an item changed in place (a truncated transcript), so that its size is read again."""
        index = self._index(item["id"])
        if index is not None:
            self._removed(self._items[index])
            self._items[index] = item
            self._added(item, appended=index == len(self._items) - 1)

    def remove(self, item_id: str) -> dict[str, Any]:
        index = self._index(item_id)
        if index is None:
            raise item_not_found(item_id, "item_id")
        item = self._items.pop(index)
        self._removed(item)
        return item

    def _added(self, item: dict[str, Any], *, appended: bool) -> None:
        item_id = item["id"]
        self._by_id[item_id] = item
        size = self._sizes[item_id] = _encoded_size(item)
        if size is None:
            self._refused += 1
        else:
            self._size += size
        if item.get("type") != FUNCTION_CALL:
            return
        call_id = item["call_id"]
        ids = self._calls.setdefault(call_id, [])
        if appended or not ids:
            ids.append(item_id)
        else:   # a second item of one call id, not at the end: its place among them, from the list
            ids[:] = [i["id"] for i in self._items if i.get("type") == FUNCTION_CALL and i["call_id"] == call_id]
        self._names[call_id] = self._by_id[ids[-1]].get("name", "")

    def _removed(self, item: dict[str, Any]) -> None:
        item_id = item["id"]
        del self._by_id[item_id]
        size = self._sizes.pop(item_id)
        if size is None:
            self._refused -= 1
        else:
            self._size -= size
        if item.get("type") != FUNCTION_CALL:
            return
        call_id = item["call_id"]
        ids = self._calls[call_id]
        ids.remove(item_id)
        if ids:
            self._names[call_id] = self._by_id[ids[-1]].get("name", "")
        else:
            del self._calls[call_id], self._names[call_id]

    def check_client_item(self, item: Any, wire: Wire) -> dict[str, Any]:
        """Validate an item from `conversation.item.create` and return it as the server stores it
        (server id when absent, `status`, beta `object`). Raises ProtocolError."""
        if not isinstance(item, dict):
            raise _missing("item") if item is None else _wrong_type("item", "an object", item)
        item_type = item.get("type")
        if item_type is None:
            raise _missing("item.type")
        if item_type not in _ITEM_FIELDS:
            raise ProtocolError(
                "invalid_value",
                f"Invalid value: '{item_type}'. Supported values are: {_supported(_ITEM_FIELDS)}.",
                "item.type",
            )
        allowed = _ITEM_FIELDS[item_type] | (_FOUNDRY_FIELDS[item_type] if wire.foundry else frozenset())
        for key in item:
            if key not in allowed:
                raise ProtocolError("unknown_parameter", f"Unknown parameter: 'item.{key}'.", f"item.{key}")
        for key in _REQUIRED_STRINGS[item_type]:
            if key not in item:
                raise _missing(f"item.{key}")
            if not isinstance(item[key], str):
                raise _wrong_type(f"item.{key}", "a string", item[key])
        item_id = item.get("id")
        if item_id is not None:
            if not isinstance(item_id, str):
                raise _wrong_type("item.id", "a string", item_id)
            if len(item_id) > MAX_ITEM_ID_LENGTH:
                raise ProtocolError(
                    "string_above_max_length",
                    f"Invalid 'item.id': string too long. Expected a string with maximum length "
                    f"{MAX_ITEM_ID_LENGTH}, but got a string with length {len(item_id)} instead.",
                    "item.id",
                )
            if self._index(item_id) is not None:
                raise ProtocolError(
                    "duplicate_item_id", f"Item with id '{item_id}' already exists in the conversation.", "item.id"
                )
        if item_type == MESSAGE:
            if item["role"] not in _GA_PARTS_BY_ROLE:
                raise ProtocolError(
                    "invalid_value",
                    f"Invalid value: '{item['role']}'. Supported values are: 'user', 'assistant', and 'system'.",
                    "item.role",
                )
            if "content" not in item:
                raise _missing("item.content")
            _check_content(item["content"], item["role"], wire)
        if item_type == FUNCTION_CALL_OUTPUT and self.function_call(item["call_id"]) is None:
            code, message = wire.quirks.call_not_found   # the provider's words (xAI: invalid_tool_call_id)
            raise ProtocolError(code, message.format(call_id=item["call_id"]), "item.call_id")
        if item_type == MCP_APPROVAL_RESPONSE:
            if not isinstance(item.get("approve"), bool):
                raise _missing("item.approve") if "approve" not in item else _wrong_type("item.approve", "a boolean",
                                                                                        item["approve"])
            if not any(i.get("type") == MCP_APPROVAL_REQUEST and i.get("id") == item["approval_request_id"]
                       for i in self._items):
                raise item_not_found(item["approval_request_id"], "item.approval_request_id")
        fields = {k: json_copy(v) for k, v in item.items() if k not in ("id", "object", "status", "type")}
        # as the server stores them: an output and an MCP approval's answer without a status
        status = {"status": "completed"} if item_type in (MESSAGE, FUNCTION_CALL) else {}
        return wire.item(id=item_id or new_id("item"), type=item_type, **status, **fields)


def _encoded_size(value: Any) -> int | None:
    try:
        return len(msgspec.json.encode(value))
    except UnicodeEncodeError:
        return None


def item_not_found(item_id: Any, param: str) -> ProtocolError:
    return ProtocolError("item_not_found", f"Item with item_id '{item_id}' not found.", param)
