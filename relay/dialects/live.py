"""OpenAI's GPT-Live wire family (`/v1/live/sessions`; Azure's `/openai/v1/live/sessions`): the
dialect and its codec. The dialect says how a Live upstream is reached (`LIVE`: Bearer
`OPENAI_API_KEY`; `LIVE_AZURE`: Bearer key or Entra token) and what its clients send; the path
`/live/sessions` implies the family on any host, Azure's hosts the Azure variant. The codec reads a
frame into one of a closed set of typed events (`decode` a frame's text, `event_of` a decoded
frame) and writes one back (`encode`): msgspec Structs tagged by `type`, as in
`relay.dialects.openai_codec` (the measured choice, docs/benchmarks.md "Typed events"); a frame
outside the set, or not of its event's shape, is an `Unknown` keeping the frame. A `response.event`
envelope keeps its nested Responses event as the wire gave it (unknown nested types are tolerated);
`backend_event` types it, as `decision_of` types the Decision API event a `decision.event`
carries. Audio passes undecoded (`audio_peek`). The facts are `openai.types.live`'s (the tests
validate what `encode` writes against its models).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Union
from urllib.parse import urlsplit

import msgspec

from relay.dialects.base import AudioSlot, Dialect, Side, ToolFlow
from relay.dialects.jsontext import compact_json
from relay.dialects.peek import pass_through_test
from relay.dialects.responses_stream import (   # noqa: F401  (the nested events: read with the envelope)
    BACKEND_EVENTS,
    BackendArgumentsDelta,
    BackendArgumentsDone,
    BackendCompleted,
    BackendCreated,
    BackendError,
    BackendEvent,
    BackendFailed,
    BackendInProgress,
    BackendIncomplete,
    BackendItemAdded,
    BackendItemDone,
    BackendPartAdded,
    BackendPartDone,
    BackendQueued,
    BackendTextDelta,
    BackendTextDone,
    concrete,
)

LIVE_PATH = "/v1/live/sessions"
AZURE_LIVE_PATH = "/openai/v1/live/sessions"
PATH_MARK = "/live/sessions"
"""What every Live URL's path holds (the primary socket, `…/{id}/attach`, `…/{id}/fork`)."""
_AZURE_HOSTS = (".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com")


# ---- the events -------------------------------------------------------------------------------------
class Event(msgspec.Struct, tag_field="type", omit_defaults=True, kw_only=True):
    """One frame of the Live wire, typed by its `type`. `event_id` is every event's (a client's
    own id on a command, echoed as `client_event_id`; the server's on its events)."""

    event_id: Any = None


class Unknown(msgspec.Struct):
    """A frame outside the closed set (or not of its event's shape), kept as it came: the text of a
    frame, or the decoded object a recording held."""

    raw: Any


def wire_type(event: Event | BackendEvent) -> str:
    """The `type` an event is written with."""
    return type(event).__struct_config__.tag   # type: ignore[return-value]


class _Answer(Event):
    """A server event that answers a client command (`client_event_id`: the command's `event_id`)."""

    client_event_id: Any = None


# the session's life
class SessionStart(Event, tag="session.start"):
    """The first frame of a primary socket (or of a fork: the fork's overrides)."""

    session: Any = None


class SessionStarted(_Answer, tag="session.started"):
    session: Any = None


class SessionUpdate(Event, tag="session.update"):
    session: Any = None


class SessionUpdated(_Answer, tag="session.updated"):
    session: Any = None


class SessionClose(Event, tag="session.close"):
    pass


class SessionClosed(_Answer, tag="session.closed"):
    reason: Any = None
    session: Any = None
    usage: Any = None


class SessionPaused(_Answer, tag="session.paused"):
    """WebRTC: the idle timeout paused inference (the session lives on); `session.resumed`: speech
    woke it."""


class SessionResumed(_Answer, tag="session.resumed"):
    pass


class UsageUpdated(_Answer, tag="session.usage.updated"):
    """Voice seconds so far (cumulative) and how full the context window is."""

    usage: Any = None
    context_window: Any = None


class Error(_Answer, tag="error"):
    """An error (`error`: type, code, message, param, client_event_id); the session goes on."""

    error: Any = None


class Info(_Answer, tag="info"):
    code: Any = None
    message: Any = None


