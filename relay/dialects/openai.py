"""OpenAI Realtime: GA (the engine's own vocabulary) and the beta wire (`OpenAI-Beta: realtime=v1`)."""

from __future__ import annotations

from relay.dialects.base import Dialect

OPENAI_BETA = Dialect(
    name="openai-beta",
    wire="beta",
    extra_headers={"OpenAI-Beta": "realtime=v1"},
)
OPENAI = Dialect(name="openai", wire="ga", beta=OPENAI_BETA)
