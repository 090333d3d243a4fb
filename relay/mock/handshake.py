"""What the mock provider answers a WebSocket handshake, as the real providers do: its paths, its
key in every form a client may present it (`Authorization: Bearer`, `api-key`, Azure's `?api-key=`,
the token subprotocol, xAI's `xai-client-secret.`; Gemini's `x-goog-api-key` and `?key=`), Azure's
and Voice Live's `api-version` rules (Voice Live at `/voice-live/realtime`, on the beta wire), a
sideband join by `call_id`. Pure decisions over the request, apart from the sockets
(`MockUpstream._process_request` applies them).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

from relay.dialects.base import TOKEN_SUBPROTOCOL
from relay.mock.gemini import GEMINI
from relay.mock.gemini import PATHS as GEMINI_PATHS

if TYPE_CHECKING:
    from relay.mock.session import MockSession

PATHS = ("/v1/realtime", "/openai/v1/realtime", "/openai/realtime")
PREVIEW_PATH = "/openai/realtime"
VOICE_LIVE_PATH = "/voice-live/realtime"
XAI_SUBPROTOCOL = "xai-client-secret."


@dataclass(frozen=True)
class Route:
    """What the handshake decided, handed from `process_request` to the connection handler."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    auth: str | None
    session: MockSession | None
    beta: bool


@dataclass(frozen=True)
class Refusal:
    """The handshake is refused with this status and body."""

    status: HTTPStatus
    body: str


def route_handshake(dialect: str, api_key: str | None, target: str, headers: dict[str, str],
                    offered: Sequence[str], find_session: Callable[[str], MockSession | None]) -> Route | Refusal:
    """Where a handshake for `target` (path and query) goes, or why it is refused. `headers` are
    lower-cased; `offered` the subprotocols; `find_session` finds a call by its id."""
    parts = urlsplit(target)
    path = parts.path.rstrip("/")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if dialect == GEMINI:
        return _gemini_route(api_key, path, query, headers)
    if path not in ((VOICE_LIVE_PATH,) if dialect == "voicelive" else PATHS):
        return Refusal(HTTPStatus.NOT_FOUND, f"No realtime endpoint at {path or '/'}.\n")
    allowed, auth = authenticate(dialect, api_key, headers, query, offered)
    if not allowed:
        return Refusal(HTTPStatus.UNAUTHORIZED, "Incorrect or missing API key.\n")
    if path in (PREVIEW_PATH, VOICE_LIVE_PATH) and not query.get("api-version"):
        return Refusal(HTTPStatus.BAD_REQUEST, "Missing required query parameter 'api-version'.\n")
    if path == "/openai/v1/realtime" and "api-version" in query:
        return Refusal(HTTPStatus.BAD_REQUEST, "The v1 API does not take an 'api-version' parameter.\n")
    session = None
    if query.get("call_id"):
        session = find_session(query["call_id"])
        if session is None or session.ended:
            return Refusal(HTTPStatus.NOT_FOUND, f"No call with id '{query['call_id']}'.\n")
    elif not (query.get("model") or query.get("deployment")):
        return Refusal(HTTPStatus.BAD_REQUEST, "Missing required query parameter 'model'.\n")
    beta = path in (PREVIEW_PATH, VOICE_LIVE_PATH) or "realtime=v1" in headers.get("openai-beta", "")
    return Route(path, query, headers, auth, session, beta)


def authenticate(dialect: str, api_key: str | None, headers: dict[str, str], query: dict[str, str],
                 offered: Sequence[str]) -> tuple[bool, str | None]:
    """Whether the handshake may proceed, and which credential form the client used."""
    presented: list[tuple[str, str]] = []
    authorization = headers.get("authorization", "")
    if authorization.lower().startswith("bearer "):
        presented.append(("bearer", authorization[7:].strip()))
    if "api-key" in headers:
        presented.append(("api-key", headers["api-key"]))
    if dialect in ("azure", "foundry", "voicelive") and "api-key" in query:
        presented.append(("api-key-query", query["api-key"]))
    prefixes = (TOKEN_SUBPROTOCOL, XAI_SUBPROTOCOL) if dialect == "xai" else (TOKEN_SUBPROTOCOL,)
    presented += [("subprotocol", p[len(prefix):]) for p in offered for prefix in prefixes if p.startswith(prefix)]
    if api_key is None:
        return True, presented[0][0] if presented else None
    for form, value in presented:
        if hmac.compare_digest(value.encode(), api_key.encode()):
            return True, form
    return False, None


def _gemini_route(api_key: str | None, path: str, query: dict[str, str], headers: dict[str, str]) -> Route | Refusal:
    """Gemini Live: the BidiGenerateContent paths, the key as `x-goog-api-key` or `?key=`; the
    model comes later, in the setup message."""
    if path not in GEMINI_PATHS:
        return Refusal(HTTPStatus.NOT_FOUND, f"No BidiGenerateContent endpoint at {path or '/'}.\n")
    presented = [(form, value) for form, value in (("x-goog-api-key", headers.get("x-goog-api-key")),
                                                   ("key-query", query.get("key"))) if value is not None]
    auth = presented[0][0] if presented else None
    if api_key is not None:
        matching = [form for form, value in presented if hmac.compare_digest(value.encode(), api_key.encode())]
        if not matching:
            return Refusal(HTTPStatus.FORBIDDEN, "API key not valid. Please pass a valid API key.\n")
        auth = matching[0]
    return Route(path, query, headers, auth, None, False)
