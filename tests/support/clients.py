"""Clients on real sockets (everything on 127.0.0.1): raw realtime and Gemini Live clients that keep
what they received, the official OpenAI SDK connected to the mock, a one-shot HTTP GET, one HTTP
request through httpx, and the self-signed certificate a TLS client trusts."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from relay.dialects.base import TOKEN_SUBPROTOCOL
from relay.mock import MockUpstream
from relay.mock.gemini import URL_PATH as GEMINI_PATH
from tests.support.keys import GEMINI_KEY, RELAY_TOKEN

TIMEOUT = 20.0
"""How long a test waits for an event before it fails: a guard against hangs, not a speed limit
(a shared 2-core machine under load can take seconds where it usually takes milliseconds)."""
GEMINI_MODEL = "models/gemini-live-2.5-flash-preview"
Message = dict[str, Any]


class _Client:
    """A raw WebSocket client that keeps every frame and message it received, and the close."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[str | bytes] = []
        self.messages: list[Message] = []

    async def send(self, message: Message | str) -> None:
        await self.ws.send(message if isinstance(message, str) else json.dumps(message))

    async def receive(self) -> Message:
        frame = await self.ws.recv()
        self.frames.append(frame)
        message = json.loads(frame)
        self.messages.append(message)
        return message

    async def wait_for(self, predicate: Callable[[Message], bool], timeout: float = TIMEOUT) -> Message:
        """Read messages until one satisfies `predicate` (the ones read on the way are kept)."""
        async with asyncio.timeout(timeout):
            while True:
                message = await self.receive()
                if predicate(message):
                    return message

    async def closed(self, timeout: float = TIMEOUT) -> tuple[int, str]:
        """Read until the peer closes the socket; the close code and reason received."""
        async with asyncio.timeout(timeout):
            try:
                while True:
                    await self.receive()
            except ConnectionClosed as closed:
                assert closed.rcvd is not None, f"no close frame received: {closed!r}"
                return closed.rcvd.code, closed.rcvd.reason


class RealtimeClient(_Client):
    """A realtime client: events in text frames."""

    @property
    def events(self) -> list[Message]:
        return self.messages

    async def receive(self) -> Message:
        event = await super().receive()
        assert isinstance(self.frames[-1], str)
        return event

    async def wait_type(self, event_type: str, timeout: float = TIMEOUT) -> Message:
        return await self.wait_for(lambda e: e.get("type") == event_type, timeout)


@asynccontextmanager
async def realtime_client(server_or_url: Any, *, path: str = "/v1/realtime?model=gpt-realtime",
                          token: str | None = RELAY_TOKEN, headers: dict[str, str] | None = None,
                          **options: Any) -> AsyncIterator[RealtimeClient]:
    """A realtime client of a relay (anything with a `port`) or of a `ws://host:port` base URL,
    sending the relay token unless `token` is None."""
    base = server_or_url if isinstance(server_or_url, str) else f"ws://127.0.0.1:{server_or_url.port}"
    all_headers = dict(headers or {})
    if token is not None:
        all_headers.setdefault("Authorization", f"Bearer {token}")
    # No receive limit by default: a test that stops reading early must not stall the close.
    options.setdefault("max_queue", None)
    async with connect(base + path, additional_headers=all_headers, open_timeout=TIMEOUT, close_timeout=1,
                       **options) as ws:
        yield RealtimeClient(ws)


class GeminiClient(_Client):
    """A Gemini Live client: messages in text or binary frames (`binary` says which, per message)."""

    @property
    def binary(self) -> list[bool]:
        return [isinstance(frame, bytes) for frame in self.frames]

    async def setup(self, **fields: Any) -> Message:
        await self.send({"setup": {"model": GEMINI_MODEL, **fields}})
        return await self.wait_for(lambda m: "setupComplete" in m)

    async def say(self, text: str) -> None:
        await self.send({"clientContent": {"turns": [{"role": "user", "parts": [{"text": text}]}],
                                           "turnComplete": True}})

    async def answer(self, call_id: str, name: str, output: Any, **extra: Any) -> None:
        await self.send({"toolResponse": {"functionResponses": [
            {"id": call_id, "name": name, "response": {"output": output}, **extra}]}})

    async def turn(self, timeout: float = TIMEOUT) -> list[Message]:
        """The messages up to the next turnComplete or toolCall."""
        start = len(self.messages)
        await self.wait_for(lambda m: "toolCall" in m or m.get("serverContent", {}).get("turnComplete") is True,
                            timeout)
        return self.messages[start:]


