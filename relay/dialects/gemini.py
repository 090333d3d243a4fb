"""Google Gemini Live (BidiGenerateContent): a wire unlike OpenAI's in everything, and all its facts.

Frames have no `type`: each carries one top-level key (`setup`, `clientContent`, `toolCall`, ...).
The server accepts camelCase and snake_case field names (the `google-genai` SDK itself sends
`tool_response` around camelCase contents), so readers here accept both spellings and everything
the relay writes is camelCase. The server sends its JSON in binary WebSocket frames.

Here: the paths and messages, the cheap look at a frame that lets audio pass unparsed
(`first_key`, `media_peek`), where audio sits (`audio_slots`), how a relay tool is declared and
answered (`FunctionResponse.response` is `{"output": ...}` or `{"error": ...}`: `response_body`)
and how an answer reads back as the text of a `function_call_output` item (`response_text`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol
from urllib.parse import urlsplit, urlunsplit

from relay.dialects.base import AudioSlot, Dialect, Side, ToolFlow
from relay.dialects.schemas import gemini_parameters
from relay.tools import Scheduling
from relay.tools.render import RenderedOutput, error_in_output
from relay.tools.spec import ToolSpec

GEMINI_HOST = "generativelanguage.googleapis.com"
API_VERSIONS = ("v1beta", "v1alpha", "v1")
_PATH_TEMPLATE = "/ws/google.ai.generativelanguage.{version}.GenerativeService.BidiGenerateContent"
CLIENT_PATHS = frozenset(_PATH_TEMPLATE.format(version=version) for version in API_VERSIONS)
"""The paths the `google-genai` SDK connects to (`{base_url}/ws/...{api_version}...`)."""
DEFAULT_PATH = _PATH_TEMPLATE.format(version="v1beta")
DEFAULT_URL = f"wss://{GEMINI_HOST}{DEFAULT_PATH}"
_VERSIONED_PATH = re.compile(
    r"^(/ws/google\.ai\.generativelanguage\.)(v1beta|v1alpha|v1)(\.GenerativeService\.BidiGenerateContent)$")

SERVER_CONTENT = "serverContent"
"""The server's message that carries the model's turn, transcriptions and turn ends."""
CLIENT_MESSAGE_KEYS = ("setup", "clientContent", "realtimeInput", "toolResponse")
SERVER_MESSAGE_KEYS = (
    "setupComplete", "serverContent", "toolCall", "toolCallCancellation", "goAway",
    "sessionResumptionUpdate", "usageMetadata", "voiceActivityDetectionSignal", "voiceActivity",
)


@functools.lru_cache(maxsize=256)
def snake_case(name: str) -> str:
    """`functionCalls` -> `function_calls`."""
    return re.sub(r"[A-Z]", lambda upper: "_" + upper.group(0).lower(), name)


def key_of(obj: Any, name: str) -> str | None:
    """The spelling of the camelCase field `name` that `obj` uses (camelCase first), or None."""
    if not isinstance(obj, Mapping):
        return None
    if name in obj:
        return name
    snake = snake_case(name)
    return snake if snake in obj else None


def field(obj: Any, name: str, default: Any = None) -> Any:
    """The value of the camelCase field `name` in either spelling, or `default`."""
    key = key_of(obj, name)
    return default if key is None else obj[key]


def is_gemini_message(event: Any) -> bool:
    """Whether a decoded frame is a Gemini Live message (no `type`, a known top-level key)."""
    if not isinstance(event, Mapping) or "type" in event:
        return False
    return any(key_of(event, key) is not None for key in (*CLIENT_MESSAGE_KEYS, *SERVER_MESSAGE_KEYS))


# ---- the cheap look: media frames pass unparsed ---------------------------------------------------
_FIRST_KEY = re.compile(r'\s*\{\s*"([A-Za-z_]+)"\s*:')
_FIRST_KEY_BYTES = re.compile(rb'\s*\{\s*"([A-Za-z_]+)"\s*:')
_MEDIA_KEYS = {"upstream": frozenset({"serverContent", "server_content"}),
               "client": frozenset({"realtimeInput", "realtime_input"})}
# A media frame holding one of these is parsed: the words, turn ends, calls (a `functionCall`
# part, Gemini's second delivery of a `toolCall`'s call) and messages the engine follows
# (`ranscription"` is either spelling of both transcriptions: one scan, not two). Base64 never
# contains a `"`, so audio data cannot fake a quoted key; a key spelled with `\u` escapes would be
# missed, which costs only its words in the conversation record (or, for a relay call's part, the
# hiding of a part its toolCall delivers too).
_STATE_MARKERS = {
    "upstream": ('"text"', 'ranscription"', '"turnComplete"', '"turn_complete"',
                 '"interrupted"', '"toolCall', '"tool_call', '"setupComplete"', '"setup_complete"',
                 '"function'),
    "client": ('"text"', '"toolResponse"', '"tool_response"', '"setup"', '"clientContent"',
               '"client_content"'),
}
_STATE_MARKER_BYTES = {side: tuple(m.encode() for m in markers) for side, markers in _STATE_MARKERS.items()}
_AUDIO_BLOB_MARKERS: dict[type, tuple[Any, ...]] = {str: ('"inlineData"', '"inline_data"'),
                                                    bytes: (b'"inlineData"', b'"inline_data"')}


def first_key(frame: str | bytes) -> str | None:
    """The first top-level key of a JSON object frame, read without parsing it (None: unsure)."""
    match = (_FIRST_KEY if isinstance(frame, str) else _FIRST_KEY_BYTES).match(frame)
    if match is None:
        return None
    key = match.group(1)
    return key if isinstance(key, str) else key.decode("ascii")


def media_peek(side: Literal["upstream", "client"]) -> Callable[[str | bytes], Literal["audio", "media"] | None]:
    """Whether a frame from `side` may be forwarded unparsed: an audio or video carrier
    (`serverContent` / `realtimeInput`) holding none of the state markers. `"audio"` when it
    carries an inline blob (the model's speech, in a `serverContent`), `"media"` for any other
    such frame, None when it must be parsed. The side's keys and markers are bound once, so the
    look costs one call per frame."""
    media_keys = _MEDIA_KEYS[side]
    markers = {str: _STATE_MARKERS[side], bytes: _STATE_MARKER_BYTES[side]}
    blobs = _AUDIO_BLOB_MARKERS

    def peek(frame: str | bytes) -> Literal["audio", "media"] | None:
        if first_key(frame) not in media_keys:
            return None
        kind = type(frame)
        if any(marker in frame for marker in markers[kind]):  # type: ignore[operator]
            return None
        return "audio" if any(marker in frame for marker in blobs[kind]) else "media"  # type: ignore[operator]

    return peek


_PEEKS = {side: media_peek(side) for side in ("upstream", "client")}   # type: ignore[arg-type]


def media_frame(frame: str | bytes, side: Literal["upstream", "client"]) -> Literal["audio", "media"] | None:
    """`media_peek(side)(frame)`: whether a frame from `side` may be forwarded unparsed."""
    return _PEEKS[side](frame)


# ---- where audio sits ----------------------------------------------------------------------------
AUDIO_MARKERS: tuple[bytes, ...] = (b"realtimeInput", b"realtime_input", b"inlineData", b"inline_data")
"""Substrings one of which every audio-bearing message contains."""


def is_audio_blob(blob: Any) -> bool:
    """Whether a `Blob` holds audio: its mime type says so, or it names none."""
    if not isinstance(blob, dict):
        return False
    mime = field(blob, "mimeType")
    return not isinstance(mime, str) or mime.startswith("audio/")


def inline_blob(part: Any) -> Any:
    """The inline `Blob` of a content `Part` (how the model's speech comes), or None."""
    return field(part, "inlineData")


def audio_slots(message: dict[str, Any]) -> list[AudioSlot]:
    """Every base64 audio payload of a decoded message: the caller's in `realtimeInput` (its
    `audio` blob, and the audio ones among its `mediaChunks`), the model's in the inline blobs of
    `serverContent.modelTurn.parts`."""
    slots: list[AudioSlot] = []
    realtime = field(message, "realtimeInput")
    if isinstance(realtime, dict):
        audio = realtime.get("audio")
        if isinstance(audio, dict):
            slots.append(AudioSlot(audio, "data", Side.INPUT, field(audio, "mimeType")))
        chunks = field(realtime, "mediaChunks")
        for chunk in chunks if isinstance(chunks, list) else ():
            if is_audio_blob(chunk):
                slots.append(AudioSlot(chunk, "data", Side.INPUT, field(chunk, "mimeType")))
    parts = field(field(field(message, "serverContent"), "modelTurn"), "parts")
    for part in parts if isinstance(parts, list) else ():
        blob = inline_blob(part)
        if is_audio_blob(blob):
            slots.append(AudioSlot(blob, "data", Side.OUTPUT, field(blob, "mimeType")))
    return slots


def only_media(message: dict[str, Any]) -> bool:
    """Whether a message carries nothing but media: a `realtimeInput` of audio or media chunks
    only, or a `serverContent` whose model turn is inline blobs only."""
    realtime = field(message, "realtimeInput")
    if isinstance(realtime, dict):
        return set(realtime) <= {"audio", "mediaChunks", "media_chunks"}
    content = field(message, "serverContent")
    if not isinstance(content, dict) or not set(content) <= {"modelTurn", "model_turn"}:
        return False
    parts = field(field(content, "modelTurn"), "parts") or []
    return all(isinstance(part, dict) and inline_blob(part) is not None for part in parts)


# ---- answers -------------------------------------------------------------------------------------
def response_body(rendered: RenderedOutput) -> dict[str, Any]:
    """A relay tool's output as `FunctionResponse.response`: `{"output": value}` (the JSON value
    the tool returned, or its text) or `{"error": ...}` (the error the output carries)."""
    if rendered.is_error:
        found, error = error_in_output(rendered.output)
        return {"error": error if found else rendered.output}
    if rendered.verbatim:
        return {"output": rendered.output}
    try:
        return {"output": json.loads(rendered.output)}
    except ValueError:   # cut by the output limit: no longer JSON
        return {"output": rendered.output}


def is_error_response(response: Any) -> bool:
    """Whether a `FunctionResponse.response` reports an error."""
    return isinstance(response, Mapping) and "error" in response


def response_text(response: Any) -> str:
    """A `FunctionResponse.response` as the text of a `function_call_output` item (what exports
    and scripts read): the output itself when it is text, else JSON, errors as `{"error": ...}`.
    The JSON is compact, as the relay writes a tool's output on every other wire, so that the
    same output reads as the same text whatever the dialect."""
    if isinstance(response, Mapping):
        if set(response) == {"output"} and isinstance(response["output"], str):
            return response["output"]
        if is_error_response(response):
            return _compact({"error": response["error"]})
        if "output" in response:
            return _compact(response["output"])
    return _compact(response)


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# ---- the dialect ---------------------------------------------------------------------------------
class TurnCodec(Protocol):
    """What the turn-based engine asks of a wire family's codec: its frames as the typed messages
    of `relay.dialects.gemini_codec` and back (`encode_beside`: what stood beside a message the
    engine drops; `one_by_one` and `frame_of`: a frame of several messages taken apart and put
    together), and the audio peek (`gemini_codec` is one)."""

    def decode(self, frame: str | bytes) -> Any: ...

    def encode(self, message: Any) -> str: ...

    def encode_beside(self, message: Any) -> str | None: ...

    def audio_peek(self, *, upstream: bool = True) -> Callable[[str | bytes], str | None]: ...

    def event_of(self, data: Any) -> Any:
        """An already decoded frame (a recording's) as its typed message, or an `Unknown`."""

    def one_by_one(self, data: Any) -> list[tuple[str, Any, Any]] | None:
        """A decoded frame of several messages, each as if it came alone (None: not such a frame)."""

    def frame_of(self, message: Any) -> dict[str, Any]:
        """A message as the frame's object."""


@dataclass(frozen=True, kw_only=True)
class GeminiDialect(Dialect):
    """How the relay reaches a Gemini Live upstream and writes to it: its tools as function
    declarations, its answers as `FunctionResponse`s (which the codec, relay/dialects/gemini_codec.py,
    sends in a `toolResponse`)."""

    flow: ClassVar[ToolFlow] = ToolFlow.TURNS
    wire: Literal["gemini"] = "gemini"

    codec: TurnCodec | None = None
    """The codec the turn-based engine (relay/engine/immediate.py) reads and writes this wire
    through; None: Gemini Live's own, `relay.dialects.gemini_codec`. A wire family of the same
    tool flow (a call comes whole, its answer goes up at once) gives its own, which decodes into
    the same typed messages (docs/adding-a-provider.md)."""

    def function_declaration(self, spec: ToolSpec) -> dict[str, Any]:
        """A relay tool as a `FunctionDeclaration`: the JSON Schema, narrowed to what Gemini takes
        (`tool_parameters`), goes in `parametersJsonSchema`, and tools whose answers may come while
        the conversation goes on are `NON_BLOCKING`."""
        declaration: dict[str, Any] = {
            "name": spec.name,
            "description": spec.description,
            "parametersJsonSchema": self.tool_parameters(spec.definition()["parameters"]),
        }
        if spec.non_blocking:
            declaration["behavior"] = "NON_BLOCKING"
        return declaration

    def tool_parameters(self, schema: dict[str, Any]) -> dict[str, Any]:
        """Gemini refuses the whole setup over one keyword it does not know: only the OpenAPI
        subset its `Schema` has (relay.dialects.schemas.gemini_parameters)."""
        return gemini_parameters(schema)

    def function_response(
        self,
        *,
        call_id: str,
        name: str,
        response: dict[str, Any],
        scheduling: Scheduling | None = None,
        will_continue: bool | None = None,
    ) -> dict[str, Any]:
        """One `FunctionResponse`; `scheduling` and `willContinue` only when given (both mean
        something only for NON_BLOCKING functions)."""
        answer: dict[str, Any] = {"id": call_id, "name": name, "response": response}
        if scheduling is not None:
            answer["scheduling"] = scheduling.value.upper()
        if will_continue is not None:
            answer["willContinue"] = will_continue
        return answer

    def client_error_event(self, event_id: str, code: str, message: str, **details: Any) -> None:
        """None: Gemini Live has no error message; the close reason carries it."""
        return None

    def upstream_url(self, url: str, client_path: str | None) -> str:
        """`url` with the API version of the client's path (`v1alpha` features need a v1alpha
        upstream), when both follow the BidiGenerateContent pattern; else `url` unchanged."""
        client = _VERSIONED_PATH.match(client_path or "")
        parts = urlsplit(url)
        upstream = _VERSIONED_PATH.match(parts.path)
        if client is None or upstream is None:
            return url
        path = upstream.group(1) + client.group(2) + upstream.group(3)
        return urlunsplit(parts._replace(path=path))


GEMINI = GeminiDialect(
    name="gemini",
    auth_header="x-goog-api-key",
    key_env=("GEMINI_API_KEY",),
    default_url=DEFAULT_URL,
    upstream_hosts=(GEMINI_HOST,),
    client_paths=CLIENT_PATHS,
    client_path=DEFAULT_PATH,
    # the google-genai SDK sends its key as `x-goog-api-key`, browsers as `?key=`
    client_key_headers=("api-key", "x-goog-api-key"),
    client_key_params=("key",),
    client_auth_forms="x-goog-api-key, the key query parameter, Authorization: Bearer",
    call_sideband=False,
    echoes_conversation=False,
)
