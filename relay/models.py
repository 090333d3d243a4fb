"""Canonical conversation items (OpenAI GA vocabulary) as pydantic v2 models.

The engine works on plain dicts for speed; these models are the typed view used where items are
built or checked (outputs the relay injects, exports, tests). Every model keeps unknown fields,
because providers add fields (Azure, Foundry) and a relay must never drop what it does not know.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

ItemStatus = Literal["in_progress", "completed", "incomplete"]
Role = Literal["system", "user", "assistant"]


class _Open(BaseModel):
    """Base for wire models: unknown fields are kept and written back out."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def to_wire(self) -> dict[str, Any]:
        """The JSON-ready dict, without fields that were never set or are None."""
        return self.model_dump(mode="json", exclude_none=True)


class ContentPart(_Open):
    """One part of a message: `input_text`, `input_audio`, `output_text`, `output_audio`, ...

    Beta used `text`/`audio` for assistant parts; both spellings are accepted."""

    type: str
    text: str | None = None
    transcript: str | None = None
    audio: str | None = None


class MessageItem(_Open):
    type: Literal["message"] = "message"
    id: str | None = None
    object: Literal["realtime.item"] | None = None
    status: ItemStatus | None = None
    role: Role
    content: list[ContentPart] = Field(default_factory=list)


class FunctionCallItem(_Open):
    type: Literal["function_call"] = "function_call"
    id: str | None = None
    object: Literal["realtime.item"] | None = None
    status: ItemStatus | None = None
    call_id: str
    name: str
    arguments: str = ""
    # Foundry extensions, accepted and kept on input.
    response_id: str | None = None
    created_at: int | None = None


class FunctionCallOutputItem(_Open):
    """A tool's answer. `name`, `response_id` and `created_at` are Foundry extensions: the
    dialect adapter strips them toward OpenAI upstreams, whose schema has no such fields."""

    type: Literal["function_call_output"] = "function_call_output"
    id: str | None = None
    object: Literal["realtime.item"] | None = None
    status: ItemStatus | None = None
    call_id: str
    output: str
    name: str | None = None
    response_id: str | None = None
    created_at: int | None = None


class OtherItem(_Open):
    """Item types the relay does not model (MCP calls, future types): kept as they are."""

    type: str
    id: str | None = None
    status: ItemStatus | None = None


KnownItem = Annotated[
    Union[MessageItem, FunctionCallItem, FunctionCallOutputItem], Field(discriminator="type")
]
Item = Union[MessageItem, FunctionCallItem, FunctionCallOutputItem, OtherItem]

_known_items: TypeAdapter[Any] = TypeAdapter(KnownItem)
KNOWN_ITEM_TYPES = frozenset({"message", "function_call", "function_call_output"})


def parse_item(data: dict[str, Any]) -> Item:
    """Parse a wire item into its model; unknown item types become `OtherItem`.

    Raises pydantic.ValidationError for a known type with missing or mistyped fields."""
    if data.get("type") in KNOWN_ITEM_TYPES:
        return _known_items.validate_python(data)
    return OtherItem.model_validate(data)
