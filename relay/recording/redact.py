"""The one redactor: every secret the relay knows (the provider key, the relay's token, access
tokens as they are refreshed, a webhook secret) replaced by `[redacted]` wherever it could leave
the relay: log lines, frames sent to a client, upstream errors, recordings, the live inspector."""

from __future__ import annotations

from collections.abc import Iterable

from relay.errors import ConfigError
from relay.recording.format import REDACTED

_REDACTED_BYTES = REDACTED.encode()


class Redactor:
    """Replaces known secrets in text and in binary frames (Gemini sends JSON in binary frames).

    A secret is matched literally and, when it holds `/`, also as `\\/` (how some JSON encoders
    write a slash). A secret with a quote, a backslash or a control character is refused (a
    `ConfigError`, so also a `ValueError`): a JSON encoder would escape it, so it could not be
    found in a frame's text. Secrets can be added later (a refreshed access token) and discarded
    (an expired one: every secret known costs a search in every frame sent to a client). Longer
    secrets are replaced first, so a secret that contains another goes whole."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._secrets: list[str] = []        # as added, without duplicates
        self._texts: list[str] = []          # every spelling searched for, longest first
        self._bytes: list[bytes] = []
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str | None) -> None:
        """Redact `secret` from now on (None and the empty string are ignored)."""
        if not secret or secret in self._secrets:
            return
        if any(ch in secret for ch in '"\\') or any(ord(ch) < 0x20 for ch in secret):
            raise ConfigError("secrets (keys, tokens) may not hold quotes, backslashes or control characters: "
                              "escaped in JSON, they could not be kept out of frames")
        self._secrets = [*self._secrets, secret]
        self._spell()

    def discard(self, secret: str) -> None:
        """Stop redacting `secret` (an access token that expired)."""
        if secret in self._secrets:
            self._secrets = [known for known in self._secrets if known != secret]
            self._spell()

    def _spell(self) -> None:
        """The spellings searched for. The lists are replaced, never changed in place: a worker
        thread (the live inspector's) may be reading the old ones."""
        spellings = {*self._secrets, *(secret.replace("/", "\\/") for secret in self._secrets if "/" in secret)}
        self._texts = sorted(spellings, key=len, reverse=True)
        self._bytes = [text.encode() for text in self._texts]

    @property
    def secrets(self) -> list[str]:
        return list(self._secrets)

    def text(self, value: str) -> str:
        """`value` without the secrets; cheap when there are none in it (it runs on every frame
        sent to a client): one substring search per spelling."""
        for secret in self._texts:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    __call__ = text

    def data(self, value: bytes) -> bytes:
        """`value`, a binary frame's bytes, without the secrets (as UTF-8)."""
        for secret in self._bytes:
            if secret in value:
                value = value.replace(secret, _REDACTED_BYTES)
        return value

    def frame(self, frame: str | bytes) -> str | bytes:
        """A text or binary frame without the secrets: `text` or `data`, in one call (it runs on
        every frame sent to a client)."""
        if type(frame) is str or isinstance(frame, str):
            for secret in self._texts:
                if secret in frame:
                    frame = frame.replace(secret, REDACTED)
            return frame
        return self.data(frame)  # type: ignore[arg-type]