# audio and what was said (payloads last: the peek's fast path reads up to them)
class InputAudioAppend(Event, tag="session.input_audio.append"):
    """The caller's audio: a client's command on the primary socket; on a sideband, the server's
    reflection of it. Forwarded undecoded (`audio_peek`)."""

    audio: Any = None


class OutputAudioDelta(Event, tag="session.output_audio.delta"):
    """The model's audio: one continuous track, silence included; `start_ms`/`end_ms` only on a
    sideband's reflection. Forwarded undecoded (`audio_peek`)."""

    start_ms: Any = None
    end_ms: Any = None
    delta: Any = None


class InputAudioMute(Event, tag="session.input_audio.mute"):
    pass


class InputAudioUnmute(Event, tag="session.input_audio.unmute"):
    pass


class InputAudioMuted(_Answer, tag="session.input_audio.muted"):
    pass


class InputAudioUnmuted(_Answer, tag="session.input_audio.unmuted"):
    pass


class FixturePlay(Event, tag="session.output_audio.fixture.play"):
    """Play a recorded clip as the model's output (PCM16 24 kHz, at most 30 s)."""

    audio: Any = None


class FixturePlaying(_Answer, tag="session.output_audio.fixture.playing"):
    pass


class FixturePlayed(_Answer, tag="session.output_audio.fixture.played"):
    pass


class _TranscriptDelta(_Answer):
    """A piece of a transcript on the session's timeline (ms); no item id and no "done"."""

    start_ms: Any = None
    end_ms: Any = None
    delta: Any = None


class InputTranscriptDelta(_TranscriptDelta, tag="session.input_transcript.delta"):
    pass


class OutputTranscriptDelta(_TranscriptDelta, tag="session.output_transcript.delta"):
    pass


# appends: context for the voice model, placed on the audio timeline
class _Append(Event):
    """≤ 500 tokens of plain text. `delegation_id` is required and nullable on the wire: unset
    (`msgspec.UNSET`, not written) is told from null (written as `null`)."""

    delegation_id: Any = msgspec.UNSET
    content: Any = None


class InstructionsAppend(_Append, tag="session.instructions.append"):
    """Behaviour for the voice model (may interrupt its speech); `thinking`: silent context (a
    delegation's progress or facts); `commentary`: context it says aloud, paraphrased (a result)."""


class ThinkingAppend(_Append, tag="session.thinking.append"):
    pass


class CommentaryAppend(_Append, tag="session.commentary.append"):
    pass


class _Appended(_Answer):
    """An append reached the timeline (its estimated place, `start_ms` to `end_ms`)."""

    start_ms: Any = None
    end_ms: Any = None


class InstructionsAppended(_Appended, tag="session.instructions.appended"):
    pass


class ThinkingAppended(_Appended, tag="session.thinking.appended"):
    pass


class CommentaryAppended(_Appended, tag="session.commentary.appended"):
    pass


# delegations
class Delegation(msgspec.Struct, kw_only=True):
    """Metadata of one delegation (never its task): `target` is `client`, `responses` or
    `decisions`; `response_id` the backend response (Responses delegation; unset, not written,
    otherwise)."""

    id: str
    type: str = "delegation"
    target: Any = None
    response_id: Any = msgspec.UNSET


class DelegationCreated(_Answer, tag="session.delegation.created", kw_only=True):
    """The model handed work over at `offset_ms` of the session's timeline."""

    offset_ms: Any = None
    delegation: Delegation


class ResponseEnvelope(_Answer, tag="response.event"):
    """A Responses backend event, wrapped (`event`: the nested event as it came, a `BackendEvent`
    when the relay or the mock writes one; `backend_event` types it). `delegation_id`: the
    delegation it works for, null (or absent: `msgspec.UNSET`, falsy) when uncorrelated."""

    delegation_id: Any = msgspec.UNSET
    event: Any = None


class ResponseItemCreate(Event, tag="response.item.create"):
    """An input item for the backend (a `function_call_output`, a message); no ack."""

    item: Any = None


class ResponseCreate(Event, tag="response.create"):
    """Start or continue the backend's work: one per complete batch of results."""


# decisions delegation
class DecisionCreate(Event, tag="decision.create"):
    """Evaluate the configured questions now (`event_id` required, never reused)."""


