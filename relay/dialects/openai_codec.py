"""The OpenAI Realtime wire family's codec: a frame into one of a closed set of typed events
(`decode` for a frame's text, `event_of` for a frame already decoded, as a recording holds it), a
command back into a frame (`encode`), and the cheap look that lets audio pass undecoded
(`audio_peek`). GA, beta and the variants (Azure, Foundry, xAI, Voice Live) are one family: what a
variant names differently is data (`OpenAIFamily.ga_names`), read here, so a beta
`response.audio_transcript.delta` is an `AudioTranscriptDelta` as the GA name is.

Events are msgspec Structs, tagged by the wire's `type` (the choice is measured:
scripts/bench_codec.py, docs/benchmarks.md "Typed events"). A frame outside the set, or not a JSON
object of its event's shape, is an `Unknown` that keeps the frame. Fields hold what the wire gave,
as the wire gave it (an item, a response, an error are the decoded objects): the codec names every
event and field of the wire once, and its readers ask the types, not the strings.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Union

import msgspec

from relay.dialects.openai import (   # the item types, named once in the family's module
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MCP_APPROVAL_REQUEST,
    MCP_APPROVAL_RESPONSE,
    MCP_CALL,
    MCP_ITEM_TYPES,
    MCP_LIST_TOOLS,
    MESSAGE,
    OPENAI,
    READ_AS_GA,
    OpenAIFamily,
)
from relay.dialects.jsontext import compact_json
from relay.dialects.peek import pass_through_test


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


# ---- reading ----------------------------------------------------------------------------------------
class _Reader:
    """One variant's names: a struct per name an event arrives by (GA, beta, older, the
    variant's own: a subclass of the GA event tagged with the other name), and one decoder."""

    def __init__(self, ga_names: Mapping[str, str]) -> None:
        self.by_name: dict[str, type[Event]] = dict(EVENTS)
        for other, ga in ga_names.items():
            if ga in EVENTS and other not in EVENTS:
                self.by_name[other] = msgspec.defstruct(EVENTS[ga].__name__, [], bases=(EVENTS[ga],), tag=other)
                _GA_EVENT[self.by_name[other]] = EVENTS[ga]
        self.decoder = msgspec.json.Decoder(Union[tuple(self.by_name.values())])   # noqa: UP007


_GA_EVENT: dict[type, type[Event]] = {}   # a struct for another name -> its GA event


def kind_of(event: Event) -> type[Event]:
    """The GA event an event is, whatever name it arrived by (what a table of events is keyed by)."""
    return _GA_EVENT.get(type(event), type(event))


@functools.lru_cache(maxsize=None)
def _reader(ga_names: tuple[tuple[str, str], ...]) -> _Reader:
    return _Reader(dict(ga_names))


_BY_TABLE: dict[int, tuple[Mapping[str, str], _Reader]] = {}   # id of a variant's table -> (it, its reader)


def _reader_of(family: OpenAIFamily) -> _Reader:
    names = family.ga_names
    found = _BY_TABLE.get(id(names))
    if found is None or found[0] is not names:
        found = _BY_TABLE[id(names)] = (names, _reader(tuple(sorted(names.items()))))
    return found[1]


_OPENAI = _reader(tuple(sorted(READ_AS_GA.items())))


def decode(frame: str | bytes, family: OpenAIFamily = OPENAI) -> Event | Unknown:
    """A frame's text into its event, or an `Unknown` holding the frame."""
    reader = _OPENAI if family is OPENAI else _reader_of(family)
    try:
        return reader.decoder.decode(frame)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeEncodeError, RecursionError):
        return Unknown(frame)   # UnicodeEncodeError: a lone surrogate; RecursionError: nested too deep


def event_of(data: Any, family: OpenAIFamily = OPENAI) -> Event | Unknown:
    """A frame already decoded (a recording's) into its event, or an `Unknown` holding it. The
    `type` picks the struct (converting over the whole union costs 15 times as much)."""
    kind = data.get("type") if isinstance(data, dict) else None
    reader = _OPENAI if family is OPENAI else _reader_of(family)
    cls = reader.by_name.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return Unknown(data)
    try:
        return msgspec.convert(data, cls)
    except (msgspec.ValidationError, RecursionError):
        return Unknown(data)


# ---- writing ----------------------------------------------------------------------------------------
_ENCODER = msgspec.json.Encoder()


