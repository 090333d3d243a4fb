"""The item-based tool flow's vocabulary: the closed set of typed events a conversation of items
with a response lifecycle is told in (the OpenAI Realtime family's, GA names), what the item-based
engine (relay/engine/itembased.py and its helpers) handles and writes. A wire family of this flow
has a codec that decodes its frames into these events and encodes them back in its own names
(`relay.dialects.openai_codec` is the OpenAI family's; the engine reaches it as `dialect.codec`).

Events are msgspec Structs, tagged by the GA `type` (the choice is measured: scripts/bench_codec.py,
docs/benchmarks.md "Typed events"); an event that arrived by another name (beta's, a variant's) is
an instance of a subclass of its GA event (`alias`), which `kind_of` reads back as the GA event.
A frame outside the set is an `Unknown` that keeps the frame.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import msgspec

class Event(msgspec.Struct, tag_field="type", omit_defaults=True, kw_only=True):
    """One frame of the wire, typed by its `type`. `event_id` is every event's."""

    event_id: Any = None


class Unknown(msgspec.Struct):
    """A frame outside the closed set (or not of its event's shape), kept as it came: the text of a
    frame, or the decoded object a recording held."""

    raw: Any


def wire_type(event: Event) -> str:
    """The `type` the event arrived by (a beta or a variant's name where it had one)."""
    return type(event).__struct_config__.tag   # type: ignore[return-value]


# ---- what the server says ------------------------------------------------------------------------
class SessionCreated(Event, tag="session.created"):
    session: Any = None


class SessionUpdated(Event, tag="session.updated"):
    session: Any = None


class ConversationCreated(Event, tag="conversation.created"):
    conversation: Any = None


class _ItemEvent(Event):
    previous_item_id: Any = None
    item: Any = None


class ItemAdded(_ItemEvent, tag="conversation.item.added", omit_defaults=False):
    """An item entered the conversation (beta: `conversation.item.created`). Written with every
    field, as servers write it: the first item's `previous_item_id` is `null`, not absent."""


class ItemDone(_ItemEvent, tag="conversation.item.done", omit_defaults=False):
    """An item is final (written with every field, `previous_item_id: null` included)."""


class ItemRetrieved(_ItemEvent, tag="conversation.item.retrieved"):
    pass


class ItemTruncated(Event, tag="conversation.item.truncated"):
    item_id: Any = None
    content_index: Any = None
    audio_end_ms: Any = None


class ItemDeleted(Event, tag="conversation.item.deleted"):
    item_id: Any = None


class _Transcription(Event):
    item_id: Any = None
    content_index: Any = None


class InputTranscriptionDelta(_Transcription, tag="conversation.item.input_audio_transcription.delta"):
    delta: Any = None


class InputTranscriptionCompleted(_Transcription, tag="conversation.item.input_audio_transcription.completed"):
    transcript: Any = None
    usage: Any = None


class InputTranscriptionFailed(_Transcription, tag="conversation.item.input_audio_transcription.failed"):
    error: Any = None


class InputTranscriptionSegment(_Transcription, tag="conversation.item.input_audio_transcription.segment"):
    text: Any = None


class InputAudioCommitted(Event, tag="input_audio_buffer.committed", omit_defaults=False):
    """The caller's audio became an item (written with `previous_item_id: null` at the start)."""

    previous_item_id: Any = None
    item_id: Any = None


class InputAudioCleared(Event, tag="input_audio_buffer.cleared"):
    pass


class SpeechStarted(Event, tag="input_audio_buffer.speech_started"):
    audio_start_ms: Any = None
    item_id: Any = None


class SpeechStopped(Event, tag="input_audio_buffer.speech_stopped"):
    audio_end_ms: Any = None
    item_id: Any = None


class OutputAudioStarted(Event, tag="output_audio_buffer.started"):
    response_id: Any = None


class OutputAudioStopped(Event, tag="output_audio_buffer.stopped"):
    response_id: Any = None


class OutputAudioCleared(Event, tag="output_audio_buffer.cleared"):
    response_id: Any = None


class _ResponseEvent(Event):
    response: Any = None


class ResponseCreated(_ResponseEvent, tag="response.created"):
    pass


class ResponseDone(_ResponseEvent, tag="response.done"):
    pass


class _OutputItem(Event):
    response_id: Any = None
    output_index: Any = None
    item: Any = None


class OutputItemAdded(_OutputItem, tag="response.output_item.added"):
    pass


class OutputItemDone(_OutputItem, tag="response.output_item.done"):
    pass


class _Part(Event):
    """Where a piece of a response's output sits."""

    response_id: Any = None
    item_id: Any = None
    output_index: Any = None
    content_index: Any = None


class ContentPartAdded(_Part, tag="response.content_part.added"):
    part: Any = None


class ContentPartDone(_Part, tag="response.content_part.done"):
    part: Any = None


class TextDelta(_Part, tag="response.output_text.delta"):
    """A piece of text; `obfuscation` is the random padding servers add to streamed deltas."""

    delta: Any = None
    obfuscation: Any = None


class TextDone(_Part, tag="response.output_text.done"):
    text: Any = None


class AudioTranscriptDelta(_Part, tag="response.output_audio_transcript.delta"):
    delta: Any = None
    obfuscation: Any = None


class AudioTranscriptDone(_Part, tag="response.output_audio_transcript.done"):
    transcript: Any = None


class AudioDelta(_Part, tag="response.output_audio.delta"):
    """The model's audio: forwarded undecoded (`audio_peek`); decoded only by a reader of the whole
    session (the inspector's audio track)."""

    delta: Any = None


class AudioDone(_Part, tag="response.output_audio.done"):
    pass


