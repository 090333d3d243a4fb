"""The dialect contract shared by the OpenAI-family adapters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# Beta (and Azure preview) event names and their GA equivalents. GA servers still type
# `conversation.item.created`; it means the same as `added`.
BETA_TO_GA: dict[str, str] = {
    "conversation.item.created": "conversation.item.added",
    "response.text.delta": "response.output_text.delta",
    "response.text.done": "response.output_text.done",
    "response.audio.delta": "response.output_audio.delta",
    "response.audio.done": "response.output_audio.done",
    "response.audio_transcript.delta": "response.output_audio_transcript.delta",
    "response.audio_transcript.done": "response.output_audio_transcript.done",
    "output_audio_buffer.audio_started": "output_audio_buffer.started",
    "output_audio_buffer.audio_stopped": "output_audio_buffer.stopped",
    "output_audio_buffer.audio_cleared": "output_audio_buffer.cleared",
}


# The client events of the OpenAI Realtime API (GA; beta uses the same names), in the order of
# the API reference.
CLIENT_EVENT_TYPES: tuple[str, ...] = (
    "session.update",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "output_audio_buffer.clear",
    "conversation.item.create",
    "conversation.item.retrieve",
    "conversation.item.truncate",
    "conversation.item.delete",
    "response.create",
    "response.cancel",
)


# Where OpenAI-family clients connect: OpenAI's path, Azure's GA and preview paths.
REALTIME_PATHS = frozenset({"/v1/realtime", "/openai/v1/realtime", "/openai/realtime"})
# Browsers cannot set headers on a WebSocket: OpenAI's SDKs send the key as this subprotocol.
TOKEN_SUBPROTOCOL = "openai-insecure-api-key."


class HeaderLookup(Protocol):
    """Handshake headers (websockets' `Headers`): every value of a name."""

    def get_all(self, key: str) -> list[str]: ...


def canonical_type(event_type: str) -> str:
    """The GA name of an event type; names that are already GA (or unknown) map to themselves."""
    return BETA_TO_GA.get(event_type, event_type)


@dataclass(frozen=True)
class Dialect:
    """How one upstream family speaks.

    `wire` is the event vocabulary the upstream expects from the relay; incoming events are
    always accepted in both OpenAI vocabularies (`gemini` is another protocol altogether: see
    `relay.dialects.gemini`). `foundry_fields` adds Foundry's item extensions
    (`name`, `response_id`, `created_at` on `function_call_output`).

    The edges ask the dialect what its clients do: the paths they connect to (`client_paths`,
    `client_path` the one the relay advertises), where they put their key besides
    `Authorization: Bearer` and the token subprotocol (`client_key_headers`,
    `client_key_params`, described for an error message in `client_auth_forms`), which dialect
    a client asking for the beta protocol gets (`beta`), and whether a server can open a second
    connection to a live call (`call_sideband`, what `relay attach` needs). An export asks
    whether the upstream echoes every item created, so that its frames alone are the
    conversation (`echoes_conversation`)."""

    name: str
    wire: Literal["ga", "beta", "gemini"]
    foundry_fields: bool = False
    auth_header: Literal["bearer", "api-key", "x-goog-api-key"] = "bearer"
    key_env: tuple[str, ...] = ("OPENAI_API_KEY",)
    default_url: str = "wss://api.openai.com/v1/realtime"
    extra_headers: dict[str, str] = field(default_factory=dict)
    client_paths: frozenset[str] = REALTIME_PATHS
    client_path: str = "/v1/realtime"
    client_key_headers: tuple[str, ...] = ("api-key",)
    client_key_params: tuple[str, ...] = ()
    client_auth_forms: str = f"Authorization: Bearer, api-key, or the {TOKEN_SUBPROTOCOL}<token> subprotocol"
    beta: Dialect | None = None
    call_sideband: bool = True
    echoes_conversation: bool = True

    def for_client(self, headers: HeaderLookup) -> Dialect:
        """The dialect of one client's session: a client asking for the beta protocol
        (`OpenAI-Beta: realtime=v1`) of an upstream that speaks both gets the beta wire."""
        if self.beta is not None and any("realtime=v1" in value for value in headers.get_all("OpenAI-Beta")):
            return self.beta
        return self


    def upstream_url(self, url: str, client_path: str | None) -> str:
        """The upstream URL for a client that connected to `client_path`: the configured one."""
        return url

    def client_error_event(
        self,
        event_id: str,
        code: str,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        client_event_id: Any = None,
    ) -> dict[str, Any] | None:
        """The realtime `error` event that tells a client what went wrong (`event_id` is the
        relay's, `client_event_id` the client event it answers, if any); None for a protocol
        without one, whose clients learn it from the close reason."""
        return {
            "type": "error",
            "event_id": event_id,
            "error": {"type": error_type, "code": code, "message": message, "param": param,
                      "event_id": client_event_id},
        }

    def function_call_output_item(
        self,
        *,
        item_id: str,
        call_id: str,
        output: str,
        status: str,
        name: str,
        response_id: str | None,
        created_at: int,
    ) -> dict[str, Any]:
        """The `function_call_output` item the relay injects, with exactly this wire's fields."""
        item: dict[str, Any] = {
            "type": "function_call_output",
            "id": item_id,
            "call_id": call_id,
            "output": output,
            "status": status,
        }
        if self.foundry_fields:
            item["name"] = name
            if response_id is not None:
                item["response_id"] = response_id
            item["created_at"] = created_at
        return item

    def session_update(self, session_fields: dict[str, Any], event_id: str) -> dict[str, Any]:
        """A `session.update` carrying only `session_fields` (GA requires `type: realtime`)."""
        session = dict(session_fields)
        if self.wire == "ga":
            session.setdefault("type", "realtime")
        return {"type": "session.update", "event_id": event_id, "session": session}

    def response_create(self, response: dict[str, Any], event_id: str) -> dict[str, Any]:
        """A `response.create` with these options, renamed for the wire where names differ."""
        options = dict(response)
        if self.wire == "beta" and "output_modalities" in options:
            options["modalities"] = options.pop("output_modalities")
        return {"type": "response.create", "event_id": event_id, "response": options}