@asynccontextmanager
async def gemini_client(base_url: str, *, path: str = GEMINI_PATH, key: str | None = GEMINI_KEY,
                        query: str = "") -> AsyncIterator[GeminiClient]:
    headers = {"x-goog-api-key": key} if key is not None else {}
    async with connect(base_url + path + query, additional_headers=headers, open_timeout=TIMEOUT,
                       close_timeout=1, max_queue=None) as ws:
        yield GeminiClient(ws)


MockFactory = Callable[..., Awaitable[MockUpstream]]
"""What the mock tests' `make_mock` fixture gives: start a mock with these MockUpstream arguments."""


class InspectorFeed(_Client):
    """A page's connection to the live inspector's feed, holding what the page would: the session
    list, and the watched session's events and frames (its snapshot, then its deltas applied)."""

    def __init__(self, ws: ClientConnection) -> None:
        super().__init__(ws)
        self.sessions: Message = {"live": [], "recent": []}
        self.shown: str | None = None
        self.snapshot: Message | None = None
        self.events: dict[str, Message] = {}
        self.model_frames: list[Any] = []

    async def receive(self) -> Message:
        message = await super().receive()
        kind = message.get("type")
        if kind == "sessions":
            self.sessions = {"live": message["live"], "recent": message["recent"]}
        elif kind == "snapshot":
            self.shown, self.snapshot = message["session"], message["model"]
            self.events = {event["id"]: event for event in message["model"]["events"]}
            self.model_frames = list(message["model"]["frames"])
        elif kind == "delta" and message["session"] == self.shown:
            delta = message["delta"]
            del self.model_frames[delta["frames_from"]:]
            self.model_frames += delta["frames"]
            self.events.update((event["id"], event) for event in delta["events"])
        return message

    async def watch(self, session_id: str) -> Message:
        """Open a session; its snapshot (or why there is none)."""
        await self.send({"type": "watch", "session": session_id})
        return await self.wait_for(lambda m: m.get("session") == session_id
                                   and m["type"] in ("snapshot", "unavailable", "error"))

    def calls(self) -> dict[str, Message]:
        """The watched session's tool calls by call id."""
        return {e["call_id"]: e for e in self.events.values() if e["kind"] == "call"}

    async def until(self, check: Callable[[InspectorFeed], bool], timeout: float = TIMEOUT) -> None:
        """Read until what the feed holds satisfies `check`."""
        if not check(self):
            await self.wait_for(lambda _: check(self), timeout)


@asynccontextmanager
async def inspector_feed(server: Any, *, token: str | None = RELAY_TOKEN, path: str = "/inspector/feed",
                         origin: str | None = None) -> AsyncIterator[InspectorFeed]:
    """The live inspector's feed of a relay (anything with a `port`) or of a `ws://host:port`,
    opened as the page opens it (the token as a subprotocol), once the session list has come."""
    base = server if isinstance(server, str) else f"ws://127.0.0.1:{server.port}"
    protocols = ["relay-inspector", *([f"{TOKEN_SUBPROTOCOL}{token}"] if token is not None else [])]
    async with connect(base + path, subprotocols=protocols,  # type: ignore[arg-type]
                       origin=origin, open_timeout=TIMEOUT, close_timeout=1, max_size=None, max_queue=None) as ws:
        feed = InspectorFeed(ws)
        await feed.wait_for(lambda m: m["type"] == "sessions")
        yield feed


