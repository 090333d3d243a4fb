"""The vocabulary the mock speaks: ids, event names and object shapes per protocol flavour.

The mock keeps its state in GA terms and translates only here, at the point an event or object is
built, the same way the relay keeps one canonical vocabulary and adapts at its edges. A `Wire` says
which flavour a session speaks: GA or beta event names and session shapes, and whether items carry
the Azure AI Foundry extensions (`response_id`, `created_at`, and `name` on outputs). The mock
builds its events as the OpenAI codec's typed events (`relay.dialects.openai_codec`) and `frame`
writes them by the codec, under the names of the session's variant: the mock spells no event name.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import random
import secrets
import string
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import msgspec

from relay.dialects import openai_codec as codec
from relay.dialects.jsontext import compact_json
from relay.dialects.openai import NOT_IN_BETA, OPENAI, OPENAI_BETA, OpenAIFamily
from relay.dialects.xai import ping as xai_ping
from relay.errors import RelayError
from relay.mock.quirks import Quirks, quirks_of

Dialect = Literal["openai", "openai-beta", "azure", "foundry", "xai", "voicelive"]
DIALECTS: tuple[Dialect, ...] = ("openai", "openai-beta", "azure", "foundry", "xai", "voicelive")

DEFAULT_MODEL = "gpt-realtime"
DEFAULT_INSTRUCTIONS = "You are a helpful assistant. Keep your answers short."
DEFAULT_VOICE = "alloy"
SESSION_LIFETIME_SECONDS = 3600

_ID_ALPHABET = string.ascii_letters + string.digits
_ids = random.Random()
_AS_ID = bytes(ord(_ID_ALPHABET[byte % len(_ID_ALPHABET)]) for byte in range(256))
_AS_DIGIT = bytes(ord(string.digits[byte % 10]) for byte in range(256))
"""A random byte as a character of an id (or a digit): one draw of `count` bytes and one
`bytes.translate` make an id, where a draw per character cost the in-process mock a tenth of a
scripted session's time (every server event has an `event_id`). The first characters of the
alphabet come a little more often (256 is not a multiple of 62): nothing reads ids for that."""


def event_text(event: Any) -> str:
    """A server event of the in-process mock as its frame's text, compact as servers write it
    (msgspec: a fifth of `json.dumps`'s cost, on every frame of every scripted response). A string
    holding a lone surrogate (a test's caller may say one; JSON carries it as `\\ud800`), which
    msgspec refuses, is written with the surrogate as its JSON escape, as the mock server writes it."""
    try:
        return msgspec.json.encode(event).decode()
    except UnicodeEncodeError:
        return compact_json(event)


def event_bytes(event: Any) -> bytes:
    """`event_text` as UTF-8, for a server that sends its JSON in binary frames (Gemini Live)."""
    try:
        return msgspec.json.encode(event)
    except UnicodeEncodeError:
        return compact_json(event).encode()


def new_id(prefix: str, length: int = 21) -> str:
    """An id shaped like the server's (`item_Ct1OhVepyDFpDovHrgmNp`)."""
    return f"{prefix}_" + _ids.randbytes(length).translate(_AS_ID).decode()


def new_digits(count: int) -> str:
    """`count` random digits, from the same seeded generator as the ids."""
    return _ids.randbytes(count).translate(_AS_DIGIT).decode()


def seed_ids(seed: int | str) -> None:
    """Make the ids (and `obfuscation` paddings) drawn from now on the same on every run for a
    seed, for reproducible tests (a property test replaying an example must see the same ids)."""
    _ids.seed(seed)


def new_call_id() -> str:
    return new_id("call", 16)


def new_session_call_id() -> str:
    """The id a sideband connection uses to join a session (`?call_id=rtc_...`)."""
    return f"rtc_{secrets.token_hex(16)}"


def obfuscation() -> str:
    """Real servers pad streamed deltas with a random `obfuscation` field; the mock does too so
    that consumers prove they ignore fields they do not know."""
    return _ids.randbytes(_ids.randint(4, 16)).translate(_AS_ID).decode()


class ProtocolError(RelayError):
    """A client event the server refuses; becomes an `error` event, the session stays open."""

    def __init__(
        self, code: str | None, message: str, param: str | None = None, type: str = "invalid_request_error"
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.param = param
        self.type = type


# Bytes of audio per millisecond for each output/input format (PCM16 24 kHz mono, G.711 8 kHz).
_BYTES_PER_MS = {"audio/pcm": 48, "pcm16": 48, "audio/pcmu": 8, "audio/pcma": 8, "g711_ulaw": 8, "g711_alaw": 8}

# Session fields a client may set; a nested dict lists the allowed keys below it, None is a leaf.
_GA_SESSION_FIELDS: dict[str, Any] = {
    "type": None,
    "model": None,
    "output_modalities": None,
    "instructions": None,
    "audio": {
        "input": {"format": None, "noise_reduction": None, "transcription": None, "turn_detection": None},
        "output": {"format": None, "voice": None, "speed": None},
    },
    "include": None,
    "tracing": None,
    "tools": None,
    "tool_choice": None,
    "max_output_tokens": None,
    "truncation": None,
    "prompt": None,
}
_BETA_SESSION_FIELDS: dict[str, Any] = dict.fromkeys(
    (
        "model",
        "modalities",
        "instructions",
        "voice",
        "input_audio_format",
        "output_audio_format",
        "input_audio_transcription",
        "input_audio_noise_reduction",
        "turn_detection",
        "tools",
        "tool_choice",
        "temperature",
        "max_response_output_tokens",
        "speed",
        "tracing",
        "include",
    )
)
_COMMON_RESPONSE_FIELDS = frozenset({"conversation", "input", "instructions", "tools", "tool_choice", "metadata"})
GA_RESPONSE_FIELDS = _COMMON_RESPONSE_FIELDS | {
    "output_modalities",
    "audio",
    "max_output_tokens",
    "prompt",
    "parallel_tool_calls",
    "reasoning",
}
BETA_RESPONSE_FIELDS = _COMMON_RESPONSE_FIELDS | {
    "modalities",
    "voice",
    "output_audio_format",
    "temperature",
    "max_response_output_tokens",
}


def _server_vad(*, beta: bool) -> dict[str, Any]:
    idle = {} if beta else {"idle_timeout_ms": None}  # a GA addition
    return {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 200,
        **idle,
        "create_response": True,
        "interrupt_response": True,
    }


def check_unknown_fields(value: dict[str, Any], allowed: dict[str, Any], path: str) -> None:
    """Reject keys the real API does not know (`Unknown parameter: 'session.foo'.`)."""
    for key, child in value.items():
        if key not in allowed:
            raise ProtocolError("unknown_parameter", f"Unknown parameter: '{path}.{key}'.", f"{path}.{key}")
        if isinstance(allowed[key], dict) and isinstance(child, dict):
            check_unknown_fields(child, allowed[key], f"{path}.{key}")


def merge_config(target: dict[str, Any], update: dict[str, Any]) -> None:
    """Deep-merge a session update: present fields change, absent ones stay. Lists (tools) are
    replaced whole, and so is a typed object whose `type` changes (server_vad -> semantic_vad)."""
    for key, value in update.items():
        current = target.get(key)
        same_kind = isinstance(current, dict) and isinstance(value, dict)
        if same_kind and value.get("type", current.get("type")) == current.get("type"):
            merge_config(current, value)
        else:
            target[key] = copy.deepcopy(value)


@dataclass(frozen=True)
class Wire:
    """One session's protocol flavour; `renamed` lists the events a provider names its own way
    (GA name -> its name), beyond the beta names; `quirks` what its server does differently
    (relay/mock/quirks.py)."""

    beta: bool = False
    foundry: bool = False
    renamed: Mapping[str, str] = field(default_factory=dict)
    quirks: Quirks = field(default_factory=Quirks)
    wall: Callable[[], float] = field(default=time.time, compare=False)
    """The epoch seconds the server's times read (`expires_at`, `created_at`, xAI's ping): the
    machine's clock, or a scripted session's virtual one (the same frames on every run)."""

    @classmethod
    def of(cls, dialect: OpenAIFamily, quirks: Quirks | None = None, wall: Callable[[], float] = time.time) -> Wire:
        """The flavour a variant of the OpenAI family speaks, with its provider's quirks unless
        others are given."""
        return cls(beta=dialect.wire == "beta", foundry=dialect.foundry_fields, renamed=dialect.server_names,
                   quirks=quirks_of(dialect.name) if quirks is None else quirks, wall=wall)

    @functools.cached_property
    def family(self) -> OpenAIFamily:
        """The variant whose names the session's events are written by (GA or beta, and a
        provider's own names)."""
        base = OPENAI_BETA if self.beta else OPENAI
        own = {name: ga for ga, name in self.renamed.items() if base.server_names.get(ga) != name}
        return dataclasses.replace(base, renamed_events=own) if own else base

    # -- events --------------------------------------------------------------------------------
    def has_event(self, kind: type[codec.Event]) -> bool:
        """Whether the session's server sends this event at all (beta has no `conversation.item.done`;
        a provider may lack some: `Quirks.missing_events`)."""
        name = codec.event_name(kind)
        return not (self.beta and name in NOT_IN_BETA) and name not in self.quirks.missing_events

    def frame(self, event: codec.Event) -> dict[str, Any]:
        """A server event as this wire writes it (the codec's frame object, by the variant's
        names), with a fresh server `event_id` unless it has one."""
        if event.event_id is None:
            event.event_id = new_id("event")
        return codec.frame_object(event, self.family)

    def ping(self) -> dict[str, Any]:
        """xAI's keepalive event (`Quirks.pings`): outside OpenAI's set, written as xAI's dialect
        shapes it, its time in Unix milliseconds."""
        timestamp = int(self.wall() * 1000)
        return xai_ping(new_id("event"), timestamp)

    def error(self, error: ProtocolError, client_event_id: str | None) -> dict[str, Any]:
        return self.frame(codec.Error(error={
            "type": error.type,
            "code": error.code,
            "message": error.message,
            "param": error.param,
            "event_id": client_event_id,
        }))

    # -- items ---------------------------------------------------------------------------------
    def assistant_part_type(self, modality: str) -> str:
        """Content type of an assistant message part (`output_audio` in GA, `audio` in beta)."""
        if self.beta:
            return modality
        return f"output_{modality}"

    def item(self, **fields: Any) -> dict[str, Any]:
        """An item in the key order real servers use; beta items also carry `object`."""
        item: dict[str, Any] = {"id": fields.pop("id")}
        if self.beta:
            item["object"] = "realtime.item"
        item.update(fields)
        return item

    # -- session -------------------------------------------------------------------------------
    def default_session(self, session_id: str, model: str) -> dict[str, Any]:
        """What `session.created` says: OpenAI's session of this vocabulary, or the provider's own
        shape (`Quirks.session_fields`) with its defaults."""
        session = self._openai_session(session_id, model)
        quirks = self.quirks
        if quirks.session_fields is not None and not self.beta:
            session = {key: session[key] for key in ("type", "object", "id", "model", "instructions", "tools",
                                                     "tool_choice", "expires_at")}
            del session["type"]
            session["audio"] = {"input": {"format": {"type": "audio/pcm", "rate": 24000}},
                                "output": {"format": {"type": "audio/pcm", "rate": 24000}, "speed": 1.0}}
        session.update(copy.deepcopy(dict(quirks.session_defaults)))
        return session

    def _openai_session(self, session_id: str, model: str) -> dict[str, Any]:
        expires_at = int(self.wall()) + SESSION_LIFETIME_SECONDS
        if self.beta:
            return {
                "id": session_id,
                "object": "realtime.session",
                "expires_at": expires_at,
                "input_audio_noise_reduction": None,
                "turn_detection": _server_vad(beta=True),
                "input_audio_format": "pcm16",
                "input_audio_transcription": None,
                "client_secret": None,
                "include": None,
                "model": model,
                "modalities": ["text", "audio"],
                "instructions": DEFAULT_INSTRUCTIONS,
                "voice": DEFAULT_VOICE,
                "output_audio_format": "pcm16",
                "tool_choice": "auto",
                "temperature": 0.8,
                "max_response_output_tokens": "inf",
                "speed": 1.0,
                "tracing": None,
                "tools": [],
            }
        return {
            "type": "realtime",
            "object": "realtime.session",
            "id": session_id,
            "model": model,
            "output_modalities": ["audio"],
            "instructions": DEFAULT_INSTRUCTIONS,
            "tools": [],
            "tool_choice": "auto",
            "max_output_tokens": "inf",
            "tracing": None,
            "truncation": "auto",
            "prompt": None,
            "expires_at": expires_at,
            "audio": {
                "input": {
                    "format": {"type": "audio/pcm", "rate": 24000},
                    "transcription": None,
                    "noise_reduction": None,
                    "turn_detection": _server_vad(beta=False),
                },
                "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": DEFAULT_VOICE, "speed": 1.0},
            },
            "include": None,
        }

    def check_session_update(self, update: Any) -> None:
        """Validate a `session.update` payload (or a call's accept body) before anything changes."""
        if not isinstance(update, dict):
            raise ProtocolError("invalid_type", "Invalid type for 'session': expected an object.", "session")
        known = self.quirks.session_fields
        if self.beta:
            check_unknown_fields(update, _BETA_SESSION_FIELDS if known is None else dict(known), "session")
            modalities_key = "modalities"
        elif not self.quirks.session_type:
            check_unknown_fields(update, dict(known or _GA_SESSION_FIELDS), "session")
            if update.get("type", "realtime") != "realtime":
                raise ProtocolError("invalid_value", f"Invalid value: '{update['type']}'. Supported values are: "
                                    "'realtime'.", "session.type")
            modalities_key = "output_modalities"
        else:
            if "type" not in update:
                raise ProtocolError(
                    "missing_required_parameter", "Missing required parameter: 'session.type'.", "session.type"
                )
            if update["type"] != "realtime":
                raise ProtocolError(
                    "invalid_value",
                    f"Invalid value: '{update['type']}'. Supported values are: 'realtime'.",
                    "session.type",
                )
            check_unknown_fields(update, _GA_SESSION_FIELDS if known is None else dict(known), "session")
            modalities_key = "output_modalities"
        if modalities_key in update:
            check_modalities(update[modalities_key], f"session.{modalities_key}", beta=self.beta)
        if "tools" in update:
            check_tools(update["tools"], "session.tools")
        if "tool_choice" in update:
            check_tool_choice(update["tool_choice"], "session.tool_choice")

    def modalities(self, config: dict[str, Any]) -> list[str]:
        return list(config.get("modalities" if self.beta else "output_modalities") or ["audio"])

    def voice(self, config: dict[str, Any]) -> Any:
        if self.beta or "voice" in config:   # beta, and flat provider sessions (xAI)
            return config.get("voice") or DEFAULT_VOICE
        return ((config.get("audio") or {}).get("output") or {}).get("voice") or DEFAULT_VOICE

    def output_format(self, config: dict[str, Any]) -> Any:
        """The output audio format as this wire writes it (a format object in GA, a name in beta)."""
        if self.beta:
            return config.get("output_audio_format") or "pcm16"
        output = (config.get("audio") or {}).get("output") or {}
        return output.get("format") or {"type": "audio/pcm", "rate": 24000}

    def input_bytes_per_ms(self, config: dict[str, Any]) -> int:
        if self.beta:
            return _BYTES_PER_MS.get(config.get("input_audio_format") or "pcm16", 48)
        fmt = ((config.get("audio") or {}).get("input") or {}).get("format") or {}
        return _BYTES_PER_MS.get(fmt.get("type", "audio/pcm"), 48)

    def output_bytes_per_ms(self, config: dict[str, Any]) -> int:
        fmt = self.output_format(config)
        return _BYTES_PER_MS.get(fmt if isinstance(fmt, str) else fmt.get("type", "audio/pcm"), 48)

    def turn_detection(self, config: dict[str, Any]) -> dict[str, Any] | None:
        if self.beta or "turn_detection" in config:   # beta, and flat provider sessions (xAI)
            return config.get("turn_detection")
        return ((config.get("audio") or {}).get("input") or {}).get("turn_detection")

    def max_output_tokens(self, config: dict[str, Any]) -> Any:
        return config.get("max_response_output_tokens" if self.beta else "max_output_tokens", "inf")

    # -- responses -----------------------------------------------------------------------------
    def response_fields(self) -> frozenset[str]:
        return (BETA_RESPONSE_FIELDS if self.beta else GA_RESPONSE_FIELDS) | self.quirks.response_fields

    def response_object(
        self,
        *,
        response_id: str,
        status: str,
        status_details: dict[str, Any] | None,
        output: list[dict[str, Any]],
        conversation_id: str | None,
        modality: str,
        voice: str,
        output_format: Any,
        max_output_tokens: Any,
        usage: dict[str, Any] | None,
        metadata: dict[str, str] | None,
    ) -> dict[str, Any]:
        head = {
            "object": "realtime.response",
            "id": response_id,
            "status": status,
            "status_details": status_details,
            "output": output,
            "conversation_id": conversation_id,
        }
        if self.beta:
            shape = {
                "modalities": ["text", "audio"] if modality == "audio" else ["text"],
                "voice": voice,
                "output_audio_format": output_format,
                "temperature": 0.8,
                "max_output_tokens": max_output_tokens,
            }
        else:
            shape = {
                "output_modalities": [modality],
                "max_output_tokens": max_output_tokens,
                "audio": {"output": {"format": output_format, "voice": voice}},
            }
        return {**head, **shape, "usage": usage, "metadata": metadata}


def check_modalities(value: Any, param: str, *, beta: bool) -> None:
    allowed = ([["text"], ["audio"], ["text", "audio"], ["audio", "text"]]) if beta else [["text"], ["audio"]]
    if value not in allowed:
        supported = ", ".join(repr(v) for v in allowed)
        raise ProtocolError("invalid_value", f"Invalid value for '{param}': supported values are {supported}.", param)


def check_tools(tools: Any, param: str) -> None:
    if not isinstance(tools, list):
        raise ProtocolError("invalid_type", f"Invalid type for '{param}': expected an array.", param)
    for index, tool in enumerate(tools):
        where = f"{param}[{index}]"
        if not isinstance(tool, dict):
            raise ProtocolError("invalid_type", f"Invalid type for '{where}': expected an object.", where)
        if tool.get("type") == "mcp":
            continue
        if tool.get("type") != "function":
            raise ProtocolError(
                "invalid_value",
                f"Invalid value: '{tool.get('type')}'. Supported values are: 'function' and 'mcp'.",
                f"{where}.type",
            )
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise ProtocolError(
                "missing_required_parameter", f"Missing required parameter: '{where}.name'.", f"{where}.name"
            )
        if len(name) > 64 or not all(c in _ID_ALPHABET + "_-" for c in name):
            raise ProtocolError(
                "invalid_value",
                f"Invalid '{where}.name': string does not match pattern. "
                "Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
                f"{where}.name",
            )
        description = tool.get("description")
        if isinstance(description, str) and len(description) > 1024:
            raise ProtocolError(
                "string_above_max_length",
                f"Invalid '{where}.description': string too long. Expected a string with maximum length 1024, "
                f"but got a string with length {len(description)} instead.",
                f"{where}.description",
            )


def check_tool_choice(choice: Any, param: str) -> None:
    if choice in ("auto", "none", "required"):
        return
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return
    if isinstance(choice, dict) and choice.get("type") == "mcp":
        return
    raise ProtocolError(
        "invalid_value",
        f"Invalid value for '{param}': expected 'auto', 'none', 'required' or a function choice.",
        param,
    )


def check_metadata(metadata: Any, param: str) -> None:
    """At most 16 string pairs, keys up to 64 and values up to 512 characters."""
    if metadata is None:
        return
    if not isinstance(metadata, dict):
        raise ProtocolError("invalid_type", f"Invalid type for '{param}': expected an object.", param)
    if len(metadata) > 16:
        raise ProtocolError(
            "object_above_max_properties",
            f"Invalid '{param}': too many properties. Expected an object with at most 16 properties, "
            f"but got an object with {len(metadata)} properties instead.",
            param,
        )
    for key, value in metadata.items():
        if len(key) > 64:
            raise ProtocolError(
                "string_above_max_length", f"Invalid '{param}': key '{key[:16]}...' longer than 64 characters.", param
            )
        if not isinstance(value, str):
            raise ProtocolError(
                "invalid_type", f"Invalid type for '{param}.{key}': expected a string.", f"{param}.{key}"
            )
        if len(value) > 512:
            raise ProtocolError(
                "string_above_max_length",
                f"Invalid '{param}.{key}': string too long. Expected a string with maximum length 512, "
                f"but got a string with length {len(value)} instead.",
                f"{param}.{key}",
            )
