"""Connections from the relay to the provider: which URL a client's query maps to, which
credentials go with it, and an error a client can read when the provider cannot be reached.

Credentials come from the relay's side only (its environment, an explicit key, or an access-token
provider); nothing the client sent for authentication is passed on. The key never appears in an
error message, and the WebSocket library's handshake debug lines are redacted. The connection is
opened by the transport backend (relay/transports/).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable, Protocol
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from relay import __version__
from relay.dialects import DIALECTS, Dialect, LiveDialect
from relay.errors import RelayError
from relay.observe.logs import WEBSOCKET_LOGGER, RedactingLogger
from relay.recording.format import upstream_host
from relay.recording.redact import Redactor
from relay.session.transport import Backend, HandshakeFailed, InvalidURL, Transport

DEFAULT_UPSTREAM = "wss://api.openai.com/v1/realtime"
# Query parameters that carry a client's credentials (Azure accepts `api-key` in the query).
CREDENTIAL_PARAMS = frozenset({"api-key", "api_key", "key", "access_token", "token"})
# Query parameters that choose a new session; a sideband names its call instead.
SESSION_PARAMS = frozenset({"model", "deployment", "call_id"})
TOKEN_REFRESH_MARGIN = 300.0
KEPT_TOKENS = 2   # access tokens redacted: the current one and the one before

log = logging.getLogger("relay.upstream")


class UpstreamUnavailable(RelayError):
    """The provider could not be reached or refused the relay; `str()` is safe to show a client.
    `status` is the HTTP status of a refused handshake (None when there was no answer): the
    sidecar reads a 404 as "the call has ended" and retries only what may pass (5xx, 429)."""

    code = "upstream_unavailable"

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class AccessToken:
    """A bearer token and when it expires (Unix seconds), like azure-identity's `AccessToken`."""

    token: str
    expires_on: float


TokenProvider = Callable[[], Awaitable[Any]]
"""An async callable returning an `AccessToken` (or anything with `token` and `expires_on`, such as
`azure.identity.aio.DefaultAzureCredential().get_token(scope)` wrapped in a lambda), or a plain
token string that is then fetched again for every connection."""


class TokenCache:
    """Fetches Entra ID (or other bearer) tokens from a provider and reuses one until
    `refresh_margin` seconds before it expires, so a long-running relay never connects with an
    expired token and sessions do not each wait for a fetch. Concurrent connects share a fetch."""

    def __init__(
        self,
        provider: TokenProvider,
        *,
        refresh_margin: float = TOKEN_REFRESH_MARGIN,
        clock: Callable[[], float] = time.time,
        on_token: Callable[[str], None] | None = None,
    ) -> None:
        self._provider = provider
        self._margin = refresh_margin
        self._clock = clock
        self._on_token = on_token
        self._current: AccessToken | None = None
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        async with self._lock:
            current = self._current
            if current is None or self._clock() >= current.expires_on - self._margin:
                current = _as_access_token(await self._provider())
                if self._on_token is not None:
                    self._on_token(current.token)
                self._current = current if current.expires_on > self._clock() else None
            return current.token


def _as_access_token(value: Any) -> AccessToken:
    if isinstance(value, str):
        return AccessToken(value, 0.0)   # expiry unknown: used once
    token, expires_on = getattr(value, "token", None), getattr(value, "expires_on", None)
    if not isinstance(token, str) or not isinstance(expires_on, (int, float)):
        raise TypeError(
            f"the token provider returned {type(value).__name__}; expected a str or an object with "
            "`token` (str) and `expires_on` (Unix seconds)"
        )
    return AccessToken(token, float(expires_on))


def default_upstream(dialect: str | None) -> str:
    """The provider endpoint a dialect name implies when no URL is given: the dialect's own
    (Gemini Live's for `gemini`), else OpenAI's (Azure's resources have no default)."""
    known = DIALECTS.get(dialect) if dialect else None
    return known.default_url if known is not None and known.default_url else DEFAULT_UPSTREAM


def key_from_environment(dialect: Dialect, environ: dict[str, str] | None = None) -> str | None:
    """The provider key for a dialect from the environment (`OPENAI_API_KEY`,
    `AZURE_OPENAI_API_KEY`, `GEMINI_API_KEY`)."""
    environ = os.environ if environ is None else environ
    for name in dialect.key_env:
        value = environ.get(name, "").strip()
        if value:
            return value
    return None


def display_host(url: str) -> str:
    """`host[:port]` of a URL: enough to say which upstream failed, never its user info or query
    (`?` when it names no host)."""
    return upstream_host(url) or "?"


def merged_url(base: str, client_query: Iterable[tuple[str, str]]) -> str:
    """The upstream URL with the client's query parameters (`model`, `deployment`, `api-version`,
    ...) added; a client's value replaces the URL's for the same name. Credential parameters from
    the client are dropped."""
    parts = urlsplit(base)
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    for name, value in client_query:
        if name.lower() not in CREDENTIAL_PARAMS:
            params[name] = value
    return urlunsplit(parts._replace(query=urlencode(params)))


