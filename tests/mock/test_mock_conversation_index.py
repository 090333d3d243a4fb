"""The mock conversation's indexes (by item id, by call id, the names, the items' JSON size) agree
with its item list after any sequence of inserts, replacements, in-place changes and removals."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from relay.dialects.openai import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, MESSAGE
from relay.mock.conversation import ROOT, Conversation

CALL_IDS = ("call_a", "call_b", "call_c")
NAMES = ("lookup", "book", "")
WORDS = ("hello", "caf\u00e9", "\ud800")   # the last, a lone surrogate: msgspec refuses it


def _item(number: int, kind: str, call_id: str, name: str, word: str) -> dict[str, Any]:
    item_id = f"item_{number}"
    if kind == FUNCTION_CALL:
        return {"id": item_id, "type": FUNCTION_CALL, "call_id": call_id, "name": name, "arguments": "{}"}
    if kind == FUNCTION_CALL_OUTPUT:
        return {"id": item_id, "type": FUNCTION_CALL_OUTPUT, "call_id": call_id, "output": word}
    return {"id": item_id, "type": MESSAGE, "role": "user", "content": [{"type": "input_text", "text": word}]}


items = st.tuples(st.sampled_from((FUNCTION_CALL, FUNCTION_CALL_OUTPUT, MESSAGE)), st.sampled_from(CALL_IDS),
                  st.sampled_from(NAMES), st.sampled_from(WORDS))
operations = st.lists(st.one_of(
    st.tuples(st.just("append"), items),
    st.tuples(st.just("first"), items),
    st.tuples(st.just("after"), st.integers(0, 40), items),
    st.tuples(st.just("replace"), st.integers(0, 40), items),
    st.tuples(st.just("change"), st.integers(0, 40), st.sampled_from(WORDS)),
    st.tuples(st.just("remove"), st.integers(0, 40)),
), max_size=40)


def _encoded(value: Any) -> int | None:
    try:
        return len(msgspec.json.encode(value))
    except UnicodeEncodeError:
        return None


@settings(max_examples=300, deadline=None)
@given(operations)
def test_the_indexes_agree_with_the_items(steps: list[tuple[Any, ...]]) -> None:
    conversation = Conversation()
    model: list[dict[str, Any]] = []   # what the conversation holds, kept by plain list operations
    for number, (operation, *args) in enumerate(steps):
        if operation in ("append", "first", "after"):
            at = (None if operation == "append" or (operation == "after" and not model)
                  else ROOT if operation == "first" else model[args[0] % len(model)]["id"])
            item = _item(number, *args[-1])
            previous = conversation.insert(item, at)
            position = len(model) if at is None else 0 if at == ROOT else \
                next(i for i, m in enumerate(model) if m["id"] == at) + 1
            model.insert(position, item)
            assert previous == (model[position - 1]["id"] if position else None)
        elif not model:
            continue
        elif operation == "replace":   # the final form of an item: same id, any other content
            index = args[0] % len(model)
            item = {**_item(number, *args[1]), "id": model[index]["id"]}
            conversation.replace(item)
            model[index] = item
        elif operation == "change":    # an item changed in place, then stored again (a truncation)
            item = model[args[0] % len(model)]
            item["changed"] = args[1]
            conversation.replace(item)
        else:
            item = model.pop(args[0] % len(model))
            assert conversation.remove(item["id"]) is item

        assert conversation.current() == model
        for index, item in enumerate(model):
            assert conversation.get(item["id"]) is item
            assert conversation.previous_id(item["id"]) == (model[index - 1]["id"] if index else None)
        assert conversation.get("item_missing") is None
        for call_id in CALL_IDS:
            calls = [m for m in model if m["type"] == FUNCTION_CALL and m["call_id"] == call_id]
            assert conversation.function_call(call_id) is (calls[0] if calls else None)
        assert dict(conversation.call_names()) == {m["call_id"]: m["name"] for m in model if m["type"] == FUNCTION_CALL}
        assert conversation.encoded_size() == _encoded(model)
        assert conversation.last_id() == (model[-1]["id"] if model else None)
