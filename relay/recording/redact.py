"""The one redactor: every secret the relay knows (the provider key, the relay's token, access
tokens as they are refreshed, a webhook secret) replaced by `[redacted]` wherever it could leave
the relay: log lines, frames sent to a client, upstream errors, recordings, the live inspector.

A secret is found as written and in the JSON escapes that decode to it (`\\u0073k-...`); the
start of a secret at the end of a text cut short (a close reason) is redacted too; and `Echoes`
follows the text an upstream streams to one client across its deltas, so that a secret split
between two frames is redacted as well."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from relay.dialects.streamed import may_stream_text, streamed_text
from relay.errors import REDACTED, ConfigError

_REDACTED_BYTES = REDACTED.encode()
# what most of a frame sent to a client is made of: base64 audio (and JSON's own punctuation)
_COMMON_IN_FRAMES = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\"{}:,_ ")


SHOWN = 7
"""The most of a secret's start a client may see where a secret is cut short (a close reason) or
split across deltas: a text that ends in more of a secret's start than this (or than half the
secret, for a short one) has that part redacted. An OpenAI key's first seven characters are the
`sk-proj` every such key starts with."""

# a JSON escape: `\uXXXX`, or a backslash and the character it escapes (`\\` as a pair)
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(.))", re.DOTALL)


def _written_out(match: re.Match[str]) -> str:
    code = match.group(1)
    if code is None:
        return "/" if match.group(2) == "/" else match.group(0)
    char = chr(int(code, 16))
    if char in '"\\' or char < " " or "\ud800" <= char <= "\udfff":
        return match.group(0)   # what no secret holds (quotes, backslashes, controls: refused by `add`)
    return char


def unescaped(text: str) -> str:
    """`text` (JSON, or any text) with the escapes of characters a secret may hold written out:
    the same JSON value, in the spelling where a secret can be found by its letters."""
    return _ESCAPE.sub(_written_out, text)


def shown_of(secret: str) -> int:
    """How many of `secret`'s first characters may show at the end of a text (see SHOWN)."""
    return min(SHOWN, len(secret) // 2)


def start_at_end(text: str, secret: str) -> int | None:
    """Where a start of `secret` longer than `shown_of(secret)` runs to the end of `text` (the
    earliest such place: the longest start), or None."""
    needle = secret[:shown_of(secret) + 1]
    position = text.find(needle, max(0, len(text) - len(secret) + 1))
    while position >= 0:
        if secret.startswith(text[position:]):
            return position
        position = text.find(needle, position + 1)
    return None


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
        # place (both forwarding lanes read them for every audio frame, see `text`; the compiled
        # one the bytes)
        self.texts: list[tuple[str, str]] = []
        self.byte_texts: list[tuple[bytes, bytes]] = []
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
        self.byte_texts = [(anchor.encode(), text.encode()) for anchor, text in self.texts]

    @property
    def secrets(self) -> list[str]:
        return list(self._secrets)

    def text(self, value: str) -> str:
        """`value` without the secrets, as written or in JSON escapes; cheap when there are none
        in it (it runs on every frame sent to a client): per spelling, a test for its anchor, and
        a substring search only where the anchor is (or the spelling has none); escapes are
        written out only in a text that holds a backslash."""
        for anchor, secret in self.texts:
            if anchor in value and secret in value:
                value = value.replace(secret, REDACTED)
        if "\\" in value and self.texts:
            value = self._escaped(value)
        return value

    def _escaped(self, value: str) -> str:
        """`value` (which holds a backslash) with its escapes written out if that shows a secret,
        the secret redacted; else as it is."""
        plain = unescaped(value)
        redacted = plain
        for _, secret in self.texts:
            if secret in redacted:
                redacted = redacted.replace(secret, REDACTED)
        return value if redacted is plain else redacted

    def cut(self, value: str) -> str:
        """`text`, and a secret's start running to the end of `value` (more of it than SHOWN)
        redacted too: for a text that may have been cut short (a close reason holds 123 bytes)."""
        value = self.text(value)
        for secret in self._secrets:
            start = start_at_end(value, secret)
            if start is not None:
                value = value[:start] + REDACTED
        return value

    __call__ = text

    def data(self, value: bytes) -> bytes:
        """`value`, a binary frame's bytes, without the secrets (as UTF-8), as written or in JSON
        escapes."""
        for anchor, secret in self.byte_texts:
            if anchor in value and secret in value:
                value = value.replace(secret, _REDACTED_BYTES)
        if b"\\" in value and self.byte_texts:
            try:
                text = value.decode()
            except UnicodeDecodeError:   # not text: no JSON escape to read
                return value
            redacted = self._escaped(text)
            if redacted is not text:
                value = redacted.encode()
        return value

    def frame(self, frame: str | bytes) -> str | bytes:
        """A text or binary frame without the secrets: `text` or `data`, in one call (it runs on
        every frame sent to a client)."""
        if type(frame) is str or isinstance(frame, str):
            for anchor, secret in self.texts:
                if anchor in frame and secret in frame:
                    frame = frame.replace(secret, REDACTED)
            if "\\" in frame and self.texts:
                frame = self._escaped(frame)
            return frame
        return self.data(frame)  # type: ignore[arg-type]


# ---- secrets split across frames --------------------------------------------------------------
MAX_STREAMS = 32   # the streams of text an `Echoes` follows at once (the oldest is forgotten)


class Echoes:
    """The frames sent to one client, redacted (`Redactor.frame`), with the text the upstream
    streams followed across frames: per stream, the end of what it said so far is kept, and a
    secret that a piece completes, or a start of one (more than SHOWN characters) that a piece
    ends in, is redacted in that piece. A client that joins the pieces sees no more of a secret
    than its first SHOWN characters. Frames that carry no streamed text (audio) are only
    redacted; one that does is parsed, and written anew only when a piece changes."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._tails: dict[tuple[Any, ...], str] = {}   # per stream, the end of its text so far

    def frame(self, frame: str | bytes) -> str | bytes:
        frame = self.redactor.frame(frame)
        secrets = self.redactor._secrets
        if not secrets or not may_stream_text(frame):
            return frame
        try:
            event = json.loads(frame)
        except (ValueError, RecursionError):   # not JSON, or nested past the parser: no text to follow
            return frame
        changed = False
        keep = max(len(secret) for secret in secrets) - 1
        for stream, holder, name in streamed_text(event):
            text = holder[name]
            tail = self._tails.pop(stream, "")
            checked = self._checked(tail, text, secrets)
            self._tails[stream] = (tail + text)[-keep:] if keep > 0 else ""
            if len(self._tails) > MAX_STREAMS:
                del self._tails[next(iter(self._tails))]
            if checked != text:
                holder[name] = checked
                changed = True
        if not changed:
            return frame
        written = json.dumps(event)
        return written if isinstance(frame, str) else written.encode()

    @staticmethod
    def _checked(tail: str, text: str, secrets: list[str]) -> str:
        """`text`, the next piece of a stream whose text so far ends in `tail`, with the parts of
        it that complete a secret, or end in a start of one, redacted."""
        joined = tail + text
        start = len(tail)
        spans: list[tuple[int, int]] = []
        for secret in secrets:
            found = joined.find(secret, max(0, start - len(secret) + 1))
            while found >= 0:
                spans.append((max(found, start) - start, found + len(secret) - start))
                found = joined.find(secret, found + 1)
            begins = start_at_end(joined, secret)
            if begins is not None and len(joined) > start:
                spans.append((max(begins, start) - start, len(text)))
        if not spans:
            return text
        pieces, at = [], 0
        for begin, end in sorted(spans):
            if end <= at:
                continue
            pieces.append(text[at:max(begin, at)])
            if begin >= at:
                pieces.append(REDACTED)
            at = end
        pieces.append(text[at:])
        return "".join(pieces)
