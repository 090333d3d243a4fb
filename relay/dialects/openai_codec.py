"""The OpenAI Realtime wire family's codec: a frame into one of a closed set of typed events
(`decode` for a frame's text, `event_of` for a frame already decoded, as a recording holds it), a
command back into a frame (`encode`), and the cheap look that lets audio pass undecoded
(`audio_peek`). GA, beta and the variants (Azure, Foundry, xAI, Voice Live) are one family: what a
variant names differently is data (`Variant.ga_names`), read here, so a beta
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
from collections.abc import Callable, Mapping
from typing import Any, Protocol, Union

import msgspec

from relay.dialects.jsontext import compact_json
from relay.dialects.openai_names import (   # the item types and names, named once for the family
    CLIENT_PASSTHROUGH,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MCP_APPROVAL_REQUEST,
    MCP_APPROVAL_RESPONSE,
    MCP_CALL,
    MCP_ITEM_TYPES,
    MCP_LIST_TOOLS,
    MESSAGE,
    READ_AS_GA,
    UPSTREAM_PASSTHROUGH,
)
from relay.dialects.peek import pass_through_test

from relay.dialects.items import (   # the flow's typed events, re-exported: read as this codec's
    AudioDelta,
    AudioDone,
    AudioTranscriptDelta,
    AudioTranscriptDone,
    COMMANDS,
    ContentPartAdded,
    ContentPartDone,
    ConversationCreated,
    EVENTS,
    Error,
    Event,
    FunctionCallArgumentsDelta,
    FunctionCallArgumentsDone,
    InputAudioAppend,
    InputAudioClear,
    InputAudioCleared,
    InputAudioCommit,
    InputAudioCommitted,
    InputTranscriptionCompleted,
    InputTranscriptionDelta,
    InputTranscriptionFailed,
    InputTranscriptionSegment,
    ItemAdded,
    ItemCreate,
    ItemDelete,
    ItemDeleted,
    ItemDone,
    ItemRetrieve,
    ItemRetrieved,
    ItemTruncate,
    ItemTruncated,
    McpCallArgumentsDelta,
    McpCallArgumentsDone,
    McpCallCompleted,
    McpCallFailed,
    McpCallInProgress,
    McpListToolsCompleted,
    McpListToolsFailed,
    McpListToolsInProgress,
    OutputAudioClear,
    OutputAudioCleared,
    OutputAudioStarted,
    OutputAudioStopped,
    OutputItemAdded,
    OutputItemDone,
    RateLimitsUpdated,
    ResponseCancel,
    ResponseCreate,
    ResponseCreated,
    ResponseDone,
    SessionCreated,
    SessionUpdate,
    SessionUpdated,
    SpeechStarted,
    SpeechStopped,
    TextDelta,
    TextDone,
    USER,
    Unknown,
    _Arguments,
    _ItemEvent,
    _OutputItem,
    _Part,
    _ResponseEvent,
    _Transcription,
    alias,
    event_name,
    kind_of,
    wire_type,
)


class Variant(Protocol):
    """What the codec reads of a variant of the family (`relay.dialects.openai.OpenAIFamily`,
    whose instances hold this codec as their `codec`): the names its events arrive and are written
    by, what passes unparsed, and the shapes of the relay's commands."""

    ga_names: Mapping[str, str]
    server_names: Mapping[str, str]
    upstream_passthrough: frozenset[str]
    client_passthrough: frozenset[str]

    def session_update(self, session: dict[str, Any], event_id: str) -> dict[str, Any]: ...

    def response_create(self, options: dict[str, Any], event_id: str) -> dict[str, Any]: ...

    def function_call_output_item(self, **fields: Any) -> dict[str, Any]: ...

    def client_error_event(self, event_id: str, code: str, message: str, **details: Any) -> dict[str, Any]: ...


# ---- reading ----------------------------------------------------------------------------------------
class _Reader:
    """One variant's names: a struct per name an event arrives by (GA, beta, older, the
    variant's own: a subclass of the GA event tagged with the other name), and one decoder."""

    def __init__(self, ga_names: Mapping[str, str]) -> None:
        self.by_name: dict[str, type[Event]] = dict(EVENTS)
        for other, ga in ga_names.items():
            if ga in EVENTS and other not in EVENTS:
                self.by_name[other] = alias(EVENTS[ga], other)
        self.decoder = msgspec.json.Decoder(Union[tuple(self.by_name.values())])   # noqa: UP007


@functools.lru_cache(maxsize=None)
def _reader(ga_names: tuple[tuple[str, str], ...]) -> _Reader:
    return _Reader(dict(ga_names))


_BY_TABLE: dict[int, tuple[Mapping[str, str], _Reader]] = {}   # id of a variant's table -> (it, its reader)


def _reader_of(family: Variant) -> _Reader:
    global _last_family, _last_reader
    names = family.ga_names
    found = _BY_TABLE.get(id(names))
    if found is None or found[0] is not names:
        found = _BY_TABLE[id(names)] = (names, _reader(tuple(sorted(names.items()))))
    _last_family, _last_reader = family, found[1]
    return found[1]


