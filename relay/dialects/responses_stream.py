"""The Responses API's streaming events, typed: what GPT-Live's `response.event` envelope nests
when a session delegates to a Responses backend (`relay.dialects.live`). A closed set of msgspec
Structs tagged by `type`, as every codec of the relay's; a nested event outside it stays an
`Unknown` in the envelope, which the Live wire tolerates. Fields hold what the wire gave: a
response snapshot (forwarded with `output: []`), an output item (a `function_call` is read from
`response.output_item.done` only). The tests validate them against `openai.types.responses`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

class BackendEvent(msgspec.Struct, tag_field="type", omit_defaults=True, kw_only=True):
    """One Responses streaming event inside a `response.event` envelope."""

    sequence_number: Any = None


class _Snapshot(BackendEvent):
    """The backend response's snapshot (forwarded with `output: []`, even when calls are pending)."""

    response: Any = None


class BackendCreated(_Snapshot, tag="response.created"):
    pass


class BackendQueued(_Snapshot, tag="response.queued"):
    pass


class BackendInProgress(_Snapshot, tag="response.in_progress"):
    pass


class BackendCompleted(_Snapshot, tag="response.completed"):
    """The backend response is over; its calls were in `response.output_item.done`."""


class BackendFailed(_Snapshot, tag="response.failed"):
    pass


class BackendIncomplete(_Snapshot, tag="response.incomplete"):
    pass


class _BackendItem(BackendEvent):
    output_index: Any = None
    item: Any = None


class BackendItemAdded(_BackendItem, tag="response.output_item.added"):
    pass


class BackendItemDone(_BackendItem, tag="response.output_item.done"):
    """An output item is complete: the one place a function call (`item.type == "function_call"`:
    `call_id`, `name`, `arguments`) is read from."""


class _BackendPart(BackendEvent):
    item_id: Any = None
    output_index: Any = None
    content_index: Any = None


class BackendPartAdded(_BackendPart, tag="response.content_part.added"):
    part: Any = None


class BackendPartDone(_BackendPart, tag="response.content_part.done"):
    part: Any = None


class BackendTextDelta(_BackendPart, tag="response.output_text.delta"):
    delta: Any = None
    logprobs: Any = None


class BackendTextDone(_BackendPart, tag="response.output_text.done"):
    text: Any = None
    logprobs: Any = None


class BackendArgumentsDelta(BackendEvent, tag="response.function_call_arguments.delta"):
    item_id: Any = None
    output_index: Any = None
    delta: Any = None


class BackendArgumentsDone(BackendEvent, tag="response.function_call_arguments.done"):
    item_id: Any = None
    output_index: Any = None
    name: Any = None
    arguments: Any = None


class BackendError(BackendEvent, tag="error"):
    code: Any = None
    message: Any = None
    param: Any = None


def concrete(base: type) -> Iterable[type]:
    """Every subclass of `base` an event is (those named with a leading `_` are shared parts)."""
    for cls in base.__subclasses__():
        if not cls.__name__.startswith("_"):
            yield cls
        yield from concrete(cls)


BACKEND_EVENTS: Mapping[str, type[BackendEvent]] = {
    cls.__struct_config__.tag: cls for cls in concrete(BackendEvent)}  # type: ignore[misc]
"""Name -> its event: the nested Responses events typed (others stay `Unknown`)."""
