"""The OpenAI Realtime family: every wire fact of OpenAI GA (the engine's own vocabulary) and beta
(`OpenAI-Beta: realtime=v1`), and the class whose instances are the family's variants (OpenAI
here, Azure and Foundry in `relay.dialects.foundry`).

The facts: the event names of both vocabularies (`EVENT_NAMES`, the one table the engine reads
and the mock writes by), the client events, where audio sits in an event (`AUDIO_EVENTS`,
`audio_slots`), the frames forwarded without being parsed, and the shapes of what the relay
writes (the `function_call_output` item, `session.update`, `response.create`, the client's
`error` event). A variant differs in data: its names and endpoints, its key, Foundry's item
fields, events of its own that pass through or that it names its own way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Literal, NamedTuple

from relay.dialects.base import TOKEN_SUBPROTOCOL, AudioSlot, Dialect, HeaderLookup, Side, ToolFlow
from relay.tools.spec import ToolSpec

from relay.dialects import openai_codec
from relay.dialects.items import ItemCodec
from relay.dialects.openai_names import (   # named once there, read here and by the codec
    BETA_NAMES,
    CLIENT_PASSTHROUGH,
    EVENT_NAMES,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MCP_APPROVAL_REQUEST,
    MCP_APPROVAL_RESPONSE,
    MCP_CALL,
    MCP_ITEM_TYPES,
    MCP_LIST_TOOLS,
    MESSAGE,
    NOT_IN_BETA,
    READ_AS_GA,
    UPSTREAM_PASSTHROUGH,
)

# ---- event names, item types and what passes unparsed: `relay.dialects.openai_names` ------------

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


# ---- audio ---------------------------------------------------------------------------------------
class AudioField(NamedTuple):
    """Where an audio event carries its base64 audio: the field, and who speaks (`input`: the
    caller, `output`: the model)."""

    key: str
    side: Side


AUDIO_EVENTS: Mapping[str, AudioField] = MappingProxyType({
    "input_audio_buffer.append": AudioField("audio", Side.INPUT),
    "response.output_audio.delta": AudioField("delta", Side.OUTPUT),
    "response.audio.delta": AudioField("delta", Side.OUTPUT),               # the beta name
    "session.input_audio_buffer.append": AudioField("audio", Side.INPUT),   # translation sessions
    "session.output_audio.delta": AudioField("delta", Side.OUTPUT),
})
"""Event type (as it arrives, either vocabulary) -> where the audio is, for the events whose
whole point is audio. Besides these, items carry audio in their content parts (`audio`)."""
_ITEM_EVENTS = "conversation.item."
AUDIO_MARKERS: tuple[bytes, ...] = (*(name.encode() for name in AUDIO_EVENTS), _ITEM_EVENTS.encode())
"""Substrings one of which every audio-bearing event contains: a frame without any holds no audio."""

def audio_slots(event: dict[str, Any]) -> list[AudioSlot]:
    """Every base64 audio payload of a decoded event, found from its type alone: the event is
    never walked as a whole."""
    event_type = event.get("type")
    where = AUDIO_EVENTS.get(event_type) if isinstance(event_type, str) else None
    if where is not None:
        return [AudioSlot(event, where.key, where.side)]
    if not isinstance(event_type, str) or not event_type.startswith(_ITEM_EVENTS):
        return []
    item = event.get("item")
    content = item.get("content") if isinstance(item, dict) else None
    if not isinstance(content, list):
        return []
    side = Side.INPUT if item.get("role") == "user" else Side.OUTPUT
    return [AudioSlot(part, "audio", side) for part in content if isinstance(part, dict) and "audio" in part]


# ---- the family ----------------------------------------------------------------------------------
# Where OpenAI-family clients connect: OpenAI's path, Azure's GA and preview paths.
REALTIME_PATHS = frozenset({"/v1/realtime", "/openai/v1/realtime", "/openai/realtime"})


@dataclass(frozen=True, kw_only=True)
class OpenAIFamily(Dialect):
    """One variant of the OpenAI Realtime wire (OpenAI GA or beta, Azure GA or preview, Foundry).

    `wire` is the vocabulary the variant's server writes (`ga` or `beta`); what arrives is read in
    both. `foundry_fields` adds Foundry's item extensions (`name`, `response_id`, `created_at` on
    `function_call_output`). `beta` is the variant a client asking for the beta protocol gets.
    A variant with events of its own lists them: `renamed_events` (its name -> the GA name it
    stands for) and the pass-through sets (`upstream_passthrough`, `client_passthrough`: event
    types forwarded as the same text, never parsed; they default to the audio events).

    How its server opens a session and takes the relay's own frames: `opening_events`, the events
    a new session opens with, all of which the relay waits for before its own `session.update`
    (xAI ignores an update before `session.created`, and its `conversation.created` may come
    first); `typed_session`, whether a GA `session.update` says `type: realtime` (xAI's flat
    session has no type); `response_defaults`, options every `response.create` of the relay's
    carries (Voice Live's `cancel_previous: false`: its create would otherwise cancel the response
    in progress)."""

    flow: ClassVar[ToolFlow] = ToolFlow.ITEMS
    wire: Literal["ga", "beta"] = "ga"
    key_env: tuple[str, ...] = ("OPENAI_API_KEY",)
    default_url: str | None = "wss://api.openai.com/v1/realtime"
    client_paths: frozenset[str] = REALTIME_PATHS
    client_path: str = "/v1/realtime"
    client_auth_forms: str = f"Authorization: Bearer, api-key, or the {TOKEN_SUBPROTOCOL}<token> subprotocol"
    call_sideband: bool = True
    foundry_fields: bool = False
    beta: OpenAIFamily | None = None
    renamed_events: Mapping[str, str] = field(default_factory=dict)
    upstream_passthrough: frozenset[str] = UPSTREAM_PASSTHROUGH
    client_passthrough: frozenset[str] = CLIENT_PASSTHROUGH
    opening_events: tuple[str, ...] = ("session.created",)
    typed_session: bool = True
    response_defaults: Mapping[str, Any] = field(default_factory=dict)
    session_minutes: int = 60
    """The session's maximum duration: then the server says `SESSION_EXPIRED` and closes it."""
    codec: ItemCodec = field(default=openai_codec, repr=False, compare=False)   # type: ignore[assignment]
    """The family's codec: what the item-based engine reads and writes this wire through."""
    ga_names: Mapping[str, str] = field(init=False, repr=False, compare=False)
    """Every name an event of this variant may arrive by -> its GA name (the engine's lookup)."""
    server_names: Mapping[str, str] = field(init=False, repr=False, compare=False)
    """GA name -> the name this variant's server writes, where they differ (the mock's)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "ga_names", MappingProxyType({**READ_AS_GA, **self.renamed_events}))
        written = dict(BETA_NAMES) if self.wire == "beta" else {}
        written.update({ga: own for own, ga in self.renamed_events.items()})
        object.__setattr__(self, "server_names", MappingProxyType(written))

    def canonical_type(self, event_type: str) -> str:
        """The GA name of an event type; names that are already GA (or unknown) map to themselves."""
        return self.ga_names.get(event_type, event_type)

    @property
    def updates_before_opening(self) -> bool:
        """Whether the server takes a `session.update` sent before its opening is over: OpenAI's
        does; a server that opens with more than `session.created` (xAI) is waited for."""
        return self.opening_events == ("session.created",)

    def for_client(self, headers: HeaderLookup) -> Dialect:
        """A client asking for the beta protocol (`OpenAI-Beta: realtime=v1`) of an upstream that
        speaks both gets the beta wire."""
        if self.beta is not None and any("realtime=v1" in value for value in headers.get_all("OpenAI-Beta")):
            return self.beta
        return self

    def client_error_event(
        self,
        event_id: str,
        code: str,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        client_event_id: Any = None,
    ) -> dict[str, Any]:
        """The realtime `error` event."""
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

    def tool_definitions(self, tools: Iterable[ToolSpec]) -> list[dict[str, Any]]:
        """The relay's tools as a session or response lists them: flat function tools, their
        parameters as this wire takes them (`tool_parameters`)."""
        return [{**definition, "parameters": self.tool_parameters(definition["parameters"])}
                for definition in (spec.definition() for spec in tools)]

    def session_update(self, session_fields: dict[str, Any], event_id: str) -> dict[str, Any]:
        """A `session.update` carrying only `session_fields` (GA requires `type: realtime`)."""
        session = dict(session_fields)
        if self.wire == "ga" and self.typed_session:
            session.setdefault("type", "realtime")
        return {"type": "session.update", "event_id": event_id, "session": session}

    def seed_item(self, item: dict[str, Any]) -> dict[str, Any] | None:
        """An item of a conversation as the relay kept it (words, no audio), as an item a new
        session takes in with `conversation.item.create` (a resumed session, relay/edges/resume.py):
        a message keeps its words, audio parts as their transcripts (user and system parts as
        `input_text`, the assistant's as the wire's output text); a call and its output keep their
        fields. None for an item that cannot be taken in (no words kept, another type)."""
        kind, item_id = item.get("type"), item.get("id")
        if kind in (FUNCTION_CALL, FUNCTION_CALL_OUTPUT):
            fields = ("call_id", "name", "arguments") if kind == FUNCTION_CALL else ("call_id", "output")
            if not all(isinstance(item.get(name), str) for name in fields):
                return None
            return {"type": kind, "id": item_id, **{name: item[name] for name in fields}}
        role = item.get("role")
        if kind != MESSAGE or role not in ("user", "system", "assistant"):
            return None
        part_type = ("text" if self.wire == "beta" else "output_text") if role == "assistant" else "input_text"
        parts = [{"type": part_type, "text": text} for part in item.get("content") or []
                 if isinstance(part, dict) and isinstance(text := part.get("text", part.get("transcript")), str) and text]
        return {"type": MESSAGE, "id": item_id, "role": role, "content": parts} if parts else None

    def response_create(self, response: dict[str, Any], event_id: str) -> dict[str, Any]:
        """A `response.create` with these options (and the wire's `response_defaults`), renamed
        for the wire where names differ."""
        options = {**self.response_defaults, **response}
        if self.wire == "beta" and "output_modalities" in options:
            options["modalities"] = options.pop("output_modalities")
        return {"type": "response.create", "event_id": event_id, "response": options}


SESSION_EXPIRED = "session_expired"
"""The `error` code a session gets at its maximum duration (`OpenAIFamily.session_minutes`), before
the server closes it (as OpenAI's and Azure's servers are reported to send it)."""


def expiry_message(family: Dialect) -> str:
    """The message of that error."""
    minutes = family.session_minutes if isinstance(family, OpenAIFamily) else 60
    return f"Your session hit the maximum duration of {minutes} minutes."


OPENAI_BETA = OpenAIFamily(
    name="openai-beta",
    wire="beta",
    extra_headers={"OpenAI-Beta": "realtime=v1"},
)
OPENAI = OpenAIFamily(name="openai", upstream_hosts=("api.openai.com",), beta=OPENAI_BETA)
