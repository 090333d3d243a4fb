"""Wire dialects: every fact about a provider's wire, one module per family, and their registry.

`base.Dialect` is what every family shares (how a provider is reached, what its clients send the
relay). `openai` holds the OpenAI Realtime family, OpenAI GA being the engine's vocabulary, with
Azure and Foundry as variants in `foundry`, xAI's Grok Voice Agent in `xai`, Azure's Voice Live in
`voicelive`; `gemini` holds Gemini Live; `live` holds OpenAI's GPT-Live (its dialect and codec,
`LIVE` and the Azure variant `LIVE_AZURE`). `peek` reads a typed
frame's event type without parsing it. The registry below lists every dialect a user may name;
docs/adding-a-provider.md says how a provider joins it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from relay.dialects import gemini, live, openai
from relay.dialects.base import AudioSlot, Dialect, Side
from relay.dialects.foundry import AZURE, AZURE_PREVIEW, FOUNDRY, azure_variant
from relay.dialects.gemini import GEMINI, GeminiDialect
from relay.dialects.live import LIVE, LIVE_AZURE, LiveDialect, live_variant
from relay.dialects.openai import OPENAI, OPENAI_BETA, OpenAIFamily
from relay.dialects.voicelive import VOICE_LIVE
from relay.dialects.xai import XAI
from relay.errors import UnusableInput

# The registry: every dialect by its name (what recordings and `--dialect` say).
DIALECTS: dict[str, Dialect] = {
    d.name: d for d in (OPENAI, OPENAI_BETA, AZURE, AZURE_PREVIEW, FOUNDRY, GEMINI, XAI, VOICE_LIVE, LIVE, LIVE_AZURE)
}
# What users may type: all of them, but `azure` picks GA or preview from the upstream URL (see
# `resolve_dialect`), so the preview is not named.
DIALECT_CHOICES = tuple(name for name in DIALECTS if name != AZURE_PREVIEW.name)

AUDIO_MARKERS: tuple[bytes, ...] = (*openai.AUDIO_MARKERS, *gemini.AUDIO_MARKERS, *live.AUDIO_MARKERS)
"""Substrings one of which every audio-bearing frame of any family contains."""


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
    """The dialect an upstream URL implies, or None when the URL does not say: the one that
    matches it most specifically (`Dialect.url_match`: Foundry's path marks on any Azure host,
    Azure GA's path before the preview's host alone), the first registered on a tie."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    path = parts.path.rstrip("/")
    best, best_score = None, 0
    for dialect in DIALECTS.values():
        score = dialect.url_match(host, path)
        if score > best_score:
            best, best_score = dialect, score
    return best


def dialect_of_path(url: str) -> Dialect | None:
    """The dialect an upstream URL's path alone implies, whatever its host (the mock, a local
    proxy, a gateway): among the dialects a URL can imply, the first registered whose own
    endpoint has that path (its default URL's path, or one of its `upstream_paths`); None when
    none does. A provider that borrows another's path (xAI serves OpenAI's `/v1/realtime`) is
    registered after it, so the path stays the first one's."""
    path = urlsplit(url).path.rstrip("/")
    return next((
        dialect for dialect in DIALECTS.values()
        if (dialect.upstream_hosts or dialect.upstream_path_marks)
        and ((dialect.default_url is not None and urlsplit(dialect.default_url).path.rstrip("/") == path)
             or (dialect.upstream_paths and path.endswith(dialect.upstream_paths)))
    ), None)


def resolve_dialect(name: str | None, url: str) -> Dialect:
    """The dialect to speak: an explicit name wins (with `azure` refined by the URL's path, `live`
    by its host), else
    it is inferred from the URL (its host, else its path alone); a URL that says neither is an
    error that says so."""
    if name:
        if name == "azure":
            return azure_variant(url)
        if name == LIVE.name:
            return live_variant(url)
        return get_dialect(name)
    inferred = infer_dialect(url) or dialect_of_path(url)
    if inferred is None:
        raise DialectError(
            f"cannot infer the dialect from {urlsplit(url).netloc or url!r}; pass --dialect "
            f"({'|'.join(DIALECT_CHOICES)})"
        )
    return inferred


def audio_slots(event: dict[str, Any]) -> list[AudioSlot]:
    """Every base64 audio payload of a decoded frame of any family (a typed event is GPT-Live's
    when its type is one of Live's audio events, else the OpenAI family's; anything else is read
    as Gemini Live's)."""
    kind = event.get("type")
    if isinstance(kind, str):
        return live.audio_slots(event) if kind in live.AUDIO_EVENTS else openai.audio_slots(event)
    return gemini.audio_slots(event)


__all__ = [
    "AUDIO_MARKERS", "AudioSlot", "DIALECTS", "DIALECT_CHOICES", "Dialect", "DialectError", "OpenAIFamily", "Side",
    "GeminiDialect", "audio_slots", "dialect_of_path", "get_dialect", "infer_dialect", "resolve_dialect", "OPENAI",
    "OPENAI_BETA", "AZURE", "AZURE_PREVIEW", "FOUNDRY", "GEMINI", "XAI", "VOICE_LIVE", "LIVE", "LIVE_AZURE", "LiveDialect",
]
