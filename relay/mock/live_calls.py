"""The GPT-Live mock's SIP calls (`MockUpstream(dialect="live").live_calls`): a call that arrives
without a socket, the signed `live.transport.incoming` webhook that announces it, the REST
controls that decide it (relay/mock/rest.py serves them at `/v1/live/sessions/{id}/accept`,
`/reject`, `/refer`, `/hangup`), and the caller's side of the call, which a test plays:

    session = mock.live_calls.create()                          # a pending call: no socket, not started
    await mock.live_calls.announce(session, webhook_url, secret)  # the signed webhook, POSTed
                                                                  # (connected=True: a running session's)
    await mock.user_turn(session, "What's the weather?")          # the caller speaks (the script replies)
    await mock.live_calls.caller_audio(session, 3000)             # 3 s of the caller's audio: the timeline
    await mock.live_calls.drop(session)                           # the sideband's socket dies (no close)
    mock.live_calls.calls[session.id]                             # what was decided: accept, reject, refer

The caller is the mock's own: a SIP phone is not something `client.live.connect()` can be (it
opens a new session with `session.start`; a SIP call's session is started by the accept). Its
audio moves the session's timeline as a primary connection's would, and each sideband sees it
reflected. The accept is checked as strictly as `session.start` (relay/mock/live_config.py), plus
the accept's own rules: `session.type` is `live`, and `audio.format` is refused (SIP negotiates
it). The first decision wins: a later accept or reject gets 409 `decision_already_made`.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from relay.dialects.webhooks import live_connected_event, live_incoming_event, signed_headers
from relay.mock.faults import Faults
from relay.mock.live import LiveMockSession
from relay.mock.live_backend import LiveOptions
from relay.mock.live_config import LiveRefusal, start_config
from relay.mock.quirks import Quirks
from relay.mock.script import MockScript
from relay.mock.wire import new_id
from relay.session.policy import NORMAL_CLOSURE
from relay.transports.websockets import abort



class Host(Protocol):
    """What the calls use of the mock that serves them (`MockUpstream`): its sessions' settings,
    sessions, sockets and actions."""

    script: MockScript
    faults: Faults
    quirks: Quirks
    live_options: LiveOptions
    sessions: list[Any]
    _ended: dict[str, asyncio.Event]
    _sockets: dict[tuple[str, int], Any]

    async def _run(self, session: Any, actions: list[Any]) -> None: ...
    async def close_session(self, session: Any, code: int = ..., reason: str = "") -> None: ...
    async def close_live(self, session: LiveMockSession, reason: str = ...) -> None: ...

CALLER = [{"name": "From", "value": "<sip:+15551230000@example.com>;tag=mock"},
          {"name": "To", "value": "<sip:+15559870000@sip.api.openai.com>"}]
FRAME_MS = 100
_SILENCE = base64.b64encode(bytes(FRAME_MS * 48)).decode("ascii")   # 100 ms of PCM16 at 24 kHz


class DecisionMade(LiveRefusal):
    """A second decision on a call (accept after reject, two accepts): 409."""


@dataclass
class LiveCall:
    """One SIP call's decisions, as the REST API received them."""

    session: LiveMockSession
    sip_headers: list[dict[str, str]] = field(default_factory=lambda: copy.deepcopy(CALLER))
    accepted: dict[str, Any] | None = None   # the accept's `session`, as sent
    rejected: int | None = None              # the reject's SIP status
    referred: list[str] = field(default_factory=list)
    hung_up: bool = False


