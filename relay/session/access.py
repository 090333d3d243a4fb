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


def listed_origins(headers: Iterable[tuple[str, str]], allowed: Sequence[str], *,
                   token_required: bool = True) -> str | None:
    """The realtime endpoint's check: an `Origin` that is not on the list of allowed origins
    (`--allow-origin`); None when the request may go on (no Origin: not a browser; or listed).
    Without a list, a relay that asks for its token takes any origin (the page must hold the
    token), and one that does not takes none: any site its user visits could otherwise open
    sessions on the provider key, a loopback page's included."""
    if not allowed and token_required:
        return None
    return next((origin for origin in origins(headers) if origin not in allowed), None)


LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
EVERY_INTERFACE = frozenset({"", "0.0.0.0", "::"})


def page_hosts(bind_host: str, allow_origins: Sequence[str], token: str | None) -> frozenset[str] | None:
    """The names a browser may reach a relay's inspector by (the `Host` it sends): loopback's,
    the address it listens on, and the hosts of its `--allow-origin` list. None (any name) only
    for a relay on every interface that asks for its token: there the page is reached by names
    the relay cannot know, and a page under a name of an attacker's still lacks the token."""
    host = bind_host.strip("[]").lower()
    if host in EVERY_INTERFACE and token:
        return None
    names = set(LOOPBACK_HOSTS)
    names.update(name for name in (urlsplit(origin).hostname for origin in allow_origins) if name)
    if host not in EVERY_INTERFACE:
        names.add(host)
    return frozenset(names)


def host_name(value: str) -> str:
    """The name in a `Host` header (`name:port`, `[v6]:port`), lower-case, without its port and
    a final dot."""
    value = value.strip().lower()
    if value.startswith("["):
        name = value[1:value.find("]")] if "]" in value else value[1:]
    elif value.count(":") == 1:
        name = value.rpartition(":")[0]
    else:
        name = value
    return name.rstrip(".")


def foreign_host(headers: Iterable[tuple[str, str]], hosts: frozenset[str] | None) -> str | None:
    """A `Host` the request names that is none of `hosts` (`page_hosts`): a page that reached
    the relay under another name, such as an attacker's domain that resolves to the relay's
    address (DNS rebinding), to which the page's own-origin check would otherwise say yes. None
    when the request may go on (no list, no Host, or one of them)."""
    if hosts is None:
        return None
    return next((value for name, value in headers if name.lower() == "host" and host_name(value) not in hosts), None)


def own_origin(headers: Iterable[tuple[str, str]], allowed: Sequence[str]) -> str | None:
    """The inspector's check, stricter (its pages show every session): an `Origin` that is
    neither listed nor, without a list, the page's own host (`Host`, which `foreign_host` has
    checked); None when the request may go on. A site a user visits cannot read a loopback
    relay's feed."""
    headers = list(headers)
    hosts = [value for name, value in headers if name.lower() == "host"]
    for origin in origins(headers):
        allowed_here = origin in allowed if allowed else (bool(hosts) and urlsplit(origin).netloc == hosts[0])
        if not allowed_here:
            return origin
    return None