class DecisionItemCreate(Event, tag="decision.item.create"):
    """A Decision input item (a message, a `function_call`, a `function_call_output`)."""

    item: Any = None


class DecisionItemCreated(_Answer, tag="decision.item.created"):
    item: Any = None


class DecisionItemDelete(Event, tag="decision.item.delete"):
    item_id: Any = None


class DecisionItemDeleted(_Answer, tag="decision.item.deleted"):
    item_id: Any = None


class DecisionEvent(Event, tag="decision.event"):
    """A Decision API event (`event`: `{"type": "decision.completed", "decision": …}`) for a
    delegation (`delegation_id`; null, or absent: `msgspec.UNSET`, for a trigger or a
    `decision.create`), or for a transcript trigger (`trigger_id`, `source_event_id`,
    `source_event_type`)."""

    delegation_id: Any = msgspec.UNSET
    event: Any = None
    trigger_id: Any = None
    source_event_id: Any = None
    source_event_type: Any = None


class DecisionCompleted(msgspec.Struct, tag_field="type", tag="decision.completed", kw_only=True):
    """The event a `decision.event` carries: the Decision API's evaluation of the configured
    questions (`decision`: `answers` in question order, each a predicate's probability, a choice,
    a score or a refusal; `model`; `usage`). It holds answers only: a Decision evaluation makes no
    function call (`function_call` items are inputs the client appends with `decision.item.create`)."""

    decision: dict[str, Any]


DECISION_EVENTS: Mapping[str, type[DecisionCompleted]] = {"decision.completed": DecisionCompleted}
"""Name -> the event a `decision.event` carries (the closed set `decision_of` reads)."""


# telephony, on a sideband
class DtmfSend(_Answer, tag="transport.dtmf.send"):
    """A keypress to send (a sideband's command); older servers' name for `transport.dtmf.sent`."""

    event: Any = None


class DtmfSent(_Answer, tag="transport.dtmf.sent"):
    event: Any = None


class DtmfReceived(Event, tag="transport.dtmf.received"):
    event: Any = None


class _CallNotice(Event):
    session_id: Any = None


class TransportRinging(_CallNotice, tag="transport.ringing"):
    pass


class TransportAnswered(_CallNotice, tag="transport.answered"):
    pass


class TransportFailed(_CallNotice, tag="transport.failed"):
    error: Any = None


# ---- the closed sets ----------------------------------------------------------------------------------
EVENTS: Mapping[str, type[Event]] = {cls.__struct_config__.tag: cls for cls in concrete(Event)}  # type: ignore[misc]
"""Name -> its event: the closed set of the wire's top level."""
COMMANDS = frozenset({SessionStart, SessionUpdate, InputAudioAppend, InputAudioMute, InputAudioUnmute, FixturePlay,
                      InstructionsAppend, ThinkingAppend, CommentaryAppend, DecisionCreate, DecisionItemCreate,
                      DecisionItemDelete, ResponseItemCreate, ResponseCreate, SessionClose, DtmfSend})
"""The client's events (`openai.types.live`'s client unions; `transport.dtmf.send` a sideband's)."""
APPENDS = (InstructionsAppend, ThinkingAppend, CommentaryAppend)
APPENDED: Mapping[type[Event], type[Event]] = {
    InstructionsAppend: InstructionsAppended, ThinkingAppend: ThinkingAppended, CommentaryAppend: CommentaryAppended}
"""Each append -> the event that acknowledges it on the timeline."""
APPEND_TOKEN_LIMIT = 500
"""The most an append's `content` may hold, in tokens (`append_tokens` counts them as the relay
and the mock agree to: the server's tokenizer is not public)."""
FUNCTION_CALL = "function_call"
FUNCTION_CALL_OUTPUT = "function_call_output"
DELEGATION_TARGETS = ("client", "responses", "decisions")
TRIGGER_EVENTS = (InputTranscriptDelta.__struct_config__.tag, OutputTranscriptDelta.__struct_config__.tag)
"""The events a Decisions trigger (`session.triggers[].event_type`) can fire on."""
CLOSE_REASONS = ("close_requested", "expired", "content", "remote_hangup", "connection_lost")

