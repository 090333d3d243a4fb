"""Azure OpenAI (GA at /openai/v1/realtime, preview = beta wire at /openai/realtime) and
Azure AI Foundry, whose items carry `created_at`, `response_id` and, on outputs, `name`."""

from __future__ import annotations

from relay.dialects.base import Dialect

_AZURE_KEYS = ("AZURE_OPENAI_API_KEY",)

AZURE = Dialect(
    name="azure",
    wire="ga",
    auth_header="api-key",
    key_env=_AZURE_KEYS,
    default_url="wss://YOUR-RESOURCE.openai.azure.com/openai/v1/realtime",
)
AZURE_PREVIEW = Dialect(
    name="azure-preview",
    wire="beta",
    auth_header="api-key",
    key_env=_AZURE_KEYS,
    default_url="wss://YOUR-RESOURCE.openai.azure.com/openai/realtime",
)
FOUNDRY = Dialect(
    name="foundry",
    wire="ga",
    foundry_fields=True,
    auth_header="api-key",
    key_env=_AZURE_KEYS,
    default_url="wss://YOUR-RESOURCE.services.ai.azure.com/voice-live/realtime",
)
