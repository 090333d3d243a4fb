"""A handshake as the relay's rules see it, whichever library parsed it: the `Request` (its line,
headers and peer) and the `Answer` to send instead of opening a WebSocket. The rules that decide
(relay/edges/handshake.py, the live inspector's routes) are functions of one and return the
other; each transport's server applies them (relay/transports/).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit


class Headers:
    """Request headers in their order, names compared without case (several values of one name
    stay apart)."""

    def __init__(self, items: Iterable[tuple[str, str]] = ()) -> None:
        self._items = tuple(items)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({list(self._items)!r})"

    def get_all(self, name: str) -> list[str]:
        """Every value of `name`, in order."""
        name = name.lower()
        return [value for key, value in self._items if key.lower() == name]

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of `name`."""
        values = self.get_all(name)
        return values[0] if values else default


@dataclass(frozen=True)
class Request:
    """A request to a server's port: a WebSocket handshake, a health check or a page. `method`
    and `version` are what the client sent (a transport reads HEAD and HTTP/1.0 as well);
    `target` is the path with its query; `remote` is `host:port` of the peer."""

    target: str
    headers: Headers = field(default_factory=Headers)
    method: str = "GET"
    version: str = "HTTP/1.1"
    remote: str = "?"

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> list[tuple[str, str]]:
        return parse_qsl(urlsplit(self.target).query, keep_blank_values=True)

    @property
    def upgrade(self) -> bool:
        """The client asks for a WebSocket (`Upgrade: websocket`)."""
        return any("websocket" in value.lower() for value in self.headers.get_all("Upgrade"))

    @property
    def subprotocols(self) -> list[str]:
        """The subprotocols offered, in order."""
        return [name.strip() for value in self.headers.get_all("Sec-WebSocket-Protocol")
                for name in value.split(",") if name.strip()]


@dataclass(frozen=True)
class Answer:
    """An HTTP answer sent in place of a WebSocket. Its `headers` are sent as given (the
    transport adds `Content-Length` from the body unless they carry one, and the server's own
    `Date`, `Server` and `Connection: close`)."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    @classmethod
    def json(cls, status: int, body: Any, *headers: tuple[str, str]) -> Answer:
        """A JSON body (never cached)."""
        return cls(status, (("Content-Type", "application/json"), ("Cache-Control", "no-store"), *headers),
                   (json.dumps(body) + "\n").encode())

    @classmethod
    def error(cls, status: HTTPStatus, message: str, **headers: str) -> Answer:
        """The relay's refusal: `{"error": {"type", "code", "message"}}` as a provider shapes its
        own, with `headers` (`Allow`, `WWW-Authenticate`, ...)."""
        return cls.json(status.value, {"error": {"type": "invalid_request_error",
                                                 "code": status.phrase.lower().replace(" ", "_"),
                                                 "message": message}},
                        *headers.items())

    def for_head(self) -> Answer:
        """The answer to HEAD: the same status and headers (`Content-Length` included), no body."""
        return Answer(self.status, (*self.headers, ("Content-Length", str(len(self.body)))), b"")