_OPENAI = _reader(tuple(sorted(READ_AS_GA.items())))
"""GA's reader: a family left out (None) is read by the GA names (and the beta ones)."""
_last_family: Any = None   # the family read last, and its reader: one look on the common path
_last_reader = _OPENAI


def decode(frame: str | bytes, family: Variant | None = None) -> Event | Unknown:
    """A frame's text into its event, or an `Unknown` holding the frame."""
    reader = _last_reader if family is _last_family else _OPENAI if family is None else _reader_of(family)
    try:
        return reader.decoder.decode(frame)
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeEncodeError, RecursionError):
        return Unknown(frame)   # UnicodeEncodeError: a lone surrogate; RecursionError: nested too deep


def event_of(data: Any, family: Variant | None = None) -> Event | Unknown:
    """A frame already decoded (a recording's) into its event, or an `Unknown` holding it. The
    `type` picks the struct (converting over the whole union costs 15 times as much)."""
    kind = data.get("type") if isinstance(data, dict) else None
    reader = _last_reader if family is _last_family else _OPENAI if family is None else _reader_of(family)
    cls = reader.by_name.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return Unknown(data)
    try:
        return msgspec.convert(data, cls)
    except (msgspec.ValidationError, RecursionError):
        return Unknown(data)


def names_of(kinds: tuple[type[Event], ...], family: Variant | None = None) -> frozenset[str]:
    """Every name an event of `kinds` (or a subclass) arrives by in `family` (None: GA): GA's,
    beta's and the variant's own (what a reader that reads only these may test a frame's peeked
    `type` against before it decodes the frame)."""
    reader = _OPENAI if family is None else _reader_of(family)
    return frozenset(name for name, cls in reader.by_name.items() if issubclass(cls, kinds))


# ---- writing ----------------------------------------------------------------------------------------
_ENCODER = msgspec.json.Encoder()


def encode(command: Event, family: Variant | None = None) -> str:
    """A command (or, for the mock, a server event) as a frame's text, by the name `family`'s (None: GA)
    server writes (`server_names`: the beta and the variants' own)."""
    try:
        frame = _ENCODER.encode(command).decode()
    except UnicodeEncodeError:   # a lone surrogate (a tool's output may hold one): written as its escape
        frame = compact_json(msgspec.to_builtins(command))
    name = wire_type(command)
    written = None if family is None else family.server_names.get(name)
    if written is None or not frame.startswith(head := '{"type":' + json.dumps(name)):
        return frame
    return '{"type":' + json.dumps(written) + frame[len(head):]


def frame_object(event: Event, family: Variant | None = None) -> dict[str, Any]:
    """An event as the decoded frame `encode` would write (what a recording holds, what
    `event_of` reads back): `type` by `family`'s server name, then `event_id`, then the fields.
    Its containers are new: the frame shares nothing with the event."""
    fields = msgspec.to_builtins(event)
    name = fields.pop("type")
    frame = {"type": name if family is None else family.server_names.get(name, name)}
    if "event_id" in fields:
        frame["event_id"] = fields.pop("event_id")
    frame.update(fields)
    return frame


# ---- the relay's commands, in the variant's shapes -------------------------------------------------
def session_update(family: Variant, session: dict[str, Any], event_id: str) -> SessionUpdate:
    """A `session.update` carrying only these session fields, as the variant takes it (GA's
    `type: realtime` where its session is typed)."""
    return SessionUpdate(event_id=event_id, session=family.session_update(session, event_id)["session"])


def response_create(family: Variant, options: dict[str, Any], event_id: str) -> ResponseCreate:
    """A `response.create` with these options and the variant's defaults (beta's `modalities`)."""
    return ResponseCreate(event_id=event_id, response=family.response_create(options, event_id)["response"])


def output_create(family: Variant, event_id: str, previous_item_id: Any, **fields: Any) -> ItemCreate:
    """The `function_call_output` item the relay injects (`fields`: as
    `Variant.function_call_output_item` takes them, Foundry's `name`... where the variant has
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


def client_error(family: Variant, event_id: str, code: str, message: str, **details: Any) -> Error:
    """The `error` event the relay tells a client what it refused with (`details`: as
    `Variant.client_error_event` takes them)."""
    return Error(event_id=event_id, error=family.client_error_event(event_id, code, message, **details)["error"])


# ---- audio passes undecoded -------------------------------------------------------------------------
def audio_peek(family: Variant | None = None, *, upstream: bool = True) -> Callable[[str | bytes], bool]:
    """Whether a frame is audio the relay forwards as it came (from the upstream, or from the
    client with `upstream=False`), told without decoding it: the dialect's pass-through set,
    looked for by `peek.pass_through_test`, the one cheap look of the wire."""
    if family is None:
        return pass_through_test(UPSTREAM_PASSTHROUGH if upstream else CLIENT_PASSTHROUGH)
    return pass_through_test(family.upstream_passthrough if upstream else family.client_passthrough)


WIRE_NAMES = frozenset({*READ_AS_GA, *EVENTS, FUNCTION_CALL, FUNCTION_CALL_OUTPUT, *MCP_ITEM_TYPES})
"""Every name of the family's wire a module outside the dialects should not spell (the events in
either vocabulary and the item types), what tests/test_wire_names.py counts."""
