"""Azure OpenAI (GA at /openai/v1/realtime, preview = beta wire at /openai/realtime) and
Azure AI Foundry, whose items carry `created_at`, `response_id` and, on outputs, `name`: variants
of the OpenAI family that differ in data only. Each Azure resource has its own endpoint
(`wss://<resource>.openai.azure.com/openai/v1/realtime`), so none has a default URL. Azure's Voice
Live, on the same resources, is a dialect of its own (`relay.dialects.voicelive`)."""

from __future__ import annotations

from relay.dialects.openai import OpenAIFamily

_AZURE_KEYS = ("AZURE_OPENAI_API_KEY",)
_AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com")
_AZURE_MINUTES = 30   # an Azure realtime session's maximum duration (OpenAI's: 60)

AZURE = OpenAIFamily(
    name="azure",
    session_minutes=_AZURE_MINUTES,
    auth_header="api-key",
    key_env=_AZURE_KEYS,
    default_url=None,
    upstream_hosts=_AZURE_HOSTS,
    upstream_paths=("/openai/v1/realtime",),
)
AZURE_PREVIEW = OpenAIFamily(
    name="azure-preview",
    session_minutes=_AZURE_MINUTES,
    wire="beta",
    auth_header="api-key",
    key_env=_AZURE_KEYS,
    default_url=None,
    upstream_hosts=_AZURE_HOSTS,
)
FOUNDRY = OpenAIFamily(
    name="foundry",
    session_minutes=_AZURE_MINUTES,
    foundry_fields=True,
    auth_header="api-key",
    key_env=_AZURE_KEYS,
    default_url=None,
    upstream_hosts=(".services.ai.azure.com",),
    upstream_path_marks=("/voice-agent",),   # /voice-live/ is Voice Live's (relay.dialects.voicelive)
)


def azure_variant(url: str) -> OpenAIFamily:
    """What `--dialect azure` means for this upstream URL: the preview (beta) wire when the URL
    carries an `api-version` outside the v1 path, else GA."""
    return AZURE_PREVIEW if "api-version=" in url and "/openai/v1/" not in url else AZURE