class _Arguments(Event):
    response_id: Any = None
    item_id: Any = None
    output_index: Any = None


class FunctionCallArgumentsDelta(_Arguments, tag="response.function_call_arguments.delta"):
    call_id: Any = None
    delta: Any = None
    obfuscation: Any = None


class FunctionCallArgumentsDone(_Arguments, tag="response.function_call_arguments.done"):
    call_id: Any = None
    name: Any = None
    arguments: Any = None


class McpCallArgumentsDelta(_Arguments, tag="response.mcp_call_arguments.delta"):
    delta: Any = None


class McpCallArgumentsDone(_Arguments, tag="response.mcp_call_arguments.done"):
    arguments: Any = None


class McpCallInProgress(_Arguments, tag="response.mcp_call.in_progress"):
    pass


class McpCallCompleted(_Arguments, tag="response.mcp_call.completed"):
    pass


class McpCallFailed(_Arguments, tag="response.mcp_call.failed"):
    pass


class McpListToolsInProgress(Event, tag="mcp_list_tools.in_progress"):
    item_id: Any = None


class McpListToolsCompleted(Event, tag="mcp_list_tools.completed"):
    item_id: Any = None


class McpListToolsFailed(Event, tag="mcp_list_tools.failed"):
    item_id: Any = None


class RateLimitsUpdated(Event, tag="rate_limits.updated"):
    rate_limits: Any = None


class Error(Event, tag="error"):
    """An error: the server's, or the relay's to a client (`error`: type, code, message, param,
    event_id)."""

    error: Any = None


# ---- what a client (or the relay) sends ----------------------------------------------------------
class SessionUpdate(Event, tag="session.update"):
    session: Any = None


class InputAudioAppend(Event, tag="input_audio_buffer.append"):
    """The caller's audio: forwarded undecoded (`audio_peek`)."""

    audio: Any = None


class InputAudioCommit(Event, tag="input_audio_buffer.commit"):
    pass


class InputAudioClear(Event, tag="input_audio_buffer.clear"):
    pass


class OutputAudioClear(Event, tag="output_audio_buffer.clear"):
    pass


class ItemCreate(Event, tag="conversation.item.create"):
    previous_item_id: Any = None
    item: Any = None


class ItemRetrieve(Event, tag="conversation.item.retrieve"):
    item_id: Any = None


class ItemTruncate(Event, tag="conversation.item.truncate"):
    item_id: Any = None
    content_index: Any = None
    audio_end_ms: Any = None


class ItemDelete(Event, tag="conversation.item.delete"):
    item_id: Any = None


class ResponseCreate(Event, tag="response.create"):
    response: Any = None


class ResponseCancel(Event, tag="response.cancel"):
    response_id: Any = None


def _concrete(base: type) -> Iterable[type]:
    for cls in base.__subclasses__():
        if not cls.__name__.startswith("_"):
            yield cls
        yield from _concrete(cls)


EVENTS: Mapping[str, type[Event]] = {cls.__struct_config__.tag: cls for cls in _concrete(Event)}  # type: ignore[misc]
"""GA name -> its event: the closed set."""
COMMANDS = frozenset({SessionUpdate, InputAudioAppend, InputAudioCommit, InputAudioClear, OutputAudioClear,
                      ItemCreate, ItemRetrieve, ItemTruncate, ItemDelete, ResponseCreate, ResponseCancel})
"""The client's events (what the relay, a client or the mock's peer writes upstream)."""

USER = "user"   # the role of the caller's message items

_GA_EVENT: dict[type, type[Event]] = {}   # a struct for another name -> its GA event


def alias(ga: type[Event], name: str) -> type[Event]:
    """A struct for the GA event `ga` arriving by another `name` (a subclass tagged with it), which
    `kind_of` reads as `ga`."""
    other: type[Event] = msgspec.defstruct(ga.__name__, [], bases=(ga,), tag=name)
    _GA_EVENT[other] = ga
    return other


def kind_of(event: Event) -> type[Event]:
    """The GA event an event is, whatever name it arrived by (what a table of events is keyed by)."""
    return _GA_EVENT.get(type(event), type(event))


def event_name(kind: type[Event]) -> str:
    """The GA name of an event class (`wire_type` names an event by the name it arrived by)."""
    return str(kind.__struct_config__.tag)



class ItemCodec(Protocol):
    """What the item-based engine asks of its family's codec (`dialect.codec`; the OpenAI
    family's is `relay.dialects.openai_codec`): a frame into one of this module's events read as
    `family`'s variant names it (`decode` the text, `event_of` a decoded frame), an event back
    into a frame in the variant's names (`encode`), whether an item event's frame placed its item
    (`said_previous`), and the relay's own commands in the variant's shapes."""

    def decode(self, frame: str | bytes, family: Any) -> Event | Unknown: ...

    def event_of(self, data: Any, family: Any) -> Event | Unknown: ...

    def encode(self, command: Event, family: Any) -> str: ...

    def said_previous(self, event: Any, frame: str) -> bool: ...

    def session_update(self, family: Any, session: dict[str, Any], event_id: str) -> Event: ...

    def response_create(self, family: Any, options: dict[str, Any], event_id: str) -> Event: ...

    def output_create(self, family: Any, event_id: str, previous_item_id: Any, **fields: Any) -> Event: ...

    def system_message_create(self, event_id: str, item_id: str, text: str) -> Event: ...

    def approval_create(self, event_id: str, item_id: str, request_id: str, approve: bool,
                        reason: str | None) -> Event: ...

    def client_error(self, family: Any, event_id: str, code: str, message: str, **details: Any) -> Event: ...

    def audio_peek(self, family: Any, *, upstream: bool = True) -> Callable[[str | bytes], bool]: ...
