"""The provider's REST API for SIP calls (`CallsAPI`): accept, reject, refer and hang up, for the
Realtime family (`{rest_base}/realtime/calls/{call_id}/…`) and GPT-Live
(`{rest_base}/live/sessions/{session_id}/…`), through one httpx client. `relay sidecar` accepts
with it (relay/edges/sidecar.py); an application decides its calls with the same object
(`SidecarServer.calls_api`). The paths and bodies are relay/dialects/webhooks.py's.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx

from relay.dialects.webhooks import call_family
from relay.edges.config import EdgeRuntime
from relay.edges.upstream import display_host
from relay.errors import RelayError

CREDENTIAL_HEADERS = ("Authorization", "api-key")
DEFAULT_REJECT_STATUS = 603   # SIP "Decline": the Realtime API's default, sent explicitly to GPT-Live
_VERBS = {"accept": "accept", "reject": "reject", "refer": "refer", "hangup": "hang up"}


class CallRequestFailed(RelayError):
    """The provider did not do what a REST call asked; the message says why (safe to log)."""


class AcceptFailed(CallRequestFailed):
    """The provider did not accept the call."""


class CallsAPI:
    """The provider's REST API for SIP calls of the runtime's dialect, through one httpx client
    (opened on first use, closed by `aclose`). The provider key comes from the runtime's upstream
    credentials and never appears in an error. Each call is bounded by `timeout` seconds in all.
    Every method raises `CallRequestFailed` (`accept`: `AcceptFailed`)."""

    def __init__(self, runtime: EdgeRuntime, rest_base: str, timeout: float) -> None:
        self.runtime = runtime
        self.family = call_family(runtime.dialect.wire)
        self.rest_base = rest_base.rstrip("/")
        self.host = display_host(rest_base)
        self.timeout = timeout
        self._client: httpx.AsyncClient | None = None

    async def accept(self, call_id: str, session: dict[str, Any]) -> None:
        """Accept the call with `session` (the dialect's session config: a Realtime GA session,
        or a GPT-Live one, sent wrapped as `{"session": …}`)."""
        try:
            await self._post(call_id, "accept", self.family.accept_body(session))
        except CallRequestFailed as exc:
            raise AcceptFailed(str(exc)) from None

    async def reject(self, call_id: str, status_code: int | None = None) -> None:
        """Decline the call with a SIP status (`status_code`; by default 603 Decline)."""
        if status_code is None and not self.family.wraps_session:
            await self._post(call_id, "reject", {})   # the Realtime API's own default
            return
        await self._post(call_id, "reject", {"status_code": status_code or DEFAULT_REJECT_STATUS})

    async def refer(self, call_id: str, target_uri: str) -> None:
        """Transfer the call to `target_uri` (`sip:…` or `tel:…`, SIP REFER)."""
        await self._post(call_id, "refer", {"target_uri": target_uri})

    async def hangup(self, call_id: str) -> None:
        """End the call."""
        await self._post(call_id, "hangup", None)

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def _post(self, call_id: str, operation: str, body: dict[str, Any] | None) -> None:
        runtime, host, verb = self.runtime, self.host, _VERBS[operation]
        url = self.rest_base + self.family.control_path(call_id, operation)
        try:
            credentials = await runtime.upstream.headers(runtime.dialect)
        except Exception as exc:
            raise CallRequestFailed(runtime.redactor(
                f"could not get an access token: {type(exc).__name__}: {exc}")) from None
        headers = {name: value for name, value in credentials.items() if name in CREDENTIAL_HEADERS}
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout, headers={"User-Agent": "relay"})
        try:
            with anyio.fail_after(self.timeout):
                response = await self._client.post(url, headers=headers, json=body)
        except (TimeoutError, httpx.TimeoutException):
            raise CallRequestFailed(f"{host} did not answer the {verb} within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise CallRequestFailed(runtime.redactor(
                f"cannot reach {host}: {str(exc) or type(exc).__name__}")) from None
        if not response.is_success:
            raise CallRequestFailed(runtime.redactor(
                f"{host} refused to {verb} call {call_id}: HTTP {response.status_code} {_error_message(response)}"))


def _error_message(response: httpx.Response) -> str:
    """The provider's error message from an error response, shortened."""
    try:
        message = response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = response.content.decode("utf-8", "replace")
    message = " ".join(str(message).split())
    return message if len(message) <= 200 else message[:197] + "..."
