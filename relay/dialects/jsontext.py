"""JSON text as the relay writes it on every wire: compact, non-ASCII characters as they are, and
always encodable as UTF-8.

JSON may carry a lone surrogate (`"\\ud800"` is valid JSON), which Python decodes to a code point
UTF-8 cannot encode. Written back with `ensure_ascii=False`, such a string made a text frame no
WebSocket library could send, a recording line no file could take. Here a surrogate is written as
its `\\uXXXX` escape instead: in JSON text it can only stand inside a string, where the escape
means the same character, so the peer reads what was sent.
"""

from __future__ import annotations

import json
from typing import Any

from relay.tools.render import holds_surrogate

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def utf8_safe(text: str) -> str:
    """`text`, JSON, with every surrogate code point written as its JSON escape (the same text
    when it has none: one flag test for ASCII, one scan otherwise)."""
    if not holds_surrogate(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def utf8_size(text: str) -> int:
    """The bytes `text` takes in UTF-8, a lone surrogate (which UTF-8 cannot encode, and the
    model's arguments or the caller's words may hold) counted as the three bytes of its code
    point: for a size limit, where `len(text.encode())` would raise instead."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def compact_json(value: Any) -> str:
    """`value` as compact JSON (no spaces, non-ASCII as is) that UTF-8 can always carry."""
    return utf8_safe(_encode(value))


__all__ = ["compact_json", "utf8_safe", "utf8_size"]
