"""The mock's fake REST API for calls, as an ASGI app (Starlette) that `MockUpstream` serves with
uvicorn on its `rest_url`:

    POST /v1/realtime/calls/{call_id}/accept   a GA session config; checked like a session.update
    POST /v1/realtime/calls/{call_id}/reject   optional {"status_code": <SIP code>}; ends the call
    POST /v1/realtime/calls/{call_id}/hangup   ends the call, its sockets closed normally
    POST /v1/live/sessions/{session_id}/accept|reject|refer|hangup   GPT-Live's SIP calls
                                               (relay/mock/live_calls.py: 409 for a second decision)

Each needs the key when the mock has one (401), answers 404 for an unknown or ended call or an
unknown endpoint, 405 for another method, 400 for a bad body, and 200 with an empty body when
done; errors have the provider's shape (`{"error": {"message", "type", "param", "code"}}`).
"""

from __future__ import annotations

import hmac
import json
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from relay.dialects.webhooks import CALL_OPERATIONS
from relay.mock.live_calls import DecisionMade, LiveCalls
from relay.mock.live_config import LiveRefusal
from relay.mock.session import MockSession
from relay.mock.wire import ProtocolError
from relay.session.policy import NORMAL_CLOSURE
from relay.transports.asgi import BodyRefused, read_body



class CallControl(Protocol):
    """What the REST API drives (`MockUpstream` has it): the calls of the mock and their end."""

    api_key: str | None
    live_calls: LiveCalls

    def find_session(self, call_id: str) -> MockSession | None: ...
    async def close_session(self, session: MockSession, code: int = ..., reason: str = "") -> None: ...
    async def accept_call(self, session: MockSession, config: Any) -> None: ...

CALLS = "/v1/realtime/calls/{call_id}"
LIVE_SESSIONS = "/v1/live/sessions/{session_id}"
SIP_STATUS_RANGE = range(400, 700)


def error_body(status: int, message: str, code: str | None, param: str | None = None) -> JSONResponse:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return JSONResponse({"error": error}, status_code=status)


def rest_app(mock: CallControl) -> Starlette:
    """The REST API of `mock`'s calls."""

    def authorized(request: Request) -> bool:
        if mock.api_key is None:
            return True
        authorization = request.headers.get("authorization", "")
        given = (authorization[7:].strip() if authorization.lower().startswith("bearer ")
                 else request.headers.get("api-key", ""))
        return hmac.compare_digest(given.encode(), mock.api_key.encode())

    async def call_operation(request: Request) -> Response:
        if not authorized(request):
            return error_body(401, "Incorrect API key provided.", "invalid_api_key")
        call_id = request.path_params["call_id"]
        operation = request.url.path.rsplit("/", 1)[1]
        session = mock.find_session(call_id)
        if session is None or session.ended:
            return error_body(404, f"Call '{call_id}' not found.", "call_not_found")
        try:
            body = await read_body(request)
        except BodyRefused as refused:
            return error_body(refused.status, str(refused), "invalid_body")
        if operation == "hangup":
            await mock.close_session(session, NORMAL_CLOSURE, "call ended")
            return Response(status_code=200)
        try:
            config: Any = json.loads(body) if body or operation == "accept" else {}
        except ValueError:
            return error_body(400, "The body is not valid JSON.", "invalid_json")
        if operation == "reject":
            status = config.get("status_code", 603) if isinstance(config, dict) else None
            if type(status) is not int or status not in SIP_STATUS_RANGE:
                return error_body(400, "Invalid 'status_code': expected a SIP status from 400 to 699.",
                                  "invalid_value", "status_code")
            await mock.close_session(session, NORMAL_CLOSURE, "call rejected")
            return Response(status_code=200)
        try:
            await mock.accept_call(session, config)
        except ProtocolError as error:
            return error_body(400, error.message, error.code, error.param)
        return Response(status_code=200)

    async def live_operation(request: Request) -> Response:
        if not authorized(request):
            return error_body(401, "Incorrect API key provided.", "invalid_api_key")
        session_id = request.path_params["session_id"]
        operation = request.url.path.rsplit("/", 1)[1]
        call = mock.live_calls.find(session_id)
        if call is None or call.session.ended:
            return error_body(404, f"Session '{session_id}' not found.", "session_not_found")
        try:
            body = await read_body(request)
            config: Any = json.loads(body) if body else None
        except BodyRefused as refused:
            return error_body(refused.status, str(refused), "invalid_body")
        except ValueError:
            return error_body(400, "The body is not valid JSON.", "invalid_json")
        try:
            await mock.live_calls.decide(call, operation, config)
        except LiveRefusal as refusal:
            return error_body(409 if isinstance(refusal, DecisionMade) else 400, refusal.message, refusal.code,
                              refusal.param)
        return Response(status_code=200)

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_body(404, f"Unknown endpoint {request.method} {request.url.path}.", "not_found")

    async def method_not_allowed(request: Request, exc: Exception) -> Response:
        return error_body(405, f"Method {request.method} not allowed; use POST.", "method_not_allowed")

    routes = [Route(f"{CALLS}/{operation}", call_operation, methods=["POST"])
              for operation in ("accept", "reject", "hangup")]
    routes += [Route(f"{LIVE_SESSIONS}/{operation}", live_operation, methods=["POST"]) for operation in CALL_OPERATIONS]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: method_not_allowed})
