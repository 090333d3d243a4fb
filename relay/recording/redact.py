"""Secrets kept out of recordings: every occurrence of a secret in a frame's text or bytes is
replaced by `[redacted]`."""

from __future__ import annotations

from collections.abc import Iterable

from relay.recording.format import REDACTED


class _Redactor:
    """Replaces every occurrence of the given secrets, as text and as UTF-8 bytes.

    A secret is matched literally and, when it holds `/`, also as `\\/` (how some JSON encoders
    write a slash). Secrets with a quote, a backslash or a control character are refused: a JSON
    encoder would escape them, so they could not be found in the text of a frame."""

    def __init__(self, secrets: Iterable[str]) -> None:
        spellings: set[str] = set()
        for secret in secrets:
            if not secret:
                continue
            if any(ch in secret for ch in '"\\') or any(ord(ch) < 0x20 for ch in secret):
                raise ValueError("secrets may not hold quotes, backslashes or control characters")
            spellings.add(secret)
            if "/" in secret:
                spellings.add(secret.replace("/", "\\/"))
        # longest first, so a secret that contains another is replaced whole
        self._texts = sorted(spellings, key=len, reverse=True)
        self._bytes = [(text.encode(), REDACTED.encode()) for text in self._texts]

    def text(self, value: str) -> str:
        for secret in self._texts:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def data(self, value: bytes) -> bytes:
        for secret, replacement in self._bytes:
            if secret in value:
                value = value.replace(secret, replacement)
        return value