class RawClient:
    """A plain WebSocket client of the mock, for what the SDK cannot express; events are dicts."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws

    async def send(self, event: Message | str) -> None:
        await self.ws.send(event if isinstance(event, str) else json.dumps(event))

    async def recv(self) -> Message:
        return json.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT))

    async def until(self, event_type: str) -> list[Message]:
        """The events up to and including the first of `event_type`."""
        events = []
        while True:
            events.append(await self.recv())
            if events[-1]["type"] == event_type:
                return events

    async def ask(self, event: Message | str, reply_type: str) -> list[Message]:
        await self.send(event)
        return await self.until(reply_type)


@asynccontextmanager
async def raw_connect(mock: MockUpstream, query: str = "model=gpt-realtime", *, path: str = "/v1/realtime",
                      headers: dict[str, str] | None = None, subprotocols: list[str] | None = None,
                      skip_created: bool = True) -> AsyncIterator[RawClient]:
    url = f"{mock.base_url}{path}?{query}" if query else f"{mock.base_url}{path}"
    async with connect(url, additional_headers=headers, subprotocols=subprotocols, max_size=None) as ws:  # type: ignore[arg-type]
        client = RawClient(ws)
        if skip_created:
            assert (await client.recv())["type"] == "session.created"
        yield client


@asynccontextmanager
async def sdk_connect(mock: MockUpstream, **options: Any) -> AsyncIterator[AsyncRealtimeConnection]:
    """The official SDK connected to the mock; the first event (session.created) is consumed."""
    client = AsyncOpenAI(api_key="sk-test", websocket_base_url=mock.base_url + "/v1", max_retries=0)
    async with client.realtime.connect(model="gpt-realtime", **options) as connection:
        first = await asyncio.wait_for(connection.recv(), TIMEOUT)
        assert first.type == "session.created"
        yield connection


async def sdk_until(connection: AsyncRealtimeConnection, event_type: str) -> list[Any]:
    """Typed SDK events up to and including the first of `event_type`."""
    events = []
    while True:
        event = await asyncio.wait_for(connection.recv(), TIMEOUT)
        events.append(event)
        if event.type == event_type:
            return events


async def http_get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET over a fresh connection (the relay closes it after the response)."""
    lines = "".join(f"{name}: {value}\r\n" for name, value in {"Host": f"127.0.0.1:{port}", **(headers or {})}.items())
    return await raw_http(port, f"GET {path} HTTP/1.1\r\n{lines}\r\n".encode())


async def raw_http(port: int, *chunks: bytes) -> tuple[int, dict[str, str], bytes]:
    """A raw HTTP request, written in `chunks` (each flushed before the next is written),
    over a fresh connection; the status, headers (lower-case names) and body of the response,
    read until the server closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
    async with asyncio.timeout(TIMEOUT):
        raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status_line.split()[1]), headers, body


async def http_request(method: str, url: str, headers: dict[str, str] | None = None, body: bytes = b"",
                       timeout: float = TIMEOUT) -> httpx.Response:
    """One request through httpx on a fresh client (the REST API of the mock, a webhook endpoint).
    Plain HTTP on loopback only: the client loads no CA bundle (`verify=False`) and reads no proxy
    settings, so it costs next to nothing to make."""
    async with httpx.AsyncClient(timeout=timeout, verify=False, trust_env=False) as client:
        return await client.request(method, url, headers=headers, content=body)


def parse_exposition(text: str) -> dict[str, float]:
    """Prometheus text exposition (what /metrics serves) as {sample with labels: value}."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


@dataclass(frozen=True)
class Certificate:
    """A self-signed certificate for 127.0.0.1 (the google-genai SDK connects with wss:// whatever
    base URL it is given)."""

    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts only this certificate."""
        return ssl.create_default_context(cafile=str(self.cert))

    @classmethod
    def create(cls, directory: Path) -> Certificate:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "relay test")])
        now = datetime.datetime.now(datetime.timezone.utc)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        cert_path, key_path = directory / "cert.pem", directory / "key.pem"
        cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return cls(cert_path, key_path)
