"""Gemini Live's codec: a frame into one of a closed set of typed messages (`decode` for a frame's
text, `event_of` for a frame already decoded), a message back into a frame (`encode`), and the
cheap look that lets audio pass undecoded (`audio_peek`).

A Gemini frame has no `type`: it is an object keyed by its one message member (`serverContent`,
`toolCall`, ... from the server; `setup`, `clientContent`, `realtimeInput`, `toolResponse` from a
client), beside which the server may put `usageMetadata`. Every member may come in camelCase or
snake_case, and the `google-genai` SDK mixes them (`tool_response` around `functionResponses`). So
a message, and every object inside it the relay reads (a turn's `Content`, a `Part`, a
`FunctionCall`...), is a msgspec Struct whose fields are its members read in either spelling
(`UNSET` when absent); it keeps how each was spelt (`spelt`) and the members it does not name
(`extra`), and `encode` writes it back in the same spellings with nothing lost: a message the
relay rewrites (a relay call hidden from a client, the relay's tools added to a setup) differs
from what came only where the relay changed it. What the relay writes itself is camelCase.

Fields hold what the wire gave: an object the codec types is its Struct when it was an object,
a list of them a list (an entry that was not an object stays as it came), anything else the
value as it came. Readers ask for the types (`isinstance(part.function_call, FunctionCall)`), as
they checked the shapes before. A frame outside the set (not an object, no message member, two
message members, which the service refuses) is an `Unknown` that keeps the frame.

The representation follows the OpenAI family's codec (relay/dialects/openai_codec.py; measured in
scripts/bench_codec.py, docs/benchmarks.md "Typed events"). msgspec's typed decoding knows one
spelling per field, so it reads a message straight from the frame's text only when every member
is camelCase and named (what the service and the SDK write: the Structs are renamed to camelCase
and refuse a member they do not name); any other message is read member by member (`read`), from
the frame's objects. Both give the same message (tests/gemini/test_gemini_codec.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

import msgspec
from msgspec import UNSET, UnsetType

from relay.dialects.gemini import TurnCodec, media_peek, snake_case
from relay.dialects.jsontext import compact_json


_NOTHING = msgspec.Meta(max_length=0)
"""What msgspec may read into a struct's own bookkeeping from a frame: nothing (a frame that holds
a member by its name, `~extra`..., is read slowly, that member kept as any unnamed one)."""


class Obj(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """An object of the wire. Its named members are fields (`UNSET`: absent); `extra` holds the
    members it does not name, and `spelt` the spelling of each field that did not come in
    camelCase (field -> key), both as they came, for `encode`. msgspec reads a struct straight
    from the frame when its members are camelCase and named (`rename`, `forbid_unknown_fields`);
    `read` reads the others."""

    extra: Annotated[dict[str, Any], _NOTHING] = msgspec.field(default={}, name="~extra")
    spelt: Annotated[dict[str, str], _NOTHING] = msgspec.field(default={}, name="~spelt")


# ---- inside the messages --------------------------------------------------------------------------
class Blob(Obj):
    """Inline bytes: the model's speech, the caller's audio, a video frame (base64 `data`)."""

    mime_type: Any = UNSET
    data: Any = UNSET


class FunctionCall(Obj):
    id: Any = UNSET
    name: Any = UNSET
    args: Any = UNSET


class FunctionResponse(Obj):
    """An answer: `response` is `{"output": ...}` or `{"error": ...}`; `will_continue` and
    `scheduling` for NON_BLOCKING functions only."""

    id: Any = UNSET
    name: Any = UNSET
    response: Any = UNSET
    will_continue: Any = UNSET
    scheduling: Any = UNSET


class Part(Obj):
    text: Any = UNSET
    thought: Any = UNSET
    inline_data: Blob | UnsetType = UNSET
    function_call: FunctionCall | UnsetType = UNSET
    function_response: FunctionResponse | UnsetType = UNSET


class Content(Obj):
    """A turn: the model's (`role` "model"), a user's, or a system instruction."""

    role: Any = UNSET
    parts: list[Part] | UnsetType = UNSET


class Transcription(Obj):
    text: Any = UNSET
    finished: Any = UNSET


class FunctionDeclaration(Obj):
    name: Any = UNSET
    description: Any = UNSET
    parameters: Any = UNSET
    parameters_json_schema: Any = UNSET
    behavior: Any = UNSET           # BLOCKING (the default) or NON_BLOCKING


class Tool(Obj):
    function_declarations: list[FunctionDeclaration] | UnsetType = UNSET


class GenerationConfig(Obj):
    response_modalities: Any = UNSET


class GenerateContentRequest(Obj):
    """Not Live: a `generateContent` request (Gemini's REST API), what `relay export --format
    gemini` writes. Its turns are Live's `Content` and `Part` (the SDK's one `types.Content`)."""

    system_instruction: Content | UnsetType = UNSET
    contents: list[Content] | UnsetType = UNSET


# ---- the messages ---------------------------------------------------------------------------------
class Message(Obj):
    """A frame's message: the member the frame is keyed by (`MEMBER`, camelCase). `key` is how
    the frame spelt it (None: camelCase), `beside` the frame's other members (the server's
    `usageMetadata` beside its message), as they came."""

    MEMBER: ClassVar[str]
    key: Annotated[str, _NOTHING] | None = msgspec.field(default=None, name="~key")
    beside: Annotated[dict[str, Any], _NOTHING] = msgspec.field(default={}, name="~beside")


class SetupComplete(Message):
    MEMBER = "setupComplete"
    session_id: Any = UNSET


class ServerContent(Message):
    """The model's turn as it goes (its parts: words, audio, Gemini's second delivery of a call),
    the transcriptions, and the turn's end (`turn_complete`) or interruption."""

    MEMBER = "serverContent"
    model_turn: Content | UnsetType = UNSET
    turn_complete: Any = UNSET
    interrupted: Any = UNSET
    generation_complete: Any = UNSET
    input_transcription: Transcription | UnsetType = UNSET
    output_transcription: Transcription | UnsetType = UNSET


class ToolCall(Message):
    MEMBER = "toolCall"
    function_calls: list[FunctionCall] | UnsetType = UNSET


class ToolCallCancellation(Message):
    """The server withdrew these calls (the user interrupted): no answer may be sent for them."""

    MEMBER = "toolCallCancellation"
    ids: Any = UNSET


class GoAway(Message):
    MEMBER = "goAway"
    time_left: Any = UNSET


class SessionResumptionUpdate(Message):
    MEMBER = "sessionResumptionUpdate"
    new_handle: Any = UNSET
    resumable: Any = UNSET


class UsageMetadata(Message):
    """A frame of nothing but the usage (it usually comes beside another message: `beside`)."""

    MEMBER = "usageMetadata"
    total_token_count: Any = UNSET


class VoiceActivityDetectionSignal(Message):
    MEMBER = "voiceActivityDetectionSignal"
    vad_signal_type: Any = UNSET


class VoiceActivity(Message):
    MEMBER = "voiceActivity"
    voice_activity_type: Any = UNSET


class Setup(Message):
    """The client's first message: the model, its configuration, its tools."""

    MEMBER = "setup"
    model: Any = UNSET
    generation_config: GenerationConfig | UnsetType = UNSET
    system_instruction: Content | UnsetType = UNSET   # (or a plain string: read slowly)
    tools: list[Tool] | UnsetType = UNSET
    input_audio_transcription: Any = UNSET
    output_audio_transcription: Any = UNSET
    session_resumption: Any = UNSET   # {handle?, transparent?}: the server then sends resumption handles


class ClientContent(Message):
    MEMBER = "clientContent"
    turns: list[Content] | UnsetType = UNSET   # (or one: read slowly)
    turn_complete: Any = UNSET


class RealtimeInput(Message):
    """The caller's media (forwarded undecoded: `audio_peek`), or a text or activity signal."""

    MEMBER = "realtimeInput"
    audio: Blob | UnsetType = UNSET
    media_chunks: list[Blob] | UnsetType = UNSET
    video: Blob | UnsetType = UNSET
    text: Any = UNSET
    audio_stream_end: Any = UNSET
    activity_start: Any = UNSET
    activity_end: Any = UNSET


class ToolResponse(Message):
    MEMBER = "toolResponse"
    function_responses: list[FunctionResponse] | UnsetType = UNSET


class Unknown(msgspec.Struct):
    """A frame outside the closed set, kept as it came: the frame's text, or the decoded value a
    recording held. `member`: the message member whose value was not an object, when that is
    what put the frame outside."""

    raw: Any
    member: str | None = None


SERVER_MESSAGES: tuple[type[Message], ...] = (
    SetupComplete, ServerContent, ToolCall, ToolCallCancellation, GoAway, SessionResumptionUpdate,
    UsageMetadata, VoiceActivityDetectionSignal, VoiceActivity)
CLIENT_MESSAGES: tuple[type[Message], ...] = (Setup, ClientContent, RealtimeInput, ToolResponse)
MESSAGES: Mapping[str, type[Message]] = {
    key: cls for cls in (*SERVER_MESSAGES, *CLIENT_MESSAGES) for key in (cls.MEMBER, snake_case(cls.MEMBER))}
"""A message member, in either spelling -> its message: the closed set."""
_BESIDE = UsageMetadata   # the one member that may stand beside another message in a frame

# the typed objects inside each struct: field -> the struct of its value (of each entry for a list)
_INSIDE: dict[type, dict[str, type[Obj]]] = {
    Part: {"inline_data": Blob, "function_call": FunctionCall, "function_response": FunctionResponse},
    Content: {"parts": Part},
    Tool: {"function_declarations": FunctionDeclaration},
    ServerContent: {"model_turn": Content, "input_transcription": Transcription,
                    "output_transcription": Transcription},
    ToolCall: {"function_calls": FunctionCall},
    Setup: {"generation_config": GenerationConfig, "system_instruction": Content, "tools": Tool},
    ClientContent: {"turns": Content},
    GenerateContentRequest: {"system_instruction": Content, "contents": Content},
    RealtimeInput: {"audio": Blob, "media_chunks": Blob, "video": Blob},
    ToolResponse: {"function_responses": FunctionResponse},
}
_OWN = frozenset({"extra", "spelt", "key", "beside"})   # a struct's bookkeeping, not wire members


@dataclass(frozen=True)
class _Shape:
    """How a struct's members are spelt: key (either spelling) -> field; field -> camelCase key."""

    fields: tuple[str, ...]
    by_key: Mapping[str, str]
    camel: Mapping[str, str]
    inside: Mapping[str, type[Obj]]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _shape(cls: type[Obj]) -> _Shape:
    fields = tuple(name for name in cls.__struct_fields__ if name not in _OWN)
    camel = {name: _camel(name) for name in fields}
    by_key = {**{name: name for name in fields}, **{key: name for name, key in camel.items()}}
    return _Shape(fields, by_key, camel, _INSIDE.get(cls, {}))


def _structs(base: type) -> Iterable[type]:
    for cls in base.__subclasses__():
        yield cls
        yield from _structs(cls)


_SHAPES: dict[type, _Shape] = {cls: _shape(cls) for cls in _structs(Obj)}


# ---- reading ----------------------------------------------------------------------------------------
def read(cls: type[Obj], data: Mapping[str, Any], **own: Any) -> Any:
    """`data`, a decoded object, as a `cls`: its members in either spelling (camelCase first when
    both came), the objects inside typed too."""
    shape = _SHAPES[cls]
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    spelt: dict[str, str] = {}
    for key, value in data.items():
        name = shape.by_key.get(key)
        if name is None:
            extra[key] = value
            continue
        if name in values:   # both spellings came: the camelCase one is the field, the other extra
            if key != shape.camel[name]:
                extra[key] = value
                continue
            snake = spelt.pop(name)
            extra[snake] = data[snake]
        elif key != shape.camel[name]:
            spelt[name] = key
        inner = shape.inside.get(name)
        values[name] = value if inner is None else _typed(inner, value)
    return cls(**values, **own, extra=extra, spelt=spelt)


def _typed(cls: type[Obj], value: Any) -> Any:
    if isinstance(value, dict):
        return read(cls, value)
    if isinstance(value, list):
        return [read(cls, entry) if isinstance(entry, dict) else entry for entry in value]
    return value


def _message_member(keys: Iterable[str]) -> tuple[str, type[Message]] | None:
    """The frame's message member and its message: one member of the set (the server's
    `usageMetadata` may stand beside another); None for none, or for two messages in one frame
    (which the service refuses)."""
    found: tuple[str, type[Message]] | None = None
    for key in keys:
        cls = MESSAGES.get(key)
        if cls is None or (cls is _BESIDE and found is not None):
            continue
        if found is not None and found[1] is not _BESIDE:
            return None
        found = (key, cls)
    return found


def event_of(data: Any) -> Message | Unknown:
    """A frame already decoded (a recording's, the engine's) into its message, or an `Unknown`
    holding it: an object with exactly one message member (the server's `usageMetadata` may stand
    beside it), whose value is an object."""
    if not isinstance(data, dict):
        return Unknown(data)
    found = _message_member(data)
    if found is None:
        return Unknown(data)
    member, cls = found
    body = data[member]
    if not isinstance(body, dict):
        return Unknown(data, member)
    try:   # every member camelCase and named: msgspec builds it; else each member is read here
        message = msgspec.convert(body, cls)
    except msgspec.ValidationError:
        message = read(cls, body)
    return _placed(message, member, data)


def one_by_one(data: Any) -> list[tuple[str, Any, Message | Unknown]] | None:
    """A frame of two or more messages (outside the set: the service refuses it), each member as
    if it came alone: (the member, its value, its message); None for any other frame."""
    if not isinstance(data, dict) or sum(key in MESSAGES for key in data) < 2:
        return None
    return [(key, value, event_of({key: value})) for key, value in data.items()]


def messages_of(data: Any, codec: TurnCodec | None = None) -> list[Message]:
    """A decoded frame's messages: its one message; each message of a frame of several (which the
    service refuses, but the engine reads one by one too); none for another frame outside the set.
    `codec`: the wire's (`turn_codec`), when it is another family of the turn-based flow."""
    read, split = (event_of, one_by_one) if codec is None else (codec.event_of, codec.one_by_one)
    message = read(data)
    if not isinstance(message, Unknown):
        return [message]
    return [one for _, _, one in split(data) or () if not isinstance(one, Unknown)]


def turn_codec(dialect: Any) -> TurnCodec | None:
    """The codec a turn-based dialect's frames are read through when it is not Gemini Live's (a
    `GeminiDialect` with a `codec` of its own, as a new family of this flow has); None for
    Gemini Live's, this module."""
    return getattr(dialect, "codec", None)


def entries(value: Any, cls: type[Obj]) -> list[Any]:
    """The entries of a list field that are `cls` objects; none when the member is absent or not
    a list (an entry that was not an object is skipped, as readers skip it)."""
    return [entry for entry in value if isinstance(entry, cls)] if isinstance(value, list) else []


def _placed(message: Message, member: str, frame: Mapping[str, Any]) -> Message:
    """The message as the frame held it: by `member`'s spelling, beside the frame's other members."""
    message.key = None if member == message.MEMBER else member
    message.beside = {key: value for key, value in frame.items() if key != member} if len(frame) > 1 else {}
    return message


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])   # a frame's members, their values still text
_DECODERS = {cls: msgspec.json.Decoder(cls) for cls in (*SERVER_MESSAGES, *CLIENT_MESSAGES)}
_DECODER = msgspec.json.Decoder()


def decode(frame: str | bytes) -> Message | Unknown:
    """A frame's text into its message, or an `Unknown` holding the frame. msgspec reads the
    message straight into its Structs when its members are camelCase and named (the frame's own
    member may be either spelling); a message it cannot read so is read by `read`, as
    `event_of` reads it."""
    try:
        members = _TOP.decode(frame)
        found = _message_member(members)
        if found is None:
            return Unknown(frame)
        member, cls = found
        beside = {key: _DECODER.decode(raw) for key, raw in members.items() if key != member}
        raw = members[member]
        try:
            message = _DECODERS[cls].decode(raw)
        except msgspec.ValidationError:
            body = _DECODER.decode(raw)
            if not isinstance(body, dict):
                return Unknown(frame, member)
            message = read(cls, body)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeEncodeError):
        # not an object; JSON msgspec refuses; or text holding a lone surrogate itself, not its
        # escape (a frame rebuilt from a recording's event), which msgspec cannot take as UTF-8
        return _decode_as_json(frame)
    return _placed(message, member, {member: None, **beside})


def _decode_as_json(frame: str | bytes) -> Message | Unknown:
    """A frame msgspec does not read as an object, read by `json.loads` (which takes a lone
    surrogate's escape and NaN, as the engine's own reading does)."""
    try:
        data = json.loads(frame)
    except (ValueError, RecursionError):
        return Unknown(frame)
    event = event_of(data)
    return Unknown(frame, event.member) if isinstance(event, Unknown) else event


def member_names(cls: type[Obj]) -> frozenset[str]:
    """Every key a `cls` reads as one of its fields, in either spelling."""
    return frozenset(_SHAPES[cls].by_key)


def given(value: Any, default: Any = None) -> Any:
    """A field's value, or `default` when the member was absent."""
    return default if value is UNSET else value


def resumption_handle(setup: Any) -> str | None:
    """The session resumption handle a setup resumes with (`sessionResumption.handle`), if any."""
    config = given(setup.session_resumption) if isinstance(setup, Setup) else None
    handle = config.get("handle") if isinstance(config, dict) else None
    return handle if isinstance(handle, str) and handle else None


def with_resumption_handle(setup: Setup, handle: str) -> Setup:
    """The setup that resumes the session of `handle` (its other resumption options kept)."""
    config = given(setup.session_resumption)
    return msgspec.structs.replace(setup, session_resumption={**(config if isinstance(config, dict) else {}),
                                                              "handle": handle})


def resumption_update(frame: str | bytes) -> SessionResumptionUpdate | None:
    """The frame's `sessionResumptionUpdate`, when it is one (read only when its text names it)."""
    name = SessionResumptionUpdate.MEMBER
    if (name if isinstance(frame, str) else name.encode()) not in frame[:200]:
        return None
    message = decode(frame)
    return message if isinstance(message, SessionResumptionUpdate) else None


def with_new_handle(update: SessionResumptionUpdate, handle: str) -> str:
    """The update's frame with `newHandle` set to `handle` (what stood beside it kept)."""
    return encode(msgspec.structs.replace(update, new_handle=handle))


def empty(obj: Obj) -> bool:
    """Whether an object has no member left."""
    return not obj.extra and all(getattr(obj, name) is UNSET for name in _SHAPES[type(obj)].fields)


# ---- writing ----------------------------------------------------------------------------------------
def plain(obj: Any) -> Any:
    """A struct (or a list of them, or any value) as the plain object the wire carries, each
    member under the name it came by (camelCase for what the relay made)."""
    if isinstance(obj, Obj):
        shape = _SHAPES[type(obj)]
        out: dict[str, Any] = {}
        for name in shape.fields:
            value = getattr(obj, name)
            if value is not UNSET:
                out[obj.spelt.get(name) or shape.camel[name]] = plain(value)
        out.update(obj.extra)
        return out
    if isinstance(obj, list):
        return [plain(entry) for entry in obj]
    return obj


def frame_of(message: Message) -> dict[str, Any]:
    """A message as the frame's object: keyed by its member as it came, what stood beside it too."""
    return {message.key or message.MEMBER: plain(message), **message.beside}


_ENCODER = msgspec.json.Encoder()


def encode(message: Message) -> str:
    """A message as a frame's text: compact, non-ASCII as is (a lone surrogate, which UTF-8
    cannot carry, written as its escape, as `compact_json` writes it)."""
    data = frame_of(message)
    try:
        return _ENCODER.encode(data).decode("utf-8")
    except UnicodeEncodeError:
        return compact_json(data)


def encode_beside(message: Message) -> str | None:
    """The frame without its message: what stood beside it alone (None: nothing did)."""
    return compact_json(message.beside) if message.beside else None


# ---- text held in place (redaction) -------------------------------------------------------------------
_TRANSCRIPTIONS = (("outputTranscription", "output_transcription"), ("inputTranscription", "input_transcription"))


def streamed_text(data: Any) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """The objects of a decoded server frame that hold a piece of streamed text under `text`, each
    with the stream it belongs to (the transcriptions, in either spelling, then the model's
    parts), and whether the frame ends the streams (`turnComplete` or `interrupted`). They are
    the frame's own objects, not copies: a redaction rewrites their `text` in place."""
    content = data.get("serverContent") or data.get("server_content") if isinstance(data, dict) else None
    if not isinstance(content, dict):
        return [], False
    holders: list[tuple[str, dict[str, Any]]] = []
    for spellings in _TRANSCRIPTIONS:
        for key in spellings:
            words = content.get(key)
            if isinstance(words, dict) and isinstance(words.get("text"), str):
                holders.append((spellings[1], words))
    turn = content.get("modelTurn") or content.get("model_turn")
    for part in (turn or {}).get("parts") or () if isinstance(turn, dict) else ():
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            holders.append(("text", part))
    return holders, content.get("turnComplete") is True or content.get("interrupted") is True


def may_interrupt(data: str | bytes) -> bool:
    """Whether a frame's undecoded text may carry `serverContent.interrupted` (one that cannot
    need not be decoded to find it: most frames are the model's words and audio)."""
    return ("interrupted" in data) if isinstance(data, str) else (b"interrupted" in data)


# ---- audio passes undecoded -------------------------------------------------------------------------
def audio_peek(*, upstream: bool = True) -> Callable[[str | bytes], str | None]:
    """Whether a frame is media the relay forwards as it came (from the upstream, or from the
    client with `upstream=False`), told without decoding it: `"audio"` for the model's speech,
    `"media"` for any other media frame, None for a frame to decode (`gemini.media_peek`)."""
    return media_peek("upstream" if upstream else "client")


WIRE_NAMES = frozenset({*MESSAGES, *(key for shape in _SHAPES.values() for key in shape.camel.values()
                                     if not key.islower())})
"""Every name of the wire a module outside the dialects should not spell: the messages in either
spelling and the members of more than one word in their camelCase spelling (their snake_case
spelling, and a one-word `text`, `id` or `name`, are common words of Python code), what
tests/test_wire_names.py counts."""
