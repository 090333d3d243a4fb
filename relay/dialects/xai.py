"""xAI's Grok Voice Agent API (`wss://api.x.ai/v1/realtime?model=grok-voice-...`): the OpenAI
Realtime GA wire with differences that are data.

What differs, and where the relay keeps it (docs/providers.md says which is verified against xAI's
documentation and which is inferred from other clients):
- the key is `XAI_API_KEY`, sent as `Authorization: Bearer`; browsers present an ephemeral token
  as the subprotocol `xai-client-secret.<token>` (the relay takes its own token in that form);
- a session opens with `session.created` and `conversation.created`, in an order clients disagree
  on, and an update before `session.created` is ignored: the relay's own `session.update` waits
  for both (`opening_events`);
- the session is flat (`voice`, `turn_detection`, `tools` at its top) and has no `type`
  (`typed_session`);
- the server's keepalive `ping` events reach the client as they came, unparsed;
- `conversation.item.input_audio_transcription.updated` (cumulative, where OpenAI streams deltas),
  provider-side tools (`web_search`, `x_search`, `file_search`, `mcp`) and their items, events the
  engine does not know: forwarded untouched;
- a call's item joins the conversation only at its response's end, and calls may come only in
  `response.done`'s output: the engine sends outputs after `response.done` and reads calls from
  it (what every OpenAI-family session does);
- a sideband by `?call_id=` for SIP calls (`relay attach`).
"""

from __future__ import annotations

from typing import Any

from relay.dialects.base import TOKEN_SUBPROTOCOL
from relay.dialects.openai import REALTIME_PATHS, UPSTREAM_PASSTHROUGH, OpenAIFamily

PING = "ping"
"""xAI's keepalive event (`timestamp`: Unix milliseconds), outside OpenAI's set: passed through."""


def ping(event_id: str, timestamp_ms: int) -> dict[str, Any]:
    """A `ping` as xAI's server writes it."""
    return {"type": PING, "event_id": event_id, "timestamp": timestamp_ms}


XAI = OpenAIFamily(
    name="xai",
    key_env=("XAI_API_KEY",),
    default_url="wss://api.x.ai/v1/realtime",
    upstream_hosts=("api.x.ai",),
    client_paths=REALTIME_PATHS,
    client_path="/v1/realtime",
    client_token_subprotocols=(TOKEN_SUBPROTOCOL, "xai-client-secret."),
    client_auth_forms=f"Authorization: Bearer, api-key, or the xai-client-secret.<token> or "
                      f"{TOKEN_SUBPROTOCOL}<token> subprotocol",
    call_sideband=True,
    upstream_passthrough=UPSTREAM_PASSTHROUGH | {PING},
    opening_events=("session.created", "conversation.created"),
    typed_session=False,
)
