"""Canonical item models: what the relay emits for each item kind parses as the openai GA types,
and unknown fields survive a round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.realtime.realtime_conversation_item_assistant_message import (
    RealtimeConversationItemAssistantMessage,
)
from openai.types.realtime.realtime_conversation_item_function_call import RealtimeConversationItemFunctionCall
from openai.types.realtime.realtime_conversation_item_function_call_output import (
    RealtimeConversationItemFunctionCallOutput,
)
from openai.types.realtime.realtime_conversation_item_system_message import RealtimeConversationItemSystemMessage
from openai.types.realtime.realtime_conversation_item_user_message import RealtimeConversationItemUserMessage
from pydantic import ValidationError

from relay.dialects import FOUNDRY, OPENAI, OPENAI_BETA
from relay.models import (
    ContentPart,
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    OtherItem,
    parse_item,
)

CASES = [
    (MessageItem(id="m1", role="user", status="completed",
                 content=[ContentPart(type="input_text", text="hello")]), RealtimeConversationItemUserMessage),
    (MessageItem(id="m2", role="assistant", status="completed",
                 content=[ContentPart(type="output_audio", transcript="hi there")]),
     RealtimeConversationItemAssistantMessage),
    (MessageItem(id="m3", role="system", content=[ContentPart(type="input_text", text="be brief")]),
     RealtimeConversationItemSystemMessage),
    (FunctionCallItem(id="fc1", call_id="call_1", name="get_weather", arguments='{"city":"Paris"}',
                      status="completed"), RealtimeConversationItemFunctionCall),
    (FunctionCallOutputItem(id="o1", call_id="call_1", output='{"temp":21}', status="completed"),
     RealtimeConversationItemFunctionCallOutput),
]


@pytest.mark.parametrize("model, ga_type", CASES, ids=lambda c: type(c).__name__)
def test_each_item_kind_validates_as_the_ga_type(model, ga_type) -> None:
    wire = model.to_wire()
    parsed = ga_type.model_validate(wire)
    assert parsed.model_dump(exclude_none=True) == {**wire, **parsed.model_dump(exclude_none=True)}
    assert parse_item(wire) == model


@pytest.mark.parametrize("dialect", [OPENAI, OPENAI_BETA, FOUNDRY], ids=lambda d: d.name)
def test_dialect_output_items_validate(dialect) -> None:
    item = dialect.function_call_output_item(item_id="o1", call_id="c1", output="ok", status="incomplete",
                                             name="f", response_id="resp_1", created_at=1700000000)
    model = parse_item(item)
    assert isinstance(model, FunctionCallOutputItem)
    if dialect.foundry_fields:
        assert (model.name, model.response_id, model.created_at) == ("f", "resp_1", 1700000000)
    else:
        assert not {"name", "response_id", "created_at"} & item.keys()
        RealtimeConversationItemFunctionCallOutput.model_validate(item)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                           max_leaves=6)


@given(st.dictionaries(st.text(min_size=1, max_size=10).filter(
    lambda k: k not in {"type", "id", "object", "status", "call_id", "output", "name", "response_id", "created_at"}),
    json_values, max_size=4))
def test_unknown_fields_survive_a_round_trip(extra) -> None:
    wire = {"type": "function_call_output", "id": "o1", "call_id": "c1", "output": "x", **extra}
    assert parse_item(wire).to_wire() == {k: v for k, v in wire.items() if v is not None}


def test_unknown_item_types_are_kept_and_bad_known_items_are_refused() -> None:
    mcp = {"type": "mcp_call", "id": "x", "server_label": "s", "name": "n", "arguments": "{}"}
    model = parse_item(mcp)
    assert isinstance(model, OtherItem) and model.to_wire() == mcp
    with pytest.raises(ValidationError):
        parse_item({"type": "function_call_output", "call_id": "c1"})  # no output
