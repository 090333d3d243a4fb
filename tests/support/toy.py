"""A toy provider's wire family, added as docs/adding-a-provider.md says a new family is: this one
module (the provider's dialect and its codec; in a real change `relay/dialects/toy.py`) and its
registration (`DIALECTS`, done by tests/test_adding_a_provider.py with monkeypatch).

The wire is invented and tiny: JSON text frames, each an object tagged by `t`.

    client -> provider   {"t":"hello","tools":[{"name":..,"description":..,"parameters":{..}}]}
                         {"t":"mic","pcm":"<base64>"}                  the caller's audio
                         {"t":"result","id":..,"output":{..}}          a tool's answer
    provider -> client   {"t":"call","id":..,"fn":..,"args":{..}}      the model calls a tool
                         {"t":"voice","pcm":"<base64>"}                the model's speech
                         {"t":"done"}                                  the model's turn ended

A call arrives whole and its answer goes up at once (the model goes on by itself): the tool flow
of the turn-based family, Gemini Live's. So the codec decodes into that family's typed messages
(`relay.dialects.gemini_codec`: `Setup`, `ToolCall`, `ToolResponse`, `ServerContent`,
`RealtimeInput`) and the dialect is a `GeminiDialect` whose `codec` is this module's `CODEC`: the
turn-based engine (`relay/engine/immediate.py`) reads and writes the toy's frames through it. Audio
frames are told by `audio_peek` from their first bytes and are never decoded."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Literal

from relay.dialects.gemini import GeminiDialect
from relay.dialects.gemini_codec import (
    Blob,
    Content,
    FunctionCall,
    FunctionDeclaration,
    FunctionResponse,
    Message,
    Part,
    RealtimeInput,
    ServerContent,
    Setup,
    Tool,
    ToolCall,
    ToolResponse,
    Unknown,
    given,
    plain,
)
from relay.tools.spec import ToolSpec

PCM = "audio/pcm;rate=16000"
_VOICE = ('{"t":"voice"', b'{"t":"voice"')
_MIC = ('{"t":"mic"', b'{"t":"mic"')


# ---- reading --------------------------------------------------------------------------------------
def _hello(frame: dict[str, Any]) -> Message:
    declarations = [FunctionDeclaration(name=d.get("name"), description=d.get("description"),
                                        parameters_json_schema=d.get("parameters"))
                    for d in frame.get("tools") or [] if isinstance(d, dict)]
    return Setup(tools=[Tool(function_declarations=declarations)])


def _call(frame: dict[str, Any]) -> Message:
    return ToolCall(function_calls=[FunctionCall(id=frame.get("id"), name=frame.get("fn"), args=frame.get("args"))])


def _result(frame: dict[str, Any]) -> Message:
    return ToolResponse(function_responses=[FunctionResponse(id=frame.get("id"), response=frame.get("output"))])


def _voice(frame: dict[str, Any]) -> Message:
    blob = Blob(mime_type=PCM, data=frame.get("pcm"))
    return ServerContent(model_turn=Content(role="model", parts=[Part(inline_data=blob)]))


_READERS: dict[str, Callable[[dict[str, Any]], Message]] = {
    "hello": _hello,
    "call": _call,
    "result": _result,
    "voice": _voice,
    "mic": lambda frame: RealtimeInput(audio=Blob(mime_type=PCM, data=frame.get("pcm"))),
    "done": lambda frame: ServerContent(turn_complete=True),
}


def event_of(data: Any) -> Message | Unknown:
    """A decoded frame as a typed message; `Unknown` (keeping it) for anything outside the set."""
    reader = _READERS.get(data.get("t")) if isinstance(data, dict) else None   # type: ignore[arg-type]
    return Unknown(data) if reader is None else reader(data)


def decode(frame: str | bytes) -> Message | Unknown:
    """A frame's typed message; `Unknown` keeping the frame's text when it is not a toy frame."""
    try:
        data = json.loads(frame)
    except ValueError:
        return Unknown(frame)
    message = event_of(data)
    return Unknown(frame) if isinstance(message, Unknown) else message


# ---- writing --------------------------------------------------------------------------------------
def _declaration(declaration: Any) -> dict[str, Any]:
    """A function declaration (typed, or as `ToyDialect.function_declaration` made it) on the
    toy's wire."""
    data = plain(declaration)
    return {"name": data.get("name"), "description": data.get("description"), "parameters": data.get("parameters", data.get("parametersJsonSchema"))}