_DECODER = msgspec.json.Decoder(Union[tuple(EVENTS.values())])   # noqa: UP007
_ENCODER = msgspec.json.Encoder()


# ---- reading and writing ----------------------------------------------------------------------------
def decode(frame: str | bytes) -> Event | Unknown:
    """A frame's text into its event, or an `Unknown` holding the frame (never raises)."""
    try:
        return _DECODER.decode(frame)
    except msgspec.ValidationError:
        return Unknown(frame)
    except (msgspec.DecodeError, RecursionError, UnicodeEncodeError):
        # JSON msgspec refuses that `json` reads: a lone surrogate's escape (a server echoing a
        # tool's output that held one) or the surrogate itself in the text (a frame rebuilt from
        # a recording's event), NaN; the event is what `json` makes of it
        try:
            typed = event_of(json.loads(frame))
        except (ValueError, RecursionError):
            return Unknown(frame)
        return Unknown(frame) if isinstance(typed, Unknown) else typed


def _typed(data: Any, known: Mapping[str, type]) -> Any:
    kind = data.get("type") if isinstance(data, dict) else None
    cls = known.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return Unknown(data)
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError:
        return Unknown(data)


def event_of(data: Any) -> Event | Unknown:
    """A frame already decoded (a recording's) into its event, or an `Unknown` holding it. The
    `type` picks the struct."""
    return _typed(data, EVENTS)


def backend_event(envelope: ResponseEnvelope) -> BackendEvent | Unknown:
    """The Responses event a `response.event` envelope carries, typed; an `Unknown` holding it
    for a nested type outside `BACKEND_EVENTS` or a nested event that is not of its shape."""
    if isinstance(envelope.event, BackendEvent):
        return envelope.event
    return _typed(envelope.event, BACKEND_EVENTS)


def decision_of(event: DecisionEvent) -> DecisionCompleted | Unknown:
    """The Decision API event a `decision.event` carries, typed; an `Unknown` holding it for a
    nested type outside `DECISION_EVENTS` or a nested event not of its shape."""
    if isinstance(event.event, DecisionCompleted):
        return event.event
    return _typed(event.event, DECISION_EVENTS)


def encode(event: Event) -> str:
    """A command (or, for the mock, a server event) as a frame's text: `type` first, then the
    fields given (a nested `BackendEvent` written in place). A lone surrogate (a tool's output may
    hold one), which UTF-8 cannot carry, is written as its escape, as `compact_json` writes it."""
    try:
        return _ENCODER.encode(event).decode()
    except UnicodeEncodeError:
        return compact_json(msgspec.to_builtins(event))


