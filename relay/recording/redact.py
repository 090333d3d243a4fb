"""The one redactor: every secret the relay knows (the provider key, the relay's token, access
tokens as they are refreshed, a webhook secret) replaced by `[redacted]` wherever it could leave
the relay: log lines, frames sent to a client, upstream errors, recordings, the live inspector."""

from __future__ import annotations

from collections.abc import Iterable

from relay.errors import REDACTED, ConfigError

_REDACTED_BYTES = REDACTED.encode()
# what most of a frame sent to a client is made of: base64 audio (and JSON's own punctuation)
_COMMON_IN_FRAMES = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\"{}:,_ ")


def anchor_of(spelling: str) -> str:
    """A character of `spelling` that audio frames do not hold (a key's `-`, a token's `.`), or
    "" when it has none. A frame without the anchor cannot hold the spelling: testing for one
    character is a memchr, a fraction of the substring search it spares on every audio frame,
    where base64 shares most of a key's characters and so defeats that search's skips."""
    return next((ch for ch in spelling if ch not in _COMMON_IN_FRAMES), "")


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
        # every spelling searched for, longest first, behind its anchor: replaced, never changed in
        # place (the loop's express lane reads it for every audio frame, see `text`)
        self.texts: list[tuple[str, str]] = []
        self._bytes: list[tuple[bytes, bytes]] = []
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
        """The spellings searched for, each behind its anchor (see `anchor_of`). The lists are
        replaced, never changed in place: a worker thread (the live inspector's) may be reading
        the old ones."""
        spellings = {*self._secrets, *(secret.replace("/", "\\/") for secret in self._secrets if "/" in secret)}
        self.texts = [(anchor_of(text), text) for text in sorted(spellings, key=len, reverse=True)]
        self._bytes = [(anchor.encode(), text.encode()) for anchor, text in self.texts]

    @property
    def secrets(self) -> list[str]:
        return list(self._secrets)

    def text(self, value: str) -> str:
        """`value` without the secrets; cheap when there are none in it (it runs on every frame
        sent to a client): per spelling, a test for its anchor, and a substring search only where
        the anchor is (or the spelling has none)."""
        for anchor, secret in self.texts:
            if anchor in value and secret in value:
                value = value.replace(secret, REDACTED)
        return value

    __call__ = text

    def data(self, value: bytes) -> bytes:
        """`value`, a binary frame's bytes, without the secrets (as UTF-8)."""
        for anchor, secret in self._bytes:
            if anchor in value and secret in value:
                value = value.replace(secret, _REDACTED_BYTES)
        return value

    def frame(self, frame: str | bytes) -> str | bytes:
        """A text or binary frame without the secrets: `text` or `data`, in one call (it runs on
        every frame sent to a client)."""
        if type(frame) is str or isinstance(frame, str):
            for anchor, secret in self.texts:
                if anchor in frame and secret in frame:
                    frame = frame.replace(secret, REDACTED)
            return frame
        return self.data(frame)  # type: ignore[arg-type]