def encode(message: Message) -> str:
    """A typed message the engine writes (a client's hello with the relay's tools added, the
    relay's answer, a call or answer it narrowed) as a toy frame."""
    if isinstance(message, Setup):
        tools = [d for tool in given(message.tools, []) for d in given(tool.function_declarations, [])]
        frame: dict[str, Any] = {"t": "hello", "tools": [_declaration(d) for d in tools]}
    elif isinstance(message, ToolResponse):
        [answer] = [plain(a) for a in given(message.function_responses, [])]
        frame = {"t": "result", "id": answer.get("id"), "output": answer.get("response")}
    elif isinstance(message, ToolCall):
        [call] = given(message.function_calls, [])
        frame = {"t": "call", "id": given(call.id), "fn": given(call.name), "args": given(call.args)}
    else:
        raise TypeError(f"the toy wire has no frame for {type(message).__name__}")
    return json.dumps(frame, separators=(",", ":"))


def encode_beside(message: Message) -> str | None:
    """None: a toy frame holds one message and nothing beside it."""
    return None


def one_by_one(data: Any) -> None:
    """None: a toy frame is one message."""
    return None


def frame_of(message: Message) -> dict[str, Any]:
    """A typed message as the toy frame's object."""
    return json.loads(encode(message))   # type: ignore[no-any-return]


def audio_peek(*, upstream: bool = True) -> Callable[[str | bytes], Literal["audio", "media"] | None]:
    """Whether a frame is audio the relay forwards undecoded: the model's `voice` (`"audio"`), the
    caller's `mic` (`"media"`), told by the frame's first bytes; None for a frame to decode."""
    prefix, kind = (_VOICE, "audio") if upstream else (_MIC, "media")

    def peek(frame: str | bytes) -> Literal["audio", "media"] | None:
        return kind if frame.startswith(prefix[type(frame) is bytes]) else None   # type: ignore[arg-type]

    return peek


class Codec:
    """The toy wire's codec as the turn-based engine reads it through `dialect.codec`."""

    decode = staticmethod(decode)
    encode = staticmethod(encode)
    encode_beside = staticmethod(encode_beside)
    audio_peek = staticmethod(audio_peek)
    one_by_one = staticmethod(one_by_one)
    frame_of = staticmethod(frame_of)
    event_of = staticmethod(event_of)


CODEC = Codec()


# ---- the provider ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, kw_only=True)
class ToyDialect(GeminiDialect):
    """The toy provider: reached as any provider is (the base's fields), its frames read and
    written by its `codec`, its tools declared in its own shape."""

    def function_declaration(self, spec: ToolSpec) -> dict[str, Any]:
        """A relay tool on the toy's wire: its JSON Schema whole."""
        return {"name": spec.name, "description": spec.description, "parameters": spec.definition()["parameters"]}


TOYWIRE = ToyDialect(
    name="toywire",
    key_env=("TOY_API_KEY",),
    auth_header="x-toy-key",
    default_url="wss://voice.toy.example/v1/talk",
    upstream_hosts=("voice.toy.example",),
    client_paths=frozenset({"/v1/talk"}),
    client_path="/v1/talk",
    client_key_headers=("x-toy-key",),
    client_auth_forms="x-toy-key, or the relay token subprotocol",
    call_sideband=False,
    echoes_conversation=False,
    codec=CODEC,
)
