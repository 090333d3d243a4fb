"""Google Gemini Live (BidiGenerateContent): a wire unlike OpenAI's in everything.

Frames have no `type`: each carries one top-level key (`setup`, `clientContent`, `toolCall`, ...).
The server accepts camelCase and snake_case field names (the `google-genai` SDK itself sends
`tool_response` around camelCase contents), so readers here accept both spellings and everything
the relay writes is camelCase. The server sends its JSON in binary WebSocket frames.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from relay.dialects.base import Dialect
from relay.tools import Scheduling
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


def response_text(response: Any) -> str:
    """A `FunctionResponse.response` as the text of a `function_call_output` item (what exports
    and scripts read): the output itself when it is text, else JSON, errors as `{"error": ...}`."""
    if isinstance(response, Mapping):
        if set(response) == {"output"} and isinstance(response["output"], str):
            return response["output"]
        if "error" in response:
            return json.dumps({"error": response["error"]}, ensure_ascii=False)
        if "output" in response:
            return json.dumps(response["output"], ensure_ascii=False)
    return json.dumps(response, ensure_ascii=False)


@dataclass(frozen=True)
class GeminiDialect(Dialect):
    """How the relay writes to a Gemini Live upstream. The OpenAI-family helpers it inherits do
    not apply: the Gemini engine uses only the methods defined here."""

    def function_declaration(self, spec: ToolSpec) -> dict[str, Any]:
        """A relay tool as a `FunctionDeclaration`: the JSON Schema goes in `parametersJsonSchema`
        (Gemini's `parameters` takes its own OpenAPI subset), and tools whose answers may come
        while the conversation goes on are `NON_BLOCKING`."""
        declaration: dict[str, Any] = {
            "name": spec.name,
            "description": spec.description,
            "parametersJsonSchema": spec.definition()["parameters"],
        }
        if spec.non_blocking:
            declaration["behavior"] = "NON_BLOCKING"
        return declaration

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

    def tool_response(self, function_responses: list[dict[str, Any]]) -> dict[str, Any]:
        return {"toolResponse": {"functionResponses": function_responses}}

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
    wire="gemini",
    auth_header="x-goog-api-key",
    key_env=("GEMINI_API_KEY",),
    default_url=DEFAULT_URL,
    client_paths=CLIENT_PATHS,
    client_path=DEFAULT_PATH,
    # the google-genai SDK sends its key as `x-goog-api-key`, browsers as `?key=`
    client_key_headers=("api-key", "x-goog-api-key"),
    client_key_params=("key",),
    client_auth_forms="x-goog-api-key, the key query parameter, Authorization: Bearer",
    call_sideband=False,
    echoes_conversation=False,
)
