"""Who may open what on a relay's port: the relay's own token in every form a client sends it,
the subprotocol a WebSocket is answered with, and the browser `Origin` checks. The realtime
endpoint (relay/edges/handshake.py) and the live inspector's routes (relay/inspector/live/) both
decide with these, so a token or an origin means the same to both.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Sequence
from urllib.parse import parse_qsl, urlsplit

from relay.dialects import Dialect
from relay.dialects.base import TOKEN_SUBPROTOCOL

REALTIME_SUBPROTOCOL = "realtime"
"""What OpenAI's browser SDK offers (beside the token subprotocol) on the realtime endpoint."""

INSPECTOR_SUBPROTOCOL = "relay-inspector"
"""The subprotocol a page offers (beside the token subprotocol) to open the live inspector's feed."""


def presents_token(headers: Iterable[tuple[str, str]], target: str, token: str, dialect: Dialect | None) -> bool:
    """Whether a request (its headers, and its path with the query) carries the relay token in a
    form a realtime client of `dialect` may send it: a Bearer token, the dialect's token
    subprotocols (OpenAI's `openai-insecure-api-key.`, xAI's `xai-client-secret.`), its key headers
    and query parameters. The one check of the relay's token (the realtime
    endpoint's and the inspector's)."""
    expected = token.encode("utf-8", "surrogatepass")
    key_headers = {name.lower() for name in dialect.client_key_headers} if dialect is not None else set()
    subprotocols = dialect.client_token_subprotocols if dialect is not None else (TOKEN_SUBPROTOCOL,)
    presented = []
    for name, value in headers:
        name = name.lower()
        if name == "authorization" and value[:7].lower() == "bearer ":
            presented.append(value[7:].strip())
        elif name in key_headers:
            presented.append(value)
        elif name == "sec-websocket-protocol":
            offered = [p.strip() for p in value.split(",")]
            presented += [p[len(prefix):] for p in offered for prefix in subprotocols if p.startswith(prefix)]
    if dialect is not None and dialect.client_key_params:
        presented += [value for name, value in parse_qsl(urlsplit(target).query) if name in dialect.client_key_params]
    return any(hmac.compare_digest(p.encode("utf-8", "surrogatepass"), expected) for p in presented)


def select_subprotocol(offered: Sequence[str]) -> str | None:
    """`realtime` when offered (the inspector's feed: its own); the token subprotocol is never
    echoed back."""
    for name in (REALTIME_SUBPROTOCOL, INSPECTOR_SUBPROTOCOL):
        if name in offered:
            return name
    return None


def origins(headers: Iterable[tuple[str, str]]) -> list[str]:
    """The `Origin` values a request carries (a browser sends one; other clients none)."""
    return [value for name, value in headers if name.lower() == "origin"]


def listed_origins(headers: Iterable[tuple[str, str]], allowed: Sequence[str]) -> str | None:
    """The realtime endpoint's check: with a list of allowed origins (`--allow-origin`), an
    `Origin` that is not on it; None when the request may go on (no list, no Origin, or listed)."""
    if not allowed:
        return None
    return next((origin for origin in origins(headers) if origin not in allowed), None)


def own_origin(headers: Iterable[tuple[str, str]], allowed: Sequence[str]) -> str | None:
    """The inspector's check, stricter (its pages show every session): an `Origin` that is
    neither listed nor, without a list, the page's own host (`Host`); None when the request may go
    on. A site a user visits cannot read a loopback relay's feed."""
    headers = list(headers)
    hosts = [value for name, value in headers if name.lower() == "host"]
    for origin in origins(headers):
        allowed_here = origin in allowed if allowed else (bool(hosts) and urlsplit(origin).netloc == hosts[0])
        if not allowed_here:
            return origin
    return None
