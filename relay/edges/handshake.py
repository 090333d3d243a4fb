"""What `relay serve` answers before a session exists: the HTTP endpoints that share its port
(`/healthz`, `/metrics`: GET and HEAD, 405 otherwise; `/healthz` is 503 while the relay drains;
the live inspector's routes when it is on) and the checks that refuse a WebSocket client before
any upstream work (the dialect's paths, a draining relay, one at its `--max-sessions`, the Upgrade
header, the browser Origin, the relay's own token in any form a client of the dialect sends it,
with failed attempts limited per address (relay/edges/admission.py), a `call_id` that would join
a live call).

Everything cheap is decided here, so a refused client never causes an upstream connection. The
rules are a function of the request (`relay.session.http.Request`) returning an `Answer` or
None (open the WebSocket), whichever transport serves the port: the transport shows them every
request, HEAD, other methods and HTTP/1.0 included (relay/transports/).
"""

from __future__ import annotations

import logging
import math
from http import HTTPStatus
from typing import Any, Callable, Protocol

from relay.dialects import Dialect
from relay.edges.admission import FailedAuthentication
from relay.edges.config import ServerConfig
from relay.observe.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from relay.observe.metrics import Metrics
from relay.session.access import listed_origins, presents_token
from relay.session.http import Answer, Request

log = logging.getLogger("relay.server")

ENDPOINT_METHODS = "GET, HEAD"


class Routes(Protocol):
    """More routes on the port (the live inspector's, relay/inspector/live/endpoints.py)."""

    def owns(self, path: str) -> bool: ...
    def decide(self, request: Request) -> Answer | None: ...


class Handshake:
    """The port's rules (`decide`, what a transport's server asks of every request): answers the
    HTTP endpoints, refuses a client that may not connect (HTTP status and a JSON error body,
    counted in the metrics), and lets the others through (None)."""

    def __init__(self, config: ServerConfig, dialect: Dialect, metrics: Metrics, *,
                 health: Callable[[], dict[str, Any]], draining: Callable[[], bool] = lambda: False,
                 sessions: Callable[[], int] = lambda: 0, inspector: Routes | None = None,
                 failures: FailedAuthentication | None = None) -> None:
        self.config = config
        self.dialect = dialect
        self.metrics = metrics
        self._health = health
        self._draining = draining
        self._sessions = sessions
        self._inspector = inspector
        self.failures = failures if failures is not None else FailedAuthentication()

    def decide(self, request: Request) -> Answer | None:
        path = request.path.rstrip("/") or "/"
        method = request.method
        if path in ("/healthz", "/metrics"):
            if method not in ("GET", "HEAD"):
                return self._refuse(request, HTTPStatus.METHOD_NOT_ALLOWED,
                                    f"{path} answers {ENDPOINT_METHODS}, not {method}", Allow=ENDPOINT_METHODS)
            answer = self._endpoint(path)
            # HEAD: the same status and headers (Content-Length included), no body
            return answer.for_head() if method == "HEAD" else answer
        if self._inspector is not None and self._inspector.owns(path):
            return self._inspector.decide(request)
        if path not in self.dialect.client_paths:
            return self._refuse(request, HTTPStatus.NOT_FOUND,
                                f"no realtime endpoint at {path}; connect to {self.dialect.client_path}")
        if method != "GET":
            return self._refuse(request, HTTPStatus.METHOD_NOT_ALLOWED,
                                f"{path} is a WebSocket endpoint: open it with GET and Upgrade: websocket",
                                Allow="GET")
        if request.version != "HTTP/1.1":
            return self._refuse(request, HTTPStatus.HTTP_VERSION_NOT_SUPPORTED,
                                f"{path} is a WebSocket endpoint: it takes HTTP/1.1")
        if self._draining():
            # the balancer saw /healthz turn 503 too; it retries elsewhere (deploy/haproxy.cfg)
            return self._refuse(request, HTTPStatus.SERVICE_UNAVAILABLE,
                                "this relay is draining (shutting down) and takes no new sessions; "
                                "connect again to reach another instance", **{"Retry-After": "1"})
        limit = self.config.max_sessions
        if limit is not None and self._sessions() >= limit:
            return self._refuse(request, HTTPStatus.SERVICE_UNAVAILABLE,
                                f"this relay has its maximum of {limit} sessions open (--max-sessions); "
                                "connect again later or to another instance", **{"Retry-After": "1"})
        if not request.upgrade:
            return self._refuse(request, HTTPStatus.UPGRADE_REQUIRED,
                                f"{path} is a WebSocket endpoint; connect with a realtime client",
                                Upgrade="websocket")
        if listed_origins(request.headers, self.config.allow_origins,
                          token_required=bool(self.config.auth_token)) is not None:
            return self._refuse(request, HTTPStatus.FORBIDDEN, "this origin is not allowed")
        token = self.config.auth_token
        if token:
            wait = self.failures.retry_after(request.remote)
            if wait is not None:   # logged by `failures`, in summary
                return self._refuse(request, HTTPStatus.TOO_MANY_REQUESTS,
                                    "too many failed authentications from this address; try again later",
                                    logged=False, **{"Retry-After": str(max(1, math.ceil(wait)))})
            if not presents_token(request.headers, request.target, token, self.dialect):
                message = f"missing or wrong relay token ({self.dialect.client_auth_forms})"
                self.failures.failed(request.remote, message)
                return self._refuse(request, HTTPStatus.UNAUTHORIZED, message, logged=False,
                                    **{"WWW-Authenticate": 'Bearer realm="relay"'})
        if any(name.lower() == "call_id" for name, _ in request.query):
            # with the relay's key, a call_id would join any live call of the account: sideband
            # connections are `relay attach`'s business, never a proxied client's
            return self._refuse(request, HTTPStatus.BAD_REQUEST,
                                "call_id is not accepted here: the relay opens new sessions only "
                                "(attach to a live call with `relay attach`)")
        return None

    def _endpoint(self, path: str) -> Answer:
        """The answer of an HTTP endpoint to GET (HEAD drops its body)."""
        if path == "/healthz":
            status = HTTPStatus.SERVICE_UNAVAILABLE if self._draining() else HTTPStatus.OK
            return Answer.json(status.value, self._health())
        return Answer(HTTPStatus.OK.value, (("Content-Type", METRICS_CONTENT_TYPE),), self.metrics.render().encode())

    def _refuse(self, request: Request, status: HTTPStatus, message: str, *, logged: bool = True,
                **headers: str) -> Answer:
        """A JSON error answer (with `headers`), counted and logged (unless `logged` is False: the
        caller logs it)."""
        self.metrics.handshake_refused(status.value)
        if logged:
            log.info("handshake refused: %s", message, extra={"status": status.value, "remote": request.remote})
        return Answer.error(status, message, **headers)
