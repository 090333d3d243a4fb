"""`relay sidecar`: the webhook entry. The provider announces an incoming SIP call with a signed
webhook (`realtime.call.incoming`; GPT-Live's `live.transport.incoming`, with `--dialect live`);
the relay checks the signature, accepts the call with its tools through the provider's REST API,
answers 200, and attaches a sidecar to the call.

    phone --SIP--> provider --POST /webhooks/openai--> SidecarServer --accept (REST)--> provider
                       ^                                     |
                       +------ws ?call_id=... (one Sidecar per call, in the server's task group)
                              (GPT-Live: /v1/live/sessions/{session_id}/attach)

The endpoint is an ASGI application (Starlette), `SidecarServer.app`: `relay sidecar` serves it
with uvicorn in its own task group (`run()`), and an application that already receives the
provider's webhooks mounts it in its own app and runs the attached calls in its lifespan:

    webhooks = SidecarServer(SidecarServerConfig(tools=["tools.py"]))
    app = FastAPI(lifespan=webhooks.lifespan)     # or: async with webhooks.running(): in yours
    app.mount("/relay", webhooks.app)             # POST /relay/webhooks/openai, GET /relay/healthz

`SidecarServer(config, routes=[...])` adds routes or mounts to that app (a page beside the
endpoint); `live=LiveHub()` mounts the live inspector of the attached calls at `/inspector`
(`relay sidecar --inspector`), behind `inspector_token`. The provider's REST calls (accept, and
reject, refer, hang up for the application) go through httpx (`CallsAPI`, relay/edges/calls.py).

The signatures (Standard Webhooks as OpenAI applies them) and the incoming-call events are
relay/dialects/webhooks.py's. The key is the secret from `OPENAI_WEBHOOK_SECRET`. A delivery more
than five minutes old (or ahead) is refused, and a delivery repeated with the same `webhook-id` is
answered 200 and otherwise ignored.

A GPT-Live call is accepted with `{"session": {"type": "live", "model", "instructions",
"delegation"}}`: Responses delegation with the relay's tools in `delegation.responses.tools` (the
backend model is `responses_model`), or client delegation when the tools hold a delegate (or
`delegation="client"`); then the sidecar attaches at the session's `/attach` path. A
`live.transport.connected` delivery names a session already running (a direct WebRTC one): it is
attached to without an accept, and the relay's tools are added with a `session.update`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

import anyio
import anyio.abc
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from relay.dialects.live import LiveDialect
from relay.dialects.webhooks import (
    DEFAULT_TOLERANCE,
    REALTIME_CALL_INCOMING,
    InvalidSignature,
    call_family,
    signature,
    signed_headers,
    signing_key,
    verify,
)
from relay.edges.calls import AcceptFailed, CallRequestFailed, CallsAPI
from relay.edges.config import SidecarConfig
from relay.edges.fleet import Fleet
from relay.edges.sideband import Sidecar, SidecarRuntime, call_field
from relay.edges.upstream import UpstreamUnavailable, display_host
from relay.errors import ConfigError
from relay.inspector.live import BASE_PATH as INSPECTOR_PATH
from relay.inspector.live import LiveHub, asgi_app
from relay.observe.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from relay.observe.metrics import Metrics
from relay.session.access import page_hosts
from relay.session.policy import DEFAULT_DRAIN_SECONDS
from relay.transports.asgi import AppServer, BodyRefused, read_body

__all__ = ["AcceptFailed", "CallRequestFailed", "CallsAPI", "InvalidSignature", "RecentIds", "SidecarServer",
           "SidecarServerConfig", "signature", "signed_headers", "signing_key", "verify"]

log = logging.getLogger("relay.webhooks")

WEBHOOK_PATH = "/webhooks/openai"
INCOMING_CALL = REALTIME_CALL_INCOMING
WEBHOOK_SECRET_ENV = "OPENAI_WEBHOOK_SECRET"
DEFAULT_REST_BASE = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-realtime"
DEFAULT_LIVE_MODEL = "gpt-live-1"
DEFAULT_PORT = 8080
REMEMBERED_DELIVERIES = 4096
DELEGATIONS = ("responses", "client")


# ---- deliveries -----------------------------------------------------------------------------

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

@dataclass
class SidecarServerConfig(SidecarConfig):
    """`relay sidecar`: the sidecar settings, plus where to listen, the REST API that accepts
    calls, and the session each accepted call gets (`model`, `instructions`, the tools; `model`
    None: `gpt-realtime`, or `gpt-live-1` with `dialect="live"`). GPT-Live only: `delegation`
    (`responses`, `client`; None: `client` when the tools hold a delegate, else `responses`) and
    `responses_model`, the backend model of Responses delegation (required for it).
    `webhook_secret=None` reads `OPENAI_WEBHOOK_SECRET`."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    rest_base: str = DEFAULT_REST_BASE
    webhook_secret: str | None = None
    model: str | None = None
    instructions: str | None = None
    delegation: str | None = None
    responses_model: str | None = None
    tolerance: float = DEFAULT_TOLERANCE
    accept_timeout: float = 10.0
    drain_seconds: float = DEFAULT_DRAIN_SECONDS
    scan_seconds: float | None = None   # with a shared store: how often to look for orphaned calls


