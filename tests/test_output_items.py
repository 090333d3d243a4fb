"""The `function_call_output` item each dialect injects parses as the official openai GA type;
Foundry's extra fields (`name`, `response_id`, `created_at`) are there only toward Foundry."""

from __future__ import annotations

import pytest
from openai.types.realtime.realtime_conversation_item_function_call_output import (
    RealtimeConversationItemFunctionCallOutput,
)

from relay.dialects import FOUNDRY, OPENAI, OPENAI_BETA

FOUNDRY_FIELDS = {"name", "response_id", "created_at"}


@pytest.mark.parametrize("dialect", [OPENAI, OPENAI_BETA, FOUNDRY], ids=lambda d: d.name)
def test_dialect_output_items_validate(dialect) -> None:
    item = dialect.function_call_output_item(item_id="o1", call_id="c1", output="ok", status="incomplete",
                                             name="f", response_id="resp_1", created_at=1700000000)
    parsed = RealtimeConversationItemFunctionCallOutput.model_validate(item)
    assert (parsed.id, parsed.call_id, parsed.output, parsed.status) == ("o1", "c1", "ok", "incomplete")
    if dialect.foundry_fields:
        assert (item["name"], item["response_id"], item["created_at"]) == ("f", "resp_1", 1700000000)
    else:
        assert not FOUNDRY_FIELDS & item.keys()
