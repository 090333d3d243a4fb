"""The OpenAI Realtime family's names, the tables its dialect (`relay.dialects.openai`) and its codec
(`relay.dialects.openai_codec`) both read: the events the GA and beta vocabularies name
differently, the item types the relay acts on, and the frames passed through unparsed.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

# ---- event names ---------------------------------------------------------------------------------
# Every event the two vocabularies name differently: (GA name, beta name, older names still read).
# Incoming events are accepted in either vocabulary; the engine reads them by their GA name. GA
# servers still type `conversation.item.created`, meaning `added`; early WebRTC logs show the
# output buffer's events as `audio_started`, `audio_stopped`, `audio_cleared`.
EVENT_NAMES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("conversation.item.added", "conversation.item.created", ()),
    ("response.output_text.delta", "response.text.delta", ()),
    ("response.output_text.done", "response.text.done", ()),
    ("response.output_audio.delta", "response.audio.delta", ()),
    ("response.output_audio.done", "response.audio.done", ()),
    ("response.output_audio_transcript.delta", "response.audio_transcript.delta", ()),
    ("response.output_audio_transcript.done", "response.audio_transcript.done", ()),
    ("output_audio_buffer.started", "output_audio_buffer.started", ("output_audio_buffer.audio_started",)),
    ("output_audio_buffer.stopped", "output_audio_buffer.stopped", ("output_audio_buffer.audio_stopped",)),
    ("output_audio_buffer.cleared", "output_audio_buffer.cleared", ("output_audio_buffer.audio_cleared",)),
)
BETA_NAMES: Mapping[str, str] = MappingProxyType({ga: beta for ga, beta, _ in EVENT_NAMES if beta != ga})
"""GA name -> the beta wire's name, where they differ (what a beta server sends)."""
READ_AS_GA: Mapping[str, str] = MappingProxyType(
    {other: ga for ga, beta, older in EVENT_NAMES for other in (beta, *older) if other != ga})
"""Every other name an event arrives by -> its GA name."""
NOT_IN_BETA = frozenset({"conversation.item.done"})
"""GA server events the beta wire does not have."""

# The item types the relay acts on (an item's `type`).
FUNCTION_CALL, FUNCTION_CALL_OUTPUT, MESSAGE = "function_call", "function_call_output", "message"
MCP_CALL, MCP_LIST_TOOLS = "mcp_call", "mcp_list_tools"
MCP_APPROVAL_REQUEST, MCP_APPROVAL_RESPONSE = "mcp_approval_request", "mcp_approval_response"
MCP_ITEM_TYPES = (MCP_CALL, MCP_LIST_TOOLS, MCP_APPROVAL_REQUEST, MCP_APPROVAL_RESPONSE)

# The frames forwarded as the same text without being parsed: the audio the engine only forwards.
UPSTREAM_PASSTHROUGH = frozenset({"response.output_audio.delta", "response.audio.delta"})
CLIENT_PASSTHROUGH = frozenset({"input_audio_buffer.append"})
