"""The mock upstream's GPT-Live mode: one Live session as a sans-I/O state machine.
`MockUpstream(dialect="live")` serves it at `/v1/live/sessions` (and Azure's
`/openai/v1/live/sessions`), a sideband at `…/{session_id}/attach`, and sends what it returns.

What it plays, from the same `MockScript` as the other modes (relay/mock/script.py):

- `session.start` (first, once, primary socket only) is checked strictly (relay/mock/live_config.py:
  unknown fields refused) and answered with `session.started`; nothing is said before it. A
  sideband is sent `session.started` when it attaches, and may not start or send audio.
- The timeline advances with the input audio, and only with it: each `session.input_audio.append`
  moves it by the audio's duration, and the model's output audio covers the same span (one
  continuous track, silence included, no timing on the primary socket; on a sideband with
  `start_ms`/`end_ms`, beside the reflected input audio). What the model says (its transcript, on a
  200 ms grid), the appends' acknowledgements and `session.usage.updated` come as the timeline
  reaches them: appends sent while no audio flows stay deferred.
- `MockUpstream.user_turn(session, text)` plays the caller's turn: the input transcript, then the
  script's reply: its `say` is spoken; its `calls` make a delegation, in the session's mode:
  client (`session.delegation.created` with an id and no task; an acknowledged commentary append
  for it is the result the model speaks, as the script's `after_outputs` with `{output}`),
  responses (the nested `response.event` stream, with `output: []` snapshots and the calls in
  `response.output_item.done` only; the continuation runs after every output
  (`response.item.create`) and one `response.create`, a partial batch refused with an error), or
  decisions (a `decision.event` answering the configured questions: `LiveOptions.decision_answers`;
  `decision.create` and `decision.item.*` answered as the service does). A transcript delta fires
  the session's trigger for its type (`triggers`), in any mode: a `decision.event` naming it.
  A turn while the model speaks stops its speech and cancels nothing.
- Appends need `delegation_id` (null or a known client delegation), ≤ 500 tokens
  (`relay.dialects.live.append_tokens`). `session.close` (or `close(reason)` from a test) fails each
  pending append (`context_injection_incomplete`), sends `session.closed`, and closes the sockets.

Every event it sends is built as the codec's typed event (relay/dialects/live.py).
"""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Callable, Iterable, Sequence
from http import HTTPStatus
from urllib.parse import parse_qsl, urlsplit
from dataclasses import dataclass
from typing import Any

import msgspec

from relay.dialects import live as wire
from relay.mock.faults import Faults
from relay.mock.gemini import Hangup
from relay.mock.handshake import Refusal, Route, authenticate
from relay.mock.live_backend import Backend, LiveDelegation, LiveOptions
from relay.mock.live_config import LiveRefusal, start_config, updated_config
from relay.mock.quirks import Quirks
from relay.mock.requests import Emit
from relay.mock.script import MockScript, Reply
from relay.mock.session import MockConnection
from relay.mock.wire import new_id
from relay.session.policy import INTERNAL_ERROR, NORMAL_CLOSURE
from relay.tools.render import json_copy

LIVE = "live"
PATHS = (wire.LIVE_PATH, wire.AZURE_LIVE_PATH)
GRID_MS = 200
_CLIENT_TYPES = tuple(name for name, cls in wire.EVENTS.items() if cls in wire.COMMANDS and cls is not wire.DtmfSend)


@dataclass
class PendingAppend:
    """An append on its way to the timeline: acknowledged once the timeline reaches `due_ms`."""

    event: wire.InstructionsAppend | wire.ThinkingAppend | wire.CommentaryAppend
    due_ms: int


