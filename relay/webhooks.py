"""`relay sidecar`: the webhook entry. The provider announces an incoming SIP call with a signed
webhook (`realtime.call.incoming`); the relay checks the signature, accepts the call with its
tools through the provider's REST API, answers 200, and attaches a sidecar to the call.

    phone --SIP--> provider --POST /webhooks/openai--> SidecarServer --accept (REST)--> provider
                       ^                                     |
                       +------ws ?call_id=... (one Sidecar per call, in the server's task group)

Signatures follow Standard Webhooks as OpenAI applies them: headers `webhook-id`,
`webhook-timestamp` (Unix seconds) and `webhook-signature` (space-separated `v1,<base64>`
entries), each entry an HMAC-SHA256 of `{id}.{timestamp}.{body}`. The key is the secret from
`OPENAI_WEBHOOK_SECRET`: base64-decoded after a `whsec_` prefix, else its UTF-8 bytes (as in the
`openai` package). A delivery more than five minutes old (or ahead) is refused, and a delivery
repeated with the same `webhook-id` is answered 200 and otherwise ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote, urlsplit

import anyio
import anyio.abc

from relay.http import HTTPError, Request, Response, http_request, serve_http
from relay.config import ConfigError, SidecarConfig
from relay.policy import DEFAULT_DRAIN_SECONDS
from relay.sidecar import Sidecar, SidecarRuntime
from relay.upstream import UpstreamUnavailable, display_host

log = logging.getLogger("relay.webhooks")

WEBHOOK_PATH = "/webhooks/openai"
INCOMING_CALL = "realtime.call.incoming"
WEBHOOK_SECRET_ENV = "OPENAI_WEBHOOK_SECRET"
SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE = 300.0
DEFAULT_REST_BASE = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-realtime"
DEFAULT_PORT = 8080
REMEMBERED_DELIVERIES = 4096
CREDENTIAL_HEADERS = ("Authorization", "api-key")


# ---- Standard Webhooks signatures ------------------------------------------------------------

class InvalidSignature(Exception):
    """The delivery is not signed with the secret, or is too old or too far ahead; the message
    says which."""


def signing_key(secret: str) -> bytes:
    """The HMAC key of a webhook secret: `whsec_<base64>` is decoded, any other string is used as
    its UTF-8 bytes. Raises ValueError for a `whsec_` secret that is not base64."""
    if secret.startswith(SECRET_PREFIX):
        try:
            return base64.b64decode(secret[len(SECRET_PREFIX):], validate=True)
        except binascii.Error:
            raise ValueError(f"the webhook secret starts with {SECRET_PREFIX} but the rest is not base64") from None
    return secret.encode()


def signature(key: bytes, webhook_id: str, timestamp: str, body: bytes) -> str:
    """One `webhook-signature` entry: `v1,` and the base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`."""
    mac = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode("ascii")


def signed_headers(secret: str, body: bytes, *, webhook_id: str, timestamp: int) -> dict[str, str]:
    """The headers a sender puts on a delivery: to test a deployment's endpoint end to end."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(signing_key(secret), webhook_id, str(timestamp), body),
    }


def verify(key: bytes, headers: Mapping[str, str], body: bytes, *, now: float,
           tolerance: float = DEFAULT_TOLERANCE) -> str:
    """Check a delivery (header names in lower case) and return its `webhook-id`; raises
    `InvalidSignature`. Any one matching `v1` entry is enough, so a secret can be rotated."""
    webhook_id = headers.get("webhook-id")
    timestamp = headers.get("webhook-timestamp")
    signatures = headers.get("webhook-signature")
    if not webhook_id or not timestamp or not signatures:
        missing = [name for name, value in (("webhook-id", webhook_id), ("webhook-timestamp", timestamp),
                                            ("webhook-signature", signatures)) if not value]
        raise InvalidSignature(f"missing header {', '.join(missing)}")
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise InvalidSignature("webhook-timestamp is not a Unix time in seconds") from None
    if now - sent_at > tolerance:
        raise InvalidSignature(f"the delivery is older than {tolerance:g} s")
    if sent_at - now > tolerance:
        raise InvalidSignature(f"the delivery is dated more than {tolerance:g} s ahead")
    expected = signature(key, webhook_id, timestamp, body).encode()
    if not any(hmac.compare_digest(expected, entry.encode()) for entry in signatures.split()):
        raise InvalidSignature("no webhook-signature entry matches the secret")
    return webhook_id


class RecentIds:
    """A bounded memory of the ids seen lately; the oldest is forgotten first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, item: object) -> bool:
        return item in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, item: str) -> bool:
        """Remember `item`; False when it was already remembered."""
        if item in self._ids:
            return False
        self._ids[item] = None
        while len(self._ids) > self.limit:
            self._ids.popitem(last=False)
        return True

    def discard(self, item: str) -> None:
        self._ids.pop(item, None)


# ---- the server --------------------------------------------------------------------------------

class AcceptFailed(Exception):
    """The provider did not accept the call; the message says why (safe to log)."""


@dataclass
class SidecarServerConfig(SidecarConfig):
    """`relay sidecar`: the sidecar settings, plus where to listen, the REST API that accepts
    calls, and the session each accepted call gets (`model`, `instructions`, the tools).
    `webhook_secret=None` reads `OPENAI_WEBHOOK_SECRET`."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    rest_base: str = DEFAULT_REST_BASE
    webhook_secret: str | None = None
    model: str = DEFAULT_MODEL
    instructions: str | None = None
    tolerance: float = DEFAULT_TOLERANCE
    accept_timeout: float = 10.0
    drain_seconds: float = DEFAULT_DRAIN_SECONDS


class SidecarServer:
    """Serves `POST /webhooks/openai` and `GET /healthz`. `await server.run()` serves until
    `request_stop()`; `await task_group.start(server.run)` returns the server once it listens.
    Every attached call is a task of the server's task group; on stop, calls go on for up to
    `drain_seconds`, then the rest are detached."""

    def __init__(self, config: SidecarServerConfig, *, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.runtime = SidecarRuntime(config)
        secret = config.webhook_secret if config.webhook_secret is not None else os.environ.get(WEBHOOK_SECRET_ENV, "")
        if not secret.strip():
            raise ConfigError(f"no webhook secret: set {WEBHOOK_SECRET_ENV} to the secret of the webhook endpoint")
        try:
            self._key = signing_key(secret.strip())
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.runtime.redactor.add(secret.strip())
        if urlsplit(config.rest_base).scheme not in ("http", "https"):
            raise ConfigError(f"--rest-base must be an http:// or https:// URL, not {config.rest_base!r}")
        self.calls: dict[str, Sidecar] = {}
        self._accepting: set[str] = set()
        self._deliveries = RecentIds(REMEMBERED_DELIVERIES)
        self._clock = clock
        self._address: tuple[str, int] | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._stop_event: anyio.Event | None = None
        self._stop_wanted = False
        self._calls_changed: anyio.Event | None = None
        self.draining = False

    # ---- public surface ----------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._address is None:
            raise RuntimeError("the server is not listening")
        return self._address[1]

    @property
    def url(self) -> str:
        """The webhook URL to register with the provider (behind your TLS front)."""
        if self._address is None:
            raise RuntimeError("the server is not listening")
        host = self._address[0]
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}{WEBHOOK_PATH}"

    def health(self) -> dict[str, Any]:
        return self.runtime.health_fields(draining=self.draining, calls=len(self.calls))

    def request_stop(self) -> None:
        """Stop taking webhooks and let attached calls drain (what SIGTERM does)."""
        self._stop_wanted = True
        if self._stop_event is not None:
            self._stop_event.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[SidecarServer] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve until `request_stop()` (then drain) or cancellation (then the calls'
        sidebands are closed at once). Raises OSError when it cannot listen."""
        config = self.config
        self._stop_event = anyio.Event()
        if self._stop_wanted:
            self._stop_event.set()
        http_server = await serve_http(self._handle, config.host, config.port)
        self._address = http_server.sockets[0].getsockname()[:2]
        try:
            async with anyio.create_task_group() as group:
                self._task_group = group
                log.info("listening on %s", self.url, extra={
                    "url": self.url, "upstream": self.runtime.upstream.host, "rest": display_host(config.rest_base),
                    "dialect": self.runtime.dialect.name, "tools": self.runtime.tools.names, "pid": os.getpid()})
                task_status.started(self)
                await self._stop_event.wait()
                self.draining = True
                http_server.close()   # no new deliveries; the provider retries them elsewhere
                await self._drain(group)
        finally:
            self._task_group = None
            http_server.close()
            with anyio.CancelScope(shield=True):
                await http_server.wait_closed()
            log.info("stopped")

    async def _drain(self, group: anyio.abc.TaskGroup) -> None:
        if self.calls and self.config.drain_seconds > 0:
            log.info("draining %d attached calls for up to %g s", len(self.calls), self.config.drain_seconds,
                     extra={"calls": len(self.calls), "drain_seconds": self.config.drain_seconds})
            with anyio.move_on_after(self.config.drain_seconds):
                while self.calls:
                    self._calls_changed = anyio.Event()
                    await self._calls_changed.wait()
        for sidecar in list(self.calls.values()):
            group.start_soon(sidecar.stop, "relay shutting down")

    # ---- HTTP --------------------------------------------------------------------------
    async def _handle(self, request: Request) -> Response:
        if request.path == "/healthz":
            if request.method not in ("GET", "HEAD"):
                return _error(405, f"{request.method} not allowed on /healthz; use GET", "method_not_allowed")
            return Response.from_json(200, self.health())
        if request.path != WEBHOOK_PATH:
            return _error(404, f"no endpoint at {request.path}; webhooks go to {WEBHOOK_PATH}", "not_found")
        if request.method != "POST":
            return _error(405, f"{request.method} not allowed; webhooks are POSTed", "method_not_allowed")
        return await self._webhook(request)

    async def _webhook(self, request: Request) -> Response:
        try:
            delivery = verify(self._key, request.headers, request.body, now=self._clock(),
                              tolerance=self.config.tolerance)
        except InvalidSignature as exc:
            log.warning("webhook refused: %s", exc, extra={"webhook_id": request.headers.get("webhook-id")})
            return _error(400, f"invalid webhook signature: {exc}", "invalid_signature")
        try:
            event = request.json()
        except ValueError:
            event = None
        if not isinstance(event, dict):
            return _error(400, "the body is not a JSON object", "invalid_json")
        fields = {"webhook_id": delivery, "event_type": event.get("type")}
        if delivery in self._deliveries:
            log.info("webhook delivered again; ignored", extra=fields)
            return Response(200)
        if event.get("type") != INCOMING_CALL:
            self._deliveries.add(delivery)
            log.info("webhook ignored: not an incoming call", extra=fields)
            return Response(200)
        data = event.get("data")
        call_id = data.get("call_id") if isinstance(data, dict) else None
        if not isinstance(call_id, str) or not call_id:
            return _error(400, f"{INCOMING_CALL} without data.call_id", "invalid_event")
        fields["realtime_call_id"] = call_id
        if self.draining or self._task_group is None:
            return _error(503, "not serving calls now; deliver again later", "unavailable")
        if call_id in self.calls or call_id in self._accepting:
            self._deliveries.add(delivery)
            log.info("webhook for a call already attached; ignored", extra=fields)
            return Response(200)
        self._deliveries.add(delivery)
        self._accepting.add(call_id)
        try:
            await self.accept(call_id)
        except AcceptFailed as exc:
            self._deliveries.discard(delivery)   # a later delivery of it may succeed
            log.error("cannot accept the call: %s", exc, extra=fields)
            return _error(502, str(exc), "accept_failed")
        finally:
            self._accepting.discard(call_id)
        if self._task_group is None:   # the server stopped while the provider accepted the call
            log.warning("call accepted, but the server has stopped: not attached", extra=fields)
            return _error(503, "not serving calls now", "unavailable")
        log.info("call accepted", extra=fields)
        self._attach(call_id)
        return Response(200)

    # ---- calls -------------------------------------------------------------------------
    def session_config(self) -> dict[str, Any]:
        """The GA session an accepted call gets: the model, the instructions, the relay's tools."""
        session: dict[str, Any] = {"type": "realtime", "model": self.config.model}
        if self.config.instructions is not None:
            session["instructions"] = self.config.instructions
        if len(self.runtime.tools):
            session["tools"] = self.runtime.tools.definitions()
        return session

    async def accept(self, call_id: str) -> None:
        """Accept the call through the provider's REST API (`POST .../realtime/calls/{id}/accept`)
        with the provider key; raises `AcceptFailed`."""
        runtime = self.runtime
        url = f"{self.config.rest_base.rstrip('/')}/realtime/calls/{quote(call_id, safe='')}/accept"
        host = display_host(self.config.rest_base)
        try:
            credentials = await runtime.upstream.headers(runtime.dialect)
        except Exception as exc:
            raise AcceptFailed(runtime.redactor(f"could not get an access token: {type(exc).__name__}: {exc}")) from None
        headers = {name: value for name, value in credentials.items() if name in CREDENTIAL_HEADERS}
        headers["Content-Type"] = "application/json"
        body = json.dumps(self.session_config()).encode()
        try:
            response = await http_request("POST", url, headers, body, timeout=self.config.accept_timeout)
        except TimeoutError:
            raise AcceptFailed(f"{host} did not answer the accept within {self.config.accept_timeout:g} s") from None
        except (OSError, HTTPError) as exc:
            raise AcceptFailed(runtime.redactor(f"cannot reach {host}: {exc}")) from None
        if not 200 <= response.status < 300:
            raise AcceptFailed(runtime.redactor(
                f"{host} refused to accept call {call_id}: HTTP {response.status} {_error_message(response)}"))

    def _attach(self, call_id: str) -> None:
        assert self._task_group is not None, "checked by the caller"
        sidecar = Sidecar(call_id, self.runtime)
        self.calls[call_id] = sidecar
        self._task_group.start_soon(self._serve_call, sidecar, name=f"call {call_id}")

    async def _serve_call(self, sidecar: Sidecar) -> None:
        try:
            await sidecar.run()
        except UpstreamUnavailable:
            pass   # run() logged why
        finally:
            del self.calls[sidecar.call_id]
            if self._calls_changed is not None:
                self._calls_changed.set()


def _error(status: int, message: str, code: str) -> Response:
    return Response.from_json(status, {"error": {"type": "invalid_request_error", "code": code, "message": message}})


def _error_message(response: Response) -> str:
    """The provider's error message from an error response, shortened."""
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.body.decode("utf-8", "replace")
    message = " ".join(str(message).split())
    return message if len(message) <= 200 else message[:197] + "..."
