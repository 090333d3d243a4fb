"""Wire dialects. OpenAI GA is the engine's vocabulary; each module here adapts one family.

A dialect answers three questions for the engine: how an incoming event's type maps onto the GA
name (`canonical_type`), what the events the relay itself emits look like on this wire
(`function_call_output` fields, `session.update` shape, `response.create` options), and how the
upstream is reached (default URL, credentials header)."""

from __future__ import annotations

from urllib.parse import urlsplit

from relay.dialects.base import Dialect
from relay.dialects.foundry import AZURE, AZURE_PREVIEW, FOUNDRY
from relay.dialects.gemini import GEMINI, GEMINI_HOST, GeminiDialect
from relay.dialects.openai import OPENAI, OPENAI_BETA
from relay.errors import UnusableInput

DIALECTS: dict[str, Dialect] = {
    d.name: d for d in (OPENAI, OPENAI_BETA, AZURE, AZURE_PREVIEW, FOUNDRY, GEMINI)
}
# What users may type: `azure` picks GA or preview from the upstream URL (see `resolve_dialect`).
DIALECT_CHOICES = ("openai", "openai-beta", "azure", "foundry", "gemini")


class DialectError(UnusableInput, ValueError):
    """A dialect that does not exist, or one an upstream URL does not imply."""


def get_dialect(name: str) -> Dialect:
    try:
        return DIALECTS[name]
    except KeyError:
        raise DialectError(
            f"unknown dialect {name!r}; choose one of: {', '.join(sorted(DIALECTS))}"
        ) from None


def infer_dialect(url: str) -> Dialect | None:
    """The dialect an upstream URL implies, or None when the URL does not say."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    path = parts.path.rstrip("/")
    if host.endswith(".services.ai.azure.com") or "/voice-agent" in path or "/voice-live" in path:
        return FOUNDRY
    if host == "api.openai.com":
        return OPENAI
    if host == GEMINI_HOST:
        return GEMINI
    if host.endswith(".openai.azure.com") or host.endswith(".cognitiveservices.azure.com"):
        return AZURE if path.endswith("/openai/v1/realtime") else AZURE_PREVIEW
    return None


def resolve_dialect(name: str | None, url: str) -> Dialect:
    """The dialect to speak: an explicit name wins (with `azure` refined by the URL's path), else
    it is inferred from the URL; an ambiguous URL without a name is an error that says so."""
    if name:
        if name == "azure":
            return AZURE_PREVIEW if "api-version=" in url and "/openai/v1/" not in url else AZURE
        return get_dialect(name)
    inferred = infer_dialect(url)
    if inferred is None:
        raise DialectError(
            f"cannot infer the dialect from {urlsplit(url).netloc or url!r}; pass --dialect "
            f"({'|'.join(DIALECT_CHOICES)})"
        )
    return inferred


__all__ = [
    "DIALECTS", "DIALECT_CHOICES", "Dialect", "DialectError", "get_dialect", "infer_dialect",
    "resolve_dialect", "OPENAI", "OPENAI_BETA", "AZURE", "AZURE_PREVIEW", "FOUNDRY", "GEMINI",
    "GeminiDialect",
]
