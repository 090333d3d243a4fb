"""What a recording keeps of audio: `--record-audio drop` empties the base64 payloads of
audio-bearing events in place (`drop_audio`), without parsing frames that cannot hold audio."""

from __future__ import annotations

from typing import Any

# Event type -> the field holding base64 audio, for OpenAI events whose whole point is audio.
_OPENAI_AUDIO_FIELDS = {
    "input_audio_buffer.append": "audio",
    "response.output_audio.delta": "delta",
    "response.audio.delta": "delta",  # beta name
    "session.input_audio_buffer.append": "audio",  # translation sessions
    "session.output_audio.delta": "delta",
}
# Substrings one of which any audio-bearing event contains; lets binary frames skip the JSON parse.
_AUDIO_MARKERS = (
    *(name.encode() for name in _OPENAI_AUDIO_FIELDS),
    b"conversation.item.",
    b"realtimeInput",
    b"realtime_input",
    b"inlineData",
    b"inline_data",
)


# --- audio policy -----------------------------------------------------------------------------


def _blank(container: Any, key: str) -> int:
    """Empty the string at container[key]; the number of characters removed."""
    if not isinstance(container, dict):
        return 0
    value = container.get(key)
    if not isinstance(value, str) or not value:
        return 0
    container[key] = ""
    return len(value)


def _first_of(container: Any, *keys: str) -> Any:
    if isinstance(container, dict):
        for key in keys:
            if key in container:
                return container[key]
    return None


def _is_audio_blob(blob: Any) -> bool:
    """Gemini blobs carry a mime type; one without it is assumed to be audio."""
    mime = _first_of(blob, "mimeType", "mime_type")
    return not isinstance(mime, str) or mime.startswith("audio/")


def drop_audio(event: dict[str, Any]) -> int:
    """Empty the base64 audio payloads of `event` in place; how many characters were removed.

    Only the places where the protocols put audio are looked at, found from the event type (or,
    for Gemini, the single top-level key): the event is never walked as a whole."""
    event_type = event.get("type")
    if isinstance(event_type, str):
        audio_field = _OPENAI_AUDIO_FIELDS.get(event_type)
        if audio_field is not None:
            return _blank(event, audio_field)
        if event_type.startswith("conversation.item."):
            item = event.get("item")
            content = item.get("content") if isinstance(item, dict) else None
            if isinstance(content, list):
                return sum(_blank(part, "audio") for part in content)
        return 0
    dropped = 0
    realtime_input = _first_of(event, "realtimeInput", "realtime_input")
    if isinstance(realtime_input, dict):
        dropped += _blank(realtime_input.get("audio"), "data")
        chunks = _first_of(realtime_input, "mediaChunks", "media_chunks")
        if isinstance(chunks, list):
            dropped += sum(_blank(chunk, "data") for chunk in chunks if _is_audio_blob(chunk))
    server_content = _first_of(event, "serverContent", "server_content")
    parts = _first_of(_first_of(server_content, "modelTurn", "model_turn"), "parts")
    if isinstance(parts, list):
        for part in parts:
            blob = _first_of(part, "inlineData", "inline_data")
            if _is_audio_blob(blob):
                dropped += _blank(blob, "data")
    return dropped

