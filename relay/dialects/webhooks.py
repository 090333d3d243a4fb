"""The provider's webhooks for incoming SIP calls, as OpenAI sends them: Standard Webhooks
signatures, the events that announce a call in each wire family, and the REST paths that decide
it. Sans-I/O: `relay sidecar` (relay/edges/sidecar.py) verifies and reads deliveries with it, the
mock (relay/mock/live_calls.py) signs and writes them.

Signatures follow Standard Webhooks as OpenAI applies them: headers `webhook-id`,
`webhook-timestamp` (Unix seconds) and `webhook-signature` (space-separated `v1,<base64>`
entries), each entry an HMAC-SHA256 of `{id}.{timestamp}.{body}`. The key is the endpoint's
secret: base64-decoded after a `whsec_` prefix, else its UTF-8 bytes (as in the `openai`
package). The check is written here (checked against the `openai` package's verifier in the
tests) rather than taken from the `standardwebhooks` package, which reads the wall clock itself,
has a fixed tolerance, raises ValueError or UnicodeDecodeError on a malformed signature header or
a non-UTF-8 body, and takes a plain secret for base64.

The events (`openai.types.webhooks`): the Realtime family's `realtime.call.incoming` names the
call by `data.call_id` (`rtc_…`), accepted at `/realtime/calls/{call_id}/accept`; GPT-Live's
`live.transport.incoming` (and the deprecated `live.call.incoming`, without `data.type`) by
`data.session_id` (`live_…`), accepted at `/live/sessions/{session_id}/accept` with the session
wrapped as `{"session": …}`. The same pending call can be announced in both families; the first
accept picks the runtime. GPT-Live's `live.transport.connected` names a session already running
(a direct WebRTC session): it is attached to, never accepted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from relay.errors import RelayError

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE = 300.0
REALTIME_CALL_INCOMING = "realtime.call.incoming"
LIVE_TRANSPORT_INCOMING = "live.transport.incoming"
LIVE_CALL_INCOMING = "live.call.incoming"
"""The deprecated name of `live.transport.incoming` (no `data.type`), still delivered to old
subscriptions."""
LIVE_TRANSPORT_CONNECTED = "live.transport.connected"
"""A direct WebRTC session (or an Instant Connect one) is running: attach to it, no accept."""
CALL_OPERATIONS = ("accept", "reject", "refer", "hangup")


# ---- Standard Webhooks signatures ------------------------------------------------------------
class InvalidSignature(RelayError):
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


# ---- the events that announce a call ---------------------------------------------------------
@dataclass(frozen=True)
class CallFamily:
    """How one wire family announces and decides SIP calls: the event types that announce one,
    the `data` member that names it, and where its REST controls are."""

    announced_by: tuple[str, ...]
    id_field: str
    controls: str           # the path of a call's controls under the REST base, `{id}` in it
    wraps_session: bool     # the accept's body is `{"session": …}` (else the session itself)
    running_by: tuple[str, ...] = ()   # events of a session already running: attached to, not accepted

    def call_id(self, event: Mapping[str, Any]) -> str | None:
        """The call an incoming-call (or running-session) event names: its id (empty when the
        event holds none), or None when the event is not one of this family's announcements."""
        if event.get("type") not in (*self.announced_by, *self.running_by):
            return None
        data = event.get("data")
        found = data.get(self.id_field) if isinstance(data, dict) else None
        return found if isinstance(found, str) else ""

    def needs_accept(self, event: Mapping[str, Any]) -> bool:
        """The event announces a call waiting to be accepted (else a session already running)."""
        return event.get("type") in self.announced_by

    def control_path(self, call_id: str, operation: str) -> str:
        """`accept`, `reject`, `refer` or `hangup` of a call, under the REST base."""
        return self.controls.format(id=quote(call_id, safe="")) + "/" + operation

    def accept_body(self, session: dict[str, Any]) -> dict[str, Any]:
        return {"session": session} if self.wraps_session else session


REALTIME_CALLS = CallFamily((REALTIME_CALL_INCOMING,), "call_id", "/realtime/calls/{id}", wraps_session=False)
LIVE_CALLS = CallFamily((LIVE_TRANSPORT_INCOMING, LIVE_CALL_INCOMING), "session_id", "/live/sessions/{id}",
                        wraps_session=True, running_by=(LIVE_TRANSPORT_CONNECTED,))


def call_family(wire: str) -> CallFamily:
    """The calls of a dialect's wire (`Dialect.wire`): GPT-Live's, or the Realtime family's."""
    return LIVE_CALLS if wire == "live" else REALTIME_CALLS


def live_connected_event(session_id: str, *, event_id: str, created_at: int) -> dict[str, Any]:
    """A `live.transport.connected` delivery's body (a WebRTC session), as the provider writes it."""
    return {"id": event_id, "object": "event", "created_at": created_at, "type": LIVE_TRANSPORT_CONNECTED,
            "data": {"session_id": session_id, "type": "webrtc"}}


def live_incoming_event(session_id: str, *, event_id: str, created_at: int,
                        sip_headers: list[dict[str, str]], deprecated: bool = False) -> dict[str, Any]:
    """A `live.transport.incoming` delivery's body (`deprecated`: as `live.call.incoming`, which
    has no `data.type`), as the provider writes it (`openai.types.webhooks`)."""
    data: dict[str, Any] = {"session_id": session_id, "sip_headers": sip_headers}
    if not deprecated:
        data = {"type": "sip", **data}
    return {"id": event_id, "object": "event", "created_at": created_at,
            "type": LIVE_CALL_INCOMING if deprecated else LIVE_TRANSPORT_INCOMING, "data": data}