class LiveCalls:
    """The SIP calls of a GPT-Live mock (see the module)."""

    def __init__(self, mock: Host) -> None:
        self.mock = mock
        self.calls: dict[str, LiveCall] = {}

    def create(self) -> LiveMockSession:
        """A pending incoming call: a session with no socket, started only by an accept."""
        mock = self.mock
        session = LiveMockSession(mock.script, copy.deepcopy(mock.faults), {}, mock.quirks, options=mock.live_options)
        session.is_call = True   # its sidebands may come and go: the call lives until it is ended
        mock.sessions.append(session)
        mock._ended[session.id] = asyncio.Event()
        self.calls[session.id] = LiveCall(session)
        return session

    def find(self, session_id: str) -> LiveCall | None:
        return self.calls.get(session_id)

    # -- the webhook ---------------------------------------------------------------------------
    def incoming(self, session: LiveMockSession, secret: str, *, deprecated: bool = False,
                 webhook_id: str | None = None, timestamp: int | None = None) -> tuple[dict[str, str], bytes]:
        """The signed delivery that announces the call: its headers and body."""
        now = int(time.time()) if timestamp is None else timestamp
        event = live_incoming_event(session.id, event_id=new_id("evt"), created_at=now,
                                    sip_headers=self.calls[session.id].sip_headers, deprecated=deprecated)
        body = json.dumps(event).encode()
        headers = signed_headers(secret, body, webhook_id=webhook_id or new_id("wh"), timestamp=now)
        return {**headers, "content-type": "application/json"}, body

    def connected(self, session: LiveMockSession, secret: str) -> tuple[dict[str, str], bytes]:
        """The signed `live.transport.connected` delivery of a running session (a WebRTC one's,
        as the provider announces it; here, any session the mock runs)."""
        now = int(time.time())
        body = json.dumps(live_connected_event(session.id, event_id=new_id("evt"), created_at=now)).encode()
        return {**signed_headers(secret, body, webhook_id=new_id("wh"), timestamp=now),
                "content-type": "application/json"}, body

    async def announce(self, session: LiveMockSession, url: str, secret: str, *, connected: bool = False,
                       **options: Any) -> httpx.Response:
        """POST the signed `live.transport.incoming` delivery to `url`, as the provider does
        (`connected`: `live.transport.connected`, for a session already running)."""
        headers, body = self.connected(session, secret) if connected else self.incoming(session, secret, **options)
        async with httpx.AsyncClient(timeout=30.0) as client:
            return await client.post(url, headers=headers, content=body)

    # -- the REST controls (relay/mock/rest.py) ----------------------------------------------------
    async def decide(self, call: LiveCall, operation: str, body: Any) -> None:
        """Carry out one REST control; raises `LiveRefusal` (a 400; `DecisionMade`: 409)."""
        session = call.session
        if operation == "accept":
            self._undecided(call)
            session.config = accept_config(body)
            session.expires_at = int(time.time()) + session.options.expires_in_s
            call.accepted = copy.deepcopy(body["session"])
        elif operation == "reject":
            status = body.get("status_code") if isinstance(body, dict) else None
            if type(status) is not int or not 300 <= status <= 699:
                raise LiveRefusal("invalid_value", "Invalid 'status_code': expected a SIP status from 300 to 699.",
                                  "status_code")
            self._undecided(call)
            call.rejected = status
            await self.mock.close_session(session, NORMAL_CLOSURE, "call rejected")
        elif operation == "refer":
            target = body.get("target_uri") if isinstance(body, dict) else None
            if not isinstance(target, str) or not target.strip():
                raise LiveRefusal("missing_required_parameter", "Missing required parameter: 'target_uri'.",
                                  "target_uri")
            call.referred.append(target)   # the session goes on until it closes: keep the sideband
        else:
            call.hung_up = True
            await self.mock.close_live(session, "close_requested")

    def _undecided(self, call: LiveCall) -> None:
        if call.accepted is not None or call.rejected is not None:
            raise DecisionMade("decision_already_made", "The call was already "
                               + ("accepted." if call.accepted is not None else "rejected."), None)

    # -- the caller's side -------------------------------------------------------------------------
    async def caller_audio(self, session: LiveMockSession, milliseconds: int) -> None:
        """The caller's audio (silence) for `milliseconds`, in 100 ms frames: the timeline moves,
        each sideband sees it reflected with the model's track, and what falls due is sent."""
        for _ in range(max(0, milliseconds) // FRAME_MS):
            await self.mock._run(session, session.advance(FRAME_MS, _SILENCE))

    async def drop(self, session: LiveMockSession, connection: int | None = None) -> None:
        """The socket of a sideband (`connection`, by default the latest open one) dies without a
        close frame; the call goes on."""
        open_ones = [conn.index for conn in session.connections if not conn.closed]
        index = connection if connection is not None else (open_ones[-1] if open_ones else None)
        socket = self.mock._sockets.get((session.id, index)) if index is not None else None
        if socket is not None:
            abort(socket)


def accept_config(body: Any) -> dict[str, Any]:
    """An accept's `session`, checked (`session.type` is `live`; no `audio.format`; the rest as
    `session.start`'s), with its defaults resolved."""
    session = body.get("session") if isinstance(body, dict) else None
    if not isinstance(session, dict):
        raise LiveRefusal("missing_required_parameter", "Missing required parameter: 'session'.", "session")
    if set(body) - {"session"}:
        name = sorted(set(body) - {"session"})[0]
        raise LiveRefusal("unknown_parameter", f"Unknown parameter: '{name}'.", name)
    if session.get("type") != "live":
        raise LiveRefusal("invalid_value", "Invalid value for 'session.type': expected 'live'.", "session.type")
    audio = session.get("audio")
    if isinstance(audio, dict) and "format" in audio:
        raise LiveRefusal("invalid_value", "audio.format is only accepted for primary WebSockets; SIP negotiates "
                          "the media format.", "session.audio.format")
    return start_config({name: value for name, value in session.items() if name != "type"})
