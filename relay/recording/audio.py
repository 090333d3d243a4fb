"""What a recording keeps of audio: `--record-audio drop` empties the base64 payloads of
audio-bearing events in place (`drop_audio`), without parsing frames that cannot hold audio
(`_AUDIO_MARKERS`). Where audio sits in a frame is the dialects' to say (`relay.dialects`)."""

from __future__ import annotations

from typing import Any

from relay.dialects import AUDIO_MARKERS, audio_slots

# Substrings one of which any audio-bearing event contains; lets binary frames skip the JSON parse.
_AUDIO_MARKERS = AUDIO_MARKERS


def drop_audio(event: dict[str, Any]) -> int:
    """Empty the base64 audio payloads of `event` in place; how many characters were removed.

    Only the places where the protocols put audio are looked at, found from the event type (or,
    for Gemini, the single top-level key): the event is never walked as a whole."""
    dropped = 0
    for holder, key, _side, _mime in audio_slots(event):
        value = holder.get(key)
        if isinstance(value, str) and value:
            holder[key] = ""
            dropped += len(value)
    return dropped