class SidecarServer:
    """The webhook endpoint, `app` (ASGI): `POST /webhooks/openai`, `GET /healthz` and `GET
    /metrics` (the call store's and the handovers' between replicas), plus the `routes` given. Attached calls are tasks of a task group that `running()` opens (and
    `lifespan` for an app's lifespan); when it closes, calls go on for up to `drain_seconds`, then
    the rest are detached. Without it, webhooks are answered 503.

    Standalone (`relay sidecar`): `await server.run()` serves `app` with uvicorn until
    `request_stop()`; `await task_group.start(server.run)` returns the server once it listens."""

    def __init__(self, config: SidecarServerConfig, *, clock: Callable[[], float] = time.time,
                 routes: Sequence[BaseRoute] = (), live: LiveHub | None = None,
                 inspector_token: str | None = None) -> None:
        self.config = config
        self.runtime = SidecarRuntime(config)
        self.live = live
        self.family = call_family(self.runtime.dialect.wire)   # how its calls are announced and decided
        self._check_live_session()
        if self.family.running_by:   # a running session it attaches to may lack the tools: a session.update adds them
            self.runtime.engine_config = dataclasses.replace(self.runtime.engine_config, declare_tools=True)
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
        self.calls_api = CallsAPI(self.runtime, config.rest_base, config.accept_timeout)
        self.calls: dict[str, Sidecar] = {}
        self.metrics = Metrics()   # the store's and the handovers' (`GET /metrics`)
        self.runtime.store_listeners.append(self.metrics.count_store)
        self.runtime.store_latency_listeners.append(self.metrics.observe_store_write)
        self.runtime.handovers.on_count = self.metrics.count_handover
        self.fleet = Fleet(self.runtime, attach=lambda call_id: self._attach(call_id, takeover=True),
                           attached=lambda: (*self.calls, *self._accepting), scan_seconds=config.scan_seconds)
        self._accepting: set[str] = set()
        self._deliveries = RecentIds(REMEMBERED_DELIVERIES)
        self._clock = clock
        self._address: tuple[str, int] | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._stop_event: anyio.Event | None = None
        self._stop_wanted = False
        self._calls_changed: anyio.Event | None = None
        self._scan_scope: anyio.CancelScope | None = None
        self.draining = False
        if live is not None:   # the live inspector of the attached calls (`relay sidecar --inspector`)
            if inspector_token:
                self.runtime.redactor.add(inspector_token)
            hosts = page_hosts(config.host, (), inspector_token)
            routes = [*routes, Mount(INSPECTOR_PATH, app=asgi_app(live, token=inspector_token,
                                                                  dialect=self.runtime.dialect, hosts=hosts))]
        self.app = Starlette(
            routes=[Route("/healthz", self._healthz, methods=["GET"]),
                    Route("/metrics", self._metrics, methods=["GET"]),
                    Route(WEBHOOK_PATH, self._webhook, methods=["POST"]),
                    *routes],
            exception_handlers={404: _not_found, 405: _method_not_allowed})

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
        serving = self._task_group is not None and not self.draining
        fields = self.runtime.health_fields(draining=not serving, calls=len(self.calls))
        if self.runtime.leases:   # replicas sharing a store: what moved between them
            fields["handovers"] = self.runtime.handovers.as_fields()
        return fields

    def request_stop(self) -> None:
        """Stop taking webhooks and let attached calls drain (what SIGTERM does)."""
        self._stop_wanted = True
        if self._stop_event is not None:
            self._stop_event.set()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Take calls while inside: the task group attached calls run in. On a normal exit the
        calls drain (up to `drain_seconds`) and the rest are detached; cancelled, their sidebands
        are closed at once."""
        if self._task_group is not None:
            raise RuntimeError("the webhook server is already running")
        self.draining = False
        await self.runtime.start_tools()   # the MCP servers, held while calls come and go
        try:
            async with anyio.create_task_group() as group:
                self._task_group = group
                if self.runtime.leases:   # replicas sharing a store take over each other's calls
                    group.start_soon(self._scan, name="fleet")
                yield
                self.draining = True
                if self._scan_scope is not None:   # a draining replica takes no call over
                    self._scan_scope.cancel()
                await self._drain(group)
        finally:
            self._task_group = None
            self.draining = True
            with anyio.CancelScope(shield=True):
                await self.calls_api.aclose()
                await self.runtime.close_tools()

    def lifespan(self, app: object = None) -> AbstractAsyncContextManager[None]:
        """`running()` as an ASGI app's lifespan: `FastAPI(lifespan=server.lifespan)`."""
        return self.running()

    async def run(self, *, task_status: anyio.abc.TaskStatus[SidecarServer] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen and serve `app` until `request_stop()` (then drain) or cancellation (then the
        calls' sidebands are closed at once). Raises OSError when it cannot listen."""
        config = self.config
        self._stop_event = anyio.Event()
        if self._stop_wanted:
            self._stop_event.set()
        listener = AppServer(self.app, config.host, config.port)
        listener.listen()
        self._address = listener.address
        try:
            async with self.running(), anyio.create_task_group() as http:
                http.start_soon(listener.serve)
                log.info("listening on %s", self.url, extra={
                    "url": self.url, "upstream": self.runtime.upstream.host, "rest": display_host(config.rest_base),
                    "dialect": self.runtime.dialect.name, "tools": self.runtime.tools.names, "pid": os.getpid()})
                task_status.started(self)
                await self._stop_event.wait()
                self.draining = True
                listener.stop()   # no new deliveries (the provider retries them elsewhere); those in flight end
        finally:
            listener.close()
            log.info("stopped")

    async def _hand_off(self) -> None:
        """With a shared store, a drain hands each call to a peer at once (make before break)
        instead of waiting for the calls to end; what no peer took in `drain_seconds` is left."""
        log.info("handing %d attached calls to peers", len(self.calls), extra={"calls": len(self.calls)})
        with anyio.move_on_after(self.config.drain_seconds):
            async with anyio.create_task_group() as handing:
                for sidecar in list(self.calls.values()):
                    handing.start_soon(sidecar.hand_off)

    async def _scan(self) -> None:
        with anyio.CancelScope() as self._scan_scope:
            await self.fleet.run()

    async def _drain(self, group: anyio.abc.TaskGroup) -> None:
        if self.calls and self.runtime.leases and self.config.drain_seconds > 0:
            await self._hand_off()
        elif self.calls and self.config.drain_seconds > 0:
            log.info("draining %d attached calls for up to %g s", len(self.calls), self.config.drain_seconds,
                     extra={"calls": len(self.calls), "drain_seconds": self.config.drain_seconds})
            with anyio.move_on_after(self.config.drain_seconds):
                while self.calls:
                    self._calls_changed = anyio.Event()
                    await self._calls_changed.wait()
        for sidecar in list(self.calls.values()):
            group.start_soon(sidecar.stop, "relay shutting down")

    # ---- HTTP --------------------------------------------------------------------------
    async def _healthz(self, request: Request) -> Response:
        return JSONResponse(self.health())

    async def _metrics(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=METRICS_CONTENT_TYPE)

    async def _webhook(self, request: Request) -> Response:
        try:
            body = await read_body(request)
        except BodyRefused as refused:
            return _error(refused.status, str(refused), "invalid_body")
        try:
            delivery = verify(self._key, request.headers, body, now=self._clock(), tolerance=self.config.tolerance)
        except InvalidSignature as exc:
            log.warning("webhook refused: %s", exc, extra={"webhook_id": request.headers.get("webhook-id")})
            return _error(400, f"invalid webhook signature: {exc}", "invalid_signature")
        try:
            event = json.loads(body)
        except ValueError:
            event = None
        if not isinstance(event, dict):
            return _error(400, "the body is not a JSON object", "invalid_json")
        fields = {"webhook_id": delivery, "event_type": event.get("type")}
        if delivery in self._deliveries:
            log.info("webhook delivered again; ignored", extra=fields)
            return Response(status_code=200)
        call_id = self.family.call_id(event)
        if call_id is None:
            self._deliveries.add(delivery)
            log.info("webhook ignored: not an incoming call for %s", self.runtime.dialect.name, extra=fields)
            return Response(status_code=200)
        if not call_id:
            return _error(400, f"{event['type']} without data.{self.family.id_field}", "invalid_event")
        fields[call_field(self.runtime.dialect)] = call_id
        if self.draining or self._task_group is None:
            return _error(503, "not serving calls now; deliver again later", "unavailable")
        if call_id in self.calls or call_id in self._accepting:
            self._deliveries.add(delivery)
            log.info("webhook for a call already attached; ignored", extra=fields)
            return Response(status_code=200)
        self._deliveries.add(delivery)
        if not self.family.needs_accept(event):   # a session already running (GPT-Live's WebRTC)
            log.info("session running: attaching", extra=fields)
            self._attach(call_id)
            return Response(status_code=200)
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
        return Response(status_code=200)

    # ---- calls -------------------------------------------------------------------------
    def session_config(self) -> dict[str, Any]:
        """The session an accepted call gets: the model, the instructions, the relay's tools (a
        Realtime GA session; GPT-Live's: its delegation, the tools in Responses delegation's)."""
        config, tools = self.config, self.runtime.tools
        if self.family.wraps_session:
            return self._live_session()
        session: dict[str, Any] = {"type": "realtime", "model": config.model or DEFAULT_MODEL}
        if config.instructions is not None:
            session["instructions"] = config.instructions
        if len(tools):
            session["tools"] = self.runtime.dialect.tool_definitions(tools)
        return session

    def _live_delegation(self) -> str:
        if self.config.delegation is not None:
            return self.config.delegation
        return "client" if self.runtime.tools.delegate is not None else "responses"

    def _check_live_session(self) -> None:
        """A GPT-Live sidecar's settings: a known delegation, and a backend model for Responses."""
        config = self.config
        if not self.family.wraps_session:
            if config.delegation is not None or config.responses_model is not None:
                raise ConfigError("--delegation and --responses-model are GPT-Live's (--dialect live)")
            return
        if config.delegation not in (None, *DELEGATIONS):
            raise ConfigError(f"--delegation must be one of {', '.join(DELEGATIONS)}, not {config.delegation!r}")
        if self._live_delegation() == "responses" and not config.responses_model:
            raise ConfigError("GPT-Live calls are accepted in Responses delegation with the relay's tools: "
                              "set --responses-model (the backend model, e.g. the one your Responses app uses)")

    def _live_session(self) -> dict[str, Any]:
        """GPT-Live's accept session (`openai.types.live.session_accept_params.Session`): no
        `audio.format` (SIP negotiates it)."""
        config = self.config
        session: dict[str, Any] = {"type": "live", "model": config.model or DEFAULT_LIVE_MODEL}
        if config.instructions is not None:
            session["instructions"] = config.instructions
        if self._live_delegation() == "client":
            session["delegation"] = {"type": "client"}
            return session
        responses: dict[str, Any] = {"model": config.responses_model}
        dialect = self.runtime.dialect
        if len(self.runtime.tools) and isinstance(dialect, LiveDialect):
            responses["tools"] = [dialect.function_tool(spec.name, spec.description, spec.parameters)
                                  for spec in self.runtime.tools]
        session["delegation"] = {"type": "responses", "responses": responses}
        return session

    async def accept(self, call_id: str) -> None:
        """Accept the call through the provider's REST API (`POST .../realtime/calls/{id}/accept`,
        GPT-Live's `.../live/sessions/{id}/accept`) with the provider key; raises `AcceptFailed`."""
        await self.calls_api.accept(call_id, self.session_config())

    def _attach(self, call_id: str, *, takeover: bool = False) -> None:
        assert self._task_group is not None, "checked by the caller"
        sidecar = Sidecar(call_id, self.runtime, live=self.live, takeover=takeover)
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


def _error(status: int, message: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"type": "invalid_request_error", "code": code, "message": message}},
                        status_code=status)


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(404, f"no endpoint at {request.url.path}; webhooks go to {WEBHOOK_PATH}", "not_found")


async def _method_not_allowed(request: Request, exc: Exception) -> Response:
    if request.url.path.endswith("/healthz"):
        return _error(405, f"{request.method} not allowed on /healthz; use GET", "method_not_allowed")
    return _error(405, f"{request.method} not allowed; webhooks are POSTed", "method_not_allowed")