def call_url(base: str, call_id: str, dialect: Dialect | None = None) -> str:
    """The sideband URL of a live call: the upstream URL with `call_id` in place of the
    `model`/`deployment` that would open a new session; for GPT-Live (`LiveDialect`) the session's
    own path, `…/live/sessions/{id}/attach`, under the upstream's."""
    parts = urlsplit(base)
    if isinstance(dialect, LiveDialect):
        return urlunsplit(parts._replace(path=dialect.attach_path(quote(call_id, safe=""), base)))
    params = {name: value for name, value in parse_qsl(parts.query, keep_blank_values=True)
              if name not in SESSION_PARAMS}
    params["call_id"] = call_id
    return urlunsplit(parts._replace(query=urlencode(params)))


class UpstreamSettings(Protocol):
    """The fields of a configuration (`ServerConfig`, `SidecarConfig`) that say how to reach the
    provider."""

    upstream: str
    api_key: str | None
    token_provider: TokenProvider | None
    max_frame_bytes: int
    open_timeout: float


class Upstream:
    """How to reach the provider: the URL, the credentials, the connection limits and the
    transport backend that connects."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        token_provider: TokenProvider | None = None,
        max_frame_bytes: int,
        open_timeout: float = 10.0,
        redactor: Redactor,
        backend: Backend | None = None,
    ) -> None:
        self.url = url
        self.host = display_host(url)
        self.api_key = api_key
        self.redactor = redactor
        redactor.add(api_key)
        self._recent_tokens: deque[str] = deque()
        self.tokens = TokenCache(token_provider, on_token=self._new_token) if token_provider else None
        self.max_frame_bytes = max_frame_bytes
        self.open_timeout = open_timeout
        if backend is None:   # websockets, imported only when no other transport was chosen (startup)
            from relay.transports.websockets import BACKEND as backend
        self.backend = backend
        self._ws_logger = RedactingLogger(logging.getLogger(f"{WEBSOCKET_LOGGER}.upstream"), redactor)

    @classmethod
    def configured(cls, settings: UpstreamSettings, dialect: Dialect, redactor: Redactor,
                   backend: Backend | None = None) -> Upstream:
        """The upstream a configuration describes; without an explicit key, the dialect's key
        from the environment."""
        return cls(
            settings.upstream,
            api_key=settings.api_key if settings.api_key is not None else key_from_environment(dialect),
            token_provider=settings.token_provider,
            max_frame_bytes=settings.max_frame_bytes,
            open_timeout=settings.open_timeout,
            redactor=redactor,
            backend=backend,
        )

    def _new_token(self, token: str) -> None:
        """Redact the new access token, and stop looking for old ones: they expired, and every
        secret the redactor knows costs a search in every frame sent to a client."""
        self.redactor.add(token)
        self._recent_tokens.append(token)
        while len(self._recent_tokens) > KEPT_TOKENS:
            expired = self._recent_tokens.popleft()
            if expired not in self._recent_tokens and expired != self.api_key:
                self.redactor.discard(expired)

    async def headers(self, dialect: Dialect) -> dict[str, str]:
        """The handshake headers for one connection: the dialect's extras and the credential
        (an access token is always a Bearer token; a key goes where the dialect wants it)."""
        headers = dict(dialect.extra_headers)
        if self.tokens is not None:
            headers["Authorization"] = f"Bearer {await self.tokens.token()}"
        elif self.api_key:
            headers.update(dialect.key_headers(self.api_key))
        return headers

    async def connect(self, dialect: Dialect, client_query: Iterable[tuple[str, str]], *,
                      client_path: str | None = None) -> Transport:
        """Open the provider connection for one session; `UpstreamUnavailable` says why not. A
        Gemini client's API version (from its path) carries over to the upstream URL."""
        return await self._open(merged_url(dialect.upstream_url(self.url, client_path), client_query), dialect)

    async def connect_call(self, dialect: Dialect, call_id: str) -> Transport:
        """Open a sideband connection to a live call (`?call_id=`; GPT-Live: the session's
        `/attach` path): it sees the session's events and may send client events beside the
        call's own connection."""
        return await self._open(call_url(self.url, call_id, dialect), dialect)

    async def _open(self, url: str, dialect: Dialect) -> Transport:
        try:
            headers = await self.headers(dialect)
        except Exception as exc:
            raise UpstreamUnavailable(self.redactor(
                f"could not get an access token for the upstream {self.host}: {type(exc).__name__}: {exc}"
            )) from None
        try:
            return await self.backend.connect(url, headers=headers, max_frame_bytes=self.max_frame_bytes,
                                              open_timeout=self.open_timeout, user_agent=f"relay/{__version__}",
                                              logger=self._ws_logger)
        except HandshakeFailed as exc:
            if exc.status is not None:
                message = f"the upstream {self.host} refused the connection: HTTP {exc.status}"
                if exc.phrase:
                    message += f" {exc.phrase}"
                raise UpstreamUnavailable(self.redactor(message), exc.status) from None
            message = f"the upstream {self.host} failed the WebSocket handshake: {exc}"
        except TimeoutError:
            message = f"the upstream {self.host} did not complete the handshake within {self.open_timeout:g} s"
        except InvalidURL:
            message = f"the upstream URL for {self.host} is not a valid WebSocket URL"
        except OSError as exc:
            message = f"cannot reach the upstream {self.host}: {exc.strerror or exc}"
        raise UpstreamUnavailable(self.redactor(message))
