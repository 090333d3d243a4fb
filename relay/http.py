"""A small, strict HTTP/1.1 server and client on asyncio streams.

The relay needs plain HTTP in two places that do not justify a web framework: the mock upstream's
fake REST API (`/v1/realtime/calls/{call_id}/accept`) and the sidecar's webhook endpoint. Both
exchange small JSON bodies, so this module supports exactly that: one request per connection
(`Connection: close`), bodies framed by `Content-Length`, bounded header and body sizes, a read
timeout, and a `400` for anything malformed instead of an exception. The client additionally reads
chunked responses, because real servers send them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlsplit

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 1024 * 1024
READ_TIMEOUT = 10.0

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_FIELD_VALUE = re.compile(r"^[\t\x20-\x7e\x80-\xff]*$")


@dataclass(frozen=True)
class Request:
    """A parsed request. Header names are lower-case; `path` is the raw path without the query;
    `query` keeps the last value of a repeated parameter."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON (raises ValueError when it is not JSON)."""
        return json.loads(self.body.decode("utf-8"))


@dataclass
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @classmethod
    def from_json(cls, status: int, data: Any) -> Response:
        return cls(status, {"Content-Type": "application/json"}, json.dumps(data).encode())

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))

    def header(self, name: str) -> str | None:
        """A header value by case-insensitive name."""
        wanted = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == wanted), None)


Handler = Callable[[Request], Awaitable[Response]]


class HTTPError(Exception):
    """A request or response that breaks the protocol or a limit; carries the status to answer."""

    def __init__(self, status: HTTPStatus, detail: str) -> None:
        super().__init__(detail)
        self.status = status


