"""Azure's Voice Live API (`wss://<resource>.services.ai.azure.com/voice-live/realtime?api-version=
...&model=...`): the OpenAI Realtime **beta** wire (flat session fields, `conversation.item.created`,
`response.audio.delta`) with Azure's own session options and events, as data.

What differs, and where the relay keeps it (docs/providers.md says which is verified against
Microsoft's documentation and SDK, and which is inferred):
- beta names and the flat session (`wire="beta"`); its own session fields (`azure_semantic_vad`
  turn detection, `input_audio_noise_reduction`, `input_audio_echo_cancellation`, Azure voices,
  avatars) pass through untouched: the relay only adds its tools;
- the key goes in the `api-key` header (`AZURE_VOICELIVE_API_KEY`), or a Microsoft Entra token
  as `Authorization: Bearer` (the relay's token provider, refreshed per connection);
- a `response.create` cancels the response in progress unless it says `cancel_previous: false`
  (OpenAI refuses it instead): every create of the relay's says so (`response_defaults`), so a
  follow-up never cuts off speech; an `interrupt` follow-up still cancels first, then creates;
- `function_call_output` items carry no Foundry fields (`name`, `response_id`, `created_at`);
- its events beyond OpenAI's (`warning`, `response.audio_timestamp.*`, `response.animation_*`,
  `session.avatar.*`, ...) reach the client untouched; the frequent media ones unparsed;
- no sideband: a WebRTC call's control socket is the session itself.
"""

from __future__ import annotations

from relay.dialects.openai import REALTIME_PATHS, UPSTREAM_PASSTHROUGH, OpenAIFamily

VOICE_LIVE_PATH = "/voice-live/realtime"

VOICE_LIVE = OpenAIFamily(
    name="voicelive",
    wire="beta",
    auth_header="api-key",
    key_env=("AZURE_VOICELIVE_API_KEY",),
    default_url=None,
    upstream_path_marks=("/voice-live/",),
    client_paths=REALTIME_PATHS | {VOICE_LIVE_PATH},
    client_path=VOICE_LIVE_PATH,
    client_key_params=("api-key",),
    client_auth_forms="Authorization: Bearer, api-key (header or query parameter), or the relay token subprotocol",
    call_sideband=False,
    upstream_passthrough=UPSTREAM_PASSTHROUGH | {
        "response.audio_timestamp.delta", "response.animation_viseme.delta",
        "response.animation_blendshapes.delta", "response.video.delta",
    },
    response_defaults={"cancel_previous": False},
)