class LiveMockSession:
    """One GPT-Live session: its configuration, timeline, delegations and connections."""

    is_call = False
    call_id = None

    def __init__(self, script: MockScript, faults: Faults, query: dict[str, str] | None = None,
                 quirks: Quirks | None = None, options: LiveOptions | None = None,
                 wall: Callable[[], float] = time.time) -> None:
        self.id = new_id("live")
        self.wall = wall                       # the epoch seconds `expires_at` and `created_at` read
        self.script = script
        self.faults = faults
        self.quirks = quirks or Quirks()
        self.options = options or LiveOptions()
        self.query = dict(query or {})
        self.connections: list[MockConnection] = []
        self.sidebands: set[int] = set()
        self.config: dict[str, Any] | None = None
        self.expires_at = 0
        self.ended = False
        self.muted = False
        self.timeline_ms = 0
        self._spare_bytes = 0                  # input audio short of a whole ms, carried over
        self.pending: list[PendingAppend] = []
        self.acknowledged: list[wire.Event] = []
        self.delegations: dict[str, LiveDelegation] = {}
        self.items: list[dict[str, Any]] = []  # the conversation, shaped as the script reads it
        self.speech: list[str] = []            # transcript pieces the model has yet to say
        self._speech_at = 0
        self._usage_at = self.options.usage_every_ms
        self.picks: list[str] = []
        self.backend = Backend(self)

    def __repr__(self) -> str:
        return f"LiveMockSession(id={self.id!r}, timeline_ms={self.timeline_ms}, delegations={len(self.delegations)})"

    # -- views ---------------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.config["delegation"]["type"] if self.config else "client"

    @property
    def auth(self) -> str | None:
        return self.connections[0].auth if self.connections else None

    def resource(self) -> dict[str, Any]:
        """The session as `session.started` / `.updated` / `.closed` report it (SessionResource)."""
        assert self.config is not None
        return {"id": self.id, "expires_at": self.expires_at, "status": "active", **json_copy(self.config)}

    def _ack_delay_ms(self) -> int:
        delay = self.config["delegation"].get("acknowledgement_delay_ms") if self.config else None
        return delay if isinstance(delay, int) else self.options.ack_delay_ms

    # -- entry points (what MockUpstream calls) --------------------------------------------------
    def connected(self, connection: MockConnection) -> list[Any]:
        self.connections.append(connection)
        if not connection.path.endswith("/attach"):
            return []   # the service says nothing until session.start
        self.sidebands.add(connection.index)
        return [self._to(connection.index, wire.SessionStarted(event_id=new_id("event"), session=self.resource()))]

    def invalid_frame(self, detail: str, origin: int) -> list[Any]:
        return [self._error(origin, "invalid_json", f"The frame is not JSON: {detail}"[:200], None, None)]

    def internal_error(self, event: Any, origin: int) -> list[Any]:
        return [Hangup(INTERNAL_ERROR, "Internal error encountered.")]

    def handle(self, data: Any, origin: int) -> list[Any]:
        event = wire.event_of(data)
        client_event_id = data.get("event_id") if isinstance(data, dict) else None
        try:
            return self._dispatch(event, data, origin)
        except LiveRefusal as refusal:
            return [self._error(origin, refusal.code, refusal.message, refusal.param, client_event_id)]

    def user_turn(self, text: str, reply: Reply | None = None) -> list[Any]:
        """The caller says `text`: its transcript on the timeline, then the script's reply, or
        `reply` (words the script has no turn for; a turn while the model speaks stops the speech;
        delegations carry on)."""
        self.speech.clear()
        actions: list[Any] = []
        for index, piece in enumerate(self.pieces(text)):
            actions += self._transcribed(wire.InputTranscriptDelta(
                event_id=new_id("event"), delta=piece, start_ms=self.timeline_ms + index * GRID_MS,
                end_ms=self.timeline_ms + (index + 1) * GRID_MS))
        self.items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        return actions + self._respond(self.next_reply() if reply is None else reply)

    def close(self, reason: str = "close_requested", client_event_id: str | None = None) -> list[Any]:
        """The session ends (`reason`: one of `wire.CLOSE_REASONS`): each pending append fails,
        `session.closed` reports the final snapshot and usage, the sockets close."""
        if self.ended or self.config is None:
            return [Hangup(NORMAL_CLOSURE, "")]
        actions = [self._all(wire.Error(event_id=new_id("event"), client_event_id=pending.event.event_id, error={
            "type": "invalid_request_error", "code": "context_injection_incomplete",
            "message": "The session closed before the append reached the timeline.",
            **({"client_event_id": pending.event.event_id} if pending.event.event_id else {})}))
            for pending in self.pending]
        self.pending.clear()
        self.ended = True
        actions.append(self._all(wire.SessionClosed(event_id=new_id("event"), client_event_id=client_event_id,
                                                    reason=reason, session=self.resource(),
                                                    usage={"seconds": self.timeline_ms / 1000})))
        return [*actions, Hangup(NORMAL_CLOSURE, "")]

    # -- commands ------------------------------------------------------------------------------
    def _dispatch(self, event: wire.Event | wire.Unknown, data: Any, origin: int) -> list[Any]:
        if isinstance(event, wire.Unknown) or type(event) not in wire.COMMANDS or isinstance(event, wire.DtmfSend):
            kind = data.get("type") if isinstance(data, dict) else None
            if kind in _CLIENT_TYPES:
                raise LiveRefusal("invalid_value", f"The {kind} event is not of its shape.", None)
            raise LiveRefusal("invalid_value", f"Invalid value: {kind!r}. Supported values are: "
                              + ", ".join(f"'{name}'" for name in _CLIENT_TYPES) + ".", "type")
        sideband = origin in self.sidebands
        if isinstance(event, wire.SessionStart):
            if sideband:
                raise LiveRefusal("invalid_request_error", "session.start is not accepted on a sideband.", "type")
            return self._start(event, origin)
        if self.config is None:
            raise LiveRefusal("session_not_started", "The first event must be session.start.", "type")
        if isinstance(event, wire.InputAudioAppend):
            if sideband:
                raise LiveRefusal("invalid_request_error", "Input audio is accepted on the primary connection only.",
                                  "type")
            return self._audio(event, origin)
        if isinstance(event, wire.SessionClose):
            return self.close("close_requested", event.event_id)
        if isinstance(event, wire.SessionUpdate):
            self.config = updated_config(self.config, event.session)
            return [self._all(wire.SessionUpdated(event_id=new_id("event"), client_event_id=event.event_id,
                                                  session=self.resource()))]
        if isinstance(event, (wire.InputAudioMute, wire.InputAudioUnmute)):
            self.muted = isinstance(event, wire.InputAudioMute)
            answer = wire.InputAudioMuted if self.muted else wire.InputAudioUnmuted
            return [self._all(answer(event_id=new_id("event"), client_event_id=event.event_id))]
        if isinstance(event, wire.FixturePlay):
            return [self._all(done(event_id=new_id("event"), client_event_id=event.event_id))
                    for done in (wire.FixturePlaying, wire.FixturePlayed)]
        if isinstance(event, wire.APPENDS):
            return self._append(event)
        return self.backend.command(event)

    def _start(self, event: wire.SessionStart, origin: int) -> list[Any]:
        if self.config is not None:
            raise LiveRefusal("invalid_request_error", "session.start may be sent only once.", "type")
        self.config = start_config(event.session)
        self.expires_at = int(self.wall()) + self.options.expires_in_s
        return [self._all(wire.SessionStarted(event_id=new_id("event"), client_event_id=event.event_id,
                                              session=self.resource()))]

    def _append(self, event: wire.InstructionsAppend | wire.ThinkingAppend | wire.CommentaryAppend) -> list[Any]:
        if event.delegation_id is msgspec.UNSET:
            raise LiveRefusal("missing_required_parameter", "Missing required parameter: 'delegation_id'.",
                              "delegation_id")
        if not isinstance(event.content, str):
            raise LiveRefusal("invalid_type", "Invalid type for 'content': expected a string.", "content")
        if wire.append_tokens(event.content) > wire.APPEND_TOKEN_LIMIT:
            raise LiveRefusal("invalid_value", "Context append text must not exceed 500 tokens.", "content")
        if event.delegation_id is not None:
            if self.mode != "client":
                raise LiveRefusal("invalid_value", "delegation_id names client delegations only; this session "
                                  f"delegates to {self.mode}.", "delegation_id")
            if event.delegation_id not in self.delegations:
                raise LiveRefusal("invalid_value", f"Unknown delegation {event.delegation_id!r}.", "delegation_id")
        due = -(-(self.timeline_ms + self._ack_delay_ms()) // GRID_MS) * GRID_MS
        self.pending.append(PendingAppend(event, max(due, self.timeline_ms + GRID_MS)))
        return []

    # -- the timeline --------------------------------------------------------------------------
    def _audio(self, event: wire.InputAudioAppend, origin: int) -> list[Any]:
        size = _audio_size(event.audio) if isinstance(event.audio, str) else None
        if size is None:
            raise LiveRefusal("invalid_audio", "The audio is not base64.", "audio")
        audio_format = self.config["audio"]["format"] if self.config else {"type": "audio/pcm", "rate": 24000}
        pcm = audio_format["type"] == "audio/pcm"
        if pcm and size % 2:
            raise LiveRefusal("invalid_audio", "PCM16 audio must have an even number of bytes.", "audio")
        per_ms = audio_format["rate"] * (2 if pcm else 1) // 1000
        total = self._spare_bytes + size
        span, self._spare_bytes = divmod(total, per_ms)
        return self.advance(span, event.audio)

    def advance(self, span_ms: int, reflected: str | None = None) -> list[Any]:
        """The timeline moves by `span_ms`: the output track over that span, what the model says in
        it, the appends it reaches, the usage it crosses."""
        start, end = self.timeline_ms, self.timeline_ms + span_ms
        if span_ms <= 0:
            return []
        self.timeline_ms = end
        speaking = bool(self.speech)
        track = _track(speaking, span_ms)
        actions: list[Any] = []
        for connection in self.connections:
            if connection.closed:
                continue
            if connection.index in self.sidebands:
                if reflected is not None:
                    actions.append(self._to(connection.index, wire.InputAudioAppend(audio=reflected)))
                actions.append(self._to(connection.index, wire.OutputAudioDelta(start_ms=start, end_ms=end,
                                                                                delta=track)))
            else:
                actions.append(self._to(connection.index, wire.OutputAudioDelta(delta=track)))
        actions += self._say_until(end)
        actions += self._acknowledge_until(end)
        while self._usage_at <= end:
            actions.append(self._all(wire.UsageUpdated(event_id=new_id("event"), usage={"seconds": self._usage_at // 1000},
                                                       context_window={"usage_ratio": 0.001 * len(self.items)})))
            self._usage_at += self.options.usage_every_ms
        return actions

    def _say_until(self, end: int) -> list[Any]:
        actions = []
        while self.speech and self._speech_at + GRID_MS <= end:
            piece = self.speech.pop(0)
            actions += self._transcribed(wire.OutputTranscriptDelta(event_id=new_id("event"), delta=piece,
                                                                    start_ms=self._speech_at,
                                                                    end_ms=self._speech_at + GRID_MS))
            self._speech_at += GRID_MS
        return actions

    def _acknowledge_until(self, end: int) -> list[Any]:
        reached = [pending for pending in self.pending if pending.due_ms <= end]
        self.pending = [pending for pending in self.pending if pending.due_ms > end]
        actions: list[Any] = []
        for pending in reached:
            appended = wire.APPENDED[type(pending.event)](event_id=new_id("event"),
                                                          client_event_id=pending.event.event_id,
                                                          start_ms=pending.due_ms - GRID_MS, end_ms=pending.due_ms)
            self.acknowledged.append(pending.event)
            actions.append(self._all(appended))
            actions += self._placed(pending.event)
        return actions

    def _placed(self, event: wire.InstructionsAppend | wire.ThinkingAppend | wire.CommentaryAppend) -> list[Any]:
        """What an append does once on the timeline: a commentary for a delegation is its result,
        spoken as the script's reply to it; one for no delegation (general, speakable context) is
        said as it is; `Say exactly: …` instructions are said."""
        if isinstance(event, wire.InstructionsAppend):
            said = self.script.pick([], event.content, {}).reply
            if said.say is not None and said.say != self.script.default.say:
                self._queue_speech(said.say)
            return []
        if not isinstance(event, wire.CommentaryAppend):
            return []
        if event.delegation_id is None:   # speakable context of no delegation: the model says it
            self.speak(event.content)
            return []
        delegation = self.delegations[event.delegation_id]
        delegation.results.append(event.content)
        self.items.append({"type": wire.FUNCTION_CALL_OUTPUT, "call_id": delegation.id, "output": event.content})
        return self._respond(self.next_reply())

    # -- the model -----------------------------------------------------------------------------
    def next_reply(self) -> Reply:
        """The script's reply to the conversation so far (a delegation's calls named for `by_name`)."""
        names = {d.id: d.names[0] for d in self.delegations.values() if d.names}
        names.update(self.backend.call_names())
        reply, source = self.script.pick(self.items, None, names, self.picks.count("turn"))
        self.picks.append(source)
        return reply

    def _respond(self, reply: Reply) -> list[Any]:
        """The model says the reply's words (on the timeline) and delegates its calls."""
        if reply.say:
            self.speak(reply.say)
        if not reply.calls:
            return []
        delegation = LiveDelegation(new_id("item"), self.mode, self.timeline_ms, tuple(c.name for c in reply.calls))
        if self.mode == "responses":
            delegation.response_id = new_id("resp")
        self.delegations[delegation.id] = delegation
        self.items.append({"type": wire.FUNCTION_CALL, "call_id": delegation.id, "name": delegation.names[0],
                           "arguments": reply.calls[0].arguments_text()})
        created = wire.DelegationCreated(event_id=new_id("event"), offset_ms=delegation.offset_ms,
                                         delegation=wire.Delegation(id=delegation.id, target=delegation.target,
                                                                    response_id=delegation.response_id or msgspec.UNSET))
        return [self._all(created), *self.backend.delegated(delegation, reply.calls)]

    def speak(self, text: str) -> None:
        """The voice model will say `text` as the timeline advances (a backend's continuation)."""
        self.items.append({"type": "message", "role": "assistant", "content": [{"type": "text", "text": text}]})
        self._queue_speech(text)

    def _queue_speech(self, text: str) -> None:
        if not self.speech:   # silent until now: the words start where the timeline is
            self._speech_at = max(self._speech_at, self.timeline_ms)
        self.speech += self.pieces(text)

    def pieces(self, text: str) -> list[str]:
        """`text` as the transcript deltas it is said in (the script's `text_chunk_chars`)."""
        size = self.script.options.text_chunk_chars
        return [text[start:start + size] for start in range(0, len(text), size)]

    # -- sending -------------------------------------------------------------------------------
    def _transcribed(self, delta: wire.InputTranscriptDelta | wire.OutputTranscriptDelta) -> list[Any]:
        """A transcript delta, then the decisions its trigger fires (`Backend.transcribed`)."""
        return [self._all(delta), *self.backend.transcribed(delta)]

    def _all(self, event: wire.Event) -> Emit:
        return Emit(wire.to_builtins(event))

    def _to(self, index: int, event: wire.Event) -> Emit:
        return Emit(wire.to_builtins(event), index)

    def _error(self, origin: int, code: str, message: str, param: str | None, client_event_id: Any) -> Emit:
        error: dict[str, Any] = {"type": "invalid_request_error", "code": code, "message": message}
        if param is not None:
            error["param"] = param
        if isinstance(client_event_id, str):
            error["client_event_id"] = client_event_id
        return self._to(origin, wire.Error(event_id=new_id("event"), error=error,
                                           client_event_id=client_event_id if isinstance(client_event_id, str) else None))


@functools.lru_cache(maxsize=8)
def _audio_size(audio: str) -> int | None:
    """The bytes of an append's base64 audio (None: it is not base64). Kept for the last few
    payloads: a caller's silence is the same text append after append (a scripted session's,
    100 ms at a time), decoded once, not at every step of the timeline."""
    try:
        return len(base64.b64decode(audio, validate=True))
    except ValueError:
        return None


@functools.lru_cache(maxsize=8)
def _track(speaking: bool, span_ms: int) -> str:
    """The output track over `span_ms` (PCM16 at 24 kHz), as base64: a constant level while the
    model speaks, silence otherwise; the same few spans come again and again."""
    return base64.b64encode(bytes([0x10 if speaking else 0]) * (span_ms * 48)).decode("ascii")


def live_route(api_key: str | None, target: str, headers: dict[str, str], offered: Sequence[str],
               sessions: Iterable[object]) -> Route | Refusal:
    """Where a Live handshake goes: a new session at the primary paths (no `model` in the query:
    it goes in `session.start`), an existing one at `…/{session_id}/attach`; the key as a Bearer
    token, `api-key`, or the token subprotocol."""
    parts = urlsplit(target)
    path = parts.path.rstrip("/")
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    session = None
    if path not in PATHS:
        base, _, rest = path.rpartition("/live/sessions/")
        session_id, _, verb = rest.partition("/")
        if f"{base}/live/sessions" not in PATHS or verb != "attach":
            return Refusal(HTTPStatus.NOT_FOUND, f"No Live endpoint at {path or '/'}.\n")
        session = next((s for s in sessions if isinstance(s, LiveMockSession) and s.id == session_id), None)
        if session is None or session.ended or session.config is None:
            return Refusal(HTTPStatus.NOT_FOUND, f"No active Live session with id '{session_id}'.\n")
    if "model" in query:
        return Refusal(HTTPStatus.BAD_REQUEST, "The model goes in session.start, not in the query.\n")
    allowed, auth = authenticate(LIVE, api_key, headers, query, offered)
    if not allowed:
        return Refusal(HTTPStatus.UNAUTHORIZED, "Incorrect or missing API key.\n")
    return Route(path, query, headers, auth, session, False)   # type: ignore[arg-type]