def encode(command: Event, family: OpenAIFamily = OPENAI) -> str:
    """A command (or, for the mock, a server event) as a frame's text, by the name `family`'s
    server writes (`server_names`: the beta and the variants' own)."""
    try:
        frame = _ENCODER.encode(command).decode()
    except UnicodeEncodeError:   # a lone surrogate (a tool's output may hold one): written as its escape
        frame = compact_json(msgspec.to_builtins(command))
    name = wire_type(command)
    written = family.server_names.get(name)
    if written is None or not frame.startswith(head := '{"type":' + json.dumps(name)):
        return frame
    return '{"type":' + json.dumps(written) + frame[len(head):]


def frame_object(event: Event, family: OpenAIFamily = OPENAI) -> dict[str, Any]:
    """An event as the decoded frame `encode` would write (what a recording holds, what
    `event_of` reads back): `type` by `family`'s server name, then `event_id`, then the fields.
    Its containers are new: the frame shares nothing with the event."""
    fields = msgspec.to_builtins(event)
    name = fields.pop("type")
    frame = {"type": family.server_names.get(name, name)}
    if "event_id" in fields:
        frame["event_id"] = fields.pop("event_id")
    frame.update(fields)
    return frame


def event_name(kind: type[Event]) -> str:
    """The GA name of an event class (`wire_type` names an event by the name it arrived by)."""
    return str(kind.__struct_config__.tag)


# ---- the relay's commands, in the variant's shapes -------------------------------------------------
def session_update(family: OpenAIFamily, session: dict[str, Any], event_id: str) -> SessionUpdate:
    """A `session.update` carrying only these session fields, as the variant takes it (GA's
    `type: realtime` where its session is typed)."""
    return SessionUpdate(event_id=event_id, session=family.session_update(session, event_id)["session"])


def response_create(family: OpenAIFamily, options: dict[str, Any], event_id: str) -> ResponseCreate:
    """A `response.create` with these options and the variant's defaults (beta's `modalities`)."""
    return ResponseCreate(event_id=event_id, response=family.response_create(options, event_id)["response"])


def output_create(family: OpenAIFamily, event_id: str, previous_item_id: Any, **fields: Any) -> ItemCreate:
    """The `function_call_output` item the relay injects (`fields`: as
    `OpenAIFamily.function_call_output_item` takes them, Foundry's `name`... where the variant has
    them), after `previous_item_id` (None: appended)."""
    return ItemCreate(event_id=event_id, previous_item_id=previous_item_id,
                      item=family.function_call_output_item(**fields))


def system_message_create(event_id: str, item_id: str, text: str) -> ItemCreate:
    """A system message item (what a streaming tool's later value becomes), appended."""
    return ItemCreate(event_id=event_id, item={"type": MESSAGE, "role": "system", "id": item_id,
                                               "content": [{"type": "input_text", "text": text}]})


def approval_create(event_id: str, item_id: str, request_id: str, approve: bool, reason: str | None) -> ItemCreate:
    """The answer to an `mcp_approval_request` item (`reason` only with a refusal)."""
    item: dict[str, Any] = {"id": item_id, "type": MCP_APPROVAL_RESPONSE, "approval_request_id": request_id,
                            "approve": approve}
    if reason is not None:
        item["reason"] = reason
    return ItemCreate(event_id=event_id, item=item)


def said_previous(event: ItemAdded | ItemDone, frame: str) -> bool:
    """Whether an item event's frame (its text) says where its item goes, `previous_item_id`
    (`null`: the first position); a frame that does not has its item appended."""
    return event.previous_item_id is not None or '"previous_item_id"' in frame


def client_error(family: OpenAIFamily, event_id: str, code: str, message: str, **details: Any) -> Error:
    """The `error` event the relay tells a client what it refused with (`details`: as
    `OpenAIFamily.client_error_event` takes them)."""
    return Error(event_id=event_id, error=family.client_error_event(event_id, code, message, **details)["error"])


# ---- audio passes undecoded -------------------------------------------------------------------------
def audio_peek(family: OpenAIFamily = OPENAI, *, upstream: bool = True) -> Callable[[str | bytes], bool]:
    """Whether a frame is audio the relay forwards as it came (from the upstream, or from the
    client with `upstream=False`), told without decoding it: the dialect's pass-through set,
    looked for by `peek.pass_through_test`, the one cheap look of the wire."""
    return pass_through_test(family.upstream_passthrough if upstream else family.client_passthrough)


WIRE_NAMES = frozenset({*READ_AS_GA, *EVENTS, FUNCTION_CALL, FUNCTION_CALL_OUTPUT, *MCP_ITEM_TYPES})
"""Every name of the family's wire a module outside the dialects should not spell (the events in
either vocabulary and the item types), what tests/test_wire_names.py counts."""