def append_tokens(text: str) -> int:
    """An upper estimate of the tokens of an append's text: a token per word, or per four
    characters, whichever is more."""
    return max(len(text.split()), -(-len(text) // 4))


def to_builtins(event: Event | BackendEvent) -> dict[str, Any]:
    """An event as the decoded object a recording or a test compares (what `encode` writes)."""
    return msgspec.to_builtins(event)   # type: ignore[no-any-return]


# ---- audio passes undecoded -------------------------------------------------------------------------
UPSTREAM_PASSTHROUGH = frozenset({"session.output_audio.delta", "session.input_audio.append"})
"""The server's audio (the model's track; a sideband's reflection of the caller's)."""
CLIENT_PASSTHROUGH = frozenset({"session.input_audio.append"})
AUDIO_EVENTS: Mapping[str, tuple[str, Side]] = {
    "session.input_audio.append": ("audio", Side.INPUT),
    "session.output_audio.delta": ("delta", Side.OUTPUT),
    "session.output_audio.fixture.play": ("audio", Side.OUTPUT),
}
AUDIO_MARKERS: tuple[bytes, ...] = tuple(name.encode() for name in AUDIO_EVENTS)


def audio_peek(*, upstream: bool = True) -> Callable[[str | bytes], bool]:
    """Whether a frame is audio the relay forwards as it came (from the upstream, or from the
    client with `upstream=False`), told without decoding it (`peek.pass_through_test`)."""
    return pass_through_test(UPSTREAM_PASSTHROUGH if upstream else CLIENT_PASSTHROUGH)


def audio_slots(event: dict[str, Any]) -> list[AudioSlot]:
    """The base64 audio payload of a decoded Live frame, found from its type alone."""
    kind = event.get("type")
    where = AUDIO_EVENTS.get(kind) if isinstance(kind, str) else None
    return [AudioSlot(event, where[0], where[1])] if where is not None else []


# ---- the dialect -------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class LiveDialect(Dialect):
    """How a GPT-Live upstream is reached and what its clients send. Its clients connect to
    `/v1/live/sessions` (Azure's: `/openai/v1/live/sessions`) and start with `session.start`; a
    sideband attaches to a running session at `attach_path(session_id)`, never sending it."""

    flow: ClassVar[ToolFlow] = ToolFlow.DELEGATIONS
    wire: Literal["live"] = "live"
    key_env: tuple[str, ...] = ("OPENAI_API_KEY",)
    client_paths: frozenset[str] = frozenset({LIVE_PATH, AZURE_LIVE_PATH})
    client_path: str = LIVE_PATH
    client_auth_forms: str = "Authorization: Bearer, api-key, or the openai-insecure-api-key.<token> subprotocol"
    call_sideband: bool = True
    echoes_conversation: bool = False
    upstream_passthrough: frozenset[str] = UPSTREAM_PASSTHROUGH
    client_passthrough: frozenset[str] = CLIENT_PASSTHROUGH

    def url_match(self, host: str, path: str) -> int:
        """A Live path (`/live/sessions`) on one of this variant's own hosts: 4 (Azure's resources
        pick the Azure variant); on any other host: 3; any other path: 0 (Realtime's)."""
        if PATH_MARK not in path:
            return 0
        return 4 if self.serves_host(host) else 3

    def attach_path(self, session_id: str, url: str | None = None) -> str:
        """The sideband's path for a session, under the primary path of `url` (this dialect's
        default when None): `…/live/sessions/{session_id}/attach`."""
        path = urlsplit(url or self.default_url or LIVE_PATH).path.rstrip("/")
        base = path[: path.index(PATH_MARK) + len(PATH_MARK)] if PATH_MARK in path else LIVE_PATH
        return f"{base}/{session_id}/attach"

    def function_tool(self, name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
        """A relay tool as `session.delegation.responses.tools` takes it (a Responses function tool)."""
        return {"type": "function", "name": name, "description": description,
                "parameters": self.tool_parameters(parameters)}

    def function_call_output(self, call_id: str, output: str, *, event_id: str | None = None) -> ResponseItemCreate:
        """A call's result for the backend: one `response.item.create` with its output item."""
        return ResponseItemCreate(event_id=event_id, item={"type": FUNCTION_CALL_OUTPUT, "call_id": call_id,
                                                           "output": output})

    def client_error_event(
        self,
        event_id: str,
        code: str,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        param: str | None = None,
        client_event_id: Any = None,
    ) -> dict[str, Any]:
        """The Live `error` event (`client_event_id` at both levels, as the server writes it)."""
        error = {"type": error_type, "code": code, "message": message}
        if param is not None:
            error["param"] = param
        if client_event_id is not None:
            error["client_event_id"] = client_event_id
        return to_builtins(Error(event_id=event_id, client_event_id=client_event_id, error=error))


LIVE = LiveDialect(
    name="live",
    default_url=f"wss://api.openai.com{LIVE_PATH}",
    upstream_hosts=("api.openai.com",),
    upstream_path_marks=(PATH_MARK,),
)
LIVE_AZURE = LiveDialect(
    name="live-azure",
    key_env=("AZURE_OPENAI_API_KEY",),
    default_url=None,
    upstream_hosts=_AZURE_HOSTS,
    upstream_paths=(AZURE_LIVE_PATH,),
)


def live_variant(url: str) -> LiveDialect:
    """What `--dialect live` means for this upstream URL: the Azure variant on an Azure host."""
    host = (urlsplit(url).hostname or "").lower()
    return LIVE_AZURE if LIVE_AZURE.serves_host(host) else LIVE


WIRE_NAMES = frozenset({*EVENTS, *BACKEND_EVENTS, *DECISION_EVENTS, FUNCTION_CALL, FUNCTION_CALL_OUTPUT}) - {"error", "info"}
"""Every name of the Live wire a module outside the dialects should not spell, what
tests/test_wire_names.py counts (`error` and `info` are ordinary words too)."""