def _parse_header_lines(lines: list[bytes]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw in lines:
        if raw[:1] in (b" ", b"\t"):
            raise HTTPError(HTTPStatus.BAD_REQUEST, "obsolete header line folding")
        name_bytes, sep, value_bytes = raw.partition(b":")
        name = name_bytes.decode("latin-1")
        value = value_bytes.decode("latin-1").strip(" \t")
        if not sep or not _TOKEN.match(name) or not _FIELD_VALUE.match(value):
            raise HTTPError(HTTPStatus.BAD_REQUEST, f"malformed header line {raw[:80]!r}")
        key = name.lower()
        if key in headers:
            if key in ("content-length", "host"):
                if headers[key] != value:
                    raise HTTPError(HTTPStatus.BAD_REQUEST, f"conflicting {key} headers")
                continue
            headers[key] = f"{headers[key]}, {value}"
        else:
            headers[key] = value
    return headers


async def _read_head(reader: asyncio.StreamReader, max_header_bytes: int) -> list[bytes] | None:
    """The start line and header lines, or None when the peer closed before sending anything."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise HTTPError(HTTPStatus.BAD_REQUEST, "connection closed inside the header") from exc
    except asyncio.LimitOverrunError as exc:
        raise HTTPError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "header too large") from exc
    if len(head) > max_header_bytes:
        raise HTTPError(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "header too large")
    return head[:-4].split(b"\r\n")


def _content_length(headers: Mapping[str, str], max_body_bytes: int) -> int:
    raw = headers.get("content-length")
    if raw is None:
        return 0
    if not raw.isdigit():
        raise HTTPError(HTTPStatus.BAD_REQUEST, "invalid Content-Length")
    length = int(raw)
    if length > max_body_bytes:
        raise HTTPError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body too large")
    return length


def _parse_request_head(lines: list[bytes]) -> tuple[str, str, dict[str, str], dict[str, str]]:
    try:
        method, target, version = lines[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(HTTPStatus.BAD_REQUEST, "malformed request line") from exc
    if not _TOKEN.match(method) or not target.startswith("/") or version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HTTPError(HTTPStatus.BAD_REQUEST, "malformed request line")
    headers = _parse_header_lines(lines[1:])
    if "transfer-encoding" in headers:
        raise HTTPError(HTTPStatus.NOT_IMPLEMENTED, "only Content-Length bodies are supported")
    path, _, query_string = target.partition("?")
    query = dict(parse_qsl(query_string, keep_blank_values=True))
    return method, path, query, headers


def _encode_response(response: Response, head_only: bool) -> bytes:
    try:
        reason = HTTPStatus(response.status).phrase
    except ValueError:
        reason = "Unknown"
    lines = [f"HTTP/1.1 {response.status} {reason}"]
    for name, value in response.headers.items():
        if name.lower() not in ("content-length", "connection", "transfer-encoding"):
            lines.append(f"{name}: {value}")
    lines.append(f"Content-Length: {len(response.body)}")
    lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + response.body


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        await writer.wait_closed()
    except (ConnectionError, OSError):
        pass


def _error_response(status: HTTPStatus, detail: str) -> Response:
    return Response.from_json(status, {"error": {"message": detail, "type": "invalid_request_error"}})


async def _serve_connection(
    handler: Handler,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    max_header_bytes: int,
    max_body_bytes: int,
    read_timeout: float,
) -> None:
    method = ""
    try:
        try:
            async with asyncio.timeout(read_timeout):
                lines = await _read_head(reader, max_header_bytes)
                if lines is None:
                    return
                method, path, query, headers = _parse_request_head(lines)
                body = await reader.readexactly(_content_length(headers, max_body_bytes))
        except HTTPError as exc:
            response = _error_response(exc.status, str(exc))
        except (TimeoutError, asyncio.IncompleteReadError):
            return
        else:
            try:
                response = await handler(Request(method, path, query, headers, body))
            except Exception:
                log.exception("HTTP handler failed for %s %s", method, path)
                response = _error_response(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error")
        writer.write(_encode_response(response, head_only=method == "HEAD"))
        await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        await _close(writer)


async def serve_http(
    handler: Handler,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    max_header_bytes: int = MAX_HEADER_BYTES,
    max_body_bytes: int = MAX_BODY_BYTES,
    read_timeout: float = READ_TIMEOUT,
) -> asyncio.Server:
    """Start serving; returns the asyncio server (close it with `close()` + `wait_closed()`, or
    use it as an async context manager). Read the bound port from `server.sockets[0]`."""

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _serve_connection(handler, reader, writer, max_header_bytes, max_body_bytes, read_timeout)

    return await asyncio.start_server(on_connection, host, port, limit=max_header_bytes)


async def _read_chunked(reader: asyncio.StreamReader, max_body_bytes: int) -> bytes:
    body = bytearray()
    while True:
        size_line = await reader.readuntil(b"\r\n")
        try:
            size = int(size_line.split(b";", 1)[0].strip(), 16)
        except ValueError as exc:
            raise HTTPError(HTTPStatus.BAD_GATEWAY, "malformed chunk size") from exc
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailer fields are ignored
            return bytes(body)
        if len(body) + size > max_body_bytes:
            raise HTTPError(HTTPStatus.BAD_GATEWAY, "response body too large")
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise HTTPError(HTTPStatus.BAD_GATEWAY, "malformed chunk")


async def _read_response(reader: asyncio.StreamReader, method: str, max_body_bytes: int) -> Response:
    lines = await _read_head(reader, MAX_HEADER_BYTES)
    if lines is None:
        raise HTTPError(HTTPStatus.BAD_GATEWAY, "connection closed before a response")
    parts = lines[0].decode("latin-1").split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HTTPError(HTTPStatus.BAD_GATEWAY, f"malformed status line {lines[0][:80]!r}")
    status = int(parts[1])
    headers = _parse_header_lines(lines[1:])
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        body = b""
    elif "chunked" in headers.get("transfer-encoding", "").lower():
        body = await _read_chunked(reader, max_body_bytes)
    elif "content-length" in headers:
        body = await reader.readexactly(_content_length(headers, max_body_bytes))
    else:  # delimited by the end of the connection
        buffer = bytearray()
        while chunk := await reader.read(64 * 1024):
            buffer += chunk
            if len(buffer) > max_body_bytes:
                raise HTTPError(HTTPStatus.BAD_GATEWAY, "response body too large")
        body = bytes(buffer)
    return Response(status, headers, body)


async def http_request(
    method: str,
    url: str,
    headers: Mapping[str, str] | None = None,
    body: bytes = b"",
    timeout: float = 10.0,
    *,
    max_body_bytes: int = 16 * MAX_BODY_BYTES,
) -> Response:
    """Send one request and read the whole response (header names lower-case).

    Raises TimeoutError, OSError for connection failures, and HTTPError for a malformed
    response."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = parts.netloc.rpartition("@")[2]
    request_headers = {"Host": host_header, "User-Agent": "relay", "Accept": "*/*"}
    request_headers.update(headers or {})
    request_headers["Content-Length"] = str(len(body))
    request_headers["Connection"] = "close"
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in request_headers.items())
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(
            parts.hostname,
            port,
            ssl=ssl.create_default_context() if tls else None,
            limit=MAX_HEADER_BYTES,
        )
        try:
            writer.write(head.encode("latin-1") + b"\r\n" + body)
            await writer.drain()
            try:
                return await _read_response(reader, method, max_body_bytes)
            except asyncio.IncompleteReadError as exc:
                raise HTTPError(HTTPStatus.BAD_GATEWAY, "connection closed inside the response") from exc
        finally:
            await _close(writer)
