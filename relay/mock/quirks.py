"""What the mock's providers do differently from OpenAI's realtime server, where a relay breaks.

The mock speaks OpenAI GA and beta (`relay.mock.wire`); xAI's Grok Voice Agent, Azure's Voice
Live and Gemini Live (`relay.mock.gemini`) differ in what their servers do: who sends what first,
where a call is delivered, when a call joins the conversation, what a `response.create` does to
the response already running. Each difference is a field of `Quirks`, on or off per session, so a
test plays the provider as documented (`quirks_of(dialect)`, the default of `MockUpstream`
and the scripted harness) or switches one on that the documentation leaves open
(`dataclasses.replace(quirks_of("xai"), calls="in_done")`). docs/providers.md says which of them are verified
against the provider's documentation and which are inferred from other clients.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from relay.dialects import openai_codec as codec
from relay.dialects.openai import OPENAI
from relay.dialects.xai import XAI as XAI_DIALECT

_OPENAI_CALL_NOT_FOUND = ("function_call_not_found", "No function call with call_id '{call_id}' found in the "
                          "conversation for this function_call_output.")


@dataclass(frozen=True)
class Quirks:
    """One provider's server behaviour, as far as it differs from OpenAI's.

    - `opening`: the events a new connection gets, in order (xAI: `session.created` and
      `conversation.created`, in either order: clients disagree);
    - `pings`: a `ping` event after the opening and before every response (xAI's keepalive);
    - `calls`: `streamed` (item, argument deltas and done, as OpenAI) or `in_done` (a call only in
      `response.done`'s output: reported of xAI);
    - `call_added_twice`: a call's `conversation.item.added` comes twice, with `role: "tool"` (xAI);
    - `calls_join_at_done`: a call joins the conversation only when its response is done, so an
      output sent before is refused (xAI's `invalid_tool_call_id`);
    - `call_not_found`: that refusal's code and message (`{call_id}` filled in);
    - `cancel_previous`: a `response.create` cancels the active response unless it says
      `cancel_previous: false` (Voice Live), where OpenAI refuses it;
    - `call_parts`: Gemini's double delivery: the model's calls also come as `functionCall` parts of
      its turn (beside its text, when it speaks text), before the `toolCall`;
    - `drops_blocking`: Gemini: a barge-in drops the model's unanswered BLOCKING calls with no
      `toolCallCancellation`, and an answer sent for one afterwards gets no reply (a user's report:
      docs/gemini.md, "A call dropped with no cancellation");
    - `session_fields`: the session fields the provider accepts, when not OpenAI's (nested dicts
      list the keys below them, None is a leaf); `session_defaults` what its `session.created`
      adds; `session_type`: whether a GA `session.update` must say `type: realtime`;
    - `response_fields`: `response.create` options beyond OpenAI's;
    - `missing_events`: OpenAI events the provider never sends (xAI: `conversation.item.done`,
      `rate_limits.updated`)."""

    opening: tuple[str, ...] = OPENAI.opening_events
    pings: bool = False
    calls: Literal["streamed", "in_done"] = "streamed"
    call_added_twice: bool = False
    calls_join_at_done: bool = False
    call_not_found: tuple[str, str] = _OPENAI_CALL_NOT_FOUND
    cancel_previous: bool = False
    call_parts: bool = False
    drops_blocking: bool = False
    session_fields: Mapping[str, Any] | None = None
    session_defaults: Mapping[str, Any] = field(default_factory=dict)
    session_type: bool = True
    response_fields: frozenset[str] = frozenset()
    missing_events: frozenset[str] = frozenset()


_AUDIO_FORMAT = {"format": None, "transport": None}
XAI = Quirks(
    opening=XAI_DIALECT.opening_events,
    pings=True,
    call_added_twice=True,
    calls_join_at_done=True,
    call_not_found=("invalid_tool_call_id", "Tool call ID '{call_id}' not found in conversation."),
    # the documented flat session; GA's nested shape is accepted too (a live probe's finding)
    session_fields=MappingProxyType({
        "type": None, "model": None, "instructions": None, "voice": None, "turn_detection": None,
        "tools": None, "tool_choice": None, "output_modalities": None, "reasoning": None, "resumption": None,
        "replace": None,
        "audio": {"input": {**_AUDIO_FORMAT, "transcription": None, "turn_detection": None, "noise_reduction": None},
                  "output": {**_AUDIO_FORMAT, "speed": None, "voice": None}},
    }),
    session_defaults=MappingProxyType({
        "voice": "eve",
        "turn_detection": {"type": "server_vad", "threshold": 0.85, "silence_duration_ms": 500,
                           "prefix_padding_ms": 333, "idle_timeout_ms": None},
        "reasoning": {"effort": "high"},
        "resumption": {"enabled": False},
    }),
    session_type=False,
    missing_events=frozenset(codec.event_name(kind) for kind in (codec.ItemDone, codec.RateLimitsUpdated)),
)

VOICE_LIVE = Quirks(
    cancel_previous=True,
    session_fields=MappingProxyType(dict.fromkeys((
        "model", "modalities", "instructions", "voice", "input_audio_format", "input_audio_sampling_rate",
        "output_audio_format", "turn_detection", "input_audio_noise_reduction", "input_audio_echo_cancellation",
        "input_audio_transcription", "output_audio_timestamp_types", "animation", "avatar", "tools", "tool_choice",
        "parallel_tool_calls", "temperature", "max_response_output_tokens", "reasoning_effort", "interim_response",
        "include", "metadata",
    ))),
    session_defaults=MappingProxyType({
        "voice": {"type": "azure-standard", "name": "en-US-Ava:DragonHDLatestNeural"},
        "input_audio_sampling_rate": 24000,
        "turn_detection": {"type": "azure_semantic_vad", "threshold": 0.5, "prefix_padding_ms": 420,
                           "silence_duration_ms": 500, "remove_filler_words": False,
                           "create_response": True, "interrupt_response": True},
        "input_audio_noise_reduction": None,
        "input_audio_echo_cancellation": None,
        "agent": None,
    }),
    response_fields=frozenset({"cancel_previous", "commit", "append_input_items", "input_items",
                               "pre_generated_assistant_message", "interim_response", "reasoning_effort",
                               "max_output_tokens"}),
)

PRESETS: Mapping[str, Quirks] = MappingProxyType({"xai": XAI, "voicelive": VOICE_LIVE})


def quirks_of(dialect: str) -> Quirks:
    """The provider's documented behaviour (OpenAI's, for a dialect without quirks)."""
    return PRESETS.get(dialect, Quirks())


__all__ = ["PRESETS", "Quirks", "VOICE_LIVE", "XAI", "quirks_of"]
