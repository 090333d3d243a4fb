"""What a recording keeps of audio: `--record-audio drop` empties the base64 payloads of
audio-bearing events in place (`drop_audio`), without parsing frames that cannot hold audio
(`_AUDIO_MARKERS`); `without_audio` does the same to a frame read back. Where audio sits in a
frame is the dialects' to say (`relay.dialects`)."""

from __future__ import annotations

from typing import Any

from relay.dialects import AUDIO_MARKERS, audio_slots
from relay.recording.format import Frame, dumps, parse_object

# Substrings one of which any audio-bearing event contains; lets binary frames skip the JSON parse.
_AUDIO_MARKERS = AUDIO_MARKERS
_TEXT_MARKERS = tuple(marker.decode() for marker in AUDIO_MARKERS)


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


def without_audio(frame: Frame) -> Frame:
    """`frame` with its audio payloads emptied in place, as `--record-audio drop` records it, its
    `audio_dropped` counting the characters removed. Text and binary frames are parsed only when
    they may hold audio, and re-serialised only when they did."""
    if frame.event is not None:
        frame.audio_dropped += drop_audio(frame.event)
    elif frame.raw is not None and any(marker in frame.raw for marker in _TEXT_MARKERS):
        event = parse_object(frame.raw)
        dropped = drop_audio(event) if event is not None else 0
        if dropped:
            frame.raw, frame.audio_dropped = dumps(event), frame.audio_dropped + dropped
    elif frame.binary is not None and any(marker in frame.binary for marker in _AUDIO_MARKERS):
        event = parse_object(frame.binary)
        dropped = drop_audio(event) if event is not None else 0
        if dropped:
            frame.binary = dumps(event).encode("utf-8", "backslashreplace")
            frame.audio_dropped += dropped
    return frame
