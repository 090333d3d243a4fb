"""Where the wire carries text an upstream streams to a client in pieces, which a client joins:
the deltas of the OpenAI family (`*.delta` events that are not audio) and Gemini Live's text parts
and transcriptions. The redactor (relay/recording/redact.py: `Echoes`) follows each such stream
across frames, so that a secret split between two pieces is found."""

from __future__ import annotations

from typing import Any

from relay.dialects.gemini import SERVER_CONTENT, field
from relay.dialects.peek import peek_type

_TEXT_MARKERS = ('"text"', 'ranscription"', '"delta"')   # each holds a quote, within 13 characters
_TEXT_MARKER_BYTES = tuple(marker.encode() for marker in _TEXT_MARKERS)
_MARGIN = 16


def may_stream_text(frame: str | bytes) -> bool:
    """Whether a frame may carry streamed text (a delta of the OpenAI family that is not audio, a
    Gemini Live text part or transcription): read cheaply, parsed only if so. A typed frame is
    told by its type; any other (Gemini Live's, or one not written compactly) by its markers, or a
    backslash (an escaped key could hide one). Gemini's audio comes in such frames, its base64
    in the value of `"data"`: the markers are looked for around that value, not in it (each holds
    a quote, which no part of a string without quotes can be near, so none can be missed there),
    which spares a scan of the audio per marker."""
    if isinstance(frame, str):
        kind = peek_type(frame)
        if kind is not None:
            return kind.endswith(".delta") and not kind.endswith("audio.delta")
        return _marked(frame, _TEXT_MARKERS, "\\", '"data"', '"')
    return _marked(frame, _TEXT_MARKER_BYTES, b"\\", b'"data"', b'"')


def _marked(frame: Any, markers: tuple[Any, Any, Any], backslash: Any, data_key: Any, quote: Any) -> bool:
    if backslash in frame:
        return True
    key = frame.find(data_key)
    if key >= 0:
        opening = frame.find(quote, key + len(data_key))
        closing = frame.find(quote, opening + 1) if opening >= 0 else -1
        if closing - opening > 2 * _MARGIN:
            frame = frame[:opening + _MARGIN] + frame[closing - _MARGIN:]   # (a marker across the seam: parsed, no harm)
    text, transcription, delta = markers
    return text in frame or transcription in frame or delta in frame


def _plain_key(value: Any) -> str | int | None:
    return value if isinstance(value, (str, int)) else None


def streamed_text(event: Any) -> list[tuple[tuple[Any, ...], dict[str, Any], str]]:
    """The streamed text an event carries, as `(stream, object, field)`: its delta (the OpenAI
    family: `*.delta` events, by type, item and part), its text parts and transcriptions (Gemini
    Live's `serverContent`). Where a client joins the pieces of one stream, a secret can be split
    between two of them."""
    if not isinstance(event, dict):
        return []
    kind = event.get("type")
    if isinstance(kind, str):
        if kind.endswith(".delta") and isinstance(event.get("delta"), str):
            stream = (kind, *(_plain_key(event.get(name)) for name in ("item_id", "output_index", "content_index")))
            return [(stream, event, "delta")]
        return []
    content = field(event, SERVER_CONTENT)
    if not isinstance(content, dict):
        return []
    found: list[tuple[tuple[Any, ...], dict[str, Any], str]] = []
    turn = field(content, "modelTurn")
    parts = field(turn, "parts") if isinstance(turn, dict) else None
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            found.append((("modelTurn", bool(part.get("thought"))), part, "text"))
    for name in ("inputTranscription", "outputTranscription"):
        transcription = field(content, name)
        if isinstance(transcription, dict) and isinstance(transcription.get("text"), str):
            found.append(((name,), transcription, "text"))
    return found
