"""What every provider family's dialect holds, whatever its wire: `Dialect`, the shared base of
`relay.dialects.openai.OpenAIFamily` and `relay.dialects.gemini.GeminiDialect`.

The shared part is how a provider is reached and how its clients reach the relay: its name, the
key and where it goes, its default endpoint, the URLs that imply it, the paths and key forms of
its clients, whether a call has a sideband, and the error frame a client gets. Everything about
the frames themselves (event names, where audio sits, what passes unparsed, how answers are
shaped) belongs to the family's module.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, NamedTuple, Protocol

from relay.dialects.schemas import object_parameters

# Browsers cannot set headers on a WebSocket: OpenAI's SDKs send the key as this subprotocol, and
# the relay accepts its own token that way from the clients of every dialect.
TOKEN_SUBPROTOCOL = "openai-insecure-api-key."


class HeaderLookup(Protocol):
    """Handshake headers (websockets' `Headers`): every value of a name."""

    def get_all(self, key: str) -> list[str]: ...


class Side(StrEnum):
    """Who speaks a piece of audio: the caller (`input`) or the model (`output`)."""

    INPUT = "input"
    OUTPUT = "output"


class ToolFlow(StrEnum):
    """How a wire family's tool work flows, which says what reads its frames: the engine that runs
    it (`relay.engine.new_engine`) and the readers of its recordings (the timeline, the inspector,
    replay and export each register one reader per flow). A family's codec decodes into the typed
    events of its flow, so a new family of a known flow is read by that flow's readers through its
    codec; a family of a new flow registers its own readers (docs/adding-a-provider.md)."""

    ITEMS = "items"
    """Calls are items of a conversation, answered by an output item and a request for a response
    (the OpenAI Realtime family)."""
    TURNS = "turns"
    """A call comes whole, its answer goes up at once, the model goes on (Gemini Live)."""
    DELEGATIONS = "delegations"
    """The model delegates; the application answers with appends or a Responses backend's
    function call outputs (GPT-Live)."""


class AudioSlot(NamedTuple):
    """One base64 audio payload in a decoded frame: `holder[key]`, spoken by `side` (`input`: the
    caller, `output`: the model), in the `mime` type the frame names (None: the session's format)."""

    holder: dict[str, Any]
    key: str
    side: Side
    mime: str | None = None


@dataclass(frozen=True, kw_only=True)
class Dialect(ABC):
    """How one provider is reached, and what its clients send the relay.

    `wire` names the event vocabulary (`ga`, `beta`, `gemini`); `flow` the tool flow of its
    family, by which the family's engine is chosen (`ToolFlow`, `relay.engine.ENGINES`). The upstream's key comes from the
    first variable of `key_env` that is set and goes in `auth_header` (`bearer`: `Authorization:
    Bearer`, else the name of the header that carries it), beside `extra_headers`. `default_url`
    is the endpoint used when none is configured (None: every user has their own, as Azure's
    resources). An upstream URL implies this dialect (`url_match`) when its host is one of
    `upstream_hosts` (a leading dot: any host ending so) and, if `upstream_paths` is set, its
    path ends with one of them; or when its path holds one of `upstream_path_marks`.

    The edges ask the dialect what its clients do: the paths they connect to (`client_paths`,
    `client_path` the one the relay advertises), where they put their key besides
    `Authorization: Bearer` and the token subprotocol (`client_key_headers`,
    `client_key_params`, browsers in a subprotocol that starts with one of
    `client_token_subprotocols`, described for an error message in `client_auth_forms`), and whether a
    server can open a second connection to a live call (`call_sideband`, what `relay attach`
    needs). An export asks whether the upstream echoes every item created, so that its frames
    alone are the conversation (`echoes_conversation`)."""

    flow: ClassVar[ToolFlow]
    """The family's tool flow: which engine runs it and which readers read its recordings."""

    name: str
    wire: str
    key_env: tuple[str, ...]
    auth_header: str = "bearer"
    extra_headers: dict[str, str] = field(default_factory=dict)
    default_url: str | None
    upstream_hosts: tuple[str, ...] = ()
    upstream_paths: tuple[str, ...] = ()
    upstream_path_marks: tuple[str, ...] = ()
    client_paths: frozenset[str]
    client_path: str
    client_key_headers: tuple[str, ...] = ("api-key",)
    client_key_params: tuple[str, ...] = ()
    client_token_subprotocols: tuple[str, ...] = (TOKEN_SUBPROTOCOL,)
    client_auth_forms: str
    call_sideband: bool = False
    echoes_conversation: bool = True

    def for_client(self, headers: HeaderLookup) -> Dialect:
        """The dialect of one client's session, given its handshake headers: this one, unless a
        family offers its clients another vocabulary (see `OpenAIFamily.for_client`)."""
        return self

    def upstream_url(self, url: str, client_path: str | None) -> str:
        """The upstream URL for a client that connected to `client_path`: the configured one."""
        return url

    def key_headers(self, key: str) -> dict[str, str]:
        """The handshake header that carries the provider key."""
        if self.auth_header == "bearer":
            return {"Authorization": f"Bearer {key}"}
        return {self.auth_header: key}

    def url_match(self, host: str, path: str) -> int:
        """How specifically an upstream URL with this (lower-case) host and path implies this
        dialect: 3 a path mark, 2 a host and a path, 1 a host alone, 0 not at all."""
        if any(mark in path for mark in self.upstream_path_marks):
            return 3
        if not self.serves_host(host):
            return 0
        if not self.upstream_paths:
            return 1
        return 2 if path.endswith(self.upstream_paths) else 0

    def tool_parameters(self, schema: dict[str, Any]) -> dict[str, Any]:
        """A tool's parameters (a self-contained JSON Schema object) as this provider's wire takes
        them: a plain object at the top (relay.dialects.schemas); a family whose wire takes less
        narrows more."""
        return object_parameters(schema)

    def serves_host(self, host: str) -> bool:
        """Whether this (lower-case) host is one of the provider's own (`upstream_hosts`)."""
        return any(host.endswith(known) if known.startswith(".") else host == known for known in self.upstream_hosts)

    @abstractmethod
    def client_error_event(self, event_id: str, code: str, message: str, **details: Any) -> dict[str, Any] | None:
        """The frame that tells a client what the relay refused (`event_id` is the relay's;
        `details`: `error_type`, `param`, and `client_event_id`, the client event it answers);
        None for a protocol without one, whose clients learn it from the close reason."""
